//! Quantiles (`QUANTILE(x, q)`, `approx_percentile_cont(x, q)`,
//! `approx_median(x)`): an integer log-linear sketch of an unsigned argument
//! in the map value, with relative error at most 2^-(K+1) = 0.78%.
//!
//! Buckets ([`index`]): values below 2^K = 64 have a bucket each (exact);
//! a value v ≥ 64 with e = floor(log2 v) falls in one of 2^K = 64 equal
//! sub-buckets of [2^e, 2^(e+1)), each 2^(e-K) wide. That is 64 + 58 × 64 =
//! [`BUCKETS`] = 3776 buckets for all of u64.
//!
//! Counters are u64 (30,208 bytes per group per CPU, inside the kernel's
//! 32 KiB per-CPU value limit): a u32 counter could wrap in one busy window
//! (4.3 G events), and detecting that in the probe costs a branch per event.
//! The price: one sketch per query fits in the map value, so quantiles of two
//! different arguments run in user space (quantiles of one argument share
//! one sketch, through the slot deduplication).
//!
//! The quantile reported for q is the **nearest-rank** quantile (SQL's
//! `PERCENTILE_DISC`): the smallest value v such that at least q·n of the n
//! values are ≤ v, i.e. the value of rank max(1, ⌈q·n⌉). The sketch finds the
//! bucket holding that rank and reports its middle integer ([`representative`]);
//! a bucket [lo, lo + w) with lo ≥ 64·w is reported as lo + (w-1)/2, at most
//! w/2 ≤ lo/128 away from any value in it: |reported − exact| ≤ exact / 128.
//!
//! Signed arguments run in user space: negative values would need a second,
//! mirrored sketch, which does not fit next to the first.

use super::function::{Aggregate, Call, Func, Output, StatePart};
use super::synopsis::{Slot, State, Synopsis, UpdateCx};
use crate::contract::Cell;
use crate::error::CompileError;
use crate::kexpr::IntType;
use datafusion::arrow::datatypes::DataType;
use ebql_bpf::{AluOp, JmpCond, Size, Src};

/// Sub-buckets per power of two: 2^K.
pub const K: u32 = 6;
/// Buckets of the sketch: 2^K exact ones, then 2^K per power of two from 2^K to 2^63.
pub const BUCKETS: usize = (1 << K) + (64 - K as usize) * (1 << K);
/// The relative error bound, 2^-(K+1).
pub const RELATIVE_ERROR: f64 = 1.0 / (1u64 << (K + 1)) as f64;

/// The sketch bucket of `v`.
pub fn index(v: u64) -> usize {
    if v < 1 << K {
        return v as usize;
    }
    let e = 63 - v.leading_zeros();
    let sub = (v >> (e - K)) & ((1 << K) - 1);
    ((e - K + 1) as usize) * (1 << K) + sub as usize
}

/// Inclusive bounds of bucket `i`.
pub fn bounds(i: usize) -> (u64, u64) {
    if i < 1 << K {
        return (i as u64, i as u64);
    }
    let e = (i >> K) as u32 + K - 1;
    let m = (1u64 << K) + (i as u64 & ((1 << K) - 1));
    let w = 1u64 << (e - K);
    let lo = m << (e - K);
    (lo, lo + (w - 1))
}

/// The value reported for bucket `i`: its middle integer (rounded down).
pub fn representative(i: usize) -> u64 {
    let (lo, hi) = bounds(i);
    lo + (hi - lo) / 2
}

/// The nearest-rank position of quantile `q` among `n ≥ 1` values: max(1, ⌈q·n⌉), at most n.
pub fn rank(q: f64, n: u64) -> u64 {
    ((q * n as f64).ceil() as u64).clamp(1, n)
}

/// The log-linear sketch of an unsigned argument: [`BUCKETS`] u64 counters.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Sketch;

impl Synopsis for Sketch {
    fn bytes(&self) -> u32 {
        8 * BUCKETS as u32
    }

    fn describe(&self) -> String {
        format!(
            "log-linear quantile sketch: {BUCKETS} u64 counters (values < {} exact, then {} sub-buckets per power of two), \
             relative error ≤ 2^-{} = {:.2}%; bucket index by a 6-step shift search, ~{} instructions per event",
            1 << K,
            1 << K,
            K + 1,
            RELATIVE_ERROR * 100.0,
            super::hist::LOG2_INSNS + 14
        )
    }

