//! The reference of a paired query (issue 19, item 2): both programs tap
//! every event of their side, before any filter, into one ring buffer
//! ([`crate::codegen::TapSpec::sides`]); user space pairs the tapped events
//! by the pairing rule, independently of the kernel's start map, and the
//! query's SQL runs on the pairs.
//!
//! The pairing rule (README, "Pairing two events"; [`crate::pair`]): a start
//! is an event of the left side that passes the WHERE's conjuncts on the
//! start's own columns; an end (any event of the right side) pairs with the
//! latest unmatched start of the same key, which it takes; a pair belongs to
//! the end's window. Under `LEFT JOIN` a start replaced by a newer one of
//! its key is a row with NULL end columns in the newer one's window, and so
//! is each start left at stop, in the last window.
//!
//! The SQL above the join is the query's own: the join (with its inputs) in
//! the *unoptimized* plan is replaced by a scan of the pairs, and the result
//! optimized as usual. The pairs have one column per column the query names
//! of each side, called `alias.column` (`e.fd`, `x.time`), and each
//! side's `time` and `tid` (the pairing's order).

use crate::codegen::TapSides;
use crate::error::CompileError;
use crate::planner::{event_arrow_schema, Planned, WindowInput};
use crate::split::parts::{column_value, replace_node};
use crate::split::ValueSrc;
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::catalog::default_table_source::provider_as_source;
use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::common::{Column, ScalarValue, TableReference};
use datafusion::logical_expr::utils::{conjunction, split_conjunction};
use datafusion::logical_expr::{
    BinaryExpr, Expr, Join, JoinType, LogicalPlan, LogicalPlanBuilder, Operator,
};
use std::collections::BTreeSet;
use std::sync::Arc;

/// The table name of the pairs in the reference plan.
pub const PAIRS_TABLE: &str = "__pairs";

/// The name of the tap's first column: 0 for a start event's row, 1 for an end's.
pub const SIDE_COLUMN: &str = "__side";

/// How user space pairs a paired query's tapped events. Indices are tap
/// columns; the pairs are the tap's columns without [`SIDE_COLUMN`].
#[derive(Debug, Clone)]
pub struct PairCheck {
    /// The start event's columns and the end event's.
    pub sides: TapSides,
    /// The start side's key columns, in the ON clause's order.
    pub start_key: Vec<usize>,
    /// The end side's key columns, matching `start_key`.
    pub end_key: Vec<usize>,
    /// Each side's `time` column (ns): events are paired in time order.
    pub start_time: usize,
    /// See `start_time`.
    pub end_time: usize,
    /// Each side's `tid` column: events of one key on two threads may race.
    pub start_tid: usize,
    /// See `start_tid`.
    pub end_tid: usize,
    /// `LEFT JOIN`: unmatched starts are rows.
    pub outer: bool,
    /// Over the pairs (end columns NULL): one boolean column, whether a
    /// start passes the WHERE's start-only conjuncts. `None`: every start does.
    pub start_filter: Option<LogicalPlan>,
}

/// What [`reference`] builds: the tap, the pairing and the SQL over the pairs.
pub(super) struct PairReference {
    /// The tap's columns: the side, then the start's, then the end's.
    pub columns: Vec<(String, ValueSrc, DataType)>,
    /// The tap's record schema (Arrow).
    pub tap_schema: SchemaRef,
    /// How the pairs are made.
    pub check: PairCheck,
    /// The pairs' table, read by `remainder` and `check.start_filter`.
    pub input: Arc<WindowInput>,
    /// The query's SQL over the pairs.
    pub remainder: LogicalPlan,
}

fn internal(e: impl std::fmt::Display) -> CompileError {
    CompileError::Internal(e.to_string())
}

