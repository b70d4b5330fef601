//! The compiler's passes in order, for one query: pre-pass and planning,
//! the split, codegen ([`compile_query`]), on a thread with a stack deep
//! enough for DataFusion's recursion ([`on_compiler_stack`]).

use crate::codegen::{self, CodegenOptions, Compiled};
use crate::cost::placement::PlacementDecision;
use crate::error::CompileError;
use crate::physical;
use crate::planner::{self, EventSource, Planned};
use crate::split::{self, Split};
use crate::stack::on_compiler_stack;
use crate::syscall_hook;

/// Everything compiled from one query.
pub struct CompiledQuery {
    /// The pre-pass result and DataFusion's optimized logical plan.
    pub planned: Planned,
    /// The plan cut into its kernel part and user-space remainder.
    pub split: Split,
    /// The BPF program and maps generated for the kernel part.
    pub code: Compiled,
    /// The hook chosen for the query's syscall tracepoints (`None`: it has none).
    pub hook: Option<syscall_hook::HookReport>,
    /// Where the aggregate runs, when the cost rule weighed the kernel
    /// against user space (`None`: not weighed; the executor sets it, as
    /// the rule needs sampled rates).
    pub placement: Option<PlacementDecision>,
}

/// Compiles `query` against the events `source` knows.
pub fn compile_query(
    query: &str,
    source: &dyn EventSource,
    opts: &CodegenOptions,
) -> Result<CompiledQuery, CompileError> {
    on_compiler_stack(|| {
        let hooked = syscall_hook::HookedSource::new(source, &opts.choices);
        let mut planned = planner::plan_here(query, &hooked, planner::PlanMode::Kernel)?;
        planned.aggregate = opts.choices.aggregate;
        let mut split = split::split(&planned)?;
        split.kernel.hooks = hooked.hooks();
        // Physical choices, handed to codegen (which decides nothing).
        let physical = physical::choose(&split.kernel, &opts.choices, opts.task_storage)?;
        let code = codegen::compile(&split.kernel, &physical, opts)?;
        Ok(CompiledQuery {
            planned,
            split,
            code,
            hook: hooked.report(),
            placement: None,
        })
    })?
}
