//! Event sources: one module per kind of hook (bpftrace's "providers", aya's
//! one module per program type).
//!
//! Every kind answers the same four questions, so the rest of eBQL never
//! tests for a particular kind:
//!
//! * **names** — its spellings after `FROM` ([`EventKind::from_prefix`]) and
//!   how the rest of the name reads (`parse_rest` in each module);
//! * **listing** — `ebql events` (`list` in each module);
//! * **schema** — its columns, each saying how it is read ([`Access`]), and
//!   the system attributes its program type may call helpers for;
//! * **attach** — the BPF program type and the attach description
//!   ([`Attach`]) the runtime turns into a link, and the kernel features it
//!   needs ([`Feature`]), which the runtime probes before loading anything.
//!
//! Modules: [`tracepoint`] (tracefs tracepoints), [`btf_tp`] (`tp_btf` and
//! raw tracepoints), [`kprobe`] (kprobes and fentry/fexit), [`uprobe`],
//! [`usdt`], [`profile`] (perf CPU-clock sampling), [`tc`] (the traffic
//! control hook).

pub mod btf_tp;
pub mod kprobe;
pub mod profile;
pub mod pt_regs;
pub mod tc;
pub mod tracepoint;
pub mod uprobe;
pub mod usdt;

use crate::{Catalog, CatalogError, EventName, EventSchema};

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

