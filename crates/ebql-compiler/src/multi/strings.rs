//! Reads through pointers (`str()`, `bytes()`, `truncated()`, loads,
//! `uregs()`) in a query over several events. Only the program of the
//! event a call reads can evaluate it, while the event lasts: each call is
//! read by its branch's program into a column of that branch
//! (`{i}.__ebql_str{k}`), and the plan reads the column instead of the
//! call, as for one event ([`crate::split::parts::str_columns`]).
//!
//! A call belongs to the event scan under it through projections, filters
//! and aliases: inside a `UNION ALL`'s `SELECT`, or a subquery over one
//! event. A call over a union, a join or an aggregate of events reads no
//! single event, and is refused with where to write it instead.

use crate::diag::Diagnostic;
use crate::error::CompileError;
use crate::kexpr::Scope;
use crate::planner::Planned;
use crate::split::parts::{internal, is_str_call, replace_str_calls, str_columns_over, StrColumn};
use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::logical_expr::{Expr, LogicalPlan, TableScan};

/// The event scan under `plan` through row-for-row nodes (projections,
/// filters, aliases): the node whose event a call over `plan` reads.
fn scan_under(plan: &LogicalPlan) -> Option<&LogicalPlan> {
    match plan {
        LogicalPlan::TableScan(_) => Some(plan),
        LogicalPlan::Projection(p) => scan_under(&p.input),
        LogicalPlan::Filter(f) => scan_under(&f.input),
        LogicalPlan::SubqueryAlias(a) => scan_under(&a.input),
        _ => None,
    }
}

/// The plan's event scan nodes in the order the split lists them (the
/// plan's pre-order): equal scans of one event are told apart by place.
fn scan_nodes(plan: &LogicalPlan) -> Result<Vec<&LogicalPlan>, CompileError> {
    let mut nodes = Vec::new();
    plan.apply(|n| {
        if matches!(n, LogicalPlan::TableScan(_)) {
            nodes.push(n);
        }
        Ok(TreeNodeRecursion::Continue)
    })
    .map_err(|e| internal(e.to_string()))?;
    Ok(nodes)
}

/// The first call the kernel must read (see [`is_str_call`]) in `node`'s
/// own expressions, by function name.
fn first_call(node: &LogicalPlan) -> Result<Option<String>, CompileError> {
    let mut name = None;
    for e in node.expressions() {
        e.apply(|x| {
            if let (Expr::ScalarFunction(f), true) = (x, is_str_call(x)) {
                name.get_or_insert(f.name().to_string());
                return Ok(TreeNodeRecursion::Stop);
            }
            Ok(TreeNodeRecursion::Continue)
        })
        .map_err(|e| internal(e.to_string()))?;
    }
    Ok(name)
}

/// Each branch's reads through pointers (by `scans` index, in the plan's
/// pre-order as [`crate::split`] lists them), named across branches: a
/// call written the same over the same event is one name in each branch
/// that reads it (the branches' rows are apart, `__branch = i`).
///
/// Errors: a `Query` error, at the call, for a call over a union, a join or
/// an aggregate of events; the errors of [`str_columns_over`] for a call
/// the probe cannot read.
pub(super) fn branch_strs(
    planned: &Planned,
    scopes: &[Scope],
) -> Result<Vec<Vec<StrColumn>>, CompileError> {
    let plan = &planned.plan;
    let mut refused = None;
    plan.apply(|node| {
        if matches!(node, LogicalPlan::TableScan(_)) {
            return Ok(TreeNodeRecursion::Continue);
        }
        let one_event = matches!(node.inputs()[..], [input] if scan_under(input).is_some());
        if !one_event {
            if let Ok(Some(name)) = first_call(node) {
                refused.get_or_insert(name);
                return Ok(TreeNodeRecursion::Stop);
            }
        }
        Ok(TreeNodeRecursion::Continue)
    })
    .map_err(|e| internal(e.to_string()))?;
    if let Some(name) = refused {
        return Err(CompileError::Query(
            Diagnostic::new(
                format!("{name}() over several events cannot be read in the probe: only the program of the event it reads can read through its pointer"),
                crate::planner::find_word(&planned.query, &name),
            )
            .with_hint(format!("call {name}() inside each SELECT of the UNION ALL, or in the subquery that reads its event, and name its result there")),
        ));
    }
    let nodes = scan_nodes(plan)?;
    let mut calls: Vec<Expr> = Vec::new();
    let mut out = Vec::new();
    for (scope, node) in scopes.iter().zip(&nodes) {
        let reads = |input: &LogicalPlan| scan_under(input).is_some_and(|s| std::ptr::eq(s, *node));
        let mut strs = str_columns_over(plan, scope, &planned.query, &reads)?;
        for s in &mut strs {
            let k = match calls.iter().position(|c| *c == s.call) {
                Some(k) => k,
                None => {
                    calls.push(s.call.clone());
                    calls.len() - 1
                }
            };
            s.name = format!("__ebql_str{k}");
        }
        out.push(strs);
    }
    Ok(out)
}

/// Replaces every call of `strs` (by `scans` index) in `remainder`, whose
/// scans are already the branches' rows, by its branch column.
pub(super) fn replace_calls(
    mut remainder: LogicalPlan,
    scans: &[TableScan],
    strs: &[Vec<StrColumn>],
) -> Result<LogicalPlan, CompileError> {
    let mut tables: Vec<&str> = scans.iter().map(|s| s.table_name.table()).collect();
    tables.sort_unstable();
    tables.dedup();
    for table in tables {
        let mut of_table: Vec<StrColumn> = Vec::new();
        for (scan, branch) in scans.iter().zip(strs) {
            if scan.table_name.table() != table {
                continue;
            }
            for s in branch {
                if !of_table.iter().any(|t| t.name == s.name) {
                    of_table.push(s.clone());
                }
            }
        }
        remainder = replace_str_calls(remainder, &of_table, table)?;
    }
    Ok(remainder)
}
