//! `approx_top_k(x, k)` and `approx_top_k(x, k, w)`: the k most frequent
//! values of an integer `x` per group (weighted: the k largest sums of a
//! non-negative integer `w`), from a Space-Saving summary (Metwally,
//! Agrawal, El Abbadi, "Efficient computation of frequent and top-k
//! elements in data streams", ICDT 2005) in the group's map value.
//!
//! **State**: m = [`counters`]`(k)` = clamp(4k, 16, 128) entries of three
//! u64 words, `{value, count, error}`, 24 bytes each (384 to 3,072 bytes
//! per group per CPU). A count of 0 marks an empty entry; entries fill in
//! order and are never emptied, so the filled ones are a prefix. The cap of
//! 128 keeps the per-event scan (below) short and the state below
//! approx_distinct's 4 KiB; k is at most [`MAX_K`] = 64, so m ≥ 2k always.
//!
//! **Update** ([`SpaceSaving::emit_update`], modelled by [`update`]): no
//! helper call and no loop, an unrolled scan of the m entries. If the value
//! is in an entry, its count grows by w; else the first empty entry takes
//! `{x, w, 0}`; else (the summary is full) the first entry with the
//! smallest count c_min becomes `{x, c_min + w, c_min}`. A weight ≤ 0 (and a
//! NULL value or weight) folds nothing. Per event: about 6 instructions
//! per entry scanned (a hit in entry j costs ~6j + 5), all m on a miss,
//! then 2 per entry up to the minimum's when the summary is full.
//!
//! **Merge** ([`merge_entries`], across CPUs and the panes of a hopping
//! window): the mergeable Space-Saving merge (Agarwal, Cormode, Huang,
//! Phillips, Wei, Yi, "Mergeable Summaries", PODS 2012): each value of
//! either summary gets the sum of its counts and of its errors, a summary
//! it is absent from contributing that summary's smallest count (0 when
//! that summary is not full) to both; the m largest counts are kept.
//!
//! **Guarantee**, N being the group's total weight (its number of non-NULL
//! events for the unweighted form), for one summary and after any merges:
//! every reported value's true count t satisfies `count − error ≤ t ≤
//! count`; `error ≤ c_min ≤ N/m`; a value absent from the summary has
//! t ≤ c_min ≤ N/m, so every value with t > N/m is in it, and a value
//! missing from the k reported has t ≤ every reported count. With at most m
//! distinct values the summary is exact (every error is 0). Why the merge
//! keeps this: a value absent from a summary A has t_A ≤ min_A (0 when A
//! never evicted), so the merged count bounds t from above and the merged
//! count − error (present counts' lower bounds, 0 for absent) from below;
//! every merged count is ≥ min_A + min_B, so errors stay ≤ the new minimum;
//! and the m kept counts sum to at most N_A + N_B (each kept value absent
//! from A stands in for a dropped value of A whose count is ≥ min_A).
//!
//! **Output**: a list of `{value, count, error}` structs ([`result_type`]),
//! at most k of them, by count descending (ties: smaller value first);
//! `value` has the argument's type, `count` and `error` are UInt64. NULL
//! when the group folded nothing (every value or weight NULL or ≤ 0), like
//! MIN. The user-space implementation (`crate::udaf`, the fallback and the
//! oracle's reference) is the exact top k: exact counts, error 0.

use super::function::{Aggregate, Call, Func, Output, StatePart};
use super::synopsis::{put_u64, u64_at, Slot, State, Synopsis, UpdateCx};
use crate::contract::Cell;
use crate::error::CompileError;
use crate::kexpr::{IntType, KPred};
use datafusion::arrow::array::{Array, ArrayRef, Int64Array, ListArray, StructArray, UInt64Array};
use datafusion::arrow::buffer::OffsetBuffer;
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, Field, Fields};
use datafusion::common::ScalarValue;
use ebql_bpf::{JmpCond, Size, Src};
use std::collections::HashMap;
use std::sync::Arc;

/// Largest k.
pub const MAX_K: i64 = 64;
/// Fewest counters of a summary.
pub const MIN_COUNTERS: usize = 16;
/// Most counters of a summary.
pub const MAX_COUNTERS: usize = 128;
/// Bytes of one entry: value, count, error.
pub const ENTRY_BYTES: usize = 24;