/// Spellings of each kind (case-insensitive), canonical first.
const SPELLINGS: &[(EventKind, &[&str])] = &[
    (EventKind::Tracepoint, &["tracepoint", "tp", "t"]),
    (
        EventKind::RawTracepoint,
        &["raw_tracepoint", "raw_tp", "rawtracepoint", "rawtp"],
    ),
    (EventKind::TpBtf, &["tp_btf", "btf_tp"]),
    (EventKind::Kprobe, &["kprobe", "k"]),
    (EventKind::Kretprobe, &["kretprobe", "kr"]),
    (EventKind::Fentry, &["fentry", "f"]),
    (EventKind::Fexit, &["fexit", "fr"]),
    (EventKind::Uprobe, &["uprobe", "u"]),
    (EventKind::Uretprobe, &["uretprobe", "ur"]),
    (EventKind::Usdt, &["usdt"]),
    (EventKind::Profile, &["profile", "p"]),
    (EventKind::Tc, &["tc"]),
];

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

    /// The canonical prefix used in table names, e.g. `"tracepoint"`, `"tp_btf"`.
    pub fn prefix(self) -> &'static str {
        self.spellings()[0]
    }

    /// Every accepted spelling, canonical first.
    pub fn spellings(self) -> &'static [&'static str] {
        SPELLINGS
            .iter()
            .find(|(k, _)| *k == self)
            .map(|(_, s)| *s)
            .expect("every kind has spellings")
    }

    /// The kind spelled `word` (case-insensitive), if any.
    pub fn from_prefix(word: &str) -> Option<EventKind> {
        let w = word.to_ascii_lowercase();
        SPELLINGS
            .iter()
            .find(|(_, s)| s.contains(&w.as_str()))
            .map(|(k, _)| *k)
    }

    /// All spellings of all kinds (for "did you mean").
    pub fn all_spellings() -> impl Iterator<Item = &'static str> {
        SPELLINGS.iter().flat_map(|(_, s)| s.iter().copied())
    }

    /// The BPF program type of this kind's programs.
    pub fn program_type(self) -> ProgType {
        match self {
            EventKind::Tracepoint => ProgType::Tracepoint,
            EventKind::RawTracepoint => ProgType::RawTracepoint,
            EventKind::TpBtf | EventKind::Fentry | EventKind::Fexit => ProgType::Tracing,
            EventKind::Kprobe
            | EventKind::Kretprobe
            | EventKind::Uprobe
            | EventKind::Uretprobe
            | EventKind::Usdt => ProgType::Kprobe,
            EventKind::Profile => ProgType::PerfEvent,
            EventKind::Tc => ProgType::SchedCls,
        }
    }

    /// Kernel features this kind needs; the runtime probes each before
    /// loading a program (`ebql_runtime::features`), never guessing from
    /// error text.
    pub fn features(self) -> &'static [Feature] {
        match self {
            EventKind::Tracepoint => &[Feature::Tracefs],
            EventKind::RawTracepoint => &[],
            EventKind::TpBtf => &[Feature::KernelBtf],
            EventKind::Kprobe | EventKind::Kretprobe => &[Feature::Kprobes],
            EventKind::Fentry | EventKind::Fexit => &[Feature::KernelBtf, Feature::Trampolines],
            EventKind::Uprobe | EventKind::Uretprobe | EventKind::Usdt => &[Feature::Uprobes],
            EventKind::Profile => &[Feature::PerfCpuClock],
            EventKind::Tc => &[Feature::TcHook],
        }
    }

    /// What to use instead when this kernel lacks the kind, for error hints.
    pub fn alternative(self) -> &'static str {
        match self {
            EventKind::Kprobe | EventKind::Kretprobe | EventKind::Fentry | EventKind::Fexit => {
                "use a tracepoint of the same subsystem (`ebql events 'syscalls:*'`), or `tp_btf:<category>:<name>` \
                 for its typed arguments and struct fields"
            }
            EventKind::TpBtf => "use `tracepoint:<category>:<name>` (tracefs) for the same event",
            EventKind::Uprobe | EventKind::Uretprobe | EventKind::Usdt => {
                "this kernel cannot probe user space; trace the syscalls the program makes instead"
            }
            EventKind::Profile | EventKind::Tc | EventKind::Tracepoint | EventKind::RawTracepoint => {
                "no alternative hook gives the same events"
            }
        }
    }

    /// True for kinds whose events happen in a task's context, so the
    /// task-related system attributes (pid, tid, comm, uid, cgroup) mean
    /// "the task that caused the event". False for the TC hook.
    pub fn in_task_context(self) -> bool {
        self != EventKind::Tc
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

/// How a column's value is read by the probe.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Access {
    /// `size` bytes at `ctx + offset` (the field's `offset`): a tracefs record
    /// field, a `pt_regs` register, a raw tracepoint argument slot, a
    /// `__sk_buff` field.
    Ctx,
    /// A `__data_loc` string of a tracefs record: the u32 at `ctx + offset`
    /// holds the string's offset from the record start (low 16 bits) and
    /// its length (high 16 bits).
    DataLoc,
    /// Through BTF: the u64 argument `arg` of the context, then `steps`.
    Btf {
        /// Index of the argument in the context's `u64` array.
        arg: u32,
        /// Field steps from the argument (empty: the argument itself).
        steps: Vec<BtfStep>,
        /// Direct loads allowed (tp_btf/fentry: the verifier tracks BTF
        /// pointers), else `bpf_probe_read_kernel` per pointer (raw_tp, kprobe).
        direct: bool,
    },
    /// A USDT argument (`.note.stapsdt` operand).
    Usdt(UsdtArg),
    /// A column parsed from the packet's bytes at the TC hook (read once per
    /// packet with `bpf_skb_load_bytes`; see [`tc::PacketField`]).
    Packet(tc::PacketField),
    /// A stack id from `bpf_get_stackid` into the query's stack map.
    StackId {
        /// User-space stack (true) or kernel stack (false).
        user: bool,
    },
}

/// One step of a BTF field path: the field at `offset` bytes of the struct
/// reached so far; when `deref` the value there is a pointer followed before
/// the next step.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct BtfStep {
    /// Byte offset of the field in its struct.
    pub offset: u32,
    /// The field is a pointer, dereferenced to reach the next step.
    pub deref: bool,
}

/// A USDT argument operand (`-4@%eax`, `8@-8(%rbp)`, `-4@$5`), from
/// `.note.stapsdt` (systemtap's SDT v3 note format).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum UsdtArg {
    /// A constant.
    Const(i64),
    /// A register's value: offset of the register in `struct pt_regs`.
    Reg {
        /// Byte offset in `struct pt_regs` (x86-64).
        pt_regs: u32,
    },
    /// Memory at register + displacement, read with `bpf_probe_read_user`.
    Mem {
        /// Byte offset of the base register in `struct pt_regs`.
        pt_regs: u32,
        /// Displacement in bytes.
        disp: i32,
    },
}

