//! [`Cuts`]: where the time windows end, published to the probes ahead of
//! time.
//!
//! A probe puts each event in the window its `time` falls in
//! (`ebql_compiler::contract::ctl::CUT` has the probe's side). That is exact
//! only if every cut is written before it passes: a probe that timed its
//! event at or after a cut, and read that cut as not chosen yet, would keep
//! the event in the earlier window. So the end of the open window is written
//! as soon as the state its successor reuses is drained, at least
//! [`MARGIN_NS`] ahead, and the generation flips once the cut has passed.

use crate::window::monotonic_ns;
use ebql_compiler::codegen::ctl;
use ebql_runtime::MmapArray;
use std::sync::atomic::Ordering;

/// The least time between choosing a cut and the cut (ns): writing it
/// would have to stall this long for a probe to read it too late.
pub(super) const MARGIN_NS: u64 = 2_000_000;

/// The open time window's bounds (CLOCK_MONOTONIC ns), its end already
/// written where the probes read it.
pub(super) struct Cuts {
    step_ns: u64,
    /// The open window's start: its generation's cut.
    pub(super) start: u64,
    /// Its end: the next generation's cut, written.
    pub(super) end: u64,
    /// Cuts found passed right after they were written (the thread stalled
    /// for [`MARGIN_NS`] or more while writing): events of that instant may
    /// lie outside their window's bounds. Counted, never expected.
    pub(super) late: u64,
}

impl Cuts {
    /// Generation 0's window, from `attached_ns` (before the probes were
    /// attached) to one step later, or later if that is already near.
    pub(super) fn open(ctl: &MmapArray, attached_ns: u64, step_ns: u64) -> Cuts {
        let mut cuts = Cuts {
            step_ns,
            start: attached_ns,
            end: attached_ns,
            late: 0,
        };
        cuts.write_end(ctl, 0);
        cuts
    }

    /// Opens generation `gen`'s window where the last one ended, once the
    /// last one is closed and generation `gen - 1`'s state drained.
    pub(super) fn advance(&mut self, ctl: &MmapArray, gen: u64) {
        self.start = self.end;
        self.write_end(ctl, gen);
    }

    /// Writes the end of `gen`'s window: one step after its start, or
    /// [`MARGIN_NS`] from now if that is later (the thread fell behind: the
    /// window is longer rather than its end already passed).
    fn write_end(&mut self, ctl: &MmapArray, gen: u64) {
        let end = (self.start + self.step_ns).max(monotonic_ns() + MARGIN_NS);
        // Generation gen + 1's probes must see gen + 2 as not cut yet.
        ctl.u64_at(ctl::cut_slot(gen + 2))
            .store(u64::MAX, Ordering::SeqCst);
        ctl.u64_at(ctl::cut_slot(gen + 1))
            .store(end, Ordering::SeqCst);
        if monotonic_ns() >= end {
            self.late += 1;
        }
        self.end = end;
    }
}
