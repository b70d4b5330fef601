//! Queries over several events that are not a pairing ([`crate::pair`]):
//! `UNION ALL` of events, joins of windowed relations (a subquery on a
//! side), subqueries over different events (the thesis' Table 1: Union,
//! Join of two windowed relations).
//!
//! Each event scan is a *branch*: a program of its own with the scan's
//! pushed filters, as for a query over one event, writing the scan's
//! columns into one stream shared by every branch. The stream's first
//! column is the branch's index ([`BRANCH_COLUMN`]), then each branch's
//! columns in turn; a program zeroes the other branches' columns. All
//! branches thus share one ring buffer and one window clock (the control
//! map's generation), and a window holds every branch's events of its time.
//! The query's plan runs in user space over each window's rows, each scan
//! replaced by its branch's rows (`__branch = i`, projected back to the
//! scan's columns): DataFusion unions, joins and aggregates them as written.
//! A branch also streams the strings and loads its event's program reads
//! through pointers ([`strings`]).

use crate::agg::{Slot, State};
use crate::choose::AggregateChoice;
use crate::contract::IntType;
use crate::diag::Diagnostic;
use crate::error::CompileError;
use crate::kexpr::{KExpr, KPred, Scope};
use crate::planner::{PlanMode, Planned, WindowInput};
use crate::split::parts::{
    column_value, finish, group_spec, internal, over_scan, placeholder, replace_node, scan_event,
    scan_filters, StrColumn,
};
use crate::split::plan::{
    Branch, GroupKey, GroupSpec, KernelOutput, KernelPlan, Split, ValueSrc, KERNEL_INPUT,
};
use datafusion::arrow::datatypes::{DataType, Field, Schema};
use datafusion::catalog::default_table_source::provider_as_source;
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::{Column, DFSchema, TableReference};
use datafusion::logical_expr::{
    lit, Aggregate, Expr, LogicalPlan, LogicalPlanBuilder, TableScan, Union,
};
use std::sync::Arc;

mod strings;

pub use crate::split::plan::BRANCH_COLUMN;

/// The name of branch `i`'s column `name` in the stream.
pub fn branch_column(i: usize, name: &str) -> String {
    format!("{i}.{name}")
}

