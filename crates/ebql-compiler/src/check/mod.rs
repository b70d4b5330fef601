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

mod pairs;

pub use pairs::{PairCheck, PAIRS_TABLE, SIDE_COLUMN};

use crate::codegen::{compile_tapped, CodegenOptions, Compiled, TapSpec};
use crate::error::CompileError;
use crate::pipeline::CompiledQuery;
use crate::planner::{plan_mode, EventSource, PlanMode, Planned, WindowInput};
use crate::prepass::WindowSpec;
use crate::split::{split, KernelOutput, KernelPlan, Split};
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::logical_expr::{LogicalPlan, LogicalPlanBuilder};
use std::sync::Arc;

/// The reference half of a checked query.
pub struct Reference {
    /// The query planned with nothing pushed down (its session runs the remainder).
    pub planned: Planned,
    /// Schema of the tap's rows: the columns the query reads of each event
    /// (a paired query's: [`SIDE_COLUMN`], then each side's, see [`PairCheck`]).
    pub tap_schema: SchemaRef,
    /// The table `remainder` reads: the tap's rows, or a paired query's pairs.
    pub input: Arc<WindowInput>,
    /// All of the query's SQL, in user space, over `input`.
    pub remainder: LogicalPlan,
    /// For count windows: the reference's WHERE, run on each drained batch so
    /// windows are cut from the events that passed it, like the kernel's
    /// count. `None` when the query has no filter or no count window.
    pub count_filter: Option<LogicalPlan>,
    /// A paired query: how user space pairs the tapped events.
    pub pairing: Option<PairCheck>,
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
pub fn compile_check(
    query: &str,
    source: &dyn EventSource,
    opts: &CodegenOptions,
) -> Result<CheckedQuery, CompileError> {
    crate::views::with_views(query, |query| compile_check_plain(query, source, opts))
}

/// [`compile_check`] of a query without views.
fn compile_check_plain(
    query: &str,
    source: &dyn EventSource,
    opts: &CodegenOptions,
) -> Result<CheckedQuery, CompileError> {
    if let Some((rel, span)) = crate::wire::referenced(query) {
        return Err(CompileError::Query(
            crate::Diagnostic::new(
                format!("`ebql check` does not compare {} yet: its rows are decoded in user space from a capture", rel.name),
                Some(span),
            )
            .with_hint("the decoders have their own tests (crate ebql-wire); check the capture's events on their own"),
        ));
    }
    // Both plans see the same hook: the tap reads the raw hook's fields when the plan does.
    let hooked = crate::syscall_hook::HookedSource::new(source, &opts.choices);
    let checked_casts = !opts.choices.unchecked_casts;
    let mut planned = plan_mode(query, &hooked, PlanMode::Kernel, checked_casts, opts.scope)?;
    planned.aggregate = opts.choices.aggregate;
    let mut main_split = split(&planned)?;
    main_split.kernel.hooks = hooked.hooks();
    let mut ref_planned = plan_mode(
        query,
        &hooked,
        PlanMode::Reference,
        checked_casts,
        opts.scope,
    )?;
    if main_split.kernel.pair.is_some() {
        return compile_pair_check(planned, main_split, ref_planned, &hooked, opts);
    }
    ref_planned.plan = tap_written_columns(&ref_planned)?;
    let mut ref_split = split(&ref_planned)?;
    let KernelOutput::Stream { columns, .. } = &ref_split.kernel.output else {
        return Err(CompileError::Internal(
            "the reference plan aggregates in the kernel".into(),
        ));
    };
    if ref_split.kernel.all().any(|k| !k.filters.is_empty()) {
        return Err(CompileError::Internal(
            "the reference plan filters in the kernel".into(),
        ));
    }
    let tap = TapSpec {
        columns,
        sides: None,
        branches: tap_branches(&main_split.kernel, &ref_split.kernel)?,
    };
    let query = compile_under_test(planned, main_split, hooked.report(), tap, opts)?;
    // The reference is evaluated once per window (an unwindowed stream's:
    // once, at stop, over every tapped row), never streamed per drain; a
    // streamed query's LIMIT, which the split keeps apart, goes back on top.
    ref_split.streamable = false;
    if let Some(n) = ref_split.stream_limit.take() {
        ref_split.remainder = LogicalPlanBuilder::from(ref_split.remainder)
            .limit(0, Some(n))
            .and_then(|b| b.build())
            .map_err(|e| CompileError::Internal(format!("the reference's LIMIT: {e}")))?;
    }
    let count_filter = match ref_planned.prepared.window {
        Some(WindowSpec::Count { .. }) => count_window_filter(&ref_split)?,
        _ => None,
    };
    Ok(CheckedQuery {
        query,
        reference: Reference {
            planned: ref_planned,
            tap_schema: ref_split.kernel_schema,
            input: ref_split.input,
            remainder: ref_split.remainder,
            count_filter,
            pairing: None,
        },
    })
}

/// [`compile_check`] of a paired query: both programs tap their events,
/// user space pairs them ([`pairs`]).
fn compile_pair_check(
    planned: Planned,
    main_split: Split,
    ref_planned: Planned,
    hooked: &crate::syscall_hook::HookedSource,
    opts: &CodegenOptions,
) -> Result<CheckedQuery, CompileError> {
    let r = pairs::reference(&ref_planned)?;
    let tap = TapSpec {
        columns: &r.columns,
        sides: Some(r.check.sides.clone()),
        branches: Vec::new(),
    };
    let query = compile_under_test(planned, main_split, hooked.report(), tap, opts)?;
    Ok(CheckedQuery {
        query,
        reference: Reference {
            planned: ref_planned,
            tap_schema: r.tap_schema,
            input: r.input,
            remainder: r.remainder,
            count_filter: None,
            pairing: Some(r.check),
        },
    })
}

/// A query over several events ([`crate::multi`]): per program of the plan
/// under test, the reference branch of the same event, whose columns its
/// tap writes (the plans scan the same events in the same order; the
/// reference reads more columns of each). Empty for one event.
fn tap_branches(
    main: &KernelPlan,
    reference: &KernelPlan,
) -> Result<Vec<(u64, std::ops::Range<usize>)>, CompileError> {
    if main.branches.is_empty() && reference.branches.is_empty() {
        return Ok(Vec::new());
    }
    let events = |k: &KernelPlan| k.all().map(|b| b.event.event.clone()).collect::<Vec<_>>();
    if events(main) != events(reference) {
        return Err(CompileError::Internal(
            "the reference scans other events than the plan under test".into(),
        ));
    }
    reference
        .all()
        .map(|b| {
            b.branch
                .as_ref()
                .map(|b| (b.index, b.columns.clone()))
                .ok_or_else(|| {
                    CompileError::Internal("a reference branch without its columns".into())
                })
        })
        .collect()
}

/// The plan under test with the tap compiled into its program: its
/// physical choices, then its code.
fn compile_under_test(
    planned: Planned,
    mut split: Split,
    report: Option<crate::syscall_hook::HookReport>,
    tap: TapSpec,
    opts: &CodegenOptions,
) -> Result<CompiledQuery, CompileError> {
    let physical =
        crate::physical::choose(&mut split.kernel, &opts.choices, opts.task_storage, report)?;
    let code: Compiled = compile_tapped(&split.kernel, Some(tap), &physical, opts)?;
    Ok(CompiledQuery {
        planned,
        split,
        physical,
        code,
        wire: None,
    })
}

/// The reference plan with its scan reading every event column the query's
/// text names, not only those the optimizer kept: a second engine (DuckDB)
/// evaluates the SQL as written over the tap rows, and a condition
/// DataFusion proved redundant (`gid IS NOT NULL` on a column that is
/// never NULL) still names its columns. A projection above the widened
/// scan keeps the plan's own schema.
fn tap_written_columns(planned: &Planned) -> Result<LogicalPlan, CompileError> {
    use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
    use datafusion::logical_expr::{Expr, Projection, TableScanBuilder};
    let internal = |e: datafusion::error::DataFusionError| CompileError::Internal(e.to_string());
    let state = planned.ctx.state();
    let written = futures::executor::block_on(state.create_logical_plan(&planned.prepared.sql))
        .map_err(internal)?;
    let mut named = std::collections::HashSet::new();
    written
        .apply(|node| {
            for e in node.expressions() {
                named.extend(e.column_refs().into_iter().map(|c| c.name.clone()));
            }
            Ok(TreeNodeRecursion::Continue)
        })
        .map_err(internal)?;
    let widened = planned.plan.clone().transform_up(|node| {
        let LogicalPlan::TableScan(scan) = &node else {
            return Ok(Transformed::no(node));
        };
        let Some(kept) = &scan.projection else {
            return Ok(Transformed::no(node));
        };
        let mut wider = kept.clone();
        for (i, f) in scan.source.schema().fields().iter().enumerate() {
            if named.contains(f.name()) && !wider.contains(&i) {
                wider.push(i);
            }
        }
        if wider.len() == kept.len() {
            return Ok(Transformed::no(node));
        }
        let own: Vec<Expr> = scan
            .projected_schema
            .columns()
            .into_iter()
            .map(Expr::Column)
            .collect();
        let scan = TableScanBuilder::new(scan.table_name.clone(), scan.source.clone())
            .with_projection(Some(wider))
            .with_filters(scan.filters.clone())
            .with_fetch(scan.fetch)
            .build()?;
        let keep = Projection::try_new(own, std::sync::Arc::new(LogicalPlan::TableScan(scan)))?;
        Ok(Transformed::yes(LogicalPlan::Projection(keep)))
    });
    widened.map(|t| t.data).map_err(internal)
}

/// The WHERE of a split's user-space plan as a plan of its own over the same
/// input: the conjunction of every Filter in the row-at-a-time part directly
/// above the input scan (Filters and Projections, with projected columns
/// inlined down to the scan's). Count windows over streamed rows run it on
/// rows as they arrive, so a window is n events that passed the WHERE; the
/// remainder applies the same filter again to each window's rows, which
/// changes nothing. A query over several events ([`crate::multi`]) has one
/// such part per branch, each testing its branch (`__branch = i`): a row
/// passes when it passes its branch's. `None` when no filter runs in user
/// space.
pub fn count_window_filter(split: &Split) -> Result<Option<LogicalPlan>, CompileError> {
    use datafusion::logical_expr::{utils::conjunction, utils::disjunction, Filter};
    let internal = |e: datafusion::error::DataFusionError| CompileError::Internal(e.to_string());
    let mut chains = Vec::new();
    row_wise_filters(&split.remainder, &mut chains).map_err(internal)?;
    let Some((scan, _)) = chains.first() else {
        return Ok(None);
    };
    let scan = scan.clone();
    let branch_test = |e: &datafusion::logical_expr::Expr| {
        e.column_refs()
            .iter()
            .any(|c| c.name == crate::multi::BRANCH_COLUMN)
    };
    let own_tests =
        |preds: &[datafusion::logical_expr::Expr]| preds.iter().any(|p| !branch_test(p));
    if !chains.iter().any(|(_, preds)| own_tests(preds)) {
        return Ok(None);
    }
    // One chain: its conjunction (a disjunction of one is that term).
    let predicate = disjunction(chains.into_iter().filter_map(|(_, p)| conjunction(p)));
    let Some(predicate) = predicate else {
        return Ok(None);
    };
    Filter::try_new(predicate, std::sync::Arc::new(scan))
        .map(|f| Some(LogicalPlan::Filter(f)))
        .map_err(internal)
}

/// Each topmost row-at-a-time chain of `plan` that reaches its scan (one
/// per branch of a query over several events): the scan and the chain's
/// filter predicates over the scan's columns.
fn row_wise_filters(
    plan: &LogicalPlan,
    out: &mut Vec<(LogicalPlan, Vec<datafusion::logical_expr::Expr>)>,
) -> datafusion::common::Result<()> {
    if let Some(found) = chain_filters(plan)? {
        out.push(found);
        return Ok(());
    }
    for input in plan.inputs() {
        row_wise_filters(input, out)?;
    }
    Ok(())
}

/// If `plan` is Filters/Projections/aliases down to a scan: the scan and the
/// predicates, rewritten to the scan's columns.
fn chain_filters(
    plan: &LogicalPlan,
) -> datafusion::common::Result<Option<(LogicalPlan, Vec<datafusion::logical_expr::Expr>)>> {
    Ok(match plan {
        LogicalPlan::TableScan(_) => Some((plan.clone(), Vec::new())),
        LogicalPlan::Filter(f) => match chain_filters(&f.input)? {
            Some((scan, mut preds)) => {
                let inlined = crate::split::inline_to_stream(&f.predicate, &f.input)
                    .map_err(datafusion::error::DataFusionError::Plan)?;
                preds.push(inlined);
                Some((scan, preds))
            }
            None => None,
        },
        LogicalPlan::Projection(p) => chain_filters(&p.input)?,
        LogicalPlan::SubqueryAlias(a) => chain_filters(&a.input)?,
        _ => None,
    })
}

/// Per output column of a split query (window columns excluded): the relative
/// difference from the reference that the oracle must accept, for columns
/// that are an approximate kernel aggregate passed through unchanged
/// (through projections, filters, sorts, limits). `None`: exact (or floating
/// point, compared with the check's float tolerance).
pub fn output_bounds(split: &Split) -> Vec<Option<f64>> {
    let KernelOutput::Groups(spec) = &split.kernel.output else {
        return vec![None; split.remainder.schema().fields().len()];
    };
    (0..split.remainder.schema().fields().len())
        .map(|i| {
            let k = kernel_column(&split.remainder, i)?;
            spec.aggs
                .get(k.checked_sub(spec.keys.len())?)?
                .0
                .oracle_bound()
        })
        .collect()
}

/// The kernel output column that output column `i` of `plan` is, if it is one unchanged.
fn kernel_column(plan: &LogicalPlan, i: usize) -> Option<usize> {
    match plan {
        LogicalPlan::Projection(p) => {
            let datafusion::logical_expr::Expr::Column(c) = p.expr.get(i)?.clone().unalias() else {
                return None;
            };
            match p.input.as_ref() {
                LogicalPlan::TableScan(t) if t.table_name.table() == crate::split::KERNEL_INPUT => {
                    c.name.strip_prefix('c')?.parse().ok()
                }
                input => kernel_column(input, input.schema().index_of_column(&c).ok()?),
            }
        }
        LogicalPlan::Filter(_)
        | LogicalPlan::Sort(_)
        | LogicalPlan::Limit(_)
        | LogicalPlan::SubqueryAlias(_) => kernel_column(plan.inputs()[0], i),
        LogicalPlan::TableScan(t) if t.table_name.table() == crate::split::KERNEL_INPUT => Some(i),
        _ => None,
    }
}
