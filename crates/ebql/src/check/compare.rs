//! Comparing one window: the kernel's rows against a reference's, as
//! multisets, exact but for floats (a relative tolerance) and approximate
//! aggregates (their declared bound; approx_top_k's in `compare_topk`).

use super::compare_topk::{self, Shown, TopEntry};
use crate::window::{WindowDrops, WindowError, WindowErrorKind};
use datafusion::arrow::array::{Array, ArrayRef};
use datafusion::arrow::datatypes::DataType;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::arrow::util::display::{ArrayFormatter, FormatOptions};
use std::fmt;

/// Tunables of a check.
#[derive(Debug, Clone, Copy)]
pub struct CheckOptions {
    /// Relative tolerance for floating-point values (default 1e-9).
    pub float_tolerance: f64,
    /// Whether DuckDB evaluates each window too (default: when it can).
    pub duckdb: DuckDbUse,
}

impl Default for CheckOptions {
    fn default() -> Self {
        CheckOptions {
            float_tolerance: 1e-9,
            duckdb: DuckDbUse::Auto,
        }
    }
}

/// One window computed both ways.
#[derive(Debug, Clone)]
pub struct CheckedWindow {
    /// Window bounds (CLOCK_MONOTONIC ns or event ordinals), `None` for an unwindowed query.
    pub window: Option<(u64, u64)>,
    /// The run's wall clock for time windows (their bounds' wall-clock
    /// columns), `None` for count windows and unwindowed queries.
    pub clock: Option<crate::window::WallClock>,
    /// The query's result, as `ebql query` would emit it (no rows when it failed).
    pub kernel: RecordBatch,
    /// The query's window failed (`kernel` has no rows): why.
    pub kernel_error: Option<WindowError>,
    /// DataFusion's result over the tap's raw events of the same window (no rows when it failed).
    pub reference: RecordBatch,
    /// DataFusion's reference failed on this window's events: why.
    pub reference_error: Option<WindowError>,
    /// Events the kernel side or the tap could not record in this window.
    pub drops: WindowDrops,
    /// The query has a LIMIT.
    pub has_limit: bool,
    /// The window's tap rows: what both references evaluate the SQL over.
    pub tap: Vec<RecordBatch>,
    /// Events of a paired query whose pairing depends on an order the tap
    /// cannot show (`Pairer`): a difference is then inconclusive.
    pub unordered: u64,
}

impl CheckedWindow {
    /// How many leading columns of its results are the window's bounds
    /// ([`crate::window::bound_fields`]).
    pub fn bound_columns(&self) -> usize {
        match (self.window, self.clock) {
            (None, _) => 0,
            (Some(_), Some(_)) => 4,
            (Some(_), None) => 2,
        }
    }
}

/// The outcome of comparing one window.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// Both sides give the same rows.
    Agree,
    /// The rows differ: `diff` lists rows only in the kernel's result (`-`) and only in the reference (`+`).
    Disagree {
        /// Human-readable difference.
        diff: String,
    },
    /// The sides differ for an accounted reason (drops, LIMIT without a total order).
    Inconclusive {
        /// Why the difference does not indicate a bug.
        reason: String,
    },
}

/// Whether `ebql check` evaluates the query in DuckDB too.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DuckDbUse {
    /// When the query is standard SQL and `python3` imports `duckdb` and `pyarrow`.
    #[default]
    Auto,
    /// Always: a check whose query DuckDB cannot run, or without DuckDB, fails to start.
    Require,
    /// Never.
    Off,
}

/// A compared window.
#[derive(Debug, Clone)]
pub struct WindowResult {
    /// Window bounds, as in [`CheckedWindow::window`].
    pub window: Option<(u64, u64)>,
    /// Rows the kernel plan produced.
    pub kernel_rows: usize,
    /// Rows the reference produced.
    pub reference_rows: usize,
    /// The comparison's outcome: DataFusion's, or DuckDB's disagreement.
    pub verdict: Verdict,
    /// DuckDB's own verdict on the window, when it took part.
    pub duckdb: Option<Verdict>,
    /// The query's window failed: why (its rows were replaced by this error).
    pub kernel_error: Option<String>,
}

