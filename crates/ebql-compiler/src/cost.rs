//! The cost model: what a compiled query costs per event, in nanoseconds,
//! predicted from the BPF it actually generated.
//!
//! Three parts:
//!
//! * [`CostModel`]: per-operation costs on one machine (hook entry per hook
//!   type, BPF instructions, helper calls by id, map operations by map type,
//!   ring-buffer records, user-space work per row, per window and per group).
//!   [`CostModel::built_in`] holds defaults measured on the project's 2-core
//!   VM (Linux 6.18; sources on each field); `ebql calibrate` measures them on
//!   the machine at hand and caches them as JSON (see `ebql::calibrate`).
//! * [`profile_program`]: walks one generated [`ebql_bpf::Program`] and
//!   weighs every instruction by the probability that an event executes it:
//!   the filter regions (instruction ranges whose origin is a `Filter:`)
//!   pass with the filter's selectivity, a test of a helper's result takes
//!   the success branch (a group exists, a record was reserved: failures are
//!   counted drops, not the steady state), a branch into code that counts an
//!   anomaly (an atomic add to a control-map counter: a drop, an overwritten
//!   start, an end without a start) is not taken, and other data-dependent
//!   branches are taken half the time. Helper calls are priced by id and by what they
//!   act on (the map an `r1 = map_fd(i)` before the call names, the size an
//!   `r2 = n` gives), so the prediction follows the code, not the SQL.
//! * [`predict`]: the programs of a query plus the [`Rates`] of their events
//!   give a [`Prediction`]: ns per event at the hook, per matched event, the
//!   cost put on work the query does not trace, and user-space CPU.
//!
//! Pure: no syscalls. Rates and calibration come from the caller.

use crate::choose::{Optimize, Placement};
use crate::codegen::{MapKind, MapSpec, ProgramSpec};
use crate::contract::OutputLayout;
use crate::pipeline::CompiledQuery;
use crate::prepass::WindowSpec;
use ebql_bpf::insn::{self, Insn};
use ebql_bpf::{helper, AluOp, JmpCond};
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
#[derive(Clone, Debug, Default, PartialEq)]
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

/// Whether an instruction range's origin is one of the query's filter terms
/// (codegen's `Filter: <text>` and a pairing end's `Pair end: thread filter <text>`).
pub fn is_filter_origin(origin: &str) -> bool {
    origin.starts_with("Filter: ") || origin.starts_with("Pair end: thread filter ")
}

/// How an event goes through a program's filters.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Through {
    /// Passes every filter.
    Matched,
    /// Rejected by the first filter.
    Rejected,
}

/// One executed kind of instruction, for the breakdown.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Charge {
    Insns,
    Call(String),
}

/// Where each slot's jump lands and what the slot is.
struct Decoded<'a> {
    insns: &'a [Insn],
    /// Slot index of the next instruction (ld_imm64 takes two slots).
    next: Vec<usize>,
}

impl<'a> Decoded<'a> {
    fn new(insns: &'a [Insn]) -> Self {
        let next = (0..insns.len())
            .map(|pc| pc + if insns[pc].is_ld_imm64() { 2 } else { 1 })
            .collect();
        Decoded { insns, next }
    }

    /// Real instruction starts (not the second slot of an ld_imm64).
    fn starts(&self) -> Vec<usize> {
        let mut out = Vec::new();
        let mut pc = 0;
        while pc < self.insns.len() {
            out.push(pc);
            pc = self.next[pc];
        }
        out
    }
}

fn is_jmp_class(i: &Insn) -> bool {
    matches!(i.class(), insn::BPF_JMP | insn::BPF_JMP32)
}

fn is_call(i: &Insn) -> bool {
    i.code == insn::BPF_JMP | insn::BPF_CALL && i.src == 0
}

fn is_exit(i: &Insn) -> bool {
    i.code == insn::BPF_JMP | insn::BPF_EXIT
}

fn is_ja(i: &Insn) -> bool {
    i.code == insn::BPF_JMP | insn::BPF_JA
}

fn is_cond(i: &Insn) -> bool {
    is_jmp_class(i) && !is_exit(i) && !is_ja(i) && i.code & 0xf0 != insn::BPF_CALL
}

