//! BPF code generation for the kernel half of a plan ([`KernelPlan`]).
//!
//! One tracepoint program per query, or two for a pairing (a start program
//! that stores the start's columns under its key, then the end program, see
//! [`crate::pair`]). The output program's shape:
//!
//! 0. on the raw syscall hook, its guard: the syscall number, not a 32-bit
//!    call ([`crate::syscall_hook`]), before anything else;
//! 1. filters, cheapest first: pid/tid tests before any other helper call
//!    (paper 004: untraced processes pay for every instruction before it);
//!    right after the pid/tid tests the program counts the event as *seen*,
//!    after the last filter as *matched* ([`counters`]); for a pairing, the
//!    lookup (and removal) of the start comes after the thread filters;
//! 2. either one per-CPU hash lookup per event into a map whose value holds
//!    the group's count and every aggregate state (rows cannot be misaligned;
//!    each state's update comes from its [`crate::agg`] module), or an array
//!    lookup by slot when the keys are bounded ([`crate::groupmap`]), or one
//!    ring-buffer reservation per event holding the projected columns.
//!
//! Window switching: the probe reads the current generation from the control
//! map (a direct map-value load, no helper) and puts it in the group key;
//! user space flips it, waits for in-flight probes, then drains the closed
//! generation. Count windows use a sequence number instead.
//!
//! Pure: map file descriptors are placeholders (the index into
//! [`Compiled::maps`]) that the runtime patches after creating the maps.

use crate::agg::{Slot, State, UpdateCx};
use crate::groupmap::GroupMap;
use crate::kexpr::{ArithOp, CmpOp, IntType, KExpr, KPred, StrSrc};
use crate::pair::PairPlan;
use crate::prepass::WindowSpec;
use crate::split::{GroupSpec, KernelOutput, KernelPlan, ValueSrc};
use crate::syscall_hook::RawHook;
use crate::CompileError;
use ebql_bpf::{helper, AluOp, Assembler, JmpCond, Label, Program, Reg, Size, Src, StackAlloc};
use ebql_catalog::SystemAttr;
use std::collections::HashMap;

pub use crate::contract::{
    counters, ctl, task_start, MapKind, MapSpec, OutputLayout, Stored, MAP_CTL, MAP_OUT, MAP_PAIR,
    MAP_PAIR_LIVE, MAP_TAP, STACK_DEPTH,
};

/// Tunables of the generated code.
#[derive(Clone, Copy, Debug)]
pub struct CodegenOptions {
    /// Groups per window the group table can hold (two windows coexist while draining).
    pub max_groups: u32,
    /// Ring buffer size in bytes (power of two, multiple of the page size).
    pub ringbuf_bytes: u32,
    /// Size in bytes of the differential oracle's tap ring buffer (power of
    /// two): it carries every event at the hook, so it is larger.
    pub tap_ringbuf_bytes: u32,
    /// Unmatched starts the hash start map of a pairing holds (starts in flight at once).
    pub max_pending: u32,
    /// (group, value) pairs per window the COUNT(DISTINCT) set can hold (two windows coexist while draining).
    pub max_distinct: u32,
    /// The kernel offers task-local storage (BPF_MAP_TYPE_TASK_STORAGE and
    /// `bpf_get_current_task_btf`): a pairing keyed by the thread alone keeps
    /// its start there instead of in a hash. The executor sets it from the
    /// runtime's feature probe (`ebql_runtime::task_storage_supported`).
    pub task_storage: bool,
    /// The planner's alternatives and the numbers its rules read ([`crate::choose`]).
    pub choices: crate::choose::PlanChoices,
}

impl Default for CodegenOptions {
    fn default() -> Self {
        // 8 MiB holds ~350k 16-byte records: > 100 ms of a 3 M events/s stream
        // between two 10 ms drains, and creates in ~3 ms.
        CodegenOptions {
            max_groups: 10240,
            ringbuf_bytes: 8 << 20,
            tap_ringbuf_bytes: 64 << 20,
            max_pending: 10240,
            max_distinct: 256 << 10,
            task_storage: true,
            choices: crate::choose::PlanChoices::new(),
        }
    }
}

/// One BPF program of a query and where it attaches.
#[derive(Debug)]
pub struct ProgramSpec {
    /// The instructions; map references hold indexes into [`Compiled::maps`], not fds.
    pub program: Program,
    /// Program name as `bpftool prog show` prints it (`ebql_` prefix, ≤ 15 chars).
    pub name: String,
    /// The event it attaches to (its kind gives the program type).
    pub event: ebql_catalog::EventName,
    /// Where it attaches, as the catalog resolved it.
    pub attach: ebql_catalog::Attach,
    /// The only process whose events pass the program's filters (a
    /// top-level `pid = n`, [`crate::kexpr::pinned_pid`]); the runtime
    /// attaches uprobes and USDT probes to that process only.
    pub pid: Option<u32>,
    /// Bytes of BPF stack used.
    pub stack_bytes: usize,
    /// Indexes into [`Compiled::maps`] of the maps the program references.
    pub maps: Vec<usize>,
}

/// The generated programs and everything the runtime needs to run them.
#[derive(Debug)]
pub struct Compiled {
    /// The query's programs; the last one writes the output ([`Compiled::main`]).
    /// A paired query has two: the start event's, then the end event's.
    pub programs: Vec<ProgramSpec>,
    /// Maps to create, in placeholder-index order ([`MAP_CTL`], [`MAP_OUT`], then [`MAP_TAP`] or [`MAP_PAIR`]).
    pub maps: Vec<MapSpec>,
    /// Where user space finds each value in what the probe writes.
    pub layout: OutputLayout,
    /// Layout of the tap's ring-buffer records ([`MAP_TAP`]) when compiled with a tap.
    pub tap: Option<OutputLayout>,
    /// The group table chosen for an in-kernel aggregate ([`crate::groupmap`]), and why.
    pub group_map: Option<GroupMap>,
    /// Index in [`Compiled::maps`] of the programs' own event counters
    /// ([`counters`]: per-CPU `[seen, matched]`, keyed by program index).
    pub counters: usize,
}

impl Compiled {
    /// The program that writes the output (the end event's, for a pairing).
    pub fn main(&self) -> &ProgramSpec {
        self.programs
            .last()
            .expect("a compiled query has a program")
    }
}

/// Indexes of the maps `program` loads (its `ld_imm64` map placeholders), sorted.
fn maps_of(program: &Program) -> Vec<usize> {
    let mut out: Vec<usize> = program
        .insns
        .iter()
        .filter(|i| i.code == 0x18 && (i.src == 1 || i.src == 2))
        .map(|i| i.imm as usize)
        .collect();
    out.sort_unstable();
    out.dedup();
    out
}

/// Memory the preallocated hash start map may take: its entries are
/// `--max-pending` or fewer when the value holds long strings (a start the
/// full map cannot take is counted, `pair_start_map_full`).
pub const START_MAP_BUDGET_BYTES: u32 = 32 << 20;

/// Where a pairing keeps its unmatched starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum StartStore {
    /// A preallocated hash keyed by the join key ([`MAP_PAIR`], [`MapKind::Hash`]).
    Hash,
    /// The thread's task-local storage ([`MAP_PAIR`], [`MapKind::TaskStorage`])
    /// with a `valid` word, and the per-CPU count of valid starts ([`MAP_PAIR_LIVE`]).
    Task,
}

impl StartStore {
    fn of(pair: &PairPlan, opts: &CodegenOptions) -> StartStore {
        if opts.task_storage && pair.keyed_by_thread_only() {
            StartStore::Task
        } else {
            StartStore::Hash
        }
    }

    /// Maps this store adds at [`MAP_PAIR`] (and [`MAP_PAIR_LIVE`]).
    fn maps(self, pair: &PairPlan, opts: &CodegenOptions) -> Vec<MapSpec> {
        match self {
            StartStore::Hash => {
                // Preallocated: long stored strings would take max_pending × value; cap the memory.
                let entries = opts
                    .max_pending
                    .min((START_MAP_BUDGET_BYTES / (pair.key_size() + pair.value_size())).max(1));
                vec![MapSpec {
                    name: "ebql_starts".into(),
                    kind: MapKind::Hash,
                    key_size: pair.key_size(),
                    value_size: pair.value_size(),
                    max_entries: entries,
                }]
            }
            StartStore::Task => vec![
                MapSpec {
                    name: "ebql_starts".into(),
                    kind: MapKind::TaskStorage,
                    key_size: 4,
                    value_size: pair.task_value_size(),
                    max_entries: 0,
                },
                MapSpec {
                    name: "ebql_live".into(),
                    kind: MapKind::PercpuArray,
                    key_size: 4,
                    value_size: 8,
                    max_entries: 1,
                },
            ],
        }
    }
}

/// Where a materialized helper result lives.
#[derive(Clone, Copy, Debug)]
enum Loc {
    Reg(Reg),
    Stack(i16),
}

/// Helper results cached per event (each helper is called at most once).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Cached {
    PidTgid,
    UidGid,
    Cpu,
    Time,
    Cgroup,
    /// 16-byte comm buffer on the stack.
    Comm,
    /// The time-window generation read from the control map (read once per
    /// event, so everything the event writes carries the same one).
    Gen,
    /// A stack column's value ([`ebql_catalog::Access::StackId`]): user
    /// (true) or kernel stack, see [`Gen::materialize_stacks`].
    Stack(bool),
    /// The parsed packet's stack area ([`crate::packet`]).
    Packet,
}

/// Placeholder map index of the event counters ([`counters`]) while a
/// program is emitted: the map is appended last and this placeholder is
/// patched to its index ([`add_counters_map`]). Distinct from
/// [`STACK_MAP_PENDING`] and [`SCRATCH_MAP_PENDING`]: each is patched on its own.
const COUNTERS_MAP_PENDING: i32 = i32::MAX - 2;

/// Appends the event counters map ([`counters`], one entry per program) to
/// `maps`, patches [`COUNTERS_MAP_PENDING`] into its index and returns it.
fn add_counters_map(programs: &mut [ProgramSpec], maps: &mut Vec<MapSpec>) -> usize {
    maps.push(MapSpec {
        name: counters::MAP_NAME.into(),
        kind: MapKind::PercpuArray,
        key_size: 4,
        value_size: counters::SIZE,
        max_entries: programs.len() as u32,
    });
    let index = maps.len() - 1;
    for p in programs {
        for i in p
            .program
            .insns
            .iter_mut()
            .filter(|i| i.code == 0x18 && i.src == 1 && i.imm == COUNTERS_MAP_PENDING)
        {
            i.imm = index as i32;
        }
        p.maps = maps_of(&p.program);
    }
    index
}

/// Placeholder map index of the stack-trace map while a program is emitted:
/// the map is appended after every other map once the program is complete,
/// and this placeholder is patched to its index ([`add_stack_map`]).
const STACK_MAP_PENDING: i32 = i32::MAX;

/// Placeholder map index of a pairing's per-CPU scratch values while its
/// programs are emitted: the map is appended after every other map and
/// this placeholder patched to its index ([`add_scratch_map`]).
const SCRATCH_MAP_PENDING: i32 = i32::MAX - 1;

/// The scratch values of a pairing with stored strings, one start value
/// each (per CPU, [`MapKind::PercpuArray`]): too large for the 512-byte
/// stack. A CPU runs one tracing program at a time, and each use has its own entry.
mod scratch {
    /// The start program builds the value it inserts into the hash here.
    pub const START: i32 = 0;
    /// The end program copies the stored strings here before deleting the hash entry.
    pub const END: i32 = 1;
    /// A `LEFT JOIN`'s start program copies the start it replaces here before deleting it.
    pub const OLD: i32 = 2;
    /// Entries.
    pub const ENTRIES: u32 = 3;
}

/// When a program uses the scratch values ([`SCRATCH_MAP_PENDING`]):
/// appends the map (`value_size` bytes per entry) and patches the placeholder.
fn add_scratch_map(programs: &mut [ProgramSpec], maps: &mut Vec<MapSpec>, value_size: u32) {
    let pending = |i: &ebql_bpf::Insn| i.code == 0x18 && i.src == 1 && i.imm == SCRATCH_MAP_PENDING;
    if !programs.iter().any(|p| p.program.insns.iter().any(pending)) {
        return;
    }
    maps.push(MapSpec {
        name: "ebql_scratch".into(),
        kind: MapKind::PercpuArray,
        key_size: 4,
        value_size,
        max_entries: scratch::ENTRIES,
    });
    let index = (maps.len() - 1) as i32;
    for p in programs {
        for i in p.program.insns.iter_mut().filter(|i| pending(i)) {
            i.imm = index;
        }
        p.maps = maps_of(&p.program);
    }
}

/// `bpf_get_stackid` flag: the user-space stack (`BPF_F_USER_STACK`, bit 8).
const BPF_F_USER_STACK: i32 = 1 << 8;

/// Entries of the stack-trace map (each `STACK_DEPTH` u64 frames,
/// preallocated: 8 MiB). A sample whose stack hashes to a bucket holding
/// another stack gets `-EEXIST`, shown as such (no stack is overwritten).
pub const STACK_MAP_ENTRIES: u32 = 8192;

/// Stack columns (user: true) the expression reads.
fn stack_reads(e: &KExpr, out: &mut Vec<bool>) {
    match e {
        KExpr::Field {
            access: ebql_catalog::Access::StackId { user },
            ..
        } => out.push(*user),
        KExpr::Neg(x, _)
        | KExpr::BitNot(x, _)
        | KExpr::Cast(x, _)
        | KExpr::Load { addr: x, .. } => stack_reads(x, out),
        KExpr::Arith(_, l, r, _) => {
            stack_reads(l, out);
            stack_reads(r, out)
        }
        KExpr::Field { .. } | KExpr::Attr(..) | KExpr::Const(..) | KExpr::Stored { .. } => {}
    }
}

/// Stack columns the values read.
fn stack_reads_of<'a>(values: impl IntoIterator<Item = &'a ValueSrc>) -> Vec<bool> {
    let mut out = Vec::new();
    for v in values {
        if let ValueSrc::Int(e) = v {
            stack_reads(e, &mut out);
        }
    }
    out
}

/// When a program reads a stack column: appends the stack-trace map
/// ([`MapKind::StackTrace`]) to `maps` and patches [`STACK_MAP_PENDING`]
/// into its index.
fn add_stack_map(programs: &mut [ProgramSpec], maps: &mut Vec<MapSpec>) {
    let pending = |i: &ebql_bpf::Insn| i.code == 0x18 && i.src == 1 && i.imm == STACK_MAP_PENDING;
    if !programs.iter().any(|p| p.program.insns.iter().any(pending)) {
        return;
    }
    maps.push(MapSpec {
        name: "ebql_stacks".into(),
        kind: MapKind::StackTrace,
        key_size: 4,
        value_size: 8 * STACK_DEPTH,
        max_entries: STACK_MAP_ENTRIES,
    });
    let index = (maps.len() - 1) as i32;
    for p in programs {
        for i in p.program.insns.iter_mut().filter(|i| pending(i)) {
            i.imm = index;
        }
        p.maps = maps_of(&p.program);
    }
}

fn cached_for(a: SystemAttr) -> Cached {
    match a {
        SystemAttr::Pid | SystemAttr::Tid => Cached::PidTgid,
        SystemAttr::Uid | SystemAttr::Gid => Cached::UidGid,
        SystemAttr::Cpu => Cached::Cpu,
        SystemAttr::Time => Cached::Time,
        SystemAttr::Cgroup => Cached::Cgroup,
        SystemAttr::Comm => Cached::Comm,
    }
}

/// Origin of the test that sends a dense-range key's value outside its
/// range to the overflow hash ([`crate::groupmap`]): the cost model reads
/// the jump as rarely taken.
pub const DENSE_TEST_ORIGIN: &str = "GroupBy: dense range test, else the overflow hash:";

/// Registers usable while evaluating expressions (no helper calls happen
/// during evaluation: helper results are materialized beforehand).
const EVAL_REGS: [Reg; 6] = [Reg::R1, Reg::R2, Reg::R3, Reg::R4, Reg::R5, Reg::R0];
/// r6 holds the context; r9 the map value / ring-buffer record across calls.
const CTX: Reg = Reg::R6;
const PTR: Reg = Reg::R9;

/// Where the COUNT(DISTINCT) set is and where its key is built.
#[derive(Clone, Copy)]
struct DistinctSet {
    /// Map placeholder of the set.
    map: i32,
    /// Map placeholder of the all-zero value (the set's value is never read).
    zero_map: i32,
    /// Stack offset of the group key; the value goes right after it.
    key_off: i16,
    /// Bytes of the group key.
    key_size: u32,
}

