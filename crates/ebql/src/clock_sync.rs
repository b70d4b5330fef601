//! How far this host's wall clock may be from true time, as the kernel's
//! NTP state says (adjtimex(2) read-only: `STA_UNSYNC`, `esterror`,
//! `maxerror`): what windows aligned on the wall clock
//! ([`crate::ExecutorOptions::align_windows`]) of several hosts can promise.

use std::fmt;

/// The kernel's view of this host's clock error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClockSync {
    /// An NTP (or PTP, chrony) daemon keeps the clock synchronized: the
    /// kernel's `STA_UNSYNC` is clear.
    pub synchronized: bool,
    /// Estimated error, ns (`esterror`, kept by the daemon).
    pub est_error_ns: u64,
    /// Maximum error, ns (`maxerror`: grows by 500 ppm while no daemon
    /// updates it, capped at 16 s).
    pub max_error_ns: u64,
}

impl ClockSync {
    /// Reads the kernel's NTP state (no privilege needed).
    ///
    /// Errors: the system call failed (its errno).
    pub fn read() -> std::io::Result<ClockSync> {
        // SAFETY: a zeroed timex is a valid argument; modes = 0 only reads.
        let mut t: libc::timex = unsafe { std::mem::zeroed() };
        // SAFETY: valid out-pointer.
        let state = unsafe { libc::adjtimex(&mut t) };
        if state < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let us = |v: libc::c_long| u64::try_from(v).unwrap_or(0) * 1_000;
        Ok(ClockSync {
            synchronized: t.status & libc::STA_UNSYNC == 0 && state != libc::TIME_ERROR,
            est_error_ns: us(t.esterror),
            max_error_ns: us(t.maxerror),
        })
    }
}

impl fmt::Display for ClockSync {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ms = |ns: u64| ns as f64 / 1e6;
        if self.synchronized {
            write!(
                f,
                "this host's clock is synchronized: estimated error ±{:.3} ms, at most {:.3} ms",
                ms(self.est_error_ns),
                ms(self.max_error_ns)
            )
        } else {
            write!(
                f,
                "this host's clock is not synchronized (no NTP daemon keeps it: the kernel's \
                 STA_UNSYNC is set): its windows line up with other hosts' only as well as \
                 the clocks were set"
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kernel_answers() {
        ClockSync::read().expect("adjtimex read-only needs no privilege");
    }

    #[test]
    fn says_the_error_or_that_the_clock_is_not_kept() {
        let synced = ClockSync {
            synchronized: true,
            est_error_ns: 250_000,
            max_error_ns: 1_500_000,
        };
        assert_eq!(
            synced.to_string(),
            "this host's clock is synchronized: estimated error ±0.250 ms, at most 1.500 ms"
        );
        let free = ClockSync {
            synchronized: false,
            ..synced
        };
        assert!(free.to_string().contains("not synchronized"), "{free}");
    }
}
