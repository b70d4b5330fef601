//! Kernel feature probes for event kinds ([`ebql_catalog::Feature`]):
//! each decided by looking at what the kernel exposes or by trying, never
//! from error text; answers are cached for the process.

use std::collections::HashMap;
use std::sync::Mutex;

use ebql_catalog::{EventKind, Feature};

/// Whether this kernel has `feature`, and if not, why (for people).
pub fn probe(feature: Feature) -> Result<(), String> {
    static CACHE: Mutex<Option<HashMap<Feature, Result<(), String>>>> = Mutex::new(None);
    let mut cache = CACHE.lock().unwrap_or_else(|e| e.into_inner());
    let map = cache.get_or_insert_with(HashMap::new);
    map.entry(feature)
        .or_insert_with(|| probe_uncached(feature))
        .clone()
}

/// The first feature `kind` needs that this kernel lacks, with why.
pub fn missing(kind: EventKind) -> Option<(Feature, String)> {
    kind.features()
        .iter()
        .find_map(|&f| probe(f).err().map(|why| (f, why)))
}

fn exists(path: &str) -> bool {
    std::path::Path::new(path).exists()
}

fn probe_uncached(feature: Feature) -> Result<(), String> {
    match feature {
        // The catalog mounts tracefs when needed and reports its own errors.
        Feature::Tracefs => Ok(()),
        Feature::KernelBtf if exists("/sys/kernel/btf/vmlinux") => Ok(()),
        Feature::KernelBtf => Err("this kernel has no BTF (/sys/kernel/btf/vmlinux is missing: CONFIG_DEBUG_INFO_BTF is off)".into()),
        Feature::Kprobes if exists("/sys/bus/event_source/devices/kprobe/type") => Ok(()),
        Feature::Kprobes => Err("this kernel has no kprobes (no perf `kprobe` PMU in /sys/bus/event_source/devices: CONFIG_KPROBES is off)".into()),
        Feature::Uprobes if exists("/sys/bus/event_source/devices/uprobe/type") => Ok(()),
        Feature::Uprobes => Err("this kernel has no uprobes (no perf `uprobe` PMU in /sys/bus/event_source/devices: CONFIG_UPROBES is off)".into()),
        Feature::Trampolines => trampolines(),
        Feature::PerfCpuClock => perf_cpu_clock(),
        // Without TCX links, the attach module falls back to a clsact qdisc (netlink).
        Feature::TcHook => tcx().or_else(|no_tcx| sched_cls().map_err(|e| format!("{no_tcx}; and {e}"))),
    }
}

/// The kernel function a trampoline probe attaches to: present in every
/// kernel eBQL runs on, and cheap (the probe program returns at once).
const TRAMPOLINE_PROBE_TARGET: &str = "vfs_read";

/// Loads `r0 = 0; exit` as an fentry program on [`TRAMPOLINE_PROBE_TARGET`]
/// and attaches it for an instant (BPF_TRACE_FENTRY link): trampolines
/// work exactly when both succeed. Some kernels (no trampoline JIT support,
/// lockdown, this test machine) refuse with EPERM or ENOTSUPP.
fn trampolines() -> Result<(), String> {
    use std::os::fd::{FromRawFd, OwnedFd};
    // SAFETY: plain libbpf calls; the BTF object is freed below.
    let btf = unsafe { libbpf_sys::btf__load_vmlinux_btf() };
    if btf.is_null() {
        return Err("no kernel BTF to type an fentry program with".into());
    }
    let name = std::ffi::CString::new(TRAMPOLINE_PROBE_TARGET).expect("no NUL");
    // SAFETY: valid btf and name.
    let id = unsafe {
        libbpf_sys::btf__find_by_name_kind(btf, name.as_ptr(), libbpf_sys::BTF_KIND_FUNC)
    };
    // SAFETY: allocated by btf__load_vmlinux_btf.
    unsafe { libbpf_sys::btf__free(btf) };
    if id <= 0 {
        return Err(format!(
            "kernel BTF has no function {TRAMPOLINE_PROBE_TARGET} to probe fentry with"
        ));
    }
    let target = crate::LoadTarget {
        prog_type: ebql_catalog::ProgType::Tracing,
        expected_attach_type: libbpf_sys::BPF_TRACE_FENTRY,
        attach_btf_id: id as u32,
        sleepable: false,
    };
    // r0 = 0; exit
    let code = [0xb7u8, 0, 0, 0, 0, 0, 0, 0, 0x95, 0, 0, 0, 0, 0, 0, 0];
    let prog = crate::Program::load("ebql_fentry_probe", target, &code, &[]).map_err(|e| {
        format!("the kernel refused to load an fentry program on {TRAMPOLINE_PROBE_TARGET} ({e})")
    })?;
    // SAFETY: valid program fd, no target, NULL opts.
    let fd = unsafe {
        libbpf_sys::bpf_link_create(prog.fd(), 0, libbpf_sys::BPF_TRACE_FENTRY, std::ptr::null())
    };
    if fd < 0 {
        return Err(format!(
            "the kernel refused to attach an fentry program to {TRAMPOLINE_PROBE_TARGET} (bpf_link_create: {}): BPF trampolines are unavailable",
            std::io::Error::from_raw_os_error(-fd)
        ));
    }
    // SAFETY: fresh fd; dropping it detaches at once.
    drop(unsafe { OwnedFd::from_raw_fd(fd) });
    Ok(())
}

