//! HIST and LHIST: histograms with bpftrace's buckets, one u64 counter per
//! bucket in the map value. Exact.
//!
//! `HIST(x)` ([`Log2Hist`], bpftrace `hist()`): bucket 0 holds the negative
//! values, bucket 1 the zeroes, bucket `i ≥ 2` the values in
//! [2^(i-2), 2^(i-1)), so 66 buckets cover every signed or unsigned 64-bit
//! value. `LHIST(x, min, max, step)` ([`LinearHist`], bpftrace `lhist()`):
//! bucket 0 holds the values below `min`, bucket `1 + (x - min) / step` the
//! values in [min, max), the last bucket the values ≥ `max`.
//!
//! Output: a list of `{lo, hi, count}` structs ([`bucket_type`]), one per
//! non-empty bucket in increasing order, with **both bounds inclusive** so
//! every bound is a value of the argument's type: the negative bucket is
//! `[type min, -1]`, the zero bucket `[0, 0]`, `[4, 7]` is bpftrace's
//! `[4, 8)`, an underflow bucket `[type min, min - 1]`, an overflow bucket
//! `[max, type max]`. `lo` and `hi` are Int64 for a signed argument, UInt64
//! for an unsigned one.

use super::function::{Aggregate, Call, Func, Output, StatePart};
use super::synopsis::{put_u64, u64_at, Slot, State, Synopsis, UpdateCx};
use crate::contract::Cell;
use crate::error::CompileError;
use crate::kexpr::IntType;
use datafusion::arrow::array::{ArrayRef, Int64Array, ListArray, StructArray, UInt64Array};
use datafusion::arrow::buffer::OffsetBuffer;
use datafusion::arrow::datatypes::{DataType, Field, Fields};
use datafusion::common::ScalarValue;
use ebql_bpf::{AluOp, JmpCond, Reg, Size, Src};
use std::sync::Arc;

/// Buckets of a [`Log2Hist`]: negative, zero, then one per power of two up to 2^63.
pub const LOG2_BUCKETS: usize = 66;

/// Most buckets an LHIST may have in the kernel (under- and overflow
/// included): 8 bytes each, well inside the 32 KiB per-CPU value limit.
pub const MAX_LINEAR_BUCKETS: u64 = 2048;

/// The HIST bucket of `v` (a value of a 64-bit signed or unsigned type, as i128).
pub fn log2_index(v: i128) -> usize {
    match v {
        v if v < 0 => 0,
        0 => 1,
        v => 2 + (127 - v.leading_zeros() as usize),
    }
}

/// Inclusive bounds of HIST bucket `i` for an argument of type `ty`.
pub fn log2_bounds(i: usize, ty: IntType) -> (i128, i128) {
    match i {
        0 => (ty.min(), -1),
        1 => (0, 0),
        i => (1i128 << (i - 2), ((1i128 << (i - 1)) - 1).min(ty.max())),
    }
}

/// A power-of-two histogram (`HIST(x)`): [`LOG2_BUCKETS`] u64 counters.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Log2Hist {
    /// The argument is signed (negative values have a bucket).
    pub signed: bool,
}

/// Adds 1 to the u64 counter at `off + 8 * idx` of the state (`idx` in a scratch register, clobbered).
fn bump_bucket(cx: &mut UpdateCx, idx: Reg, tmp: Reg) {
    cx.asm.alu64(AluOp::Lsh, idx, Src::Imm(3));
    cx.asm.alu64(AluOp::Add, idx, Src::Reg(cx.value_ptr));
    cx.asm.ldx(Size::DW, tmp, idx, cx.off);
    cx.asm.alu64(AluOp::Add, tmp, Src::Imm(1));
    cx.asm.stx(Size::DW, idx, cx.off, tmp);
}

/// Instructions of [`emit_log2`]: 6 shift-and-test steps of 5 instructions.
pub const LOG2_INSNS: usize = 30;

