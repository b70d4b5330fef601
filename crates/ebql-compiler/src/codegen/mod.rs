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

mod branches;
mod expr;
mod fault_in;
mod gen;
mod groups;
mod hashkey;
mod latest;
mod maps;
mod options;
mod pairing;
mod reads;
mod stream;
mod strings;
#[cfg(test)]
mod testing;

pub use crate::contract::{
    counters, ctl, task_start, BytesTail, MapKind, MapSpec, OutputLayout, Stored, MAP_CTL, MAP_OUT,
    MAP_PAIR, MAP_PAIR_LIVE, MAP_TAP, STACK_DEPTH,
};
pub use expr::simplify;
pub use gen::ProgramSpec;
pub use groups::DENSE_TEST_ORIGIN;
pub use maps::STACK_MAP_ENTRIES;
pub use options::CodegenOptions;
pub use pairing::START_MAP_BUDGET_BYTES;
pub use stream::{TapColumns, TapSides, TapSpec};
pub use strings::READ_UNLESS_EMPTY;

use crate::agg::State;
use crate::groupmap::GroupMap;
use crate::kexpr::KPred;
use crate::pair::PairPlan;
use crate::physical::{PhysicalPlan, StartStore};
use crate::split::{KernelOutput, KernelPlan};
use crate::CompileError;
use ebql_bpf::{Assembler, Program, Reg, Src};
use gen::{Gen, CTX};
use maps::LateMaps;
use pairing::{compile_start, end_reads_time, StartContext, StartTap};
use reads::{stack_reads, stack_reads_of};
use stream::{outer_of, variable_records, Tap};

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
    /// Layout of the tap's ring-buffer records when compiled with a tap.
    pub tap: Option<OutputLayout>,
    /// Index in [`Compiled::maps`] of the tap's ring buffer, when there is a
    /// tap: [`MAP_TAP`], or after a pairing's start map(s).
    pub tap_map: usize,
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

/// Generates the program for a kernel plan. `physical`: the choices made
/// for it ([`crate::physical::choose`]): its group table (required when the
/// plan aggregates in the kernel) and its start store (required when it
/// pairs). Codegen decides nothing about them.
///
/// Errors: `CompileError::Internal` when a required choice is missing;
/// `CompileError::Query` for what the kernel cannot hold (a stack too small
/// for the key, say), with the plan node.
pub fn compile(
    plan: &KernelPlan,
    physical: &PhysicalPlan,
    opts: &CodegenOptions,
) -> Result<Compiled, CompileError> {
    compile_tapped(plan, None, physical, opts)
}

/// Generates the program for a kernel plan; with `tap`, the program first
/// streams these columns of every event (before any filter) into a second
/// ring buffer ([`Compiled::tap_map`]), tagged with the same window generation the
/// plan's own output uses, so a reference evaluation sees exactly the same
/// events in exactly the same windows. The plan's code is unchanged after the tap.
/// A paired query's programs both tap, before their filters and the start
/// map ([`TapSpec::sides`]).
///
/// A query over several events ([`crate::multi`]) compiles `plan` and each
/// of its [`KernelPlan::branches`] as a query of its own and merges their
/// programs ([`branches::merge`]); the tap of program `k` writes branch
/// `k`'s columns ([`TapSpec::branches`]).
pub fn compile_tapped(
    plan: &KernelPlan,
    tap_spec: Option<TapSpec>,
    physical: &PhysicalPlan,
    opts: &CodegenOptions,
) -> Result<Compiled, CompileError> {
    let branch_tap = |k: usize| {
        tap_spec.as_ref().map(|t| TapSpec {
            columns: t.columns,
            sides: t.sides.clone(),
            branches: t.branches.get(k).cloned().into_iter().collect(),
        })
    };
    let mut code = compile_program(plan, branch_tap(0), physical, opts, 0)?;
    for (k, branch) in plan.branches.iter().enumerate() {
        let mut branch = branch.clone();
        branch.hooks = plan.hooks.clone();
        branch.window = plan.window;
        let first = code.programs.len() as i32;
        let other = compile_program(&branch, branch_tap(k + 1), physical, opts, first)?;
        let differ = |what: &str| CompileError::Internal(format!("the branches' {what} differ"));
        if format!("{:?}", code.layout) != format!("{:?}", other.layout) {
            return Err(differ("output layouts"));
        }
        if format!("{:?}", code.tap) != format!("{:?}", other.tap) {
            return Err(differ("tap layouts"));
        }
        branches::merge(
            &mut code.programs,
            &mut code.maps,
            other.programs,
            &other.maps,
        )?;
    }
    Ok(code)
}

