//! Per-operation costs on one machine ([`CostModel`]), the event rates a
//! prediction needs ([`Rates`]) and what a prediction says ([`Prediction`]).

use crate::contract::MapKind;
use ebql_catalog::EventKind;
use std::collections::BTreeMap;

/// Where a program runs: its hook type decides the fixed cost of every
/// event (the kernel's work to get to the program and back).
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum Hook {
    /// A tracefs tracepoint (perf event; the kernel builds the trace record first).
    TracefsTracepoint,
    /// A raw tracepoint (`BPF_TRACE_RAW_TP`: the tracepoint's arguments, no record).
    RawTracepoint,
    /// A BTF-typed raw tracepoint (a tracing program on `btf_trace_*`).
    TpBtf,
    /// A kprobe or kretprobe.
    Kprobe,
    /// fentry/fexit (BPF trampoline).
    Fentry,
    /// A uprobe: a breakpoint trap in the traced process.
    Uprobe,
    /// A uretprobe: a trap at entry and one at return.
    Uretprobe,
    /// A USDT probe (a uprobe on a `nop`).
    Usdt,
    /// A perf event (timed sampling: `profile:`).
    PerfEvent,
    /// The traffic-control hook (per packet).
    Tc,
}

impl Hook {
    /// Every hook type, in display order.
    pub const ALL: [Hook; 10] = [
        Hook::TracefsTracepoint,
        Hook::RawTracepoint,
        Hook::TpBtf,
        Hook::Kprobe,
        Hook::Fentry,
        Hook::Uprobe,
        Hook::Uretprobe,
        Hook::Usdt,
        Hook::PerfEvent,
        Hook::Tc,
    ];

    /// The hook a program for events of `kind` attaches to.
    pub fn of(kind: EventKind) -> Hook {
        match kind {
            EventKind::Tracepoint => Hook::TracefsTracepoint,
            EventKind::RawTracepoint => Hook::RawTracepoint,
            EventKind::TpBtf => Hook::TpBtf,
            EventKind::Kprobe | EventKind::Kretprobe => Hook::Kprobe,
            EventKind::Fentry | EventKind::Fexit => Hook::Fentry,
            EventKind::Uprobe => Hook::Uprobe,
            EventKind::Uretprobe => Hook::Uretprobe,
            EventKind::Usdt => Hook::Usdt,
            EventKind::Profile => Hook::PerfEvent,
            EventKind::Tc => Hook::Tc,
        }
    }

    /// A kind of event attached at this hook (for feature probes).
    pub fn kind(self) -> EventKind {
        match self {
            Hook::TracefsTracepoint => EventKind::Tracepoint,
            Hook::RawTracepoint => EventKind::RawTracepoint,
            Hook::TpBtf => EventKind::TpBtf,
            Hook::Kprobe => EventKind::Kprobe,
            Hook::Fentry => EventKind::Fentry,
            Hook::Uprobe => EventKind::Uprobe,
            Hook::Uretprobe => EventKind::Uretprobe,
            Hook::Usdt => EventKind::Usdt,
            Hook::PerfEvent => EventKind::Profile,
            Hook::Tc => EventKind::Tc,
        }
    }

    /// What people call it.
    pub fn label(self) -> &'static str {
        match self {
            Hook::TracefsTracepoint => "tracefs tracepoint",
            Hook::RawTracepoint => "raw tracepoint",
            Hook::TpBtf => "tp_btf",
            Hook::Kprobe => "kprobe",
            Hook::Fentry => "fentry/fexit",
            Hook::Uprobe => "uprobe",
            Hook::Uretprobe => "uretprobe",
            Hook::Usdt => "USDT",
            Hook::PerfEvent => "perf event",
            Hook::Tc => "TC",
        }
    }
}

