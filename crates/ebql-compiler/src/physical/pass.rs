//! The physical pass of one query ([`compile_planned`]): compile the plan
//! that needs no rates, ask the [`RateSampler`] for the rates its choices
//! want, and move to the plan they pick, compiling each plan once.

use super::placement;
use super::sampler::RateSampler;
use super::StartStore;
use crate::choose::{choose_hook, AggregateChoice, SyscallRates};
use crate::codegen::CodegenOptions;
use crate::cost::{is_syscall_tracepoint, Rates};
use crate::error::CompileError;
use crate::pipeline::{compile_query, CompiledQuery};
use crate::planner::EventSource;

/// Compiles `query` with every physical choice made: the choices that need
/// no rates first ([`super::choose`]); then, when a choice is automatic and
/// wants them, the rates `sampler` gives:
///
/// 1. a kernel without task storage moves a thread-keyed pairing to the hash,
///    and `comm` comparisons to `bpf_get_current_comm` (both Linux 5.11);
/// 2. an aggregate whose place is weighed ([`placement::weighed`]) is run
///    for a moment ([`RateSampler::query_rates`]); that sample also counts
///    the machine's system calls, so it serves the hook rule too;
/// 3. otherwise, syscall tracepoints whose hook wants rates get a count of
///    the machine's system calls ([`RateSampler::syscall_rates`]);
/// 4. with those rates the hook rule decides again; a different hook is a
///    different plan (compiled), the same hook keeps the code and records
///    the rule's reasons at the sampled rates;
/// 5. the user-space alternative of a weighed aggregate is compiled on the
///    same hook and the cheaper plan kept ([`placement::weigh`]).
///
/// A failed sample leaves its rule without rates (the tracefs hook, the
/// kernel aggregate) and says why in the decision.
///
/// Errors: the query's own, as [`compile_query`]'s.
pub fn compile_planned(
    query: &str,
    source: &dyn EventSource,
    opts: &CodegenOptions,
    sampler: &dyn RateSampler,
) -> Result<CompiledQuery, CompileError> {
    crate::views::with_views(query, |query| {
        if let Some((rel, span)) = crate::wire::referenced(query) {
            return crate::pipeline::compile_wire(
                query,
                rel,
                span,
                source,
                opts,
                |capture, opts| compile_planned(capture, source, opts, sampler),
            );
        }
        compile_planned_plain(query, source, opts, sampler)
    })
}

/// [`compile_planned`] of a query without views or wire relations.
fn compile_planned_plain(
    query: &str,
    source: &dyn EventSource,
    opts: &CodegenOptions,
    sampler: &dyn RateSampler,
) -> Result<CompiledQuery, CompileError> {
    let mut opts = *opts;
    if opts.task_comm.is_none() {
        opts.task_comm = sampler.task_comm_offset();
    }
    let mut first = compile_query(query, source, &opts)?;
    // Both need Linux 5.11 (task storage, bpf_get_current_task_btf): asked
    // of the kernel only when the plan uses one, so that a query refused
    // above has made no bpf() call.
    let direct_comm = first.code.programs.iter().any(|p| p.direct_comm);
    if (first.physical.start_store == Some(StartStore::Task) || direct_comm)
        && !sampler.task_storage()
    {
        opts.task_storage = false;
        opts.task_comm = None;
        first = compile_query(query, source, &opts)?;
    }
    if first.code.programs.iter().any(|p| p.sleepable) && !sampler.faulting_reads() {
        opts.faulting_user_strings = false;
        first = compile_query(query, source, &opts)?;
    }
    let weighed = placement::weighed(&first, opts.choices.aggregate);
    let sampled = weighed.then(|| sampler.query_rates(&first)).flatten();
    let wants_hook_rates = first
        .physical
        .hook
        .as_ref()
        .is_some_and(|h| h.wants_rates(&opts.choices));
    let syscall_rates = match (&sampled, wants_hook_rates) {
        (_, false) => None,
        (Some(Ok(rates)), true) => {
            let syscall: Vec<bool> = first
                .code
                .programs
                .iter()
                .map(is_syscall_tracepoint)
                .collect();
            syscall_rates_of(&syscall, rates)
        }
        (Some(Err(_)), true) => None,
        (None, true) => {
            let nrs = first.physical.hook.as_ref().map(|h| h.traced_nrs());
            sampler
                .syscall_rates(&nrs.unwrap_or_default())
                .and_then(Result::ok)
        }
    };
    let mut compiled = match syscall_rates {
        Some(rates) => {
            opts.choices.rates = Some(rates);
            rehook(first, query, source, &opts)?
        }
        None => first,
    };
    if let Some(rates) = sampled {
        compiled = weigh(query, compiled, source, &opts, rates, sampler)?;
    }
    Ok(compiled)
}