/// [`compile_tapped`] of one event's plan (and a pairing's start), its
/// programs counted from `first_program` in the event counters.
fn compile_program(
    plan: &KernelPlan,
    tap_spec: Option<TapSpec>,
    physical: &PhysicalPlan,
    opts: &CodegenOptions,
    first_program: i32,
) -> Result<Compiled, CompileError> {
    let tap = tap_spec.as_ref().map(|t| t.columns);
    // The start map(s), then the tap, go right after MAP_OUT.
    let store: Option<(&PairPlan, StartStore)> = match (&plan.pair, physical.start_store) {
        (Some(p), Some(s)) => Some((p, s)),
        (Some(_), None) => {
            return Err(CompileError::Internal(
                "a pairing without its start store".into(),
            ))
        }
        (None, _) => None,
    };
    let store_maps = store.map_or(0, |(p, s)| s.maps(p, opts).len());
    let reserved = tap.is_some() as usize + store_maps;
    let tap_map = MAP_PAIR + store_maps;
    if store.is_some() && tap_spec.as_ref().is_some_and(|t| t.sides.is_none()) {
        return Err(CompileError::Internal(
            "a paired query's tap without its sides".into(),
        ));
    }
    let group_map = match (&plan.output, physical.group_map.as_ref()) {
        (KernelOutput::Groups(_), Some(gm)) => Some(gm.clone()),
        (KernelOutput::Groups(_), None) => {
            return Err(CompileError::Internal(
                "an aggregate without its group table".into(),
            ))
        }
        (KernelOutput::Stream { .. }, _) => None,
    };
    let filters: Vec<(KPred, &str)> = plan
        .filters
        .iter()
        .map(|(p, t)| (simplify(p.clone()), t.as_str()))
        .collect();
    let never = filters.iter().any(|(p, _)| *p == KPred::Const(false));
    let late = late_maps(plan, opts, tap, group_map.as_ref(), store, reserved, never);
    let mut g = Gen::new(vec![Reg::R8, Reg::R7], plan.window, reserved, late);
    g.pair.outer = outer_of(plan);
    g.asm.origin("prologue");
    g.asm.comment("r6 = ctx (tracepoint record)");
    g.asm.mov64(CTX, Src::Reg(Reg::R1));
    let hook = plan.hook_of(&plan.event.event);
    let loaded_as = hook.map_or(plan.event.event.kind, |h| h.program_event.kind);
    g.take_event_cache(loaded_as, opts.event_cache)?;
    g.begin_fault_in(opts.faulting_user_strings && plan.event.event.kind.may_sleep());
    g.allow_direct_comm(plan.event.event.kind, hook, opts.task_comm);
    g.emit_hook_guard(hook)?;
    // The output program is the last one: after a pairing's start program.
    g.counters.key = first_program + store.is_some() as i32;
    let mut maps = vec![MapSpec {
        name: "ebql_ctl".into(),
        kind: MapKind::MmapArray,
        key_size: 4,
        value_size: ctl::SIZE,
        max_entries: 1,
    }];
    if crate::packet::plan_reads(plan, tap.iter().flat_map(|c| c.iter().map(|(_, v, _)| v))) {
        g.asm
            .origin("packet columns: parse the headers and the payload prefix");
        g.materialize_packet()?;
    }
    if reads::plan_reads_user_regs(plan) {
        g.asm.origin("task registers: read once per event");
        g.materialize_task_regs()?;
    }
    // The tap comes first: before the pairing's thread filters and lookup too.
    let tap_layout = match &tap_spec {
        Some(spec) => {
            let side = spec
                .sides
                .as_ref()
                .map(|s| (1, s.end.clone()))
                .or_else(|| spec.branches.first().cloned());
            Some(g.emit_tap(spec.columns, plan.window, opts, tap_map, side)?)
        }
        None => None,
    };
    if let Some((pair, store)) = store {
        g.emit_pair_end(pair, store, end_reads_time(plan))?;
    }

    let layout = if never {
        // WHERE is always false: the probe only counts what it sees (the event rate).
        g.count_seen()?;
        g.asm.origin("Filter: always false");
        placeholder_layout(plan, &mut maps, opts, reserved, late, group_map.as_ref())
    } else {
        g.emit_filters(&filters)?;
        let stacks = output_stack_reads(plan);
        if !stacks.is_empty() {
            g.asm.origin("stack ids");
            g.materialize_stacks(&stacks)?;
        }
        match (&plan.output, &group_map) {
            (KernelOutput::Groups(spec), Some(gm)) => {
                g.emit_groups(spec, plan.window, &mut maps, opts, gm)?
            }
            (KernelOutput::Groups(_), None) => {
                return Err(CompileError::Internal(
                    "an aggregate without its group table".into(),
                ))
            }
            (KernelOutput::Stream { columns, latest }, _) => {
                let variable = variable_records(plan, opts);
                let latest = latest.clone();
                g.emit_stream(
                    columns,
                    plan.window,
                    &mut maps,
                    opts,
                    Tap::No {
                        variable,
                        latest,
                        side: branch_side(plan),
                    },
                )?
            }
        }
    };
    let mut programs = Vec::new();
    if let Some((pair, store)) = store {
        for (i, spec) in store.maps(pair, opts).into_iter().enumerate() {
            maps.insert(MAP_PAIR + i, spec);
        }
        let unmatched =
            matches!(&layout, OutputLayout::Stream { outer: Some(_), .. }).then_some(&layout);
        let start_tap = tap_spec.as_ref().and_then(|t| {
            Some(StartTap {
                columns: t.columns,
                map: tap_map,
                own: t.sides.as_ref()?.start.clone(),
            })
        });
        let cx = StartContext {
            window: plan.window,
            hook: plan.hook_of(&pair.start.event),
            late,
            opts,
        };
        programs.push(compile_start(pair, store, unmatched, cx, start_tap)?);
    }
    let tap = tap_layout.map(|(layout, mut spec)| {
        spec.name = "ebql_tap".into();
        spec.max_entries = opts.tap_ringbuf_bytes;
        maps.insert(tap_map, spec);
        layout
    });
    programs.push(g.finish(&plan.event, hook)?);
    let used: Vec<&[usize]> = programs.iter().map(|p| p.maps.as_slice()).collect();
    let fault_in_bytes = programs.iter().map(|p| p.fault_in_bytes).max().unwrap_or(0);
    late.append(
        &used,
        &mut maps,
        store.map_or(0, |(p, _)| p.value_size()),
        fault_in_bytes,
    )?;
    let counters = late.counters;
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
        tap_map,
        group_map,
        counters,
    })
}

