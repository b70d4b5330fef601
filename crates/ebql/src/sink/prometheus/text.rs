//! The text exposition format's spelling: metric and label names, escaping,
//! sample values, label sets and cumulative histogram buckets.

use std::collections::BTreeMap;

/// `s` as a metric name: every character outside `[a-zA-Z0-9_:]` becomes
/// `_`, runs of `_` are squeezed, trailing ones dropped, and a leading digit
/// gets a `_` before it (`max(count)` → `max_count`, `count(*)` → `count`).
pub fn metric_name(s: &str) -> String {
    squeeze(s, |c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
}

/// `s` as a label name: like [`metric_name`] without `:`, and without the
/// leading `__` Prometheus reserves.
pub fn label_name(s: &str) -> String {
    let n = squeeze(s, |c| c.is_ascii_alphanumeric() || c == '_');
    match n.strip_prefix("__") {
        Some(rest) => format!("_{rest}"),
        None => n,
    }
}

pub(super) fn squeeze(s: &str, ok: impl Fn(char) -> bool) -> String {
    let mut out = String::new();
    for c in s.chars() {
        let c = if ok(c) { c } else { '_' };
        if !(c == '_' && out.ends_with('_')) {
            out.push(c);
        }
    }
    let out = out.trim_end_matches('_');
    match out.chars().next() {
        None => "_".into(),
        Some(c) if c.is_ascii_digit() => format!("_{out}"),
        Some(_) => out.to_string(),
    }
}

/// A label value escaped for the text format: `\` → `\\`, `"` → `\"`, newline → `\n`.
pub fn escape_label_value(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// HELP text escaped for the text format: `\` → `\\`, newline → `\n`.
pub(super) fn escape_help(v: &str) -> String {
    v.replace('\\', "\\\\").replace('\n', "\\n")
}

/// A sample value: integers exactly, NaN and infinities as the format spells them.
pub(super) fn value_text(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v.is_infinite() {
        if v > 0.0 { "+Inf" } else { "-Inf" }.into()
    } else {
        format!("{v}")
    }
}

/// Label pairs of one group, in column order, values unescaped.
pub(super) type Labels = Vec<(String, String)>;

pub(super) fn labels_text(labels: &[(String, String)], extra: Option<(&str, &str)>) -> String {
    let all: Vec<String> = labels
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .chain(extra)
        .map(|(k, v)| format!("{k}=\"{}\"", escape_label_value(v)))
        .collect();
    if all.is_empty() {
        String::new()
    } else {
        format!("{{{}}}", all.join(","))
    }
}

/// The `(le, cumulative count)` pairs of buckets `[lo, hi]` (inclusive,
/// integer, disjoint, keyed in increasing order): `le = hi` for each, and
/// `le = lo - 1` before a bucket whose lower neighbour is absent (module docs).
pub fn cumulative_buckets(buckets: &BTreeMap<(i128, i128), u64>) -> Vec<(i128, u64)> {
    let mut out = Vec::new();
    let mut cum = 0u64;
    let mut prev_hi: Option<i128> = None;
    for (&(lo, hi), &n) in buckets {
        if lo > i64::MIN as i128 && prev_hi != Some(lo - 1) {
            out.push((lo - 1, cum));
        }
        cum += n;
        out.push((hi, cum));
        prev_hi = Some(hi);
    }
    out
}
