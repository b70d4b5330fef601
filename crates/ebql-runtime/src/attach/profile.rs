//! Perf CPU-clock sampling (`profile:hz:<N>`): one software CPU-clock perf
//! event per online CPU in frequency mode (the kernel adjusts the period to
//! reach N samples per second on each CPU), each with a BPF_PERF_EVENT link.

use super::link::Link;
use super::perf::{self, cpu_clock, online_cpus};
use crate::{Program, Result};

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