/// A map type as far as its cost goes.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum MapClass {
    /// BPF_MAP_TYPE_HASH (preallocated or not).
    Hash,
    /// BPF_MAP_TYPE_PERCPU_HASH.
    PercpuHash,
    /// BPF_MAP_TYPE_ARRAY (lookups are inlined by the verifier).
    Array,
    /// BPF_MAP_TYPE_PERCPU_ARRAY (lookups are inlined by the verifier).
    PercpuArray,
    /// BPF_MAP_TYPE_TASK_STORAGE (`bpf_task_storage_get`).
    TaskStorage,
}

impl MapClass {
    /// The class of a map the contract declares; `None` for maps that are
    /// not looked up (ring buffer, stack traces: priced as their helpers).
    pub fn of(kind: MapKind) -> Option<MapClass> {
        match kind {
            MapKind::Hash | MapKind::SharedHash => Some(MapClass::Hash),
            MapKind::PercpuHash | MapKind::PercpuHashPrealloc => Some(MapClass::PercpuHash),
            MapKind::Array | MapKind::MmapArray => Some(MapClass::Array),
            MapKind::PercpuArray => Some(MapClass::PercpuArray),
            MapKind::TaskStorage => Some(MapClass::TaskStorage),
            MapKind::RingBuf | MapKind::StackTrace => None,
        }
    }

    /// What people call it.
    pub fn label(self) -> &'static str {
        match self {
            MapClass::Hash => "hash",
            MapClass::PercpuHash => "per-CPU hash",
            MapClass::Array => "array",
            MapClass::PercpuArray => "per-CPU array",
            MapClass::TaskStorage => "task storage",
        }
    }
}

/// A map operation.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum MapOp {
    /// `bpf_map_lookup_elem` of a present key (`bpf_task_storage_get` of an existing slot).
    Lookup,
    /// `bpf_map_update_elem` of a present key (in place).
    Update,
    /// `bpf_map_delete_elem` of a present key.
    Delete,
}

/// `base_ns + per_byte_ns × bytes`.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Linear {
    /// Cost at zero bytes, ns.
    pub base_ns: f64,
    /// Cost per byte, ns.
    pub per_byte_ns: f64,
}

impl Linear {
    /// Cost of `bytes` bytes, ns.
    pub fn at(&self, bytes: u32) -> f64 {
        self.base_ns + self.per_byte_ns * bytes as f64
    }
}

/// One map operation's cost.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct MapOpCost {
    /// The map type.
    pub map: MapClass,
    /// The operation.
    pub op: MapOp,
    /// ns per call (helper call included).
    pub ns: f64,
}

