//! Waiting for probe runs in flight: an RCU grace period started from user space.
//!
//! Tracepoint BPF programs run inside `rcu_read_lock()` (`trace_call_bpf` in
//! kernel/trace/bpf_trace.c), so once a full RCU grace period has elapsed
//! after user space stored a new window generation, no probe run that read
//! the old generation is still running. Two ways to wait for one:
//!
//! 1. `membarrier(MEMBARRIER_CMD_GLOBAL)`, which is `synchronize_rcu()`
//!    (kernel/sched/membarrier.c). Refused with EINVAL on `nohz_full`
//!    kernels and ENOSYS without CONFIG_MEMBARRIER.
//! 2. Replacing the inner map of a one-slot `BPF_MAP_TYPE_ARRAY_OF_MAPS`
//!    from user space: `bpf(BPF_MAP_UPDATE_ELEM)` on a map-in-map returns
//!    only after `synchronize_rcu()` (`maybe_wait_bpf_programs` in
//!    kernel/bpf/syscall.c, since commit 1ae80cf31938 in 2018: "wait for any running
//!    non-sleepable BPF programs to complete so that userspace, when we
//!    return to it, knows that all non-sleepable programs that could be
//!    running use the new map value"). It works on every kernel eBQL runs on.
//!
//! A sleep is not used: no sleep shorter than the RCU stall timeout (21 s by
//! default) is guaranteed to cover a preempted reader.

use crate::map::{Map, MapType};
use crate::{Result, RuntimeError};
use std::sync::OnceLock;

/// Environment variable that forces a method: `membarrier`, or `map-in-map`
/// (alias `fallback`). Unset: membarrier when the kernel offers
/// MEMBARRIER_CMD_GLOBAL, else map-in-map.
pub const FORCE_GRACE_PERIOD_ENV: &str = "EBQL_FORCE_GRACE_PERIOD";

/// How [`wait_for_probes`] waits for an RCU grace period.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GracePeriodMethod {
    /// `membarrier(MEMBARRIER_CMD_GLOBAL)` (= `synchronize_rcu()`).
    Membarrier,
    /// Update of a one-slot BPF array-of-maps (the kernel runs
    /// `synchronize_rcu()` before the syscall returns).
    MapInMap,
}

impl GracePeriodMethod {
    /// Short name, as accepted by [`FORCE_GRACE_PERIOD_ENV`]: `membarrier` or `map-in-map`.
    pub fn name(self) -> &'static str {
        match self {
            GracePeriodMethod::Membarrier => "membarrier",
            GracePeriodMethod::MapInMap => "map-in-map",
        }
    }
}

impl std::fmt::Display for GracePeriodMethod {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            GracePeriodMethod::Membarrier => "membarrier(MEMBARRIER_CMD_GLOBAL)",
            GracePeriodMethod::MapInMap => "BPF array-of-maps update (synchronize_rcu in bpf())",
        })
    }
}

/// A way to wait for an RCU grace period, with what it needs (the
/// fallback's two maps, owned here).
pub struct GracePeriod {
    waiter: Waiter,
}

enum Waiter {
    Membarrier,
    /// The outer map and the map its slot 0 is set to on every wait.
    MapInMap {
        outer: Map,
        inner: Map,
    },
}

const MEMBARRIER_CMD_QUERY: libc::c_int = 0;
const MEMBARRIER_CMD_GLOBAL: libc::c_int = 1;

/// Does this kernel offer MEMBARRIER_CMD_GLOBAL? (MEMBARRIER_CMD_QUERY leaves
/// it out of the mask on nohz_full kernels.)
pub fn membarrier_global_supported() -> bool {
    // SAFETY: membarrier takes no pointers.
    let mask = unsafe { libc::syscall(libc::SYS_membarrier, MEMBARRIER_CMD_QUERY, 0, 0) };
    mask >= 0 && mask & MEMBARRIER_CMD_GLOBAL as libc::c_long != 0
}