/// A comparable cell: floats keep their value, everything else its display text.
#[derive(Debug, Clone)]
enum Val {
    Null,
    Float(f64),
    /// A value the kernel approximates within this relative error (a quantile).
    Approx(f64, f64),
    /// An approx_top_k list (`compare_topk`).
    TopK(Vec<TopEntry>),
    Text(String),
}

impl Val {
    fn sort_key(&self) -> String {
        match self {
            Val::Null => "\u{0}NULL".into(),
            Val::Float(f) | Val::Approx(f, _) => format!("{f:.6e}"),
            Val::TopK(e) => Shown(e).to_string(),
            Val::Text(t) => t.clone(),
        }
    }

    /// Equal, or within `bound` (relative) for an approximate column's numbers.
    fn same_within(&self, other: &Val, tol: f64, bound: Option<f64>) -> bool {
        if let (Some(b), Val::Text(x), Val::Text(y)) = (bound, self, other) {
            if let (Ok(x), Ok(y)) = (x.parse::<f64>(), y.parse::<f64>()) {
                return (x - y).abs() <= b * x.abs().max(y.abs());
            }
        }
        self.same(other, tol)
    }

    fn same(&self, other: &Val, tol: f64) -> bool {
        match (self, other) {
            (Val::Null, Val::Null) => true,
            (Val::Float(a), Val::Float(b)) => {
                a == b || (a.is_nan() && b.is_nan()) || (a - b).abs() <= tol * a.abs().max(b.abs())
            }
            (Val::Approx(a, bound), Val::Approx(b, _)) => {
                (a - b).abs() <= bound * a.abs().max(b.abs())
            }
            (Val::TopK(kernel), Val::TopK(reference)) => compare_topk::within(kernel, reference),
            (Val::Text(a), Val::Text(b)) => a == b,
            _ => false,
        }
    }
}

impl fmt::Display for Val {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Val::Null => write!(f, "NULL"),
            Val::Float(x) | Val::Approx(x, _) => write!(f, "{x}"),
            Val::TopK(e) => write!(f, "{}", Shown(e)),
            Val::Text(t) => write!(f, "{t}"),
        }
    }
}

/// The values of a column; `approx`: the kernel's relative error bound for
/// it; `top_k`: it is an approx_top_k list.
fn column_vals(col: &ArrayRef, approx: Option<f64>, top_k: bool) -> Vec<Val> {
    if let Some(rows) = top_k.then(|| compare_topk::column(col)).flatten() {
        return rows
            .into_iter()
            .map(|r| r.map_or(Val::Null, Val::TopK))
            .collect();
    }
    let float = matches!(
        col.data_type(),
        DataType::Float16 | DataType::Float32 | DataType::Float64
    );
    if let Some(bound) = approx {
        if let Some(vals) = f64_vals(col, |x| Val::Approx(x, bound)) {
            return vals;
        }
    }
    if float {
        return f64_vals(col, Val::Float).expect("float cast");
    }
    let opts = FormatOptions::default();
    match ArrayFormatter::try_new(col.as_ref(), &opts) {
        Ok(fmt) => (0..col.len())
            .map(|i| {
                if col.is_null(i) {
                    Val::Null
                } else {
                    Val::Text(fmt.value(i).to_string())
                }
            })
            .collect(),
        Err(e) => vec![Val::Text(format!("<unprintable: {e}>")); col.len()],
    }
}

/// `col` cast to f64, each value made a [`Val`] by `make` (NULL stays NULL);
/// `None` if it does not cast.
fn f64_vals(col: &ArrayRef, make: impl Fn(f64) -> Val) -> Option<Vec<Val>> {
    let c = datafusion::arrow::compute::cast(col, &DataType::Float64).ok()?;
    let c = c
        .as_any()
        .downcast_ref::<datafusion::arrow::array::Float64Array>()
        .expect("f64 array");
    Some(
        (0..c.len())
            .map(|i| {
                if c.is_null(i) {
                    Val::Null
                } else {
                    make(c.value(i))
                }
            })
            .collect(),
    )
}