/// The reference of the paired query `planned` (planned in
/// [`crate::planner::PlanMode::Reference`]).
///
/// Errors: `Query` for what the check does not compare yet (strings read
/// through pointers, count windows); `Internal` if the plan has no join.
pub(super) fn reference(planned: &Planned) -> Result<PairReference, CompileError> {
    if matches!(
        planned.prepared.window,
        Some(crate::prepass::WindowSpec::Count { .. })
    ) {
        return Err(not_yet(
            "count windows over pairs",
            planned.prepared.window_span.clone(),
        ));
    }
    let state = planned.ctx.state();
    let written = futures::executor::block_on(state.create_logical_plan(&planned.prepared.sql))
        .map_err(internal)?;
    let join = find_join(&written)?;
    refuse_pointer_strings(&written, planned)?;
    let outer = match join.join_type {
        JoinType::Inner => false,
        JoinType::Left => true,
        other => return Err(internal(format!("a {other} join reached the check"))),
    };
    let start_q = qualifier(&join.left)?;
    let end_q = qualifier(&join.right)?;
    let keys = join_keys(&join, &start_q, &end_q)?;
    // Every column the text names of each side, and its time.
    let mut named: [BTreeSet<String>; 2] = Default::default();
    written
        .apply(|node| {
            for e in node.expressions() {
                for c in e.column_refs() {
                    if let Some(r) = &c.relation {
                        if *r == start_q {
                            named[0].insert(c.name.clone());
                        } else if *r == end_q {
                            named[1].insert(c.name.clone());
                        }
                    }
                }
            }
            Ok(TreeNodeRecursion::Continue)
        })
        .map_err(internal)?;
    let mut columns = vec![(
        SIDE_COLUMN.to_string(),
        ValueSrc::Int(crate::kexpr::KExpr::Const(0, crate::contract::IntType::U64)),
        DataType::UInt64,
    )];
    let mut ranges = Vec::new();
    for (side, (input, q)) in [(&join.left, &start_q), (&join.right, &end_q)]
        .into_iter()
        .enumerate()
    {
        let event = planned
            .events
            .get(&scan_table(input)?)
            .ok_or_else(|| internal("a join side without its event"))?;
        let schema = event_arrow_schema(event);
        named[side].insert("time".into());
        named[side].insert("tid".into());
        let first = columns.len();
        for f in schema.fields() {
            if !named[side].contains(f.name()) {
                continue;
            }
            let value = column_value(f.name(), event).map_err(|why| {
                not_yet(
                    &format!("joins reading {} ({why})", f.name()),
                    crate::planner::find_word(&planned.query, f.name()),
                )
            })?;
            columns.push((
                format!("{}.{}", q.table(), f.name()),
                value,
                f.data_type().clone(),
            ));
        }
        ranges.push(first..columns.len());
    }
    let index = |q: &TableReference, name: &str| {
        let want = format!("{}.{name}", q.table());
        columns
            .iter()
            .position(|(n, ..)| *n == want)
            .ok_or_else(|| internal(format!("the tap has no column {want}")))
    };
    let start_key = keys
        .iter()
        .map(|(s, _)| index(&start_q, s))
        .collect::<Result<Vec<_>, _>>()?;
    let end_key = keys
        .iter()
        .map(|(_, e)| index(&end_q, e))
        .collect::<Result<Vec<_>, _>>()?;
    let (start_time, end_time) = (index(&start_q, "time")?, index(&end_q, "time")?);
    let (start_tid, end_tid) = (index(&start_q, "tid")?, index(&end_q, "tid")?);
    let tap_schema = Arc::new(Schema::new(
        columns
            .iter()
            .map(|(n, v, t)| Field::new(n, t.clone(), v.nullable()))
            .collect::<Vec<_>>(),
    ));
    let pairs_schema = Arc::new(Schema::new(
        columns[1..]
            .iter()
            .map(|(n, _, t)| Field::new(n, t.clone(), true))
            .collect::<Vec<_>>(),
    ));
    let input = Arc::new(WindowInput::new(pairs_schema.clone()));
    let pairs = pairs_plan(&join, &input, &pairs_schema)?;
    let join_node = LogicalPlan::Join(join.clone());
    let remainder = state
        .optimize(&replace_node(&written, &join_node, pairs.clone())?)
        .map_err(internal)?;
    let start_filter = match start_only_where(&written, &join_node, &start_q) {
        Some(p) => Some(
            state
                .optimize(
                    &LogicalPlanBuilder::from(pairs)
                        .project(vec![p.alias("keep")])
                        .and_then(|b| b.build())
                        .map_err(internal)?,
                )
                .map_err(internal)?,
        ),
        None => None,
    };
    let [start, end] = [ranges[0].clone(), ranges[1].clone()];
    Ok(PairReference {
        columns,
        tap_schema,
        check: PairCheck {
            sides: TapSides { start, end },
            start_key,
            end_key,
            start_time,
            end_time,
            start_tid,
            end_tid,
            outer,
            start_filter,
        },
        input,
        remainder,
    })
}

fn not_yet(what: &str, span: Option<std::ops::Range<usize>>) -> CompileError {
    CompileError::Query(
        crate::Diagnostic::new(format!("`ebql check` does not compare {what} yet"), span)
            .with_hint("run the query with `ebql query`, or check each event on its own"),
    )
}

/// The plan's join (a paired query has exactly one).
fn find_join(plan: &LogicalPlan) -> Result<Join, CompileError> {
    let mut found = None;
    plan.apply(|n| {
        if let LogicalPlan::Join(j) = n {
            found = Some(j.clone());
            return Ok(TreeNodeRecursion::Stop);
        }
        Ok(TreeNodeRecursion::Continue)
    })
    .map_err(internal)?;
    found.ok_or_else(|| internal("a paired query without a join"))
}

/// The qualifier of a join input's columns (its alias, or its table).
fn qualifier(input: &LogicalPlan) -> Result<TableReference, CompileError> {
    input
        .schema()
        .iter()
        .next()
        .and_then(|(q, _)| q.cloned())
        .ok_or_else(|| internal("a join side without a qualifier"))
}

