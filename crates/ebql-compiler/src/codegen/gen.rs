//! The program skeleton every generated program shares: the emitter state
//! ([`Gen`]), the prologue's hook guard, the kernel filters with the event
//! counters around them, the drop counters, and the exit that [`Gen::finish`]
//! binds before assembling a [`ProgramSpec`].

use super::maps::LateMaps;
use crate::contract::{counters, MAP_CTL};
use crate::kexpr::{KExpr, KPred};
use crate::pair::PairPlan;
use crate::prepass::WindowSpec;
use crate::syscall_hook::RawHook;
use crate::CompileError;
use ebql_bpf::{helper, AluOp, Assembler, JmpCond, Label, Program, Reg, Size, Src, StackAlloc};
use ebql_catalog::SystemAttr;
use std::collections::HashMap;

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
    /// Loaded with `BPF_F_SLEEPABLE`: the program faults the user strings it
    /// reads in first, then runs in an RCU read-side section
    /// ([`super::fault_in`]). Its kfunc calls hold [`ebql_bpf::Kfunc`]
    /// indexes the loader replaces by BTF ids.
    pub sleepable: bool,
    /// Bytes of the fault-in buffer the program writes (0 if none).
    pub fault_in_bytes: u32,
    /// Reads `current->comm` with direct loads from `bpf_get_current_task_btf()`
    /// ([`super::CodegenOptions::task_comm`]): a kernel without that helper
    /// needs the query compiled again without it.
    pub direct_comm: bool,
    /// Takes the shared hook's per-event cache in r2
    /// ([`super::CodegenOptions::event_cache`], [`ebql_bpf::event_cache`]):
    /// loaded alone, it runs behind a wrapper that owns a cache
    /// (`ebql_runtime::SharedHooks::solo`).
    pub event_cache: bool,
}

/// Indexes of the maps `program` loads (its `ld_imm64` map placeholders), sorted.
pub(super) fn maps_of(program: &Program) -> Vec<usize> {
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

/// Where a materialized helper result lives.
#[derive(Clone, Copy, Debug)]
pub(super) enum Loc {
    Reg(Reg),
    Stack(i16),
}

/// Helper results cached per event (each helper is called at most once).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) enum Cached {
    PidTgid,
    UidGid,
    Cpu,
    Time,
    Cgroup,
    /// 16-byte comm buffer on the stack, NUL-padded (`bpf_get_current_comm`).
    Comm,
    /// 16 bytes of `current->comm` on the stack, read with direct loads
    /// ([`Gen::materialize_direct_comm`]): meaningful up to the NUL only, so
    /// read by comparisons, never copied into keys or records.
    CommDirect,
    /// The time-window generation read from the control map (read once per
    /// event, so everything the event writes carries the same one).
    Gen,
    /// A stack column's value ([`ebql_catalog::Access::StackId`]): user
    /// (true) or kernel stack, see [`Gen::materialize_stacks`].
    Stack(bool),
    /// The parsed packet's stack area ([`crate::packet`]).
    Packet,
    /// The current task's saved user registers, a `struct pt_regs` BTF
    /// pointer ([`Gen::materialize_task_regs`]).
    TaskRegs,
}

/// Registers usable while evaluating expressions (no helper calls happen
/// during evaluation: helper results are materialized beforehand).
pub(super) const EVAL_REGS: [Reg; 6] = [Reg::R1, Reg::R2, Reg::R3, Reg::R4, Reg::R5, Reg::R0];

/// r6 holds the context; r9 the map value / ring-buffer record across calls.
pub(super) const CTX: Reg = Reg::R6;

pub(super) const PTR: Reg = Reg::R9;

