//! CLOCK_MONOTONIC instants (window bounds, the `time` column) shown as
//! wall-clock time: shared by the text sinks and Kafka; a leaf.

/// Shows CLOCK_MONOTONIC instants as local wall-clock time.
#[derive(Debug, Clone, Copy)]
pub struct WallClock {
    /// CLOCK_REALTIME − CLOCK_MONOTONIC, ns, taken once.
    offset_ns: i128,
}

fn clock_ns(clock: libc::clockid_t) -> i128 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: valid out-pointer.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    ts.tv_sec as i128 * 1_000_000_000 + ts.tv_nsec as i128
}

impl WallClock {
    /// The offset between the two clocks now.
    pub fn now() -> WallClock {
        WallClock {
            offset_ns: clock_ns(libc::CLOCK_REALTIME) - clock_ns(libc::CLOCK_MONOTONIC),
        }
    }

    /// A CLOCK_MONOTONIC instant (ns) as CLOCK_REALTIME ns since the Unix epoch.
    pub fn unix_ns(&self, monotonic_ns: u64) -> i128 {
        monotonic_ns as i128 + self.offset_ns
    }

    /// A CLOCK_MONOTONIC instant (ns) as local `YYYY-MM-DD HH:MM:SS.mmm`.
    pub fn show(&self, monotonic_ns: u64) -> String {
        let realtime_ns = self.unix_ns(monotonic_ns);
        let secs = (realtime_ns / 1_000_000_000) as libc::time_t;
        let ms = (realtime_ns % 1_000_000_000) / 1_000_000;
        // SAFETY: plain C struct, all-zero is valid.
        let mut tm: libc::tm = unsafe { std::mem::zeroed() };
        // SAFETY: valid pointers; localtime_r is thread-safe.
        unsafe { libc::localtime_r(&secs, &mut tm) };
        format!(
            "{:04}-{:02}-{:02} {:02}:{:02}:{:02}.{:03}",
            tm.tm_year + 1900,
            tm.tm_mon + 1,
            tm.tm_mday,
            tm.tm_hour,
            tm.tm_min,
            tm.tm_sec,
            ms
        )
    }
}