/// Whether the instruction writes register `reg` (a call writes r0-r5).
fn writes(i: &Insn, reg: u8) -> bool {
    if is_call(i) {
        return reg <= 5;
    }
    match i.class() {
        insn::BPF_ALU | insn::BPF_ALU64 | insn::BPF_LDX | insn::BPF_LD => i.dst == reg,
        // Atomic fetch writes its source register.
        insn::BPF_STX if i.code & 0xe0 == insn::BPF_ATOMIC && i.imm & insn::BPF_FETCH != 0 => {
            i.src == reg
        }
        _ => false,
    }
}

/// The constant a register was last set to before `at` in straight-line
/// code, if a `mov reg, imm` set it (codegen passes sizes and flags so).
fn const_before(d: &Decoded, starts: &[usize], at: usize, reg: u8) -> Option<i64> {
    let k = starts.partition_point(|&s| s < at);
    for &pc in starts[..k].iter().rev().take(16) {
        let i = &d.insns[pc];
        if is_jmp_class(i) && !is_call(i) {
            return None;
        }
        if writes(i, reg) {
            let mov = AluOp::Mov.code();
            if i.code == insn::BPF_ALU64 | insn::BPF_K | mov
                || i.code == insn::BPF_ALU | insn::BPF_K | mov
            {
                return Some(i.imm as i64);
            }
            return None;
        }
    }
    None
}

/// The map index an `r1 = map_fd(i)` before the call at `at` names.
fn map_before(d: &Decoded, starts: &[usize], at: usize) -> Option<usize> {
    let k = starts.partition_point(|&s| s < at);
    for &pc in starts[..k].iter().rev().take(16) {
        let i = &d.insns[pc];
        if is_jmp_class(i) && !is_call(i) {
            return None;
        }
        if writes(i, 1) {
            return (i.is_ld_imm64() && i.src == insn::BPF_PSEUDO_MAP_FD).then_some(i.imm as usize);
        }
    }
    None
}

/// What a call costs and how it is named in the breakdown.
fn price_call(
    model: &CostModel,
    d: &Decoded,
    starts: &[usize],
    pc: usize,
    maps: &[MapSpec],
) -> (String, f64) {
    let id = d.insns[pc].imm;
    let name = helper::helper_name(id)
        .unwrap_or("unknown helper")
        .to_string();
    let map = || {
        map_before(d, starts, pc)
            .and_then(|m| maps.get(m))
            .and_then(|m| MapClass::of(m.kind))
    };
    let size = |reg: u8| {
        const_before(d, starts, pc, reg)
            .filter(|&n| n > 0)
            .map(|n| n as u32)
    };
    let map_op = |op: MapOp| match map() {
        Some(class) => (
            format!("{name} on {}", class.label()),
            model.map_op_ns(class, op),
        ),
        None => (name.clone(), model.map_op_ns(MapClass::Hash, op)),
    };
    match id {
        helper::MAP_LOOKUP_ELEM => map_op(MapOp::Lookup),
        helper::MAP_UPDATE_ELEM => map_op(MapOp::Update),
        helper::MAP_DELETE_ELEM => map_op(MapOp::Delete),
        helper::TASK_STORAGE_GET => (name, model.map_op_ns(MapClass::TaskStorage, MapOp::Lookup)),
        helper::RINGBUF_RESERVE => {
            let bytes = size(2).unwrap_or(8);
            (
                format!("ring-buffer record of {bytes} B (reserve + submit)"),
                model.ringbuf_record.at(bytes),
            )
        }
        // Priced with the reservation.
        helper::RINGBUF_SUBMIT | helper::RINGBUF_DISCARD => (
            "bpf_ringbuf_submit (priced with the reservation)".into(),
            0.0,
        ),
        helper::PROBE_READ_USER_STR | helper::PROBE_READ_KERNEL_STR | helper::PROBE_READ_STR => {
            let bytes = size(2).unwrap_or(256);
            (format!("{name} of ≤ {bytes} B"), model.str_read.at(bytes))
        }
        helper::PROBE_READ_USER | helper::PROBE_READ_KERNEL | helper::PROBE_READ => {
            let bytes = size(2).unwrap_or(8);
            (format!("{name} of {bytes} B"), model.probe_read.at(bytes))
        }
        helper::GET_STACKID => {
            let user = const_before(d, starts, pc, 3).is_some_and(|f| f & (1 << 8) != 0);
            if user {
                ("bpf_get_stackid (user stack)".into(), model.stackid_user_ns)
            } else {
                (
                    "bpf_get_stackid (kernel stack)".into(),
                    model.stackid_kernel_ns,
                )
            }
        }
        _ => {
            let ns = model.helper_by_name(&name);
            (name, ns)
        }
    }
}

