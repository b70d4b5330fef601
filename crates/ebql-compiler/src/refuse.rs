//! Constants a query cannot run with, refused while planning: before
//! anything is loaded, with a position and a hint, instead of an error on
//! the first event (DataFusion evaluates aggregate parameters only when it
//! builds an accumulator, and an integer division by zero only on a row).
//!
//! * `QUANTILE(x, q)`, `approx_percentile_cont(x, q)`: q a constant in [0, 1].
//! * `LHIST(x, min, max, step)`: integer constants, `step > 0`, `min < max`,
//!   at most [`MAX_LINEAR_BUCKETS`] buckets.
//! * `approx_top_k(x, k [, w])`: k an integer constant in 1..=64.
//! * `a / b`, `a % b` with an integer `b` that is 0 after DataFusion's
//!   constant folding (`x / (2 - 2)` too). A float division by zero is
//!   IEEE's (inf, NaN), not an error, and is left alone.
//!
//! The plan says what is wrong (its expressions carry no positions); the
//! position is found in the query text: the call's argument, or the divisor.

use crate::agg::hist::{linear_buckets, MAX_LINEAR_BUCKETS};
use crate::agg::quantile::check_q;
use crate::diag::Diagnostic;
use crate::error::CompileError;
use datafusion::arrow::datatypes::DataType;
use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::common::ScalarValue;
use datafusion::logical_expr::{Expr, LogicalPlan, Operator};
use std::ops::Range;

/// Checks every expression of `plan` (optimized: constants folded); the
/// diagnostic's span points into `query`, `whole` is the fallback span.
pub fn check_constants(
    plan: &LogicalPlan,
    query: &str,
    whole: Range<usize>,
) -> Result<(), CompileError> {
    let mut found: Option<Diagnostic> = None;
    plan.apply_with_subqueries(|node| {
        for e in node.expressions() {
            e.apply(|x| {
                if found.is_none() {
                    found = refusal(x, query, &whole);
                }
                Ok(TreeNodeRecursion::Continue)
            })?;
        }
        Ok(TreeNodeRecursion::Continue)
    })
    .map_err(|e| CompileError::Internal(e.to_string()))?;
    found.map_or(Ok(()), |d| Err(CompileError::Query(d)))
}

/// `e` without the casts type coercion put around it.
fn uncast(e: &Expr) -> &Expr {
    match e {
        Expr::Cast(c) => uncast(&c.expr),
        Expr::TryCast(c) => uncast(&c.expr),
        Expr::Alias(a) => uncast(&a.expr),
        e => e,
    }
}

/// The constant `e` is, if it is one (NULL is none).
fn constant(e: &Expr) -> Option<&ScalarValue> {
    match uncast(e) {
        Expr::Literal(v, _) if !v.is_null() => Some(v),
        _ => None,
    }
}

/// An integer constant as i64.
fn int_constant(e: &Expr) -> Option<i64> {
    let v = constant(e).filter(|v| v.data_type().is_integer())?;
    match v.cast_to(&DataType::Int64).ok()? {
        ScalarValue::Int64(Some(i)) => Some(i),
        _ => None,
    }
}

/// What is wrong with `e` itself (not its children), if anything.
fn refusal(e: &Expr, query: &str, whole: &Range<usize>) -> Option<Diagnostic> {
    match e {
        Expr::BinaryExpr(b) if matches!(b.op, Operator::Divide | Operator::Modulo) => {
            let zero = constant(&b.right).is_some_and(|v| {
                let dt = v.data_type();
                (dt.is_integer()
                    || matches!(dt, DataType::Decimal128(..) | DataType::Decimal256(..)))
                    && v.cast_to(&DataType::Float64).ok() == Some(ScalarValue::Float64(Some(0.0)))
            });
            zero.then(|| {
                let what = if b.op == Operator::Divide { "division" } else { "modulo" };
                let span = divisor_span(query, b.op == Operator::Divide).unwrap_or(whole.clone());
                Diagnostic::new(format!("{what} by zero"), Some(span)).with_hint(
                    "the divisor is the constant 0 (after folding), so every row would fail: an integer division or modulo by zero is an error in SQL",
                )
            })
        }
        Expr::AggregateFunction(f) => {
            let name = f.func.name().to_ascii_lowercase();
            let args = &f.params.args;
            match name.as_str() {
                "quantile" | "approx_percentile_cont" if args.len() >= 2 => {
                    quantile_refusal(&name, &args[1], query, whole)
                }
                "lhist" if args.len() == 4 => lhist_refusal(&args[1..], query, whole),
                "approx_top_k" if args.len() >= 2 => top_k_refusal(&args[1], query, whole),
                _ => None,
            }
        }
        _ => None,
    }
}

