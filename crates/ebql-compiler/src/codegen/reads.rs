//! Reads of event data: helper results cached once per event (pid, time,
//! comm, the window generation, stack ids, the parsed packet), BTF paths
//! and USDT operands.

use super::gen::{imm32, stack_err, Cached, Gen, Loc, CTX, EVAL_REGS};
use crate::contract::{ctl, MAP_CTL};
use crate::kexpr::{KExpr, KPred};
use crate::prepass::WindowSpec;
use crate::split::{KernelOutput, KernelPlan, ValueSrc};
use crate::CompileError;
use ebql_bpf::{helper, AluOp, Assembler, JmpCond, Label, Reg, Size, Src};
use ebql_catalog::SystemAttr;

/// `bpf_get_stackid` flag: the user-space stack (`BPF_F_USER_STACK`, bit 8).
pub(super) const BPF_F_USER_STACK: i32 = 1 << 8;

/// Stack columns (user: true) the expression reads.
pub(super) fn stack_reads(e: &KExpr, out: &mut Vec<bool>) {
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
pub(super) fn stack_reads_of<'a>(values: impl IntoIterator<Item = &'a ValueSrc>) -> Vec<bool> {
    let mut out = Vec::new();
    for v in values {
        if let ValueSrc::Int(e) = v {
            stack_reads(e, &mut out);
        }
    }
    out
}

/// True when the plan's filters or output read a task register
/// ([`ebql_catalog::Access::TaskRegs`]).
pub(super) fn plan_reads_user_regs(plan: &KernelPlan) -> bool {
    let output = match &plan.output {
        KernelOutput::Groups(spec) => {
            spec.keys.iter().any(|k| k.value.reads_user_regs())
                || spec.slots.iter().any(|s| {
                    s.exprs().any(KExpr::reads_user_regs)
                        || s.when.as_ref().is_some_and(KPred::reads_user_regs)
                })
        }
        KernelOutput::Stream { columns, latest } => {
            columns.iter().any(|(_, v, _)| v.reads_user_regs())
                || latest.iter().flatten().any(|k| k.value.reads_user_regs())
        }
    };
    output || plan.filters.iter().any(|(p, _)| p.reads_user_regs())
}

pub(super) fn cached_for(a: SystemAttr) -> Cached {
    match a {
        SystemAttr::Pid | SystemAttr::Tid => Cached::PidTgid,
        SystemAttr::Uid | SystemAttr::Gid => Cached::UidGid,
        SystemAttr::Cpu => Cached::Cpu,
        SystemAttr::Time => Cached::Time,
        SystemAttr::Cgroup => Cached::Cgroup,
        SystemAttr::Comm => Cached::Comm,
    }
}

impl Gen {
    /// Reads the window generation once per event (time windows only).
    pub(super) fn materialize_gen(&mut self) -> Result<(), CompileError> {
        if self.reads.cache.contains_key(&Cached::Gen)
            || !matches!(self.window, Some(WindowSpec::Time { .. }))
        {
            return Ok(());
        }
        self.materialize(&[SystemAttr::Time])?;
        self.asm.comment(
            "gen = ctl.gen, moved to the window its time falls in (see ctl::CUT); \
             read once: everything this event writes carries it",
        );
        self.asm.ld_map_value(Reg::R1, MAP_CTL as i32, 0);
        self.asm.ldx(Size::DW, Reg::R0, Reg::R1, ctl::GEN as i16);
        self.load_cached(Cached::Time, Reg::R4)?;
        let (not_before, done) = (self.asm.new_label(), self.asm.new_label());
        self.load_cut(0)?;
        self.asm
            .jmp(JmpCond::Ge, Reg::R4, Src::Reg(Reg::R3), not_before);
        self.asm.alu64(AluOp::Sub, Reg::R0, Src::Imm(1));
        self.asm.ja(done);
        self.asm.bind(not_before);
        self.settle_next_cut(done);
        self.asm.bind(done);
        let loc = self.keep_r0()?;
        self.reads.cache.insert(Cached::Gen, loc);
        Ok(())
    }