/// The branch index and columns a program of a query over several events
/// writes ([`crate::multi`]).
fn branch_side(plan: &KernelPlan) -> Option<(u64, std::ops::Range<usize>)> {
    plan.branch.as_ref().map(|b| (b.index, b.columns.clone()))
}

/// Stack columns (user: true) the plan's output reads.
fn output_stack_reads(plan: &KernelPlan) -> Vec<bool> {
    match &plan.output {
        KernelOutput::Groups(spec) => {
            let mut v = stack_reads_of(spec.keys.iter().map(|k| &k.value));
            spec.slots
                .iter()
                .flat_map(|s| s.exprs())
                .for_each(|e| stack_reads(e, &mut v));
            v
        }
        KernelOutput::Stream { columns, latest } => {
            let keys = latest.iter().flatten().map(|k| &k.value);
            stack_reads_of(columns.iter().map(|(_, v, _)| v).chain(keys))
        }
    }
}

/// Numbers the maps after the plan's own ([`LateMaps`]) before any program
/// is emitted. Before them: the control and output maps, the `reserved`
/// tap or start map(s), and the maps a group table adds after the output
/// map (the all-zero value, an array's overflow hash, a COUNT(DISTINCT)
/// set, a stream's record buffer). The stack-trace map when the tap, or the output of a plan whose
/// filters can pass (`never` false), reads a stack column; the scratch
/// values by [`pairing::uses_scratch`].
fn late_maps(
    plan: &KernelPlan,
    opts: &CodegenOptions,
    tap: Option<TapColumns>,
    group_map: Option<&GroupMap>,
    store: Option<(&PairPlan, StartStore)>,
    reserved: usize,
    never: bool,
) -> LateMaps {
    let group_maps = match &plan.output {
        KernelOutput::Groups(spec) => {
            let overflow = matches!(group_map, Some(GroupMap::Array(ix)) if ix.overflow());
            let distinct = spec
                .slots
                .iter()
                .any(|s| matches!(s.state, State::Distinct(_)));
            1 + overflow as usize + distinct as usize
        }
        // The latest-record table's all-zero value, or a record buffer.
        KernelOutput::Stream { latest, .. } => {
            usize::from(latest.is_some() || variable_records(plan, opts))
        }
    };
    let tap_stacks = tap.is_some_and(|c| !stack_reads_of(c.iter().map(|(_, v, _)| v)).is_empty());
    let stack = tap_stacks || (!never && !output_stack_reads(plan).is_empty());
    let scratch = store
        .is_some_and(|(pair, store)| pairing::uses_scratch(pair, store, outer_of(plan).is_some()));
    LateMaps::after(2 + reserved + group_maps, stack, scratch)
}