/// The span of the second argument of the first of `calls` whose text
/// satisfies `pick`, else of the first call's, else `whole`.
fn second_arg_span(
    calls: &[Vec<Range<usize>>],
    query: &str,
    whole: &Range<usize>,
    pick: &dyn Fn(&str) -> bool,
) -> Range<usize> {
    calls
        .iter()
        .filter_map(|c| c.get(1).cloned())
        .find(|r| pick(&query[r.clone()]))
        .or_else(|| calls.iter().find_map(|c| c.get(1).cloned()))
        .unwrap_or(whole.clone())
}

fn quantile_refusal(name: &str, q: &Expr, query: &str, whole: &Range<usize>) -> Option<Diagnostic> {
    let calls = call_args(query, name);
    let arg_span = |pick: &dyn Fn(&str) -> bool| second_arg_span(&calls, query, whole, pick);
    let shown = name.to_uppercase();
    let Some(v) = constant(q) else {
        let span = arg_span(&|t| t.parse::<f64>().is_err());
        return Some(
            Diagnostic::new(format!("the quantile of {shown}(x, q) must be a constant"), Some(span))
                .with_hint(format!("q is the same for every event, e.g. {shown}(x, 0.99); for several quantiles, one call each")),
        );
    };
    let q = match v.cast_to(&DataType::Float64).ok()? {
        ScalarValue::Float64(Some(q)) => q,
        _ => return None,
    };
    let why = check_q(q).err()?;
    let span = arg_span(&|t| t.parse::<f64>() == Ok(q));
    Some(Diagnostic::new(why, Some(span)).with_hint(format!(
        "q is a fraction of the values: {shown}(x, 0.5) is the median, {shown}(x, 0.99) the 99th percentile"
    )))
}

fn top_k_refusal(k: &Expr, query: &str, whole: &Range<usize>) -> Option<Diagnostic> {
    let calls = call_args(query, "approx_top_k");
    let span = |pick: &dyn Fn(&str) -> bool| second_arg_span(&calls, query, whole, pick);
    let hint = format!(
        "k is how many of the most frequent values to report, a constant from 1 to {}, e.g. approx_top_k(x, 10)",
        crate::agg::topk::MAX_K
    );
    let Some(k) = int_constant(k) else {
        return Some(
            Diagnostic::new(
                "the k of approx_top_k(x, k) must be an integer constant",
                Some(span(&|t| t.trim().parse::<i64>().is_err())),
            )
            .with_hint(hint),
        );
    };
    let why = crate::agg::topk::check_k(k).err()?;
    Some(Diagnostic::new(why, Some(span(&|t| t.trim().parse::<i64>() == Ok(k)))).with_hint(hint))
}

