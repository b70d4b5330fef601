//! uprobes, uretprobes and USDT probes: one perf event of the `uprobe` PMU
//! per probed offset, each linked to the program (BPF_PERF_EVENT).
//!
//! perf_event_attr for the uprobe PMU (kernel/events/core.c,
//! `perf_uprobe_init`; the bit layout is published in
//! /sys/bus/event_source/devices/uprobe/format/): `config` bit 0 = return
//! probe, bits 32..63 = `ref_ctr_offset` (the USDT semaphore's file offset:
//! the kernel increments that u16 in every process mapping the file while
//! the probe exists, and decrements it when the event is closed);
//! `config1` = pointer to the file's path, `config2` = the probe's file offset.
//!
//! Scope: with a pid, the event targets that process (perf `pid`, `cpu` -1):
//! the kernel installs the breakpoint only in that process's memory map, so
//! other processes running the same binary never trap. Without one, a
//! system-wide event (`pid` -1, `cpu` 0): the BPF program runs for every
//! hit on every CPU (the PMU's CPU only matters to perf's own sampling).

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use super::link::Link;
use super::options::AttachOptions;
use super::perf;
use crate::{Program, Result, RuntimeError};

/// Attaches `prog` at every offset of `binary` (see the module doc).
///
/// Errors: [`RuntimeError::Unsupported`] without the uprobe PMU; the
/// perf_event_open error of the first offset that fails (ESRCH: no such
/// pid), after closing what was attached before it.
pub(crate) fn attach(
    prog: &Program,
    binary: &Path,
    offsets: &[u64],
    retprobe: bool,
    semaphore: Option<u64>,
    opts: &AttachOptions,
) -> Result<Link> {
    let pmu = perf::pmu_type("uprobe")?;
    let path = CString::new(binary.as_os_str().as_bytes()).map_err(|_| {
        RuntimeError::Unsupported(format!("{} contains a NUL byte", binary.display()))
    })?;
    let ref_ctr = semaphore.unwrap_or(0);
    if ref_ctr > u32::MAX as u64 {
        return Err(RuntimeError::Unsupported(format!("the USDT semaphore of {} is at file offset {ref_ctr:#x}, beyond what the uprobe PMU can take (32 bits)", binary.display())));
    }
    let (pid, cpu) = match opts.pid {
        Some(p) => (p as i32, -1),
        None => (-1, 0),
    };
    let (mut links, mut events) = (Vec::new(), Vec::new());
    for &offset in offsets {
        let attr = perf::PerfAttr {
            kind: pmu,
            config: u64::from(retprobe) | ref_ctr << 32,
            sample: 1,
            config1: path.as_ptr() as u64,
            config2: offset,
            ..Default::default()
        };
        let what = format!(
            "{} {}+{offset:#x}{}",
            if retprobe { "uretprobe" } else { "uprobe" },
            binary.display(),
            opts.pid.map(|p| format!(" in pid {p}")).unwrap_or_default()
        );
        // On error, `links` and `events` drop here: nothing stays attached.
        let fd = perf::open(&attr, pid, cpu, &what)?;
        links.push(perf::link(prog, &fd)?);
        events.push(fd);
    }
    Ok(Link::new(links, events))
}