/// Emits `e += floor(log2 v)` for `v ≥ 1` in `work` (clobbered): BPF has no
/// count-leading-zeroes, so a binary search of 6 shifts (32, 16, … 1), each
/// `t = work >> s; if t != 0 { work = t; e += s }`.
pub fn emit_log2(cx: &mut UpdateCx, work: Reg, e: Reg, t: Reg) {
    for s in [32, 16, 8, 4, 2, 1] {
        let next = cx.asm.new_label();
        cx.asm.mov64(t, Src::Reg(work));
        cx.asm.alu64(AluOp::Rsh, t, Src::Imm(s));
        cx.asm.jmp(JmpCond::Eq, t, Src::Imm(0), next);
        cx.asm.mov64(work, Src::Reg(t));
        cx.asm.alu64(AluOp::Add, e, Src::Imm(s));
        cx.asm.bind(next);
    }
}

impl Synopsis for Log2Hist {
    fn bytes(&self) -> u32 {
        8 * LOG2_BUCKETS as u32
    }

    fn describe(&self) -> String {
        format!(
            "log2 histogram: {LOG2_BUCKETS} u64 counters (<0, 0, [1,2), [2,4) … [2^63,2^64)), exact; \
             bucket index by a 6-step shift search, ~{} instructions per event",
            LOG2_INSNS + 10
        )
    }

    fn emit_update(&self, cx: &mut UpdateCx, _first: bool) -> Result<(), CompileError> {
        // The all-zero state is an empty histogram: the first event is no different.
        let (v, _) = cx.arg()?;
        let (idx, work, t) = (cx.scratch(0)?, cx.scratch(1)?, cx.scratch(2)?);
        let add = cx.asm.new_label();
        cx.asm.mov64(idx, Src::Imm(0));
        if self.signed {
            cx.asm.jmp(JmpCond::Slt, v, Src::Imm(0), add);
        }
        cx.asm.mov64(idx, Src::Imm(1));
        cx.asm.jmp(JmpCond::Eq, v, Src::Imm(0), add);
        cx.asm.comment("v ≥ 1: bucket 2 + floor(log2 v)");
        cx.asm.mov64(idx, Src::Imm(2));
        cx.asm.mov64(work, Src::Reg(v));
        emit_log2(cx, work, idx, t);
        cx.asm.bind(add);
        bump_bucket(cx, idx, work);
        Ok(())
    }

    fn merge(&self, into: &mut [u8], from: &[u8]) {
        add_counters(into, from);
    }
}

/// A linear histogram (`LHIST(x, min, max, step)`): under- and overflow
/// counters around `ceil((max - min) / step)` linear buckets.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct LinearHist {
    /// Lowest value of the first linear bucket.
    pub min: i64,
    /// Values ≥ `max` go to the overflow bucket.
    pub max: i64,
    /// Width of a linear bucket (> 0).
    pub step: i64,
    /// The argument is signed (compared as such).
    pub signed: bool,
}

impl LinearHist {
    /// Buckets, under- and overflow included.
    pub fn buckets(&self) -> usize {
        linear_buckets(self.min, self.max, self.step) as usize
    }

    /// The bucket of `v`.
    pub fn index(&self, v: i128) -> usize {
        let (min, max) = (self.min as i128, self.max as i128);
        if v < min {
            0
        } else if v >= max {
            self.buckets() - 1
        } else {
            1 + ((v - min) / self.step as i128) as usize
        }
    }

    /// Inclusive bounds of bucket `i` for an argument of type `ty`.
    pub fn bounds(&self, i: usize, ty: IntType) -> (i128, i128) {
        let (min, max, step) = (self.min as i128, self.max as i128, self.step as i128);
        if i == 0 {
            (ty.min(), min - 1)
        } else if i == self.buckets() - 1 {
            (max, ty.max())
        } else {
            let lo = min + (i as i128 - 1) * step;
            (lo, (lo + step - 1).min(max - 1))
        }
    }
}