fn lhist_refusal(params: &[Expr], query: &str, whole: &Range<usize>) -> Option<Diagnostic> {
    const NAMES: [&str; 3] = ["min", "max", "step"];
    let calls = call_args(query, "lhist");
    // Argument k (1-based) of the first call whose argument k passes `pick`, or of the first call.
    let span = |k: usize, pick: &dyn Fn(&str) -> bool| {
        calls
            .iter()
            .filter_map(|c| c.get(k).cloned())
            .find(|r| pick(&query[r.clone()]))
            .or_else(|| calls.iter().find_map(|c| c.get(k).cloned()))
            .unwrap_or(whole.clone())
    };
    let is = |v: i64| move |t: &str| t.parse::<i64>() == Ok(v);
    let mut p = [0i64; 3];
    for (k, e) in params.iter().enumerate() {
        match int_constant(e) {
            Some(v) => p[k] = v,
            None => {
                return Some(
                    Diagnostic::new(
                        format!(
                            "the {} of LHIST(x, min, max, step) must be an integer constant",
                            NAMES[k]
                        ),
                        Some(span(k + 1, &|t| t.parse::<i64>().is_err())),
                    )
                    .with_hint(
                        "the buckets are fixed when the query starts, e.g. LHIST(x, 0, 100, 10)",
                    ),
                )
            }
        }
    }
    let [min, max, step] = p;
    if step <= 0 {
        return Some(
            Diagnostic::new(format!("LHIST step must be positive, got {step}"), Some(span(3, &is(step))))
                .with_hint(format!(
                    "step is the width of a bucket between min and max, e.g. LHIST(x, {min}, {max}, {})",
                    ((max as i128 - min as i128).abs() / 10).max(1)
                )),
        );
    }
    if min >= max {
        let at = span(1, &is(min));
        let to = span(2, &is(max));
        let hint = if min > max {
            format!("swap them: LHIST(x, {max}, {min}, {step})")
        } else {
            format!(
                "the linear buckets cover [min, max), e.g. LHIST(x, {min}, {}, {step})",
                min.saturating_add(step.saturating_mul(10))
            )
        };
        return Some(
            Diagnostic::new(
                format!("LHIST min ({min}) must be below max ({max})"),
                Some(at.start..to.end.max(at.end)),
            )
            .with_hint(hint),
        );
    }
    let n = linear_buckets(min, max, step);
    if n > MAX_LINEAR_BUCKETS {
        let least = (max as i128 - min as i128 + (MAX_LINEAR_BUCKETS as i128 - 2) - 1)
            / (MAX_LINEAR_BUCKETS as i128 - 2);
        return Some(
            Diagnostic::new(
                format!("LHIST({min}, {max}, {step}) has {n} buckets; at most {MAX_LINEAR_BUCKETS}"),
                Some(span(3, &is(step))),
            )
            .with_hint(format!(
                "each bucket is a counter in every group's map value: use a step of at least {least}, e.g. LHIST(x, {min}, {max}, {least})"
            )),
        );
    }
    None
}

/// Byte offset of the end of the quoted text or comment starting at `i`, or `None`.
fn skip_quoted(b: &[u8], i: usize) -> Option<usize> {
    let end_of = |from: usize, pat: &[u8]| {
        (from..b.len())
            .find(|&j| b[j..].starts_with(pat))
            .map_or(b.len(), |j| j + pat.len())
    };
    match b[i] {
        q @ (b'\'' | b'"') => Some(end_of(i + 1, &[q])),
        b'-' if b[i..].starts_with(b"--") => Some(end_of(i, b"\n")),
        b'/' if b[i..].starts_with(b"/*") => Some(end_of(i + 2, b"*/")),
        _ => None,
    }
}

/// For each call `name(…)` in `query` (the name as a whole word, any case),
/// the byte ranges of its arguments, trimmed (index 0 is the first argument).
pub fn call_args(query: &str, name: &str) -> Vec<Vec<Range<usize>>> {
    let b = query.as_bytes();
    let is_ident = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if let Some(end) = skip_quoted(b, i) {
            i = end;
            continue;
        }
        let at_word = (i == 0 || !is_ident(b[i - 1]))
            && b.len() >= i + name.len()
            && b[i..i + name.len()].eq_ignore_ascii_case(name.as_bytes())
            && b.get(i + name.len()).is_none_or(|&c| !is_ident(c));
        if !at_word {
            i += 1;
            continue;
        }
        let mut j = i + name.len();
        while j < b.len() && b[j].is_ascii_whitespace() {
            j += 1;
        }
        if b.get(j) != Some(&b'(') {
            i += 1;
            continue;
        }
        let (args, end) = split_args(query, j);
        out.push(args);
        i = end;
    }
    out
}

