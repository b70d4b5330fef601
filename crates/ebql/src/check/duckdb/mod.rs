//! The oracle's second reference: DuckDB evaluates the query's standard SQL
//! over the same tap rows, window by window. DataFusion, the first
//! reference, shares eBQL's planner: an optimizer rewrite that is wrong in
//! the kernel is wrong in it too (issue 19: `CAST(args[1] AS BIGINT) < 0`
//! unwrapped to `args[1] < 0`). DuckDB shares no code with it: the SQL
//! reaches it from sqlparser (`sql`), the rows as Arrow IPC (`engine`).
//!
//! Where the engines' semantics differ, eBQL's are the ones compared (README,
//! "Semantics"): integer `/` truncates (DuckDB's `integer_division`);
//! integer results are compared by value, not type (DuckDB sums into
//! HUGEINT, eBQL into the argument's type, so a sum that overflows it
//! disagrees); DuckDB raises where integer arithmetic overflows or shifts
//! by the width or more and eBQL wraps, which leaves DuckDB's verdict
//! inconclusive and the window to DataFusion's, and its optimizer rewrites
//! arithmetic so that it cannot overflow (`a - b < 0` as `a < b`), so a
//! disagreement of DuckDB alone on a query with `+`, `-` or `*` of values is
//! inconclusive too (DataFusion's verdict stands); `^` is XOR in eBQL, power in
//! DuckDB (sent as `xor()`); NULLs sort last in DuckDB and first under DESC in
//! DataFusion, which only a LIMIT can see (inconclusive anyway, like ties).

mod engine;
mod sql;

pub use engine::{DuckDb, Failure, TapBranch};
pub use sql::{duckdb_query, duckdb_query_several, DuckDbQuery};

use super::compare::{compare_rows, CheckOptions, CheckedWindow, Verdict};
use datafusion::arrow::array::{Array, ArrayRef};
use datafusion::arrow::compute::{cast_with_options, CastOptions};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::arrow::record_batch::RecordBatch;
use std::sync::Arc;

/// How DuckDB took part in a check (printed by `ebql check`).
#[derive(Debug, Clone, PartialEq)]
pub enum SecondReference {
    /// Every window was also evaluated by this DuckDB version.
    Used(String),
    /// Not used, and why.
    NotUsed(String),
}

/// The tap's branches of a query over several events
/// (`ebql_compiler::multi`), in program order: each scan of the
/// reference plan (in the plan's pre-order, the split's order) is the
/// branch of its index, whose tap columns are named `{index}.{column}`.
/// Empty for a query over one event.
pub(crate) fn tap_branches(reference: &ebql_compiler::check::Reference) -> Vec<TapBranch> {
    use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
    use datafusion::logical_expr::LogicalPlan;
    let tap = datafusion::datasource::TableProvider::schema(reference.input.as_ref());
    if reference.pairing.is_some()
        || tap
            .field_with_name(ebql_compiler::multi::BRANCH_COLUMN)
            .is_err()
    {
        return Vec::new();
    }
    let mut tables = Vec::new();
    let _ = reference.planned.plan.apply(|n| {
        if let LogicalPlan::TableScan(s) = n {
            tables.push(s.table_name.table().to_string());
        }
        Ok(TreeNodeRecursion::Continue)
    });
    tables
        .into_iter()
        .enumerate()
        .map(|(i, table)| {
            let prefix = ebql_compiler::multi::branch_column(i, "");
            let columns = tap
                .fields()
                .iter()
                .filter_map(|f| {
                    let name = f.name().strip_prefix(&prefix)?;
                    Some((f.name().clone(), name.to_string()))
                })
                .collect();
            TapBranch {
                table,
                index: i as u64,
                columns,
            }
        })
        .collect()
}

/// The DuckDB session of a running check.
pub(crate) struct Second {
    db: DuckDb,
    /// [`DuckDbQuery::wraps`]: DuckDB's disagreements alone are inconclusive.
    wraps: bool,
}