/// Buckets of `LHIST(x, min, max, step)`: `ceil((max - min) / step)` linear
/// ones, an underflow and an overflow one.
pub fn linear_buckets(min: i64, max: i64, step: i64) -> u64 {
    ((max as i128 - min as i128 + step as i128 - 1) / step as i128) as u64 + 2
}

impl Synopsis for LinearHist {
    fn bytes(&self) -> u32 {
        8 * self.buckets() as u32
    }

    fn describe(&self) -> String {
        format!(
            "linear histogram: {} u64 counters (< {}, {} buckets of {} up to {}, ≥ {}), exact; bucket index by 2 compares and a division, ~12 instructions per event",
            self.buckets(),
            self.min,
            self.buckets() - 2,
            self.step,
            self.max,
            self.max
        )
    }

    fn emit_update(&self, cx: &mut UpdateCx, _first: bool) -> Result<(), CompileError> {
        let (v, _) = cx.arg()?;
        let (idx, tmp) = (cx.scratch(0)?, cx.scratch(1)?);
        let (lt, ge) = if self.signed {
            (JmpCond::Slt, JmpCond::Sge)
        } else {
            (JmpCond::Lt, JmpCond::Ge)
        };
        let add = cx.asm.new_label();
        // min, max and step are 32-bit immediates (checked in resolve).
        cx.asm.mov64(idx, Src::Imm(0));
        cx.asm.jmp(lt, v, Src::Imm(self.min as i32), add);
        cx.asm.mov64(idx, Src::Imm(self.buckets() as i32 - 1));
        cx.asm.jmp(ge, v, Src::Imm(self.max as i32), add);
        cx.asm.comment("min ≤ v < max: bucket 1 + (v - min) / step");
        cx.asm.mov64(idx, Src::Reg(v));
        cx.asm.alu64(AluOp::Sub, idx, Src::Imm(self.min as i32));
        cx.asm.alu64(AluOp::Div, idx, Src::Imm(self.step as i32));
        cx.asm.alu64(AluOp::Add, idx, Src::Imm(1));
        // The verifier cannot bound a quotient by the compares above.
        cx.asm
            .jmp(JmpCond::Le, idx, Src::Imm(self.buckets() as i32 - 2), add);
        cx.asm.mov64(idx, Src::Imm(self.buckets() as i32 - 2));
        cx.asm.bind(add);
        bump_bucket(cx, idx, tmp);
        Ok(())
    }

    fn merge(&self, into: &mut [u8], from: &[u8]) {
        add_counters(into, from);
    }
}

/// Adds u64 counters element-wise.
pub fn add_counters(into: &mut [u8], from: &[u8]) {
    for off in (0..into.len()).step_by(8) {
        put_u64(into, off, u64_at(into, off).wrapping_add(u64_at(from, off)));
    }
}

/// The struct of one bucket: `{lo, hi, count}`, bounds inclusive, Int64 for
/// a signed argument and UInt64 for an unsigned one, count UInt64.
pub fn bucket_type(signed: bool) -> DataType {
    let bound = if signed {
        DataType::Int64
    } else {
        DataType::UInt64
    };
    DataType::Struct(Fields::from(vec![
        Field::new("lo", bound.clone(), false),
        Field::new("hi", bound, false),
        Field::new("count", DataType::UInt64, false),
    ]))
}

/// The result type of HIST and LHIST: a list of [`bucket_type`].
pub fn hist_type(signed: bool) -> DataType {
    DataType::List(Arc::new(Field::new_list_field(bucket_type(signed), true)))
}