    /// r3 = the cut of generation r0 + `ahead` ([`ctl::cut_slot`]), with r1
    /// the control map's value. Clobbers r2.
    fn load_cut(&mut self, ahead: i32) -> Result<(), CompileError> {
        self.asm.mov64(Reg::R2, Src::Reg(Reg::R0));
        if ahead != 0 {
            self.asm.alu64(AluOp::Add, Reg::R2, Src::Imm(ahead));
        }
        self.asm.alu64(AluOp::And, Reg::R2, Src::Imm(3));
        self.asm.alu64(AluOp::Lsh, Reg::R2, Src::Imm(3));
        self.asm.mov64(Reg::R3, Src::Reg(Reg::R1));
        self.asm.alu64(AluOp::Add, Reg::R3, Src::Reg(Reg::R2));
        self.asm.ldx(Size::DW, Reg::R3, Reg::R3, ctl::CUT as i16);
        Ok(())
    }

    /// With r0 = g, r1 = the control map's value and r4 = the event's time
    /// at or after g's cut: r0 = g + 1 if the time is at or after g + 1's
    /// cut, else g, at `done` (bound right after this code). A cut not
    /// chosen yet keeps g, and its floor is raised past the time so that
    /// user space chooses a later cut (the protocol is [`ctl::CUT`]'s).
    /// Clobbers r1–r3, r5.
    fn settle_next_cut(&mut self, done: Label) {
        let a = &mut self.asm;
        let (chosen, keep) = (a.new_label(), a.new_label());
        a.comment("next cut: g + 1 if chosen and passed; if not chosen, raise its floor past time");
        a.mov64(Reg::R5, Src::Reg(Reg::R0));
        a.mov64(Reg::R2, Src::Reg(Reg::R0));
        a.alu64(AluOp::Add, Reg::R2, Src::Imm(1));
        a.alu64(AluOp::And, Reg::R2, Src::Imm(3));
        a.alu64(AluOp::Lsh, Reg::R2, Src::Imm(3));
        a.alu64(AluOp::Add, Reg::R2, Src::Reg(Reg::R1));
        a.ldx(Size::DW, Reg::R3, Reg::R2, ctl::CUT as i16);
        for _ in 0..ctl::CUT_ATTEMPTS {
            // r3 = the slot's value as last seen; r1 = it, r3 = its floor.
            a.jmp(JmpCond::Sge, Reg::R3, Src::Imm(0), chosen);
            a.mov64(Reg::R1, Src::Reg(Reg::R3));
            a.alu64(AluOp::Xor, Reg::R3, Src::Imm(-1));
            a.jmp(JmpCond::Le, Reg::R4, Src::Reg(Reg::R3), keep);
            a.mov64(Reg::R3, Src::Reg(Reg::R4));
            a.alu64(AluOp::Add, Reg::R3, Src::Imm(ctl::FLOOR_AHEAD_NS));
            a.alu64(AluOp::Xor, Reg::R3, Src::Imm(-1));
            a.mov64(Reg::R0, Src::Reg(Reg::R1));
            a.atomic_cmpxchg(Size::DW, Reg::R2, ctl::CUT as i16, Reg::R3);
            a.mov64(Reg::R3, Src::Reg(Reg::R0));
            a.jmp(JmpCond::Eq, Reg::R3, Src::Reg(Reg::R1), keep);
        }
        a.comment("lost every swap: keep g, counted");
        a.ld_map_value(Reg::R1, MAP_CTL as i32, 0);
        a.mov64(Reg::R3, Src::Imm(1));
        a.atomic_add(Size::DW, Reg::R1, ctl::CUT_RACES as i16, Reg::R3);
        a.bind(keep);
        a.mov64(Reg::R0, Src::Reg(Reg::R5));
        a.ja(done);
        a.bind(chosen);
        a.mov64(Reg::R0, Src::Reg(Reg::R5));
        a.jmp(JmpCond::Lt, Reg::R4, Src::Reg(Reg::R3), done);
        a.alu64(AluOp::Add, Reg::R0, Src::Imm(1));
    }

