//! MIN and MAX: one u64 holding the extreme value, compared with the
//! argument's signedness. Exact.

use super::{Call, Func, Slot, State, Synopsis, UpdateCx};
use crate::contract::Cell;
use crate::kexpr::IntType;
use crate::CompileError;
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
        let (a, b) = (super::u64_at(into, 0), super::u64_at(from, 0));
        let take = if self.max {
            self.of(b) > self.of(a)
        } else {
            self.of(b) < self.of(a)
        };
        if take {
            super::put_u64(into, 0, b);
        }
    }
}

/// The extreme in a state, of the argument's type `ty`.
pub fn evaluate(state: &[u8], ty: IntType) -> Cell {
    Cell::Int(
        super::u64_at(state, 0),
        IntType {
            bits: 64,
            signed: ty.signed,
        },
    )
}

/// `min(x)`, `max(x)`.
pub fn resolve(
    name: &str,
    call: &mut dyn Call,
    slot: &mut dyn FnMut(Slot) -> usize,
) -> Result<Option<Func>, String> {
    let max = match name {
        "min" => false,
        "max" => true,
        _ => return Ok(None),
    };
    let expr = call.int_arg(0)?;
    let state = State::Extreme(Extreme {
        max,
        signed: expr.ty().signed,
    });
    Ok(Some(Func::Extreme(slot(Slot {
        state,
        expr,
        when: None,
    }))))
}