/// The counters m of a summary for `k`: clamp(4k, 16, 128).
pub fn counters(k: usize) -> usize {
    (4 * k).clamp(MIN_COUNTERS, MAX_COUNTERS)
}

/// k must be a constant in 1..=[`MAX_K`].
pub fn check_k(k: i64) -> Result<usize, String> {
    if (1..=MAX_K).contains(&k) {
        Ok(k as usize)
    } else {
        Err(format!(
            "approx_top_k's k must be between 1 and {MAX_K}, got {k}"
        ))
    }
}

/// One entry of a summary: a value (its 64-bit register form), its count
/// (an upper bound of its true count) and the count's error.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry {
    /// The value.
    pub value: u64,
    /// Upper bound of the value's true count (or total weight).
    pub count: u64,
    /// count − error is a lower bound of the true count.
    pub error: u64,
}

/// The filled entries of a state (count > 0), in slot order.
pub fn entries(state: &[u8]) -> Vec<Entry> {
    state
        .chunks_exact(ENTRY_BYTES)
        .map(|e| Entry {
            value: u64_at(e, 0),
            count: u64_at(e, 8),
            error: u64_at(e, 16),
        })
        .filter(|e| e.count > 0)
        .collect()
}

/// Writes `entries` as the state's prefix, the rest empty.
pub fn write(state: &mut [u8], entries: &[Entry]) {
    state.fill(0);
    for (i, e) in entries.iter().enumerate() {
        let off = i * ENTRY_BYTES;
        put_u64(state, off, e.value);
        put_u64(state, off + 8, e.count);
        put_u64(state, off + 16, e.error);
    }
}

/// Folds `x` with weight `w` into a state as the probe does (tests, and
/// the model the kernel tests compare against).
pub fn update(state: &mut [u8], x: u64, w: u64) {
    if w == 0 {
        return;
    }
    let m = state.len() / ENTRY_BYTES;
    let at = |i: usize| i * ENTRY_BYTES;
    let mut min: Option<(u64, usize)> = None;
    for i in 0..m {
        let (v, c) = (u64_at(state, at(i)), u64_at(state, at(i) + 8));
        if v == x || c == 0 {
            // A hit, or the first empty entry (an empty entry's value is 0:
            // x = 0 lands there as a hit, with the same result).
            put_u64(state, at(i), x);
            put_u64(state, at(i) + 8, c + w);
            return;
        }
        if min.is_none_or(|(m, _)| c < m) {
            min = Some((c, i));
        }
    }
    let (c, i) = min.expect("m ≥ 1");
    put_u64(state, at(i), x);
    put_u64(state, at(i) + 8, c + w);
    put_u64(state, at(i) + 16, c);
}

/// The mergeable Space-Saving merge of two summaries of `m` counters (see
/// the module docs): sums with the other summary's minimum standing in for
/// an absent value, the m largest counts kept, by count descending then
/// value ascending.
pub fn merge_entries(a: &[Entry], b: &[Entry], m: usize) -> Vec<Entry> {
    let floor = |s: &[Entry]| {
        if s.len() >= m {
            s.iter().map(|e| e.count).min().unwrap_or(0)
        } else {
            0
        }
    };
    let (fa, fb) = (floor(a), floor(b));
    let mut merged: HashMap<u64, Entry> = HashMap::new();
    for e in a {
        merged.insert(
            e.value,
            Entry {
                value: e.value,
                count: e.count.saturating_add(fb),
                error: e.error.saturating_add(fb),
            },
        );
    }
    for e in b {
        let m = merged.entry(e.value).or_insert(Entry {
            value: e.value,
            count: fa,
            error: fa,
        });
        // Present in a: replace the stand-in fb by b's own count and error.
        let (sc, se) = if a.iter().any(|x| x.value == e.value) {
            (fb, fb)
        } else {
            (0, 0)
        };
        m.count = m.count - sc + e.count;
        m.error = m.error - se + e.error;
    }
    let mut out: Vec<Entry> = merged.into_values().collect();
    out.sort_by(|x, y| y.count.cmp(&x.count).then(x.value.cmp(&y.value)));
    out.truncate(m);
    out
}

