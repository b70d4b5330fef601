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
    map.entry(feature).or_insert_with(|| probe_uncached(feature)).clone()
}

/// The first feature `kind` needs that this kernel lacks, with why.
pub fn missing(kind: EventKind) -> Option<(Feature, String)> {
    kind.features().iter().find_map(|&f| probe(f).err().map(|why| (f, why)))
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
        Feature::PerfCpuClock => perf_cpu_clock(),
        // Probed by the modules that use them once they exist.
        Feature::Trampolines | Feature::TcHook => Ok(()),
    }
}

/// Opens (and closes) a CPU-clock sampling event on the first online CPU,
/// as `profile:` does: refused under a strict `perf_event_paranoid`
/// without CAP_PERFMON, or on kernels without perf events.
fn perf_cpu_clock() -> Result<(), String> {
    let cpu = crate::attach::profile::online_cpus().map_err(|e| e.to_string())?.first().copied().unwrap_or(0);
    crate::attach::perf_open(&crate::attach::profile::cpu_clock(1), -1, cpu, "the CPU-clock feature probe")
        .map(drop)
        .map_err(|e| format!("perf CPU-clock sampling is not available: {e}"))
}