    fn emit_update(&self, cx: &mut UpdateCx, _first: bool) -> Result<(), CompileError> {
        let (v, _) = cx.arg()?;
        let (idx, work, t) = (cx.scratch(0)?, cx.scratch(1)?, cx.scratch(2)?);
        let add = cx.asm.new_label();
        cx.asm.mov64(idx, Src::Reg(v));
        cx.asm.jmp(JmpCond::Lt, v, Src::Imm(1 << K), add);
        cx.asm
            .comment("v ≥ 64: e = floor(log2 v); bucket (e - 5) * 64 + ((v >> (e - 6)) & 63)");
        cx.asm.mov64(idx, Src::Imm(0));
        cx.asm.mov64(work, Src::Reg(v));
        super::hist::emit_log2(cx, work, idx, t);
        cx.asm.mov64(t, Src::Reg(idx));
        cx.asm.alu64(AluOp::Sub, t, Src::Imm(K as i32));
        cx.asm.mov64(work, Src::Reg(v));
        cx.asm.alu64(AluOp::Rsh, work, Src::Reg(t));
        cx.asm.alu64(AluOp::And, work, Src::Imm((1 << K) - 1));
        cx.asm.alu64(AluOp::Sub, idx, Src::Imm(K as i32 - 1));
        cx.asm.alu64(AluOp::Lsh, idx, Src::Imm(K as i32));
        cx.asm.alu64(AluOp::Add, idx, Src::Reg(work));
        cx.asm.bind(add);
        cx.asm.alu64(AluOp::Lsh, idx, Src::Imm(3));
        cx.asm.alu64(AluOp::Add, idx, Src::Reg(cx.value_ptr));
        cx.asm.ldx(Size::DW, work, idx, cx.off);
        cx.asm.alu64(AluOp::Add, work, Src::Imm(1));
        cx.asm.stx(Size::DW, idx, cx.off, work);
        Ok(())
    }

    fn merge(&self, into: &mut [u8], from: &[u8]) {
        super::hist::add_counters(into, from);
    }
}

/// Quantile `q` of a sketch state, as a value of the argument's type `ty`
/// (NULL when the sketch is empty).
pub fn evaluate(state: &[u8], q: f64, ty: IntType) -> Cell {
    let counts: Vec<u64> = state
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")))
        .collect();
    let n: u64 = counts.iter().sum();
    if n == 0 {
        return Cell::Null;
    }
    let r = rank(q, n);
    let mut seen = 0;
    for (i, c) in counts.iter().enumerate() {
        seen += c;
        if seen >= r {
            return Cell::Int(representative(i), ty);
        }
    }
    unreachable!("rank ≤ n")
}

/// The q of `QUANTILE(x, q)`: a literal in [0, 1].
pub fn check_q(q: f64) -> Result<(), String> {
    if (0.0..=1.0).contains(&q) {
        Ok(())
    } else {
        Err(format!("the quantile must be between 0 and 1, got {q}"))
    }
}

/// `quantile(x, q)`, `approx_percentile_cont(x, q)`, `approx_median(x)` of
/// an unsigned integer `x`, with q a constant in [0, 1].
pub struct QuantileFn;

impl Aggregate for QuantileFn {
    fn names(&self) -> &'static [&'static str] {
        &["quantile", "approx_percentile_cont", "approx_median"]
    }

    fn doc(&self) -> &'static str {
        "QUANTILE(x, q), approx_percentile_cont(x, q), approx_median(x): the nearest-rank quantile from a log-linear sketch, within 0.78%"
    }

    fn resolve(
        &self,
        name: &str,
        call: &mut dyn Call,
        slot: &mut dyn FnMut(Slot) -> usize,
    ) -> Result<Func, String> {
        let q = match name {
            "approx_median" => 0.5,
            _ => call.float_literal(1)?,
        };
        check_q(q)?;
        let expr = call.int_arg(0)?;
        if expr.ty().signed {
            return Err("quantiles of a signed value are computed in user space (the sketch holds non-negative values)".into());
        }
        let s = slot(Slot {
            state: State::fold(Sketch),
            expr,
            when: None,
            weight: None,
        });
        Ok(Func::new(QuantileValue(s, q.to_bits())))
    }
}

/// A quantile of this sketch slot; the quantile q as `f64::to_bits`.
#[derive(Debug)]
pub struct QuantileValue(pub usize, pub u64);

impl Output for QuantileValue {
    fn slot(&self) -> Option<usize> {
        Some(self.0)
    }

    fn evaluate(&self, slots: &[Slot], _: u64, state: &[u8], _: &DataType, _: &str) -> Cell {
        evaluate(state, f64::from_bits(self.1), slots[self.0].expr.ty())
    }

    fn describe(&self) -> String {
        format!(
            "quantile {} of slot {}: the middle of the bucket holding the nearest-rank value, within {:.2}% of it",
            f64::from_bits(self.1),
            self.0,
            RELATIVE_ERROR * 100.0
        )
    }