/// A value of type `ty` from its 64-bit register form.
pub fn typed(v: u64, ty: IntType) -> i128 {
    let shift = 64 - ty.bits.clamp(1, 64) as u32;
    if ty.signed {
        (((v << shift) as i64) >> shift) as i128
    } else {
        ((v << shift) >> shift) as i128
    }
}

/// The struct of one entry: `{value, count, error}`, value of the argument's type `value`.
pub fn entry_type(value: &DataType) -> DataType {
    DataType::Struct(Fields::from(vec![
        Field::new("value", value.clone(), false),
        Field::new("count", DataType::UInt64, false),
        Field::new("error", DataType::UInt64, false),
    ]))
}

/// The result type of approx_top_k of an argument of type `value`: a list of [`entry_type`].
pub fn result_type(value: &DataType) -> DataType {
    DataType::List(Arc::new(Field::new_list_field(entry_type(value), true)))
}

/// The `k` entries reported from `entries` (value, count, error): by count
/// descending, ties by value ascending.
pub fn top(mut entries: Vec<(i128, u64, u64)>, k: usize) -> Vec<(i128, u64, u64)> {
    entries.sort_by(|x, y| y.1.cmp(&x.1).then(x.0.cmp(&y.0)));
    entries.truncate(k);
    entries
}

/// One list value of type `dt` ([`result_type`]) holding `entries`.
pub fn list_scalar(entries: &[(i128, u64, u64)], dt: &DataType) -> Result<ScalarValue, String> {
    let DataType::List(item) = dt else {
        return Err(format!("approx_top_k's result type is {dt}, not a list"));
    };
    let DataType::Struct(fields) = item.data_type() else {
        return Err(format!(
            "approx_top_k's entries are {}, not structs",
            item.data_type()
        ));
    };
    let value_type = fields[0].data_type();
    let values: ArrayRef = if value_type.is_signed_integer() {
        Arc::new(Int64Array::from_iter_values(
            entries.iter().map(|e| e.0 as i64),
        ))
    } else {
        Arc::new(UInt64Array::from_iter_values(
            entries.iter().map(|e| e.0 as u64),
        ))
    };
    let values = cast(&values, value_type).map_err(|e| e.to_string())?;
    let column = |f: fn(&(i128, u64, u64)) -> u64| -> ArrayRef {
        Arc::new(UInt64Array::from_iter_values(entries.iter().map(f)))
    };
    let structs = StructArray::try_new(
        fields.clone(),
        vec![values, column(|e| e.1), column(|e| e.2)],
        None,
    )
    .map_err(|e| e.to_string())?;
    let list = ListArray::try_new(
        item.clone(),
        OffsetBuffer::from_lengths([structs.len()]),
        Arc::new(structs),
        None,
    )
    .map_err(|e| e.to_string())?;
    Ok(ScalarValue::List(Arc::new(list)))
}

/// A summary's output: the `k` largest entries of `state` as a cell of type `dt`.
pub fn evaluate(state: &[u8], k: usize, ty: IntType, dt: &DataType) -> Cell {
    let found: Vec<(i128, u64, u64)> = entries(state)
        .into_iter()
        .map(|e| (typed(e.value, ty), e.count, e.error))
        .collect();
    if found.is_empty() {
        return Cell::Null;
    }
    match list_scalar(&top(found, k), dt) {
        Ok(s) => Cell::Scalar(s),
        Err(e) => Cell::Overflow(format!("approx_top_k: {e}")),
    }
}

/// A Space-Saving summary of `m` counters.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SpaceSaving {
    /// Counters (entries).
    pub m: usize,
}

impl Synopsis for SpaceSaving {
    fn bytes(&self) -> u32 {
        (self.m * ENTRY_BYTES) as u32
    }

    fn describe(&self) -> String {
        format!(
            "Space-Saving summary: {m} entries of {{value, count, error}} u64 ({} bytes per group per CPU), \
             unrolled scan without helper calls (~6 instructions per entry up to a hit, up to ~{} on a miss when full); \
             each true count t in [count − error, count], error ≤ N/{m} (N: the group's counted events or total weight), \
             every value with t > N/{m} kept; exact up to {m} distinct values; mergeable merge across CPUs and panes",
            self.bytes(),
            8 * self.m + 6,
            m = self.m
        )
    }