/// Splits a query over the event scans `scans` (two or more, in plan
/// order) into one kernel plan per scan, the first holding the others in
/// [`KernelPlan::branches`], and the user-space plan over their stream.
///
/// Errors: a `Query` error for a read through a pointer over several
/// events ([`strings::branch_strs`]).
pub(crate) fn split_multi(planned: &Planned, scans: &[TableScan]) -> Result<Split, CompileError> {
    let window = planned.prepared.window;
    let mut columns: Vec<(String, ValueSrc, DataType)> = vec![(
        BRANCH_COLUMN.to_string(),
        ValueSrc::Int(KExpr::Const(0, IntType::U64)),
        DataType::UInt64,
    )];
    let mut fields = vec![Field::new(BRANCH_COLUMN, DataType::UInt64, false)];
    let mut events = Vec::new();
    let mut schemas = Vec::new();
    for scan in scans {
        let (event, schema) = scan_event(planned, scan)?;
        schemas.push(schema);
        events.push(event);
    }
    let scopes: Vec<Scope> = events
        .iter()
        .zip(&schemas)
        .map(|(event, schema)| Scope {
            event,
            schema,
            start: None,
        })
        .collect();
    let strs = strings::branch_strs(planned, &scopes)?;
    let mut user_ops = Vec::new();
    if let Some((agg, specs)) = union_aggregate(planned, scans, &scopes, &mut user_ops)? {
        return union_in_kernel(planned, scans, &scopes, agg, specs, user_ops);
    }
    if let Some((aggs, specs)) = side_aggregates(planned, scans, &scopes, &mut user_ops)? {
        return sides_in_kernel(planned, scans, &scopes, aggs, specs, user_ops);
    }
    let mut plans = Vec::new();
    for (i, scan) in scans.iter().enumerate() {
        let (event, scope) = (events[i].clone(), &scopes[i]);
        let filters = scan_filters(scan, scope)?;
        let first = columns.len();
        for f in scan.projected_schema.fields() {
            let value = column_value(f.name(), &event).map_err(|why| {
                CompileError::Query(Diagnostic::new(
                    format!("column '{}' cannot be read in the kernel: {why}", f.name()),
                    crate::planner::find_word(&planned.query, f.name()),
                ))
            })?;
            let name = branch_column(i, f.name());
            fields.push(Field::new(&name, f.data_type().clone(), value.nullable()));
            columns.push((name, value, f.data_type().clone()));
        }
        for s in &strs[i] {
            let name = branch_column(i, &s.name);
            fields.push(Field::new(&name, s.data_type.clone(), s.value.nullable()));
            columns.push((name, s.value.clone(), s.data_type.clone()));
        }
        plans.push(KernelPlan {
            event,
            filters,
            output: KernelOutput::Stream {
                columns: Vec::new(),
                latest: None,
            },
            window,
            pair: None,
            hooks: Vec::new(),
            branch: Some(Branch {
                index: i as u64,
                columns: first..columns.len(),
            }),
            branches: Vec::new(),
        });
    }
    for p in &mut plans {
        p.output = KernelOutput::Stream {
            columns: columns.clone(),
            latest: None,
        };
    }
    let kernel_schema = Arc::new(Schema::new(fields));
    let input = Arc::new(WindowInput::new(kernel_schema.clone()));
    let mut remainder = planned.plan.clone();
    for (i, scan) in scans.iter().enumerate() {
        remainder = replace_node(
            &remainder,
            &LogicalPlan::TableScan(scan.clone()),
            branch_rows(&input, i, scan, &strs[i])?,
        )?;
    }
    let remainder = strings::replace_calls(remainder, scans, &strs)?;
    user_ops.insert(
        0,
        format!(
            "{} events, one program each, into one stream: the plan runs in user space over each window's rows",
            scans.len()
        ),
    );
    finish(
        planned,
        with_branches(plans),
        kernel_schema,
        input,
        remainder,
        user_ops,
    )
}

/// The union's aggregate in the kernel: every scan's program, with its
/// filters, updates one group table (`specs`, by `scans` index, one
/// layout); the plan above the aggregate runs in user space.
fn union_in_kernel(
    planned: &Planned,
    scans: &[TableScan],
    scopes: &[Scope],
    agg: LogicalPlan,
    specs: Vec<GroupSpec>,
    mut user_ops: Vec<String>,
) -> Result<Split, CompileError> {
    let kernel = grouped(planned, scans, scopes, specs)?;
    let (kernel_schema, input, rows) = placeholder(agg.schema())?;
    let remainder = replace_node(&planned.plan, &agg, rows)?;
    user_ops.insert(
        0,
        format!(
            "{} events, one program each, aggregated into one group table",
            scans.len()
        ),
    );
    finish(planned, kernel, kernel_schema, input, remainder, user_ops)
}

/// The plans of `scans` (their `scopes`), each aggregating into one group
/// table as its spec says, the first holding the others as its branches.
fn grouped(
    planned: &Planned,
    scans: &[TableScan],
    scopes: &[Scope],
    specs: Vec<GroupSpec>,
) -> Result<KernelPlan, CompileError> {
    let mut plans = Vec::new();
    for ((scan, scope), spec) in scans.iter().zip(scopes).zip(specs) {
        plans.push(KernelPlan {
            event: scope.event.clone(),
            filters: scan_filters(scan, scope)?,
            output: KernelOutput::Groups(spec),
            window: planned.prepared.window,
            pair: None,
            hooks: Vec::new(),
            branch: None,
            branches: Vec::new(),
        });
    }
    Ok(with_branches(plans))
}