    /// Calls the helpers behind `attrs` that have not been called yet and keeps their results.
    pub(super) fn materialize(&mut self, attrs: &[SystemAttr]) -> Result<(), CompileError> {
        for &a in attrs {
            let c = cached_for(a);
            if self.reads.cache.contains_key(&c) {
                continue;
            }
            if c == Cached::Comm {
                let off = self.stack.alloc(16, 8).map_err(stack_err)?;
                self.asm.comment("comm = bpf_get_current_comm()");
                self.asm.mov64(Reg::R1, Src::Reg(Reg::R10));
                self.asm.alu64(AluOp::Add, Reg::R1, Src::Imm(off as i32));
                self.asm.mov64(Reg::R2, Src::Imm(16));
                self.asm.call(helper::GET_CURRENT_COMM);
                self.reads.cache.insert(c, Loc::Stack(off));
                continue;
            }
            let (id, what) = match c {
                Cached::PidTgid => (helper::GET_CURRENT_PID_TGID, "pid_tgid"),
                Cached::UidGid => (helper::GET_CURRENT_UID_GID, "uid_gid"),
                Cached::Cpu => (helper::GET_SMP_PROCESSOR_ID, "cpu"),
                Cached::Time => (helper::KTIME_GET_NS, "time"),
                Cached::Cgroup => (helper::GET_CURRENT_CGROUP_ID, "cgroup"),
                Cached::Comm
                | Cached::CommDirect
                | Cached::Gen
                | Cached::Stack(_)
                | Cached::Packet
                | Cached::TaskRegs => {
                    unreachable!("not a system attribute")
                }
            };
            self.asm.comment(format!(
                "{what} = {}()",
                ebql_bpf::helper::helper_name(id).unwrap_or("helper")
            ));
            self.call_cached(id);
            let loc = self.keep_r0()?;
            self.reads.cache.insert(c, loc);
        }
        Ok(())
    }

    /// At the program's entry (r2 untouched yet): keeps r2, the pointer to
    /// the shared hook's per-event cache ([`ebql_bpf::event_cache`]), in a
    /// stack slot when `enabled` and a program of `kind` can share its hook
    /// ([`ebql_catalog::EventKind::shares_hook`]).
    pub(super) fn take_event_cache(
        &mut self,
        kind: ebql_catalog::EventKind,
        enabled: bool,
    ) -> Result<(), CompileError> {
        if !enabled || !kind.shares_hook() {
            return Ok(());
        }
        let slot = self.stack.alloc(8, 8).map_err(stack_err)?;
        self.asm
            .comment("r2 = the shared hook's per-event cache of helper results");
        self.asm.stx(Size::DW, Reg::R10, slot, Reg::R2);
        self.event_cache = Some(slot);
        Ok(())
    }

    /// r0 = helper `id`'s result: from the per-event cache when this
    /// program has one and caches the helper (the first program of the
    /// event to ask calls it and stores the result), else by calling it.
    /// Clobbers r0–r5.
    fn call_cached(&mut self, id: i32) {
        use ebql_bpf::event_cache::{slot, FLAGS};
        let (Some(at), Some((bit, word))) = (self.event_cache, slot(id)) else {
            self.asm.call(id);
            return;
        };
        let (call, done) = (self.asm.new_label(), self.asm.new_label());
        self.asm
            .comment("cached for this event by an earlier query of the hook?");
        self.asm.ldx(Size::DW, Reg::R1, Reg::R10, at);
        self.asm.ldx(Size::DW, Reg::R0, Reg::R1, FLAGS);
        self.asm.alu64(AluOp::And, Reg::R0, Src::Imm(bit));
        self.asm.jmp(JmpCond::Eq, Reg::R0, Src::Imm(0), call);
        self.asm.ldx(Size::DW, Reg::R0, Reg::R1, word);
        self.asm.ja(done);
        self.asm.bind(call);
        self.asm.call(id);
        self.asm.ldx(Size::DW, Reg::R1, Reg::R10, at);
        self.asm.stx(Size::DW, Reg::R1, word, Reg::R0);
        self.asm.ldx(Size::DW, Reg::R2, Reg::R1, FLAGS);
        self.asm.alu64(AluOp::Or, Reg::R2, Src::Imm(bit));
        self.asm.stx(Size::DW, Reg::R1, FLAGS, Reg::R2);
        self.asm.bind(done);
    }

