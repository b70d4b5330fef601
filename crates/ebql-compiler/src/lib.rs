#![warn(missing_docs)]
//! eBQL's query compiler: from query text to a BPF program plus the user-space
//! remainder of the plan. Pure: it makes no syscalls (the runtime crate is the
//! only one that talks to the kernel).
//!
//! Passes, in order:
//! 1. [`prepass`]: thesis syntax → standard SQL, with a map back to the user's text;
//! 2. [`planner`]: sqlparser + DataFusion bind and optimize (predicate/projection
//!    pushdown, constant folding), each event a table;
//! 3. [`split`]: kernel part vs user-space remainder;
//! 4. [`codegen`]: BPF instructions for the kernel part;
//! 5. [`explain`]: all of the above as text; [`cost`] predicts what the
//!    generated programs cost per event.
//!
//! The planner's alternatives (the hook of a syscall tracepoint, the group
//! table's kind, the filter order, where an aggregate runs) and the rules choosing between them are in
//! [`choose`]; [`syscall_hook`] and [`groupmap`] build the alternatives.
//!
//! [`check`] compiles a query for the differential oracle: the plan under
//! test plus a reference that DataFusion evaluates on the same events.

pub mod agg;
pub mod check;
pub mod choose;
pub mod codegen;
pub mod coerce;
pub mod contract;
pub mod cost;
pub mod diag;
pub mod explain;
pub mod groupmap;
pub mod kexpr;
pub mod memfn;
pub mod packet;
pub mod pair;
pub mod paths;
pub mod planner;
pub mod prepass;
pub mod split;
pub mod strfn;
pub mod syscall_hook;
pub mod udaf;

pub use codegen::{CodegenOptions, Compiled};
pub use diag::Diagnostic;
pub use planner::{EventSource, Planned};
pub use split::Split;

/// Why a query could not be compiled, by fault.
#[derive(Debug, thiserror::Error)]
pub enum CompileError {
    /// The query is wrong or asks for something unsupported: the user can fix it.
    #[error("{0}")]
    Query(Diagnostic),
    /// The event catalog (tracefs) could not be read.
    #[error(transparent)]
    Catalog(#[from] ebql_catalog::CatalogError),
    /// A bug in eBQL.
    #[error("internal error (a bug in eBQL, please report it): {0}")]
    Internal(String),
}

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
    pub placement: Option<cost::PlacementDecision>,
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
        // Physical choice of the group table, handed to codegen (which decides nothing).
        let group_map = groupmap::for_plan(&split.kernel, &opts.choices)?;
        let code = codegen::compile(&split.kernel, group_map.as_ref(), opts)?;
        Ok(CompiledQuery {
            planned,
            split,
            code,
            hook: hooked.report(),
            placement: None,
        })
    })?
}

/// Stack of the compiling thread. DataFusion's analyzer and optimizer recurse
/// once per expression level with large frames (a debug build overflows a
/// 2 MiB stack at ~100 chained operators); the pre-pass caps a query at
/// [`prepass::MAX_OPERATORS`], which this stack holds with a wide margin.
/// Only the touched part of it is ever backed by memory.
const COMPILER_STACK_BYTES: usize = 256 << 20;

/// Runs `f` on a thread with [`COMPILER_STACK_BYTES`] of stack, so bad input
/// cannot overflow the caller's stack (a 2 MiB test thread, say). A panic in
/// `f` is propagated.
pub(crate) fn on_compiler_stack<T: Send>(f: impl FnOnce() -> T + Send) -> Result<T, CompileError> {
    std::thread::scope(|s| {
        let handle = std::thread::Builder::new()
            .name("ebql-compile".into())
            .stack_size(COMPILER_STACK_BYTES)
            .spawn_scoped(s, f)
            .map_err(|e| {
                CompileError::Internal(format!("cannot start the compiler thread: {e}"))
            })?;
        handle
            .join()
            .map_err(|panic| std::panic::resume_unwind(panic))
    })
}
