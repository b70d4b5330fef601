//! The split's half of `DISTINCT ON` ([`crate::latest`]): the aggregate
//! DataFusion plans for it, found over the event's scan, becomes the
//! kernel's latest-record table.

use super::parts::{group_keys, inline_projections, over_scan};
use super::plan::GroupKey;
use crate::kexpr::Scope;
use crate::latest::is_time;
use crate::planner::PlanMode;
use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::logical_expr::{Aggregate, Expr, LogicalPlan, SortExpr};

/// The keys of the latest-record table for the plan's aggregate, when the
/// kernel can keep one: an aggregate directly over the event's scan
/// (through projections) whose every output is `first_value(x ORDER BY
/// [keys…,] time DESC)` or `last_value(x ORDER BY [keys…,] time)`, with
/// keys that compile, in the kernel plan mode, without a count window
/// (whose windows count events, not records). `Err`: why not, for an
/// aggregate of that shape; `Ok(None)`: no such aggregate.
pub(crate) fn latest_keys(
    plan: &LogicalPlan,
    mode: PlanMode,
    count_window: bool,
    scope: &Scope,
) -> Result<Option<Vec<GroupKey>>, String> {
    let mut agg = None;
    let _ = plan.apply(|n| {
        if let LogicalPlan::Aggregate(a) = n {
            if over_scan(&a.input) {
                agg = Some(a.clone());
            }
        }
        Ok(TreeNodeRecursion::Continue)
    });
    let Some(agg) = agg.filter(|a| mode == PlanMode::Kernel && keeps_latest(a, scope)) else {
        return Ok(None);
    };
    if count_window {
        return Err("DISTINCT ON under a count window: the kernel streams every event, user space keeps the latest".into());
    }
    let mut keys = group_keys(&agg, scope)?;
    // The CPU is an ordinary key here: the table is read record by record.
    keys.iter_mut().for_each(|k| k.per_cpu = false);
    Ok(Some(keys))
}

/// Every output of `agg` is its group's latest value of some expression.
fn keeps_latest(agg: &Aggregate, scope: &Scope) -> bool {
    !agg.aggr_expr.is_empty()
        && agg.aggr_expr.iter().all(|a| {
            let Expr::AggregateFunction(f) = a.clone().unalias() else {
                return false;
            };
            let p = &f.params;
            let latest_first = match f.func.name() {
                "first_value" => true,
                "last_value" => false,
                _ => return false,
            };
            let order: Vec<&SortExpr> = p
                .order_by
                .iter()
                .filter(|s| !agg.group_expr.contains(&s.expr))
                .collect();
            p.filter.is_none()
                && !p.distinct
                && matches!(order.as_slice(), [s] if s.asc != latest_first && is_time_expr(&s.expr, agg, scope))
        })
}

fn is_time_expr(e: &Expr, agg: &Aggregate, scope: &Scope) -> bool {
    match inline_projections(e, &agg.input) {
        Ok(Expr::Column(c)) => is_time(scope.event, &c.name),
        _ => false,
    }
}
