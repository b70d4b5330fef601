//! SUM and AVG: an exact 128-bit two's complement sum in two u64 words (low,
//! high); values of signed arguments are sign-extended, so no realistic
//! number of events overflows it. SUM checks the exact sum against its result
//! type (an error, never a wrapped value); AVG divides it once by the count.
//!
//! How an overflow of the result type is detected: not in BPF. The probe's
//! update is the add with carry below (one compare more than a 64-bit add,
//! inside the group's one map operation per event), and the 128-bit state
//! cannot wrap before 2^64 events of 2^64 − 1 (the count is a u64 too).
//! User space evaluates the exact sum against the result type
//! ([`evaluate_sum`]); a sum beyond it is a [`Cell::Overflow`], which fails
//! that window only (the executor sends it as a `WindowError` of kind
//! `Overflow` and the run goes on). A per-group overflow flag set in the
//! probe would cost a compare on every event and still need the exact sum
//! for the message, so the wider state is the cheaper exact approach.

use super::function::{Aggregate, Call, Func, Output, StatePart};
use super::synopsis::{put_u64, u64_at, Slot, State, Synopsis, UpdateCx};
use crate::contract::Cell;
use crate::error::CompileError;
use crate::kexpr::IntType;
use datafusion::arrow::datatypes::DataType;
use ebql_bpf::{AluOp, JmpCond, Size, Src};

/// A 128-bit sum of a (signed or unsigned) 64-bit argument.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Sum {
    /// The argument is signed: sign-extend it to 128 bits.
    pub signed: bool,
}

/// The exact sum in a state.
fn exact(state: &[u8]) -> i128 {
    ((u64_at(state, 8) as i64 as i128) << 64) | u64_at(state, 0) as i128
}

impl Synopsis for Sum {
    fn bytes(&self) -> u32 {
        16
    }

    fn describe(&self) -> String {
        "sum: 128-bit two's complement (low, high u64), exact".into()
    }

    fn emit_update(&self, cx: &mut UpdateCx, first: bool) -> Result<(), CompileError> {
        let (v, _) = cx.arg()?;
        let (p, off) = (cx.value_ptr, cx.off);
        if first {
            // The state is zero: low = v, high = the sign extension of v.
            cx.asm.stx(Size::DW, p, off, v);
            if self.signed {
                let h = cx.scratch(0)?;
                cx.asm.mov64(h, Src::Reg(v));
                cx.asm.alu64(AluOp::Arsh, h, Src::Imm(63));
                cx.asm.stx(Size::DW, p, off + 8, h);
            }
            return Ok(());
        }
        // low += v; high += carry + sign(v). The high word is touched only when
        // it changes (rarely), so the hot path is one compare more than a 64-bit sum.
        let (old, new, high) = (cx.scratch(0)?, cx.scratch(1)?, cx.scratch(2)?);
        cx.asm.ldx(Size::DW, old, p, off);
        cx.asm.mov64(new, Src::Reg(old));
        cx.asm.alu64(AluOp::Add, new, Src::Reg(v));
        cx.asm.stx(Size::DW, p, off, new);
        let done = cx.asm.new_label();
        let bump = |cx: &mut UpdateCx, by: i32| {
            cx.asm.ldx(Size::DW, high, p, off + 8);
            cx.asm.alu64(AluOp::Add, high, Src::Imm(by));
            cx.asm.stx(Size::DW, p, off + 8, high);
        };
        if self.signed {
            let negative = cx.asm.new_label();
            cx.asm.jmp(JmpCond::Slt, v, Src::Imm(0), negative);
            cx.asm.jmp(JmpCond::Ge, new, Src::Reg(old), done);
            bump(cx, 1);
            cx.asm.ja(done);
            cx.asm.bind(negative);
            cx.asm
                .comment("v < 0: high += carry - 1, zero when the low word carried");
            cx.asm.jmp(JmpCond::Lt, new, Src::Reg(old), done);
            bump(cx, -1);
        } else {
            cx.asm.jmp(JmpCond::Ge, new, Src::Reg(old), done);
            bump(cx, 1);
        }
        cx.asm.bind(done);
        Ok(())
    }

    fn merge(&self, into: &mut [u8], from: &[u8]) {
        // Two per-CPU (or per-pane) sums of 64-bit values: far inside i128.
        let s = exact(into).wrapping_add(exact(from)) as u128;
        put_u64(into, 0, s as u64);
        put_u64(into, 8, (s >> 64) as u64);
    }
}