/// A histogram value: the non-empty buckets `(lo, hi, count)` in order, as one list scalar.
pub fn hist_scalar(buckets: &[(i128, i128, u64)], signed: bool) -> ScalarValue {
    let DataType::Struct(fields) = bucket_type(signed) else {
        unreachable!("a struct type")
    };
    let bound = |f: fn(&(i128, i128, u64)) -> i128| -> ArrayRef {
        if signed {
            Arc::new(Int64Array::from_iter_values(
                buckets.iter().map(|b| f(b) as i64),
            ))
        } else {
            Arc::new(UInt64Array::from_iter_values(
                buckets.iter().map(|b| f(b) as u64),
            ))
        }
    };
    let counts: ArrayRef = Arc::new(UInt64Array::from_iter_values(buckets.iter().map(|b| b.2)));
    let structs = StructArray::new(fields, vec![bound(|b| b.0), bound(|b| b.1), counts], None);
    let DataType::List(item) = hist_type(signed) else {
        unreachable!("a list type")
    };
    let list = ListArray::new(
        item,
        OffsetBuffer::from_lengths([buckets.len()]),
        Arc::new(structs),
        None,
    );
    ScalarValue::List(Arc::new(list))
}

/// The non-empty buckets of a counter state, with bounds from `bounds`.
pub fn buckets_of(state: &[u8], bounds: impl Fn(usize) -> (i128, i128)) -> Vec<(i128, i128, u64)> {
    state
        .chunks_exact(8)
        .enumerate()
        .filter_map(|(i, c)| {
            let n = u64::from_le_bytes(c.try_into().expect("8 bytes"));
            (n > 0).then(|| {
                let (lo, hi) = bounds(i);
                (lo, hi, n)
            })
        })
        .collect()
}

/// A HIST state as its output cell.
pub fn evaluate_log2(state: &[u8], ty: IntType) -> Cell {
    Cell::Scalar(hist_scalar(
        &buckets_of(state, |i| log2_bounds(i, ty)),
        ty.signed,
    ))
}

/// An LHIST state as its output cell.
pub fn evaluate_linear(h: &LinearHist, state: &[u8], ty: IntType) -> Cell {
    Cell::Scalar(hist_scalar(
        &buckets_of(state, |i| h.bounds(i, ty)),
        ty.signed,
    ))
}

/// Checks LHIST's constant parameters: `min < max`, `step > 0`, at most
/// [`MAX_LINEAR_BUCKETS`] buckets. The error is for people (it is a query
/// error in user space too).
pub fn check_linear(min: i64, max: i64, step: i64) -> Result<(), String> {
    if step <= 0 {
        return Err(format!("LHIST step must be positive, got {step}"));
    }
    if min >= max {
        return Err(format!("LHIST min ({min}) must be below max ({max})"));
    }
    let n = linear_buckets(min, max, step);
    if n > MAX_LINEAR_BUCKETS {
        return Err(format!("LHIST({min}, {max}, {step}) has {n} buckets; at most {MAX_LINEAR_BUCKETS} (use a larger step)"));
    }
    Ok(())
}

/// `hist(x)` of an integer `x`: a power-of-two histogram.
pub struct HistFn;

impl Aggregate for HistFn {
    fn names(&self) -> &'static [&'static str] {
        &["hist"]
    }

    fn doc(&self) -> &'static str {
        "HIST(x): counts per power-of-two bucket, as a list of {lo, hi, count}; exact"
    }

    fn resolve(
        &self,
        _name: &str,
        call: &mut dyn Call,
        slot: &mut dyn FnMut(Slot) -> usize,
    ) -> Result<Func, String> {
        let expr = call.int_arg(0)?;
        let state = State::fold(Log2Hist {
            signed: expr.ty().signed,
        });
        Ok(Func::new(Log2HistValue(slot(Slot {
            state,
            expr,
            when: None,
            weight: None,
        }))))
    }
}

/// `lhist(x, min, max, step)` of an integer `x`, constant bounds within 32 bits.
pub struct LhistFn;