/// The first of `plans` (one per scan, in program order) holding the others.
fn with_branches(mut plans: Vec<KernelPlan>) -> KernelPlan {
    let mut kernel = plans.remove(0);
    kernel.branches = plans;
    kernel
}

/// Branch `i`'s rows of the stream, with `scan`'s columns (names and
/// qualifier) and its reads through pointers `strs`, in place of the scan.
fn branch_rows(
    input: &Arc<WindowInput>,
    i: usize,
    scan: &TableScan,
    strs: &[StrColumn],
) -> Result<LogicalPlan, CompileError> {
    let names = scan.projected_schema.fields().iter().map(|f| f.name());
    let columns = names.chain(strs.iter().map(|s| &s.name)).map(|name| {
        Expr::Column(Column::new_unqualified(branch_column(i, name)))
            .alias_qualified(Some(scan.table_name.clone()), name)
    });
    rows_where(input, BRANCH_COLUMN, lit(i as u64), columns)
}

/// The kernel rows of `input` whose `column` is `value` (one branch's, or
/// one side's groups), projected to `columns`.
fn rows_where(
    input: &Arc<WindowInput>,
    column: &str,
    value: Expr,
    columns: impl IntoIterator<Item = Expr>,
) -> Result<LogicalPlan, CompileError> {
    LogicalPlanBuilder::scan(
        TableReference::bare(KERNEL_INPUT),
        provider_as_source(input.clone()),
        None,
    )
    .and_then(|b| b.filter(Expr::Column(Column::new_unqualified(column)).eq(value)))
    .and_then(|b| b.project(columns))
    .and_then(|b| b.build())
    .map_err(|e| internal(e.to_string()))
}

/// `SELECT … FROM (a UNION ALL b …) GROUP BY …` in the kernel: the
/// aggregate sits on a `UNION ALL` of every scan (through projections and
/// aliases), and its keys and arguments compile for each branch with one
/// layout. Returns the aggregate node and each scan's group spec (by
/// `scans` index); `None` when the rows must stream (the reason in
/// `user_ops`).
fn union_aggregate(
    planned: &Planned,
    scans: &[TableScan],
    scopes: &[Scope],
    user_ops: &mut Vec<String>,
) -> Result<Option<(LogicalPlan, Vec<GroupSpec>)>, CompileError> {
    if planned.mode != PlanMode::Kernel {
        return Ok(None);
    }
    let mut found = None;
    planned
        .plan
        .apply(|n| {
            if let LogicalPlan::Aggregate(a) = n {
                found = Some(a.clone());
                return Ok(TreeNodeRecursion::Stop);
            }
            Ok(TreeNodeRecursion::Continue)
        })
        .map_err(|e| internal(e.to_string()))?;
    let Some(agg) = found else {
        return Ok(None);
    };
    let Some(union) = union_under(&agg.input) else {
        return Ok(None);
    };
    if planned.aggregate == AggregateChoice::User {
        user_ops.push("Aggregate in user space: placed there by the planner (--aggregate user); the kernel streams the rows it reads".into());
        return Ok(None);
    }
    match branch_specs(planned, &agg, union, scans, scopes) {
        Ok(specs) => Ok(Some((LogicalPlan::Aggregate(agg), specs))),
        Err(why) => {
            user_ops.push(format!("Aggregate over the union in user space: {why}"));
            Ok(None)
        }
    }
}

/// The `Union` under `plan` through projections and aliases.
fn union_under(plan: &LogicalPlan) -> Option<&Union> {
    match plan {
        LogicalPlan::Union(u) => Some(u),
        LogicalPlan::Projection(p) => union_under(&p.input),
        LogicalPlan::SubqueryAlias(a) => union_under(&a.input),
        _ => None,
    }
}

