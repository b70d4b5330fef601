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
    /// Windows aligned on the wall clock: its offset (CLOCK_REALTIME −
    /// CLOCK_MONOTONIC ns, the run's [`crate::window::WallClock`]); every
    /// cut after the first window's start is a multiple of the step in
    /// wall-clock time.
    align: Option<i64>,
    /// The open window's start: its generation's cut.
    pub(super) start: u64,
    /// Its end: the next generation's cut, chosen.
    pub(super) end: u64,
    /// [`super::ExecutorOptions::cut_choice_delay`].
    delay: Duration,
}

impl Cuts {
    /// Generation 0's window, from `attached_ns` (before the probes were
    /// attached) to one step later, or later if that is already near; with
    /// `align` (the wall clock's offset), to the next multiple of the step
    /// in wall-clock time that is not that near.
    pub(super) fn open(
        ctl: &MmapArray,
        attached_ns: u64,
        step_ns: u64,
        align: Option<i64>,
        delay: Duration,
    ) -> Cuts {
        let mut cuts = Cuts {
            step_ns,
            align,
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
    /// at or after the cut must not have read it as not chosen); aligned,
    /// the first wall-clock multiple of the step at or after all of those
    /// (after the start, for a first window that starts between two).
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
            let next = match self.align {
                Some(offset) => aligned_at_or_after(self.start + 1, self.step_ns, offset),
                None => self.start + self.step_ns,
            };
            let earliest = next.max(monotonic_ns() + MARGIN_NS).max(floor + 1);
            let end = match self.align {
                Some(offset) => aligned_at_or_after(earliest, self.step_ns, offset),
                None => earliest,
            };
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

/// The first CLOCK_MONOTONIC instant at or after `t` whose wall-clock time
/// (`t + offset`) is a multiple of `step` ns: windows of every host whose
/// clock is right end together, at [k·step, (k+1)·step) of UTC.
fn aligned_at_or_after(t: u64, step: u64, offset: i64) -> u64 {
    let wall = i128::from(t) + i128::from(offset);
    let step = i128::from(step);
    let boundary = (wall + step - 1).div_euclid(step) * step;
    u64::try_from(boundary - i128::from(offset)).expect("a boundary after the monotonic epoch")
}

#[cfg(test)]
mod tests {
    use super::aligned_at_or_after;

    #[test]
    fn boundaries_are_wall_clock_multiples_of_the_step() {
        let offset = 1_700_000_000_123_456_789i64;
        let step = 200_000_000;
        let t = 5_000_000_000u64;
        let b = aligned_at_or_after(t, step, offset);
        assert!(b >= t && b - t < step);
        assert_eq!((i128::from(b) + i128::from(offset)) % i128::from(step), 0);
        assert_eq!(
            aligned_at_or_after(b, step, offset),
            b,
            "a boundary is its own"
        );
        assert_eq!(aligned_at_or_after(b + 1, step, offset), b + step);
    }
}
