//! Physical planning: the choices between plans that compute the same
//! result, made once per query and recorded in its [`PhysicalPlan`], which
//! `explain` prints and code generation takes as given (it decides nothing).
//!
//! * [`choose`]: what needs no rates: the filter order, the group table of
//!   an in-kernel aggregate ([`crate::groupmap`]) and where a pairing keeps
//!   its starts.
//! * [`pass::compile_planned`]: the whole pass: the choices that want rates
//!   (the hook of syscall tracepoints, where the aggregate runs) asked of a
//!   [`RateSampler`] the executor supplies, each plan compiled once.
//!
//! Files: `sampler` (the trait), `pass` (the pass), `placement` (kernel or
//! user-space aggregate at given rates).
//!
//! The hook is applied while planning (`syscall_hook::HookedSource`: the
//! raw hook changes the event's schema), from the rates this pass samples.

pub mod pass;
pub mod placement;
pub mod sampler;

pub use pass::compile_planned;
pub use sampler::{NoSampler, RateSampler};

use crate::choose::{order_filters, PlanChoices};
use crate::cost::placement::PlacementDecision;
use crate::cost::Rates;
use crate::error::CompileError;
use crate::groupmap::{self, GroupMap};
use crate::split::plan::{KernelOutput, KernelPlan, PairPlan};
use crate::syscall_hook::HookReport;

/// Where a pairing keeps its unmatched starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StartStore {
    /// A preallocated hash keyed by the join key (`contract::MAP_PAIR`,
    /// `MapKind::Hash`): any key, and user space can list what is left.
    Hash,
    /// The thread's task-local storage (`MAP_PAIR`, `MapKind::TaskStorage`)
    /// with a `valid` word, and the per-CPU count of valid starts
    /// (`MAP_PAIR_LIVE`): no hash operations, no full map, no delete race.
    Task,
}

impl StartStore {
    /// Task storage when the key is exactly the thread (`tid = tid`) and the
    /// kernel has it (`task_storage`: the runtime's feature probe, passed in
    /// `CodegenOptions::task_storage`), else the hash. A LEFT pairing keys by
    /// more than the thread or needs the hash's listing (`keyed_by_thread_only`
    /// is false for it).
    pub fn for_pair(pair: &PairPlan, task_storage: bool) -> StartStore {
        if task_storage && pair.keyed_by_thread_only() {
            StartStore::Task
        } else {
            StartStore::Hash
        }
    }
}

/// A query's physical decisions, each with its reason (for `explain`).
#[derive(Clone, Debug, Default)]
pub struct PhysicalPlan {
    /// The hook of the query's syscall tracepoints (`None`: it has none).
    pub hook: Option<HookReport>,
    /// The group table of an in-kernel aggregate (`None`: the plan streams).
    pub group_map: Option<GroupMap>,
    /// Where a pairing stores its starts (`None`: a single event).
    pub start_store: Option<StartStore>,
    /// Where the aggregate runs, when the rule weighed the kernel against
    /// user space (`None`: not weighed: not [`crate::choose::AggregateChoice::Auto`],
    /// no aggregate the kernel runs, or no sampler).
    pub placement: Option<PlacementDecision>,
    /// The query's sampled rates the decisions used (`None`: none sampled).
    pub rates: Option<Rates>,
}

/// The choices for `plan` under `choices` that need no rates; `hook` is the
/// planner's record of the syscall hook and `task_storage` says whether
/// this kernel has task-local storage. The filter order is applied to
/// `plan` itself ([`crate::choose::order_filters`]: pid/tid tests first,
/// then by cost class and estimated selectivity), in the main program and
/// in a pairing's start program and end-side pre-lookup tests.
///
/// Errors: a group table the plan's keys cannot use when one was forced
/// (`--group-map array` on unbounded keys) is a `CompileError::Query`.
pub fn choose(
    plan: &mut KernelPlan,
    choices: &PlanChoices,
    task_storage: bool,
    hook: Option<HookReport>,
) -> Result<PhysicalPlan, CompileError> {
    order_filters(&mut plan.filters);
    for branch in &mut plan.branches {
        order_filters(&mut branch.filters);
    }
    if let Some(pair) = plan.pair.as_mut() {
        order_filters(&mut pair.start_filters);
        order_filters(&mut pair.end_pre);
    }
    let group_map = match &plan.output {
        // Several events update one table: their filters bound its keys apart.
        KernelOutput::Groups(_) if !plan.branches.is_empty() => Some(GroupMap::Hash {
            why: "several events update one table, their filters bound its keys differently".into(),
        }),
        KernelOutput::Groups(spec) => Some(groupmap::choose(plan, spec, choices)?),
        KernelOutput::Stream { .. } => None,
    };
    let start_store = plan
        .pair
        .as_ref()
        .map(|p| StartStore::for_pair(p, task_storage));
    Ok(PhysicalPlan {
        hook,
        group_map,
        start_store,
        placement: None,
        rates: None,
    })
}
