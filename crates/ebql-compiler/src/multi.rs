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

use crate::diag::Diagnostic;
use crate::error::CompileError;
use crate::kexpr::{KExpr, Scope};
use crate::planner::{event_arrow_schema, Planned, WindowInput};
use crate::prepass::WindowSpec;
use crate::split::parts::{
    column_value, finish, internal, is_str_call, replace_node, scan_filters,
};
use crate::split::plan::{Branch, KernelOutput, KernelPlan, Split, ValueSrc, KERNEL_INPUT};
use datafusion::arrow::datatypes::{DataType, Field, Schema};
use datafusion::catalog::default_table_source::provider_as_source;
use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::common::{Column, DFSchema, TableReference};
use datafusion::logical_expr::{lit, Expr, LogicalPlan, LogicalPlanBuilder, TableScan};
use std::sync::Arc;

pub use crate::split::plan::BRANCH_COLUMN;

/// The name of branch `i`'s column `name` in the stream.
pub fn branch_column(i: usize, name: &str) -> String {
    format!("{i}.{name}")
}

fn refuse(planned: &Planned, what: impl Into<String>, hint: &str) -> CompileError {
    let span = planned.prepared.events.get(1).map(|e| e.span.clone());
    CompileError::Query(Diagnostic::new(what, span).with_hint(hint))
}

/// Splits a query over the event scans `scans` (two or more, in plan
/// order) into one kernel plan per scan, the first holding the others in
/// [`KernelPlan::branches`], and the user-space plan over their stream.
///
/// Errors: a `Query` error for what this does not run yet (count windows;
/// strings and loads read through pointers, which only a program can read).
pub(crate) fn split_multi(planned: &Planned, scans: &[TableScan]) -> Result<Split, CompileError> {
    if matches!(planned.prepared.window, Some(WindowSpec::Count { .. })) {
        return Err(refuse(
            planned,
            "count windows over several events are not supported",
            "use a time window: WINDOW(time, size_ms, step_ms)",
        ));
    }
    let mut reads_pointers = false;
    planned
        .plan
        .apply(|n| {
            for e in n.expressions() {
                reads_pointers |= e.exists(|x| Ok(is_str_call(x)))?;
            }
            Ok(TreeNodeRecursion::Continue)
        })
        .map_err(|e| internal(e.to_string()))?;
    if reads_pointers {
        return Err(refuse(
            planned,
            "str(), bytes() and loads through pointers in a query over several events are not supported yet",
            "read the strings in a query over one event, or use fixed-size fields (comm, char arrays)",
        ));
    }
    let window = planned.prepared.window;
    let mut columns: Vec<(String, ValueSrc, DataType)> = vec![(
        BRANCH_COLUMN.to_string(),
        ValueSrc::Int(KExpr::Const(0, crate::contract::IntType::U64)),
        DataType::UInt64,
    )];
    let mut fields = vec![Field::new(BRANCH_COLUMN, DataType::UInt64, false)];
    let mut plans = Vec::new();
    for (i, scan) in scans.iter().enumerate() {
        let table = scan.table_name.table().to_string();
        let event = planned
            .events
            .get(&table)
            .ok_or_else(|| internal(format!("scan of unknown table {table}")))?
            .clone();
        let table_schema = DFSchema::try_from_qualified_schema(
            TableReference::bare(table.as_str()),
            &event_arrow_schema(&event),
        )
        .map_err(|e| internal(e.to_string()))?;
        let scope = Scope {
            event: &event,
            schema: &table_schema,
            start: None,
        };
        let filters = scan_filters(scan, &scope)?;
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
            branch_rows(&input, i, scan)?,
        )?;
    }
    let user_ops = vec![format!(
        "{} events, one program each, into one stream: the plan runs in user space over each window's rows",
        scans.len()
    )];
    let mut kernel = plans.remove(0);
    kernel.branches = plans;
    finish(planned, kernel, kernel_schema, input, remainder, user_ops)
}

/// Branch `i`'s rows of the stream, with `scan`'s columns (names and
/// qualifier), in place of the scan.
fn branch_rows(
    input: &Arc<WindowInput>,
    i: usize,
    scan: &TableScan,
) -> Result<LogicalPlan, CompileError> {
    let columns = scan.projected_schema.fields().iter().map(|f| {
        Expr::Column(Column::new_unqualified(branch_column(i, f.name())))
            .alias_qualified(Some(scan.table_name.clone()), f.name())
    });
    LogicalPlanBuilder::scan(
        TableReference::bare(KERNEL_INPUT),
        provider_as_source(input.clone()),
        None,
    )
    .and_then(|b| b.filter(Expr::Column(Column::new_unqualified(BRANCH_COLUMN)).eq(lit(i as u64))))
    .and_then(|b| b.project(columns))
    .and_then(|b| b.build())
    .map_err(|e| internal(e.to_string()))
}