/// `compiled` under the hook rule at the rates now in `opts`: recompiled
/// when the rule picks the other hook, else the same code with the rule's
/// new reasons.
fn rehook(
    mut compiled: CompiledQuery,
    query: &str,
    source: &dyn EventSource,
    opts: &CodegenOptions,
) -> Result<CompiledQuery, CompileError> {
    let decision = choose_hook(&opts.choices);
    match compiled.physical.hook.as_mut() {
        Some(h) if h.decision.chosen == decision.chosen => {
            h.decision = decision;
            Ok(compiled)
        }
        _ => compile_query(query, source, opts),
    }
}

/// Keeps the kernel plan `compiled` or takes the one aggregating in user
/// space (compiled here, on the same hook), whichever the cost model finds
/// cheaper at the sampled `rates`; a failed sample keeps the kernel and
/// says why.
fn weigh(
    query: &str,
    mut compiled: CompiledQuery,
    source: &dyn EventSource,
    opts: &CodegenOptions,
    rates: Result<Rates, String>,
    sampler: &dyn RateSampler,
) -> Result<CompiledQuery, CompileError> {
    let mut user_opts = *opts;
    user_opts.choices.aggregate = AggregateChoice::User;
    if let Some(h) = &compiled.physical.hook {
        user_opts.choices.hook = h.pinned(opts.choices.hook);
    }
    let Ok(mut user) = compile_query(query, source, &user_opts) else {
        return Ok(compiled);
    };
    let model = sampler.cost_model();
    let (priced, failed) = match rates {
        Ok(r) => (r, None),
        Err(why) => (Rates::unknown(sampler.cpus()), Some(why)),
    };
    // The user plan's hook report records the same decision as the kernel plan's.
    user.physical.hook = compiled.physical.hook.clone();
    compiled.physical.rates = failed.is_none().then(|| priced.clone());
    user.physical.rates = compiled.physical.rates.clone();
    let mut chosen = placement::weigh(
        &model,
        opts.choices.optimize,
        opts.max_groups,
        compiled,
        user,
        &priced,
    );
    if let (Some(why), Some(p)) = (failed, chosen.physical.placement.as_mut()) {
        p.why = format!("sampling the rates failed ({why}): the kernel");
    }
    Ok(chosen)
}

/// The hook rule's rates from a sample of a query: the machine's system
/// calls per second and the mean rate of its syscall tracepoints
/// (`syscall[i]`: whether program i is one; an enter/exit pairing of one
/// call has its rate). `None` without a count of the machine's calls or
/// without a syscall tracepoint.
pub fn syscall_rates_of(syscall: &[bool], r: &Rates) -> Option<SyscallRates> {
    let all = r.syscalls_per_s?;
    let traced: Vec<f64> = syscall
        .iter()
        .zip(&r.events_per_s)
        .filter(|(s, _)| **s)
        .filter_map(|(_, e)| *e)
        .collect();
    if traced.is_empty() {
        return None;
    }
    Some(SyscallRates {
        all_per_sec: all,
        traced_per_sec: traced.iter().sum::<f64>() / traced.len() as f64,
        sampled_ms: r.sampled_ms,
    })
}