/// The emitter of one program: the assembler and stack, the exit every
/// early return jumps to, and each job's own state (helper results,
/// event counters, a pairing's start value) kept apart.
pub(super) struct Gen {
    /// The query's window (time windows read the generation once per event).
    pub(super) window: Option<WindowSpec>,
    pub(super) asm: Assembler,
    pub(super) stack: StackAlloc,
    /// The label of the program's exit (bound by [`Gen::finish`]).
    pub(super) exit: Label,
    /// Helper results read once per event ([`super::reads`]).
    pub(super) reads: Reads,
    /// This program's event counters ([`Gen::count_seen`]).
    pub(super) counters: Counters,
    /// The numbering of the maps the program references ([`super::maps`]).
    pub(super) maps: MapNumbers,
    /// A pairing's start value as this program sees it ([`super::pairing`]).
    pub(super) pair: PairState,
    /// Failed string reads are counted ([`crate::contract::ctl::STR_READ_FAILED`]):
    /// false while the oracle's tap is emitted (its reads repeat the query's).
    pub(super) count_str_failures: bool,
    /// A program that may be loaded sleepable ([`super::fault_in`]).
    pub(super) fault_in: Option<FaultIn>,
    /// [`Gen::jump_if`] is under an odd number of NOTs: a NULL string makes
    /// its comparison false where it stands (SQL: the predicate is not true).
    pub(super) negated: bool,
    /// Where `comm` is in `task_struct` when this program may read it with
    /// direct loads ([`Gen::allow_direct_comm`]); `None`: the helper.
    pub(super) task_comm: Option<i16>,
    /// The stack slot holding the pointer to the shared hook's per-event
    /// cache of helper results ([`Gen::take_event_cache`]); `None`: helpers
    /// are called.
    pub(super) event_cache: Option<i16>,
}

/// A program that may be loaded sleepable ([`super::fault_in`]): where its prologue and body are,
/// and the user strings its body reads.
pub(super) struct FaultIn {
    pub(super) prologue: Label,
    pub(super) body: Label,
    pub(super) reads: Vec<UserRead>,
}

/// One `str(ptr[, size[, len]])` of user memory the body reads.
pub(super) struct UserRead {
    pub(super) ptr: KExpr,
    pub(super) len: Option<KExpr>,
    pub(super) size: u32,
}

/// Helper results cached per event: each helper is called at most once.
pub(super) struct Reads {
    /// Where each materialized result lives.
    pub(super) cache: HashMap<Cached, Loc>,
    /// Callee-saved registers still free for caching helper results.
    pub(super) free_saved: Vec<Reg>,
}

/// A program's own entry in the event counters map ([`counters`]).
pub(super) struct Counters {
    /// Stack slot holding the pointer to this CPU's event counters (set by
    /// [`Gen::count_seen`], read by [`Gen::count_matched`]).
    pub(super) at: Option<i16>,
    /// This program's entry: its index in [`super::Compiled::programs`].
    pub(super) key: i32,
}

/// Map indexes a program needs beyond the fixed ones ([`MAP_CTL`], [`crate::contract::MAP_OUT`]).
pub(super) struct MapNumbers {
    /// Maps that go right after [`crate::contract::MAP_OUT`] once the program is
    /// emitted (the oracle's tap or a pairing's start map): maps
    /// the plan adds while emitting are numbered after them.
    pub(super) reserved: usize,
    /// Indexes of the stack-trace, scratch and counters maps ([`LateMaps`]).
    pub(super) late: LateMaps,
}

/// What a pairing's programs know of the start value.
#[derive(Default)]
pub(super) struct PairState {
    /// End program: stack offset of the copy of the start map value
    /// ([`crate::kexpr::KExpr::Stored`] loads from it).
    pub(super) stored_at: Option<i16>,
    /// End program with stored strings: the stack slot holding a
    /// pointer to the start value's layout ([`PairPlan::str_offset`]; the
    /// thread's task-storage slot, or this CPU's scratch copy of the hash
    /// value) and each stored string's offset from it ([`crate::kexpr::StrSrc::Stored`]).
    pub(super) stored_strs_at: Option<(i16, Vec<u32>)>,
    /// A `LEFT JOIN` pairing (its start side): the streamed rows carry the
    /// matched word ([`crate::contract::Outer`]).
    pub(super) outer: Option<PairPlan>,
}