    /// Copies `current->comm` (16 bytes at [`Gen::task_comm`] in the task
    /// `bpf_get_current_task_btf` returns) to the stack with two direct
    /// loads, once per event, for comparisons ([`Cached::CommDirect`]).
    /// Nothing when the helper's padded copy is there already. Clobbers r0–r5.
    pub(super) fn materialize_direct_comm(&mut self) -> Result<(), CompileError> {
        if self.reads.cache.contains_key(&Cached::Comm)
            || self.reads.cache.contains_key(&Cached::CommDirect)
        {
            return Ok(());
        }
        let at = self.task_comm.ok_or_else(|| {
            CompileError::Internal("comm read directly without its offset".into())
        })?;
        let off = self.stack.alloc(16, 8).map_err(stack_err)?;
        self.asm.comment(
            "comm = current->comm by direct loads (bpf_get_current_task_btf): \
             compared up to its NUL only, as a kernel may leave stale bytes after it",
        );
        self.asm.call(helper::GET_CURRENT_TASK_BTF);
        for half in [0i16, 8] {
            self.asm.ldx(Size::DW, Reg::R1, Reg::R0, at + half);
            self.asm.stx(Size::DW, Reg::R10, off + half, Reg::R1);
        }
        self.reads.cache.insert(Cached::CommDirect, Loc::Stack(off));
        Ok(())
    }

