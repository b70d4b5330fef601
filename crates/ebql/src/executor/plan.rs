//! What the executor gives the compiler's physical pass
//! ([`ebql_compiler::physical::compile_planned`]): the catalog as this
//! kernel sees it ([`KernelCatalog`]) and the machine's answers to its
//! questions ([`MachineSampler`]: task storage, the calibrated cost model,
//! system-call counts, a short run of the query itself).

use super::options::ExecutorOptions;
use crate::error::{Error, Result};
use ebql_compiler::choose::{HookChoice, SyscallRates};
use ebql_compiler::cost::{CostModel, Rates};
use ebql_compiler::physical::{compile_planned, RateSampler};
use ebql_compiler::CompiledQuery;
use std::time::Duration;

/// Whether the kernel offers task-local storage for pairings (probed once per
/// process; assumed when the probe itself is not permitted).
fn task_storage_supported() -> bool {
    static SUPPORTED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *SUPPORTED.get_or_init(|| ebql_runtime::task_storage_supported().unwrap_or(true))
}

/// The catalog as the compiler sees it on this machine: an event whose kind
/// needs a kernel feature this kernel lacks is refused up front, from the
/// runtime's feature probes, with the alternative to use.
/// `explain` (`features` false) compiles such events anyway: nothing is loaded.
pub(super) struct KernelCatalog<'a>(pub(super) &'a ebql_catalog::Catalog, pub(super) bool);

impl ebql_compiler::planner::EventSource for KernelCatalog<'_> {
    fn event(
        &self,
        name: &ebql_catalog::EventName,
    ) -> std::result::Result<ebql_catalog::EventSchema, ebql_catalog::CatalogError> {
        if let Some((_, why)) = ebql_runtime::features::missing(name.kind).filter(|_| self.1) {
            return Err(ebql_catalog::CatalogError::Unavailable {
                kind: name.kind.prefix().to_string(),
                why,
                hint: name.kind.alternative().to_string(),
            });
        }
        self.0.event(name)
    }
}

/// This machine, as the physical pass asks about it. Each sample is off
/// when its duration is `None`; then, with `options.record_rates`, the
/// rates an earlier run of `sql` recorded answer instead.
pub(super) struct MachineSampler<'a> {
    /// The query's text (recorded rates are keyed by it).
    pub(super) sql: &'a str,
    /// The catalog the syscall counter attaches through.
    pub(super) catalog: &'a dyn ebql_compiler::EventSource,
    /// How the query's sample runs (bpf_stats off, no sampling of its own).
    pub(super) options: &'a ExecutorOptions,
    /// How long the machine's system calls are counted for the hook rule.
    pub(super) syscalls: Option<Duration>,
    /// How long the query runs to sample its rates for the placement rule.
    pub(super) query: Option<Duration>,
}

impl RateSampler for MachineSampler<'_> {
    fn task_storage(&self) -> bool {
        task_storage_supported()
    }

    fn task_comm_offset(&self) -> Option<u16> {
        // From BTF alone (no bpf() call): the physical pass asks
        // `task_storage` before keeping a plan that uses it.
        ebql_catalog::task_comm_offset().and_then(|off| u16::try_from(off).ok())
    }

    fn faulting_reads(&self) -> bool {
        ebql_runtime::faulting_reads().is_ok()
    }

    fn cost_model(&self) -> CostModel {
        crate::cost::load().model
    }

    fn cpus(&self) -> usize {
        ebql_runtime::num_possible_cpus().unwrap_or(1)
    }

    fn syscall_rates(&self, nrs: &[u32]) -> Option<std::result::Result<SyscallRates, String>> {
        let Some(d) = self.syscalls else {
            return self.recorded()?.syscalls.map(Ok);
        };
        Some(crate::sampler::sample_syscall_rates(self.catalog, nrs, d).map_err(|e| e.render()))
    }

    fn query_rates(&self, q: &CompiledQuery) -> Option<std::result::Result<Rates, String>> {
        let Some(d) = self.query else {
            return self.recorded().map(|r| Ok(r.rates));
        };
        let sql = &q.planned.query;
        Some(crate::cost::rates::sample(sql, q, self.options, d).map_err(|e| e.render()))
    }
}

impl MachineSampler<'_> {
    /// The rates an earlier run of this query recorded, when asked for and fresh.
    fn recorded(&self) -> Option<crate::cost::recorded::Recorded> {
        self.options.record_rates?;
        crate::cost::recorded::load(self.sql, crate::cost::recorded::MAX_AGE)
    }
}

