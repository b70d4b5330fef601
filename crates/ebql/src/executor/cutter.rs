//! [`CountCutter`]: count windows over streamed rows, cut n rows at a time
//! after the user-space part of the WHERE.

use super::userplan::run_plan;
use crate::error::Result;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::logical_expr::LogicalPlan;
use datafusion::prelude::SessionContext;
use ebql_compiler::planner::WindowInput;

/// Count windows over streamed rows (thesis: a window of n events that passed
/// the filter): runs the user-space part of the WHERE, if any, on rows as they
/// arrive and keeps those that pass, in arrival order, to be cut n at a time.
pub(super) struct CountCutter {
    filter: Option<LogicalPlan>,
    passed: std::collections::VecDeque<RecordBatch>,
    rows: usize,
}

impl CountCutter {
    pub(super) fn new(filter: Option<LogicalPlan>) -> CountCutter {
        CountCutter {
            filter,
            passed: Default::default(),
            rows: 0,
        }
    }

    /// Filters `batch` (read through `input` by the filter plan) and keeps what passes.
    pub(super) fn push(
        &mut self,
        rt: &tokio::runtime::Runtime,
        ctx: &SessionContext,
        input: &WindowInput,
        batch: RecordBatch,
    ) -> Result<()> {
        let passed = match &self.filter {
            Some(filter) => run_plan(rt, ctx, input, vec![batch], filter)?,
            None => vec![batch],
        };
        for b in passed.into_iter().filter(|b| b.num_rows() > 0) {
            self.rows += b.num_rows();
            self.passed.push_back(b);
        }
        Ok(())
    }

    /// Rows waiting.
    pub(super) fn len(&self) -> usize {
        self.rows
    }

    /// The next `n` rows (fewer if fewer wait).
    pub(super) fn take(&mut self, n: usize) -> Vec<RecordBatch> {
        let mut out = Vec::new();
        let mut need = n;
        while need > 0 {
            let Some(b) = self.passed.pop_front() else {
                break;
            };
            if b.num_rows() <= need {
                need -= b.num_rows();
                self.rows -= b.num_rows();
                out.push(b);
            } else {
                out.push(b.slice(0, need));
                self.passed.push_front(b.slice(need, b.num_rows() - need));
                self.rows -= need;
                need = 0;
            }
        }
        out
    }
}