    /// Calls `bpf_get_stackid` for each stack column read (user: true) not
    /// read yet and keeps its value: the id as a u32 (a negative errno such
    /// as -EFAULT or -EEXIST stays visible as its two's complement), for the
    /// user stack with the process id in the upper 32 bits (user-space
    /// symbolization needs the process; ids are per address sequence),
    /// except for an errno, which is the same for every process.
    pub(super) fn materialize_stacks(&mut self, stacks: &[bool]) -> Result<(), CompileError> {
        for &user in stacks {
            if self.reads.cache.contains_key(&Cached::Stack(user)) {
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
            let stacks = self.maps.late.stack.ok_or_else(|| {
                CompileError::Internal("a stack column without its stack-trace map".into())
            })?;
            self.asm.ld_map_fd(Reg::R2, stacks as i32);
            self.asm
                .mov64(Reg::R3, Src::Imm(if user { BPF_F_USER_STACK } else { 0 }));
            self.asm.call(helper::GET_STACKID);
            if user {
                // A negative errno (no stack recorded) is kept without the
                // process: every process's samples without a stack for one
                // reason are one group, as they print the same (issue 19, bug 4).
                let (no_stack, done) = (self.asm.new_label(), self.asm.new_label());
                self.asm.jmp(JmpCond::Slt, Reg::R0, Src::Imm(0), no_stack);
                self.asm.alu32(AluOp::Mov, Reg::R0, Src::Reg(Reg::R0));
                self.load_cached(Cached::PidTgid, Reg::R1)?;
                self.asm.alu64(AluOp::Rsh, Reg::R1, Src::Imm(32));
                self.asm.alu64(AluOp::Lsh, Reg::R1, Src::Imm(32));
                self.asm.alu64(AluOp::Or, Reg::R0, Src::Reg(Reg::R1));
                self.asm.ja(done);
                self.asm.bind(no_stack);
                self.asm.alu32(AluOp::Mov, Reg::R0, Src::Reg(Reg::R0));
                self.asm.bind(done);
            } else {
                self.asm.alu32(AluOp::Mov, Reg::R0, Src::Reg(Reg::R0));
            }
            let loc = self.keep_r0()?;
            self.reads.cache.insert(Cached::Stack(user), loc);
        }
        Ok(())
    }

    /// Parses the packet into its stack area once (at the TC hook, when the
    /// query reads a parsed packet column).
    pub(super) fn materialize_packet(&mut self) -> Result<(), CompileError> {
        if self.reads.cache.contains_key(&Cached::Packet) {
            return Ok(());
        }
        let base = self
            .stack
            .alloc(crate::packet::AREA_BYTES, 8)
            .map_err(stack_err)?;
        crate::packet::emit_parse(&mut self.asm, CTX, base);
        self.reads.cache.insert(Cached::Packet, Loc::Stack(base));
        Ok(())
    }

    /// Offset of the parsed packet's stack area.
    pub(super) fn packet_base(&self) -> Result<i16, CompileError> {
        match self.reads.cache.get(&Cached::Packet) {
            Some(Loc::Stack(off)) => Ok(*off),
            _ => Err(CompileError::Internal(
                "a packet column read before the packet was parsed".into(),
            )),
        }
    }

    pub(super) fn load_cached(&mut self, c: Cached, dst: Reg) -> Result<(), CompileError> {
        match self.reads.cache.get(&c) {
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

    /// Loads a USDT operand of `size` bytes into `regs[0]` (zero-extended;
    /// the caller wraps it to its type): a constant, a `pt_regs` slot, or
    /// user memory at register + displacement through
    /// `bpf_probe_read_user` (0 when the read faults: the helper zeroes its
    /// buffer). The helper call clobbers r0-r5, so the evaluation registers
    /// a caller may hold values in (those not in `regs`) are spilled around it.
    pub(super) fn usdt_arg(
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
                let comment = format!("bpf_probe_read_user({size} bytes at {arg})");
                self.probe_read(true, sz, regs, comment, |asm| {
                    asm.ldx(Size::DW, Reg::R3, CTX, *pt_regs as i16);
                    if *disp != 0 {
                        asm.alu64(AluOp::Add, Reg::R3, Src::Imm(*disp));
                    }
                })?;
            }
        }
        Ok(())
    }

    /// `regs[0]` = `sz` bytes read with `bpf_probe_read_user` (`user`) or
    /// `bpf_probe_read_kernel` at the address `addr` emits into R3, through
    /// an 8-byte stack slot. The evaluation registers not in `regs` (those of
    /// enclosing expressions) are spilled around the call, one slot each.
    pub(super) fn probe_read(
        &mut self,
        user: bool,
        sz: Size,
        regs: &[Reg],
        comment: String,
        addr: impl FnOnce(&mut Assembler),
    ) -> Result<(), CompileError> {
        self.spilled(regs, |g| {
            let buf = g.stack.alloc(8, 8).map_err(stack_err)?;
            g.asm.comment(comment);
            addr(&mut g.asm);
            g.asm.mov64(Reg::R1, Src::Reg(Reg::R10));
            g.asm.alu64(AluOp::Add, Reg::R1, Src::Imm(buf as i32));
            g.asm.mov64(Reg::R2, Src::Imm(sz.bytes() as i32));
            g.asm.call(if user {
                helper::PROBE_READ_USER
            } else {
                helper::PROBE_READ_KERNEL
            });
            g.asm.ldx(sz, regs[0], Reg::R10, buf);
            Ok(())
        })
    }

    /// Emits `helper_calls` (which clobber r0–r5) with the evaluation
    /// registers not in `regs` (those of enclosing expressions) spilled
    /// to the stack around them, one slot each.
    fn spilled(
        &mut self,
        regs: &[Reg],
        helper_calls: impl FnOnce(&mut Gen) -> Result<(), CompileError>,
    ) -> Result<(), CompileError> {
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
        helper_calls(self)?;
        for (&r, &off) in live.iter().zip(&slots) {
            self.asm.ldx(Size::DW, r, Reg::R10, off);
        }
        Ok(())
    }

    /// r0 = `bpf_task_pt_regs(bpf_get_current_task_btf())`, a BTF pointer
    /// to the current task's saved user registers. Clobbers r0–r5.
    fn call_task_pt_regs(&mut self) {
        self.asm.call(helper::GET_CURRENT_TASK_BTF);
        self.asm.mov64(Reg::R1, Src::Reg(Reg::R0));
        self.asm.call(helper::TASK_PT_REGS);
    }

    /// Keeps `bpf_task_pt_regs(bpf_get_current_task_btf())` for the rest
    /// of the program ([`Cached::TaskRegs`]), at its start, when the plan
    /// reads a task register ([`plan_reads_user_regs`]): one pair of helper
    /// calls per event instead of one per read. Clobbers r0–r5.
    pub(super) fn materialize_task_regs(&mut self) -> Result<(), CompileError> {
        if self.reads.cache.contains_key(&Cached::TaskRegs) {
            return Ok(());
        }
        self.asm
            .comment("task registers = bpf_task_pt_regs(bpf_get_current_task_btf())");
        self.call_task_pt_regs();
        let at = self.keep_r0()?;
        self.reads.cache.insert(Cached::TaskRegs, at);
        Ok(())
    }

    /// `regs[0]` = the `size`-byte register at `offset` in the current
    /// task's saved user registers ([`ebql_catalog::Access::TaskRegs`]): a
    /// direct load through the pointer `bpf_task_pt_regs` returns (a BTF
    /// pointer), kept at the program's start ([`Gen::materialize_task_regs`])
    /// or else fetched here with both helpers, the evaluation registers not
    /// in `regs` spilled around the calls.
    pub(super) fn load_task_reg(
        &mut self,
        offset: u32,
        size: u32,
        regs: &[Reg],
    ) -> Result<(), CompileError> {
        let leaf = Size::from_bytes(size as usize)
            .ok_or_else(|| CompileError::Internal(format!("register size {size}")))?;
        if self.reads.cache.contains_key(&Cached::TaskRegs) {
            let dst = regs[0];
            self.load_cached(Cached::TaskRegs, dst)?;
            let off = self.btf_offset(dst, offset);
            self.asm.ldx(leaf, dst, dst, off);
            return Ok(());
        }
        self.spilled(regs, |g| {
            g.asm.comment(format!(
                "task register at pt_regs+{offset} (bpf_task_pt_regs(bpf_get_current_task_btf()))"
            ));
            g.call_task_pt_regs();
            let off = g.btf_offset(Reg::R0, offset);
            g.asm.ldx(leaf, Reg::R0, Reg::R0, off);
            if regs[0] != Reg::R0 {
                g.asm.mov64(regs[0], Src::Reg(Reg::R0));
            }
            Ok(())
        })
    }

    /// Evaluates a BTF path ([`ebql_catalog::Access::Btf`]) into `regs[0]`:
    /// the argument's u64 from the context, then per step a load at
    /// `pointer + offset` (`size` bytes at the last step, a pointer before).
    /// `direct` (tp_btf, fentry/fexit): plain loads, which the verifier
    /// turns into fault-tolerant loads through `PTR_TO_BTF_ID`; else each
    /// load is a `bpf_probe_read_kernel` into a stack slot, around which the
    /// registers of enclosing expressions (the `EVAL_REGS` before `regs`) are spilled.
    pub(super) fn load_btf(
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
    pub(super) fn btf_offset(&mut self, r: Reg, offset: u32) -> i16 {
        match i16::try_from(offset) {
            Ok(o) => o,
            Err(_) => {
                self.asm.alu64(AluOp::Add, r, Src::Imm(offset as i32));
                0
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{compile, listing, PREAD};

    #[test]
    fn a_helper_result_is_read_once_per_event() {
        let q = compile(&format!(
            "SELECT pid, tid, COUNT(*) FROM {PREAD} WHERE pid = 7 GROUP BY pid, tid"
        ));
        let l = listing(&q, 0);
        assert_eq!(
            l.matches("call bpf_get_current_pid_tgid#14").count(),
            1,
            "{l}"
        );
        assert!(
            l.contains(";; pid_tgid = bpf_get_current_pid_tgid()"),
            "{l}"
        );
    }

    #[test]
    fn a_time_window_reads_the_generation_from_the_control_map() {
        let q = compile(&format!(
            "SELECT fd, count FROM {PREAD} WHERE pid = 7 WINDOW(time, 1000, 1000)"
        ));
        let l = listing(&q, 0);
        assert!(l.contains(";; gen = ctl.gen"), "{l}");
        assert!(l.contains("map_value(0)"), "{l}");
    }
}
