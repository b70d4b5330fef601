//! Perf CPU-clock sampling (`profile:hz:<N>`): one software CPU-clock perf
//! event per online CPU in frequency mode (the kernel adjusts the period to
//! reach N samples per second on each CPU), each with a BPF_PERF_EVENT link.

use super::{perf, Link};
use crate::{Program, Result, RuntimeError};

/// `PERF_COUNT_SW_CPU_CLOCK` (include/uapi/linux/perf_event.h).
const PERF_COUNT_SW_CPU_CLOCK: u64 = 0;

/// The CPU-clock sampling event at `hz` samples per second.
pub(crate) fn cpu_clock(hz: u64) -> perf::PerfAttr {
    perf::PerfAttr {
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

/// Attaches `prog` to a CPU-clock sampling event at `hz` on every online
/// CPU. A failure on any CPU detaches the CPUs already attached (their fds
/// drop) and reports the error.
pub(crate) fn attach(prog: &Program, hz: u64) -> Result<Link> {
    let attr = cpu_clock(hz);
    let (mut links, mut perfs) = (Vec::new(), Vec::new());
    for cpu in online_cpus()? {
        let pfd = perf::open(
            &attr,
            -1,
            cpu,
            &format!("CPU-clock sampling at {hz} Hz on CPU {cpu}"),
        )?;
        links.push(perf::link(prog, &pfd)?);
        perfs.push(pfd);
    }
    Ok(Link::new(links, perfs))
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