    /// eBQL's sketch, sparse (DataFusion's own quantile state is a t-digest,
    /// which this is not): `[buckets]` List<UInt32>, the indexes of the
    /// non-empty buckets ([`index`], [`bounds`]) in increasing order, and
    /// `[counts]` List<UInt64>, their counters. Two states merge by adding
    /// the counters of equal indexes; the merged sketch is the sketch of all
    /// the values, so the quantile keeps [`RELATIVE_ERROR`].
    fn state(&self, _: &[Slot], _: &DataType) -> Result<Vec<StatePart>, String> {
        Ok(vec![
            StatePart::new(
                "buckets",
                DataType::new_list(DataType::UInt32, true),
                SketchPart(self.0, false),
            ),
            StatePart::new(
                "counts",
                DataType::new_list(DataType::UInt64, true),
                SketchPart(self.0, true),
            ),
        ])
    }
}

/// The non-empty buckets of this sketch slot: their indexes (`false`) or
/// their counters (`true`).
#[derive(Debug)]
pub struct SketchPart(pub usize, pub bool);

impl Output for SketchPart {
    fn slot(&self) -> Option<usize> {
        Some(self.0)
    }

    fn evaluate(&self, _: &[Slot], _: u64, state: &[u8], _: &DataType, _: &str) -> Cell {
        let nonzero = state
            .chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")))
            .enumerate()
            .filter(|&(_, n)| n > 0);
        Cell::Scalar(if self.1 {
            super::hist::u64_list(nonzero.map(|(_, n)| n).collect())
        } else {
            u32_list(nonzero.map(|(i, _)| i as u32).collect())
        })
    }

    fn evaluate_empty(&self) -> Cell {
        Cell::Scalar(if self.1 {
            super::hist::u64_list(Vec::new())
        } else {
            u32_list(Vec::new())
        })
    }

    fn describe(&self) -> String {
        let part = if self.1 { "counters" } else { "indexes" };
        format!("slot {}'s non-empty buckets' {part}", self.0)
    }
}

/// One List<UInt32> value holding `values`.
fn u32_list(values: Vec<u32>) -> datafusion::common::ScalarValue {
    use datafusion::arrow::array::{ListArray, UInt32Array};
    use datafusion::arrow::datatypes::Field;
    use std::sync::Arc;
    let item = Arc::new(Field::new_list_field(DataType::UInt32, true));
    datafusion::common::ScalarValue::List(Arc::new(ListArray::new(
        item,
        datafusion::arrow::buffer::OffsetBuffer::from_lengths([values.len()]),
        Arc::new(UInt32Array::from(values)),
        None,
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_cover_u64_in_order() {
        assert_eq!(BUCKETS, 3776);
        assert_eq!(
            (
                index(0),
                index(63),
                index(64),
                index(65),
                index(127),
                index(128),
                index(129)
            ),
            (0, 63, 64, 65, 127, 128, 128)
        );
        assert_eq!(index(u64::MAX), BUCKETS - 1);
        assert_eq!(bounds(BUCKETS - 1).1, u64::MAX);
        // Consecutive buckets tile the line; each value is in its bucket.
        for i in 1..BUCKETS {
            assert_eq!(bounds(i).0, bounds(i - 1).1 + 1, "bucket {i}");
        }
        for v in [0u64, 7, 64, 100, 1000, 123_456_789, 1 << 40, u64::MAX - 5] {
            let (lo, hi) = bounds(index(v));
            assert!(lo <= v && v <= hi, "{v}");
        }
    }

    #[test]
    fn representative_within_the_bound_of_every_value_in_the_bucket() {
        for i in 0..BUCKETS {
            let (lo, hi) = bounds(i);
            let r = representative(i) as f64;
            for v in [lo, hi] {
                assert!(
                    (r - v as f64).abs() <= RELATIVE_ERROR * v as f64,
                    "bucket {i} value {v}"
                );
            }
        }
    }

    #[test]
    fn evaluate_finds_the_nearest_rank_bucket_after_merge() {
        let ty = IntType {
            bits: 64,
            signed: false,
        };
        let mut a = vec![0u8; 8 * BUCKETS];
        let mut b = vec![0u8; 8 * BUCKETS];
        crate::agg::synopsis::put_u64(&mut a, 8 * index(5), 3); // 5, 5, 5
        crate::agg::synopsis::put_u64(&mut b, 8 * index(1000), 1); // 1000
        Sketch.merge(&mut a, &b);
        assert_eq!(evaluate(&a, 0.5, ty), Cell::Int(5, ty)); // rank 2 of 4
        assert_eq!(evaluate(&a, 0.75, ty), Cell::Int(5, ty)); // rank 3
        let Cell::Int(p100, _) = evaluate(&a, 1.0, ty) else {
            panic!()
        };
        assert!(
            (p100 as f64 - 1000.0).abs() <= 1000.0 * RELATIVE_ERROR
                && bounds(index(1000)) == (1000, 1007),
            "{p100}"
        );
        assert_eq!(evaluate(&vec![0u8; 8 * BUCKETS], 0.5, ty), Cell::Null);
        assert_eq!(
            (rank(0.0, 10), rank(0.5, 10), rank(0.99, 10), rank(1.0, 10)),
            (1, 5, 10, 10)
        );
    }
}
