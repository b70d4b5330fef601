//! The kernel/user split (thesis §3.4.1): the event scan with its pushed-down
//! filters always runs in the kernel; the aggregate directly above it does too
//! when every group key and aggregate argument compiles. Everything above the
//! kernel part is a DataFusion plan run in user space on each window's rows.
//!
//! [`plan`] holds what the split produces, [`parts`] its steps (shared with
//! the pairing, [`crate::pair`]).

pub mod latest;
pub mod parts;
pub mod plan;

pub(crate) use parts::inline_to_stream;
pub use plan::{
    Branch, GroupKey, GroupSpec, KernelOutput, KernelPlan, Split, ValueSrc, KERNEL_INPUT,
    MAX_VALUE_BYTES,
};

use crate::diag::Diagnostic;
use crate::error::CompileError;
use crate::kexpr::Scope;
use crate::planner::{Planned, WindowInput};
use datafusion::arrow::datatypes::{Field, Schema};
use datafusion::catalog::default_table_source::provider_as_source;
use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::logical_expr::{LogicalPlan, LogicalPlanBuilder};
use parts::{
    column_value, finish, internal, kernel_aggregate, over_scan, placeholder, replace_node,
    replace_str_calls, scan_filters, str_columns,
};
use std::sync::Arc;

/// Splits a planned query.
pub fn split(planned: &Planned) -> Result<Split, CompileError> {
    // Exactly one event scan.
    let mut scans = Vec::new();
    planned
        .plan
        .apply(|n| {
            if let LogicalPlan::TableScan(s) = n {
                scans.push(s.clone());
            }
            Ok(TreeNodeRecursion::Continue)
        })
        .map_err(|e| internal(e.to_string()))?;
    if scans.len() == 2 && crate::pair::is_pairing(planned) {
        return crate::pair::split_pair(planned, &scans);
    }
    if scans.len() > 1 {
        return crate::multi::split_multi(planned, &scans);
    }
    if scans.is_empty() {
        return Err(internal("a query without an event scan"));
    }
    let scan = &scans[0];
    let table = scan.table_name.table().to_string();
    let (event, table_schema) = parts::scan_event(planned, scan)?;
    let scope = Scope {
        event: &event,
        schema: &table_schema,
        start: None,
    };

    let filters = scan_filters(scan, &scope)?;

    let window = planned.prepared.window;
    let mut user_ops = Vec::new();

    // An aggregate directly over the scan (through projections) goes to the kernel if it compiles.
    let kernel_agg = kernel_aggregate(planned, &scope, over_scan, &mut user_ops)?;

    let (kernel, kernel_schema, input, remainder) = match kernel_agg {
        Some((agg_node, spec)) => {
            let (kernel_schema, input, placeholder) = placeholder(agg_node.schema())?;
            let remainder = replace_node(&planned.plan, &agg_node, placeholder)?;
            let kernel = KernelPlan {
                event: event.clone(),
                filters,
                output: KernelOutput::Groups(spec),
                window,
                pair: None,
                hooks: Vec::new(),
                branch: None,
                branches: Vec::new(),
            };
            (kernel, kernel_schema, input, remainder)
        }
        None => {
            let projected = scan.projected_schema.clone();
            let mut columns = Vec::new();
            for f in projected.fields() {
                let value = column_value(f.name(), &event).map_err(|why| {
                    CompileError::Query(
                        Diagnostic::new(
                            format!("column '{}' cannot be read in the kernel: {why}", f.name()),
                            crate::planner::find_word(&planned.query, f.name()),
                        )
                        .with_hint("arrays other than char arrays are not supported yet"),
                    )
                })?;
                columns.push((f.name().clone(), value, f.data_type().clone()));
            }
            // Strings read through pointers are streamed as columns of their own.
            let strs = str_columns(&planned.plan, &scope, &planned.query)?;
            let mut fields: Vec<Field> = projected
                .as_arrow()
                .fields()
                .iter()
                .map(|f| f.as_ref().clone())
                .collect();
            for s in &strs {
                columns.push((s.name.clone(), s.value.clone(), s.data_type.clone()));
                fields.push(Field::new(&s.name, s.data_type.clone(), s.value.nullable()));
            }
            let kernel_schema = Arc::new(Schema::new(fields));
            let input = Arc::new(WindowInput::new(kernel_schema.clone()));
            // The name as is (a &str would be parsed as SQL and lowercased: `ReadyForQuery`).
            let scan_plan = LogicalPlanBuilder::scan(
                datafusion::common::TableReference::bare(table.as_str()),
                provider_as_source(input.clone()),
                None,
            )
            .map_err(|e| internal(e.to_string()))?
            .build()
            .map_err(|e| internal(e.to_string()))?;
            let remainder = replace_node(
                &planned.plan,
                &LogicalPlan::TableScan(scan.clone()),
                scan_plan,
            )?;
            let remainder = replace_str_calls(remainder, &strs, &table)?;
            let count_window = matches!(window, Some(crate::prepass::WindowSpec::Count { .. }));
            let latest = match latest::latest_keys(
                &planned.plan,
                planned.mode,
                count_window,
                &scope,
            ) {
                Ok(Some(keys)) => {
                    user_ops.retain(|op| !op.starts_with("Aggregate in user space"));
                    user_ops.push("DISTINCT ON: the kernel keeps the latest record per window, key and CPU; the aggregate picks the latest of the CPUs' records".into());
                    Some(keys)
                }
                Ok(None) => None,
                Err(why) => {
                    user_ops.push(format!("DISTINCT ON in user space: {why}"));
                    None
                }
            };
            let kernel = KernelPlan {
                event: event.clone(),
                filters,
                output: KernelOutput::Stream { columns, latest },
                window,
                pair: None,
                hooks: Vec::new(),
                branch: None,
                branches: Vec::new(),
            };
            (kernel, kernel_schema, input, remainder)
        }
    };

    finish(planned, kernel, kernel_schema, input, remainder, user_ops)
}