/// What a helper returns when it succeeds, for the branch that tests it.
fn success_value(helper_id: i32) -> i64 {
    match helper_id {
        helper::MAP_LOOKUP_ELEM
        | helper::RINGBUF_RESERVE
        | helper::TASK_STORAGE_GET
        | helper::GET_CURRENT_TASK_BTF
        | helper::GET_CURRENT_TASK => 0x1000,
        // A string read returns the bytes copied, NUL included.
        helper::PROBE_READ_USER_STR | helper::PROBE_READ_KERNEL_STR | helper::PROBE_READ_STR => 8,
        _ => 0,
    }
}

/// Whether `if dst <cond> imm` is taken for `v`.
fn taken(cond: JmpCond, v: i64, imm: i64, wide: bool) -> bool {
    let (v, imm) = if wide {
        (v, imm)
    } else {
        (v as i32 as i64, imm as i32 as i64)
    };
    let (uv, uimm) = if wide {
        (v as u64, imm as u64)
    } else {
        (v as u32 as u64, imm as u32 as u64)
    };
    match cond {
        JmpCond::Eq => v == imm,
        JmpCond::Ne => v != imm,
        JmpCond::Gt => uv > uimm,
        JmpCond::Ge => uv >= uimm,
        JmpCond::Lt => uv < uimm,
        JmpCond::Le => uv <= uimm,
        JmpCond::Sgt => v > imm,
        JmpCond::Sge => v >= imm,
        JmpCond::Slt => v < imm,
        JmpCond::Sle => v <= imm,
        JmpCond::Set => v & imm != 0,
    }
}

/// For each conditional jump that tests a helper's result in `r0` against
/// a constant (the call before it in straight-line code, `r0` untouched
/// since): whether the success outcome takes the jump.
fn helper_tests(d: &Decoded, starts: &[usize]) -> BTreeMap<usize, bool> {
    let mut out = BTreeMap::new();
    let mut r0_from: Option<i32> = None;
    for &pc in starts {
        let i = &d.insns[pc];
        if is_call(i) {
            r0_from = Some(i.imm);
            continue;
        }
        if is_cond(i) {
            if let (Some(h), true, 0) = (r0_from, i.code & insn::BPF_X == 0, i.dst) {
                if let Some(cond) = JmpCond::from_code(i.code & 0xf0) {
                    out.insert(
                        pc,
                        taken(
                            cond,
                            success_value(h),
                            i.imm as i64,
                            i.class() == insn::BPF_JMP,
                        ),
                    );
                }
            }
            // r0 keeps its value on both outcomes; a later test of it still counts.
            continue;
        }
        if is_jmp_class(i) || writes(i, 0) {
            r0_from = None;
        }
    }
    out
}

/// Whether the straight-line code from `pc` (fall-throughs and `ja`, up to
/// the next conditional jump or exit) counts an anomaly: an atomic add
/// without fetch, which is how codegen counts drops, overwritten starts and
/// ends without a start in the control map. Such code is not the steady state.
fn counts_anomaly(d: &Decoded, mut pc: usize) -> bool {
    for _ in 0..64 {
        let Some(i) = d.insns.get(pc) else {
            return false;
        };
        if i.class() == insn::BPF_STX
            && i.code & 0xe0 == insn::BPF_ATOMIC
            && i.imm == insn::BPF_ATOMIC_ADD
        {
            return true;
        }
        if is_exit(i) || is_cond(i) {
            return false;
        }
        pc = if is_ja(i) {
            (pc as i64 + 1 + i.off as i64) as usize
        } else {
            d.next[pc]
        };
    }
    false
}