impl Aggregate for LhistFn {
    fn names(&self) -> &'static [&'static str] {
        &["lhist"]
    }

    fn doc(&self) -> &'static str {
        "LHIST(x, min, max, step): counts per linear bucket of width step, plus under- and overflow, as a list of {lo, hi, count}; exact"
    }

    fn resolve(
        &self,
        _name: &str,
        call: &mut dyn Call,
        slot: &mut dyn FnMut(Slot) -> usize,
    ) -> Result<Func, String> {
        let expr = call.int_arg(0)?;
        let mut p = [0i64; 3];
        for (k, v) in p.iter_mut().enumerate() {
            *v = call.int_literal(k + 1)?;
        }
        let [min, max, step] = p;
        check_linear(min, max, step)?;
        if [min, max, step].iter().any(|v| i32::try_from(*v).is_err()) {
            return Err("LHIST bounds beyond 32 bits are counted in user space".into());
        }
        if !expr.ty().signed && min < 0 {
            return Err(
                "LHIST of an unsigned value with a negative min is counted in user space".into(),
            );
        }
        let hist = LinearHist {
            min,
            max,
            step,
            signed: expr.ty().signed,
        };
        let s = slot(Slot {
            state: State::fold(hist),
            expr,
            when: None,
            weight: None,
        });
        Ok(Func::new(LinearHistValue(s, hist)))
    }
}

/// HIST: this power-of-two histogram slot's non-empty buckets.
#[derive(Debug)]
pub struct Log2HistValue(pub usize);

impl Output for Log2HistValue {
    fn slot(&self) -> Option<usize> {
        Some(self.0)
    }

    fn evaluate(&self, slots: &[Slot], _: u64, state: &[u8], _: &DataType, _: &str) -> Cell {
        evaluate_log2(state, slots[self.0].expr.ty())
    }

    fn describe(&self) -> String {
        describe_buckets(self.0)
    }

    fn state(&self, _: &[Slot], _: &DataType) -> Result<Vec<StatePart>, String> {
        Ok(counters_state(self.0))
    }
}

/// LHIST: this linear histogram slot's non-empty buckets.
#[derive(Debug)]
pub struct LinearHistValue(pub usize, pub LinearHist);

impl Output for LinearHistValue {
    fn slot(&self) -> Option<usize> {
        Some(self.0)
    }

    fn evaluate(&self, slots: &[Slot], _: u64, state: &[u8], _: &DataType, _: &str) -> Cell {
        evaluate_linear(&self.1, state, slots[self.0].expr.ty())
    }

    fn describe(&self) -> String {
        describe_buckets(self.0)
    }

    fn state(&self, _: &[Slot], _: &DataType) -> Result<Vec<StatePart>, String> {
        Ok(counters_state(self.0))
    }
}

/// A histogram's state: `[counts]`, every bucket's counter in bucket order
/// (List<UInt64>), as the user-space HIST/LHIST accumulators'
/// (`crate::udaf`) `state()`: they merge it.
fn counters_state(slot: usize) -> Vec<StatePart> {
    vec![StatePart::new(
        "counts",
        DataType::new_list(DataType::UInt64, true),
        Counters(slot),
    )]
}

/// Every u64 counter of this slot, as one List<UInt64> value.
#[derive(Debug)]
pub struct Counters(pub usize);

impl Output for Counters {
    fn slot(&self) -> Option<usize> {
        Some(self.0)
    }

    fn evaluate(&self, _: &[Slot], _: u64, state: &[u8], _: &DataType, _: &str) -> Cell {
        let counts: Vec<u64> = state
            .chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")))
            .collect();
        Cell::Scalar(u64_list(counts))
    }

    fn describe(&self) -> String {
        format!("slot {}'s counters", self.0)
    }
}

/// One List<UInt64> value holding `values`.
pub fn u64_list(values: Vec<u64>) -> ScalarValue {
    let item = Arc::new(Field::new_list_field(DataType::UInt64, true));
    ScalarValue::List(Arc::new(ListArray::new(
        item,
        OffsetBuffer::from_lengths([values.len()]),
        Arc::new(UInt64Array::from(values)),
        None,
    )))
}

