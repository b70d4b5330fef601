//! What kinds of event exist ([`EventKind`]), the BPF program types their
//! probes are ([`ProgType`]) and the kernel features they need
//! ([`Feature`]): plain facts shared by every source module and the
//! registry, so this module depends on nothing else in `source`.
//!
//! What each kind *does* (spellings, names, listing, schema, program type,
//! features) is answered by its [`super::Source`] implementation; the
//! methods of [`EventKind`] ask the registry ([`super::registry`]).

/// Which hook an event is. Adding a kind breaks exhaustive matches on
/// purpose: every consumer gets revisited.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum EventKind {
    /// A static kernel tracepoint, described by tracefs
    /// `events/<category>/<name>/format` (program type TRACEPOINT).
    Tracepoint,
    /// The same tracepoint without the tracefs record: the raw arguments of
    /// the tracepoint's C prototype as `u64`s (program type RAW_TRACEPOINT;
    /// pointers are followed with `bpf_probe_read_kernel`).
    RawTracepoint,
    /// A BTF-typed raw tracepoint (program type TRACING, attach type
    /// `BPF_TRACE_RAW_TP`): typed arguments, struct fields by direct loads.
    TpBtf,
    /// Entry of a kernel function (perf kprobe PMU; needs CONFIG_KPROBES).
    Kprobe,
    /// Return of a kernel function.
    Kretprobe,
    /// Entry of a kernel function through a BPF trampoline (program type
    /// TRACING, `BPF_TRACE_FENTRY`; typed arguments from BTF).
    Fentry,
    /// Return of a kernel function through a trampoline (`BPF_TRACE_FEXIT`).
    Fexit,
    /// Entry of a user-space function (perf uprobe PMU).
    Uprobe,
    /// Return of a user-space function.
    Uretprobe,
    /// A user-space statically defined tracepoint (`.note.stapsdt`), attached as a uprobe.
    Usdt,
    /// Timed sampling of every CPU (perf software CPU-clock event, program type PERF_EVENT).
    Profile,
    /// Packets at the traffic-control hook of a network interface (program type SCHED_CLS).
    Tc,
}

impl EventKind {
    /// Every kind, in listing order.
    pub const ALL: [EventKind; 12] = [
        EventKind::Tracepoint,
        EventKind::RawTracepoint,
        EventKind::TpBtf,
        EventKind::Kprobe,
        EventKind::Kretprobe,
        EventKind::Fentry,
        EventKind::Fexit,
        EventKind::Uprobe,
        EventKind::Uretprobe,
        EventKind::Usdt,
        EventKind::Profile,
        EventKind::Tc,
    ];

    /// Whether programs of this kind can share their hook with other
    /// queries' programs as one chain (`ebql_runtime::SharedHooks`):
    /// tracefs, raw and BTF tracepoints, which never sleep and whose return
    /// value the kernel ignores. Uprobes and USDT (attached per process),
    /// perf sampling (a frequency per program), TC (a verdict) and
    /// fentry/fexit (trampolines) attach alone.
    pub fn shares_hook(self) -> bool {
        matches!(
            self,
            EventKind::Tracepoint | EventKind::RawTracepoint | EventKind::TpBtf
        )
    }
}

/// BPF program types eBQL emits (`enum bpf_prog_type` in include/uapi/linux/bpf.h).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ProgType {
    /// `BPF_PROG_TYPE_TRACEPOINT`: context = the tracefs record.
    Tracepoint,
    /// `BPF_PROG_TYPE_RAW_TRACEPOINT`: context = `u64 args[]`.
    RawTracepoint,
    /// `BPF_PROG_TYPE_TRACING` (tp_btf, fentry, fexit): context = `u64 args[]`, BTF-typed.
    Tracing,
    /// `BPF_PROG_TYPE_KPROBE` (kprobes, uprobes, USDT): context = `struct pt_regs`.
    Kprobe,
    /// `BPF_PROG_TYPE_PERF_EVENT`: context = `struct bpf_perf_event_data`.
    PerfEvent,
    /// `BPF_PROG_TYPE_SCHED_CLS`: context = `struct __sk_buff`.
    SchedCls,
}

/// A kernel feature a kind needs, probed by the runtime.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Feature {
    /// tracefs with `events/` (the catalog mounts it when missing).
    Tracefs,
    /// Kernel BTF at /sys/kernel/btf/vmlinux (CONFIG_DEBUG_INFO_BTF).
    KernelBtf,
    /// kprobes (CONFIG_KPROBES; the perf `kprobe` PMU or tracefs `kprobe_events`).
    Kprobes,
    /// BPF trampolines: an fentry program loads and attaches (x86-64 JIT; some
    /// kernels or lockdown settings refuse it with EPERM).
    Trampolines,
    /// uprobes (CONFIG_UPROBES; the perf `uprobe` PMU).
    Uprobes,
    /// The perf software CPU-clock event (`perf_event_open` allowed).
    PerfCpuClock,
    /// The TC hook: TCX links (Linux 6.6+) or a clsact qdisc.
    TcHook,
}

impl Feature {
    /// Name for messages, e.g. `"kprobes"`.
    pub fn name(self) -> &'static str {
        match self {
            Feature::Tracefs => "tracefs",
            Feature::KernelBtf => "kernel BTF",
            Feature::Kprobes => "kprobes",
            Feature::Trampolines => "BPF trampolines (fentry/fexit)",
            Feature::Uprobes => "uprobes",
            Feature::PerfCpuClock => "perf CPU-clock sampling",
            Feature::TcHook => "the TC hook (TCX or clsact)",
        }
    }
}