/// The exact sum as a cell of the result type `dt`, or the overflow error
/// (`text` is the aggregate's plan text).
pub fn evaluate_sum(state: &[u8], dt: &DataType, text: &str) -> Cell {
    let exact = exact(state);
    // The plan text of an aliased aggregate ends in ` AS <output name>`.
    let text = text.rsplit(" AS ").next().unwrap_or(text);
    match IntType::of(dt) {
        Some(ty) if ty.min() <= exact && exact <= ty.max() => Cell::Int(exact as u64, ty),
        _ => Cell::Overflow(overflow_message(text, exact, dt)),
    }
}

/// Why a window's SUM failed: `text` (the aggregate's plan text) is
/// `exact`, beyond its result type `dt`. The kernel's SUM and the
/// user-space one ([`crate::checked_sum`]) say the same.
pub fn overflow_message(text: &str, exact: i128, dt: &DataType) -> String {
    format!(
        "{text} = {exact} does not fit its result type {dt} in this window (SQL engines that wrap would report a wrong sum); \
         sum a scaled-down value instead, e.g. SUM(x / 1024), or use AVG(x) and COUNT(*)"
    )
}

/// The exact sum divided once by `count` (no accumulated float rounding).
pub fn evaluate_avg(state: &[u8], count: u64) -> Cell {
    Cell::Float(exact(state) as f64 / count as f64)
}

/// `sum(x)`, `avg(x)` / `mean(x)` of an integer `x`.
pub struct SumFn;

impl Aggregate for SumFn {
    fn names(&self) -> &'static [&'static str] {
        &["sum", "avg", "mean"]
    }

    fn reads_through_float_cast(&self, name: &str) -> bool {
        name != "sum"
    }

    fn doc(&self) -> &'static str {
        "SUM(x), AVG(x) (MEAN): an exact 128-bit sum; SUM fails rather than wrap its result type, AVG divides once by the count"
    }

    fn resolve(
        &self,
        name: &str,
        call: &mut dyn Call,
        slot: &mut dyn FnMut(Slot) -> usize,
    ) -> Result<Func, String> {
        let avg = name != "sum";
        if !avg && IntType::of(call.result_type()).is_none() {
            return Err(format!(
                "SUM has result type {}; the kernel sums into integers only",
                call.result_type()
            ));
        }
        let expr = call.int_arg(0)?;
        let s = slot(Slot {
            state: State::fold(Sum {
                signed: expr.ty().signed,
            }),
            expr,
            when: None,
            weight: None,
        });
        Ok(if avg {
            Func::new(AvgValue(s))
        } else {
            Func::new(SumValue(s))
        })
    }
}

/// SUM: this slot's exact sum, checked against the result type.
#[derive(Debug)]
pub struct SumValue(pub usize);

impl Output for SumValue {
    fn slot(&self) -> Option<usize> {
        Some(self.0)
    }

    fn evaluate(&self, _: &[Slot], _: u64, state: &[u8], dt: &DataType, text: &str) -> Cell {
        evaluate_sum(state, dt, text)
    }

    fn describe(&self) -> String {
        format!("slot {}", self.0)
    }

    /// DataFusion's SUM state: `[sum]`, of the result type.
    fn state(&self, _: &[Slot], dt: &DataType) -> Result<Vec<StatePart>, String> {
        Ok(vec![StatePart::new("sum", dt.clone(), SumValue(self.0))])
    }
}

/// AVG: this sum slot divided once by the count, as Float64.
#[derive(Debug)]
pub struct AvgValue(pub usize);

impl Output for AvgValue {
    fn slot(&self) -> Option<usize> {
        Some(self.0)
    }

    fn evaluate(&self, _: &[Slot], count: u64, state: &[u8], _: &DataType, _: &str) -> Cell {
        evaluate_avg(state, count)
    }

    fn describe(&self) -> String {
        format!("slot {} / count, divided in user space", self.0)
    }

    /// DataFusion's AVG state of a Float64 argument (DataFusion casts an
    /// integer's): `[count]` UInt64, `[sum]` Float64 (exact below 2^53).
    fn state(&self, _: &[Slot], _: &DataType) -> Result<Vec<StatePart>, String> {
        Ok(vec![
            StatePart::new("count", DataType::UInt64, super::count::EventCount),
            StatePart::new("sum", DataType::Float64, SumAsFloat(self.0)),
        ])
    }
}

/// The exact sum of this slot as Float64 (the `sum` of AVG's state).
#[derive(Debug)]
pub struct SumAsFloat(pub usize);

impl Output for SumAsFloat {
    fn slot(&self) -> Option<usize> {
        Some(self.0)
    }

    fn evaluate(&self, _: &[Slot], _: u64, state: &[u8], _: &DataType, _: &str) -> Cell {
        Cell::Float(exact(state) as f64)
    }

    fn describe(&self) -> String {
        format!("slot {} as Float64", self.0)
    }
}