/// The arguments (trimmed ranges) of the parenthesized list opening at `open`, and where it ends.
fn split_args(query: &str, open: usize) -> (Vec<Range<usize>>, usize) {
    let b = query.as_bytes();
    let trim = |r: Range<usize>| {
        let t = &query[r.clone()];
        let start = r.start + (t.len() - t.trim_start().len());
        start..start.max(r.end - (t.len() - t.trim_end().len()))
    };
    let (mut args, mut depth, mut from, mut j) = (Vec::new(), 0usize, open + 1, open);
    while j < b.len() {
        if let Some(end) = skip_quoted(b, j) {
            j = end;
            continue;
        }
        match b[j] {
            b'(' => depth += 1,
            b')' => {
                depth -= 1;
                if depth == 0 {
                    args.push(trim(from..j));
                    return (args, j + 1);
                }
            }
            b',' if depth == 1 => {
                args.push(trim(from..j));
                from = j + 1;
            }
            _ => {}
        }
        j += 1;
    }
    args.push(trim(from..b.len()));
    (args, b.len())
}

/// The divisor of the first `/` (or `%`) in `query` that could be zero: a
/// `0`, else any operand that is not a plain non-zero number (`(2 - 2)`).
fn divisor_span(query: &str, divide: bool) -> Option<Range<usize>> {
    let b = query.as_bytes();
    let op = if divide { b'/' } else { b'%' };
    let mut operands = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if let Some(end) = skip_quoted(b, i) {
            i = end;
            continue;
        }
        if b[i] == op {
            let mut j = i + 1;
            while j < b.len() && b[j].is_ascii_whitespace() {
                j += 1;
            }
            let start = j;
            if b.get(j) == Some(&b'-') || b.get(j) == Some(&b'+') {
                j += 1;
            }
            while j < b.len() && (b[j].is_ascii_alphanumeric() || b[j] == b'_' || b[j] == b'.') {
                j += 1;
            }
            if b.get(j) == Some(&b'(') {
                j = split_args(query, j).1;
            }
            if j > start {
                operands.push(start..j);
            }
        }
        i += 1;
    }
    let text = |r: &Range<usize>| query[r.clone()].trim_start_matches(['-', '+']);
    operands
        .iter()
        .find(|r| text(r).parse::<f64>() == Ok(0.0))
        .or_else(|| operands.iter().find(|r| text(r).parse::<f64>().is_err()))
        .or(operands.first())
        .cloned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn call_arguments_in_the_text() {
        let q = "SELECT LHIST(x, 0, f(a, b), 'a,)'), lhist (y,1,2,3) -- lhist(z)";
        let calls = call_args(q, "lhist");
        let shown: Vec<Vec<&str>> = calls
            .iter()
            .map(|c| c.iter().map(|r| &q[r.clone()]).collect())
            .collect();
        assert_eq!(
            shown,
            vec![vec!["x", "0", "f(a, b)", "'a,)'"], vec!["y", "1", "2", "3"]]
        );
    }

    #[test]
    fn the_zero_divisor_is_found() {
        let q = "SELECT a / 2, b / (2 - 2), c / 0 FROM t";
        assert_eq!(divisor_span(q, true).map(|r| &q[r]), Some("0"));
        let q = "SELECT a / 2, b / (2 - 2) FROM t /* x / 0 */";
        assert_eq!(divisor_span(q, true).map(|r| &q[r]), Some("(2 - 2)"));
        assert_eq!(
            divisor_span("SELECT a % 0", false).map(|r| r.start),
            Some(11)
        );
    }
}