/// Expected cost of one run of `spec` (maps as [`crate::Compiled::maps`]),
/// for an event that passes every filter or is rejected by the first.
fn walk(
    model: &CostModel,
    spec: &ProgramSpec,
    maps: &[MapSpec],
    through: Through,
) -> Vec<(Charge, f64)> {
    let prog = &spec.program;
    let d = Decoded::new(&prog.insns);
    let starts = d.starts();
    let tests = helper_tests(&d, &starts);
    let n = prog.insns.len();
    // Filter regions: (first slot, end slot), in program order.
    let regions: Vec<(usize, usize)> = prog
        .origins
        .iter()
        .filter(|(_, o)| is_filter_origin(o))
        .map(|(r, _)| (r.start, r.end))
        .collect();
    let mut w = vec![0.0f64; n + 1];
    w[0] = 1.0;
    let mut charges: BTreeMap<Charge, f64> = BTreeMap::new();
    let mut first_region = true;
    let mut pc = 0;
    while pc < n {
        let here = w[pc];
        if here <= 0.0 {
            pc = d.next[pc];
            continue;
        }
        if let Some(&(start, end)) = regions.iter().find(|(s, _)| *s == pc) {
            // A filter term as a unit: every instruction of it runs (upper
            // bound), then the event goes on with the term's selectivity.
            let (mut count, mut k) = (0usize, start);
            while k < end {
                if is_call(&d.insns[k]) {
                    let (what, ns) = price_call(model, &d, &starts, k, maps);
                    *charges.entry(Charge::Call(what)).or_default() += here * ns;
                } else {
                    count += 1;
                }
                k = d.next[k];
            }
            *charges.entry(Charge::Insns).or_default() += here * count as f64;
            let pass = match through {
                Through::Matched => 1.0,
                Through::Rejected if first_region => 0.0,
                Through::Rejected => 1.0,
            };
            first_region = false;
            // The rejected share runs the exit block (`r0 = 0; exit`).
            *charges.entry(Charge::Insns).or_default() += here * (1.0 - pass) * 2.0;
            w[end.min(n)] += here * pass;
            pc = end;
            continue;
        }
        let i = &d.insns[pc];
        let next = d.next[pc];
        if is_call(i) {
            let (what, ns) = price_call(model, &d, &starts, pc, maps);
            *charges.entry(Charge::Call(what)).or_default() += here * ns;
            w[next] += here;
        } else {
            *charges.entry(Charge::Insns).or_default() += here;
            if is_exit(i) {
                // done
            } else if is_ja(i) || is_cond(i) {
                let target = (pc as i64 + 1 + i.off as i64) as usize;
                let p_taken = if is_ja(i) {
                    1.0
                } else if prog
                    .origin_of(pc)
                    .is_some_and(|o| o.starts_with(crate::codegen::DENSE_TEST_ORIGIN))
                {
                    // The dense range holds the usual values (crate::groupmap).
                    0.0
                } else {
                    match tests.get(&pc) {
                        Some(true) => 1.0,
                        Some(false) => 0.0,
                        None => match (counts_anomaly(&d, target), counts_anomaly(&d, next)) {
                            (true, false) => 0.0,
                            (false, true) => 1.0,
                            _ => 0.5,
                        },
                    }
                };
                // A backward jump only closes a retry loop on a failure
                // path (a new group's insert); the walk never follows it.
                if target > pc && target <= n {
                    w[target] += here * p_taken;
                }
                w[next] += here * (1.0 - p_taken);
            } else {
                w[next] += here;
            }
        }
        pc = next;
    }
    let insn_ns = model.insn_ns;
    charges
        .into_iter()
        .map(|(c, v)| match c {
            Charge::Insns => (Charge::Insns, v * insn_ns),
            other => (other, v),
        })
        .collect()
}

fn breakdown(charges: &[(Charge, f64)], model: &CostModel) -> Vec<CostItem> {
    charges
        .iter()
        .filter(|(_, ns)| *ns > 0.0)
        .map(|(c, ns)| CostItem {
            what: match c {
                Charge::Insns => format!(
                    "{:.0} instructions × {:.2} ns",
                    ns / model.insn_ns,
                    model.insn_ns
                ),
                Charge::Call(what) => what.clone(),
            },
            ns: *ns,
        })
        .collect()
}

/// What one generated program costs per event ([`ProgramCost`]).
pub fn profile_program(model: &CostModel, spec: &ProgramSpec, maps: &[MapSpec]) -> ProgramCost {
    let matched = walk(model, spec, maps, Through::Matched);
    let filtered = spec
        .program
        .origins
        .iter()
        .any(|(_, o)| is_filter_origin(o));
    let unmatched = if filtered {
        walk(model, spec, maps, Through::Rejected)
    } else {
        matched.clone()
    };
    let hook = Hook::of(spec.event.kind);
    ProgramCost {
        name: spec.name.clone(),
        event: spec.event.to_string(),
        hook,
        hook_ns: model.hook_ns(hook),
        unmatched_ns: unmatched.iter().map(|(_, v)| v).sum(),
        matched_ns: matched.iter().map(|(_, v)| v).sum(),
        matched_breakdown: breakdown(&matched, model),
        unmatched_breakdown: breakdown(&unmatched, model),
        filtered,
        syscall_tracepoint: is_syscall_tracepoint(spec),
    }
}

