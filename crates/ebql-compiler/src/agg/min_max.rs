//! MIN and MAX: one u64 holding the extreme value, compared with the
//! argument's signedness. Exact.

use super::function::{Aggregate, Call, Func, Output, StatePart};
use super::synopsis::{put_u64, u64_at, Slot, State, Synopsis, UpdateCx};
use crate::contract::Cell;
use crate::error::CompileError;
use crate::kexpr::IntType;
use datafusion::arrow::datatypes::DataType;
use ebql_bpf::{JmpCond, Size, Src};

/// Which extreme, and whether values compare as signed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Extreme {
    /// MAX when true, MIN when false.
    pub max: bool,
    /// The argument is signed (the comparison and the output are).
    pub signed: bool,
}

impl Extreme {
    fn of(&self, v: u64) -> i128 {
        if self.signed {
            v as i64 as i128
        } else {
            v as i128
        }
    }
}

impl Synopsis for Extreme {
    fn bytes(&self) -> u32 {
        8
    }

    fn describe(&self) -> String {
        format!(
            "{}: {} u64, exact",
            if self.max { "max" } else { "min" },
            if self.signed { "signed" } else { "unsigned" }
        )
    }

    fn emit_update(&self, cx: &mut UpdateCx, first: bool) -> Result<(), CompileError> {
        let (v, _) = cx.arg()?;
        if first {
            cx.asm.stx(Size::DW, cx.value_ptr, cx.off, v);
            return Ok(());
        }
        let old = cx.scratch(0)?;
        cx.asm.ldx(Size::DW, old, cx.value_ptr, cx.off);
        let keep = cx.asm.new_label();
        let cond = match (self.max, self.signed) {
            (false, false) => JmpCond::Ge,
            (false, true) => JmpCond::Sge,
            (true, false) => JmpCond::Le,
            (true, true) => JmpCond::Sle,
        };
        cx.asm.jmp(cond, v, Src::Reg(old), keep);
        cx.asm.stx(Size::DW, cx.value_ptr, cx.off, v);
        cx.asm.bind(keep);
        Ok(())
    }

    fn merge(&self, into: &mut [u8], from: &[u8]) {
        let (a, b) = (u64_at(into, 0), u64_at(from, 0));
        let take = if self.max {
            self.of(b) > self.of(a)
        } else {
            self.of(b) < self.of(a)
        };
        if take {
            put_u64(into, 0, b);
        }
    }
}

/// The extreme in a state, of the argument's type `ty`.
pub fn evaluate(state: &[u8], ty: IntType) -> Cell {
    Cell::Int(
        u64_at(state, 0),
        IntType {
            bits: 64,
            signed: ty.signed,
        },
    )
}

/// `min(x)`, `max(x)` of an integer `x`.
pub struct MinMaxFn;

impl Aggregate for MinMaxFn {
    fn names(&self) -> &'static [&'static str] {
        &["min", "max"]
    }

    fn doc(&self) -> &'static str {
        "MIN(x), MAX(x): the extreme value, compared with x's signedness; exact"
    }

    fn resolve(
        &self,
        name: &str,
        call: &mut dyn Call,
        slot: &mut dyn FnMut(Slot) -> usize,
    ) -> Result<Func, String> {
        let expr = call.int_arg(0)?;
        let state = State::fold(Extreme {
            max: name == "max",
            signed: expr.ty().signed,
        });
        Ok(Func::new(ExtremeValue(slot(Slot {
            state,
            expr,
            when: None,
            weight: None,
        }))))
    }
}

/// MIN or MAX: this slot.
#[derive(Debug)]
pub struct ExtremeValue(pub usize);

impl Output for ExtremeValue {
    fn slot(&self) -> Option<usize> {
        Some(self.0)
    }

    fn evaluate(&self, slots: &[Slot], _: u64, state: &[u8], _: &DataType, _: &str) -> Cell {
        evaluate(state, slots[self.0].expr.ty())
    }

    fn describe(&self) -> String {
        format!("slot {}", self.0)
    }

    /// DataFusion's MIN/MAX state: `[min]` or `[max]`, of the result type.
    fn state(&self, slots: &[Slot], dt: &DataType) -> Result<Vec<StatePart>, String> {
        let max = (slots[self.0].state.synopsis() as &dyn std::any::Any)
            .downcast_ref::<Extreme>()
            .is_some_and(|e| e.max);
        let suffix = if max { "max" } else { "min" };
        Ok(vec![StatePart::new(
            suffix,
            dt.clone(),
            ExtremeValue(self.0),
        )])
    }
}