    fn emit_update(&self, cx: &mut UpdateCx, first: bool) -> Result<(), CompileError> {
        let (x, _) = cx.arg()?;
        let (p, off) = (cx.value_ptr, cx.off);
        let (v, c, min) = (cx.scratch(0)?, cx.scratch(1)?, cx.scratch(2)?);
        let w = cx.weight.map_or(Src::Imm(1), |(r, _)| Src::Reg(r));
        let at = |i: usize, field: usize| -> Result<i16, CompileError> {
            i16::try_from(off as i64 + (i * ENTRY_BYTES + field) as i64).map_err(|_| {
                CompileError::Internal("approx_top_k's state beyond a 16-bit offset".into())
            })
        };
        let asm = &mut *cx.asm;
        let done = asm.new_label();
        // Stores the weight as a count at `to` (a register or the constant 1).
        let store_w = |asm: &mut ebql_bpf::Assembler, to: i16| match w {
            Src::Reg(r) => asm.stx(Size::DW, p, to, r),
            Src::Imm(i) => asm.st_imm(Size::DW, p, to, i),
        };
        if let Some((r, ty)) = cx.weight {
            asm.comment("a weight ≤ 0 folds nothing");
            let le0 = if ty.signed { JmpCond::Sle } else { JmpCond::Eq };
            asm.jmp(le0, r, Src::Imm(0), done);
        }
        if first {
            asm.comment("the summary is empty: entry 0 = {x, w, 0}");
            asm.stx(Size::DW, p, at(0, 0)?, x);
            store_w(asm, at(0, 8)?);
            asm.bind(done);
            return Ok(());
        }
        let found: Vec<_> = (0..self.m).map(|_| asm.new_label()).collect();
        let empty: Vec<_> = (0..self.m).map(|_| asm.new_label()).collect();
        asm.comment(format!(
            "scan the {} entries: x's entry, else the first empty one (count 0), tracking the smallest count",
            self.m
        ));
        for i in 0..self.m {
            asm.ldx(Size::DW, v, p, at(i, 0)?);
            asm.jmp(JmpCond::Eq, v, Src::Reg(x), found[i]);
            asm.ldx(Size::DW, c, p, at(i, 8)?);
            asm.jmp(JmpCond::Eq, c, Src::Imm(0), empty[i]);
            if i == 0 {
                asm.mov64(min, Src::Reg(c));
            } else {
                let next = asm.new_label();
                asm.jmp(JmpCond::Ge, c, Src::Reg(min), next);
                asm.mov64(min, Src::Reg(c));
                asm.bind(next);
            }
        }
        asm.comment(
            "full and x absent: the first entry with the smallest count becomes {x, min + w, min}",
        );
        for i in 0..self.m {
            let next = asm.new_label();
            asm.ldx(Size::DW, c, p, at(i, 8)?);
            asm.jmp(JmpCond::Ne, c, Src::Reg(min), next);
            asm.stx(Size::DW, p, at(i, 0)?, x);
            asm.stx(Size::DW, p, at(i, 16)?, min);
            asm.alu64(ebql_bpf::AluOp::Add, min, w);
            asm.stx(Size::DW, p, at(i, 8)?, min);
            asm.ja(done);
            asm.bind(next);
        }
        asm.ja(done);
        asm.comment("x's entry: count += w");
        for (i, l) in found.into_iter().enumerate() {
            asm.bind(l);
            asm.ldx(Size::DW, c, p, at(i, 8)?);
            asm.alu64(ebql_bpf::AluOp::Add, c, w);
            asm.stx(Size::DW, p, at(i, 8)?, c);
            asm.ja(done);
        }
        asm.comment("an empty entry: {x, w, 0}");
        for (i, l) in empty.into_iter().enumerate() {
            asm.bind(l);
            asm.stx(Size::DW, p, at(i, 0)?, x);
            store_w(asm, at(i, 8)?);
            if i + 1 < self.m {
                asm.ja(done);
            }
        }
        asm.bind(done);
        Ok(())
    }