/// Compiles `sql` against `catalog` with the physical pass, sampling as
/// `options.sample_rates` says. `features` false (`explain`): events of
/// kinds this kernel lacks compile too, and the query is not run to weigh
/// its aggregate's place (`explain --rates` does that).
///
/// With `options.partial`, the query is compiled with its aggregate in the
/// kernel and rewritten to write its states ([`ebql_compiler::partial`]).
///
/// Errors: the query's own ([`Error::Query`]), or the catalog's.
pub(super) fn compile_with(
    options: &ExecutorOptions,
    catalog: &ebql_catalog::Catalog,
    sql: &str,
    features: bool,
) -> Result<CompiledQuery> {
    Ok(compile_partial(options, catalog, sql, features)?.0)
}

/// [`compile_with`], and the layout of its partial rows when `options.partial` is set.
pub(super) fn compile_partial(
    options: &ExecutorOptions,
    catalog: &ebql_catalog::Catalog,
    sql: &str,
    features: bool,
) -> Result<(CompiledQuery, Option<ebql_compiler::partial::PartialLayout>)> {
    let Some(partial) = &options.partial else {
        return Ok((compile_values(options, catalog, sql, features)?, None));
    };
    let mut options = options.clone();
    options.codegen.choices.aggregate = ebql_compiler::choose::AggregateChoice::Kernel;
    let mut compiled = compile_values(&options, catalog, sql, features)?;
    let layout = ebql_compiler::partial::apply(&mut compiled, &partial.identity(sql))
        .map_err(|e| Error::compile(sql, e))?;
    Ok((compiled, Some(layout)))
}

/// [`compile_with`] of the query's values (no `--partial` rewrite).
fn compile_values(
    options: &ExecutorOptions,
    catalog: &ebql_catalog::Catalog,
    sql: &str,
    features: bool,
) -> Result<CompiledQuery> {
    let catalog = KernelCatalog(catalog, features);
    let sampler = MachineSampler {
        sql,
        catalog: &catalog,
        options,
        syscalls: options.sample_rates,
        query: options
            .sample_rates
            .filter(|_| features && !options.attach_only),
    };
    let compile = |codegen: &ebql_compiler::CodegenOptions| {
        compile_planned(sql, &catalog, codegen, &sampler).map_err(|e| Error::compile(sql, e))
    };
    let Some(hooks) = &options.shared_hooks else {
        return compile(&options.codegen);
    };
    let chosen = compile_for_sharing(&options.codegen, &compile)?;
    // A query on syscall tracepoints whose hook the rule chose goes where
    // the process's other queries on its events already are, when the rule
    // would put it on a hook of its own: there it costs its own code, on a
    // hook of its own also that hook's dispatch (the raw hook's: on every
    // system call of the machine).
    let auto = options.codegen.choices.hook == HookChoice::Auto;
    if !auto
        || chosen.physical.hook.is_none()
        || hooks.shares().is_empty()
        || joins_existing(hooks, &chosen)
    {
        return Ok(chosen);
    }
    // Compiled once more, for the hook the rule did not choose.
    let on_tracefs = chosen.code.main().event.kind == ebql_catalog::EventKind::Tracepoint;
    let mut codegen = options.codegen;
    codegen.choices.hook = if on_tracefs {
        HookChoice::Raw
    } else {
        HookChoice::Tracefs
    };
    match compile_for_sharing(&codegen, &compile) {
        Ok(other) if joins_existing(hooks, &other) => Ok(other),
        _ => Ok(chosen),
    }
}

/// Compiles with `codegen` for a shared hook: programs that may join one
/// take its per-event cache, which sits in the caller's frame; one whose
/// own frame leaves no room for it within the kernel's 512 bytes of stack
/// is compiled without it.
fn compile_for_sharing(
    codegen: &ebql_compiler::CodegenOptions,
    compile: &dyn Fn(&ebql_compiler::CodegenOptions) -> Result<CompiledQuery>,
) -> Result<CompiledQuery> {
    let shared = compile(&ebql_compiler::CodegenOptions {
        event_cache: true,
        ..*codegen
    })?;
    let room = 512 - CALLER_FRAME;
    match shared
        .code
        .programs
        .iter()
        .any(|p| p.event_cache && p.stack_bytes > room)
    {
        true => compile(codegen),
        false => Ok(shared),
    }
}

/// Every program of `c` that can share its hook would join one of `hooks`
/// that has members now.
fn joins_existing(hooks: &ebql_runtime::SharedHooks, c: &CompiledQuery) -> bool {
    c.code
        .programs
        .iter()
        .filter(|p| p.event.kind.shares_hook())
        .all(|p| hooks.has_hook(p.event.kind, &p.attach))
}

/// The stack a shared hook's caller frame takes (its per-event cache,
/// [`ebql_bpf::event_cache::BYTES`], as the verifier rounds frames: to 32 bytes).
const CALLER_FRAME: usize = (ebql_bpf::event_cache::BYTES as usize).div_ceil(32) * 32;