/// Whether a stream is the oracle's tap (and where the plan's code continues) or the plan's output.
#[derive(Clone, Copy)]
enum Tap {
    No,
    Yes(Label),
}

struct Gen {
    window: Option<WindowSpec>,
    asm: Assembler,
    stack: StackAlloc,
    cache: HashMap<Cached, Loc>,
    /// Callee-saved registers still free for caching helper results.
    free_saved: Vec<Reg>,
    /// Maps that go right after [`MAP_OUT`] once the program is emitted (the
    /// oracle's tap [`MAP_TAP`] or a pairing's start map [`MAP_PAIR`]): maps
    /// the plan adds while emitting are numbered after them.
    reserved: usize,
    exit: Label,
    /// Pairing's end program: stack offset of the copy of the start map value
    /// ([`KExpr::Stored`] loads from it).
    stored_at: Option<i16>,
    /// Stack slot holding the pointer to this CPU's event counters (set by
    /// [`Gen::count_seen`], read by [`Gen::count_matched`]).
    counters_at: Option<i16>,
    /// This program's entry in the event counters: its index in [`Compiled::programs`].
    counters_key: i32,
    /// Pairing's end program with stored strings: the stack slot holding a
    /// pointer to the start value's layout ([`PairPlan::str_offset`]; the
    /// thread's task-storage slot, or this CPU's scratch copy of the hash
    /// value) and each stored string's offset from it ([`StrSrc::Stored`]).
    stored_strs_at: Option<(i16, Vec<u32>)>,
    /// A `LEFT JOIN` pairing (its start side): the streamed rows carry the
    /// matched word ([`crate::contract::Outer`]).
    outer: Option<PairPlan>,
}

fn stack_err(e: ebql_bpf::StackError) -> CompileError {
    CompileError::Internal(format!("BPF stack: {e}"))
}

/// Generates the program for a kernel plan.
pub fn compile(plan: &KernelPlan, opts: &CodegenOptions) -> Result<Compiled, CompileError> {
    compile_tapped(plan, None, opts)
}

/// Columns the differential oracle's tap streams: (name, value, Arrow type).
pub type TapColumns<'a> = &'a [(String, ValueSrc, datafusion::arrow::datatypes::DataType)];

/// Generates the program for a kernel plan; with `tap`, the program first
/// streams these columns of every event (before any filter) into a second
/// ring buffer ([`MAP_TAP`]), tagged with the same window generation the
/// plan's own output uses, so a reference evaluation sees exactly the same
/// events in exactly the same windows. The plan's code is unchanged after the tap.
pub fn compile_tapped(
    plan: &KernelPlan,
    tap: Option<TapColumns>,
    opts: &CodegenOptions,
) -> Result<Compiled, CompileError> {
    // The tap or the start map(s) go right after MAP_OUT (a paired query has no tap).
    let store = plan.pair.as_ref().map(|p| (p, StartStore::of(p, opts)));
    let reserved = tap.is_some() as usize + store.map_or(0, |(p, s)| s.maps(p, opts).len());
    let mut g = Gen::new(vec![Reg::R8, Reg::R7], plan.window, reserved);
    g.outer = outer_of(plan);
    g.asm.origin("prologue");
    g.asm.comment("r6 = ctx (tracepoint record)");
    g.asm.mov64(CTX, Src::Reg(Reg::R1));
    let hook = plan.hook_of(&plan.event.event);
    g.emit_hook_guard(hook)?;
    // The output program is the last one: after a pairing's start program.
    g.counters_key = store.is_some() as i32;
    let mut maps = vec![MapSpec {
        name: "ebql_ctl".into(),
        kind: MapKind::MmapArray,
        key_size: 4,
        value_size: ctl::SIZE,
        max_entries: 1,
    }];
    if let Some((pair, store)) = store {
        if tap.is_some() {
            return Err(CompileError::Query(
                crate::Diagnostic::new("`ebql check` does not compare joins yet", None)
                    .with_hint("run the query with `ebql run`"),
            ));
        }
        g.emit_pair_end(pair, store, end_reads_time(plan))?;
    }
    if crate::packet::plan_reads(plan, tap.iter().flat_map(|c| c.iter().map(|(_, v, _)| v))) {
        g.asm
            .origin("packet columns: parse the headers and the payload prefix");
        g.materialize_packet()?;
    }
    let tap_layout = match tap {
        Some(columns) => {
            g.materialize_stacks(&stack_reads_of(columns.iter().map(|(_, v, _)| v)))?;
            // The plan's output map keeps index MAP_OUT: reserve it, then put the tap after it.
            let mut tap_maps = Vec::new();
            let main = g.asm.new_label();
            let layout =
                g.emit_stream(columns, plan.window, &mut tap_maps, opts, Tap::Yes(main))?;
            g.asm.bind(main);
            Some((layout, tap_maps.pop().expect("tap ring buffer")))
        }
        None => None,
    };

    let group_map = match &plan.output {
        KernelOutput::Groups(spec) => Some(crate::groupmap::choose(plan, spec, &opts.choices)?),
        KernelOutput::Stream { .. } => None,
    };
    let filters: Vec<(KPred, &str)> = plan
        .filters
        .iter()
        .map(|(p, t)| (simplify(p.clone()), t.as_str()))
        .collect();
    let never = filters.iter().any(|(p, _)| *p == KPred::Const(false));
    let layout;
    if never {
        // WHERE is always false: the probe only counts what it sees (the event rate).
        g.count_seen()?;
        g.asm.origin("Filter: always false");
        layout = placeholder_layout(plan, &mut maps, opts, reserved, group_map.as_ref());
    } else {
        g.emit_filters(&filters)?;
        let stacks = match &plan.output {
            KernelOutput::Groups(spec) => {
                let mut v = stack_reads_of(spec.keys.iter().map(|k| &k.value));
                spec.slots.iter().for_each(|s| stack_reads(&s.expr, &mut v));
                v
            }
            KernelOutput::Stream { columns } => stack_reads_of(columns.iter().map(|(_, v, _)| v)),
        };
        if !stacks.is_empty() {
            g.asm.origin("stack ids");
            g.materialize_stacks(&stacks)?;
        }
        layout = match (&plan.output, &group_map) {
            (KernelOutput::Groups(spec), Some(gm)) => {
                g.emit_groups(spec, plan.window, &mut maps, opts, gm)?
            }
            (KernelOutput::Groups(_), None) => {
                return Err(CompileError::Internal(
                    "an aggregate without its group table".into(),
                ))
            }
            (KernelOutput::Stream { columns }, _) => {
                g.emit_stream(columns, plan.window, &mut maps, opts, Tap::No)?
            }
        };
    }
    let tap = tap_layout.map(|(layout, mut spec)| {
        spec.name = "ebql_tap".into();
        spec.max_entries = opts.tap_ringbuf_bytes;
        maps.insert(MAP_TAP, spec);
        layout
    });
    let mut programs = Vec::new();
    if let Some((pair, store)) = store {
        for (i, spec) in store.maps(pair, opts).into_iter().enumerate() {
            maps.insert(MAP_PAIR + i, spec);
        }
        let unmatched =
            matches!(&layout, OutputLayout::Stream { outer: Some(_), .. }).then_some(&layout);
        programs.push(compile_start(
            pair,
            store,
            plan.window,
            unmatched,
            plan.hook_of(&pair.start.event),
        )?);
    }
    programs.push(g.finish(&plan.event, hook)?);
    add_stack_map(&mut programs, &mut maps);
    if let Some((pair, _)) = store {
        add_scratch_map(&mut programs, &mut maps, pair.value_size());
    }
    let counters = add_counters_map(&mut programs, &mut maps);
    // Attach scopes: each program's own filters (a pairing's end program
    // also runs the pid/tid tests placed before its lookup).
    let end_pre = plan
        .pair
        .as_ref()
        .map(|p| p.end_pre.as_slice())
        .unwrap_or_default();
    if let Some(main) = programs.last_mut() {
        main.pid = crate::kexpr::pinned_pid(plan.filters.iter().chain(end_pre).map(|(p, _)| p));
    }
    if let (Some(pair), [start, _]) = (&plan.pair, programs.as_mut_slice()) {
        start.pid = crate::kexpr::pinned_pid(pair.start_filters.iter().map(|(p, _)| p));
    }
    Ok(Compiled {
        programs,
        maps,
        layout,
        tap,
        group_map,
        counters,
    })
}

/// The start program of a pairing: the start event's filters, then one
/// insert of the stored columns under the key (see [`crate::pair`]), or
/// one store into the thread's task-local storage.
///
/// A `LEFT JOIN` pairing (`unmatched`: the layout of the end program's
/// streamed rows) emits the start it replaces as an unmatched start's
/// row ([`Gen::emit_unmatched`]); the start map is then always the hash.
fn compile_start(
    pair: &PairPlan,
    store: StartStore,
    window: Option<WindowSpec>,
    unmatched: Option<&OutputLayout>,
    hook: Option<&RawHook>,
) -> Result<ProgramSpec, CompileError> {
    let mut g = Gen::new(vec![Reg::R8, Reg::R7], window, 0);
    let exit = g.exit;
    g.asm.origin("prologue");
    g.asm.comment("r6 = ctx (tracepoint record)");
    g.asm.mov64(CTX, Src::Reg(Reg::R1));
    g.emit_hook_guard(hook)?;
    let filters: Vec<(KPred, &str)> = pair
        .start_filters
        .iter()
        .map(|(p, t)| (simplify(p.clone()), t.as_str()))
        .collect();
    if filters.iter().any(|(p, _)| *p == KPred::Const(false)) {
        g.count_seen()?;
        g.asm.origin("Filter: always false");
        return g.finish(&pair.start, hook);
    }
    g.emit_filters(&filters)?;
    if store == StartStore::Task {
        g.emit_task_start(pair)?;
        return g.finish(&pair.start, hook);
    }
    let mut str_attrs = Vec::new();
    pair.stored_strs
        .iter()
        .for_each(|(s, _)| s.attrs(&mut str_attrs));
    g.materialize(&str_attrs)?;
    let key_off = g.emit_pair_key(
        "Pair start",
        pair,
        &pair.start_key,
        pair.stored.iter().map(|(e, _)| e),
    )?;
    // The value: on the stack, or (with strings, too large for it) in this CPU's scratch value.
    let (val_base, val_off) = if pair.stored_strs.is_empty() {
        (
            Reg::R10,
            g.stack
                .alloc(pair.value_size() as usize, 8)
                .map_err(stack_err)?,
        )
    } else {
        g.asm.origin("Pair start: this CPU's scratch value (the value is built there: strings do not fit the stack)");
        g.scratch_value(scratch::START, exit)?;
        g.asm.mov64(PTR, Src::Reg(Reg::R0));
        (PTR, 0)
    };
    if pair.stored.is_empty() && pair.stored_strs.is_empty() {
        g.asm.origin("Pair start: nothing to store");
        g.asm.st_imm(Size::DW, Reg::R10, val_off, 0);
    }
    for (i, (e, name)) in pair.stored.iter().enumerate() {
        g.asm.origin(format!("Pair start: store {name}"));
        g.eval(e, &EVAL_REGS)?;
        g.asm
            .stx(Size::DW, val_base, val_off + 8 * i as i16, EVAL_REGS[0]);
    }
    g.store_start_strs(pair, val_base, val_off)?;
    let update = |g: &mut Gen, flags: u64| {
        g.asm.ld_map_fd(Reg::R1, MAP_PAIR as i32);
        g.asm.mov64(Reg::R2, Src::Reg(Reg::R10));
        g.asm.alu64(AluOp::Add, Reg::R2, Src::Imm(key_off as i32));
        g.asm.mov64(Reg::R3, Src::Reg(val_base));
        if val_off != 0 {
            g.asm.alu64(AluOp::Add, Reg::R3, Src::Imm(val_off as i32));
        }
        g.asm.mov64(Reg::R4, Src::Imm(flags as i32));
        g.asm.call(helper::MAP_UPDATE_ELEM);
    };
    g.asm.origin("Pair start: insert into the start map");
    update(&mut g, helper::BPF_NOEXIST);
    g.asm.jmp(JmpCond::Eq, Reg::R0, Src::Imm(0), exit);
    let full = g.asm.new_label();
    g.asm
        .comment("-EEXIST: an unmatched start of this key is there");
    g.asm.jmp(JmpCond::Ne, Reg::R0, Src::Imm(-17), full);
    match unmatched {
        None => {
            g.asm
                .origin("Pair start: replace the unmatched start (counted), the latest start wins");
            g.count_total(ctl::PAIR_OVERWRITTEN);
        }
        Some(layout) => {
            // Take the old start the way an end does (copy, then delete: only
            // the program whose delete succeeds owns it), and emit its row.
            let insert = g.asm.new_label();
            let (old, value) = (
                g.stack.alloc(8, 8).map_err(stack_err)?,
                g.stack.alloc(8, 8).map_err(stack_err)?,
            );
            g.asm
                .origin("Pair start (LEFT JOIN): take the unmatched start this one replaces");
            if val_base != Reg::R10 {
                g.asm.stx(Size::DW, Reg::R10, value, val_base);
            }
            g.asm.ld_map_fd(Reg::R1, MAP_PAIR as i32);
            g.asm.mov64(Reg::R2, Src::Reg(Reg::R10));
            g.asm.alu64(AluOp::Add, Reg::R2, Src::Imm(key_off as i32));
            g.asm.call(helper::MAP_LOOKUP_ELEM);
            g.asm.comment("gone: an end took it meanwhile");
            g.asm.jmp(JmpCond::Eq, Reg::R0, Src::Imm(0), insert);
            g.asm.stx(Size::DW, Reg::R10, old, Reg::R0);
            g.scratch_value(scratch::OLD, insert)?;
            g.asm.ldx(Size::DW, Reg::R3, Reg::R10, old);
            g.asm.stx(Size::DW, Reg::R10, old, Reg::R0);
            g.asm.mov64(Reg::R1, Src::Reg(Reg::R0));
            g.asm.mov64(Reg::R2, Src::Imm(pair.value_size() as i32));
            g.asm.call(helper::PROBE_READ_KERNEL);
            g.asm.ld_map_fd(Reg::R1, MAP_PAIR as i32);
            g.asm.mov64(Reg::R2, Src::Reg(Reg::R10));
            g.asm.alu64(AluOp::Add, Reg::R2, Src::Imm(key_off as i32));
            g.asm.call(helper::MAP_DELETE_ELEM);
            g.asm.comment("an end deleted it first: that end owns it");
            g.asm.jmp(JmpCond::Ne, Reg::R0, Src::Imm(0), insert);
            g.asm.origin(
                "Pair start (LEFT JOIN): the replaced start is unmatched (counted), emit its row",
            );
            g.count_total(ctl::PAIR_OVERWRITTEN);
            g.emit_unmatched(layout, old, insert)?;
            g.asm.bind(insert);
            g.asm.origin("Pair start (LEFT JOIN): insert this start");
            if val_base != Reg::R10 {
                g.asm.ldx(Size::DW, val_base, Reg::R10, value);
            }
        }
    }
    update(&mut g, helper::BPF_ANY);
    g.asm.jmp(JmpCond::Eq, Reg::R0, Src::Imm(0), exit);
    g.asm.bind(full);
    g.asm.origin("Pair start: start map full, count it");
    g.count_total(ctl::PAIR_START_FULL);
    g.finish(&pair.start, hook)
}

/// Whether the end program of a pairing reads its own event's `time` (in a
/// filter, a key, an aggregate or a streamed column; the start's time is a
/// stored column, not an attribute).
fn end_reads_time(plan: &KernelPlan) -> bool {
    let mut attrs = Vec::new();
    plan.filters.iter().for_each(|(p, _)| p.attrs(&mut attrs));
    let value = |v: &ValueSrc, attrs: &mut Vec<SystemAttr>| match v {
        ValueSrc::Int(e) => e.attrs(attrs),
        ValueSrc::Str(s) | ValueSrc::Truncated(s) => s.attrs(attrs),
    };
    match &plan.output {
        KernelOutput::Groups(spec) => {
            spec.keys.iter().for_each(|k| value(&k.value, &mut attrs));
            for s in &spec.slots {
                s.expr.attrs(&mut attrs);
                if let Some(p) = &s.when {
                    p.attrs(&mut attrs);
                }
            }
        }
        KernelOutput::Stream { columns } => {
            columns.iter().for_each(|(_, v, _)| value(v, &mut attrs))
        }
    }
    attrs.contains(&SystemAttr::Time)
}

