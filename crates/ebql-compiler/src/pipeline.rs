//! The compiler's passes in order, for one query: pre-pass and planning,
//! the split, codegen ([`compile_query`]), on a thread with a stack deep
//! enough for DataFusion's recursion ([`on_compiler_stack`]).

use crate::codegen::{self, CodegenOptions, Compiled};
use crate::error::CompileError;
use crate::physical::{self, PhysicalPlan};
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
    /// The physical decisions the code was generated under.
    pub physical: PhysicalPlan,
    /// The BPF program and maps generated for the kernel part.
    pub code: Compiled,
}

/// Compiles `query` against the events `source` knows, with the physical
/// choices that need no sampled rates (the rates in `opts.choices`, if
/// any, are used); [`crate::physical::compile_planned`] is the whole pass.
pub fn compile_query(
    query: &str,
    source: &dyn EventSource,
    opts: &CodegenOptions,
) -> Result<CompiledQuery, CompileError> {
    on_compiler_stack(|| {
        let hooked = syscall_hook::HookedSource::new(source, &opts.choices);
        let mut planned = planner::plan_here(
            query,
            &hooked,
            planner::PlanMode::Kernel,
            !opts.choices.unchecked_casts,
            opts.scope,
        )?;
        planned.aggregate = opts.choices.aggregate;
        let mut split = split::split(&planned)?;
        split.kernel.hooks = hooked.hooks();
        // Physical choices, handed to codegen (which decides nothing).
        let physical = physical::choose(
            &mut split.kernel,
            &opts.choices,
            opts.task_storage,
            hooked.report(),
        )?;
        let code = codegen::compile(&split.kernel, &physical, opts)?;
        Ok(CompiledQuery {
            planned,
            split,
            physical,
            code,
        })
    })?
}