pub(super) fn stack_err(e: ebql_bpf::StackError) -> CompileError {
    CompileError::Internal(format!("BPF stack: {e}"))
}

/// `ebql_` + the event name, syscall prefixes shortened, cut to the kernel's 15 characters.
pub(super) fn prog_name(event: &str) -> String {
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

pub(super) fn imm32(v: u64) -> Option<i32> {
    i32::try_from(v as i64).ok()
}

impl Gen {
    /// A syscall tracepoint on the raw syscall hook: its guard, first
    /// ([`crate::syscall_hook::emit_guard`]).
    pub(super) fn emit_hook_guard(&mut self, hook: Option<&RawHook>) -> Result<(), CompileError> {
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
    pub(super) fn finish(
        mut self,
        event: &ebql_catalog::EventSchema,
        hook: Option<&RawHook>,
    ) -> Result<ProgramSpec, CompileError> {
        let sleepable = self.sleepable();
        let direct_comm = self.reads.cache.contains_key(&Cached::CommDirect);
        let event_cache = self.event_cache.is_some();
        self.asm.bind(self.exit);
        self.asm.origin("exit");
        if sleepable {
            self.asm.call_kfunc(ebql_bpf::Kfunc::RcuReadUnlock);
        }
        self.asm
            .mov64(Reg::R0, Src::Imm(event.event.kind.exit_value()));
        self.asm.exit();
        let fault_in_bytes = self.end_fault_in(sleepable)?;
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
            sleepable,
            fault_in_bytes,
            direct_comm,
            event_cache,
        })
    }

    /// Emits a program's kernel filters (cheapest first) and its event
    /// counts: *seen* right after the leading pid/tid tests (so the threads
    /// the query does not select pay nothing for it), *matched* after the
    /// last filter.
    pub(super) fn emit_filters(&mut self, filters: &[(KPred, &str)]) -> Result<(), CompileError> {
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
            if self.task_comm.is_some() && attrs.contains(&SystemAttr::Comm) {
                // A filter only compares comm: the task's own bytes serve.
                self.materialize_direct_comm()?;
                attrs.retain(|a| *a != SystemAttr::Comm);
            }
            self.materialize(&attrs)?;
            if p.reads_str_by_helper() {
                // A failed read is counted in its window: read the generation
                // here, on every path, not inside the test's branches.
                self.materialize_gen()?;
            }
            self.jump_if(p, false, exit)?;
        }
        self.count_seen()?;
        self.count_matched()
    }

    /// Adds one to this CPU's *seen* counter of the program
    /// ([`counters::SEEN`], entry [`Counters::key`]) and keeps the
    /// pointer to its counters in a stack slot for [`Gen::count_matched`];
    /// does nothing the second time. The lookup with a constant key is
    /// inlined by the verifier (no helper call remains). Clobbers r0–r5.
    pub(super) fn count_seen(&mut self) -> Result<(), CompileError> {
        if self.counters.at.is_some() {
            return Ok(());
        }
        self.asm
            .origin("event counters: seen (an event of the query's threads at the hook)");
        // One slot holds the key for the lookup, then the pointer it returns.
        let slot = self.array_entry(self.maps.late.counters, self.counters.key, self.exit)?;
        self.asm.ldx(Size::DW, Reg::R1, Reg::R0, counters::SEEN);
        self.asm.alu64(AluOp::Add, Reg::R1, Src::Imm(1));
        self.asm.stx(Size::DW, Reg::R0, counters::SEEN, Reg::R1);
        self.asm.stx(Size::DW, Reg::R10, slot, Reg::R0);
        self.counters.at = Some(slot);
        Ok(())
    }

    /// r0 = entry `index` of the array map `map` (per-CPU: this CPU's);
    /// jumps to `none` when the lookup fails, which it never does for an
    /// index below the array's size, but the verifier wants the test. The
    /// lookup with a constant key is inlined by the verifier. Returns the
    /// key's 8-byte stack slot, free once this returns. Clobbers r0–r5.
    pub(super) fn array_entry(
        &mut self,
        map: usize,
        index: i32,
        none: Label,
    ) -> Result<i16, CompileError> {
        let key = self.stack.alloc(8, 8).map_err(stack_err)?;
        self.asm.st_imm(Size::W, Reg::R10, key, index);
        self.asm.ld_map_fd(Reg::R1, map as i32);
        self.asm.mov64(Reg::R2, Src::Reg(Reg::R10));
        self.asm.alu64(AluOp::Add, Reg::R2, Src::Imm(key as i32));
        self.asm.call(helper::MAP_LOOKUP_ELEM);
        self.asm.comment(
            "an index below the array's size: never NULL, but the verifier wants the test",
        );
        self.asm.jmp(JmpCond::Eq, Reg::R0, Src::Imm(0), none);
        Ok(key)
    }

    /// Right after a program's kernel filters: adds one to this CPU's
    /// *matched* counter ([`counters::MATCHED`]) through the pointer
    /// [`Gen::count_seen`] kept. Clobbers r1, r2.
    pub(super) fn count_matched(&mut self) -> Result<(), CompileError> {
        self.asm
            .origin("event counters: matched (passed the filters)");
        let at = self.counters_at()?;
        self.asm.ldx(Size::DW, Reg::R1, Reg::R10, at);
        self.asm.ldx(Size::DW, Reg::R2, Reg::R1, counters::MATCHED);
        self.asm.alu64(AluOp::Add, Reg::R2, Src::Imm(1));
        self.asm.stx(Size::DW, Reg::R1, counters::MATCHED, Reg::R2);
        Ok(())
    }

    /// Adds one to this CPU's anomaly counter at `off` ([`counters`])
    /// through the pointer [`Gen::count_seen`] kept. An atomic add, though
    /// the value is this CPU's: that is how the cost model tells code that
    /// counts an anomaly from the steady state (`cost::profile`), and it
    /// costs little on a line no other CPU writes. Clobbers r1, r2.
    pub(super) fn count_anomaly_per_cpu(&mut self, off: i16) -> Result<(), CompileError> {
        let at = self.counters_at()?;
        self.asm.ldx(Size::DW, Reg::R1, Reg::R10, at);
        self.asm.mov64(Reg::R2, Src::Imm(1));
        self.asm.atomic_add(Size::DW, Reg::R1, off, Reg::R2);
        Ok(())
    }

    /// The stack slot of the pointer to this CPU's event counters.
    fn counters_at(&self) -> Result<i16, CompileError> {
        self.counters
            .at
            .ok_or_else(|| CompileError::Internal("event counter used before seen".into()))
    }

    /// Adds one to the control map's u64 at `slot` (a counter over the whole run).
    pub(super) fn count_total(&mut self, slot: u32) {
        self.asm.ld_map_value(Reg::R1, MAP_CTL as i32, 0);
        self.asm.mov64(Reg::R2, Src::Imm(1));
        self.asm.atomic_add(Size::DW, Reg::R1, slot as i16, Reg::R2);
    }

    pub(super) fn new(
        free_saved: Vec<Reg>,
        window: Option<WindowSpec>,
        reserved: usize,
        late: LateMaps,
    ) -> Gen {
        let mut asm = Assembler::new();
        let exit = asm.new_label();
        Gen {
            window,
            asm,
            stack: StackAlloc::new(),
            exit,
            reads: Reads {
                cache: HashMap::new(),
                free_saved,
            },
            counters: Counters { at: None, key: 0 },
            maps: MapNumbers { reserved, late },
            pair: PairState::default(),
            count_str_failures: true,
            fault_in: None,
            negated: false,
            task_comm: None,
            event_cache: None,
        }
    }

    /// Lets this program's `comm` comparisons read `current->comm` with
    /// direct loads at `offset` ([`super::CodegenOptions::task_comm`]) when
    /// it is BTF-typed: a `tp_btf`, `fentry` or `fexit` program, or a
    /// syscall tracepoint moved to the tp_btf raw hook. Others keep
    /// `bpf_get_current_comm` (raw_tp and kprobe programs would read the
    /// task with `bpf_probe_read_kernel`, which costs about as much).
    pub(super) fn allow_direct_comm(
        &mut self,
        kind: ebql_catalog::EventKind,
        hook: Option<&RawHook>,
        offset: Option<u16>,
    ) {
        use ebql_catalog::EventKind as K;
        let btf_typed = match hook {
            Some(h) => h.direct,
            None => matches!(kind, K::TpBtf | K::Fentry | K::Fexit),
        };
        self.task_comm = offset
            .filter(|_| btf_typed)
            .and_then(|o| i16::try_from(o).ok())
            .filter(|o| o.checked_add(16).is_some());
    }

    /// Keeps r0 for the rest of the program: in a free callee-saved register
    /// (helper calls preserve it), else in a stack slot.
    pub(super) fn keep_r0(&mut self) -> Result<Loc, CompileError> {
        Ok(match self.reads.free_saved.pop() {
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

    /// Counts a drop in `pair` (the counter of this event's generation
    /// parity when time-windowed, see [`ctl`]), then jumps to `then`.
    pub(super) fn count_drop(&mut self, pair: u32, then: Label) -> Result<(), CompileError> {
        self.count_in(pair)?;
        self.asm.ja(then);
        Ok(())
    }

    /// Adds one to the counter pair `pair` of the control map (the counter
    /// of this event's generation parity when time-windowed). Clobbers r1, r2.
    pub(super) fn count_in(&mut self, pair: u32) -> Result<(), CompileError> {
        self.asm.ld_map_value(Reg::R1, MAP_CTL as i32, 0);
        if self.reads.cache.contains_key(&Cached::Gen) {
            self.load_cached(Cached::Gen, Reg::R2)?;
            self.asm.alu64(AluOp::And, Reg::R2, Src::Imm(1));
            self.asm.alu64(AluOp::Lsh, Reg::R2, Src::Imm(3));
            self.asm.alu64(AluOp::Add, Reg::R1, Src::Reg(Reg::R2));
        }
        self.asm.mov64(Reg::R2, Src::Imm(1));
        self.asm.atomic_add(Size::DW, Reg::R1, pair as i16, Reg::R2);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{compile, listing, section, PREAD};

    #[test]
    fn counters_follow_the_thread_filters_and_the_program_exits_with_zero() {
        let q = compile(&format!(
            "SELECT COUNT(*) FROM {PREAD} WHERE pid = 7 AND fd = 3"
        ));
        let l = listing(&q, 0);
        let seen = section(&l, "event counters: seen");
        assert_eq!(
            seen[1..5],
            [
                format!("r1 = map_fd({})", q.code.counters).as_str(),
                "r2 = r10",
                "r2 += -8",
                "call bpf_map_lookup_elem#1"
            ],
            "{l}"
        );
        let before = l.find("event counters: seen").unwrap();
        assert!(
            l.find("Filter: sys_enter_pread64.pid").unwrap() < before,
            "{l}"
        );
        assert!(
            before < l.find("Filter: sys_enter_pread64.fd").unwrap(),
            "{l}"
        );
        let matched = section(&l, "event counters: matched");
        assert_eq!(matched.len(), 4, "{l}");
        assert_eq!(section(&l, "exit"), ["r0 = 0", "exit"], "{l}");
    }

    #[test]
    fn an_always_false_filter_only_counts_what_it_sees() {
        // Longer than comm can be: the filter folds to false.
        let long = "a".repeat(20);
        let q = compile(&format!(
            "SELECT COUNT(*) FROM {PREAD} WHERE comm = '{long}'"
        ));
        let l = listing(&q, 0);
        let seen = section(&l, "event counters: seen");
        assert_eq!(seen.len(), 10, "{l}");
        assert_eq!(section(&l, "exit"), ["r0 = 0", "exit"], "{l}");
        assert!(!l.contains("Aggregate:"), "{l}");
    }
}