/// The event table a join input scans.
fn scan_table(input: &LogicalPlan) -> Result<String, CompileError> {
    let mut table = None;
    input
        .apply(|n| {
            if let LogicalPlan::TableScan(s) = n {
                table = Some(s.table_name.table().to_string());
                return Ok(TreeNodeRecursion::Stop);
            }
            Ok(TreeNodeRecursion::Continue)
        })
        .map_err(internal)?;
    table.ok_or_else(|| internal("a join side without its scan"))
}

/// The ON clause's key columns: (start column, end column) per equality.
fn join_keys(
    join: &Join,
    start_q: &TableReference,
    end_q: &TableReference,
) -> Result<Vec<(String, String)>, CompileError> {
    let mut equalities: Vec<(Expr, Expr)> = join.on.clone();
    for c in join.filter.iter().flat_map(split_conjunction) {
        match c {
            Expr::BinaryExpr(BinaryExpr {
                left,
                op: Operator::Eq,
                right,
            }) => equalities.push((left.as_ref().clone(), right.as_ref().clone())),
            other => return Err(internal(format!("ON condition {other} is not a key"))),
        }
    }
    equalities
        .into_iter()
        .map(|(a, b)| match (a, b) {
            (Expr::Column(a), Expr::Column(b)) => {
                let side = |c: &Column| c.relation.as_ref().map(|r| r == start_q);
                match (side(&a), side(&b)) {
                    (Some(true), Some(false)) if b.relation.as_ref() == Some(end_q) => {
                        Ok((a.name, b.name))
                    }
                    (Some(false), Some(true)) if a.relation.as_ref() == Some(end_q) => {
                        Ok((b.name, a.name))
                    }
                    _ => Err(internal(format!(
                        "ON key {a} = {b} is not one column per side"
                    ))),
                }
            }
            (a, b) => Err(internal(format!("ON key {a} = {b} is not two columns"))),
        })
        .collect()
}

/// `str()`/`truncated()` read a pointer's string in the kernel, as a column
/// of its own; the pairs do not carry such columns yet.
fn refuse_pointer_strings(plan: &LogicalPlan, planned: &Planned) -> Result<(), CompileError> {
    let mut found = None;
    plan.apply(|n| {
        for e in n.expressions() {
            e.apply(|x| {
                if let Expr::ScalarFunction(f) = x {
                    let name = f.name();
                    if crate::kexpr::STR_FUNCTIONS.contains(&name)
                        || name == crate::kexpr::BYTES_FUNCTION
                        || name == crate::kexpr::TRUNCATED_FUNCTION
                    {
                        found = Some(name.to_string());
                        return Ok(TreeNodeRecursion::Stop);
                    }
                }
                Ok(TreeNodeRecursion::Continue)
            })?;
        }
        Ok(TreeNodeRecursion::Continue)
    })
    .map_err(internal)?;
    match found {
        Some(name) => Err(not_yet(
            &format!("joins that read strings through pointers ({name}())"),
            crate::planner::find_word(&planned.query, &name),
        )),
        None => Ok(()),
    }
}

/// The join's output columns, from a scan of the pairs: each column the
/// pairs have, the others (never read) as typed NULLs.
fn pairs_plan(
    join: &Join,
    input: &Arc<WindowInput>,
    pairs_schema: &SchemaRef,
) -> Result<LogicalPlan, CompileError> {
    let scan = LogicalPlanBuilder::scan(
        TableReference::bare(PAIRS_TABLE),
        provider_as_source(input.clone()),
        None,
    )
    .map_err(internal)?;
    let mut exprs = Vec::new();
    for (q, f) in join.schema.iter() {
        let q = q.ok_or_else(|| internal("a join column without a qualifier"))?;
        let flat = format!("{}.{}", q.table(), f.name());
        let value = if pairs_schema.field_with_name(&flat).is_ok() {
            Expr::Column(Column::new(Some(TableReference::bare(PAIRS_TABLE)), flat))
        } else {
            let null = ScalarValue::try_from(f.data_type()).map_err(internal)?;
            Expr::Literal(null, None)
        };
        exprs.push(value.alias_qualified(Some(q.clone()), f.name()));
    }
    scan.project(exprs)
        .and_then(|b| b.build())
        .map_err(internal)
}

/// The conjuncts of the WHERE directly above `join` that read only the
/// start side's columns (what decides which starts are stored).
fn start_only_where(
    plan: &LogicalPlan,
    join: &LogicalPlan,
    start_q: &TableReference,
) -> Option<Expr> {
    let mut found = None;
    let _ = plan.apply(|n| {
        if let LogicalPlan::Filter(f) = n {
            if f.input.as_ref() == join {
                found = Some(f.predicate.clone());
                return Ok(TreeNodeRecursion::Stop);
            }
        }
        Ok(TreeNodeRecursion::Continue)
    });
    let predicate = found?;
    let own: Vec<Expr> = split_conjunction(&predicate)
        .into_iter()
        .filter(|c| {
            let refs = c.column_refs();
            !refs.is_empty() && refs.iter().all(|r| r.relation.as_ref() == Some(start_q))
        })
        .cloned()
        .collect();
    conjunction(own)
}
