//! A user-space plan that only picks and renames its input's columns
//! (`SELECT a, b AS c FROM …` with nothing computed): each batch is built
//! from the input's arrays directly, without a DataFusion run (planning and
//! executing a plan costs ~100 µs per window or emission, 6% of a busy
//! capture's CPU in a profile of issue 21's wire capture).

use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::Column;
use datafusion::logical_expr::{Expr, LogicalPlan};
use std::sync::Arc;

/// The output of a plan as columns of the rows of its one table scan.
#[derive(Debug, Clone)]
pub(super) struct PassThrough {
    /// The plan's output schema (names, types, nullability, metadata).
    schema: SchemaRef,
    /// Each output column's index in the scanned table's rows.
    columns: Vec<usize>,
}

impl PassThrough {
    /// The pass-through of `plan`, when every output column is a scanned
    /// column through projections, aliases and subquery aliases only;
    /// `None` otherwise (a filter, an expression, a sort, a limit …).
    pub(super) fn of(plan: &LogicalPlan) -> Option<PassThrough> {
        let schema = plan.schema();
        let columns = (0..schema.fields().len())
            .map(|i| scan_index(plan, &Column::from(schema.qualified_field(i))))
            .collect::<Option<Vec<_>>>()?;
        Some(PassThrough {
            schema: Arc::new(schema.as_arrow().clone()),
            columns,
        })
    }

    /// Each output column's (name, index in the scanned rows).
    pub(super) fn columns(&self) -> impl Iterator<Item = (&str, usize)> {
        self.schema
            .fields()
            .iter()
            .zip(&self.columns)
            .map(|(f, i)| (f.name().as_str(), *i))
    }

    /// The plan's output for the scanned rows `rows` (batches of one
    /// schema), or `None` when they do not fit the plan's schema (a type
    /// differs, or a non-nullable column holds NULLs): then the caller runs
    /// the plan.
    pub(super) fn apply(&self, rows: &[RecordBatch]) -> Option<RecordBatch> {
        let Some(first) = rows.first() else {
            return Some(RecordBatch::new_empty(self.schema.clone()));
        };
        let input = if rows.len() == 1 {
            first.clone()
        } else {
            datafusion::arrow::compute::concat_batches(&first.schema(), rows).ok()?
        };
        let arrays = self
            .columns
            .iter()
            .map(|&i| (i < input.num_columns()).then(|| input.column(i).clone()))
            .collect::<Option<Vec<_>>>()?;
        RecordBatch::try_new(self.schema.clone(), arrays).ok()
    }
}

/// The scanned rows' column that `column` of `plan`'s output is.
fn scan_index(plan: &LogicalPlan, column: &Column) -> Option<usize> {
    let i = plan.schema().index_of_column(column).ok()?;
    match plan {
        LogicalPlan::Projection(p) => match p.expr.get(i)?.clone().unalias() {
            Expr::Column(c) => scan_index(&p.input, &c),
            _ => None,
        },
        LogicalPlan::SubqueryAlias(a) => {
            scan_index(&a.input, &Column::from(a.input.schema().qualified_field(i)))
        }
        LogicalPlan::TableScan(t) if t.filters.is_empty() && t.fetch.is_none() => Some(
            t.projection
                .as_ref()
                .map_or(Some(i), |p| p.get(i).copied())?,
        ),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::{Int64Array, StringArray};
    use datafusion::arrow::datatypes::{DataType, Field, Schema};
    use datafusion::logical_expr::{col, lit, LogicalPlanBuilder};
    use datafusion::prelude::SessionContext;

    fn plan(sql: &str) -> LogicalPlan {
        let ctx = SessionContext::new();
        let schema = Schema::new(vec![
            Field::new("a", DataType::Int64, false),
            Field::new("b", DataType::Utf8, true),
        ]);
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        rt.block_on(async {
            ctx.register_batch("t", RecordBatch::new_empty(Arc::new(schema)))
                .unwrap();
            ctx.sql(sql).await.unwrap().into_optimized_plan().unwrap()
        })
    }

    fn rows() -> RecordBatch {
        let schema = Schema::new(vec![
            Field::new("a", DataType::Int64, false),
            Field::new("b", DataType::Utf8, true),
        ]);
        RecordBatch::try_new(
            Arc::new(schema),
            vec![
                Arc::new(Int64Array::from(vec![1, 2])),
                Arc::new(StringArray::from(vec![Some("x"), None])),
            ],
        )
        .unwrap()
    }

    /// Renamed and reordered columns are read from the rows as they are.
    #[test]
    fn renamed_and_reordered_columns_pass_through() {
        let p = PassThrough::of(&plan("SELECT b AS text, a, a AS again FROM t")).unwrap();
        let names: Vec<(&str, usize)> = p.columns().collect();
        assert_eq!(names, [("text", 1), ("a", 0), ("again", 0)]);
        let out = p.apply(&[rows(), rows()]).unwrap();
        assert_eq!(out.num_rows(), 4);
        assert_eq!(out.schema().field(0).name(), "text");
        assert_eq!(out.column(1).as_ref(), &Int64Array::from(vec![1, 2, 1, 2]));
        assert_eq!(p.apply(&[]).unwrap().num_rows(), 0);
    }

    /// Anything that computes, drops or reorders rows runs in DataFusion.
    #[test]
    fn filters_expressions_and_limits_do_not_pass_through() {
        for sql in [
            "SELECT a FROM t WHERE a > 1",
            "SELECT a + 1 FROM t",
            "SELECT a FROM t LIMIT 1",
            "SELECT a FROM t ORDER BY a",
            "SELECT DISTINCT a FROM t",
        ] {
            assert!(PassThrough::of(&plan(sql)).is_none(), "{sql}");
        }
        let built = LogicalPlanBuilder::values(vec![vec![lit(1i64)]])
            .unwrap()
            .project(vec![col("column1")])
            .unwrap()
            .build()
            .unwrap();
        assert!(PassThrough::of(&built).is_none(), "{built}");
    }
}
