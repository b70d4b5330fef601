//! Which of the capabilities eBQL needs this process lacks, for permission
//! errors that say what to do.

/// Capability numbers from include/uapi/linux/capability.h.
const CAP_SYS_ADMIN: u32 = 21;
const CAP_PERFMON: u32 = 38;
const CAP_BPF: u32 = 39;

/// The effective capability set (`CapEff` of /proc/self/status), if readable.
fn effective_caps() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let hex = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))?
        .trim();
    u64::from_str_radix(hex, 16).ok()
}

/// Capabilities needed to load and attach tracing BPF programs that this
/// process does not have: CAP_BPF (maps, programs) and CAP_PERFMON (tracing
/// program types, system-wide perf events); CAP_SYS_ADMIN stands in for both
/// (kernel/bpf/syscall.c, kernel/events/core.c). Empty when nothing is
/// missing or the set cannot be read.
pub(crate) fn missing_bpf_caps() -> Vec<&'static str> {
    let Some(eff) = effective_caps() else {
        return Vec::new();
    };
    let has = |cap: u32| eff & (1u64 << cap) != 0;
    if has(CAP_SYS_ADMIN) {
        return Vec::new();
    }
    [(CAP_BPF, "CAP_BPF"), (CAP_PERFMON, "CAP_PERFMON")]
        .into_iter()
        .filter(|&(c, _)| !has(c))
        .map(|(_, n)| n)
        .collect()
}