/// `e`, an expression over `plan`'s columns, over branch `i`'s input of
/// the union under `plan` ([`union_under`]).
fn to_branch(e: &Expr, plan: &LogicalPlan, i: usize) -> Result<Expr, String> {
    let replace = |e: &Expr, schema: &DFSchema, by: &dyn Fn(usize) -> Expr| {
        e.clone()
            .transform_up(|x| match &x {
                Expr::Column(c) => match schema.index_of_column(c) {
                    Ok(k) => Ok(Transformed::yes(by(k))),
                    Err(_) => Ok(Transformed::no(x)),
                },
                _ => Ok(Transformed::no(x)),
            })
            .map(|t| t.data)
            .map_err(|err| err.to_string())
    };
    match plan {
        LogicalPlan::Projection(p) => {
            let e = replace(e, &p.schema, &|k| p.expr[k].clone().unalias())?;
            to_branch(&e, &p.input, i)
        }
        LogicalPlan::SubqueryAlias(a) => {
            let inner = a.input.schema().columns();
            let e = replace(e, &a.schema, &|k| Expr::Column(inner[k].clone()))?;
            to_branch(&e, &a.input, i)
        }
        LogicalPlan::Union(u) => {
            let input = u.inputs.get(i).ok_or("no such branch")?;
            let inner = input.schema().columns();
            replace(e, &u.schema, &|k| Expr::Column(inner[k].clone()))
        }
        other => Err(format!(
            "{} between the aggregate and the union",
            other.display()
        )),
    }
}

/// Each scan's group spec of the union's aggregate `agg` (by `scans`
/// index), all of one layout, the first typed as `agg`'s output; or why not.
fn branch_specs(
    planned: &Planned,
    agg: &Aggregate,
    union: &Union,
    scans: &[TableScan],
    scopes: &[Scope],
) -> Result<Vec<GroupSpec>, String> {
    if union.inputs.len() != scans.len() {
        return Err("the query reads events outside the union".into());
    }
    let mut specs: Vec<Option<GroupSpec>> = vec![None; scans.len()];
    for (i, input) in union.inputs.iter().enumerate() {
        if !over_scan(input) {
            return Err(format!(
                "branch {i} is not one event's scan (a filter the kernel cannot run?)"
            ));
        }
        let mut scan = None;
        let _ = input.apply(|n| {
            if let LogicalPlan::TableScan(s) = n {
                scan = Some(s.clone());
            }
            Ok(TreeNodeRecursion::Continue)
        });
        let s = scans
            .iter()
            .enumerate()
            .position(|(k, x)| Some(x) == scan.as_ref() && specs[k].is_none())
            .ok_or("a branch without its scan")?;
        let over = |e: &Expr| to_branch(e, &agg.input, i);
        let group = agg
            .group_expr
            .iter()
            .map(over)
            .collect::<Result<Vec<_>, _>>()?;
        let aggr = agg
            .aggr_expr
            .iter()
            .map(over)
            .collect::<Result<Vec<_>, _>>()?;
        let branch_agg = Aggregate::try_new(Arc::new((**input).clone()), group, aggr)
            .map_err(|e| e.to_string())?;
        specs[s] = Some(group_spec(
            &branch_agg,
            &scopes[s],
            planned.prepared.window,
        )?);
    }
    let mut specs: Vec<GroupSpec> = specs
        .into_iter()
        .map(|s| s.expect("every scan a branch"))
        .collect();
    let shape = |s: &GroupSpec| {
        let keys: Vec<String> = s.keys.iter().map(|k| key_shape(&k.value)).collect();
        let slots: Vec<String> = s.slots.iter().map(|x| format!("{:?}", x.state)).collect();
        let aggs: Vec<String> = s.aggs.iter().map(|a| format!("{:?}", a.0)).collect();
        (keys, slots, aggs)
    };
    if specs.iter().any(|s| shape(s) != shape(&specs[0])) {
        return Err(
            "its keys or arguments differ in type between the events (cast them to one type)"
                .into(),
        );
    }
    // The rows are the union's: typed as the aggregate's output.
    let first = &mut specs[0];
    for (i, k) in first.keys.iter_mut().enumerate() {
        k.data_type = agg.schema.field(i).data_type().clone();
    }
    let n = first.keys.len();
    for (j, a) in first.aggs.iter_mut().enumerate() {
        a.1 = agg.schema.field(n + j).data_type().clone();
    }
    Ok(specs)
}