/// Per-operation costs on one machine, in ns. Field docs say what each
/// covers and where the built-in number comes from.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct CostModel {
    /// Where these numbers come from: `built-in defaults`, or the
    /// calibration's machine, kernel and date.
    pub source: String,
    /// Names of the fields (and `hook:<hook>`, `helper:<name>`,
    /// `map:<class>:<op>` entries) measured on this machine; the rest are defaults.
    #[serde(default)]
    pub measured: Vec<String>,
    /// Added ns per event of a program that does nothing, per hook type
    /// (from the traced workload's throughput with and without it, bpf_stats
    /// off): the kernel's work to reach the program. `None`: unknown, or
    /// the kernel lacks the hook.
    pub hook_entry_ns: BTreeMap<Hook, Option<f64>>,
    /// Hook types this kernel lacks (kprobe, fentry on this project's kernel).
    #[serde(default)]
    pub hooks_absent: Vec<Hook>,
    /// Added ns per *other* system call while any program is attached to a
    /// syscall tracepoint (the syscall slow path every task takes then:
    /// `TIF_SYSCALL_TRACEPOINT`). Issue 11: `getppid` +30 ns.
    pub untraced_syscall_ns: f64,
    /// What bpf_stats itself adds to each run's measured `run_time_ns`
    /// (an empty program's run time with stats on): to compare a prediction
    /// with bpf_stats, add it.
    pub stats_overhead_ns: f64,
    /// ns per executed BPF instruction other than a call (JIT-compiled).
    pub insn_ns: f64,
    /// ns per call of a helper, by kernel name (`bpf_ktime_get_ns`), for
    /// helpers priced by id alone; [`CostModel::other_helper_ns`] otherwise.
    pub helper_ns: BTreeMap<String, f64>,
    /// A helper this table does not list.
    pub other_helper_ns: f64,
    /// `bpf_probe_read_{user,kernel}_str` by buffer size (the whole buffer
    /// is priced: a string as long as the buffer is the worst case).
    pub str_read: Linear,
    /// `bpf_probe_read_{user,kernel}` by size.
    pub probe_read: Linear,
    /// Map operations by map type.
    pub map_ops: Vec<MapOpCost>,
    /// `bpf_ringbuf_reserve` + `bpf_ringbuf_submit` of one record, by record
    /// size (the stores that fill it are instructions).
    pub ringbuf_record: Linear,
    /// `bpf_get_stackid` of the user stack / of the kernel stack.
    pub stackid_user_ns: f64,
    /// `bpf_get_stackid` of the kernel stack.
    pub stackid_kernel_ns: f64,
    /// User-space CPU of a query from its attach to its stop that does not
    /// depend on its events or its run time (the last window, detaching), ns.
    pub user_query_ns: f64,
    /// User-space CPU per second of a running query without events (the
    /// executor's polls every 10 ms), ns per s.
    pub user_idle_ns_per_s: f64,
    /// User-space CPU per streamed row: ring-buffer read, decode to Arrow,
    /// the DataFusion remainder (no sink formatting), ns.
    pub user_row_ns: f64,
    /// User-space CPU per closed window of a group table, fixed part
    /// (generation flip, grace period, drain syscalls, DataFusion remainder), ns.
    pub user_window_ns: f64,
    /// User-space CPU per group per CPU when a window's group table is
    /// drained (lookups and deletes of its keys), merged over CPUs and
    /// evaluated (the slope of a window's CPU in groups × CPUs), ns.
    pub user_merge_ns: f64,
    /// User-space CPU per streamed row that DataFusion aggregates (an
    /// aggregate placed in user space, [`crate::choose::Placement::User`]):
    /// ring-buffer read, decode, hash aggregation, ns. The window's fixed
    /// part is [`CostModel::user_window_ns`].
    #[serde(default = "default_user_agg_row_ns")]
    pub user_agg_row_ns: f64,
}

/// [`CostModel::user_agg_row_ns`] of the built-in model (and of caches written before it existed).
fn default_user_agg_row_ns() -> f64 {
    CostModel::built_in().user_agg_row_ns
}

