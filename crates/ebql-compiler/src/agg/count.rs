//! COUNT: `COUNT(*)` and `COUNT(x)` of a never-NULL `x` read the group's
//! event count (no state); `COUNT(x)` of a nullable `x` counts the events for
//! which `x` is not NULL in a [`CountWhen`] state (SQL: COUNT ignores NULLs).

use super::{Call, Func, Slot, State, Synopsis, UpdateCx};
use crate::contract::Cell;
use crate::kexpr::{IntType, KExpr};
use crate::CompileError;
use ebql_bpf::{AluOp, Size, Src};

/// A u64 counter of the events that satisfy the slot's predicate.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CountWhen;

impl Synopsis for CountWhen {
    fn bytes(&self) -> u32 {
        8
    }

    fn describe(&self) -> String {
        "conditional count: u64, exact".into()
    }

    fn emit_update(&self, cx: &mut UpdateCx, _first: bool) -> Result<(), CompileError> {
        emit_increment(cx)
    }

    fn merge(&self, into: &mut [u8], from: &[u8]) {
        merge_counters(into, from)
    }
}

/// BPF: adds one to the u64 counter state at `cx.off` (the state is this CPU's).
pub(super) fn emit_increment(cx: &mut UpdateCx) -> Result<(), CompileError> {
    let r = cx.scratch(0)?;
    cx.asm.ldx(Size::DW, r, cx.value_ptr, cx.off);
    cx.asm.alu64(AluOp::Add, r, Src::Imm(1));
    cx.asm.stx(Size::DW, cx.value_ptr, cx.off, r);
    Ok(())
}

/// Adds the u64 counter state `from` to `into`.
pub(super) fn merge_counters(into: &mut [u8], from: &[u8]) {
    super::put_u64(
        into,
        0,
        super::u64_at(into, 0).wrapping_add(super::u64_at(from, 0)),
    );
}

/// The count in a [`CountWhen`] state.
pub fn evaluate(state: &[u8]) -> Cell {
    Cell::Int(super::u64_at(state, 0), IntType::I64)
}

/// `count(x)`.
pub fn resolve(
    name: &str,
    call: &mut dyn Call,
    slot: &mut dyn FnMut(Slot) -> usize,
) -> Result<Option<Func>, String> {
    if name != "count" {
        return Ok(None);
    }
    Ok(Some(match call.nullable_arg(0)? {
        None => Func::Count,
        Some(when) => Func::CountWhen(slot(Slot {
            state: State::CountWhen(CountWhen),
            expr: KExpr::Const(1, IntType::U64),
            when: Some(when),
        })),
    }))
}
