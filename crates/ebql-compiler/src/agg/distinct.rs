//! `COUNT(DISTINCT x)`, exact: a set of (window tag, group key, value) keys
//! in a hash map shared by all CPUs (`ebql_distinct`), plus a u64 counter in
//! the group's per-CPU value.
//!
//! Per event the probe inserts the key with BPF_NOEXIST: success means the
//! value is new to the group in this window, and the probe increments the
//! counter; -EEXIST means it was seen (on any CPU: the set is shared), and
//! nothing changes; any other error is a full set, counted in the control
//! map's `DROP_DISTINCT_FULL` pair of the event's window, never silent. The
//! counters of all CPUs therefore sum to the exact distinct count. Cost: one
//! hash-map insert attempt per event beyond the group's lookup, and
//! key + 8 bytes (plus the kernel's ~50-byte element header) per distinct
//! value per group in the set, which holds `max_distinct` values per window
//! (two windows coexist while one is drained). User space deletes a closed
//! window's set entries with its groups.
//!
//! A counter does not merge across the panes of a hopping window (a value
//! seen in two panes would count twice): [`super::synopsis::State::merges_across_panes`]
//! says so, and such windows count distinct values in user space.

use super::function::{Aggregate, Call, Func, Output, StatePart};
use super::synopsis::{Slot, State, Synopsis, UpdateCx};
use crate::contract::Cell;
use crate::error::CompileError;
use crate::kexpr::IntType;
use datafusion::arrow::datatypes::DataType;
use std::sync::Arc;

/// The counter of values a group inserted first into the distinct set.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Distinct;

impl Synopsis for Distinct {
    fn bytes(&self) -> u32 {
        8
    }

    fn describe(&self) -> String {
        "distinct count: u64 counter (summed over CPUs), exact; per event one BPF_NOEXIST insert of (window, group key, value) into the shared set ebql_distinct; \
         a full set counts a drop (dropped_distinct_full)"
            .into()
    }

    /// Increments the counter; the caller emits it only when the set insert succeeded.
    fn emit_update(&self, cx: &mut UpdateCx, _first: bool) -> Result<(), CompileError> {
        super::count::emit_increment(cx)
    }

    fn merge(&self, into: &mut [u8], from: &[u8]) {
        // Across CPUs only: every value incremented exactly one CPU's counter.
        super::count::merge_counters(into, from)
    }
}

/// `count(DISTINCT x)` of an integer `x` that is never NULL.
pub struct CountDistinctFn;

impl Aggregate for CountDistinctFn {
    fn names(&self) -> &'static [&'static str] {
        &["count"]
    }

    fn distinct(&self) -> bool {
        true
    }

    fn doc(&self) -> &'static str {
        "COUNT(DISTINCT x): the number of distinct values, exact, through a set shared by all CPUs"
    }

    fn resolve(
        &self,
        _name: &str,
        call: &mut dyn Call,
        slot: &mut dyn FnMut(Slot) -> usize,
    ) -> Result<Func, String> {
        let expr = call.int_arg(0)?;
        if call.nullable_arg(0)?.is_some() {
            return Err("COUNT(DISTINCT x) of a nullable x runs in user space".into());
        }
        Ok(Func::new(CountDistinctValue(slot(Slot {
            state: State::Distinct(Arc::new(Distinct)),
            expr,
            when: None,
            weight: None,
        }))))
    }
}

/// COUNT(DISTINCT x): this slot's counter, summed over CPUs.
#[derive(Debug)]
pub struct CountDistinctValue(pub usize);

impl Output for CountDistinctValue {
    fn slot(&self) -> Option<usize> {
        Some(self.0)
    }

    fn evaluate(&self, _: &[Slot], _: u64, state: &[u8], _: &DataType, _: &str) -> Cell {
        super::count::evaluate(state)
    }

    fn evaluate_empty(&self) -> Cell {
        Cell::Int(0, IntType::I64)
    }

    fn state(&self, _: &[Slot], _: &DataType) -> Result<Vec<StatePart>, String> {
        Err(
            "COUNT(DISTINCT x) keeps its set of values in the kernel for one window only: \
             a count cannot be merged across hosts (a value seen by two would count twice); \
             approx_distinct(x) can (a HyperLogLog sketch)"
                .into(),
        )
    }

    fn describe(&self) -> String {
        format!("slot {} summed over CPUs", self.0)
    }
}