impl CostModel {
    /// Numbers measured on the project's machine (2 vCPUs, Linux 6.18,
    /// debug build of ebql for the user-space parts) by `ebql calibrate`
    /// and in BENCHMARKS.md; used when no calibration of this machine exists.
    pub fn built_in() -> CostModel {
        // Unless noted: `ebql calibrate --rounds 7` on the project VM (2 vCPUs,
        // Linux 6.18, 2026-11-22, load average ~9 from other builds): bpf_stats
        // differences against a program without the operation, medians.
        let helper_ns = [
            ("bpf_get_current_pid_tgid", 9.5),
            ("bpf_ktime_get_ns", 41.0),
            ("bpf_get_current_comm", 51.4),
            ("bpf_get_current_uid_gid", 33.0),
            ("bpf_get_smp_processor_id", 2.3),
            ("bpf_get_current_cgroup_id", 30.7),
            ("bpf_get_current_task_btf", 10.3),
            ("bpf_get_current_task", 11.7),
        ];
        let map_ops = [
            (MapClass::PercpuHash, MapOp::Lookup, 38.0),
            (MapClass::PercpuHash, MapOp::Update, 98.6),
            (MapClass::Hash, MapOp::Lookup, 31.9),
            (MapClass::Hash, MapOp::Update, 123.6),
            (MapClass::Hash, MapOp::Delete, 132.8),
            (MapClass::Array, MapOp::Lookup, 1.9),
            (MapClass::Array, MapOp::Update, 41.6),
            (MapClass::PercpuArray, MapOp::Lookup, 2.3),
            (MapClass::PercpuArray, MapOp::Update, 38.2),
            (MapClass::TaskStorage, MapOp::Lookup, 20.7),
        ];
        CostModel {
            source: "built-in defaults (project VM, Linux 6.18)".into(),
            measured: Vec::new(),
            hook_entry_ns: [
                // Issue 11 (release build, bpf_stats off, quiet machine, pread64 loop):
                // tracefs sys_enter_pread64 +155 ns with an empty program; raw_tp/tp_btf sys_enter +87 ns.
                (Hook::TracefsTracepoint, Some(155.0)),
                (Hook::RawTracepoint, Some(87.0)),
                (Hook::TpBtf, Some(87.0)),
                // `ebql calibrate`: uprobe / uretprobe on libc's pread64 (the
                // breakpoint is single-stepped out of line: expensive under virtualization).
                (Hook::Uprobe, Some(11_800.0)),
                (Hook::Uretprobe, Some(13_000.0)),
                // BENCHMARKS.md "Issue 8: uprobe and USDT hit cost": a USDT `nop`, added per hit.
                (Hook::Usdt, Some(781.0)),
                // Not measured on the project machine (no kprobes, no fentry;
                // no sampling or packet baseline): unknown.
                (Hook::Kprobe, None),
                (Hook::Fentry, None),
                (Hook::PerfEvent, None),
                (Hook::Tc, None),
            ]
            .into_iter()
            .collect(),
            hooks_absent: Vec::new(),
            // Issue 11: an unrelated getppid +30 ns with a tracefs syscall tracepoint attached.
            untraced_syscall_ns: 30.0,
            stats_overhead_ns: 70.0,
            insn_ns: 0.11,
            helper_ns: helper_ns.iter().map(|(n, v)| (n.to_string(), *v)).collect(),
            other_helper_ns: 20.0,
            str_read: Linear {
                base_ns: 95.0,
                per_byte_ns: 0.046,
            },
            probe_read: Linear {
                base_ns: 45.0,
                per_byte_ns: 0.0,
            },
            map_ops: map_ops
                .iter()
                .map(|&(map, op, ns)| MapOpCost { map, op, ns })
                .collect(),
            ringbuf_record: Linear {
                base_ns: 48.0,
                per_byte_ns: 0.0,
            },
            stackid_user_ns: 780.0,
            stackid_kernel_ns: 1550.0,
            // User space: the same calibration with a debug build of ebql (a
            // release build costs less; calibrate with the binary you run).
            user_query_ns: 0.0,
            user_idle_ns_per_s: 14e6,
            user_row_ns: 223.0,
            user_window_ns: 3.8e6,
            user_merge_ns: 7200.0,
            // `ebql calibrate --rounds 3`, debug build, quiet machine (2026-11-22).
            user_agg_row_ns: 575.0,
        }
    }

    /// Added ns per event of an empty program on `hook`, if known.
    pub fn hook_ns(&self, hook: Hook) -> Option<f64> {
        self.hook_entry_ns.get(&hook).copied().flatten()
    }

    /// ns of one map operation; the nearest known class when this one was not measured.
    pub fn map_op_ns(&self, map: MapClass, op: MapOp) -> f64 {
        let find = |m: MapClass, o: MapOp| {
            self.map_ops
                .iter()
                .find(|c| c.map == m && c.op == o)
                .map(|c| c.ns)
        };
        find(map, op)
            .or_else(|| find(map, MapOp::Lookup))
            .or_else(|| find(MapClass::Hash, op))
            .unwrap_or(self.other_helper_ns)
    }

    /// ns of a helper priced by id alone.
    pub fn helper_by_name(&self, name: &str) -> f64 {
        self.helper_ns
            .get(name)
            .copied()
            .unwrap_or(self.other_helper_ns)
    }

