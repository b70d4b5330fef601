//! kprobes and kretprobes through the perf `kprobe` PMU
//! (`/sys/bus/event_source/devices/kprobe`: `type` is its dynamic perf type,
//! `format/retprobe` says `config:0`): `config1` points to the function
//! name, `config2` is the offset into it (0), pid -1 and cpu 0 (a kprobe
//! fires on every CPU), then a BPF_PERF_EVENT link.

use std::ffi::CString;

use super::link::Link;
use super::perf;
use crate::{Program, Result, RuntimeError};

/// The perf attribute of a kprobe on `function` (`pmu_type` from sysfs).
pub(crate) fn attr(pmu_type: u32, function: &CString, retprobe: bool) -> perf::PerfAttr {
    perf::PerfAttr {
        kind: pmu_type,
        config: retprobe as u64,
        sample: 1,
        config1: function.as_ptr() as u64,
        config2: 0,
        ..Default::default()
    }
}

/// Attaches `prog` (a KPROBE program) to entry or return of `function`.
pub(crate) fn attach(prog: &Program, function: &str, retprobe: bool) -> Result<Link> {
    let ty = perf::pmu_type("kprobe")?;
    let name = CString::new(function)
        .map_err(|_| RuntimeError::Unsupported(format!("kernel function name {function:?}")))?;
    let what = format!(
        "{}:{function}",
        if retprobe { "kretprobe" } else { "kprobe" }
    );
    let pfd = perf::open(&attr(ty, &name, retprobe), -1, 0, &what)?;
    let link = perf::link(prog, &pfd)?;
    Ok(Link::new(vec![link], vec![pfd]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retprobe_is_config_bit_0_and_the_name_is_config1() {
        let name = CString::new("vfs_read").unwrap();
        let a = attr(7, &name, true);
        assert_eq!((a.kind, a.config, a.config2), (7, 1, 0));
        assert_eq!(a.config1, name.as_ptr() as u64);
        assert_eq!(attr(7, &name, false).config, 0);
    }
}
