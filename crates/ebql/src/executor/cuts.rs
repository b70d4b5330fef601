//! [`Cuts`]: where the time windows end, chosen ahead of time where the
//! probes read them.
//!
//! A probe puts each event in the window its `time` falls in
//! (`ebql_compiler::contract::ctl::CUT` has both sides of the protocol).
//! The end of the open window is chosen as soon as the state its successor
//! reuses is drained, one step after its start, and the generation flips
//! once the cut has passed. Choosing is a compare-and-swap against the
//! floor the probes raised while the cut was open, so a thread that stalls
//! while choosing picks a later cut rather than one events already passed.

use crate::window::monotonic_ns;
use ebql_compiler::codegen::ctl;
use ebql_runtime::MmapArray;
use std::sync::atomic::Ordering;
use std::time::Duration;

/// The least time between choosing a cut and the cut (ns), when the thread
/// fell behind: windows are then longer than a step.
const MARGIN_NS: u64 = 2_000_000;

/// The open time window's bounds (CLOCK_MONOTONIC ns), its end already
/// chosen where the probes read it.
pub(super) struct Cuts {
    step_ns: u64,
    /// The open window's start: its generation's cut.
    pub(super) start: u64,
    /// Its end: the next generation's cut, chosen.
    pub(super) end: u64,
    /// [`super::ExecutorOptions::cut_choice_delay`].
    delay: Duration,
}

impl Cuts {
    /// Generation 0's window, from `attached_ns` (before the probes were
    /// attached) to one step later, or later if that is already near.
    pub(super) fn open(ctl: &MmapArray, attached_ns: u64, step_ns: u64, delay: Duration) -> Cuts {
        let mut cuts = Cuts {
            step_ns,
            start: attached_ns,
            end: attached_ns,
            delay,
        };
        cuts.choose_end(ctl, 0);
        cuts
    }

    /// Opens generation `gen`'s window where the last one ended, once the
    /// last one is closed and generation `gen - 1`'s state drained.
    pub(super) fn advance(&mut self, ctl: &MmapArray, gen: u64) {
        self.start = self.end;
        self.choose_end(ctl, gen);
    }

    /// Chooses the end of `gen`'s window: one step after its start, or
    /// [`MARGIN_NS`] from now if that is later (the thread fell behind),
    /// and always later than the floor the probes raised (an event timed
    /// at or after the cut must not have read it as not chosen).
    fn choose_end(&mut self, ctl: &MmapArray, gen: u64) {
        // Generation gen + 1's probes must see gen + 2 as not chosen yet.
        ctl.u64_at(ctl::cut_slot(gen + 2))
            .store(ctl::NOT_CHOSEN, Ordering::SeqCst);
        let slot = ctl.u64_at(ctl::cut_slot(gen + 1));
        let mut seen = slot.load(Ordering::SeqCst);
        let mut delay = self.delay;
        loop {
            debug_assert!(seen >> 63 == 1, "gen {gen}'s end was already chosen");
            let floor = !seen;
            let end = (self.start + self.step_ns)
                .max(monotonic_ns() + MARGIN_NS)
                .max(floor + 1);
            // The injected stall, once per cut (a retry is not stalled again).
            std::thread::sleep(std::mem::take(&mut delay));
            match slot.compare_exchange(seen, end, Ordering::SeqCst, Ordering::SeqCst) {
                Ok(_) => {
                    self.end = end;
                    return;
                }
                Err(now_seen) => seen = now_seen,
            }
        }
    }
}
