//! Pairing (see [`crate::pair`]): the start program (a hash start map or the
//! thread's task storage), the end program's lookup and removal of its
//! start, and a `LEFT JOIN`'s unmatched starts.

use super::expr::simplify;
use super::gen::{stack_err, Cached, Gen, ProgramSpec, CTX, EVAL_REGS, PTR};
use super::maps::{scratch, LateMaps};
use super::options::CodegenOptions;
use super::stream::TapColumns;
use super::strings::stored_copy;
use crate::contract::{
    counters, ctl, task_start, MapKind, MapSpec, OutputLayout, MAP_OUT, MAP_PAIR, MAP_PAIR_LIVE,
};
use crate::kexpr::{KExpr, KPred};
use crate::pair::PairPlan;
use crate::physical::StartStore;
use crate::prepass::WindowSpec;
use crate::split::{KernelOutput, KernelPlan, ValueSrc};
use crate::syscall_hook::RawHook;
use crate::CompileError;
use ebql_bpf::{helper, AluOp, JmpCond, Label, Reg, Size, Src};
use ebql_catalog::SystemAttr;

/// Memory the preallocated hash start map may take: its entries are
/// `--max-pending` or fewer when the value holds long strings (a start the
/// full map cannot take is counted, `pair_start_map_full`).
pub const START_MAP_BUDGET_BYTES: u32 = 32 << 20;

impl StartStore {
    /// Maps this store adds at [`MAP_PAIR`] (and [`MAP_PAIR_LIVE`]).
    pub(super) fn maps(self, pair: &PairPlan, opts: &CodegenOptions) -> Vec<MapSpec> {
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

/// Whether the programs of a pairing use the scratch values ([`scratch`],
/// numbered before emission by [`LateMaps`]): a hash start map whose value
/// holds strings (the start program builds it there, the end program
/// copies the strings there), or a `LEFT JOIN` (`outer`) whose start
/// program runs past its filters (it takes the start it replaces there).
pub(super) fn uses_scratch(pair: &PairPlan, store: StartStore, outer: bool) -> bool {
    let start_never = pair
        .start_filters
        .iter()
        .any(|(p, _)| simplify(p.clone()) == KPred::Const(false));
    store == StartStore::Hash && (!pair.stored_strs.is_empty() || (outer && !start_never))
}

/// The oracle's tap in a pairing's start program: the tap's `columns`
/// (the start event's are `own`) into ring buffer `map`.
pub(super) struct StartTap<'a> {
    pub(super) columns: TapColumns<'a>,
    pub(super) map: usize,
    pub(super) own: std::ops::Range<usize>,
}

/// Where a pairing's start program runs: the query's window, the raw
/// syscall hook if any, the late maps' numbering and the options.
pub(super) struct StartContext<'a> {
    pub(super) window: Option<WindowSpec>,
    pub(super) hook: Option<&'a RawHook>,
    pub(super) late: LateMaps,
    pub(super) opts: &'a CodegenOptions,
}

/// The start program of a pairing: the oracle's tap if any, the start
/// event's filters, then one
/// insert of the stored columns under the key (see [`crate::pair`]), or
/// one store into the thread's task-local storage.
///
/// A `LEFT JOIN` pairing (`unmatched`: the layout of the end program's
/// streamed rows) emits the start it replaces as an unmatched start's
/// row ([`Gen::emit_unmatched`]); the start map is then always the hash.
pub(super) fn compile_start(
    pair: &PairPlan,
    store: StartStore,
    unmatched: Option<&OutputLayout>,
    cx: StartContext,
    tap: Option<StartTap>,
) -> Result<ProgramSpec, CompileError> {
    let StartContext {
        window,
        hook,
        late,
        opts,
    } = cx;
    let mut g = Gen::new(vec![Reg::R8, Reg::R7], window, 0, late);
    let exit = g.exit;
    g.asm.origin("prologue");
    g.asm.comment("r6 = ctx (tracepoint record)");
    g.asm.mov64(CTX, Src::Reg(Reg::R1));
    let loaded_as = hook.map_or(pair.start.event.kind, |h| h.program_event.kind);
    g.take_event_cache(loaded_as, opts.event_cache)?;
    g.begin_fault_in(opts.faulting_user_strings && pair.start.event.kind.may_sleep());
    g.allow_direct_comm(pair.start.event.kind, hook, opts.task_comm);
    g.emit_hook_guard(hook)?;
    if let Some(t) = tap {
        g.emit_tap(t.columns, window, opts, t.map, Some((0, t.own)))?;
    }
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
    if !pair.stored_strs.is_empty() && matches!(window, Some(WindowSpec::Time { .. })) {
        // A failed string read is counted in this event's window.
        g.asm
            .origin("Pair start: the window generation (failed string reads count in it)");
        g.materialize_gen()?;
    }
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
pub(super) fn end_reads_time(plan: &KernelPlan) -> bool {
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
                s.exprs().for_each(|e| e.attrs(&mut attrs));
                if let Some(p) = &s.when {
                    p.attrs(&mut attrs);
                }
            }
        }
        KernelOutput::Stream { columns, .. } => {
            columns.iter().for_each(|(_, v, _)| value(v, &mut attrs))
        }
    }
    attrs.contains(&SystemAttr::Time)
}

