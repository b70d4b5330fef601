//! Compiling a query for the differential oracle (`ebql check`).
//!
//! The query is compiled as usual (the plan under test), and a second time
//! with [`PlanMode::Reference`]: nothing pushed into the kernel, so its kernel
//! part is a raw stream of exactly the columns the query reads and its
//! user-space remainder is the whole SQL, evaluated by DataFusion. Instead of
//! a second program, the reference's stream becomes a *tap* at the top of the
//! program under test: every event is streamed before any filter, tagged with
//! the same window generation the plan's own output uses. Both sides therefore
//! see the same events in the same windows, by construction.

use crate::codegen::{compile_tapped, CodegenOptions, Compiled};
use crate::planner::{plan_mode, EventSource, PlanMode, Planned};
use crate::prepass::WindowSpec;
use crate::split::{split, KernelOutput, Split};
use crate::{CompileError, CompiledQuery};
use datafusion::logical_expr::LogicalPlan;

/// The reference half of a checked query.
pub struct Reference {
    /// The query planned with nothing pushed down (its session runs the remainder).
    pub planned: Planned,
    /// Its split: a kernel stream of the columns read, and all of the SQL in user space.
    pub split: Split,
    /// For count windows: the reference's WHERE, run on each drained batch so
    /// windows are cut from the events that passed it, like the kernel's
    /// count. `None` when the query has no filter or no count window.
    pub count_filter: Option<LogicalPlan>,
}

/// A query compiled for checking: the plan under test (its program carries the tap) and its reference.
pub struct CheckedQuery {
    /// The query under test, with the tap compiled into its program (`code.tap`).
    pub query: CompiledQuery,
    /// The reference evaluation.
    pub reference: Reference,
}

/// Compiles `query` for the differential oracle.
///
/// Errors: the same as [`crate::compile_query`]; an `Internal` error if the
/// reference plan pushed anything into the kernel (a bug).
pub fn compile_check(query: &str, source: &dyn EventSource, opts: &CodegenOptions) -> Result<CheckedQuery, CompileError> {
    let planned = crate::planner::plan(query, source)?;
    let main_split = split(&planned)?;
    let ref_planned = plan_mode(query, source, PlanMode::Reference)?;
    let mut ref_split = split(&ref_planned)?;
    let KernelOutput::Stream { columns } = &ref_split.kernel.output else {
        return Err(CompileError::Internal("the reference plan aggregates in the kernel".into()));
    };
    if !ref_split.kernel.filters.is_empty() {
        return Err(CompileError::Internal("the reference plan filters in the kernel".into()));
    }
    let code: Compiled = compile_tapped(&main_split.kernel, Some(columns), opts)?;
    // The reference is evaluated once per window, never streamed per drain.
    ref_split.streamable = false;
    ref_split.stream_limit = None;
    let count_filter = match ref_planned.prepared.window {
        Some(WindowSpec::Count { .. }) => take_scan_filter(&mut ref_split)?,
        _ => None,
    };
    Ok(CheckedQuery {
        query: CompiledQuery { planned, split: main_split, code },
        reference: Reference { planned: ref_planned, split: ref_split, count_filter },
    })
}

/// Cuts the Filter directly above a split's input scan out of its remainder
/// and returns it as a plan of its own (same input, same schema). Count
/// windows over streamed rows use it: a window is n events that passed the
/// WHERE, so the user-space part of the WHERE runs before rows are cut into
/// windows, and the rest of the plan per window.
pub fn take_scan_filter(split: &mut Split) -> Result<Option<LogicalPlan>, CompileError> {
    use datafusion::common::tree_node::{Transformed, TreeNode};
    let mut found = None;
    let rest = split
        .remainder
        .clone()
        .transform_up(|n| {
            if let LogicalPlan::Filter(f) = &n {
                if matches!(f.input.as_ref(), LogicalPlan::TableScan(_)) && found.is_none() {
                    found = Some(n.clone());
                    return Ok(Transformed::yes(f.input.as_ref().clone()));
                }
            }
            Ok(Transformed::no(n))
        })
        .map_err(|e| CompileError::Internal(e.to_string()))?
        .data;
    if found.is_some() {
        split.remainder = rest;
    }
    Ok(found)
}