    /// Whether `name` (a field, `hook:<hook>`, `helper:<name>` or
    /// `map:<class>:<op>`) was measured on this machine.
    pub fn is_measured(&self, name: &str) -> bool {
        self.measured.iter().any(|m| m == name)
    }

    /// The four numbers the syscall hook choice compares (tracefs
    /// `syscalls:sys_enter_<name>` vs a raw `sys_enter` hook with the
    /// syscall-id test first), for an empty program on each hook:
    /// (traced call on tracefs, other syscall with tracefs, traced call on
    /// the raw hook, other syscall with the raw hook), ns. The raw hook's
    /// "other syscall" is its entry plus the id test that rejects it.
    pub fn syscall_hook_costs(&self) -> SyscallHookCosts {
        let raw = self
            .hook_ns(Hook::TpBtf)
            .or(self.hook_ns(Hook::RawTracepoint))
            .unwrap_or(87.0);
        let id_test = 3.0 * self.insn_ns;
        SyscallHookCosts {
            tracefs_traced_ns: self.hook_ns(Hook::TracefsTracepoint).unwrap_or(155.0),
            tracefs_untraced_ns: self.untraced_syscall_ns,
            raw_traced_ns: raw + id_test,
            raw_untraced_ns: raw + id_test,
        }
    }
}

/// What choosing a syscall's hook compares, per call, ns ([`CostModel::syscall_hook_costs`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SyscallHookCosts {
    /// Added to a traced call by the tracefs `syscalls:sys_enter_<name>` hook.
    pub tracefs_traced_ns: f64,
    /// Added to every other system call of the machine while it is attached.
    pub tracefs_untraced_ns: f64,
    /// Added to a traced call by the raw `sys_enter` hook (entry and syscall-id test).
    pub raw_traced_ns: f64,
    /// Added to every other system call of the machine by the raw hook.
    pub raw_untraced_ns: f64,
}

/// How often the events of a query happen (from a short sampling, or given by tests).
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Rates {
    /// Per program of the query (start, then end for a pairing): events per
    /// second at its hook, all processes.
    pub events_per_s: Vec<Option<f64>>,
    /// Per program: the fraction of those events that pass its filters.
    pub matched_fraction: Vec<Option<f64>>,
    /// System calls per second on the whole machine (for the cost a syscall
    /// tracepoint puts on the other system calls).
    pub syscalls_per_s: Option<f64>,
    /// Groups per window of a grouped query, if known.
    pub groups_per_window: Option<f64>,
    /// Possible CPUs (per-CPU values are merged over all of them).
    pub cpus: usize,
    /// How the rates were obtained, for `explain` (e.g. `sampled for 150 ms`).
    pub source: String,
    /// How long the sample ran, in ms (0: not sampled).
    pub sampled_ms: u64,
}

impl Rates {
    /// No rates known, `cpus` possible CPUs.
    pub fn unknown(cpus: usize) -> Rates {
        Rates {
            cpus,
            ..Default::default()
        }
    }
}

/// One line of a cost breakdown.
#[derive(Clone, Debug, PartialEq)]
pub struct CostItem {
    /// What it is (`bpf_map_lookup_elem on per-CPU hash`, `42 instructions`, …).
    pub what: String,
    /// Expected ns per event (already weighed by how often the event reaches it).
    pub ns: f64,
}

/// What one program costs per event, ns.
#[derive(Clone, Debug, PartialEq)]
pub struct ProgramCost {
    /// The program's name (`ebql_se_pread64`).
    pub name: String,
    /// The event it runs on (`tracepoint:syscalls:sys_enter_pread64`).
    pub event: String,
    /// Its hook type.
    pub hook: Hook,
    /// Added ns per event before the program runs ([`CostModel::hook_entry_ns`]); `None` when unknown.
    pub hook_ns: Option<f64>,
    /// Program run time for an event the first filter rejects (equal to
    /// `matched_ns` when the program has no filter).
    pub unmatched_ns: f64,
    /// Program run time for an event that passes every filter (steady state:
    /// existing group, reserved record).
    pub matched_ns: f64,
    /// Where `matched_ns` goes.
    pub matched_breakdown: Vec<CostItem>,
    /// Where `unmatched_ns` goes.
    pub unmatched_breakdown: Vec<CostItem>,
    /// The program has a filter at all (else every event matches).
    pub filtered: bool,
    /// Its events are system calls seen through a tracefs syscall
    /// tracepoint: while it is attached, every other system call of the
    /// machine pays [`CostModel::untraced_syscall_ns`].
    pub syscall_tracepoint: bool,
}