impl Second {
    /// Starts DuckDB for `standard_sql` over the tap (`tap` schema, its
    /// columns named `columns`), or says why not.
    pub(crate) fn start(
        standard_sql: &str,
        tap: &SchemaRef,
        columns: &[String],
        paired: bool,
    ) -> Result<Second, String> {
        let q = duckdb_query(standard_sql, columns, paired)?;
        DuckDb::start(&q.sql, &q.table, tap, columns, &[]).map(|db| Second { db, wraps: q.wraps })
    }

    /// [`Second::start`] for a query over several events: `branches` are
    /// the tap's branches in program order; an event scanned twice is read
    /// from its first branch, which taps every event of it as the other does.
    ///
    /// Errors (why DuckDB does not take part): the query reads a table that
    /// is no branch's event, or one event's branches tap different columns.
    pub(crate) fn start_several(
        standard_sql: &str,
        tap: &SchemaRef,
        branches: &[TapBranch],
    ) -> Result<Second, String> {
        let mut names: Vec<String> = Vec::new();
        for b in branches {
            for (_, name) in &b.columns {
                if !names.contains(name) {
                    names.push(name.clone());
                }
            }
        }
        let q = duckdb_query_several(standard_sql, &names)?;
        let mut tables: Vec<TapBranch> = Vec::new();
        for table in &q.tables {
            let mut of_table = branches.iter().filter(|b| b.table == *table);
            let first = of_table
                .next()
                .ok_or_else(|| format!("it reads `{table}`, which is not an event it taps"))?;
            if of_table.any(|b| {
                b.columns
                    .iter()
                    .map(|c| &c.1)
                    .ne(first.columns.iter().map(|c| &c.1))
            }) {
                return Err(format!(
                    "the event `{table}` is read twice with different columns"
                ));
            }
            tables.push(first.clone());
        }
        let columns: Vec<String> = tap.fields().iter().map(|f| f.name().clone()).collect();
        DuckDb::start(&q.sql, "", tap, &columns, &tables).map(|db| Second { db, wraps: q.wraps })
    }

    /// The DuckDB version in use.
    pub(crate) fn version(&self) -> &str {
        &self.db.version
    }

    /// DuckDB's verdict on one window: its result over the window's tap rows
    /// against the kernel's, by value.
    pub(crate) fn verdict(
        &mut self,
        w: &CheckedWindow,
        opts: &CheckOptions,
        bounds: &[Option<f64>],
    ) -> (usize, Verdict) {
        let skip = w.bound_columns();
        let ran = self.db.run(&w.tap);
        if let Some(k) = &w.kernel_error {
            // DuckDB sums into 128 bits and raises where eBQL's remainder
            // fails: a failure of both agrees; rows against the kernel's
            // failure decide nothing (DuckDB's SUM does not fail either).
            return match ran {
                Err(Failure::Query(_)) => (0, Verdict::Agree),
                Ok(result) => (
                    result.num_rows(),
                    Verdict::Inconclusive {
                        reason: format!(
                            "the kernel's window failed where DuckDB gave {} row(s): {}",
                            result.num_rows(),
                            k.cause
                        ),
                    },
                ),
                Err(Failure::Engine(why)) => (
                    0,
                    Verdict::Inconclusive {
                        reason: format!("DuckDB gave no answer: {why}"),
                    },
                ),
            };
        }
        match ran {
            Ok(result) => {
                let rows = result.num_rows();
                let reference = match like_kernel(&result, &w.kernel, skip, w) {
                    Ok(b) => b,
                    Err(e) => {
                        return (
                            rows,
                            Verdict::Inconclusive {
                                reason: format!("DuckDB's result cannot be compared: {e}"),
                            },
                        )
                    }
                };
                let mut theirs = w.clone();
                theirs.reference = reference;
                theirs.reference_error = None;
                match compare_rows(&theirs, opts, bounds, false) {
                    // eBQL (DataFusion) types a mix of signed and unsigned
                    // 64-bit integers as DECIMAL, where DuckDB keeps an
                    // integer type: `/` then divides exactly in one and
                    // truncates in the other. eBQL has no decimal columns
                    // of its own, so a decimal result is such a mix.
                    Verdict::Disagree { .. } if has_decimal(&w.kernel, skip) => (
                        rows,
                        Verdict::Inconclusive {
                            reason: "a DECIMAL result: eBQL types a mix of signed and unsigned 64-bit integers as DECIMAL, DuckDB as an integer (their division differs)".into(),
                        },
                    ),
                    // Only DataFusion, which wraps as the kernel does, can tell.
                    Verdict::Disagree { .. } if self.wraps => (
                        rows,
                        Verdict::Inconclusive {
                            reason: "integer arithmetic: eBQL wraps it, DuckDB computes it exactly (or rewrites it away: `a - b < 0` as `a < b`)".into(),
                        },
                    ),
                    v => (rows, v),
                }
            }
            // Overflowing arithmetic and shifts by the width or more, or of
            // negative numbers: DuckDB raises, eBQL wraps (as DataFusion does).
            Err(Failure::Query(why)) if why.starts_with("Out of Range Error") => (
                0,
                Verdict::Inconclusive {
                    reason: format!(
                        "DuckDB raises where eBQL's integer arithmetic wraps: {}",
                        first_line(&why)
                    ),
                },
            ),
            Err(Failure::Query(why)) => (
                0,
                Verdict::Disagree {
                    diff: format!(
                        "  DuckDB fails on this window's events, the kernel gave {} row(s):\n  {}\n",
                        w.kernel.num_rows(),
                        first_line(&why)
                    ),
                },
            ),
            Err(Failure::Engine(why)) => (
                0,
                Verdict::Inconclusive {
                    reason: format!("DuckDB gave no answer: {why}"),
                },
            ),
        }
    }
}