/// Opens (and closes) a CPU-clock sampling event on the first online CPU,
/// as `profile:` does: refused under a strict `perf_event_paranoid`
/// without CAP_PERFMON, or on kernels without perf events.
fn perf_cpu_clock() -> Result<(), String> {
    let cpu = crate::attach::perf::online_cpus()
        .map_err(|e| e.to_string())?
        .first()
        .copied()
        .unwrap_or(0);
    crate::attach::perf::open(
        &crate::attach::perf::cpu_clock(1),
        -1,
        cpu,
        "the CPU-clock feature probe",
    )
    .map(drop)
    .map_err(|e| format!("perf CPU-clock sampling is not available: {e}"))
}

/// True when TCX links work here (cached): the TC attach module uses them,
/// else a clsact qdisc.
pub(crate) fn tcx_links() -> bool {
    static TCX: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *TCX.get_or_init(|| tcx().is_ok())
}

/// r0 = -1 (`TCX_NEXT`, `TC_ACT_UNSPEC`); exit.
const RETURN_MINUS_ONE: [u8; 16] = [
    0xb7, 0x00, 0, 0, 0xff, 0xff, 0xff, 0xff, 0x95, 0, 0, 0, 0, 0, 0, 0,
];

/// Loads (and closes) a SCHED_CLS program: what a clsact filter needs.
fn sched_cls() -> Result<(), String> {
    let target = crate::LoadTarget {
        prog_type: ebql_catalog::ProgType::SchedCls,
        expected_attach_type: 0,
        attach_btf_id: 0,
        sleepable: false,
    };
    crate::Program::load("ebql_cls_probe", target, &RETURN_MINUS_ONE, &[])
        .map(drop)
        .map_err(|e| format!("cannot load a SCHED_CLS program: {e}"))
}

/// Loads a SCHED_CLS program that only returns `TCX_NEXT` and links it to
/// the TCX ingress hook of the loopback interface, then detaches it: TCX
/// links exist (Linux 6.6+) and we may use them.
fn tcx() -> Result<(), String> {
    let target = crate::LoadTarget {
        prog_type: ebql_catalog::ProgType::SchedCls,
        expected_attach_type: 0,
        attach_btf_id: 0,
        sleepable: false,
    };
    let prog = crate::Program::load("ebql_tcx_probe", target, &RETURN_MINUS_ONE, &[])
        .map_err(|e| format!("cannot load a SCHED_CLS program: {e}"))?;
    let lo = crate::attach::tcx::ifindex("lo").map_err(|e| e.to_string())?;
    crate::attach::tcx::tcx_link(&prog, lo, false)
        .map(drop)
        .map_err(|e| format!("this kernel has no TCX links (Linux 6.6+): {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The probe gives an answer either way and, where it fails, says
    /// which step the kernel refused (run as root: it loads a program).
    #[test]
    fn trampoline_probe_says_what_failed() {
        if unsafe { libc::geteuid() } != 0 {
            return;
        }
        match probe(Feature::Trampolines) {
            Ok(()) => {}
            Err(why) => assert!(
                why.contains("fentry") && why.contains(TRAMPOLINE_PROBE_TARGET),
                "{why}"
            ),
        }
    }
}
