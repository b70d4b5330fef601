//! Comparing an approx_top_k column (`ebql_compiler::agg::topk`): the
//! kernel's Space-Saving entries against the reference's exact top k.
//!
//! Equal lists agree (the summary is exact up to m distinct values, the
//! usual case). Otherwise the kernel's list must be what the summary's
//! guarantee allows: as many entries as the reference (both hold
//! min(k, distinct values)); counts descending; each kernel entry's true
//! count t within [count − error, count] (t from the reference; a value
//! outside the exact top k has t ≤ the reference's last count, so its
//! count − error must not exceed that); and each value of the exact top k
//! the kernel does not report is no heavier than every kernel entry (a
//! value missing from the summary has t ≤ its smallest counter). The
//! bound error ≤ N/m needs N, the group's total weight, which the
//! reference's k entries do not show: the kernel tests (`it::topk`, where N
//! is known) and the unit tests of the summary check it.

use datafusion::arrow::array::{Array, ArrayRef, AsArray, StructArray};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::DataType;
use datafusion::arrow::util::display::{ArrayFormatter, FormatOptions};
use std::fmt;

/// One `{value, count, error}` entry; the value as its display text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct TopEntry {
    pub value: String,
    pub count: u64,
    pub error: u64,
}

/// A list of entries, as the table shows it.
pub(super) struct Shown<'a>(pub &'a [TopEntry]);

impl fmt::Display for Shown<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "[")?;
        for (i, e) in self.0.iter().enumerate() {
            let sep = if i > 0 { ", " } else { "" };
            write!(
                f,
                "{sep}{{value: {}, count: {}, error: {}}}",
                e.value, e.count, e.error
            )?;
        }
        write!(f, "]")
    }
}

/// The rows of an approx_top_k column (NULL: `None`); `None` for the whole
/// column when it is not a list of `{value, count, error}` structs.
pub(super) fn column(col: &ArrayRef) -> Option<Vec<Option<Vec<TopEntry>>>> {
    let list = col.as_list_opt::<i32>()?;
    let mut out = Vec::with_capacity(list.len());
    for i in 0..list.len() {
        if list.is_null(i) {
            out.push(None);
            continue;
        }
        let row = list.value(i);
        let s: &StructArray = row.as_struct_opt()?;
        let (values, counts, errors) = (
            s.column_by_name("value")?,
            cast(s.column_by_name("count")?, &DataType::UInt64).ok()?,
            cast(s.column_by_name("error")?, &DataType::UInt64).ok()?,
        );
        let show = ArrayFormatter::try_new(values.as_ref(), &FormatOptions::default()).ok()?;
        let (counts, errors) = (
            counts.as_primitive::<datafusion::arrow::datatypes::UInt64Type>(),
            errors.as_primitive::<datafusion::arrow::datatypes::UInt64Type>(),
        );
        out.push(Some(
            (0..s.len())
                .map(|j| TopEntry {
                    value: show.value(j).to_string(),
                    count: counts.value(j),
                    error: errors.value(j),
                })
                .collect(),
        ));
    }
    Some(out)
}

/// Whether the kernel's entries `k` are within the Space-Saving guarantee
/// of the exact top k `r` (the module docs).
pub(super) fn within(k: &[TopEntry], r: &[TopEntry]) -> bool {
    if k == r {
        return true;
    }
    if k.len() != r.len() || k.windows(2).any(|w| w[0].count < w[1].count) {
        return false;
    }
    let (Some(kmin), Some(rmin)) = (k.last().map(|e| e.count), r.last().map(|e| e.count)) else {
        return false;
    };
    let bracketed = k.iter().all(|e| {
        let Some(lo) = e.count.checked_sub(e.error) else {
            return false;
        };
        match r.iter().find(|t| t.value == e.value) {
            Some(t) => lo <= t.count && t.count <= e.count,
            None => lo <= rmin,
        }
    });
    bracketed
        && r.iter()
            .filter(|t| !k.iter().any(|e| e.value == t.value))
            .all(|t| t.count <= kmin)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(value: i64, count: u64, error: u64) -> TopEntry {
        TopEntry {
            value: value.to_string(),
            count,
            error,
        }
    }

    #[test]
    fn exact_lists_agree_and_differences_must_be_bracketed() {
        let exact = [e(7, 100, 0), e(3, 50, 0), e(9, 20, 0)];
        assert!(within(&exact, &exact));
        // An exact summary that miscounts: no error covers it.
        assert!(!within(&[e(7, 101, 0), e(3, 50, 0), e(9, 20, 0)], &exact));
        assert!(!within(&[e(7, 99, 0), e(3, 50, 0), e(9, 20, 0)], &exact));
        // Overestimates covered by their errors; a light value (true ≤ 20)
        // reported with count 25, error 6 (lower bound 19 ≤ 20): allowed, and
        // 9 (true 20) missing is no heavier than every kernel entry (25).
        assert!(within(&[e(7, 104, 4), e(3, 55, 5), e(1, 25, 6)], &exact));
        // ... but not if its lower bound exceeds the exact top k's last count.
        assert!(!within(&[e(7, 104, 4), e(3, 55, 5), e(1, 25, 4)], &exact));
        // A missing value heavier than a reported count: the summary lost a heavy hitter.
        assert!(!within(&[e(7, 104, 4), e(9, 22, 2), e(1, 22, 6)], &exact));
        // Too few entries, or out of order.
        assert!(!within(&[e(7, 100, 0), e(3, 50, 0)], &exact));
        assert!(!within(&[e(3, 55, 5), e(7, 104, 4), e(9, 20, 0)], &exact));
        // An error above its count is no bracket at all.
        assert!(!within(&[e(7, 100, 0), e(3, 50, 0), e(9, 20, 21)], &exact));
    }
}