fn first_line(s: &str) -> &str {
    s.lines().next().unwrap_or_default()
}

/// DuckDB's `result` with the window bounds as leading columns and each
/// column cast to the kernel's type where every value fits it (a value
/// that does not, like a sum past `u64::MAX`, stays as DuckDB typed it and
/// disagrees by value).
fn like_kernel(
    result: &RecordBatch,
    kernel: &RecordBatch,
    skip: usize,
    w: &CheckedWindow,
) -> Result<RecordBatch, datafusion::arrow::error::ArrowError> {
    let n = result.num_rows();
    let mut fields: Vec<Field> = kernel.schema().fields()[..skip]
        .iter()
        .map(|f| f.as_ref().clone())
        .collect();
    let mut cols: Vec<ArrayRef> = Vec::new();
    if let Some((start, end)) = w.window {
        cols.extend(crate::window::bound_arrays(start, end, w.clock.as_ref(), n));
    }
    let kernel_schema = kernel.schema();
    for (i, (field, col)) in result
        .schema()
        .fields()
        .iter()
        .zip(result.columns())
        .enumerate()
    {
        let target = kernel_schema.fields().get(i + skip).map(|f| f.data_type());
        let cast = match target {
            Some(t) if t != col.data_type() && numeric(t) && numeric(col.data_type()) => {
                cast_with_options(col, t, &CastOptions::default())
                    .ok()
                    .filter(|c| c.null_count() == col.null_count())
            }
            _ => None,
        };
        let col = cast.unwrap_or_else(|| col.clone());
        fields.push(Field::new(field.name(), col.data_type().clone(), true));
        cols.push(col);
    }
    RecordBatch::try_new_with_options(
        Arc::new(Schema::new(fields)),
        cols,
        &datafusion::arrow::record_batch::RecordBatchOptions::new().with_row_count(Some(n)),
    )
}

fn numeric(t: &DataType) -> bool {
    t.is_integer() || t.is_floating() || matches!(t, DataType::Decimal128(..))
}

/// Whether a result column (after the `skip` window columns) is a decimal.
fn has_decimal(batch: &RecordBatch, skip: usize) -> bool {
    batch.schema().fields().iter().skip(skip).any(|f| {
        matches!(
            f.data_type(),
            DataType::Decimal128(..) | DataType::Decimal256(..)
        )
    })
}
