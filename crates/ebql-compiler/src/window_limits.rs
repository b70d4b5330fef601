//! Time windows the executor can honour: the shortest step and the most
//! panes per window (README, "Clauses"), checked by the pre-pass so that such
//! a query is refused before anything is loaded.

use crate::diag::Diagnostic;
use std::ops::Range;

/// The shortest time-window step honoured (ms). Every step user space
/// flips the window generation and waits for an RCU grace period
/// (`ebql_runtime::wait_for_probes`: 2 jiffies, 8 ms at this kernel's HZ=250,
/// more under load) before it drains the closed pane; a shorter step
/// cannot be kept, and `WINDOW(time, 2, 2)` gave windows of about 16 ms.
pub const MIN_TIME_STEP_MS: u64 = 20;

/// The most panes (size / step) a hopping window may have: an hour's window
/// updated every second. User space keeps that many closed panes and
/// merges all of them every step.
pub const MAX_PANES: u64 = 3600;

/// A step of at least `lo` ms that divides `size`, looked for among the
/// next 10,000 values; `None` if there is none there.
fn dividing_step(size: u64, lo: u64) -> Option<u64> {
    (lo..=size.min(lo.saturating_add(10_000))).find(|d| size.is_multiple_of(*d))
}

/// Refuses a time window `WINDOW(time, size, step)` (ms; `both` spans
/// size and step in the query, `step_span` the step) the executor cannot keep: more than
/// [`MAX_PANES`] panes, or a step under [`MIN_TIME_STEP_MS`]. The hint
/// names a window that is honoured.
pub fn check_time_window(
    size: u64,
    step: u64,
    both: Range<usize>,
    step_span: Range<usize>,
) -> Result<(), Diagnostic> {
    let suggest = |lo: u64| match dividing_step(size, lo) {
        Some(d) => format!("WINDOW(time, {size}, {d})"),
        None => format!("WINDOW(time, {}, {lo})", size / lo * lo),
    };
    let panes = size / step;
    if panes > MAX_PANES {
        let lo = size.div_ceil(MAX_PANES).max(MIN_TIME_STEP_MS);
        return Err(Diagnostic::new(
            format!("the window has {panes} panes (size/step); at most {MAX_PANES}"),
            Some(both),
        )
        .with_hint(format!(
            "user space keeps every pane of a window and merges them each step: use a step of at least {lo} ms, e.g. {}",
            suggest(lo)
        )));
    }
    if step < MIN_TIME_STEP_MS {
        let example = if size < MIN_TIME_STEP_MS {
            format!("WINDOW(time, {MIN_TIME_STEP_MS}, {MIN_TIME_STEP_MS})")
        } else {
            suggest(MIN_TIME_STEP_MS)
        };
        return Err(Diagnostic::new(
            format!("a window step of {step} ms is shorter than windows can be cut"),
            Some(step_span),
        )
        .with_hint(format!(
            "each step waits for an RCU grace period (8 ms or more) before its pane is read; the smallest step honoured is {MIN_TIME_STEP_MS} ms, e.g. {example}"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_and_the_window_the_hint_names() {
        assert!(check_time_window(20, 20, 0..1, 0..1).is_ok());
        assert!(check_time_window(3_600_000, 1000, 0..1, 0..1).is_ok());
        let hint = |size, step| {
            check_time_window(size, step, 0..1, 0..1)
                .unwrap_err()
                .hint
                .unwrap()
        };
        assert!(hint(2, 2).ends_with("WINDOW(time, 20, 20)"));
        assert!(hint(100, 10).ends_with("WINDOW(time, 100, 20)"));
        assert!(hint(3_601_000, 1000).ends_with("WINDOW(time, 3601000, 1108)"));
        // A prime size has no dividing step near the least one: the size is rounded.
        assert!(hint(1_000_003, 1).ends_with("WINDOW(time, 999966, 278)"));
    }
}
