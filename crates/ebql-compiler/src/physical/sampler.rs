//! [`RateSampler`]: what the physical pass asks of the machine it plans
//! for. The compiler is pure, so the executor implements it (counting
//! system calls, running the query for a moment, probing the kernel);
//! [`NoSampler`] answers nothing (`explain` of a query alone, unit tests).

use crate::choose::SyscallRates;
use crate::cost::{CostModel, Rates};
use crate::pipeline::CompiledQuery;

/// The machine's side of physical planning. Every method may decline
/// (`None`: not sampled); a sample that was tried and failed is `Some(Err)`
/// with a sentence saying why, which `explain` shows.
pub trait RateSampler {
    /// Whether the kernel has task-local storage for a pairing's starts and
    /// `bpf_get_current_task_btf` (Linux 5.11; asked only when a pairing is
    /// keyed by the thread alone or a program reads `comm` directly).
    fn task_storage(&self) -> bool {
        true
    }

    /// Where `comm` lies in the kernel's `struct task_struct` (kernel BTF),
    /// for BTF-typed programs to read it directly
    /// ([`crate::codegen::CodegenOptions::task_comm`]); a plan that does is
    /// kept only if [`RateSampler::task_storage`] says the kernel has
    /// `bpf_get_current_task_btf` too. `None` (the default): comparisons
    /// call `bpf_get_current_comm`.
    fn task_comm_offset(&self) -> Option<u16> {
        None
    }

    /// Whether uprobe and USDT programs may be loaded sleepable to fault
    /// user strings in (asked only when a program would be:
    /// [`crate::codegen::CodegenOptions::faulting_user_strings`]).
    fn faulting_reads(&self) -> bool {
        true
    }

    /// The per-operation costs of this machine (its calibration, or the
    /// built-in defaults), for the placement rule.
    fn cost_model(&self) -> CostModel {
        CostModel::built_in()
    }

    /// Possible CPUs of the machine (per-CPU values are merged over all of them).
    fn cpus(&self) -> usize {
        1
    }

    /// System calls per second: all of the machine's, and the mean of the
    /// syscall numbers `nrs` (one per syscall tracepoint of the query).
    fn syscall_rates(&self, _nrs: &[u32]) -> Option<Result<SyscallRates, String>> {
        None
    }

    /// The rates of `q`'s events, its matched share and its groups per
    /// window, from running `q` for a moment (its aggregate in the kernel).
    /// The sample also counts the machine's system calls when `q` traces one.
    fn query_rates(&self, _q: &CompiledQuery) -> Option<Result<Rates, String>> {
        None
    }
}

/// Samples nothing: every choice that wants rates takes its rule's default
/// (the tracefs tracepoint, the kernel aggregate); task storage is assumed.
pub struct NoSampler;

impl RateSampler for NoSampler {}