fn placeholder_layout(
    plan: &KernelPlan,
    maps: &mut Vec<MapSpec>,
    opts: &CodegenOptions,
    reserved: usize,
    late: LateMaps,
    group_map: Option<&GroupMap>,
) -> OutputLayout {
    // Same maps and layout as the real program so user space needs no special case.
    let mut g = Gen::new(vec![], plan.window, reserved, late);
    g.pair.outer = outer_of(plan);
    if let Some(pair) = &plan.pair {
        // The code is thrown away: any slots let a start column be "loaded".
        g.pair.stored_at = Some(-8);
        let offsets = (0..pair.stored_strs.len())
            .map(|i| pair.str_offset(i))
            .collect();
        g.pair.stored_strs_at = Some((-16, offsets));
    }
    let r = match (&plan.output, group_map) {
        (KernelOutput::Groups(spec), Some(gm)) => g.emit_groups(spec, plan.window, maps, opts, gm),
        (KernelOutput::Groups(_), None) => Err(CompileError::Internal(
            "an aggregate without its group table".into(),
        )),
        (KernelOutput::Stream { columns, latest }, _) => {
            let variable = variable_records(plan, opts);
            let latest = latest.clone();
            g.emit_stream(
                columns,
                plan.window,
                maps,
                opts,
                Tap::No {
                    variable,
                    latest,
                    side: branch_side(plan),
                },
            )
        }
    };
    r.expect("layout of a plan that compiled")
}

/// A program for an event of `kind` that returns at once, as the query's
/// programs do after their work: what `ebql query --attach-only` loads in
/// their place to measure the hooks alone.
pub fn return_at_once(kind: ebql_catalog::EventKind) -> Program {
    let mut asm = Assembler::new();
    asm.mov64(Reg::R0, Src::Imm(kind.exit_value()));
    asm.exit();
    asm.finish().expect("two instructions, no labels")
}
