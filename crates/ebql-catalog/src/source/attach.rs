//! [`Attach`]: where and how a probe attaches, as the catalog resolves it
//! for the runtime (`ebql_runtime::attach`).

/// Where and how a program attaches: what the runtime needs, resolved by the
/// catalog (ids, offsets) so the runtime does no lookups of its own.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Attach {
    /// `perf_event_open(PERF_TYPE_TRACEPOINT, config = id)` + a `BPF_PERF_EVENT` link.
    Tracepoint {
        /// The tracefs event id (`ID:` of the format file).
        id: u32,
    },
    /// A raw tracepoint by name (`BPF_TRACE_RAW_TP` link).
    RawTracepoint {
        /// Tracepoint name without category, e.g. `sched_switch`.
        name: String,
    },
    /// A BTF-typed program (tp_btf, fentry, fexit): loaded with
    /// `attach_btf_id`, attached with a tracing link.
    Btf {
        /// Tracepoint or function name (for messages).
        name: String,
        /// BTF type id in vmlinux of `btf_trace_<name>` (tp_btf) or of the function (fentry/fexit).
        btf_id: u32,
    },
    /// A kprobe or kretprobe on a kernel function (perf kprobe PMU).
    Kprobe {
        /// Kernel function name.
        function: String,
        /// Return probe.
        retprobe: bool,
    },
    /// A uprobe, uretprobe or USDT probe (perf uprobe PMU): one uprobe per
    /// offset, all running the same program.
    Uprobe {
        /// The ELF file (executable or shared library), absolute.
        binary: std::path::PathBuf,
        /// File offsets of the probed instructions: one for a function, one
        /// per site for a USDT probe used in several places.
        offsets: Vec<u64>,
        /// Return probe.
        retprobe: bool,
        /// File offset of the USDT semaphore (a u16 the kernel increments
        /// while a probe is attached), if the probe has one.
        semaphore: Option<u64>,
    },
    /// Perf CPU-clock sampling on every online CPU.
    Profile {
        /// Samples per second per CPU.
        hz: u64,
    },
    /// The traffic-control hook of an interface.
    Tc {
        /// Interface name.
        ifname: String,
        /// Egress (true) or ingress (false).
        egress: bool,
    },
}