/// Whether events of this program are system calls seen through a tracefs
/// syscall tracepoint (enabling one puts every task's system calls on the
/// slow path: [`CostModel::untraced_syscall_ns`]).
pub fn is_syscall_tracepoint(spec: &ProgramSpec) -> bool {
    spec.event.kind == EventKind::Tracepoint && spec.event.category == "syscalls"
}

/// Predicts what `q` costs given its events' `rates`.
pub fn predict(model: &CostModel, q: &CompiledQuery, rates: &Rates) -> Prediction {
    let code = &q.code;
    let programs: Vec<ProgramCost> = code
        .programs
        .iter()
        .map(|p| profile_program(model, p, &code.maps))
        .collect();
    let main = programs.last().expect("a compiled query has a program");
    let last = programs.len() - 1;
    let fraction = |i: usize| rates.matched_fraction.get(i).copied().flatten();
    let rate = |i: usize| rates.events_per_s.get(i).copied().flatten();
    let main_fraction = if main.filtered {
        fraction(last).unwrap_or(1.0)
    } else {
        1.0
    };
    let ns_per_event_at_hook = main.hook_ns.map(|h| h + main.body_at(main_fraction));
    let ns_per_matched_event = programs
        .iter()
        .map(|p| p.hook_ns.map(|h| h + p.matched_ns))
        .sum::<Option<f64>>();
    let ns_per_unmatched_event = main.hook_ns.map(|h| h + main.unmatched_ns);

    // Kernel CPU and the share of it that falls on untraced work.
    let mut kernel = Some(0.0);
    let mut untraced = Some(0.0);
    for (i, p) in programs.iter().enumerate() {
        let (r, f) = (rate(i), if p.filtered { fraction(i) } else { Some(1.0) });
        let per_event = p.hook_ns.map(|h| h + p.body_at(f.unwrap_or(1.0)));
        kernel = match (kernel, r, per_event) {
            (Some(k), Some(r), _) if r == 0.0 => Some(k),
            (Some(k), Some(r), Some(e)) => Some(k + r * e),
            _ => None,
        };
        untraced = match (untraced, r, f, p.hook_ns) {
            // No event at this hook: nothing to reject.
            (Some(u), Some(r), _, _) if r == 0.0 => Some(u),
            (Some(u), Some(r), Some(f), Some(h)) => Some(u + r * (1.0 - f) * (h + p.unmatched_ns)),
            _ => None,
        };
    }
    // Syscall tracepoints: every other system call of the machine takes the slow path.
    if code.programs.iter().any(is_syscall_tracepoint) {
        untraced = match (untraced, rates.syscalls_per_s) {
            (Some(u), Some(all)) => {
                let traced: f64 = code
                    .programs
                    .iter()
                    .enumerate()
                    .filter(|(_, p)| is_syscall_tracepoint(p))
                    .filter_map(|(k, _)| rate(k))
                    .sum();
                // An enter and an exit program see the same calls.
                let distinct = if code.programs.len() > 1 {
                    traced / 2.0
                } else {
                    traced
                };
                Some(u + (all - distinct).max(0.0) * model.untraced_syscall_ns)
            }
            _ => None,
        };
    }

    let (user_cpu_per_s, user_breakdown) =
        user_cost(model, q, rates, rate(last).map(|r| r * main_fraction));
    Prediction {
        bpf_stats_ns_per_run: main.body_at(main_fraction) + model.stats_overhead_ns,
        programs,
        ns_per_event_at_hook,
        ns_per_matched_event,
        ns_per_unmatched_event,
        ns_on_untraced_work_per_s: untraced,
        kernel_cpu_per_s: kernel,
        user_cpu_per_s,
        user_fixed_ns: model.user_query_ns,
        user_breakdown,
    }
}