/// How a key is stored in the kernel's key: its width and kind.
fn key_shape(v: &ValueSrc) -> String {
    match v {
        ValueSrc::Int(e) => format!("int {:?}", e.ty()),
        ValueSrc::Str(s) => format!("str {} {}", s.len(), s.helper_buffer().is_some()),
        ValueSrc::Truncated(_) => "truncated".into(),
    }
}

pub use crate::split::plan::SIDE_KEY;

/// Each event aggregated in the kernel on its own (a join of aggregated
/// relations, a union of aggregates): every scan sits right under an
/// aggregate of its own whose keys and arguments compile, and all of them
/// have keys of one layout. All programs then update one group table keyed
/// by [`SIDE_KEY`] and the keys, whose value holds every event's aggregate
/// states, one event's slots after the other's; a program folds only its
/// own (the others' are never folded, and their outputs discarded by the
/// plan, which reads each event's groups alone). Returns each scan's
/// aggregate and group spec (by `scans` index); `None`: the rows stream.
fn side_aggregates(
    planned: &Planned,
    scans: &[TableScan],
    scopes: &[Scope],
    user_ops: &mut Vec<String>,
) -> Result<Option<Sides>, CompileError> {
    if planned.mode != PlanMode::Kernel || planned.aggregate == AggregateChoice::User {
        return Ok(None);
    }
    let mut aggs: Vec<Option<Aggregate>> = vec![None; scans.len()];
    planned
        .plan
        .apply(|n| {
            if let LogicalPlan::Aggregate(a) = n {
                let scan = scan_under(&a.input);
                let at = scans
                    .iter()
                    .enumerate()
                    .position(|(k, s)| Some(s) == scan.as_ref() && aggs[k].is_none());
                if let (true, Some(k)) = (over_scan(&a.input), at) {
                    aggs[k] = Some(a.clone());
                }
            }
            Ok(TreeNodeRecursion::Continue)
        })
        .map_err(|e| internal(e.to_string()))?;
    let Some(aggs) = aggs.into_iter().collect::<Option<Vec<Aggregate>>>() else {
        return Ok(None);
    };
    let mut refuse = |why: String| -> Result<Option<Sides>, CompileError> {
        user_ops.push(format!("Each event's aggregate in user space: {why}"));
        Ok(None)
    };
    let mut specs = Vec::new();
    for (a, scope) in aggs.iter().zip(scopes) {
        match group_spec(a, scope, planned.prepared.window) {
            Ok(s) => specs.push(s),
            Err(why) => return refuse(why),
        }
    }
    let keys = |s: &GroupSpec| {
        s.keys
            .iter()
            .map(|k| key_shape(&k.value))
            .collect::<Vec<_>>()
    };
    if specs.iter().any(|s| keys(s) != keys(&specs[0])) {
        return refuse("their GROUP BY keys differ in number or type".into());
    }
    let distinct = |s: &GroupSpec| {
        s.slots
            .iter()
            .any(|x| matches!(x.state, State::Distinct(_)))
    };
    if specs.iter().any(distinct) {
        return refuse("COUNT(DISTINCT)'s set is one per table".into());
    }
    if specs.iter().map(|s| s.slots.len()).sum::<usize>() > 32 {
        return refuse("more than 32 aggregate states in all".into());
    }
    let mut first = 0;
    let offsets: Vec<usize> = specs
        .iter()
        .map(|s| {
            first += s.slots.len();
            first - s.slots.len()
        })
        .collect();
    let combined = (0..specs.len())
        .map(|side| {
            let mut keys = vec![GroupKey {
                value: ValueSrc::Int(KExpr::Const(
                    side as u64,
                    IntType {
                        bits: 8,
                        signed: false,
                    },
                )),
                per_cpu: false,
                data_type: DataType::UInt8,
                text: SIDE_KEY.into(),
            }];
            keys.extend(specs[side].keys.iter().cloned().map(|k| GroupKey {
                per_cpu: false,
                ..k
            }));
            let slots = specs
                .iter()
                .enumerate()
                .flat_map(|(j, s)| {
                    s.slots.iter().cloned().map(move |x| match j == side {
                        true => x,
                        // Another event's state: never folded by this program.
                        false => Slot {
                            expr: KExpr::Const(0, IntType::U64),
                            when: Some(KPred::Const(false)),
                            weight: None,
                            ..x
                        },
                    })
                })
                .collect();
            let aggs = specs
                .iter()
                .zip(&offsets)
                .flat_map(|(s, &by)| {
                    s.aggs
                        .iter()
                        .map(move |(f, dt, text)| (f.shifted(by), dt.clone(), text.clone()))
                })
                .collect();
            GroupSpec { keys, slots, aggs }
        })
        .collect();
    Ok(Some((aggs, combined)))
}

