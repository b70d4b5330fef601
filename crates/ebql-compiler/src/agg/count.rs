//! COUNT: `COUNT(*)` and `COUNT(x)` of a never-NULL `x` read the group's
//! event count (no state); `COUNT(x)` of a nullable `x` counts the events for
//! which `x` is not NULL in a [`CountWhen`] state (SQL: COUNT ignores NULLs).

use super::function::{Aggregate, Call, Func, Output, StatePart};
use super::synopsis::{put_u64, u64_at, Slot, State, Synopsis, UpdateCx};
use crate::contract::Cell;
use crate::error::CompileError;
use crate::kexpr::{IntType, KExpr};
use datafusion::arrow::datatypes::DataType;
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

    fn needs_arg(&self) -> bool {
        false
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
    put_u64(into, 0, u64_at(into, 0).wrapping_add(u64_at(from, 0)));
}

/// The count in a [`CountWhen`] state.
pub fn evaluate(state: &[u8]) -> Cell {
    Cell::Int(u64_at(state, 0), IntType::I64)
}

/// `count(x)`: the group's event count, or a [`CountWhen`] of a nullable `x`.
pub struct CountFn;

impl Aggregate for CountFn {
    fn names(&self) -> &'static [&'static str] {
        &["count"]
    }

    fn doc(&self) -> &'static str {
        "COUNT(*), COUNT(x): the number of events (of non-NULL x); exact"
    }

    fn resolve(
        &self,
        _name: &str,
        call: &mut dyn Call,
        slot: &mut dyn FnMut(Slot) -> usize,
    ) -> Result<Func, String> {
        Ok(match call.nullable_arg(0)? {
            None => Func::new(GroupCount),
            Some(when) => Func::new(CountWhenValue(slot(Slot {
                state: State::fold(CountWhen),
                expr: KExpr::Const(1, IntType::U64),
                when: Some(when),
                weight: None,
            }))),
        })
    }
}

/// COUNT of a never-NULL value: the group's event count.
#[derive(Debug)]
pub struct GroupCount;

impl Output for GroupCount {
    fn slot(&self) -> Option<usize> {
        None
    }

    fn evaluate(&self, _: &[Slot], count: u64, _: &[u8], _: &DataType, _: &str) -> Cell {
        Cell::Int(count, IntType::I64)
    }

    fn evaluate_empty(&self) -> Cell {
        Cell::Int(0, IntType::I64)
    }

    fn describe(&self) -> String {
        "the group's event count".into()
    }

    /// DataFusion's COUNT state: `[count]`, Int64.
    fn state(&self, _: &[Slot], _: &DataType) -> Result<Vec<StatePart>, String> {
        Ok(vec![StatePart::new("count", DataType::Int64, GroupCount)])
    }
}

/// The group's event count as UInt64: the `count` of DataFusion's AVG and
/// variance states.
#[derive(Debug)]
pub struct EventCount;

impl Output for EventCount {
    fn slot(&self) -> Option<usize> {
        None
    }

    fn evaluate(&self, _: &[Slot], count: u64, _: &[u8], _: &DataType, _: &str) -> Cell {
        Cell::Int(count, IntType::U64)
    }

    fn evaluate_empty(&self) -> Cell {
        Cell::Int(0, IntType::U64)
    }

    fn describe(&self) -> String {
        "the group's event count (UInt64)".into()
    }
}

/// COUNT(x) of a nullable x: the value of this [`CountWhen`] slot.
#[derive(Debug)]
pub struct CountWhenValue(pub usize);

impl Output for CountWhenValue {
    fn slot(&self) -> Option<usize> {
        Some(self.0)
    }

    fn evaluate(&self, _: &[Slot], _: u64, state: &[u8], _: &DataType, _: &str) -> Cell {
        evaluate(state)
    }

    fn evaluate_empty(&self) -> Cell {
        Cell::Int(0, IntType::I64)
    }

    fn describe(&self) -> String {
        format!("slot {}", self.0)
    }

    /// DataFusion's COUNT state: `[count]`, Int64.
    fn state(&self, _: &[Slot], _: &DataType) -> Result<Vec<StatePart>, String> {
        Ok(vec![StatePart::new(
            "count",
            DataType::Int64,
            CountWhenValue(self.0),
        )])
    }
}