/// User-space CPU per second: rows for streams, windows × groups × CPUs for group tables.
fn user_cost(
    model: &CostModel,
    q: &CompiledQuery,
    rates: &Rates,
    matched_per_s: Option<f64>,
) -> (Option<f64>, Vec<CostItem>) {
    let idle = CostItem {
        what: "polling (10 ms period)".into(),
        ns: model.user_idle_ns_per_s,
    };
    let (rest, items) = user_work(model, q, rates, matched_per_s);
    (
        rest.map(|r| r + idle.ns),
        std::iter::once(idle).chain(items).collect(),
    )
}

/// User-space CPU per second that depends on the events.
fn user_work(
    model: &CostModel,
    q: &CompiledQuery,
    rates: &Rates,
    matched_per_s: Option<f64>,
) -> (Option<f64>, Vec<CostItem>) {
    let windows_per_s = match q.split.kernel.window {
        Some(WindowSpec::Time { step_ns, .. }) => Some(1e9 / step_ns.max(1) as f64),
        Some(WindowSpec::Count { step, .. }) => matched_per_s.map(|r| r / step.max(1) as f64),
        // Drained once, at the stop.
        None => Some(0.0),
    };
    let window_item = |w: f64| CostItem {
        what: format!(
            "{w:.1} windows/s × {:.0} µs per window",
            model.user_window_ns / 1e3
        ),
        ns: w * model.user_window_ns,
    };
    match &q.code.layout {
        OutputLayout::Stream { .. } => {
            // Rows DataFusion aggregates cost more than rows it passes on.
            let (row_ns, what) = if aggregates_in_user_space(q) {
                (model.user_agg_row_ns, "aggregated row")
            } else {
                (model.user_row_ns, "row")
            };
            let windowed = q.split.kernel.window.is_some();
            match (matched_per_s, windows_per_s) {
                (Some(r), Some(w)) => {
                    let mut items = vec![CostItem {
                        what: format!("{r:.0} rows/s × {row_ns:.0} ns per {what}"),
                        ns: r * row_ns,
                    }];
                    if windowed {
                        items.push(window_item(w));
                    }
                    (Some(items.iter().map(|i| i.ns).sum()), items)
                }
                _ => (
                    None,
                    vec![CostItem {
                        what: format!("per streamed {what} (rate unknown)"),
                        ns: row_ns,
                    }],
                ),
            }
        }
        OutputLayout::Groups { .. } => {
            let groups = rates.groups_per_window.unwrap_or(1.0);
            let cpus = rates.cpus.max(1) as f64;
            let per_window = model.user_window_ns + groups * cpus * model.user_merge_ns;
            match windows_per_s {
                Some(w) => (
                    Some(w * per_window),
                    vec![
                        window_item(w),
                        CostItem {
                            what: format!("{w:.1} windows/s × {groups:.0} group(s){} × {cpus:.0} CPUs × {:.0} ns per merged value", if rates.groups_per_window.is_some() { "" } else { " (assumed)" }, model.user_merge_ns),
                            ns: w * groups * cpus * model.user_merge_ns,
                        },
                    ],
                ),
                None => (None, vec![CostItem { what: "per window (count-window rate unknown)".into(), ns: per_window }]),
            }
        }
    }
}

/// Whether the user-space remainder of `q` aggregates.
fn aggregates_in_user_space(q: &CompiledQuery) -> bool {
    use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
    let mut found = false;
    let _ = q.split.remainder.apply(|n| {
        found |= matches!(n, datafusion::logical_expr::LogicalPlan::Aggregate(_));
        Ok(if found {
            TreeNodeRecursion::Stop
        } else {
            TreeNodeRecursion::Continue
        })
    });
    found
}

/// Where the query's aggregate runs, with the two predictions compared
/// ([`choose_placement`]).
#[derive(Clone, Debug)]
pub struct PlacementDecision {
    /// Where it runs.
    pub chosen: Placement,
    /// Why, for `explain`.
    pub why: String,
    /// The plan with the aggregate in the kernel (group table).
    pub kernel: Prediction,
    /// The plan with the aggregate in user space (rows streamed).
    pub user: Prediction,
}

impl PlacementDecision {
    /// Both plans as `explain`'s alternatives, the chosen one marked.
    pub fn alternatives(&self) -> Vec<Alternative> {
        [
            (
                Placement::Kernel,
                &self.kernel,
                "aggregate in the kernel (group table, drained per window)",
            ),
            (
                Placement::User,
                &self.user,
                "aggregate in user space (rows streamed through the ring buffer)",
            ),
        ]
        .into_iter()
        .map(|(p, pred, what)| Alternative {
            what: what.into(),
            chosen: p == self.chosen,
            prediction: pred.clone(),
            why: Some(format!("{} of CPU per second", per_s_text(total_cpu(pred)))),
        })
        .collect()
    }
}

