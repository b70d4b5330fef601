//! Options that narrow where a probe fires (shared by the attach modules).

/// Options that narrow where a probe fires.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AttachOptions {
    /// For uprobes/USDT: trap only in this process (perf_event pid), so
    /// other processes running the same binary never pay for the probe.
    /// Other kinds ignore it (their programs test the pid themselves).
    pub pid: Option<u32>,
}