/// Rows of `b` without the window bound columns, sorted. `approx`: per
/// column, the relative error the kernel may have (the reference's result
/// fields declare it, `ebql_compiler::udaf::RELATIVE_ERROR_KEY`); `top_k`:
/// per column, whether it is an approx_top_k list (`udaf::TOP_K_KEY`).
fn rows(b: &RecordBatch, skip: usize, approx: &[Option<f64>], top_k: &[bool]) -> Vec<Vec<Val>> {
    let cols: Vec<Vec<Val>> = b
        .columns()
        .iter()
        .zip(approx)
        .zip(top_k)
        .skip(skip)
        .map(|((c, a), t)| column_vals(c, *a, *t))
        .collect();
    let mut rows: Vec<Vec<Val>> = (0..b.num_rows())
        .map(|i| cols.iter().map(|c| c[i].clone()).collect())
        .collect();
    rows.sort_by_key(|r| r.iter().map(Val::sort_key).collect::<Vec<_>>());
    rows
}

fn show(row: &[Val]) -> String {
    row.iter()
        .map(|v| v.to_string())
        .collect::<Vec<_>>()
        .join(" | ")
}

/// Compares one window (see the module docs for the rules).
pub fn compare(w: &CheckedWindow, opts: &CheckOptions) -> WindowResult {
    compare_within(w, opts, &[])
}

/// [`compare`], accepting in output column `i` (window columns excluded) a
/// relative difference of `bounds[i]` (approximate aggregates, see
/// `ebql_compiler::check::output_bounds`).
pub fn compare_within(
    w: &CheckedWindow,
    opts: &CheckOptions,
    bounds: &[Option<f64>],
) -> WindowResult {
    WindowResult {
        window: w.window,
        kernel_rows: w.kernel.num_rows(),
        reference_rows: w.reference.num_rows(),
        verdict: compare_rows(w, opts, bounds, true),
        duckdb: None,
        kernel_error: w.kernel_error.as_ref().map(|e| e.cause.clone()),
    }
}

/// The verdict on a window that failed on either side, `None` when both
/// gave rows. Both failed: they agree (a window either side cannot compute
/// is one the query cannot answer, whatever each engine's message). The
/// kernel's exact SUM failed where a reference gave rows: inconclusive
/// (DuckDB sums into HUGEINT, so its sum fits where eBQL's result type
/// does not; DataFusion's reference uses eBQL's exact SUM and fails too).
/// Any other one-sided failure is a disagreement.
pub(super) fn failed_verdict(w: &CheckedWindow) -> Option<Verdict> {
    match (&w.kernel_error, &w.reference_error) {
        (None, None) => None,
        (Some(_), Some(_)) => Some(Verdict::Agree),
        (Some(k), None) if k.kind == WindowErrorKind::Overflow => Some(Verdict::Inconclusive {
            reason: format!(
                "the kernel's exact SUM failed the window where DataFusion's reference wraps ({} rows): {}",
                w.reference.num_rows(),
                k.cause
            ),
        }),
        (Some(k), None) => Some(Verdict::Disagree {
            diff: format!(
                "  the kernel's window failed, the reference gave {} row(s):\n  {}\n",
                w.reference.num_rows(),
                k.cause
            ),
        }),
        (None, Some(r)) => Some(Verdict::Disagree {
            diff: format!(
                "  the reference fails on this window's events, the kernel gave {} row(s):\n  {}\n",
                w.kernel.num_rows(),
                r.cause
            ),
        }),
    }
}