/// Parses the part of a name after `<kind>:` for `kind` (dispatch to the kind's module).
pub(crate) fn parse_rest(
    kind: EventKind,
    rest: &str,
    input: &str,
) -> Result<EventName, CatalogError> {
    match kind {
        EventKind::Tracepoint | EventKind::RawTracepoint | EventKind::TpBtf => {
            tracepoint::parse_rest(kind, rest, input)
        }
        EventKind::Kprobe | EventKind::Kretprobe | EventKind::Fentry | EventKind::Fexit => {
            kprobe::parse_rest(kind, rest, input)
        }
        EventKind::Uprobe | EventKind::Uretprobe => uprobe::parse_rest(kind, rest, input),
        EventKind::Usdt => usdt::parse_rest(rest, input),
        EventKind::Profile => profile::parse_rest(rest, input),
        EventKind::Tc => tc::parse_rest(rest, input),
    }
}

/// The schema of `name` (dispatch to the kind's module).
pub(crate) fn schema(cat: &Catalog, name: &EventName) -> Result<EventSchema, CatalogError> {
    match name.kind {
        EventKind::Tracepoint => tracepoint::schema(cat, name),
        EventKind::RawTracepoint | EventKind::TpBtf => btf_tp::schema(cat, name),
        EventKind::Kprobe | EventKind::Kretprobe | EventKind::Fentry | EventKind::Fexit => {
            kprobe::schema(name)
        }
        EventKind::Uprobe | EventKind::Uretprobe => uprobe::schema(name),
        EventKind::Usdt => usdt::schema(name),
        EventKind::Profile => profile::schema(name),
        EventKind::Tc => tc::schema(name),
    }
}

/// Events of `kind` matching `pattern` (the part of the glob after `<kind>:`;
/// `None` = all that can be listed without a target).
pub(crate) fn list(
    cat: &Catalog,
    kind: EventKind,
    pattern: Option<&str>,
) -> Result<Vec<EventName>, CatalogError> {
    match kind {
        EventKind::Tracepoint => tracepoint::list(cat, pattern),
        EventKind::RawTracepoint | EventKind::TpBtf => btf_tp::list(cat, kind, pattern),
        EventKind::Kprobe | EventKind::Kretprobe | EventKind::Fentry | EventKind::Fexit => {
            kprobe::list(kind, pattern)
        }
        EventKind::Uprobe | EventKind::Uretprobe => uprobe::list(kind, pattern),
        EventKind::Usdt => usdt::list(pattern),
        EventKind::Profile => profile::list(pattern),
        EventKind::Tc => tc::list(pattern),
    }
}

/// The field `path` of `event` (a dotted path such as `prev.comm` split at
/// the dots) for kinds with BTF-typed arguments (tp_btf, raw tracepoints,
/// fentry, fexit): `Ok(None)` for other kinds, one-part paths and paths
/// whose first part is no argument. The field is named `prev.comm`.
///
/// Errors: [`CatalogError::UnknownField`] when a part names no field (the
/// hint lists those that exist); [`CatalogError::Unavailable`] without kernel BTF.
pub fn field_path(
    event: &EventName,
    path: &[String],
) -> Result<Option<crate::TraceField>, CatalogError> {
    match event.kind {
        EventKind::TpBtf | EventKind::RawTracepoint if path.len() > 1 => {
            btf_tp::field_path(event, path)
        }
        EventKind::Fentry | EventKind::Fexit if path.len() > 1 => kprobe::field_path(event, path),
        _ => Ok(None),
    }
}

/// For a column that points to a kernel struct (C type `struct x *`), how
/// to reach its fields (`describe`), e.g. `fields as prev.<field>: pid, comm, …`.
pub fn struct_fields_hint(column: &crate::TraceField) -> Option<String> {
    if !matches!(column.access, Access::Btf { .. }) {
        return None;
    }
    let btf = crate::btf::vmlinux().ok()?;
    crate::btf::fields_hint(btf, &column.name, &column.c_type)
}