impl GracePeriod {
    /// Prepares `method` (for map-in-map: creates a one-entry array and a
    /// one-slot array-of-maps, `ebql_grace_in` and `ebql_grace`).
    pub fn new(method: GracePeriodMethod) -> Result<GracePeriod> {
        let waiter = match method {
            GracePeriodMethod::Membarrier => Waiter::Membarrier,
            GracePeriodMethod::MapInMap => {
                let inner = Map::create("ebql_grace_in", MapType::Array, 4, 4, 1)?;
                let outer = Map::create(
                    "ebql_grace",
                    MapType::ArrayOfMaps {
                        inner_map_fd: inner.fd(),
                    },
                    4,
                    4,
                    1,
                )?;
                Waiter::MapInMap { outer, inner }
            }
        };
        Ok(GracePeriod { waiter })
    }

    /// The method this waits with.
    pub fn method(&self) -> GracePeriodMethod {
        match self.waiter {
            Waiter::Membarrier => GracePeriodMethod::Membarrier,
            Waiter::MapInMap { .. } => GracePeriodMethod::MapInMap,
        }
    }

    /// Returns once every BPF program run that started before the call has
    /// finished. Takes milliseconds; safe to call from several threads.
    pub fn wait(&self) -> Result<()> {
        match &self.waiter {
            Waiter::Membarrier => {
                // SAFETY: membarrier takes no pointers.
                let r = unsafe { libc::syscall(libc::SYS_membarrier, MEMBARRIER_CMD_GLOBAL, 0, 0) };
                if r < 0 {
                    return Err(RuntimeError::last_os("membarrier(MEMBARRIER_CMD_GLOBAL)"));
                }
                Ok(())
            }
            // Same inner map every time: the update still replaces the slot
            // and so waits (the kernel only skips the wait on failure).
            Waiter::MapInMap { outer, inner } => {
                outer.update(&0u32.to_ne_bytes(), &inner.fd().to_ne_bytes())
            }
        }
    }
}

/// The method for this process: [`FORCE_GRACE_PERIOD_ENV`] if set, else
/// membarrier where the kernel offers it, else map-in-map.
fn choose() -> std::result::Result<GracePeriod, String> {
    let method = match std::env::var(FORCE_GRACE_PERIOD_ENV).ok().as_deref() {
        Some("membarrier") => GracePeriodMethod::Membarrier,
        Some("map-in-map" | "fallback") => GracePeriodMethod::MapInMap,
        Some(other) => return Err(format!("{FORCE_GRACE_PERIOD_ENV}={other}: expected `membarrier` or `map-in-map` (alias `fallback`)")),
        None if membarrier_global_supported() => GracePeriodMethod::Membarrier,
        None => GracePeriodMethod::MapInMap,
    };
    GracePeriod::new(method).map_err(|e| format!("preparing the grace-period wait ({method}): {e}"))
}

fn process_grace_period() -> Result<&'static GracePeriod> {
    static CHOSEN: OnceLock<std::result::Result<GracePeriod, String>> = OnceLock::new();
    CHOSEN
        .get_or_init(choose)
        .as_ref()
        .map_err(|e| RuntimeError::Unsupported(e.clone()))
}

/// The method this process uses (chosen at the first call, see
/// [`FORCE_GRACE_PERIOD_ENV`]). Errors: a bad value of the variable, or the
/// fallback's maps could not be created.
pub fn grace_period_method() -> Result<GracePeriodMethod> {
    Ok(process_grace_period()?.method())
}

/// Waits until every BPF program run that started before the call has
/// finished, with this process's method (see [`grace_period_method`]). Used
/// at window flips so that a closed window's generation receives no more
/// updates before it is drained, and after detaching.
pub fn wait_for_probes() -> Result<()> {
    process_grace_period()?.wait()
}

/// Same as [`wait_for_probes`] (its former name, from when membarrier was the only method).
pub fn membarrier_global() -> Result<()> {
    wait_for_probes()
}
