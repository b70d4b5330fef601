//! Workload scripts for generated cases: commands of `ebql workload script`
//! (see `run_script` in `crates/ebql-workload`) that produce events on every
//! generated tracepoint from one thread.
//!
//! * `pread <fd> <size> <n>` on the set-up files: sys_enter_pread64 with
//!   known fd/count/pos, sys_exit_pread64 with `ret` = bytes read (short
//!   reads on the 100-byte file);
//! * `pread 999 <size> <n>` on a descriptor that is not open: `ret` = -9 (EBADF);
//! * `pause <ms>`: the thread sleeps, so sched_switch fires with it as `prev`;
//! * `comm <name>`: renames the thread, so `comm` and `prev_comm` take
//!   several values, among them the literals queries compare with;
//! * `openat <path> <n>`: sys_enter_openat with a known `str(filename)`
//!   (missing files still make the call), one of them not UTF-8.

use proptest::prelude::*;
use proptest::sample::select;
use std::fmt;

/// Files the workload creates before any case runs: (descriptor, bytes).
pub const FILES: &[(u32, u64)] = &[(1001, 65536), (1002, 4096), (1003, 100)];

/// A descriptor that is never open in the workload: pread64 fails with EBADF.
pub const BAD_FD: u32 = 999;

/// Thread names the scripts switch between (at most 15 bytes, the kernel's limit).
pub const COMMS: &[&str] = &["ebqlgen-a", "ebqlgen-b", "x", "abcdefghijklmno"];

/// Paths the scripts open: a file that exists, missing ones, one whose last
/// byte is not UTF-8 (spelled `\xHH` for the workload and in SQL, README
/// "Strings are byte strings"), and one with a `%` for LIKE.
pub const PATHS: &[&str] = &[
    "/dev/null",
    "/tmp/ebqlgen-a",
    "/tmp/ebqlgen-b",
    "/tmp/ebqlgen-\\x80",
    "/tmp/ebqlgen-50%",
];

/// Read sizes: below, at and above the file sizes in [`FILES`].
pub const SIZES: &[u64] = &[1, 16, 100, 512, 4096, 8192];

/// One workload command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// `pread <fd> <size> <count>`.
    Pread { fd: u32, size: u64, count: u32 },
    /// `pause <ms>`.
    Pause(u32),
    /// `comm <name>`.
    Comm(&'static str),
    /// `openat <path> <count>`.
    Openat(&'static str, u32),
}

impl fmt::Display for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Step::Pread { fd, size, count } => write!(f, "pread {fd} {size} {count}"),
            Step::Pause(ms) => write!(f, "pause {ms}"),
            Step::Comm(name) => write!(f, "comm {name}"),
            Step::Openat(path, count) => write!(f, "openat {path} {count}"),
        }
    }
}

impl Step {
    /// Whether the workload answers this step with an `err` line by design
    /// (reads on [`BAD_FD`] fail, which is the point).
    pub fn expects_error(&self) -> bool {
        matches!(self, Step::Pread { fd, .. } if *fd == BAD_FD)
    }
}

/// The commands that create [`FILES`] (run once per workload process, before any case).
pub fn setup() -> Vec<String> {
    FILES
        .iter()
        .map(|(fd, bytes)| format!("tmpfile {bytes} {fd}"))
        .collect()
}

/// Strategy for one step.
pub fn step() -> BoxedStrategy<Step> {
    let fds: Vec<u32> = FILES.iter().map(|f| f.0).collect();
    prop_oneof![
        6 => (select(fds), select(SIZES), 1u32..40).prop_map(|(fd, size, count)| Step::Pread { fd, size, count }),
        1 => (select(SIZES), 1u32..5).prop_map(|(size, count)| Step::Pread { fd: BAD_FD, size, count }),
        2 => (1u32..6).prop_map(Step::Pause),
        2 => select(COMMS).prop_map(Step::Comm),
        2 => (select(PATHS), 1u32..8).prop_map(|(p, n)| Step::Openat(p, n)),
    ]
    .boxed()
}

/// Strategy for a case's script: 1 to 6 steps.
pub fn script() -> BoxedStrategy<Vec<Step>> {
    proptest::collection::vec(step(), 1..7).boxed()
}
