//! The user-space part of a plan: DataFusion runs it on one window's rows
//! at a time, read through the plan's [`WindowInput`] table.

use super::passthrough::PassThrough;
use crate::error::Result;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::logical_expr::LogicalPlan;
use datafusion::prelude::SessionContext;
use ebql_compiler::planner::WindowInput;
use std::sync::Arc;

/// A user-space plan with what runs it: the table its rows are read
/// through, the plan (the query's remainder after the kernel part), and the
/// DataFusion session it was planned in.
pub(super) struct UserPlan {
    /// The table the plan reads; [`run_plan`] fills it with a window's rows.
    pub(super) input: Arc<WindowInput>,
    /// What runs in user space on every window's rows.
    pub(super) remainder: LogicalPlan,
    /// The session the plan was built in (its tables and functions).
    pub(super) ctx: SessionContext,
    /// The remainder as columns of its input, when it only names them.
    direct: Option<PassThrough>,
}

impl UserPlan {
    /// The plan `remainder`, reading `input`, planned in `ctx`.
    pub(super) fn new(
        input: Arc<WindowInput>,
        remainder: LogicalPlan,
        ctx: SessionContext,
    ) -> UserPlan {
        UserPlan {
            direct: PassThrough::of(&remainder),
            input,
            remainder,
            ctx,
        }
    }

    /// [`run_plan_concat`] of the remainder on `rows` (without DataFusion
    /// when the remainder only picks and renames columns: [`PassThrough`]).
    pub(super) fn run_concat(
        &self,
        rt: &tokio::runtime::Runtime,
        rows: Vec<RecordBatch>,
    ) -> Result<RecordBatch> {
        if let Some(out) = self.direct.as_ref().and_then(|d| d.apply(&rows)) {
            return Ok(out);
        }
        run_plan_concat(rt, &self.ctx, &self.input, rows, &self.remainder)
    }
}

/// Runs a user-space `plan` that reads `input` on `rows`.
pub(super) fn run_plan(
    rt: &tokio::runtime::Runtime,
    ctx: &SessionContext,
    input: &WindowInput,
    rows: Vec<RecordBatch>,
    plan: &LogicalPlan,
) -> Result<Vec<RecordBatch>> {
    input.set(rows);
    Ok(rt.block_on(async {
        ctx.execute_logical_plan(plan.clone())
            .await?
            .collect()
            .await
    })?)
}

/// [`run_plan`], its output as one batch of the plan's schema.
pub(super) fn run_plan_concat(
    rt: &tokio::runtime::Runtime,
    ctx: &SessionContext,
    input: &WindowInput,
    rows: Vec<RecordBatch>,
    plan: &LogicalPlan,
) -> Result<RecordBatch> {
    let batches = run_plan(rt, ctx, input, rows, plan)?;
    let schema = Arc::new(plan.schema().as_arrow().clone());
    Ok(datafusion::arrow::compute::concat_batches(
        &schema, &batches,
    )?)
}

/// True if `plan` has a LIMIT (its rows may legitimately differ between
/// two evaluations): a Limit node, or a Sort that keeps its first rows
/// (DataFusion's optimizer folds `ORDER BY … LIMIT n` into `Sort { fetch }`,
/// whose ties may keep different rows).
pub(super) fn plan_has_limit(plan: &LogicalPlan) -> bool {
    use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
    let mut found = false;
    let _ = plan.apply(|n| {
        found |= matches!(n, LogicalPlan::Limit(_))
            || matches!(n, LogicalPlan::Sort(s) if s.fetch.is_some());
        Ok(if found {
            TreeNodeRecursion::Stop
        } else {
            TreeNodeRecursion::Continue
        })
    });
    found
}

#[cfg(test)]
mod tests {
    use super::plan_has_limit;
    use datafusion::logical_expr::{col, lit, LogicalPlanBuilder};

    /// `ORDER BY x LIMIT 2` as the optimizer leaves it (a Sort with a fetch)
    /// counts as a LIMIT: the oracle calls its ties inconclusive (issue 19).
    #[test]
    fn a_sort_with_a_fetch_is_a_limit() {
        let values = LogicalPlanBuilder::values(vec![vec![lit(1i64)], vec![lit(1i64)]])
            .unwrap()
            .build()
            .unwrap();
        let sorted = LogicalPlanBuilder::from(values.clone())
            .sort(vec![col("column1").sort(true, false)])
            .unwrap();
        let plain = sorted.clone().build().unwrap();
        assert!(!plan_has_limit(&plain), "{plain}");
        let top = LogicalPlanBuilder::from(values)
            .sort_with_limit(vec![col("column1").sort(true, false)], Some(2))
            .unwrap()
            .build()
            .unwrap();
        assert!(plan_has_limit(&top), "{top}");
    }
}