impl ProgramCost {
    /// Program run time averaged over events at the hook when `matched` of
    /// them pass the filters.
    pub fn body_at(&self, matched: f64) -> f64 {
        if !self.filtered {
            return self.matched_ns;
        }
        matched * self.matched_ns + (1.0 - matched) * self.unmatched_ns
    }
}

/// A query's predicted cost.
#[derive(Clone, Debug, PartialEq)]
pub struct Prediction {
    /// Per program (start, then end for a pairing).
    pub programs: Vec<ProgramCost>,
    /// Mean added ns per event at the output program's hook (hook entry +
    /// run time averaged at the rates' matched fraction; every event
    /// counted as matched when the fraction is unknown). `None` if the hook's entry cost is unknown.
    pub ns_per_event_at_hook: Option<f64>,
    /// Added ns per event the query selects: hook entry + run time of a
    /// matched event, summed over programs (a pair pays its start and its end).
    pub ns_per_matched_event: Option<f64>,
    /// Added ns per event the query does not select (hook entry + run time
    /// until the first filter rejects it), output program.
    pub ns_per_unmatched_event: Option<f64>,
    /// CPU ns per second put on work the query does not trace: unmatched
    /// events at its hooks × their cost, plus, for syscall tracepoints, the
    /// machine's other system calls × [`CostModel::untraced_syscall_ns`].
    /// Needs rates.
    pub ns_on_untraced_work_per_s: Option<f64>,
    /// Kernel CPU ns per second the probes take (all events at the hooks). Needs rates.
    pub kernel_cpu_per_s: Option<f64>,
    /// User-space CPU ns per second (ebql's own process). Needs the matched
    /// rate for streams; groups per window for grouped queries (one group assumed when unknown).
    pub user_cpu_per_s: Option<f64>,
    /// User-space CPU per query on top of that, ns ([`CostModel::user_query_ns`]).
    pub user_fixed_ns: f64,
    /// How the user-space figure was made up (for explain).
    pub user_breakdown: Vec<CostItem>,
    /// The run time bpf_stats would report per run of the output program
    /// (run time at the matched fraction + [`CostModel::stats_overhead_ns`]).
    pub bpf_stats_ns_per_run: f64,
}

/// A plan the planner considered, with its predicted cost (the hook and
/// map choices hand these to `explain`).
#[derive(Clone, Debug)]
pub struct Alternative {
    /// What differs, e.g. `tp_btf:raw_syscalls:sys_enter with the syscall-id test first`.
    pub what: String,
    /// Whether this is the plan that runs.
    pub chosen: bool,
    /// Its predicted cost.
    pub prediction: Prediction,
    /// Why it was chosen or not, if the planner says.
    pub why: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn built_in_model_leaves_unmeasured_hooks_unknown() {
        let m = CostModel::built_in();
        assert!(m.hook_ns(Hook::TracefsTracepoint).is_some());
        assert!(m.hook_ns(Hook::Kprobe).is_none());
        assert!(
            m.map_op_ns(MapClass::PercpuHash, MapOp::Lookup)
                > m.map_op_ns(MapClass::Array, MapOp::Lookup)
        );
        let c = m.syscall_hook_costs();
        assert!(c.raw_traced_ns < c.tracefs_traced_ns && c.raw_untraced_ns > c.tracefs_untraced_ns);
    }
}