    fn merge(&self, into: &mut [u8], from: &[u8]) {
        let merged = merge_entries(&entries(into), &entries(from), self.m);
        write(into, &merged);
    }
}

/// `approx_top_k(x, k)` and `approx_top_k(x, k, w)` of integers, k a constant in 1..=64.
pub struct ApproxTopKFn;

impl Aggregate for ApproxTopKFn {
    fn names(&self) -> &'static [&'static str] {
        &["approx_top_k"]
    }

    fn doc(&self) -> &'static str {
        "approx_top_k(x, k), approx_top_k(x, k, w): the k most frequent values of x (weighted: the largest sums of w ≥ 0) as a list of {value, count, error}, by count descending, from a Space-Saving summary of m = clamp(4k, 16, 128) counters; each true count in [count − error, count], error ≤ N/m (N: the group's events or total weight); exact up to m distinct values"
    }

    fn resolve(
        &self,
        _name: &str,
        call: &mut dyn Call,
        slot: &mut dyn FnMut(Slot) -> usize,
    ) -> Result<Func, String> {
        if !(2..=3).contains(&call.arg_count()) {
            return Err("approx_top_k takes (x, k) or (x, k, w)".into());
        }
        let k = check_k(call.int_literal(1)?)?;
        let expr = call.int_arg(0)?;
        let weighted = call.arg_count() == 3;
        let weight = if weighted {
            Some(call.int_arg(2)?)
        } else {
            None
        };
        let mut when: Vec<KPred> = call.nullable_arg(0)?.into_iter().collect();
        if weighted {
            when.extend(call.nullable_arg(2)?);
        }
        let when = match when.len() {
            0 => None,
            1 => when.pop(),
            _ => Some(KPred::And(when)),
        };
        let m = counters(k);
        let s = slot(Slot {
            state: State::fold(SpaceSaving { m }),
            expr,
            when,
            weight,
        });
        Ok(Func::new(TopKValue {
            slot: s,
            k,
            m,
            weighted,
        }))
    }
}

/// approx_top_k: the k largest entries of this slot's summary.
#[derive(Debug)]
pub struct TopKValue {
    /// The summary's slot.
    pub slot: usize,
    /// Entries reported.
    pub k: usize,
    /// The summary's counters.
    pub m: usize,
    /// approx_top_k(x, k, w).
    pub weighted: bool,
}

impl Output for TopKValue {
    fn slot(&self) -> Option<usize> {
        Some(self.slot)
    }

    fn evaluate(&self, slots: &[Slot], _: u64, state: &[u8], dt: &DataType, _: &str) -> Cell {
        evaluate(state, self.k, slots[self.slot].expr.ty(), dt)
    }

    fn describe(&self) -> String {
        let n = if self.weighted {
            "the group's total weight"
        } else {
            "the group's non-NULL events"
        };
        format!(
            "top {} of slot {}'s Space-Saving summary by count{}: each true count in [count − error, count], error ≤ N/{} (N: {n})",
            self.k,
            self.slot,
            if self.weighted { " (weighted)" } else { "" },
            self.m
        )
    }

