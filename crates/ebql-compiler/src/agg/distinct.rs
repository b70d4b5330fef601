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
//! seen in two panes would count twice): [`super::State::merges_across_panes`]
//! says so, and such windows count distinct values in user space.

use super::{Call, Func, Slot, State, Synopsis, UpdateCx};
use crate::CompileError;

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

/// `count(DISTINCT x)` of an integer `x`. Other DISTINCT aggregates have no
/// kernel implementation (`Err`: they run in user space).
pub fn resolve(
    name: &str,
    call: &mut dyn Call,
    slot: &mut dyn FnMut(Slot) -> usize,
) -> Result<Func, String> {
    if name != "count" {
        return Err(format!(
            "{name}(DISTINCT …) has no kernel implementation (COUNT(DISTINCT x) does)"
        ));
    }
    let expr = call.int_arg(0)?;
    if call.nullable_arg(0)?.is_some() {
        return Err("COUNT(DISTINCT x) of a nullable x runs in user space".into());
    }
    Ok(Func::CountDistinct(slot(Slot {
        state: State::Distinct(Distinct),
        expr,
        when: None,
    })))
}