fn placeholder_layout(
    plan: &KernelPlan,
    maps: &mut Vec<MapSpec>,
    opts: &CodegenOptions,
    reserved: usize,
    group_map: Option<&GroupMap>,
) -> OutputLayout {
    // Same maps and layout as the real program so user space needs no special case.
    let mut g = Gen::new(vec![], plan.window, reserved);
    g.outer = outer_of(plan);
    let r = match (&plan.output, group_map) {
        (KernelOutput::Groups(spec), Some(gm)) => g.emit_groups(spec, plan.window, maps, opts, gm),
        (KernelOutput::Groups(_), None) => Err(CompileError::Internal(
            "an aggregate without its group table".into(),
        )),
        (KernelOutput::Stream { columns }, _) => {
            g.emit_stream(columns, plan.window, maps, opts, Tap::No)
        }
    };
    r.expect("layout of a plan that compiled")
}

/// `ebql_` + the event name, syscall prefixes shortened, cut to the kernel's 15 characters.
fn prog_name(event: &str) -> String {
    let short = event
        .replacen("sys_enter_", "se_", 1)
        .replacen("sys_exit_", "sx_", 1);
    let clean: String = short
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .take(10)
        .collect();
    format!("ebql_{clean}")
}

/// Folds constant sub-predicates so no dead code is emitted.
pub fn simplify(p: KPred) -> KPred {
    match p {
        KPred::And(v) => {
            let mut out = Vec::new();
            for q in v.into_iter().map(simplify) {
                match q {
                    KPred::Const(true) => {}
                    KPred::Const(false) => return KPred::Const(false),
                    other => out.push(other),
                }
            }
            match out.len() {
                0 => KPred::Const(true),
                1 => out.pop().unwrap(),
                _ => KPred::And(out),
            }
        }
        KPred::Or(v) => {
            let mut out = Vec::new();
            for q in v.into_iter().map(simplify) {
                match q {
                    KPred::Const(false) => {}
                    KPred::Const(true) => return KPred::Const(true),
                    other => out.push(other),
                }
            }
            match out.len() {
                0 => KPred::Const(false),
                1 => out.pop().unwrap(),
                _ => KPred::Or(out),
            }
        }
        KPred::Not(q) => match simplify(*q) {
            KPred::Const(b) => KPred::Const(!b),
            other => KPred::Not(Box::new(other)),
        },
        KPred::In { list, negated, .. } if list.is_empty() => KPred::Const(negated),
        // Longer than the string can be: never equal, never a prefix.
        KPred::StrEq {
            src, lit, negated, ..
        } if lit.len() as u32 > src.max_chars() => KPred::Const(negated),
        // Every string starts with the empty string.
        KPred::StrEq {
            lit,
            negated,
            prefix: true,
            ..
        } if lit.is_empty() => KPred::Const(!negated),
        other => other,
    }
}

/// The start side of a `LEFT JOIN` pairing whose rows are streamed.
fn outer_of(plan: &KernelPlan) -> Option<PairPlan> {
    match (&plan.pair, &plan.output) {
        (Some(p), KernelOutput::Stream { .. }) if p.outer => Some(p.clone()),
        _ => None,
    }
}

/// True when a streamed value is the start event's (stored): an unmatched
/// start's row has it, its other columns are NULL.
fn start_only(v: &ValueSrc) -> bool {
    matches!(
        v,
        ValueSrc::Int(KExpr::Stored { .. })
            | ValueSrc::Str(StrSrc::Stored { .. })
            | ValueSrc::Truncated(StrSrc::Stored { .. })
    )
}

/// The unmatched starts' rows of a `LEFT JOIN` pairing's stream: the
/// matched word at `matched_at`, the end columns, and where each start
/// column the row writes comes from in the start value.
fn outer_layout(
    columns: TapColumns,
    cols: &[(u32, Stored)],
    written: &[bool],
    matched_at: u32,
    pair: &PairPlan,
) -> crate::contract::Outer {
    let mut end_columns = Vec::new();
    let mut from_start = Vec::new();
    for (i, ((_, v, _), (at, _))) in columns.iter().zip(cols).enumerate() {
        match v {
            ValueSrc::Int(KExpr::Stored { index, .. }) => {
                from_start.push((*at, 8 * *index as u32, 8))
            }
            ValueSrc::Str(StrSrc::Stored { index, of, .. })
            | ValueSrc::Truncated(StrSrc::Stored { index, of, .. })
                if written[i] =>
            {
                from_start.push((*at, pair.str_offset(*index), of.record_bytes()))
            }
            v if !start_only(v) => end_columns.push(i),
            _ => {}
        }
    }
    crate::contract::Outer {
        matched_at,
        end_columns,
        from_start,
        value_size: pair.value_size(),
    }
}

/// How a stored start string (read by the start program as `of`) is copied
/// by the end program: (bytes, helper). A string a `_str` helper read is
/// copied up to its NUL, into a record with its truncation byte
/// ([`StrSrc::record_bytes`]), into a group key within its buffer (cut as
/// `str(p, n)` is); a fixed-size one, stored with zeroes after its NUL, as is.
fn stored_copy(of: &StrSrc, record: bool) -> (u32, i32) {
    match of.helper_buffer() {
        Some(n) => (
            if record { n + 1 } else { n },
            helper::PROBE_READ_KERNEL_STR,
        ),
        None => (of.len(), helper::PROBE_READ_KERNEL),
    }
}

/// Where each streamed column lies in a ring-buffer record: (offset,
/// storage) per column, whether the column writes its bytes (a
/// `truncated()` flag shares the bytes of a column holding the same
/// string, or of an earlier flag of it), and the bytes used. Integers take
/// 8 bytes, strings [`StrSrc::record_bytes`] rounded up to 8; the record
/// starts with the u64 generation when `gen_in_record`.
fn stream_layout(columns: TapColumns, gen_in_record: bool) -> (Vec<(u32, Stored)>, Vec<bool>, u32) {
    let mut size = if gen_in_record { 8u32 } else { 0 };
    let mut at: HashMap<&StrSrc, u32> = HashMap::new();
    let mut cols = vec![(0, Stored::Str(0)); columns.len()];
    let mut written = vec![true; columns.len()];
    // Strings and integers first, so that a flag finds its string's offset.
    let order = (0..columns.len())
        .filter(|&i| !matches!(columns[i].1, ValueSrc::Truncated(_)))
        .chain((0..columns.len()).filter(|&i| matches!(columns[i].1, ValueSrc::Truncated(_))));
    for i in order.collect::<Vec<_>>() {
        let (stored, src) = match &columns[i].1 {
            ValueSrc::Int(e) => (
                Stored::Int {
                    ty: e.ty(),
                    bytes: 8,
                },
                None,
            ),
            ValueSrc::Str(s) => (
                s.helper_buffer()
                    .map_or(Stored::Str(s.len()), Stored::ReadStr),
                Some(s),
            ),
            ValueSrc::Truncated(s) => (
                Stored::Truncated(s.helper_buffer().unwrap_or(s.len())),
                Some(s),
            ),
        };
        if let (Stored::Truncated(_), Some(&off)) = (stored, src.and_then(|s| at.get(s))) {
            cols[i] = (off, stored);
            written[i] = false;
            continue;
        }
        if let (Some(s), false) = (src, matches!(stored, Stored::Str(_))) {
            at.insert(s, size);
        }
        cols[i] = (size, stored);
        size += src.map_or(8, |s| s.record_bytes().div_ceil(8) * 8);
    }
    (cols, written, size)
}

/// Slot indexes grouped by argument, in first-use order, so each distinct
/// argument is evaluated once per event (conditional counts have none).
fn slots_by_argument(slots: &[Slot]) -> Vec<(&KExpr, Vec<usize>)> {
    let mut groups: Vec<(&KExpr, Vec<usize>)> = Vec::new();
    for (i, s) in slots
        .iter()
        .enumerate()
        .filter(|(_, s)| s.when.is_none() && s.state.needs_arg())
    {
        match groups.iter_mut().find(|(e, _)| **e == s.expr) {
            Some((_, v)) => v.push(i),
            None => groups.push((&s.expr, vec![i])),
        }
    }
    groups
}

fn jmp_cond(op: CmpOp, signed: bool) -> JmpCond {
    match (op, signed) {
        (CmpOp::Eq, _) => JmpCond::Eq,
        (CmpOp::Ne, _) => JmpCond::Ne,
        (CmpOp::Lt, false) => JmpCond::Lt,
        (CmpOp::Le, false) => JmpCond::Le,
        (CmpOp::Gt, false) => JmpCond::Gt,
        (CmpOp::Ge, false) => JmpCond::Ge,
        (CmpOp::Lt, true) => JmpCond::Slt,
        (CmpOp::Le, true) => JmpCond::Sle,
        (CmpOp::Gt, true) => JmpCond::Sgt,
        (CmpOp::Ge, true) => JmpCond::Sge,
    }
}

fn imm32(v: u64) -> Option<i32> {
    i32::try_from(v as i64).ok()
}

/// What every program returns: at the TC hook TCX_NEXT (= TC_ACT_UNSPEC),
/// the packet goes on to the next program or the default action,
/// untouched; elsewhere 0.
fn exit_value(kind: ebql_catalog::EventKind) -> i32 {
    if kind == ebql_catalog::EventKind::Tc {
        -1
    } else {
        0
    }
}

/// A program for an event of `kind` that returns at once, as the query's
/// programs do after their work: what `ebql query --attach-only` loads in
/// their place to measure the hooks alone.
pub fn return_at_once(kind: ebql_catalog::EventKind) -> Program {
    let mut asm = Assembler::new();
    asm.mov64(Reg::R0, Src::Imm(exit_value(kind)));
    asm.exit();
    asm.finish().expect("two instructions, no labels")
}

impl Gen {
    /// A syscall tracepoint on the raw syscall hook: its guard, first
    /// ([`crate::syscall_hook::emit_guard`]).
    fn emit_hook_guard(&mut self, hook: Option<&RawHook>) -> Result<(), CompileError> {
        let Some(h) = hook else { return Ok(()) };
        self.asm.origin(format!(
            "Hook: {} runs for every system call: only __NR_{} ({}) goes on",
            h.program_event, h.name, h.nr
        ));
        self.eval(&h.id, &EVAL_REGS)?;
        crate::syscall_hook::emit_guard(&mut self.asm, &mut self.stack, EVAL_REGS[0], h, self.exit)
    }

    /// Binds the exit, assembles, and describes the program for `event`
    /// (attached to the raw syscall hook when `hook` says so).
    fn finish(
        mut self,
        event: &ebql_catalog::EventSchema,
        hook: Option<&RawHook>,
    ) -> Result<ProgramSpec, CompileError> {
        self.asm.bind(self.exit);
        self.asm.origin("exit");
        self.asm
            .mov64(Reg::R0, Src::Imm(exit_value(event.event.kind)));
        self.asm.exit();
        let stack_bytes = self.stack.used();
        let program = self
            .asm
            .finish()
            .map_err(|e| CompileError::Internal(format!("code generation: {e}")))?;
        let maps = maps_of(&program);
        let (loaded_as, attach) = match hook {
            Some(h) => (h.program_event.clone(), h.attach.clone()),
            None => (event.event.clone(), event.attach.clone()),
        };
        Ok(ProgramSpec {
            program,
            name: prog_name(&event.event.short_name()),
            event: loaded_as,
            attach,
            pid: None,
            stack_bytes,
            maps,
        })
    }

    /// Emits a program's kernel filters (cheapest first) and its event
    /// counts: *seen* right after the leading pid/tid tests (so the threads
    /// the query does not select pay nothing for it), *matched* after the
    /// last filter.
    fn emit_filters(&mut self, filters: &[(KPred, &str)]) -> Result<(), CompileError> {
        let exit = self.exit;
        let filters: Vec<&(KPred, &str)> = filters
            .iter()
            .filter(|(p, _)| *p != KPred::Const(true))
            .collect();
        let scope = filters
            .iter()
            .take_while(|(p, _)| p.cost_class() == 0)
            .count();
        for (i, (p, text)) in filters.iter().enumerate() {
            if i == scope {
                self.count_seen()?;
            }
            self.asm.origin(format!("Filter: {text}"));
            let mut attrs = Vec::new();
            p.attrs(&mut attrs);
            self.materialize(&attrs)?;
            self.jump_if(p, false, exit)?;
        }
        self.count_seen()?;
        self.count_matched()
    }

    /// Adds one to this CPU's *seen* counter of the program
    /// ([`counters::SEEN`], entry [`Gen::counters_key`]) and keeps the
    /// pointer to its counters in a stack slot for [`Gen::count_matched`];
    /// does nothing the second time. The lookup with a constant key is
    /// inlined by the verifier (no helper call remains). Clobbers r0–r5.
    fn count_seen(&mut self) -> Result<(), CompileError> {
        if self.counters_at.is_some() {
            return Ok(());
        }
        self.asm
            .origin("event counters: seen (an event of the query's threads at the hook)");
        // One slot holds the key for the lookup, then the pointer it returns.
        let slot = self.stack.alloc(8, 8).map_err(stack_err)?;
        self.asm.st_imm(Size::W, Reg::R10, slot, self.counters_key);
        self.asm.ld_map_fd(Reg::R1, COUNTERS_MAP_PENDING);
        self.asm.mov64(Reg::R2, Src::Reg(Reg::R10));
        self.asm.alu64(AluOp::Add, Reg::R2, Src::Imm(slot as i32));
        self.asm.call(helper::MAP_LOOKUP_ELEM);
        self.asm.comment(
            "an index below the array's size: never NULL, but the verifier wants the test",
        );
        self.asm.jmp(JmpCond::Eq, Reg::R0, Src::Imm(0), self.exit);
        self.asm.ldx(Size::DW, Reg::R1, Reg::R0, counters::SEEN);
        self.asm.alu64(AluOp::Add, Reg::R1, Src::Imm(1));
        self.asm.stx(Size::DW, Reg::R0, counters::SEEN, Reg::R1);
        self.asm.stx(Size::DW, Reg::R10, slot, Reg::R0);
        self.counters_at = Some(slot);
        Ok(())
    }

    /// Right after a program's kernel filters: adds one to this CPU's
    /// *matched* counter ([`counters::MATCHED`]) through the pointer
    /// [`Gen::count_seen`] kept. Clobbers r1, r2.
    fn count_matched(&mut self) -> Result<(), CompileError> {
        let slot = self
            .counters_at
            .ok_or_else(|| CompileError::Internal("matched counted before seen".into()))?;
        self.asm
            .origin("event counters: matched (passed the filters)");
        self.asm.ldx(Size::DW, Reg::R1, Reg::R10, slot);
        self.asm.ldx(Size::DW, Reg::R2, Reg::R1, counters::MATCHED);
        self.asm.alu64(AluOp::Add, Reg::R2, Src::Imm(1));
        self.asm.stx(Size::DW, Reg::R1, counters::MATCHED, Reg::R2);
        Ok(())
    }

    /// Adds one to the control map's u64 at `slot` (a counter over the whole run).
    fn count_total(&mut self, slot: u32) {
        self.asm.ld_map_value(Reg::R1, MAP_CTL as i32, 0);
        self.asm.mov64(Reg::R2, Src::Imm(1));
        self.asm.atomic_add(Size::DW, Reg::R1, slot as i16, Reg::R2);
    }