    fn state(&self, _: &[Slot], _: &DataType) -> Result<Vec<StatePart>, String> {
        Err("approx_top_k has no --partial state yet: its Space-Saving summary merges (Agarwal et al. 2012), but no engine that merges the partial rows (DataFusion, Spark) has its merge; query it without --partial".into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const I64: IntType = IntType {
        bits: 64,
        signed: true,
    };

    fn summary(m: usize, stream: impl IntoIterator<Item = (u64, u64)>) -> Vec<u8> {
        let mut s = vec![0u8; m * ENTRY_BYTES];
        for (x, w) in stream {
            update(&mut s, x, w);
        }
        s
    }

    /// The exact counts of a stream.
    fn exact(stream: &[(u64, u64)]) -> HashMap<u64, u64> {
        let mut t = HashMap::new();
        for &(x, w) in stream {
            *t.entry(x).or_insert(0) += w;
        }
        t
    }

    /// The guarantee of the module docs on a summary of `m` counters of `stream`.
    fn assert_guarantee(state: &[u8], m: usize, stream: &[(u64, u64)]) {
        let t = exact(stream);
        let n: u64 = stream.iter().map(|s| s.1).sum();
        let es = entries(state);
        assert!(es.len() <= m);
        let cmin = if es.len() == m {
            es.iter().map(|e| e.count).min().unwrap()
        } else {
            0
        };
        assert!(cmin * m as u64 <= n, "min {cmin} > N/m = {n}/{m}");
        for e in &es {
            let tv = t.get(&e.value).copied().unwrap_or(0);
            assert!(
                e.count - e.error <= tv && tv <= e.count,
                "{e:?}: true count {tv}"
            );
            assert!(e.error <= cmin, "{e:?}: error above the minimum {cmin}");
        }
        for (v, tv) in &t {
            if !es.iter().any(|e| e.value == *v) {
                assert!(*tv <= cmin, "{v} (true {tv}) missing, minimum {cmin}");
            }
        }
    }

    #[test]
    fn counters_and_k() {
        assert_eq!(
            (
                counters(1),
                counters(4),
                counters(5),
                counters(32),
                counters(64)
            ),
            (16, 16, 20, 128, 128)
        );
        assert!(check_k(0).is_err() && check_k(65).is_err() && check_k(64) == Ok(64));
        assert!(counters(64) * ENTRY_BYTES <= 4096);
    }

    #[test]
    fn update_is_exact_below_m_distinct_values() {
        let stream: Vec<(u64, u64)> = (0..100u64).map(|i| (i % 7, 1 + i % 3)).collect();
        let s = summary(16, stream.iter().copied());
        let t = exact(&stream);
        let es = entries(&s);
        assert_eq!(es.len(), 7);
        for e in &es {
            assert_eq!((e.count, e.error), (t[&e.value], 0));
        }
        // Filled entries are a prefix, in order of first appearance; 0 is a value like any other.
        assert_eq!(
            es.iter().map(|e| e.value).collect::<Vec<_>>(),
            vec![0, 1, 2, 3, 4, 5, 6]
        );
        // A weight of 0 changes nothing.
        let mut again = s.clone();
        update(&mut again, 99, 0);
        assert_eq!(again, s);
    }

    #[test]
    fn a_full_summary_replaces_the_first_minimum() {
        let mut s = summary(16, (1..=16u64).map(|x| (x, if x == 5 { 1 } else { 2 })));
        update(&mut s, 100, 3);
        let es = entries(&s);
        // Value 5 (count 1, the only minimum) gave way to 100: {100, 1 + 3, 1}.
        assert_eq!(
            es[4],
            Entry {
                value: 100,
                count: 4,
                error: 1
            }
        );
        // All minima equal: the first one goes.
        let mut s = summary(16, (1..=16u64).map(|x| (x, 1)));
        update(&mut s, 200, 1);
        assert_eq!(
            entries(&s)[0],
            Entry {
                value: 200,
                count: 2,
                error: 1
            }
        );
    }

    /// A deterministic skewed stream: `distinct` values, value i drawn with
    /// weight ∝ 1/(i+1) by a fixed LCG, plus heavy values.
    fn zipf_stream(len: usize, distinct: u64, seed: u64) -> Vec<(u64, u64)> {
        let mut r = seed;
        let mut out = Vec::with_capacity(len);
        for _ in 0..len {
            r = r
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let u = (r >> 11) as f64 / (1u64 << 53) as f64;
            let v = ((distinct as f64).powf(u) - 1.0) as u64;
            out.push((v.min(distinct - 1), 1 + ((r >> 20) & 3)));
        }
        out
    }

    #[test]
    fn the_guarantee_holds_on_skewed_streams_and_their_merges() {
        for (m, seed) in [(16, 1u64), (20, 2), (64, 3), (128, 4)] {
            let a = zipf_stream(5000, 500, seed);
            let b = zipf_stream(3000, 800, seed + 100);
            let (sa, sb) = (summary(m, a.iter().copied()), summary(m, b.iter().copied()));
            assert_guarantee(&sa, m, &a);
            assert_guarantee(&sb, m, &b);
            let mut merged = sa.clone();
            SpaceSaving { m }.merge(&mut merged, &sb);
            let both: Vec<_> = a.iter().chain(&b).copied().collect();
            assert_guarantee(&merged, m, &both);
            // Merging is associative enough for panes: ((a+b)+c) keeps the bound too.
            let c = zipf_stream(2000, 50, seed + 200);
            SpaceSaving { m }.merge(&mut merged, &summary(m, c.iter().copied()));
            let all: Vec<_> = both.iter().chain(&c).copied().collect();
            assert_guarantee(&merged, m, &all);
            // A heavy hitter (weight > N/m) is reported first with its bracket.
            let t = exact(&all);
            let (hv, ht) = t
                .iter()
                .max_by_key(|(v, c)| (**c, std::cmp::Reverse(**v)))
                .unwrap();
            let n: u64 = all.iter().map(|s| s.1).sum();
            assert!(*ht * m as u64 > n, "stream not skewed enough");
            let out = top(
                entries(&merged)
                    .iter()
                    .map(|e| (e.value as i128, e.count, e.error))
                    .collect(),
                1,
            );
            assert_eq!(out[0].0, *hv as i128);
        }
    }

    #[test]
    fn merging_exact_summaries_is_exact_and_a_partial_summary_adds_no_floor() {
        let a = summary(16, [(1, 5), (2, 3)]);
        let b = summary(16, [(2, 4), (3, 1)]);
        let mut m = a.clone();
        SpaceSaving { m: 16 }.merge(&mut m, &b);
        assert_eq!(
            entries(&m),
            vec![
                Entry {
                    value: 2,
                    count: 7,
                    error: 0
                },
                Entry {
                    value: 1,
                    count: 5,
                    error: 0
                },
                Entry {
                    value: 3,
                    count: 1,
                    error: 0
                },
            ]
        );
        // Full summaries: an absent value takes the other's minimum as count and error.
        let fa: Vec<Entry> = (0..4)
            .map(|v| Entry {
                value: v,
                count: 10 + v,
                error: 0,
            })
            .collect();
        let fb: Vec<Entry> = (2..6)
            .map(|v| Entry {
                value: v,
                count: 20,
                error: 1,
            })
            .collect();
        let got = merge_entries(&fa, &fb, 4);

        // 20 + 10 (absent from a), error 1 + 10... 0 + 10; the tie at 30 keeps
        // the smallest value.
        let e = |value, count, error| Entry {
            value,
            count,
            error,
        };
        assert_eq!(
            got,
            vec![e(3, 33, 1), e(2, 32, 1), e(1, 31, 20), e(0, 30, 20)]
        );
        // The same entries as summaries of 8 counters are not full: exact, no floor.
        assert_eq!(
            merge_entries(&fa, &fb, 8),
            [
                e(3, 33, 1),
                e(2, 32, 1),
                e(4, 20, 1),
                e(5, 20, 1),
                e(1, 11, 0),
                e(0, 10, 0)
            ]
        );
    }

    #[test]
    fn output_is_by_count_then_value_in_the_arguments_type() {
        let s = summary(16, [(5, 2), ((-3i64) as u64, 2), (7, 9), (1, 1)]);
        let dt = result_type(&DataType::Int32);
        let ty = IntType {
            bits: 32,
            signed: true,
        };
        let Cell::Scalar(ScalarValue::List(l)) = evaluate(&s, 3, ty, &dt) else {
            panic!("a list")
        };
        assert_eq!(l.data_type(), &dt);
        let text = datafusion::arrow::util::display::ArrayFormatter::try_new(
            l.as_ref(),
            &Default::default(),
        )
        .unwrap()
        .value(0)
        .to_string();
        assert_eq!(
            text,
            "[{value: 7, count: 9, error: 0}, {value: -3, count: 2, error: 0}, {value: 5, count: 2, error: 0}]"
        );
        assert_eq!(
            evaluate(&vec![0; 16 * ENTRY_BYTES], 3, I64, &dt),
            Cell::Null
        );
        assert_eq!(typed(u64::MAX, I64), -1);
        assert_eq!(
            typed(
                0xffff_ffff,
                IntType {
                    bits: 32,
                    signed: false
                }
            ),
            0xffff_ffff
        );
    }
}
