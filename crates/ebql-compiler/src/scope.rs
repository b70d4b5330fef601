//! The processes a query sees (`ebql query -p PID`, `-c CMD`, `--cgroup`):
//! every event the query reads is filtered to them, as if its WHERE said
//! `pid = N` (or `cgroup = N`) for each event, so the filter is pushed into
//! the kernel like one the user wrote: first among the probe's filters, and
//! uprobes attach to that process only.

use crate::diag::Diagnostic;
use crate::error::CompileError;
use crate::prepass::Prepared;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{Column, ScalarValue};
use datafusion::logical_expr::{col, lit, Filter, LogicalPlan};
use ebql_catalog::{EventSchema, SystemAttr};
use std::collections::HashMap;
use std::sync::Arc;

/// Which processes' events a query sees.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProcessScope {
    /// One process and its threads: `pid` (the thread group id, in the
    /// initial pid namespace, as `bpf_get_current_pid_tgid` gives it) is N.
    Pid(u32),
    /// The tasks of one cgroup v2 directory (not its descendants): `cgroup`
    /// (`bpf_get_current_cgroup_id`, the directory's inode number) is N.
    Cgroup(u64),
}

impl ProcessScope {
    fn attr(self) -> SystemAttr {
        match self {
            ProcessScope::Pid(_) => SystemAttr::Pid,
            ProcessScope::Cgroup(_) => SystemAttr::Cgroup,
        }
    }

    fn value(self) -> u64 {
        match self {
            ProcessScope::Pid(n) => n as u64,
            ProcessScope::Cgroup(n) => n,
        }
    }

    fn flag(self) -> &'static str {
        match self {
            ProcessScope::Pid(_) => "-p/-c",
            ProcessScope::Cgroup(_) => "--cgroup/--follow",
        }
    }
}

/// `plan` with a filter on `scope` over every event table it scans
/// (`events`: the query's events by table name).
///
/// Errors: a bad query (pointing at the event) when an event has no such
/// attribute: TC packets are not in a process's context.
pub(crate) fn apply(
    plan: LogicalPlan,
    scope: ProcessScope,
    events: &HashMap<String, EventSchema>,
    prepared: &Prepared,
) -> Result<LogicalPlan, CompileError> {
    let attr = scope.attr();
    plan.transform_up(|node| {
        let LogicalPlan::TableScan(scan) = &node else {
            return Ok(Transformed::no(node));
        };
        let table = scan.table_name.table().to_string();
        let Some(event) = events.get(&table) else {
            return Ok(Transformed::no(node));
        };
        if !event.attrs.contains(&attr) {
            let span = prepared
                .events
                .iter()
                .find(|r| r.table == table)
                .map(|r| r.span.clone());
            return Err(datafusion::error::DataFusionError::External(Box::new(
                ScopeError(
                    Diagnostic::new(
                        format!("{}: `{table}` has no `{}`", scope.flag(), attr.name()),
                        span,
                    )
                    .with_hint("its events are not in a process's context (TC sees packets); trace another event or drop the flag"),
                ),
            )));
        }
        // A field of the same name shadows the attribute (`sys_pid` reaches it).
        let name = if event.field(attr.name()).is_some() {
            format!("sys_{}", attr.name())
        } else {
            attr.name().to_string()
        };
        let column = Column::new(Some(scan.table_name.clone()), &name);
        let ty = scan
            .projected_schema
            .qualified_field_from_column(&column)?
            .1
            .data_type()
            .clone();
        let value = ScalarValue::UInt64(Some(scope.value())).cast_to(&ty)?;
        let filter = Filter::try_new(col(column).eq(lit(value)), Arc::new(node))?;
        Ok(Transformed::yes(LogicalPlan::Filter(filter)))
    })
    .map(|t| t.data)
    .map_err(|e| match e {
        datafusion::error::DataFusionError::External(b) if b.is::<ScopeError>() => {
            CompileError::Query(b.downcast::<ScopeError>().expect("checked").0)
        }
        other => CompileError::Internal(format!("scoping the query to a process: {other}")),
    })
}

/// A bad query found while rewriting the plan (carried through DataFusion's error).
#[derive(Debug)]
struct ScopeError(Diagnostic);

impl std::fmt::Display for ScopeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", self.0)
    }
}

impl std::error::Error for ScopeError {}
