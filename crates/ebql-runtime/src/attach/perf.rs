//! perf_event_open(2), the BPF_PERF_EVENT link over a perf event, the
//! CPU-clock sampling event and the online CPUs it is opened on. A leaf
//! shared by the attach modules and the feature probes (`crate::features`).

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use crate::{Program, Result, RuntimeError};

/// `struct perf_event_attr` (include/uapi/linux/perf_event.h), the fields eBQL sets.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct PerfAttr {
    /// `type`: PERF_TYPE_TRACEPOINT, a PMU's dynamic type (kprobe, uprobe), PERF_TYPE_SOFTWARE.
    pub kind: u32,
    /// `config` (tracepoint id, software event number, retprobe bit).
    pub config: u64,
    /// `sample_period` or, with `freq`, `sample_freq`.
    pub sample: u64,
    /// Sample by frequency (bit 10 of the flags word).
    pub freq: bool,
    /// `config1` (kprobe_func / uprobe_path pointer).
    pub config1: u64,
    /// `config2` (probe offset).
    pub config2: u64,
}

/// Opens a perf event for `pid` (-1: all) on `cpu` (-1: all).
pub(crate) fn open(attr: &PerfAttr, pid: i32, cpu: i32, what: &str) -> Result<OwnedFd> {
    // Offsets: type 0, size 4, config 8, sample_period/freq 16, sample_type 24,
    // read_format 32, flags 40, wakeup 48, bp_type 52, config1 56, config2 64.
    let mut raw = [0u8; 128];
    raw[0..4].copy_from_slice(&attr.kind.to_le_bytes());
    raw[4..8].copy_from_slice(&128u32.to_le_bytes());
    raw[8..16].copy_from_slice(&attr.config.to_le_bytes());
    raw[16..24].copy_from_slice(&attr.sample.max(1).to_le_bytes());
    let flags: u64 = if attr.freq { 1 << 10 } else { 0 };
    raw[40..48].copy_from_slice(&flags.to_le_bytes());
    raw[56..64].copy_from_slice(&attr.config1.to_le_bytes());
    raw[64..72].copy_from_slice(&attr.config2.to_le_bytes());
    const PERF_FLAG_FD_CLOEXEC: libc::c_ulong = 8;
    // SAFETY: raw is a valid perf_event_attr of the declared size; pointers in config1 outlive the call.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_perf_event_open,
            raw.as_ptr(),
            pid,
            cpu,
            -1 as libc::c_int,
            PERF_FLAG_FD_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(RuntimeError::last_os(format!("perf_event_open for {what}")));
    }
    // SAFETY: fresh fd owned by us.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// Links `prog` to the perf event `perf` (BPF_PERF_EVENT).
pub(crate) fn link(prog: &Program, perf: &OwnedFd) -> Result<OwnedFd> {
    // SAFETY: both fds are valid; NULL opts.
    let fd = unsafe {
        libbpf_sys::bpf_link_create(
            prog.fd(),
            perf.as_raw_fd(),
            libbpf_sys::BPF_PERF_EVENT,
            std::ptr::null(),
        )
    };
    if fd < 0 {
        return Err(RuntimeError::from_ret(
            format!("attaching {} (bpf_link_create)", prog.name),
            fd,
        ));
    }
    // SAFETY: fresh fd owned by us.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// The dynamic type number of a perf PMU (`/sys/bus/event_source/devices/<pmu>/type`).
pub(crate) fn pmu_type(pmu: &str) -> Result<u32> {
    let path = format!("/sys/bus/event_source/devices/{pmu}/type");
    let text = std::fs::read_to_string(&path).map_err(|e| {
        RuntimeError::Unsupported(format!("this kernel has no {pmu} perf PMU ({path}: {e})"))
    })?;
    text.trim()
        .parse()
        .map_err(|_| RuntimeError::Unsupported(format!("cannot read {path}")))
}

/// `PERF_COUNT_SW_CPU_CLOCK` (include/uapi/linux/perf_event.h).
const PERF_COUNT_SW_CPU_CLOCK: u64 = 0;

/// The CPU-clock sampling event at `hz` samples per second.
pub(crate) fn cpu_clock(hz: u64) -> PerfAttr {
    PerfAttr {
        kind: libbpf_sys::PERF_TYPE_SOFTWARE,
        config: PERF_COUNT_SW_CPU_CLOCK,
        sample: hz,
        freq: true,
        ..Default::default()
    }
}

/// Online CPU numbers, from `/sys/devices/system/cpu/online` (`0-3,5,7-8`).
pub(crate) fn online_cpus() -> Result<Vec<i32>> {
    let path = "/sys/devices/system/cpu/online";
    let text = std::fs::read_to_string(path)
        .map_err(|e| RuntimeError::Unsupported(format!("cannot read {path}: {e}")))?;
    parse_cpu_list(text.trim())
        .ok_or_else(|| RuntimeError::Unsupported(format!("cannot parse {path}: {text:?}")))
}

fn parse_cpu_list(text: &str) -> Option<Vec<i32>> {
    let mut out = Vec::new();
    for part in text.split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => out.extend(a.parse::<i32>().ok()?..=b.parse::<i32>().ok()?),
            None => out.push(part.parse().ok()?),
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    #[test]
    fn cpu_lists() {
        assert_eq!(
            super::parse_cpu_list("0-3,5,7-8"),
            Some(vec![0, 1, 2, 3, 5, 7, 8])
        );
        assert_eq!(super::parse_cpu_list("0"), Some(vec![0]));
        assert_eq!(super::parse_cpu_list("x"), None);
    }
}
