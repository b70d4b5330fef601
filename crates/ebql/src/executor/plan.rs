//! Planning feedback the executor supplies before a query runs: the catalog
//! as this kernel sees it, rate samples for the hook rule, the task-storage
//! fallback and the aggregate's placement (kernel or user space), each of
//! which may compile the query again. Issue 18 moves these decisions into
//! one physical-planning pass; until then they live here, apart from
//! loading and running.

use super::options::ExecutorOptions;
use crate::error::{Error, Result};
use ebql_compiler::choose::AggregateChoice;
use ebql_compiler::codegen::{MapKind, MAP_PAIR};
use ebql_compiler::{compile_query, CodegenOptions, CompiledQuery};
use std::time::Duration;

/// Whether the kernel offers task-local storage for pairings (probed once per
/// process; assumed when the probe itself is not permitted).
fn task_storage_supported() -> bool {
    static SUPPORTED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *SUPPORTED.get_or_init(|| ebql_runtime::task_storage_supported().unwrap_or(true))
}

/// When the automatic hook choice of a compiled query's syscall tracepoints
/// wants rates ([`ebql_compiler::syscall_hook::HookReport::wants_rates`]) and
/// sampling is on: samples them into `opts` and returns true (compile again).
/// A failed sample (no privilege, no raw hook) leaves the rule without rates.
pub(super) fn with_sampled_rates(
    catalog: &dyn ebql_compiler::planner::EventSource,
    report: Option<&ebql_compiler::syscall_hook::HookReport>,
    sample: Option<Duration>,
    opts: &mut CodegenOptions,
) -> bool {
    let (Some(report), Some(duration)) = (report, sample) else {
        return false;
    };
    if !report.wants_rates(&opts.choices) {
        return false;
    }
    match crate::sampler::sample_syscall_rates(catalog, &report.traced_nrs(), duration) {
        Ok(rates) => {
            opts.choices.rates = Some(rates);
            true
        }
        Err(_) => false,
    }
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

/// Compiles `sql` against `catalog` as a query run does: samples rates
/// when the hook rule or the aggregate's placement wants them (compiling
/// again with them), falls back from task storage when this kernel lacks
/// it, and weighs the aggregate's placement. `features` false (`explain`):
/// events of kinds this kernel lacks compile too.
///
/// Errors: the query's own ([`Error::Query`]), or the catalog's.
pub(super) fn compile_with(
    options: &ExecutorOptions,
    catalog: &ebql_catalog::Catalog,
    sql: &str,
    features: bool,
) -> Result<CompiledQuery> {
    let mut opts = options.codegen;
    let sample = options.sample_rates;
    let exec = options.clone();
    let catalog = KernelCatalog(catalog, features);
    let first = compile_query(sql, &catalog, &opts);
    // A query whose aggregate's place is weighed runs once for the
    // sampling time; that sample also counts the machine's system calls,
    // so it serves the hook rule too (one sample, not two).
    let mut sampled = None;
    let mut compiled = match (first, sample) {
        (Ok(c), Some(d)) => {
            if features && !exec.attach_only && weighs_placement(&c, &opts) {
                sampled = Some(crate::cost::rates::sample(
                    sql,
                    &c,
                    &ExecutorOptions {
                        codegen: opts,
                        ..exec.clone()
                    },
                    d,
                ));
            }
            let hook_rates = match (&sampled, &c.hook) {
                (Some(Ok(r)), Some(report)) if report.wants_rates(&opts.choices) => {
                    syscall_rates_of(&c, r, d)
                }
                _ => None,
            };
            if let Some(r) = hook_rates {
                opts.choices.rates = Some(r);
                compile_query(sql, &catalog, &opts)
            } else if sampled.is_none()
                && with_sampled_rates(&catalog, c.hook.as_ref(), sample, &mut opts)
            {
                compile_query(sql, &catalog, &opts)
            } else {
                Ok(c)
            }
        }
        (first, _) => first,
    };
    // Only a query that compiled to a task-storage pairing probes the
    // kernel for it (a bad query makes no bpf() call at all); without the
    // privilege to probe (e.g. an unprivileged `explain`), keep it.
    let uses_task_storage = |c: &CompiledQuery| {
        c.code
            .maps
            .get(MAP_PAIR)
            .is_some_and(|m| m.kind == MapKind::TaskStorage)
    };
    if compiled.as_ref().is_ok_and(uses_task_storage) && !task_storage_supported() {
        opts.task_storage = false;
        compiled = compile_query(sql, &catalog, &opts);
    }
    let compiled = compiled.map_err(|e| Error::compile(sql, e))?;
    Ok(match sampled {
        Some(rates) => weigh_placement(sql, compiled, &catalog, &opts, rates),
        None => compiled,
    })
}

/// Whether the aggregate's place in `c` is weighed: [`AggregateChoice::Auto`]
/// and an aggregate the kernel runs (the alternative streams its rows).
pub(super) fn weighs_placement(c: &CompiledQuery, opts: &CodegenOptions) -> bool {
    opts.choices.aggregate == AggregateChoice::Auto
        && matches!(
            c.code.layout,
            ebql_compiler::contract::OutputLayout::Groups { .. }
        )
}

/// The hook rule's rates from a sample of the query itself: the machine's
/// system calls per second and the mean rate of the query's syscall
/// tracepoints (an enter/exit pairing of one call has its rate).
fn syscall_rates_of(
    c: &CompiledQuery,
    r: &ebql_compiler::cost::Rates,
    d: Duration,
) -> Option<ebql_compiler::choose::SyscallRates> {
    let all = r.syscalls_per_s?;
    let traced: Vec<f64> = c
        .code
        .programs
        .iter()
        .zip(&r.events_per_s)
        .filter(|(p, _)| ebql_compiler::cost::is_syscall_tracepoint(p))
        .filter_map(|(_, e)| *e)
        .collect();
    if traced.is_empty() {
        return None;
    }
    let traced_per_sec = traced.iter().sum::<f64>() / traced.len() as f64;
    Some(ebql_compiler::choose::SyscallRates {
        all_per_sec: all,
        traced_per_sec,
        sampled_ms: d.as_millis() as u64,
    })
}

/// Keeps the kernel plan `compiled` or takes the one aggregating in user
/// space, whichever the cost model finds cheaper at the query's sampled
/// `rates` ([`crate::cost::placement`]). The decision travels in
/// [`CompiledQuery::placement`]; a failed sample keeps the kernel plan (and
/// says why there).
pub(super) fn weigh_placement(
    sql: &str,
    compiled: CompiledQuery,
    catalog: &dyn ebql_compiler::EventSource,
    opts: &CodegenOptions,
    rates: Result<ebql_compiler::cost::Rates>,
) -> CompiledQuery {
    let mut user_opts = *opts;
    user_opts.choices.aggregate = AggregateChoice::User;
    let Ok(user) = compile_query(sql, catalog, &user_opts) else {
        return compiled;
    };
    let model = crate::cost::load().model;
    match rates {
        Ok(rates) => crate::cost::placement::weigh(
            &model,
            opts.choices.optimize,
            opts.max_groups,
            compiled,
            user,
            &rates,
        ),
        Err(e) => {
            // Unknown rates: the rule keeps the kernel.
            let unknown =
                ebql_compiler::cost::Rates::unknown(ebql_runtime::num_possible_cpus().unwrap_or(1));
            let mut kept = crate::cost::placement::weigh(
                &model,
                opts.choices.optimize,
                opts.max_groups,
                compiled,
                user,
                &unknown,
            );
            if let Some(p) = kept.placement.as_mut() {
                p.why = format!("sampling the rates failed ({}): the kernel", e.render());
            }
            kept
        }
    }
}
