//! `DISTINCT ON (keys)`: the most recent event per window and key (the
//! thesis' Distinct operator, Table 1: "eliminates duplicates according to
//! the group by key, preserving the most recent event").
//!
//! Two steps, both on DataFusion's logical plan:
//!
//! 1. [`order_by_recency`], before the optimizer: a `DISTINCT ON` whose
//!    ORDER BY does not choose among a key's rows (none, or only the keys)
//!    gets `time DESC` after the keys. PostgreSQL leaves that row
//!    unspecified; eBQL keeps the latest event, in the kernel and in the
//!    oracle's reference alike. DataFusion then plans the `DISTINCT ON` as
//!    an aggregate per key of `first_value(x ORDER BY …, time DESC)`.
//! 2. `split::latest::latest_keys`, in the split: such an aggregate directly over the
//!    event's scan (every filter pushed into the kernel) lets the kernel
//!    keep, per window and key, only the latest record on each CPU
//!    ([`crate::codegen`]'s latest-record table) instead of streaming every
//!    event. The aggregate stays in the user-space plan, where it picks the
//!    latest of the CPUs' records: the kernel's table only removes rows
//!    the aggregate would not pick, so the answer is the same, exactly.

use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::Column;
use datafusion::logical_expr::{Distinct, DistinctOn, Expr, LogicalPlan, SortExpr};
use ebql_catalog::{Column as EventColumn, EventSchema, SystemAttr};
use std::collections::HashMap;
use std::sync::Arc;

/// `plan` with every `DISTINCT ON` that leaves the row of a key unchosen
/// ordered by `time DESC` after its keys (see the module doc). `events`:
/// the query's events by table name; a `DISTINCT ON` over anything but one
/// event's columns is left as it is.
pub(crate) fn order_by_recency(
    plan: LogicalPlan,
    events: &HashMap<String, EventSchema>,
) -> datafusion::error::Result<LogicalPlan> {
    plan.transform_up(|node| {
        let LogicalPlan::Distinct(Distinct::On(on)) = &node else {
            return Ok(Transformed::no(node));
        };
        let chooses = on
            .sort_expr
            .iter()
            .flatten()
            .any(|s| !on.on_expr.contains(&s.expr));
        // A key of `time` leaves nothing to choose (and DataFusion's
        // first_value refuses an ORDER BY naming it twice).
        let Some(time) = time_column(&on.input, events)
            .filter(|t| !chooses && !on.on_expr.contains(&Expr::Column(t.clone())))
        else {
            return Ok(Transformed::no(node));
        };
        let mut sort: Vec<SortExpr> = match &on.sort_expr {
            Some(s) => s.clone(),
            None => on
                .on_expr
                .iter()
                .map(|e| e.clone().sort(true, false))
                .collect(),
        };
        sort.push(Expr::Column(time).sort(false, false));
        let ordered = DistinctOn::try_new(
            on.on_expr.clone(),
            on.select_expr.clone(),
            Some(sort),
            Arc::clone(&on.input),
        )?;
        Ok(Transformed::yes(LogicalPlan::Distinct(Distinct::On(
            ordered,
        ))))
    })
    .map(|t| t.data)
}

/// The one column of `input` that is an event's `time` attribute
/// (`sys_time` where a field named `time` shadows it).
fn time_column(input: &LogicalPlan, events: &HashMap<String, EventSchema>) -> Option<Column> {
    let mut found = input.schema().columns().into_iter().filter(|c| {
        let event = c.relation.as_ref().and_then(|r| events.get(r.table()));
        event.is_some_and(|e| is_time(e, &c.name))
    });
    let time = found.next()?;
    found.next().is_none().then_some(time)
}

/// `name` is `event`'s `time` attribute.
pub(crate) fn is_time(event: &EventSchema, name: &str) -> bool {
    matches!(
        event.resolve(name),
        Some(EventColumn::Attr(SystemAttr::Time))
    )
}