    /// Start program, task storage: the thread's slot (created on its first
    /// start), the overwrite or per-CPU live count, then `valid = 1` and the
    /// stored columns. Helper results the columns read are materialized
    /// first, so the slot pointer (in [`PTR`]) survives until the stores.
    fn emit_task_start(&mut self, pair: &PairPlan) -> Result<(), CompileError> {
        let exit = self.exit;
        let mut attrs = Vec::new();
        pair.stored.iter().for_each(|(e, _)| e.attrs(&mut attrs));
        pair.stored_strs
            .iter()
            .for_each(|(s, _)| s.attrs(&mut attrs));
        self.asm.origin("Pair start: system attributes");
        self.materialize(&attrs)?;
        self.asm.origin("Pair start: the thread's start slot (task storage, created on the thread's first start)");
        self.task_slot(helper::BPF_LOCAL_STORAGE_GET_F_CREATE);
        let got = self.asm.new_label();
        self.asm.jmp(JmpCond::Ne, Reg::R0, Src::Imm(0), got);
        // The kernel allocates a slot without sleeping (from a per-CPU cache
        // that it refills asynchronously): measured on Linux 6.18, a thread's
        // first start got NULL in about one query of five, and a second
        // attempt succeeded in every one of 20 runs. Both failing is counted.
        self.asm
            .origin("Pair start: no slot yet (the allocation cache was empty), try once more");
        self.task_slot(helper::BPF_LOCAL_STORAGE_GET_F_CREATE);
        self.asm.jmp(JmpCond::Ne, Reg::R0, Src::Imm(0), got);
        self.asm
            .origin("Pair start: no slot (allocation failed twice), count the start as not stored");
        self.count_total(ctl::PAIR_START_FULL);
        self.asm.ja(exit);
        self.asm.bind(got);
        self.asm
            .origin("Pair start: replace the unmatched start (counted), the latest start wins");
        self.asm.mov64(PTR, Src::Reg(Reg::R0));
        self.asm.ldx(Size::DW, Reg::R1, PTR, task_start::VALID);
        let (fresh, write) = (self.asm.new_label(), self.asm.new_label());
        self.asm.jmp(JmpCond::Eq, Reg::R1, Src::Imm(0), fresh);
        self.count_total(ctl::PAIR_OVERWRITTEN);
        self.asm.ja(write);
        self.asm.bind(fresh);
        self.asm.origin(
            "Pair start: one more unmatched start (per-CPU count: the starts left at stop)",
        );
        self.add_live(1, write)?;
        self.asm.bind(write);
        self.asm.origin("Pair start: valid = 1");
        self.asm.st_imm(Size::DW, PTR, task_start::VALID, 1);
        for (i, (e, name)) in pair.stored.iter().enumerate() {
            self.asm.origin(format!("Pair start: store {name}"));
            self.eval(e, &EVAL_REGS)?;
            self.asm.stx(
                Size::DW,
                PTR,
                task_start::COLUMNS + 8 * i as i16,
                EVAL_REGS[0],
            );
        }
        self.store_start_strs(pair, PTR, task_start::COLUMNS)
    }

    /// Start program: reads each stored string into the value at `base + off`
    /// ([`PairPlan::str_offset`]). A string a `_str` helper reads gets its
    /// [`StrSrc::record_bytes`] (the truncation byte included); a fixed-size
    /// one is copied with every byte after its NUL zeroed, so the end program
    /// can copy it as is into a group key. Clobbers r0–r5.
    fn store_start_strs(
        &mut self,
        pair: &PairPlan,
        base: Reg,
        off: i16,
    ) -> Result<(), CompileError> {
        for (i, (src, name)) in pair.stored_strs.iter().enumerate() {
            self.asm.origin(format!("Pair start: store {name}"));
            let at = off + pair.str_offset(i) as i16;
            match src.helper_buffer() {
                Some(_) => self.read_str(src, base, at, src.record_bytes(), false)?,
                None => self.store_str(src, base, at, false)?,
            }
        }
        Ok(())
    }

    /// `LEFT JOIN` start program: the row of the unmatched start whose value
    /// was copied to the scratch value the stack slot `old` points to: its
    /// start columns copied from it, `matched = 0` (end columns NULL), in
    /// this event's window; then continues at `done`. A full ring buffer is
    /// a counted drop. Clobbers r0–r5 and `PTR`.
    fn emit_unmatched(
        &mut self,
        layout: &OutputLayout,
        old: i16,
        done: Label,
    ) -> Result<(), CompileError> {
        let OutputLayout::Stream {
            record_size,
            gen_in_record,
            outer: Some(outer),
            ..
        } = layout
        else {
            return Err(CompileError::Internal(
                "unmatched rows of a layout without them".into(),
            ));
        };
        self.materialize_gen()?;
        self.asm.ld_map_fd(Reg::R1, MAP_OUT as i32);
        self.asm.mov64(Reg::R2, Src::Imm(*record_size as i32));
        self.asm.mov64(Reg::R3, Src::Imm(0));
        self.asm.call(helper::RINGBUF_RESERVE);
        let have = self.asm.new_label();
        self.asm.jmp(JmpCond::Ne, Reg::R0, Src::Imm(0), have);
        self.asm
            .origin("Pair start (LEFT JOIN): ring buffer full, count the drop");
        self.count_drop(ctl::DROP_RINGBUF_FULL, done)?;
        self.asm.bind(have);
        self.asm
            .origin("Pair start (LEFT JOIN): the unmatched start's row");
        self.asm.mov64(PTR, Src::Reg(Reg::R0));
        if *gen_in_record {
            self.load_cached(Cached::Gen, Reg::R1)?;
            self.asm.stx(Size::DW, PTR, 0, Reg::R1);
        }
        for &(at, from, bytes) in &outer.from_start {
            self.asm.mov64(Reg::R1, Src::Reg(PTR));
            self.asm.alu64(AluOp::Add, Reg::R1, Src::Imm(at as i32));
            self.asm.mov64(Reg::R2, Src::Imm(bytes as i32));
            self.asm.ldx(Size::DW, Reg::R3, Reg::R10, old);
            self.asm.alu64(AluOp::Add, Reg::R3, Src::Imm(from as i32));
            self.asm.call(helper::PROBE_READ_KERNEL);
        }
        self.asm.st_imm(Size::DW, PTR, outer.matched_at as i16, 0);
        self.asm.mov64(Reg::R1, Src::Reg(PTR));
        self.asm
            .mov64(Reg::R2, Src::Imm(helper::BPF_RB_NO_WAKEUP as i32));
        self.asm.call(helper::RINGBUF_SUBMIT);
        self.asm.ja(done);
        Ok(())
    }

    /// r0 = this CPU's scratch value `index` ([`scratch`]); jumps to `none`
    /// when the lookup fails (never: the index is in range, but the verifier
    /// wants the test). Clobbers r0–r5.
    fn scratch_value(&mut self, index: i32, none: Label) -> Result<(), CompileError> {
        let key = self.stack.alloc(4, 4).map_err(stack_err)?;
        self.asm.st_imm(Size::W, Reg::R10, key, index);
        self.asm.ld_map_fd(Reg::R1, SCRATCH_MAP_PENDING);
        self.asm.mov64(Reg::R2, Src::Reg(Reg::R10));
        self.asm.alu64(AluOp::Add, Reg::R2, Src::Imm(key as i32));
        self.asm.call(helper::MAP_LOOKUP_ELEM);
        self.asm.jmp(JmpCond::Eq, Reg::R0, Src::Imm(0), none);
        Ok(())
    }

    /// End program: keeps the pointer in r0 to the start value's layout (the
    /// task-storage slot's columns, or the scratch copy) in a stack slot for
    /// the stored strings ([`Gen::stored_strs_at`]).
    fn keep_stored_strs(&mut self, pair: &PairPlan) -> Result<(), CompileError> {
        let slot = self.stack.alloc(8, 8).map_err(stack_err)?;
        self.asm.stx(Size::DW, Reg::R10, slot, Reg::R0);
        self.stored_strs_at = Some((
            slot,
            (0..pair.stored_strs.len())
                .map(|i| pair.str_offset(i))
                .collect(),
        ));
        Ok(())
    }

    /// r0 = the current thread's value in the task-storage start map (or NULL).
    fn task_slot(&mut self, flags: u64) {
        self.asm.call(helper::GET_CURRENT_TASK_BTF);
        self.asm.mov64(Reg::R2, Src::Reg(Reg::R0));
        self.asm.ld_map_fd(Reg::R1, MAP_PAIR as i32);
        self.asm.mov64(Reg::R3, Src::Imm(0));
        self.asm.mov64(Reg::R4, Src::Imm(flags as i32));
        self.asm.call(helper::TASK_STORAGE_GET);
    }

    /// Adds `delta` to this CPU's count of unmatched starts ([`MAP_PAIR_LIVE`]),
    /// then continues at `done`. No atomics: a CPU runs one tracing BPF
    /// program at a time (the kernel's per-CPU `bpf_prog_active` guard),
    /// and user space reads the count only after detaching. Clobbers r0–r5.
    fn add_live(&mut self, delta: i32, done: Label) -> Result<(), CompileError> {
        let key = self.stack.alloc(4, 4).map_err(stack_err)?;
        self.asm.st_imm(Size::W, Reg::R10, key, 0);
        self.asm.ld_map_fd(Reg::R1, MAP_PAIR_LIVE as i32);
        self.asm.mov64(Reg::R2, Src::Reg(Reg::R10));
        self.asm.alu64(AluOp::Add, Reg::R2, Src::Imm(key as i32));
        self.asm.call(helper::MAP_LOOKUP_ELEM);
        self.asm
            .comment("index 0 of a one-entry array: never NULL, but the verifier wants the test");
        self.asm.jmp(JmpCond::Eq, Reg::R0, Src::Imm(0), done);
        self.asm.ldx(Size::DW, Reg::R1, Reg::R0, 0);
        self.asm.alu64(AluOp::Add, Reg::R1, Src::Imm(delta));
        self.asm.stx(Size::DW, Reg::R0, 0, Reg::R1);
        Ok(())
    }

    /// End program, task storage: the thread's slot; no slot or `valid == 0`
    /// is an end without a start (counted, exits); else the stored columns
    /// are copied to the stack, `valid` cleared and the live count decremented.
    fn emit_task_end(&mut self, pair: &PairPlan, copy_off: i16) -> Result<(), CompileError> {
        let exit = self.exit;
        self.asm
            .origin("Pair end: the thread's start slot (task storage)");
        self.task_slot(0);
        let (found, no_start) = (self.asm.new_label(), self.asm.new_label());
        self.asm.jmp(JmpCond::Eq, Reg::R0, Src::Imm(0), no_start);
        self.asm.ldx(Size::DW, Reg::R1, Reg::R0, task_start::VALID);
        self.asm.jmp(JmpCond::Ne, Reg::R1, Src::Imm(0), found);
        self.asm.bind(no_start);
        self.asm
            .origin("Pair end: no unmatched start on this thread, count it");
        self.count_total(ctl::PAIR_NO_START);
        self.asm.ja(exit);
        self.asm.bind(found);
        self.asm
            .origin("Pair end: copy the stored start columns, valid = 0");
        for i in 0..pair.stored.len() as i16 {
            self.asm
                .ldx(Size::DW, Reg::R1, Reg::R0, task_start::COLUMNS + 8 * i);
            self.asm.stx(Size::DW, Reg::R10, copy_off + 8 * i, Reg::R1);
        }
        self.asm.st_imm(Size::DW, Reg::R0, task_start::VALID, 0);
        if !pair.stored_strs.is_empty() {
            // Read in place: only this thread's next start rewrites the slot,
            // and it cannot run before this program ends.
            self.asm
                .origin("Pair end: the stored strings stay in the slot; keep a pointer to them");
            self.asm
                .alu64(AluOp::Add, Reg::R0, Src::Imm(task_start::COLUMNS as i32));
            self.keep_stored_strs(pair)?;
        }
        self.asm
            .origin("Pair end: one unmatched start fewer (per-CPU count)");
        let paired = self.asm.new_label();
        self.add_live(-1, paired)?;
        self.asm.bind(paired);
        Ok(())
    }