/// Kernel + user-space CPU per second of a prediction, when both are known.
pub fn total_cpu(p: &Prediction) -> Option<f64> {
    Some(p.kernel_cpu_per_s? + p.user_cpu_per_s?)
}

fn per_s_text(ns: Option<f64>) -> String {
    match ns {
        Some(v) if v >= 1e6 => format!("{:.2} ms", v / 1e6),
        Some(v) => format!("{:.1} µs", v / 1e3),
        None => "unknown".into(),
    }
}

/// Chooses where an aggregate that both sides can run goes, from the
/// predictions of the two plans at the same sampled rates (`kernel` priced
/// with `groups_per_window`, the estimate of groups a window holds;
/// `matched_per_s`: events per second that pass the filters, `None` when
/// not sampled).
///
/// Rule: with no event seen while sampling, the kernel (nothing to weigh;
/// the kernel costs the least per event). When the estimated groups exceed
/// the group table's `max_groups`, user space: the kernel would drop groups,
/// user space aggregates every row exactly. [`Optimize::Traced`]: the lower
/// cost per matched event in the probe. Otherwise ([`Optimize::Total`],
/// [`Optimize::Host`]: the untraced share is the same for both plans, whose
/// filters and hooks are the same): user space when its kernel + user CPU
/// per second is below the kernel plan's (ties keep the kernel, whose group
/// table bounds what crosses to user space should the rate rise).
pub fn choose_placement(
    optimize: Optimize,
    kernel: Prediction,
    user: Prediction,
    matched_per_s: Option<f64>,
    groups_per_window: Option<f64>,
    max_groups: u32,
) -> PlacementDecision {
    let (chosen, why) = match (matched_per_s, groups_per_window) {
        (None, _) => (Placement::Kernel, "no event rate sampled: the kernel costs the least per event".to_string()),
        (Some(r), _) if r == 0.0 => (Placement::Kernel, "no event matched while sampling: the kernel costs the least per event".to_string()),
        (_, Some(g)) if g > f64::from(max_groups) => {
            (Placement::User, format!("≈{g:.0} groups per window would overflow the group table (--max-groups {max_groups}); user space aggregates every row exactly"))
        }
        _ if optimize == Optimize::Traced => match (kernel.ns_per_matched_event, user.ns_per_matched_event) {
            (Some(k), Some(u)) if u < k => (Placement::User, format!("--optimize traced: a ring-buffer record costs the traced event {u:.0} ns, the group-table update {k:.0} ns")),
            (Some(k), Some(u)) => (Placement::Kernel, format!("--optimize traced: the group-table update costs the traced event {k:.0} ns, a ring-buffer record {u:.0} ns")),
            _ => (Placement::Kernel, "--optimize traced: the hook's cost is unknown; the kernel".to_string()),
        },
        _ => {
            let groups = groups_per_window.map_or("1 group per window (assumed)".to_string(), |g| format!("≈{g:.0} group(s) per window"));
            match (total_cpu(&kernel), total_cpu(&user)) {
                (Some(k), Some(u)) if u < k => {
                    (Placement::User, format!("least CPU in all at the sampled rates, {groups}: user space {}/s, kernel {}/s", per_s_text(Some(u)), per_s_text(Some(k))))
                }
                (Some(k), Some(u)) => (Placement::Kernel, format!("least CPU in all at the sampled rates, {groups}: kernel {}/s, user space {}/s", per_s_text(Some(k)), per_s_text(Some(u)))),
                _ => (Placement::Kernel, "a cost is unknown (hook not measured, or count-window rate unknown): the kernel".to_string()),
            }
        }
    };
    PlacementDecision {
        chosen,
        why,
        kernel,
        user,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jump_conditions() {
        assert!(taken(JmpCond::Ne, 0x1000, 0, true));
        assert!(!taken(JmpCond::Eq, 0x1000, 0, true));
        assert!(!taken(JmpCond::Eq, 0, -17, true));
        assert!(taken(JmpCond::Sge, 0, 0, true));
        assert!(taken(JmpCond::Gt, -1, 5, true), "unsigned compare");
        assert!(!taken(JmpCond::Sgt, -1, 5, true));
    }

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