/// `explain`'s text for a histogram output of slot `i`.
fn describe_buckets(i: usize) -> String {
    format!("slot {i}'s non-empty buckets as [{{lo, hi, count}}], bounds inclusive")
}

#[cfg(test)]
mod tests {
    use super::*;

    const U64: IntType = IntType {
        bits: 64,
        signed: false,
    };
    const I64: IntType = IntType {
        bits: 64,
        signed: true,
    };

    fn state(counts: &[(usize, u64)], n: usize) -> Vec<u8> {
        let mut s = vec![0u8; 8 * n];
        for &(i, c) in counts {
            put_u64(&mut s, 8 * i, c);
        }
        s
    }

    #[test]
    fn log2_buckets_are_bpftrace_hist() {
        assert_eq!(
            [-5, 0, 1, 2, 3, 4, 7, 8].map(log2_index),
            [0, 1, 2, 3, 3, 4, 4, 5]
        );
        assert_eq!(log2_index(u64::MAX as i128), 65);
        assert_eq!(log2_index(i64::MAX as i128), 64);
        assert_eq!(log2_bounds(0, I64), (i64::MIN as i128, -1));
        assert_eq!(log2_bounds(4, U64), (4, 7));
        assert_eq!(log2_bounds(65, U64), (1 << 63, u64::MAX as i128));
        assert_eq!(log2_bounds(64, I64), (1 << 62, i64::MAX as i128));
        // Every value lies within its bucket's bounds.
        for v in [1i128, 2, 3, 1000, 1 << 40, (1 << 41) - 1] {
            let (lo, hi) = log2_bounds(log2_index(v), U64);
            assert!(lo <= v && v <= hi, "{v}");
        }
    }

    #[test]
    fn linear_buckets_are_bpftrace_lhist() {
        let h = LinearHist {
            min: 0,
            max: 100,
            step: 10,
            signed: true,
        };
        assert_eq!(h.buckets(), 12);
        assert_eq!(
            [-1, 0, 9, 10, 99, 100, 1000].map(|v| h.index(v)),
            [0, 1, 1, 2, 10, 11, 11]
        );
        assert_eq!(h.bounds(0, I64), (i64::MIN as i128, -1));
        assert_eq!(h.bounds(2, I64), (10, 19));
        assert_eq!(h.bounds(11, I64), (100, i64::MAX as i128));
        // A step that does not divide the range: the last linear bucket ends at max - 1.
        let h = LinearHist {
            min: 0,
            max: 10,
            step: 4,
            signed: false,
        };
        assert_eq!(
            (h.buckets(), h.bounds(3, U64), h.index(9), h.index(10)),
            (5, (8, 9), 3, 4)
        );
        assert!(
            check_linear(0, 10, 0).is_err()
                && check_linear(5, 5, 1).is_err()
                && check_linear(0, 1 << 20, 1).is_err()
        );
    }

    #[test]
    fn merge_adds_buckets_and_evaluate_lists_the_nonempty_ones() {
        let mut a = state(&[(1, 2), (4, 1)], LOG2_BUCKETS);
        let b = state(&[(4, 3), (65, 1)], LOG2_BUCKETS);
        Log2Hist { signed: false }.merge(&mut a, &b);
        assert_eq!(
            buckets_of(&a, |i| log2_bounds(i, U64)),
            vec![(0, 0, 2), (4, 7, 4), (1 << 63, u64::MAX as i128, 1)]
        );
        let Cell::Scalar(s) = evaluate_log2(&a, U64) else {
            panic!("a scalar")
        };
        assert_eq!(s.data_type(), hist_type(false));
        assert_eq!(s.to_string(), "[{lo: 0, hi: 0, count: 2}, {lo: 4, hi: 7, count: 4}, {lo: 9223372036854775808, hi: 18446744073709551615, count: 1}]");
    }
}