/// The verdict on `w.kernel` against `w.reference`; `types`: their column
/// types must be equal too (DataFusion's reference types its result as
/// the query does; DuckDB's is compared by value).
pub(super) fn compare_rows(
    w: &CheckedWindow,
    opts: &CheckOptions,
    bounds: &[Option<f64>],
    types: bool,
) -> Verdict {
    let same_row = |a: &Vec<Val>, b: &Vec<Val>| {
        a.len() == b.len()
            && a.iter().zip(b).enumerate().all(|(i, (x, y))| {
                x.same_within(y, opts.float_tolerance, bounds.get(i).copied().flatten())
            })
    };
    if let Some(v) = failed_verdict(w) {
        return v;
    }
    let skip = w.bound_columns();
    let (k, r) = (&w.kernel, &w.reference);
    // A decimal's precision is DataFusion's bookkeeping, not the answer: its
    // simplifier folds `x * 0` to a Decimal128(20, 0) literal where it knows
    // `x` is never NULL (the kernel's plan), not over the pairs' nullable
    // columns, whose product stays Decimal128(38, 0). Values compare exactly.
    let types_of = |b: &RecordBatch| {
        b.schema()
            .fields()
            .iter()
            .skip(skip)
            .map(|f| match f.data_type() {
                DataType::Decimal128(_, scale) => DataType::Decimal128(38, *scale),
                t => t.clone(),
            })
            .collect::<Vec<_>>()
    };
    if types && types_of(k) != types_of(r) {
        return Verdict::Disagree {
            diff: format!(
                "column types differ: kernel {:?}, reference {:?}",
                types_of(k),
                types_of(r)
            ),
        };
    }
    // Two ways a column is approximate: the reference's result field declares
    // the kernel's bound (quantiles, `udaf::RELATIVE_ERROR_KEY`), or the plan
    // does (`bounds`: approx_distinct, whose reference is itself approximate).
    let approx: Vec<Option<f64>> = r
        .schema()
        .fields()
        .iter()
        .map(|f| {
            f.metadata()
                .get(ebql_compiler::udaf::RELATIVE_ERROR_KEY)
                .and_then(|v| v.parse().ok())
        })
        .collect();
    // An approx_top_k column: its entries are within the Space-Saving bound
    // of the reference's exact top k (`compare_topk`).
    let top_k: Vec<bool> = r
        .schema()
        .fields()
        .iter()
        .map(|f| f.metadata().contains_key(ebql_compiler::udaf::TOP_K_KEY))
        .collect();
    let (kr, rr) = (
        rows(k, skip, &approx, &top_k),
        rows(r, skip, &approx, &top_k),
    );
    let same = kr.len() == rr.len() && kr.iter().zip(&rr).all(|(a, b)| same_row(a, b));
    if same {
        return Verdict::Agree;
    }
    if w.drops.query_total() + w.drops.tap_full > 0 {
        return Verdict::Inconclusive {
            reason: format!(
                "events were dropped in this window: {}",
                crate::window::DropCause::describe(&w.drops.causes())
            ),
        };
    }
    if w.unordered > 0 {
        return Verdict::Inconclusive {
            reason: format!(
                "{} events of one pairing key ran on different threads within {} µs of each other: \
                 which start an end takes depends on the order of their map operations across CPUs, \
                 which the events' timestamps cannot show",
                w.unordered,
                super::pairing::RACE_NS / 1000
            ),
        };
    }
    if w.has_limit && kr.len() == rr.len() {
        return Verdict::Inconclusive {
            reason: "LIMIT without an ORDER BY over every column may keep different rows".into(),
        };
    }
    // A multiset difference, tolerant of float noise.
    let mut only_ref: Vec<Option<&Vec<Val>>> = rr.iter().map(Some).collect();
    let mut only_kernel = Vec::new();
    for a in &kr {
        match only_ref
            .iter()
            .position(|b| b.is_some_and(|b| same_row(a, b)))
        {
            Some(i) => only_ref[i] = None,
            None => only_kernel.push(a),
        }
    }
    let header = k
        .schema()
        .fields()
        .iter()
        .skip(skip)
        .map(|f| f.name().clone())
        .collect::<Vec<_>>()
        .join(" | ");
    let mut diff = format!("  {header}\n");
    for a in only_kernel.iter().take(20) {
        diff.push_str(&format!("- {}\n", show(a)));
    }
    for b in only_ref.iter().flatten().take(20) {
        diff.push_str(&format!("+ {}\n", show(b)));
    }
    Verdict::Disagree { diff }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::{Float64Array, UInt64Array};
    use datafusion::arrow::datatypes::{Field, Schema};
    use std::sync::Arc;

    fn batch(keys: &[u64], avgs: &[f64]) -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![
            Field::new("k", DataType::UInt64, false),
            Field::new("avg", DataType::Float64, true),
        ]));
        RecordBatch::try_new(
            schema,
            vec![
                Arc::new(UInt64Array::from(keys.to_vec())),
                Arc::new(Float64Array::from(avgs.to_vec())),
            ],
        )
        .unwrap()
    }

    fn window(
        kernel: RecordBatch,
        reference: RecordBatch,
        drops: WindowDrops,
        has_limit: bool,
    ) -> CheckedWindow {
        CheckedWindow {
            window: None,
            clock: None,
            kernel,
            kernel_error: None,
            reference,
            reference_error: None,
            drops,
            has_limit,
            tap: Vec::new(),
            unordered: 0,
        }
    }

    /// A failed window is judged by who failed, never by its (missing) rows.
    #[test]
    fn a_failed_window_agrees_with_a_failed_reference_and_never_falsely_disagrees() {
        let fail = |kind| {
            Some(WindowError {
                cause: "sum(x) = 20000000000000000000 does not fit".into(),
                kind,
            })
        };
        let empty = || batch(&[], &[]);
        let judge = |k, r, reference_rows: RecordBatch| {
            let mut w = window(empty(), reference_rows, WindowDrops::default(), false);
            (w.kernel_error, w.reference_error) = (k, r);
            compare(&w, &CheckOptions::default()).verdict
        };
        use WindowErrorKind::{Evaluation, Overflow};
        assert_eq!(
            judge(fail(Evaluation), fail(Evaluation), empty()),
            Verdict::Agree
        );
        assert_eq!(
            judge(fail(Overflow), fail(Evaluation), empty()),
            Verdict::Agree
        );
        // DataFusion's SUM wraps where the kernel's exact sum fails.
        assert!(matches!(
            judge(fail(Overflow), None, batch(&[1], &[1.0])),
            Verdict::Inconclusive { reason } if reason.contains("wraps") && reason.contains("does not fit")
        ));
        // The kernel failing a remainder the reference computes, or the other way round: a bug.
        assert!(matches!(
            judge(fail(Evaluation), None, batch(&[1], &[1.0])),
            Verdict::Disagree { .. }
        ));
        let mut w = window(batch(&[1], &[1.0]), empty(), WindowDrops::default(), false);
        w.reference_error = fail(Evaluation);
        assert!(matches!(
            compare(&w, &CheckOptions::default()).verdict,
            Verdict::Disagree { diff } if diff.contains("the reference fails")
        ));
    }

    #[test]
    fn rows_agree_in_any_order_and_within_float_tolerance() {
        let w = window(
            batch(&[1, 2], &[1.0 / 3.0, 2.0]),
            batch(&[2, 1], &[2.0, 0.333_333_333_333_333_4]),
            WindowDrops::default(),
            false,
        );
        assert_eq!(
            compare(&w, &CheckOptions::default()).verdict,
            Verdict::Agree
        );
    }

    #[test]
    fn a_different_value_is_a_disagreement_with_both_rows_shown() {
        let w = window(
            batch(&[1, 2], &[1.0, 2.0]),
            batch(&[1, 2], &[1.0, 2.5]),
            WindowDrops::default(),
            false,
        );
        match compare(&w, &CheckOptions::default()).verdict {
            Verdict::Disagree { diff } => {
                assert!(diff.contains("- 2 | 2"), "{diff}");
                assert!(diff.contains("+ 2 | 2.5"), "{diff}");
                assert!(!diff.contains("- 1 |"), "equal rows are not listed: {diff}");
            }
            other => panic!("expected a disagreement, got {other:?}"),
        }
    }

    #[test]
    fn a_missing_row_is_a_disagreement() {
        let w = window(
            batch(&[1], &[1.0]),
            batch(&[1, 2], &[1.0, 2.0]),
            WindowDrops::default(),
            false,
        );
        assert!(matches!(
            compare(&w, &CheckOptions::default()).verdict,
            Verdict::Disagree { .. }
        ));
    }

    #[test]
    fn accounted_drops_and_unordered_limits_are_inconclusive_not_wrong() {
        let drops = WindowDrops {
            groups_full: 3,
            ..Default::default()
        };
        let w = window(
            batch(&[1], &[1.0]),
            batch(&[1, 2], &[1.0, 2.0]),
            drops,
            false,
        );
        assert!(matches!(
            compare(&w, &CheckOptions::default()).verdict,
            Verdict::Inconclusive { .. }
        ));
        let w = window(
            batch(&[1], &[1.0]),
            batch(&[2], &[2.0]),
            WindowDrops::default(),
            true,
        );
        assert!(matches!(
            compare(&w, &CheckOptions::default()).verdict,
            Verdict::Inconclusive { .. }
        ));
    }
}