    /// Builds a pairing's hash key on the stack (one u64 per key expression,
    /// after materializing the attributes they and `also` read) and returns
    /// its offset; `side` names the program in the origins.
    fn emit_pair_key<'e>(
        &mut self,
        side: &str,
        pair: &PairPlan,
        keys: &'e [KExpr],
        also: impl Iterator<Item = &'e KExpr>,
    ) -> Result<i16, CompileError> {
        let mut attrs = Vec::new();
        keys.iter().chain(also).for_each(|e| e.attrs(&mut attrs));
        self.asm.origin(format!("{side}: system attributes"));
        self.materialize(&attrs)?;
        let key_off = self
            .stack
            .alloc(pair.key_size() as usize, 8)
            .map_err(stack_err)?;
        for (i, (k, text)) in keys.iter().zip(&pair.key_text).enumerate() {
            self.asm.origin(format!("{side}: key {text}"));
            self.eval(k, &EVAL_REGS)?;
            self.asm
                .stx(Size::DW, Reg::R10, key_off + 8 * i as i16, EVAL_REGS[0]);
        }
        Ok(key_off)
    }

    /// The start of a pairing's end program: thread filters, the key, the
    /// lookup of the start, a copy of its stored columns on the stack (for
    /// [`KExpr::Stored`]) and the deletion of the entry (task storage: the
    /// thread's slot, see [`Gen::emit_task_end`]). An end without a start,
    /// or whose start a concurrent end deleted first, is counted and exits.
    /// `reads_time`: the end program reads the end's `time`; it is read
    /// right after the thread filters, before the lookup, so a latency
    /// `x.time - e.time` does not include the pairing's own work.
    fn emit_pair_end(
        &mut self,
        pair: &PairPlan,
        store: StartStore,
        reads_time: bool,
    ) -> Result<(), CompileError> {
        let exit = self.exit;
        for (p, text) in &pair.end_pre {
            let p = simplify(p.clone());
            if p == KPred::Const(true) {
                continue;
            }
            self.asm.origin(format!("Pair end: thread filter {text}"));
            let mut attrs = Vec::new();
            p.attrs(&mut attrs);
            self.materialize(&attrs)?;
            self.jump_if(&p, false, exit)?;
        }
        if reads_time {
            self.asm
                .origin("Pair end: the end's time, before the lookup");
            self.materialize(&[SystemAttr::Time])?;
        }
        // Every end of the query's threads, before the lookup (an end
        // without a start is seen, not matched); after the end's time, so a
        // latency does not include the count.
        self.count_seen()?;
        if store == StartStore::Task {
            let copy_off = self
                .stack
                .alloc(8 * pair.stored.len().max(1), 8)
                .map_err(stack_err)?;
            self.emit_task_end(pair, copy_off)?;
            self.stored_at = Some(copy_off);
            return Ok(());
        }
        let key_off = self.emit_pair_key("Pair end", pair, &pair.end_key, std::iter::empty())?;
        let copy_off = self
            .stack
            .alloc(8 * pair.stored.len().max(1), 8)
            .map_err(stack_err)?;
        let key_ptr = |g: &mut Gen| {
            g.asm.ld_map_fd(Reg::R1, MAP_PAIR as i32);
            g.asm.mov64(Reg::R2, Src::Reg(Reg::R10));
            g.asm.alu64(AluOp::Add, Reg::R2, Src::Imm(key_off as i32));
        };
        self.asm
            .origin("Pair end: look up the latest unmatched start");
        key_ptr(self);
        self.asm.call(helper::MAP_LOOKUP_ELEM);
        let found = self.asm.new_label();
        self.asm.jmp(JmpCond::Ne, Reg::R0, Src::Imm(0), found);
        let no_start = self.asm.new_label();
        self.asm.bind(no_start);
        self.asm.origin("Pair end: no start for this key, count it");
        self.count_total(ctl::PAIR_NO_START);
        self.asm.ja(exit);
        self.asm.bind(found);
        self.asm
            .origin("Pair end: copy the stored start columns, delete the start");
        for i in 0..pair.stored.len() as i16 {
            self.asm.ldx(Size::DW, Reg::R1, Reg::R0, 8 * i);
            self.asm.stx(Size::DW, Reg::R10, copy_off + 8 * i, Reg::R1);
        }
        if !pair.stored_strs.is_empty() {
            // Once deleted, the entry's memory may be reused by another CPU's insert.
            self.asm.origin(
                "Pair end: copy the stored strings to this CPU's scratch value before the delete",
            );
            let value = self.stack.alloc(8, 8).map_err(stack_err)?;
            self.asm.stx(Size::DW, Reg::R10, value, Reg::R0);
            self.scratch_value(scratch::END, no_start)?;
            self.keep_stored_strs(pair)?;
            for (i, (src, _)) in pair.stored_strs.iter().enumerate() {
                let at = pair.str_offset(i) as i32;
                self.asm.mov64(Reg::R1, Src::Reg(Reg::R0));
                self.asm.alu64(AluOp::Add, Reg::R1, Src::Imm(at));
                self.asm.ldx(Size::DW, Reg::R3, Reg::R10, value);
                self.asm.alu64(AluOp::Add, Reg::R3, Src::Imm(at));
                let (size, copy) = stored_copy(src, true);
                self.asm.mov64(Reg::R2, Src::Imm(size as i32));
                self.asm.call(copy);
                self.asm.ldx(
                    Size::DW,
                    Reg::R0,
                    Reg::R10,
                    self.stored_strs_at.as_ref().expect("kept").0,
                );
            }
        }
        key_ptr(self);
        self.asm.call(helper::MAP_DELETE_ELEM);
        self.asm
            .comment("a concurrent end of the same key deleted it first: that end owns the pair");
        self.asm.jmp(JmpCond::Ne, Reg::R0, Src::Imm(0), no_start);
        self.stored_at = Some(copy_off);
        Ok(())
    }

    fn new(free_saved: Vec<Reg>, window: Option<WindowSpec>, reserved: usize) -> Gen {
        let mut asm = Assembler::new();
        let exit = asm.new_label();
        Gen {
            window,
            asm,
            stack: StackAlloc::new(),
            cache: HashMap::new(),
            free_saved,
            exit,
            reserved,
            stored_at: None,
            stored_strs_at: None,
            outer: None,
            counters_at: None,
            counters_key: 0,
        }
    }

    /// Keeps r0 for the rest of the program: in a free callee-saved register
    /// (helper calls preserve it), else in a stack slot.
    fn keep_r0(&mut self) -> Result<Loc, CompileError> {
        Ok(match self.free_saved.pop() {
            Some(r) => {
                self.asm.mov64(r, Src::Reg(Reg::R0));
                Loc::Reg(r)
            }
            None => {
                let off = self.stack.alloc(8, 8).map_err(stack_err)?;
                self.asm.stx(Size::DW, Reg::R10, off, Reg::R0);
                Loc::Stack(off)
            }
        })
    }

    /// Reads the window generation once per event (time windows only).
    fn materialize_gen(&mut self) -> Result<(), CompileError> {
        if self.cache.contains_key(&Cached::Gen)
            || !matches!(self.window, Some(WindowSpec::Time { .. }))
        {
            return Ok(());
        }
        self.asm
            .comment("gen = ctl.gen (read once: everything this event writes carries it)");
        self.asm.ld_map_value(Reg::R1, MAP_CTL as i32, 0);
        self.asm.ldx(Size::DW, Reg::R0, Reg::R1, ctl::GEN as i16);
        let loc = self.keep_r0()?;
        self.cache.insert(Cached::Gen, loc);
        Ok(())
    }

    /// Calls the helpers behind `attrs` that have not been called yet and keeps their results.
    fn materialize(&mut self, attrs: &[SystemAttr]) -> Result<(), CompileError> {
        for &a in attrs {
            let c = cached_for(a);
            if self.cache.contains_key(&c) {
                continue;
            }
            if c == Cached::Comm {
                let off = self.stack.alloc(16, 8).map_err(stack_err)?;
                self.asm.comment("comm = bpf_get_current_comm()");
                self.asm.mov64(Reg::R1, Src::Reg(Reg::R10));
                self.asm.alu64(AluOp::Add, Reg::R1, Src::Imm(off as i32));
                self.asm.mov64(Reg::R2, Src::Imm(16));
                self.asm.call(helper::GET_CURRENT_COMM);
                self.cache.insert(c, Loc::Stack(off));
                continue;
            }
            let (id, what) = match c {
                Cached::PidTgid => (helper::GET_CURRENT_PID_TGID, "pid_tgid"),
                Cached::UidGid => (helper::GET_CURRENT_UID_GID, "uid_gid"),
                Cached::Cpu => (helper::GET_SMP_PROCESSOR_ID, "cpu"),
                Cached::Time => (helper::KTIME_GET_NS, "time"),
                Cached::Cgroup => (helper::GET_CURRENT_CGROUP_ID, "cgroup"),
                Cached::Comm | Cached::Gen | Cached::Stack(_) | Cached::Packet => {
                    unreachable!("not a system attribute")
                }
            };
            self.asm.comment(format!(
                "{what} = {}()",
                ebql_bpf::helper::helper_name(id).unwrap_or("helper")
            ));
            self.asm.call(id);
            let loc = self.keep_r0()?;
            self.cache.insert(c, loc);
        }
        Ok(())
    }

    /// Calls `bpf_get_stackid` for each stack column read (user: true) not
    /// read yet and keeps its value: the id as a u32 (a negative errno such
    /// as -EFAULT or -EEXIST stays visible as its two's complement), for the
    /// user stack with the process id in the upper 32 bits (user-space
    /// symbolization needs the process; ids are per address sequence).
    fn materialize_stacks(&mut self, stacks: &[bool]) -> Result<(), CompileError> {
        for &user in stacks {
            if self.cache.contains_key(&Cached::Stack(user)) {
                continue;
            }
            if user {
                self.materialize(&[SystemAttr::Pid])?;
            }
            self.asm.comment(format!(
                "{} = bpf_get_stackid(ctx, stacks, {})",
                if user { "ustack" } else { "kstack" },
                if user { "BPF_F_USER_STACK" } else { "0" }
            ));
            self.asm.mov64(Reg::R1, Src::Reg(CTX));
            self.asm.ld_map_fd(Reg::R2, STACK_MAP_PENDING);
            self.asm
                .mov64(Reg::R3, Src::Imm(if user { BPF_F_USER_STACK } else { 0 }));
            self.asm.call(helper::GET_STACKID);
            self.asm.alu32(AluOp::Mov, Reg::R0, Src::Reg(Reg::R0));
            if user {
                self.load_cached(Cached::PidTgid, Reg::R1)?;
                self.asm.alu64(AluOp::Rsh, Reg::R1, Src::Imm(32));
                self.asm.alu64(AluOp::Lsh, Reg::R1, Src::Imm(32));
                self.asm.alu64(AluOp::Or, Reg::R0, Src::Reg(Reg::R1));
            }
            let loc = self.keep_r0()?;
            self.cache.insert(Cached::Stack(user), loc);
        }
        Ok(())
    }

    /// Parses the packet into its stack area once (at the TC hook, when the
    /// query reads a parsed packet column).
    fn materialize_packet(&mut self) -> Result<(), CompileError> {
        if self.cache.contains_key(&Cached::Packet) {
            return Ok(());
        }
        let base = self
            .stack
            .alloc(crate::packet::AREA_BYTES, 8)
            .map_err(stack_err)?;
        crate::packet::emit_parse(&mut self.asm, CTX, base);
        self.cache.insert(Cached::Packet, Loc::Stack(base));
        Ok(())
    }

    /// Offset of the parsed packet's stack area.
    fn packet_base(&self) -> Result<i16, CompileError> {
        match self.cache.get(&Cached::Packet) {
            Some(Loc::Stack(off)) => Ok(*off),
            _ => Err(CompileError::Internal(
                "a packet column read before the packet was parsed".into(),
            )),
        }
    }

    fn load_cached(&mut self, c: Cached, dst: Reg) -> Result<(), CompileError> {
        match self.cache.get(&c) {
            Some(Loc::Reg(r)) => self.asm.mov64(dst, Src::Reg(*r)),
            Some(Loc::Stack(off)) => self.asm.ldx(Size::DW, dst, Reg::R10, *off),
            None => {
                return Err(CompileError::Internal(format!(
                    "{c:?} used before it was materialized"
                )))
            }
        }
        Ok(())
    }

    /// Wraps `r` to the width of `ty`.
    fn normalize(&mut self, r: Reg, ty: IntType) {
        match (ty.bits, ty.signed) {
            (64, _) => {}
            (32, false) => self.asm.alu32(AluOp::Mov, r, Src::Reg(r)),
            (bits, false) => self
                .asm
                .alu64(AluOp::And, r, Src::Imm(((1u64 << bits) - 1) as i32)),
            (bits, true) => {
                self.asm.alu64(AluOp::Lsh, r, Src::Imm(64 - bits as i32));
                self.asm.alu64(AluOp::Arsh, r, Src::Imm(64 - bits as i32));
            }
        }
    }

    /// Loads a USDT operand of `size` bytes into `regs[0]` (zero-extended;
    /// the caller wraps it to its type): a constant, a `pt_regs` slot, or
    /// user memory at register + displacement through
    /// `bpf_probe_read_user` (0 when the read faults: the helper zeroes its
    /// buffer). The helper call clobbers r0-r5, so the evaluation registers
    /// a caller may hold values in (those not in `regs`) are spilled around it.
    fn usdt_arg(
        &mut self,
        arg: &ebql_catalog::UsdtArg,
        size: u32,
        regs: &[Reg],
    ) -> Result<(), CompileError> {
        use ebql_catalog::UsdtArg;
        let dst = regs[0];
        let sz = Size::from_bytes(size as usize)
            .ok_or_else(|| CompileError::Internal(format!("USDT operand size {size}")))?;
        match arg {
            UsdtArg::Const(v) => match imm32(*v as u64) {
                Some(i) => self.asm.mov64(dst, Src::Imm(i)),
                None => self.asm.ld_imm64(dst, *v as u64),
            },
            UsdtArg::Reg { pt_regs } => self.asm.ldx(sz, dst, CTX, *pt_regs as i16),
            UsdtArg::Mem { pt_regs, disp } => {
                let live: Vec<Reg> = EVAL_REGS
                    .iter()
                    .copied()
                    .filter(|r| !regs.contains(r))
                    .collect();
                let mut slots = Vec::new();
                for &r in &live {
                    let off = self.stack.alloc(8, 8).map_err(stack_err)?;
                    self.asm.stx(Size::DW, Reg::R10, off, r);
                    slots.push(off);
                }
                let buf = self.stack.alloc(8, 8).map_err(stack_err)?;
                self.asm
                    .comment(format!("bpf_probe_read_user({size} bytes at {arg})"));
                self.asm.ldx(Size::DW, Reg::R3, CTX, *pt_regs as i16);
                if *disp != 0 {
                    self.asm.alu64(AluOp::Add, Reg::R3, Src::Imm(*disp));
                }
                self.asm.mov64(Reg::R1, Src::Reg(Reg::R10));
                self.asm.alu64(AluOp::Add, Reg::R1, Src::Imm(buf as i32));
                self.asm.mov64(Reg::R2, Src::Imm(size as i32));
                self.asm.call(helper::PROBE_READ_USER);
                self.asm.ldx(sz, dst, Reg::R10, buf);
                for (&r, &off) in live.iter().zip(&slots) {
                    self.asm.ldx(Size::DW, r, Reg::R10, off);
                }
            }
        }
        Ok(())
    }

    /// Replaces the address in `regs[0]` by the `ty` integer stored there
    /// (user or kernel memory; 0 when the read faults: the helper zeroes its
    /// buffer), wrapped to `ty`. The helper call clobbers r0–r5, so the
    /// evaluation registers a caller may hold values in (those not in
    /// `regs`) are spilled around it, as for USDT memory operands.
    fn load_at(&mut self, user: bool, ty: IntType, regs: &[Reg]) -> Result<(), CompileError> {
        let dst = regs[0];
        let size = (ty.bits / 8) as u32;
        let sz = Size::from_bytes(size as usize)
            .ok_or_else(|| CompileError::Internal(format!("load of {size} bytes")))?;
        let live: Vec<Reg> = EVAL_REGS
            .iter()
            .copied()
            .filter(|r| !regs.contains(r))
            .collect();
        let mut slots = Vec::new();
        for &r in &live {
            let off = self.stack.alloc(8, 8).map_err(stack_err)?;
            self.asm.stx(Size::DW, Reg::R10, off, r);
            slots.push(off);
        }
        let buf = self.stack.alloc(8, 8).map_err(stack_err)?;
        self.asm.comment(format!(
            "bpf_probe_read_{}({size} bytes at the address)",
            if user { "user" } else { "kernel" }
        ));
        self.asm.mov64(Reg::R3, Src::Reg(dst));
        self.asm.mov64(Reg::R1, Src::Reg(Reg::R10));
        self.asm.alu64(AluOp::Add, Reg::R1, Src::Imm(buf as i32));
        self.asm.mov64(Reg::R2, Src::Imm(size as i32));
        self.asm.call(if user {
            helper::PROBE_READ_USER
        } else {
            helper::PROBE_READ_KERNEL
        });
        self.asm.ldx(sz, dst, Reg::R10, buf);
        for (&r, &off) in live.iter().zip(&slots) {
            self.asm.ldx(Size::DW, r, Reg::R10, off);
        }
        self.normalize(dst, ty);
        Ok(())
    }

    /// Evaluates `e` into `regs[0]`, using the rest of `regs` as temporaries.
    fn eval(&mut self, e: &KExpr, regs: &[Reg]) -> Result<(), CompileError> {
        let dst = *regs
            .first()
            .ok_or_else(|| CompileError::Internal("out of registers".into()))?;
        match e {
            KExpr::Field {
                access: ebql_catalog::Access::StackId { user },
                ..
            } => self.load_cached(Cached::Stack(*user), dst)?,
            KExpr::Field {
                access: ebql_catalog::Access::Btf { arg, steps, direct },
                size,
                ty,
                ..
            } => {
                self.load_btf(*arg, steps, *direct, *size, regs)?;
                self.normalize(dst, *ty);
            }
            KExpr::Field {
                access: ebql_catalog::Access::Usdt(arg),
                size,
                ty,
                ..
            } => {
                self.usdt_arg(arg, *size, regs)?;
                self.normalize(dst, *ty);
            }
            KExpr::Field {
                access: ebql_catalog::Access::Packet(f),
                size,
                ..
            } => {
                let base = self.packet_base()?;
                let sz = Size::from_bytes(*size as usize)
                    .ok_or_else(|| CompileError::Internal(format!("packet column size {size}")))?;
                self.asm
                    .ldx(sz, dst, Reg::R10, base + crate::packet::offset(*f));
            }
            KExpr::Field { access, .. } if *access != ebql_catalog::Access::Ctx => {
                return Err(CompileError::Internal(format!(
                    "reading a field through {access:?} is not built yet"
                )));
            }
            KExpr::Field {
                offset, size, ty, ..
            } => {
                let sz = Size::from_bytes(*size as usize)
                    .ok_or_else(|| CompileError::Internal(format!("field size {size}")))?;
                self.asm.ldx(sz, dst, CTX, *offset as i16);
                if ty.signed && ty.bits < 64 {
                    self.normalize(dst, *ty);
                }
            }
            KExpr::Attr(a, _) => {
                self.load_cached(cached_for(*a), dst)?;
                match a {
                    SystemAttr::Pid | SystemAttr::Gid => {
                        self.asm.alu64(AluOp::Rsh, dst, Src::Imm(32))
                    }
                    SystemAttr::Tid | SystemAttr::Uid | SystemAttr::Cpu => {
                        self.asm.alu32(AluOp::Mov, dst, Src::Reg(dst))
                    }
                    _ => {}
                }
            }
            KExpr::Const(v, _) => match imm32(*v) {
                Some(i) => self.asm.mov64(dst, Src::Imm(i)),
                None => self.asm.ld_imm64(dst, *v),
            },
            KExpr::Stored { index, .. } => {
                let at = self.stored_at.ok_or_else(|| {
                    CompileError::Internal("start column outside a pairing's end program".into())
                })?;
                self.asm
                    .ldx(Size::DW, dst, Reg::R10, at + 8 * *index as i16);
            }
            KExpr::Neg(x, ty) => {
                self.eval(x, regs)?;
                self.asm.alu64(AluOp::Neg, dst, Src::Imm(0));
                self.normalize(dst, *ty);
            }
            KExpr::BitNot(x, ty) => {
                self.eval(x, regs)?;
                self.asm.alu64(AluOp::Xor, dst, Src::Imm(-1));
                self.normalize(dst, *ty);
            }
            KExpr::Cast(x, ty) => {
                self.eval(x, regs)?;
                self.normalize(dst, *ty);
            }
            KExpr::Load { addr, user, ty } => {
                self.eval(addr, regs)?;
                self.load_at(*user, *ty, regs)?;
            }
            KExpr::Arith(op, l, r, ty) => {
                let alu = match op {
                    ArithOp::Add => AluOp::Add,
                    ArithOp::Sub => AluOp::Sub,
                    ArithOp::Mul => AluOp::Mul,
                    ArithOp::Div => AluOp::Div,
                    ArithOp::Mod => AluOp::Mod,
                    ArithOp::And => AluOp::And,
                    ArithOp::Or => AluOp::Or,
                    ArithOp::Xor => AluOp::Xor,
                    ArithOp::Shl => AluOp::Lsh,
                    ArithOp::Shr if ty.signed => AluOp::Arsh,
                    ArithOp::Shr => AluOp::Rsh,
                };
                self.eval(l, regs)?;
                match r.as_ref() {
                    KExpr::Const(v, _) if imm32(*v).is_some() => {
                        self.asm.alu64(alu, dst, Src::Imm(imm32(*v).unwrap()))
                    }
                    _ => {
                        self.eval(r, &regs[1..])?;
                        self.asm.alu64(alu, dst, Src::Reg(regs[1]));
                    }
                }
                self.normalize(dst, *ty);
            }
        }
        Ok(())
    }

    /// Jumps to `target` when `p` evaluates to `want`; falls through otherwise.
    fn jump_if(&mut self, p: &KPred, want: bool, target: Label) -> Result<(), CompileError> {
        match p {
            KPred::Const(b) => {
                if *b == want {
                    self.asm.ja(target);
                }
            }
            KPred::Not(q) => self.jump_if(q, !want, target)?,
            KPred::And(v) | KPred::Or(v) => {
                // AND jumps out on the first false when looking for false; OR on the first true.
                let short = matches!(p, KPred::Or(_));
                if want == short {
                    for q in v {
                        self.jump_if(q, want, target)?;
                    }
                } else {
                    let skip = self.asm.new_label();
                    let (last, rest) = v.split_last().expect("non-empty");
                    for q in rest {
                        self.jump_if(q, !want, skip)?;
                    }
                    self.jump_if(last, want, target)?;
                    self.asm.bind(skip);
                }
            }
            KPred::Cmp { op, l, r, signed } => {
                let op = if want { *op } else { op.negate() };
                let cond = jmp_cond(op, *signed);
                self.eval(l, &EVAL_REGS)?;
                match r {
                    KExpr::Const(v, _) if imm32(*v).is_some() => {
                        self.asm
                            .jmp(cond, EVAL_REGS[0], Src::Imm(imm32(*v).unwrap()), target)
                    }
                    _ => {
                        self.eval(r, &EVAL_REGS[1..])?;
                        self.asm
                            .jmp(cond, EVAL_REGS[0], Src::Reg(EVAL_REGS[1]), target);
                    }
                }
            }
            KPred::In { e, list, negated } => {
                let jump_on_member = want ^ negated;
                self.eval(e, &EVAL_REGS)?;
                let v = EVAL_REGS[0];
                let member = if jump_on_member {
                    target
                } else {
                    self.asm.new_label()
                };
                for c in list {
                    match imm32(*c) {
                        Some(i) => self.asm.jmp(JmpCond::Eq, v, Src::Imm(i), member),
                        None => {
                            self.asm.ld_imm64(EVAL_REGS[1], *c);
                            self.asm.jmp(JmpCond::Eq, v, Src::Reg(EVAL_REGS[1]), member);
                        }
                    }
                }
                if !jump_on_member {
                    self.asm.ja(target);
                    self.asm.bind(member);
                }
            }
            KPred::StrEq {
                src,
                lit,
                negated,
                prefix,
            } => {
                let jump_on_equal = want ^ negated;
                // Bytes compared: the literal, and for equality its NUL terminator
                // when it fits (a char array may fill its whole length).
                let n = match src {
                    // Stored with one byte more than its buffer: a string as long as the
                    // buffer keeps equals the literal whatever follows (it is cut there).
                    StrSrc::Stored { .. } if !*prefix && lit.len() as u32 >= src.max_chars() => {
                        lit.len()
                    }
                    _ if *prefix => lit.len(),
                    _ => (lit.len() + 1).min(src.len() as usize),
                };
                let (base, off) = match src {
                    StrSrc::Comm => match self.cache.get(&Cached::Comm) {
                        Some(Loc::Stack(o)) => (Reg::R10, *o as i32),
                        _ => return Err(CompileError::Internal("comm not materialized".into())),
                    },
                    StrSrc::CtxChars { offset, .. } => (CTX, *offset as i32),
                    StrSrc::Btf { access, len, .. } => {
                        (Reg::R10, self.read_btf_str(access, *len)? as i32)
                    }
                    StrSrc::DataLoc { .. } | StrSrc::Ptr { .. } => {
                        // Read only what decides the test: the literal's length, plus
                        // one byte for equality (a longer string must not end at the
                        // cut); the helper writes the NUL in the last byte.
                        let read = (n + 1).min(src.len() as usize);
                        let buf = self.stack.alloc(read, 8).map_err(stack_err)?;
                        self.read_str(src, Reg::R10, buf, read as u32, false)?;
                        (Reg::R10, buf as i32)
                    }
                    StrSrc::Packet { .. } => (
                        Reg::R10,
                        (self.packet_base()?
                            + crate::packet::offset(ebql_catalog::source::tc::PacketField::Payload))
                            as i32,
                    ),
                    StrSrc::Stored { index, .. } => {
                        let (slot, offsets) = self.stored_strs_at.clone().ok_or_else(|| {
                            CompileError::Internal(
                                "a start string outside a pairing's end program".into(),
                            )
                        })?;
                        self.asm.ldx(Size::DW, Reg::R2, Reg::R10, slot);
                        (Reg::R2, offsets[*index] as i32)
                    }
                };
                let differ = if jump_on_equal {
                    self.asm.new_label()
                } else {
                    target
                };
                for i in 0..n {
                    let byte = lit.get(i).copied().unwrap_or(0);
                    self.asm
                        .ldx(Size::B, Reg::R1, base, (off + i as i32) as i16);
                    self.asm
                        .jmp(JmpCond::Ne, Reg::R1, Src::Imm(byte as i32), differ);
                }
                if jump_on_equal {
                    self.asm.ja(target);
                    self.asm.bind(differ);
                }
            }
        }
        Ok(())
    }

    /// Evaluates a BTF path ([`ebql_catalog::Access::Btf`]) into `regs[0]`:
    /// the argument's u64 from the context, then per step a load at
    /// `pointer + offset` (`size` bytes at the last step, a pointer before).
    /// `direct` (tp_btf, fentry/fexit): plain loads, which the verifier
    /// turns into fault-tolerant loads through `PTR_TO_BTF_ID`; else each
    /// load is a `bpf_probe_read_kernel` into a stack slot, around which the
    /// registers of enclosing expressions (the `EVAL_REGS` before `regs`) are spilled.
    fn load_btf(
        &mut self,
        arg: u32,
        steps: &[ebql_catalog::BtfStep],
        direct: bool,
        size: u32,
        regs: &[Reg],
    ) -> Result<(), CompileError> {
        let dst = regs[0];
        let arg_off = i16::try_from(8 * arg)
            .map_err(|_| CompileError::Internal(format!("argument {arg}")))?;
        let leaf = Size::from_bytes(size as usize)
            .ok_or_else(|| CompileError::Internal(format!("field size {size}")))?;
        if steps.is_empty() {
            // Arguments are u64 slots; the caller narrows to the C type.
            self.asm.ldx(Size::DW, dst, CTX, arg_off);
            return Ok(());
        }
        if direct {
            self.asm.ldx(Size::DW, dst, CTX, arg_off);
            for (i, s) in steps.iter().enumerate() {
                let off = self.btf_offset(dst, s.offset);
                let last = i + 1 == steps.len();
                self.asm
                    .ldx(if last { leaf } else { Size::DW }, dst, dst, off);
            }
            return Ok(());
        }
        let live: Vec<Reg> = EVAL_REGS[..EVAL_REGS.len() - regs.len()].to_vec();
        if live.iter().chain(regs).ne(EVAL_REGS.iter()) {
            return Err(CompileError::Internal(
                "probe reads need the evaluation registers in order".into(),
            ));
        }
        let spill = self
            .stack
            .alloc(8 * live.len().max(1), 8)
            .map_err(stack_err)?;
        for (i, r) in live.iter().enumerate() {
            self.asm.stx(Size::DW, Reg::R10, spill + 8 * i as i16, *r);
        }
        let slot = self.stack.alloc(8, 8).map_err(stack_err)?;
        self.asm.ldx(Size::DW, Reg::R3, CTX, arg_off);
        for (i, s) in steps.iter().enumerate() {
            let last = i + 1 == steps.len();
            self.asm
                .alu64(AluOp::Add, Reg::R3, Src::Imm(s.offset as i32));
            self.asm.mov64(Reg::R1, Src::Reg(Reg::R10));
            self.asm.alu64(AluOp::Add, Reg::R1, Src::Imm(slot as i32));
            self.asm
                .mov64(Reg::R2, Src::Imm(if last { size as i32 } else { 8 }));
            self.asm.call(helper::PROBE_READ_KERNEL);
            if !last {
                self.asm.ldx(Size::DW, Reg::R3, Reg::R10, slot);
            }
        }
        self.asm.ldx(leaf, dst, Reg::R10, slot);
        for (i, r) in live.iter().enumerate() {
            self.asm.ldx(Size::DW, *r, Reg::R10, spill + 8 * i as i16);
        }
        Ok(())
    }

    /// A load offset for `r + offset`: as is when it fits the instruction,
    /// else added to `r` first.
    fn btf_offset(&mut self, r: Reg, offset: u32) -> i16 {
        match i16::try_from(offset) {
            Ok(o) => o,
            Err(_) => {
                self.asm.alu64(AluOp::Add, r, Src::Imm(offset as i32));
                0
            }
        }
    }

    /// Copies the `char[len]` array at the end of a BTF path into a fresh
    /// zeroed stack buffer with `bpf_probe_read_kernel_str` (the pointers
    /// on the way loaded directly or probe-read, as in [`Gen::load_btf`])
    /// and returns the buffer's offset. Clobbers r0–r5.
    fn read_btf_str(
        &mut self,
        access: &ebql_catalog::Access,
        len: u32,
    ) -> Result<i16, CompileError> {
        let ebql_catalog::Access::Btf { arg, steps, direct } = access else {
            return Err(CompileError::Internal(format!("string through {access:?}")));
        };
        let (last, path) = steps
            .split_last()
            .ok_or_else(|| CompileError::Internal("a string argument".into()))?;
        let buf = self
            .stack
            .alloc(len.div_ceil(8) as usize * 8, 8)
            .map_err(stack_err)?;
        for i in 0..len.div_ceil(8) as i16 {
            self.asm.st_imm(Size::DW, Reg::R10, buf + 8 * i, 0);
        }
        // The struct holding the array: the path without its last step, as a pointer.
        let mut to_struct = path.to_vec();
        if let Some(p) = to_struct.last_mut() {
            p.deref = true;
        }
        if to_struct.is_empty() {
            self.asm.ldx(Size::DW, Reg::R3, CTX, 8 * *arg as i16);
        } else {
            // A pointer-sized load of the last pointer on the way.
            let pointer_path: Vec<ebql_catalog::BtfStep> = to_struct
                .iter()
                .map(|s| ebql_catalog::BtfStep {
                    offset: s.offset,
                    deref: s.deref,
                })
                .collect();
            self.load_btf(*arg, &pointer_path, *direct, 8, &EVAL_REGS)?;
            self.asm.mov64(Reg::R3, Src::Reg(EVAL_REGS[0]));
        }
        self.asm
            .alu64(AluOp::Add, Reg::R3, Src::Imm(last.offset as i32));
        self.asm.mov64(Reg::R1, Src::Reg(Reg::R10));
        self.asm.alu64(AluOp::Add, Reg::R1, Src::Imm(buf as i32));
        self.asm.mov64(Reg::R2, Src::Imm(len as i32));
        self.asm.call(helper::PROBE_READ_KERNEL_STR);
        Ok(buf)
    }

    /// Stores zeroes into `size` bytes at `base+off` (no stale bytes after a NUL).
    fn zero(&mut self, base: Reg, off: i16, size: u32) {
        self.asm
            .comment("zero the buffer: no stale bytes after the NUL");
        let mut i = 0i16;
        while i < size as i16 {
            let chunk = [8i16, 4, 2, 1]
                .into_iter()
                .find(|&c| i + c <= size as i16 && (off + i) % c == 0)
                .expect("1-byte chunks always fit");
            self.asm.st_imm(
                Size::from_bytes(chunk as usize).expect("1, 2, 4 or 8"),
                base,
                off + i,
                0,
            );
            i += chunk;
        }
    }

    /// Copies a string read by a `bpf_probe_read_*_str` helper (a
    /// `__data_loc` field or `str(ptr)`) into `size` bytes at `base+off`.
    /// The helper stops after the NUL, so with `zero` (group keys) the buffer
    /// is zeroed first: equal strings give equal keys. A fault makes the
    /// helper zero the buffer (the empty string). Clobbers r0–r5.
    fn read_str(
        &mut self,
        src: &StrSrc,
        base: Reg,
        off: i16,
        size: u32,
        zero: bool,
    ) -> Result<(), CompileError> {
        if zero {
            self.zero(base, off, size);
        }
        let helper = match src {
            StrSrc::DataLoc { offset, .. } => {
                self.asm.comment(
                    "r3 = ctx + (__data_loc & 0xffff): the string inside the trace record",
                );
                self.asm.ldx(Size::W, Reg::R1, CTX, *offset as i16);
                self.asm.alu64(AluOp::And, Reg::R1, Src::Imm(0xffff));
                self.asm.mov64(Reg::R3, Src::Reg(CTX));
                self.asm.alu64(AluOp::Add, Reg::R3, Src::Reg(Reg::R1));
                helper::PROBE_READ_KERNEL_STR
            }
            StrSrc::Ptr { ptr, user, len, .. } => {
                let bound = match len {
                    Some(len) => Some(self.str_read_size(len, size)?),
                    None => None,
                };
                self.eval(ptr, &[Reg::R3, Reg::R4, Reg::R5, Reg::R0, Reg::R1, Reg::R2])?;
                self.asm.mov64(Reg::R1, Src::Reg(base));
                self.asm.alu64(AluOp::Add, Reg::R1, Src::Imm(off as i32));
                match bound {
                    Some(slot) => self.asm.ldx(Size::DW, Reg::R2, Reg::R10, slot),
                    None => self.asm.mov64(Reg::R2, Src::Imm(size as i32)),
                }
                self.asm.call(if *user {
                    helper::PROBE_READ_USER_STR
                } else {
                    helper::PROBE_READ_KERNEL_STR
                });
                return Ok(());
            }
            StrSrc::Comm
            | StrSrc::CtxChars { .. }
            | StrSrc::Btf { .. }
            | StrSrc::Packet { .. }
            | StrSrc::Stored { .. } => {
                return Err(CompileError::Internal(format!(
                    "`{src}` is not read by a helper"
                )))
            }
        };
        self.asm.mov64(Reg::R1, Src::Reg(base));
        self.asm.alu64(AluOp::Add, Reg::R1, Src::Imm(off as i32));
        self.asm.mov64(Reg::R2, Src::Imm(size as i32));
        self.asm.call(helper);
        Ok(())
    }

    /// The `size` argument of a `_str` helper reading a string of `len`
    /// bytes (`str(p, n, len)`) into a buffer of `size`: `clamp(len, 0,
    /// size - 1) + 1` (the helper copies at most size − 1 bytes, then the
    /// NUL), kept on the stack (an 8-byte spill keeps its bounds for the
    /// verifier) while the pointer is evaluated. Returns the slot.
    fn str_read_size(&mut self, len: &KExpr, size: u32) -> Result<i16, CompileError> {
        self.asm.comment(format!(
            "r1 = min({len}, {}) + 1: the helper's size",
            size - 1
        ));
        self.eval(len, &EVAL_REGS)?;
        if len.ty().signed {
            let positive = self.asm.new_label();
            self.asm.jmp(JmpCond::Sge, Reg::R1, Src::Imm(0), positive);
            self.asm.mov64(Reg::R1, Src::Imm(0));
            self.asm.bind(positive);
        }
        let fits = self.asm.new_label();
        self.asm
            .jmp(JmpCond::Le, Reg::R1, Src::Imm(size as i32 - 1), fits);
        self.asm.mov64(Reg::R1, Src::Imm(size as i32 - 1));
        self.asm.bind(fits);
        self.asm.alu64(AluOp::Add, Reg::R1, Src::Imm(1));
        let slot = self.stack.alloc(8, 8).map_err(stack_err)?;
        self.asm.stx(Size::DW, Reg::R10, slot, Reg::R1);
        Ok(slot)
    }

    /// Copies a string value to `base+off`: with `pad`, into a ring-buffer
    /// record, NUL-padded to a multiple of 8 bytes; without, into a group key,
    /// with every byte after the first NUL zeroed.
    fn store_str(
        &mut self,
        src: &StrSrc,
        base: Reg,
        off: i16,
        pad: bool,
    ) -> Result<(), CompileError> {
        match src {
            StrSrc::Stored { index, of, .. } => {
                let (slot, offsets) = self.stored_strs_at.clone().ok_or_else(|| {
                    CompileError::Internal("a start string outside a pairing's end program".into())
                })?;
                let (size, copy) = stored_copy(of, pad);
                if !pad && of.helper_buffer().is_some() {
                    // A key: the helper stops after the NUL, the rest must be 0.
                    self.zero(base, off, size);
                }
                self.asm.ldx(Size::DW, Reg::R3, Reg::R10, slot);
                self.asm
                    .alu64(AluOp::Add, Reg::R3, Src::Imm(offsets[*index] as i32));
                self.asm.mov64(Reg::R1, Src::Reg(base));
                self.asm.alu64(AluOp::Add, Reg::R1, Src::Imm(off as i32));
                self.asm.mov64(Reg::R2, Src::Imm(size as i32));
                self.asm.call(copy);
            }
            StrSrc::DataLoc { size, .. } | StrSrc::Ptr { size, .. } => {
                // A record is read up to its NUL, one byte more than the buffer
                // (the truncation flag, StrSrc::record_bytes); a key is the
                // buffer, with no stale bytes after the NUL.
                self.read_str(src, base, off, if pad { size + 1 } else { *size }, !pad)?;
            }
            StrSrc::Packet { .. } => {
                let area = self.packet_base()?;
                crate::packet::emit_payload_copy(&mut self.asm, area, base, off, !pad);
            }
            StrSrc::Comm => match self.cache.get(&Cached::Comm).copied() {
                Some(Loc::Stack(c)) => {
                    // Widest chunks both sides are aligned for: a key may put
                    // comm after a 4-byte field, and the verifier rejects
                    // misaligned stack accesses.
                    let mut i = 0i16;
                    while i < 16 {
                        let (src, dst) = (c + i, off + i);
                        let chunk = [8i16, 4, 2, 1]
                            .into_iter()
                            .find(|&n| i + n <= 16 && src % n == 0 && dst % n == 0)
                            .expect("1-byte chunks always fit");
                        let size = Size::from_bytes(chunk as usize).expect("1, 2, 4 or 8");
                        self.asm.ldx(size, Reg::R1, Reg::R10, src);
                        self.asm.stx(size, base, dst, Reg::R1);
                        i += chunk;
                    }
                }
                _ => {
                    self.asm.mov64(Reg::R1, Src::Reg(base));
                    self.asm.alu64(AluOp::Add, Reg::R1, Src::Imm(off as i32));
                    self.asm.mov64(Reg::R2, Src::Imm(16));
                    self.asm.call(helper::GET_CURRENT_COMM);
                }
            },
            StrSrc::Btf { access, len, .. } => {
                // Read into a zeroed buffer (nothing stale after the NUL), then copy;
                // a record gets the buffer's zero padding up to 8 bytes too.
                let buf = self.read_btf_str(access, *len)?;
                let n = if pad { len.div_ceil(8) * 8 } else { *len } as i16;
                let mut i = 0i16;
                while i < n {
                    let chunk = [8i16, 4, 2, 1]
                        .into_iter()
                        .find(|&c| i + c <= n && i % c == 0 && (off + i) % c == 0)
                        .expect("1-byte chunks always fit");
                    let size = Size::from_bytes(chunk as usize).expect("1, 2, 4 or 8");
                    self.asm.ldx(size, Reg::R1, Reg::R10, buf + i);
                    self.asm.stx(size, base, off + i, Reg::R1);
                    i += chunk;
                }
            }
            StrSrc::CtxChars { offset, len, .. } if !pad => {
                // A group key: equal strings must give equal keys, so the bytes
                // after the first NUL (whatever the record holds there) become 0.
                // r2 is all ones until a NUL was copied, then 0 (branch-free).
                self.asm.comment("copy up to the NUL, zero the rest");
                self.asm.mov64(Reg::R2, Src::Imm(-1));
                for i in 0..*len as i16 {
                    self.asm.ldx(Size::B, Reg::R1, CTX, *offset as i16 + i);
                    self.asm.alu64(AluOp::And, Reg::R1, Src::Reg(Reg::R2));
                    self.asm.stx(Size::B, base, off + i, Reg::R1);
                    if i + 1 < *len as i16 {
                        self.asm.mov64(Reg::R2, Src::Reg(Reg::R1));
                        self.asm.alu64(AluOp::Add, Reg::R2, Src::Imm(255));
                        self.asm.alu64(AluOp::Rsh, Reg::R2, Src::Imm(8));
                        self.asm.alu64(AluOp::Neg, Reg::R2, Src::Imm(0));
                    }
                }
            }
            StrSrc::CtxChars { offset, len, .. } => {
                // A ring-buffer record: user space reads up to the NUL. Widest chunks both sides are aligned for (ctx loads must be aligned).
                let mut i = 0i16;
                while i < *len as i16 {
                    let (src, dst) = (*offset as i16 + i, off + i);
                    let chunk = [8i16, 4, 2, 1]
                        .into_iter()
                        .find(|&c| i + c <= *len as i16 && src % c == 0 && dst % c == 0)
                        .expect("1-byte chunks always fit");
                    let size = Size::from_bytes(chunk as usize).expect("1, 2, 4 or 8");
                    self.asm.ldx(size, Reg::R1, CTX, src);
                    self.asm.stx(size, base, dst, Reg::R1);
                    i += chunk;
                }
                let end = if pad { len.div_ceil(8) * 8 } else { *len };
                for i in *len as i16..end as i16 {
                    self.asm.st_imm(Size::B, base, off + i, 0);
                }
            }
        }
        Ok(())
    }

    /// Counts a drop in `pair` (the counter of this event's generation
    /// parity when time-windowed, see [`ctl`]), then jumps to `then`.
    fn count_drop(&mut self, pair: u32, then: Label) -> Result<(), CompileError> {
        self.asm.ld_map_value(Reg::R1, MAP_CTL as i32, 0);
        if self.cache.contains_key(&Cached::Gen) {
            self.load_cached(Cached::Gen, Reg::R2)?;
            self.asm.alu64(AluOp::And, Reg::R2, Src::Imm(1));
            self.asm.alu64(AluOp::Lsh, Reg::R2, Src::Imm(3));
            self.asm.alu64(AluOp::Add, Reg::R1, Src::Reg(Reg::R2));
        }
        self.asm.mov64(Reg::R2, Src::Imm(1));
        self.asm.atomic_add(Size::DW, Reg::R1, pair as i16, Reg::R2);
        self.asm.ja(then);
        Ok(())
    }

    fn emit_groups(
        &mut self,
        spec: &GroupSpec,
        window: Option<WindowSpec>,
        maps: &mut Vec<MapSpec>,
        opts: &CodegenOptions,
        group_map: &GroupMap,
    ) -> Result<OutputLayout, CompileError> {
        // Key layout: the window tag and integer keys at their natural width,
        // widest first so nothing needs alignment padding, then strings; the
        // size is a multiple of 4 (the kernel hashes such keys with jhash2).
        // Narrow keys hash and compare faster.
        let tag_bytes = match window {
            Some(WindowSpec::Time { .. }) => 4,
            Some(WindowSpec::Count { .. }) => 8,
            None => 0,
        };
        let mut items: Vec<(Option<usize>, Stored, u32)> = Vec::new(); // (key index or None = tag, storage, bytes)
        if tag_bytes > 0 {
            items.push((
                None,
                Stored::Int {
                    ty: IntType::U64,
                    bytes: tag_bytes,
                },
                tag_bytes,
            ));
        }
        for (i, k) in spec.keys.iter().enumerate() {
            if k.per_cpu {
                continue;
            }
            let (stored, bytes) = match &k.value {
                ValueSrc::Int(e) => {
                    let b = (e.ty().bits as u32 / 8).max(1);
                    (
                        Stored::Int {
                            ty: e.ty(),
                            bytes: b,
                        },
                        b,
                    )
                }
                ValueSrc::Str(st) => (Stored::Str(st.len()), st.len()),
                ValueSrc::Truncated(_) => {
                    return Err(CompileError::Internal(
                        "truncated() as a kernel group key".into(),
                    ))
                }
            };
            items.push((Some(i), stored, bytes));
        }
        let align = |st: &Stored, b: u32| if matches!(st, Stored::Str(_)) { 0 } else { b };
        items.sort_by_key(|(_, st, b)| std::cmp::Reverse(align(st, *b)));
        let mut keys: Vec<Option<(u32, Stored)>> = vec![None; spec.keys.len()];
        let mut window_tag = None;
        let mut key_size = 0u32;
        for (idx, stored, bytes) in &items {
            match idx {
                Some(i) => keys[*i] = Some((key_size, *stored)),
                None => window_tag = Some((key_size, *bytes)),
            }
            key_size += bytes;
        }
        let used = key_size;
        let key_size = key_size.div_ceil(4).max(1) * 4;
        let value_size = spec.value_size();
        let windows = if window.is_some() { 2 } else { 1 };
        let entries = opts.max_groups.saturating_mul(windows);
        let array = match group_map {
            GroupMap::Array(ix) => Some(ix),
            GroupMap::Hash { .. } => None,
        };
        let hash = |name: &str| match value_size > crate::contract::PREALLOC_ABOVE_BYTES {
            true => MapSpec {
                name: name.into(),
                kind: MapKind::PercpuHashPrealloc,
                key_size,
                value_size,
                max_entries: entries
                    .min((crate::contract::PREALLOC_BUDGET_BYTES / value_size).max(2)),
            },
            false => MapSpec {
                name: name.into(),
                kind: MapKind::PercpuHash,
                key_size,
                value_size,
                max_entries: entries,
            },
        };
        // An array is keyed by its u32 slot; the layout keeps the hash key's shape (user space rebuilds it per slot).
        maps.push(match array {
            Some(ix) => MapSpec {
                name: "ebql_groups".into(),
                kind: MapKind::PercpuArray,
                key_size: 4,
                value_size,
                max_entries: ix.entries(),
            },
            None => hash("ebql_groups"),
        });
        // Plan maps after the output map are numbered after the tap or start map, if any.
        let zero_map = maps.len() + self.reserved;
        maps.push(MapSpec {
            name: "ebql_zero".into(),
            kind: MapKind::Array,
            key_size: 4,
            value_size,
            max_entries: 1,
        });
        // Groups whose dense-range key falls outside the array ([`crate::groupmap`]).
        let overflow = array.filter(|ix| ix.overflow()).map(|_| {
            maps.push(hash("ebql_groups_overflow"));
            maps.len() - 1 + self.reserved
        });
        let distinct = spec
            .slots
            .iter()
            .any(|s| matches!(s.state, State::Distinct(_)));
        let distinct_set = distinct.then(|| {
            maps.push(MapSpec {
                name: "ebql_distinct".into(),
                kind: MapKind::SharedHash,
                key_size: key_size + 8,
                value_size: 8,
                max_entries: opts.max_distinct.saturating_mul(windows),
            });
            maps.len() - 1 + self.reserved
        });
        let layout = OutputLayout::Groups {
            key_size,
            value_size,
            window_tag,
            keys: keys.clone(),
            distinct_set,
            array: array.cloned(),
            overflow,
        };

        // Attributes read by keys and aggregates (the per-CPU `cpu` key needs no helper).
        let mut attrs = Vec::new();
        for k in spec.keys.iter().filter(|k| !k.per_cpu) {
            match &k.value {
                ValueSrc::Int(e) => e.attrs(&mut attrs),
                ValueSrc::Str(s) | ValueSrc::Truncated(s) => s.attrs(&mut attrs),
            }
        }
        for s in &spec.slots {
            s.expr.attrs(&mut attrs);
            if let Some(p) = &s.when {
                p.attrs(&mut attrs);
            }
        }
        self.asm.origin("Aggregate: system attributes");
        self.materialize_gen()?;
        self.materialize(&attrs)?;

        let outside = self.asm.new_label();
        let key_off = match array {
            Some(ix) => self.emit_array_slot(spec, ix, window, outside)?,
            None => self.emit_group_key(
                spec,
                &keys,
                window,
                window_tag,
                key_size,
                used,
                items.is_empty(),
                distinct,
            )?,
        };

        let aggs_text: Vec<&str> = spec.aggs.iter().map(|a| a.2.as_str()).collect();
        self.asm.origin(format!(
            "Aggregate: lookup group ({})",
            aggs_text.join(", ")
        ));
        let new_group = self.asm.new_label();
        let update = self.asm.new_label();
        let first_here = self.asm.new_label();
        self.lookup(MAP_OUT, key_off);
        self.asm.jmp(JmpCond::Eq, Reg::R0, Src::Imm(0), new_group);
        self.asm.mov64(PTR, Src::Reg(Reg::R0));
        self.asm.bind(update);
        self.asm
            .origin(format!("Aggregate: update ({})", aggs_text.join(", ")));
        self.asm
            .comment("count 0: the group is new on this CPU and its value all zeroes");
        self.asm.ldx(Size::DW, Reg::R1, PTR, 0);
        self.asm.jmp(JmpCond::Eq, Reg::R1, Src::Imm(0), first_here);
        self.asm.alu64(AluOp::Add, Reg::R1, Src::Imm(1));
        self.asm.stx(Size::DW, PTR, 0, Reg::R1);
        let set = distinct_set.map(|m| DistinctSet {
            map: m as i32,
            zero_map: zero_map as i32,
            key_off,
            key_size,
        });
        self.update_states(spec, false, set)?;
        self.asm.ja(self.exit);

        self.asm.bind(first_here);
        self.asm
            .origin("Aggregate: first event of the group on this CPU");
        self.asm.st_imm(Size::DW, PTR, 0, 1);
        self.update_states(spec, true, set)?;
        self.asm.ja(self.exit);

        if array.is_some() {
            // The filters bound every key (crate::groupmap): a slot is always found.
            self.asm.bind(new_group);
            self.asm.origin(
                "Aggregate: slot out of the array (the key bounds exclude it), count the drop",
            );
            self.count_drop(ctl::DROP_GROUPS_FULL, self.exit)?;
            if let Some(map) = overflow {
                // Rare by construction: the dense range holds the usual values.
                self.asm.bind(outside);
                let hash_key = self.emit_group_key(
                    spec,
                    &keys,
                    window,
                    window_tag,
                    key_size,
                    used,
                    items.is_empty(),
                    false,
                )?;
                let new_overflow = self.asm.new_label();
                self.asm
                    .origin("Aggregate: lookup group in the overflow hash");
                self.lookup(map, hash_key);
                self.asm
                    .jmp(JmpCond::Eq, Reg::R0, Src::Imm(0), new_overflow);
                self.asm.mov64(PTR, Src::Reg(Reg::R0));
                self.asm.ja(update);
                self.emit_new_group(map, hash_key, zero_map, update, new_overflow)?;
            }
            return Ok(layout);
        }
        self.emit_new_group(MAP_OUT, key_off, zero_map, update, new_group)?;
        Ok(layout)
    }

    /// The hash group key on the stack (window tag, integer keys, strings;
    /// with COUNT(DISTINCT), 8 more bytes for the value after it) and its offset.
    #[allow(clippy::too_many_arguments)]
    fn emit_group_key(
        &mut self,
        spec: &GroupSpec,
        keys: &[Option<(u32, Stored)>],
        window: Option<WindowSpec>,
        window_tag: Option<(u32, u32)>,
        key_size: u32,
        used: u32,
        no_items: bool,
        distinct: bool,
    ) -> Result<i16, CompileError> {
        // With COUNT(DISTINCT), the value follows the group key: together they are the set's key.
        let key_off = self
            .stack
            .alloc((key_size + 8 * distinct as u32) as usize, 8)
            .map_err(stack_err)?;
        if used < key_size || no_items {
            self.asm.origin("GroupBy: zero the key's padding");
            for b in used..key_size {
                self.asm.st_imm(Size::B, Reg::R10, key_off + b as i16, 0);
            }
        }
        if let Some((off, _)) = window_tag {
            let at = key_off + off as i16;
            match window {
                Some(WindowSpec::Time { .. }) => {
                    self.asm.origin("Window(time): key.generation = gen");
                    self.load_cached(Cached::Gen, Reg::R1)?;
                    self.asm.stx(Size::W, Reg::R10, at, Reg::R1);
                }
                Some(WindowSpec::Count { size, .. }) => {
                    self.asm.origin(format!(
                        "Window(count, {size}): key.window = fetch_add(ctl.seq, 1) / {size}"
                    ));
                    self.asm.ld_map_value(Reg::R1, MAP_CTL as i32, 0);
                    self.asm.mov64(Reg::R2, Src::Imm(1));
                    self.asm
                        .atomic_fetch_add(Size::DW, Reg::R1, ctl::SEQ as i16, Reg::R2);
                    match imm32(size) {
                        Some(i) => self.asm.alu64(AluOp::Div, Reg::R2, Src::Imm(i)),
                        None => {
                            self.asm.ld_imm64(Reg::R3, size);
                            self.asm.alu64(AluOp::Div, Reg::R2, Src::Reg(Reg::R3));
                        }
                    }
                    self.asm.stx(Size::DW, Reg::R10, at, Reg::R2);
                }
                None => {}
            }
        }
        for (k, slot) in spec.keys.iter().zip(keys) {
            let Some((off, stored)) = slot else { continue };
            self.asm.origin(format!("GroupBy key: {}", k.text));
            let at = key_off + *off as i16;
            match (&k.value, stored) {
                (ValueSrc::Int(e), Stored::Int { bytes, .. }) => {
                    self.eval(e, &EVAL_REGS)?;
                    let size = Size::from_bytes(*bytes as usize).expect("1, 2, 4 or 8 bytes");
                    self.asm.stx(size, Reg::R10, at, EVAL_REGS[0]);
                }
                (ValueSrc::Str(s), _) => self.store_str(s, Reg::R10, at, false)?,
                _ => unreachable!("key storage matches its value"),
            }
        }
        Ok(key_off)
    }

    /// The array slot of this event's group ([`crate::groupmap`]) as a u32
    /// on the stack, and its offset: `parity(gen) · slots + Σ (key − lo) · stride`.
    /// A dense-range key's value outside its range jumps to `outside`.
    fn emit_array_slot(
        &mut self,
        spec: &GroupSpec,
        ix: &crate::groupmap::ArrayIndex,
        window: Option<WindowSpec>,
        outside: Label,
    ) -> Result<i16, CompileError> {
        let acc = self.stack.alloc(8, 8).map_err(stack_err)?;
        self.asm.origin("GroupBy: array slot");
        self.asm.st_imm(Size::DW, Reg::R10, acc, 0);
        for d in &ix.dims {
            let k = &spec.keys[d.key];
            let ValueSrc::Int(e) = &k.value else {
                return Err(CompileError::Internal(format!(
                    "array key `{}` is a string",
                    k.text
                )));
            };
            self.asm.origin(format!(
                "GroupBy key: {} (slot += ({} − {}) × {})",
                k.text, k.text, d.lo, d.stride
            ));
            self.eval(e, &EVAL_REGS)?;
            let r = EVAL_REGS[0];
            if d.lo != 0 {
                match imm32(d.lo as u64) {
                    Some(i) => self.asm.alu64(AluOp::Sub, r, Src::Imm(i)),
                    None => {
                        self.asm.ld_imm64(EVAL_REGS[1], d.lo as u64);
                        self.asm.alu64(AluOp::Sub, r, Src::Reg(EVAL_REGS[1]));
                    }
                }
            }
            if d.partial {
                self.asm.origin(format!(
                    "{DENSE_TEST_ORIGIN} {} in {}..={}",
                    k.text,
                    d.lo,
                    d.lo + i64::from(d.count) - 1
                ));
                self.asm
                    .comment("unsigned: a value below the range is outside too");
                self.asm
                    .jmp(JmpCond::Gt, r, Src::Imm(d.count as i32 - 1), outside);
                self.asm.origin(format!(
                    "GroupBy key: {} (slot += ({} − {}) × {})",
                    k.text, k.text, d.lo, d.stride
                ));
            }
            if d.stride != 1 {
                self.asm.alu64(AluOp::Mul, r, Src::Imm(d.stride as i32));
            }
            self.asm.ldx(Size::DW, EVAL_REGS[1], Reg::R10, acc);
            self.asm.alu64(AluOp::Add, r, Src::Reg(EVAL_REGS[1]));
            self.asm.stx(Size::DW, Reg::R10, acc, r);
        }
        if ix.windows == 2 && matches!(window, Some(WindowSpec::Time { .. })) {
            self.asm
                .origin(format!("Window(time): slot += (gen & 1) × {}", ix.slots));
            self.load_cached(Cached::Gen, Reg::R1)?;
            self.asm.alu64(AluOp::And, Reg::R1, Src::Imm(1));
            self.asm
                .alu64(AluOp::Mul, Reg::R1, Src::Imm(ix.slots as i32));
            self.asm.ldx(Size::DW, Reg::R2, Reg::R10, acc);
            self.asm.alu64(AluOp::Add, Reg::R1, Src::Reg(Reg::R2));
            self.asm.stx(Size::DW, Reg::R10, acc, Reg::R1);
        }
        // The map key is the low 4 bytes (little-endian) of the slot.
        Ok(acc)
    }

    /// A new group of the hash: inserted as the all-zero value, then looked
    /// up and updated from `update`; a full table counts a drop.
    fn emit_new_group(
        &mut self,
        map: usize,
        key_off: i16,
        zero_map: usize,
        update: Label,
        new_group: Label,
    ) -> Result<(), CompileError> {
        // A new group is inserted as the all-zero value of a one-entry array
        // (any size, nothing built on the 512-byte stack), then updated in
        // place like any group this CPU has not seen yet.
        let zero_map = zero_map as i32;
        self.asm.bind(new_group);
        self.asm
            .origin("Aggregate: new group, inserted as all zeroes");
        self.asm.ld_map_fd(Reg::R1, map as i32);
        self.asm.mov64(Reg::R2, Src::Reg(Reg::R10));
        self.asm
            .alu64(AluOp::Add, Reg::R2, Src::Imm(key_off as i32));
        self.asm.ld_map_value(Reg::R3, zero_map, 0);
        self.asm
            .mov64(Reg::R4, Src::Imm(helper::BPF_NOEXIST as i32));
        self.asm.call(helper::MAP_UPDATE_ELEM);
        let inserted = self.asm.new_label();
        self.asm.jmp(JmpCond::Eq, Reg::R0, Src::Imm(0), inserted);
        self.asm
            .comment("-EEXIST: another CPU inserted the group first");
        self.asm.jmp(JmpCond::Eq, Reg::R0, Src::Imm(-17), inserted);
        let drop = self.asm.new_label();
        self.asm.bind(drop);
        self.asm
            .origin("Aggregate: group table full, count the drop");
        self.count_drop(ctl::DROP_GROUPS_FULL, self.exit)?;
        self.asm.bind(inserted);
        self.asm.origin("Aggregate: lookup the inserted group");
        self.lookup(map, key_off);
        self.asm.jmp(JmpCond::Eq, Reg::R0, Src::Imm(0), drop);
        self.asm.mov64(PTR, Src::Reg(Reg::R0));
        self.asm.ja(update);
        Ok(())
    }

    /// Folds this event into every state of the group's value at `PTR`
    /// (`first`: the value is all zeroes). Each distinct argument is evaluated
    /// once, then updates every unconditional state that uses it; states under
    /// a predicate are guarded by it.
    fn update_states(
        &mut self,
        spec: &GroupSpec,
        first: bool,
        set: Option<DistinctSet>,
    ) -> Result<(), CompileError> {
        const SCRATCH: [Reg; 5] = [Reg::R2, Reg::R3, Reg::R4, Reg::R5, Reg::R0];
        for (expr, slots) in slots_by_argument(&spec.slots) {
            let slots: Vec<usize> = slots
                .into_iter()
                .filter(|&j| !matches!(spec.slots[j].state, State::Distinct(_)))
                .collect();
            if slots.is_empty() {
                continue;
            }
            self.eval(expr, &EVAL_REGS)?;
            for j in slots {
                let mut cx = UpdateCx {
                    asm: &mut self.asm,
                    value_ptr: PTR,
                    off: spec.slot_offset(j) as i16,
                    arg: Some((EVAL_REGS[0], expr.ty())),
                    scratch: &SCRATCH,
                };
                spec.slots[j].state.synopsis().emit_update(&mut cx, first)?;
            }
        }
        for (j, slot) in spec
            .slots
            .iter()
            .enumerate()
            .filter(|(_, s)| s.when.is_some() || !s.state.needs_arg())
        {
            let off = spec.slot_offset(j) as i16;
            self.guarded(slot, |g| {
                let arg = if slot.state.needs_arg() {
                    g.eval(&slot.expr, &EVAL_REGS)?;
                    Some((EVAL_REGS[0], slot.expr.ty()))
                } else {
                    None
                };
                let mut cx = UpdateCx {
                    asm: &mut g.asm,
                    value_ptr: PTR,
                    off,
                    arg,
                    scratch: &SCRATCH,
                };
                slot.state.synopsis().emit_update(&mut cx, first)
            })?;
        }
        // COUNT(DISTINCT): last, because the set insert is a helper call (it clobbers r0-r5).
        for (j, slot) in spec
            .slots
            .iter()
            .enumerate()
            .filter(|(_, s)| matches!(s.state, State::Distinct(_)))
        {
            let set = set.ok_or_else(|| {
                CompileError::Internal("COUNT(DISTINCT) without its set map".into())
            })?;
            let at = set.key_off + set.key_size as i16;
            self.asm
                .origin("Aggregate: COUNT(DISTINCT) insert (window, group, value) into the set");
            self.eval(&slot.expr, &EVAL_REGS)?;
            self.asm.comment(
                "set key = group key ++ value (two 4-byte stores: the key may be 4-aligned only)",
            );
            self.asm.stx(Size::W, Reg::R10, at, EVAL_REGS[0]);
            self.asm.alu64(AluOp::Rsh, EVAL_REGS[0], Src::Imm(32));
            self.asm.stx(Size::W, Reg::R10, at + 4, EVAL_REGS[0]);
            self.asm.ld_map_fd(Reg::R1, set.map);
            self.asm.mov64(Reg::R2, Src::Reg(Reg::R10));
            self.asm
                .alu64(AluOp::Add, Reg::R2, Src::Imm(set.key_off as i32));
            self.asm.ld_map_value(Reg::R3, set.zero_map, 0);
            self.asm
                .mov64(Reg::R4, Src::Imm(helper::BPF_NOEXIST as i32));
            self.asm.call(helper::MAP_UPDATE_ELEM);
            let (new_value, done) = (self.asm.new_label(), self.asm.new_label());
            self.asm.jmp(JmpCond::Eq, Reg::R0, Src::Imm(0), new_value);
            self.asm
                .comment("-EEXIST: the value was already counted (on some CPU) in this window");
            self.asm.jmp(JmpCond::Eq, Reg::R0, Src::Imm(-17), done);
            self.asm
                .origin("Aggregate: distinct set full, count the drop");
            self.count_drop(ctl::DROP_DISTINCT_FULL, done)?;
            self.asm.bind(new_value);
            self.asm
                .origin("Aggregate: COUNT(DISTINCT) new value, count it");
            let mut cx = UpdateCx {
                asm: &mut self.asm,
                value_ptr: PTR,
                off: spec.slot_offset(j) as i16,
                arg: None,
                scratch: &SCRATCH,
            };
            slot.state.synopsis().emit_update(&mut cx, first)?;
            self.asm.bind(done);
        }
        Ok(())
    }

    /// Emits `then` guarded by a slot's predicate (nothing when it is constant
    /// false, no test when there is none or it is constant true: no dead code).
    fn guarded(
        &mut self,
        slot: &Slot,
        then: impl FnOnce(&mut Gen) -> Result<(), CompileError>,
    ) -> Result<(), CompileError> {
        match slot.when.clone().map(simplify) {
            Some(KPred::Const(false)) => Ok(()),
            None | Some(KPred::Const(true)) => then(self),
            Some(p) => {
                let skip = self.asm.new_label();
                self.jump_if(&p, false, skip)?;
                then(self)?;
                self.asm.bind(skip);
                Ok(())
            }
        }
    }

    /// `bpf_map_lookup_elem(map, fp + key_off)`: the value or NULL in r0.
    fn lookup(&mut self, map: usize, key_off: i16) {
        self.asm.ld_map_fd(Reg::R1, map as i32);
        self.asm.mov64(Reg::R2, Src::Reg(Reg::R10));
        self.asm
            .alu64(AluOp::Add, Reg::R2, Src::Imm(key_off as i32));
        self.asm.call(helper::MAP_LOOKUP_ELEM);
    }

    fn emit_stream(
        &mut self,
        columns: TapColumns,
        window: Option<WindowSpec>,
        maps: &mut Vec<MapSpec>,
        opts: &CodegenOptions,
        tap: Tap,
    ) -> Result<OutputLayout, CompileError> {
        let (map, done, drops, what) = match tap {
            Tap::No => (MAP_OUT, self.exit, ctl::DROP_RINGBUF_FULL, "Stream"),
            Tap::Yes(main) => (MAP_TAP, main, ctl::DROP_TAP_FULL, "Check tap"),
        };
        let gen_in_record = matches!(window, Some(WindowSpec::Time { .. }));
        let (cols, written, mut size) = stream_layout(columns, gen_in_record);
        let outer_at = (self.outer.is_some() && matches!(tap, Tap::No)).then(|| {
            size += 8;
            size - 8
        });
        let mut attrs = Vec::new();
        for (_, v, _) in columns {
            match v {
                ValueSrc::Int(e) => e.attrs(&mut attrs),
                ValueSrc::Str(s) | ValueSrc::Truncated(s) => s.attrs(&mut attrs),
            }
        }
        if size > crate::kexpr::MAX_RECORD_BYTES {
            return Err(CompileError::Query(
                crate::Diagnostic::new(format!("a streamed row would take {size} bytes; the probe writes at most {} per event", crate::kexpr::MAX_RECORD_BYTES), None)
                    .with_hint("read fewer or shorter strings: str(p, n) reserves n + 1 bytes of each row"),
            ));
        }
        let record_size = size.max(8);
        maps.push(MapSpec {
            name: "ebql_events".into(),
            kind: MapKind::RingBuf,
            key_size: 0,
            value_size: 0,
            max_entries: opts.ringbuf_bytes,
        });
        let outer = match (outer_at, &self.outer) {
            (Some(at), Some(pair)) => Some(outer_layout(columns, &cols, &written, at, pair)),
            _ => None,
        };
        let layout = OutputLayout::Stream {
            record_size,
            gen_in_record,
            columns: cols.clone(),
            outer,
        };

        self.asm.origin(format!("{what}: system attributes"));
        self.materialize_gen()?;
        self.materialize(&attrs)?;
        self.asm.origin(format!(
            "{what}: reserve a {record_size}-byte ring buffer record"
        ));
        self.asm.ld_map_fd(Reg::R1, map as i32);
        self.asm.mov64(Reg::R2, Src::Imm(record_size as i32));
        self.asm.mov64(Reg::R3, Src::Imm(0));
        self.asm.call(helper::RINGBUF_RESERVE);
        let have = self.asm.new_label();
        self.asm.jmp(JmpCond::Ne, Reg::R0, Src::Imm(0), have);
        self.asm
            .origin(format!("{what}: ring buffer full, count the drop"));
        self.count_drop(drops, done)?;
        self.asm.bind(have);
        self.asm.mov64(PTR, Src::Reg(Reg::R0));
        if gen_in_record {
            self.asm.origin("Window(time): record.generation = gen");
            self.load_cached(Cached::Gen, Reg::R1)?;
            self.asm.stx(Size::DW, PTR, 0, Reg::R1);
        }
        let regs: Vec<Reg> = EVAL_REGS.to_vec();
        for (((name, v, _), (off, _)), write) in columns.iter().zip(&cols).zip(&written) {
            if !write {
                continue; // a truncated() flag of a string another column writes
            }
            self.asm.origin(format!(
                "{}: {name}",
                if map == MAP_TAP {
                    "Check tap"
                } else {
                    "Project"
                }
            ));
            match v {
                ValueSrc::Int(e) => {
                    self.eval(e, &regs)?;
                    self.asm.stx(Size::DW, PTR, *off as i16, regs[0]);
                }
                ValueSrc::Str(s) | ValueSrc::Truncated(s) => {
                    self.store_str(s, PTR, *off as i16, true)?
                }
            }
        }
        if let Some(at) = outer_at {
            self.asm.origin("LEFT JOIN: matched = 1 (a pair's row)");
            self.asm.st_imm(Size::DW, PTR, at as i16, 1);
        }
        self.asm.origin(format!(
            "{what}: submit without wakeup (user space drains on a timer)"
        ));
        self.asm.mov64(Reg::R1, Src::Reg(PTR));
        self.asm
            .mov64(Reg::R2, Src::Imm(helper::BPF_RB_NO_WAKEUP as i32));
        self.asm.call(helper::RINGBUF_SUBMIT);
        self.asm.ja(done);
        Ok(layout)
    }
}