/// Each scan's aggregate and group spec ([`side_aggregates`]).
type Sides = (Vec<Aggregate>, Vec<GroupSpec>);

/// The event scan under a chain of projections and aliases.
fn scan_under(plan: &LogicalPlan) -> Option<TableScan> {
    match plan {
        LogicalPlan::TableScan(s) => Some(s.clone()),
        LogicalPlan::Projection(p) => scan_under(&p.input),
        LogicalPlan::SubqueryAlias(a) => scan_under(&a.input),
        _ => None,
    }
}

/// Each event's aggregate in the kernel ([`side_aggregates`]): one group
/// table; each aggregate replaced in the plan by its event's groups
/// (`__side = i`) with the aggregate's columns.
fn sides_in_kernel(
    planned: &Planned,
    scans: &[TableScan],
    scopes: &[Scope],
    aggs: Vec<Aggregate>,
    specs: Vec<GroupSpec>,
    mut user_ops: Vec<String>,
) -> Result<Split, CompileError> {
    let kernel = grouped(planned, scans, scopes, specs)?;
    // The rows: the side, the keys (the first event's types), every event's aggregates.
    let nkeys = aggs[0].group_expr.len();
    let mut fields = vec![Field::new(SIDE_KEY, DataType::UInt8, false)];
    for (i, f) in aggs[0].schema.fields()[..nkeys].iter().enumerate() {
        fields.push(Field::new(
            format!("c{}", i + 1),
            f.data_type().clone(),
            true,
        ));
    }
    let mut agg_columns = Vec::new();
    for a in &aggs {
        let from = fields.len();
        for f in &a.schema.fields()[nkeys..] {
            fields.push(Field::new(
                format!("c{}", fields.len()),
                f.data_type().clone(),
                true,
            ));
        }
        agg_columns.push(from);
    }
    let kernel_schema = Arc::new(Schema::new(fields));
    let input = Arc::new(WindowInput::new(kernel_schema.clone()));
    let mut remainder = planned.plan.clone();
    for (side, a) in aggs.iter().enumerate() {
        let c = |i: usize| Expr::Column(Column::new_unqualified(format!("c{i}")));
        let columns = a.schema.iter().enumerate().map(|(i, (q, f))| {
            let from = if i < nkeys {
                1 + i
            } else {
                agg_columns[side] + i - nkeys
            };
            c(from).alias_qualified(q.cloned(), f.name())
        });
        let rows = rows_where(&input, SIDE_KEY, lit(side as u8), columns)?;
        remainder = replace_node(&remainder, &LogicalPlan::Aggregate(a.clone()), rows)?;
    }
    user_ops.insert(
        0,
        format!(
            "{} events, one program each, each aggregated in the kernel: one group table keyed by [{SIDE_KEY}, keys]",
            scans.len()
        ),
    );
    finish(planned, kernel, kernel_schema, input, remainder, user_ops)
}
