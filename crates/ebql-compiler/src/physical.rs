//! The physical choices of a kernel plan that code generation receives:
//! which group table an in-kernel aggregate gets and where a pairing keeps
//! its unmatched starts. Codegen decides nothing (issue 18); the callers of
//! [`crate::codegen::compile`] (`pipeline::compile_query`, the oracle's
//! `check`) make these choices here and hand them over.
//!
//! Not here yet: the hook of syscall tracepoints (chosen while planning,
//! `syscall_hook::HookedSource`), the filter order (`choose::order_filters`,
//! at the split) and the choices that need sampled rates (the executor's
//! `plan` module); ARCHITECTURE.md, "Designed for", says where they go.

use crate::choose::PlanChoices;
use crate::error::CompileError;
use crate::groupmap::{self, GroupMap};
use crate::split::plan::{KernelOutput, KernelPlan, PairPlan};

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

/// The decisions code generation takes as given.
#[derive(Clone, Debug, Default)]
pub struct PhysicalPlan {
    /// The group table of an in-kernel aggregate (`None`: the plan streams).
    pub group_map: Option<GroupMap>,
    /// Where a pairing stores its starts (`None`: a single event).
    pub start_store: Option<StartStore>,
}

/// The physical choices for `plan` under `choices`; `task_storage` says
/// whether this kernel has task-local storage.
///
/// Errors: a group table the plan's keys cannot use when one was forced
/// (`--group-map array` on unbounded keys) is a `CompileError::Query`.
pub fn choose(
    plan: &KernelPlan,
    choices: &PlanChoices,
    task_storage: bool,
) -> Result<PhysicalPlan, CompileError> {
    let group_map = match &plan.output {
        KernelOutput::Groups(spec) => Some(groupmap::choose(plan, spec, choices)?),
        KernelOutput::Stream { .. } => None,
    };
    let start_store = plan
        .pair
        .as_ref()
        .map(|p| StartStore::for_pair(p, task_storage));
    Ok(PhysicalPlan {
        group_map,
        start_store,
    })
}