impl Gen {
    /// Start program, task storage: the thread's slot (created on its first
    /// start), the overwrite or per-CPU live count, then `valid = 1` and the
    /// stored columns. Helper results the columns read are materialized
    /// first, so the slot pointer (in [`PTR`]) survives until the stores.
    pub(super) fn emit_task_start(&mut self, pair: &PairPlan) -> Result<(), CompileError> {
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
    pub(super) fn store_start_strs(
        &mut self,
        pair: &PairPlan,
        base: Reg,
        off: i16,
    ) -> Result<(), CompileError> {
        for (i, (src, name)) in pair.stored_strs.iter().enumerate() {
            self.asm.origin(format!("Pair start: store {name}"));
            let at = off + pair.str_offset(i) as i16;
            match src.helper_buffer() {
                Some(n) => self.read_str_flagged(src, base, at, n, true)?,
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
    pub(super) fn emit_unmatched(
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
    pub(super) fn scratch_value(&mut self, index: i32, none: Label) -> Result<(), CompileError> {
        let map = self
            .maps
            .late
            .scratch
            .ok_or_else(|| CompileError::Internal("scratch values without their map".into()))?;
        self.array_entry(map, index, none)?;
        Ok(())
    }

    /// End program: keeps the pointer in r0 to the start value's layout (the
    /// task-storage slot's columns, or the scratch copy) in a stack slot for
    /// the stored strings ([`PairState::stored_strs_at`]).
    pub(super) fn keep_stored_strs(&mut self, pair: &PairPlan) -> Result<(), CompileError> {
        let slot = self.stack.alloc(8, 8).map_err(stack_err)?;
        self.asm.stx(Size::DW, Reg::R10, slot, Reg::R0);
        self.pair.stored_strs_at = Some((
            slot,
            (0..pair.stored_strs.len())
                .map(|i| pair.str_offset(i))
                .collect(),
        ));
        Ok(())
    }

    /// r0 = the current thread's value in the task-storage start map (or NULL).
    pub(super) fn task_slot(&mut self, flags: u64) {
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
    pub(super) fn add_live(&mut self, delta: i32, done: Label) -> Result<(), CompileError> {
        self.array_entry(MAP_PAIR_LIVE, 0, done)?;
        self.asm.ldx(Size::DW, Reg::R1, Reg::R0, 0);
        self.asm.alu64(AluOp::Add, Reg::R1, Src::Imm(delta));
        self.asm.stx(Size::DW, Reg::R0, 0, Reg::R1);
        Ok(())
    }

    /// End program, task storage: the thread's slot; no slot or `valid == 0`
    /// is an end without a start (counted, exits); else the stored columns
    /// are copied to the stack, `valid` cleared and the live count decremented.
    pub(super) fn emit_task_end(
        &mut self,
        pair: &PairPlan,
        copy_off: i16,
    ) -> Result<(), CompileError> {
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
        self.count_anomaly_per_cpu(counters::ENDS_WITHOUT_START)?;
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
    pub(super) fn emit_pair_key<'e>(
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
    pub(super) fn emit_pair_end(
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
            self.pair.stored_at = Some(copy_off);
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
        self.count_anomaly_per_cpu(counters::ENDS_WITHOUT_START)?;
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
                    self.pair.stored_strs_at.as_ref().expect("kept").0,
                );
                self.copy_stored_flag(src, value, at, Reg::R0, at as i16, true);
            }
        }
        key_ptr(self);
        self.asm.call(helper::MAP_DELETE_ELEM);
        self.asm
            .comment("a concurrent end of the same key deleted it first: that end owns the pair");
        self.asm.jmp(JmpCond::Ne, Reg::R0, Src::Imm(0), no_start);
        self.pair.stored_at = Some(copy_off);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{compile_with, listing, section};
    use crate::contract::MAP_PAIR;
    use crate::CodegenOptions;

    const PAIRED: &str = "SELECT e.fd, COUNT(*), SUM(x.time - e.time) AS total_ns
        FROM tracepoint:syscalls:sys_enter_pread64 AS e
        JOIN tracepoint:syscalls:sys_exit_pread64 AS x ON e.tid = x.tid
        WHERE e.pid = 4242 GROUP BY e.fd";

    /// A start that stores a string in a time window reads the window
    /// generation first: a failed read is counted in its window (was an
    /// internal error, found by the PostgreSQL latency test).
    #[test]
    fn a_stored_string_in_time_windows_counts_its_failures_in_its_window() {
        let q = compile_with(
            "SELECT str(e.buf, 16) AS s, COUNT(*) FROM tracepoint:syscalls:sys_enter_pread64 AS e \
             JOIN tracepoint:syscalls:sys_exit_pread64 AS x ON e.tid = x.tid \
             WHERE e.pid = 4242 GROUP BY str(e.buf, 16) WINDOW(time, 500, 500)",
            &CodegenOptions::default(),
        );
        let l = listing(&q, 0);
        assert!(
            !section(&l, "Pair start: the window generation").is_empty(),
            "{l}"
        );
    }

    /// A pairing whose WHERE can never hold (a comm longer than the
    /// kernel's 15 bytes) still gets its output layout: start columns
    /// included (found by the generator: an internal error, a panic).
    #[test]
    fn a_pairing_that_never_matches_has_its_layout() {
        let q = compile_with(
            "SELECT e.fd, e.comm, x.ret FROM tracepoint:syscalls:sys_enter_pread64 AS e \
             JOIN tracepoint:syscalls:sys_exit_pread64 AS x ON e.tid = x.tid \
             WHERE e.pid = 4242 AND x.comm = 'abcdefghijklmnop'",
            &CodegenOptions::default(),
        );
        let l = listing(&q, 1);
        assert!(!l.contains("reserve"), "nothing is ever written: {l}");
        assert!(
            matches!(&q.code.layout, crate::contract::OutputLayout::Stream { columns, .. } if columns.len() >= 3),
            "{:?}",
            q.code.layout
        );
    }

    #[test]
    fn a_hash_pairing_inserts_the_start_and_the_end_looks_it_up() {
        let opts = CodegenOptions {
            task_storage: false,
            ..CodegenOptions::default()
        };
        let q = compile_with(PAIRED, &opts);
        assert_eq!(q.code.programs.len(), 2);
        let start = listing(&q, 0);
        let insert = section(&start, "Pair start: insert into the start map");
        assert_eq!(insert[0], format!("r1 = map_fd({MAP_PAIR})"), "{start}");
        assert!(insert.contains(&"call bpf_map_update_elem#2"), "{start}");
        let end = listing(&q, 1);
        let lookup = section(&end, "Pair end: look up the latest unmatched start");
        assert_eq!(lookup[0], format!("r1 = map_fd({MAP_PAIR})"), "{end}");
        assert!(lookup.contains(&"call bpf_map_lookup_elem#1"), "{end}");
        assert!(end.contains("call bpf_map_delete_elem#3"), "{end}");
    }

    #[test]
    fn a_thread_keyed_pairing_keeps_its_start_in_task_storage() {
        let q = compile_with(PAIRED, &CodegenOptions::default());
        let start = listing(&q, 0);
        assert!(start.contains("call bpf_task_storage_get#156"), "{start}");
        assert!(!start.contains("bpf_map_update_elem"), "{start}");
        let valid = section(&start, "Pair start: valid = 1");
        assert_eq!(valid, ["*(u64 *)(r9 + 0) = 1"], "{start}");
    }
}
