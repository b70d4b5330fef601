//! Label-resolving assembler (in the spirit of ply's direct BPF emitter:
//! emit instructions with symbolic jump targets, resolve them last).
//!
//! Misuse that can only be detected at emission time (bad atomic size, shift
//! out of range, writing `r10`, rebinding a label) is recorded and reported by
//! [`Assembler::finish`], so emission methods stay infallible.

use std::collections::BTreeMap;
use std::ops::Range;

use crate::insn::{self, AluOp, Insn, JmpCond, Reg, Size};

/// A jump target handed out by [`Assembler::new_label`]; bind it with
/// [`Assembler::bind`]. Only meaningful for the assembler that created it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Label(u32);

impl std::fmt::Display for Label {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "L{}", self.0)
    }
}

/// Second operand of ALU and jump instructions: a register or a 32-bit
/// immediate (sign-extended to 64 bits by 64-bit operations).
#[derive(Clone, Copy, Debug)]
pub enum Src {
    Reg(Reg),
    Imm(i32),
}

/// Errors found while finishing a program. `pc` values are slot indices.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AsmError {
    /// A jump refers to a label that was never bound (or belongs to another assembler).
    #[error("label {0} is used but never bound")]
    UnboundLabel(Label),
    /// [`Assembler::bind`] was called twice for the same label.
    #[error("label {0} is bound twice")]
    LabelBoundTwice(Label),
    /// The resolved jump offset does not fit the 16-bit `off` field.
    #[error("jump at pc {pc} needs offset {offset}, which does not fit in i16")]
    JumpTooFar { pc: usize, offset: i64 },
    /// A jump lands outside the program or inside an ld_imm64 (e.g. a label bound after the last insn).
    #[error("jump at pc {pc} targets {target}, which is not the start of an instruction")]
    BadJumpTarget { pc: usize, target: i64 },
    /// No path from pc 0 reaches this instruction; the verifier rejects such programs.
    #[error("instruction {pc} is unreachable (emitted by: {origin})")]
    Unreachable { pc: usize, origin: String },
    /// Some reachable path runs past the last instruction without `exit`/`ja`.
    #[error("control can fall off the end of the program (missing exit?)")]
    FallsOffEnd,
    /// An operand the kernel would reject (details in `reason`).
    #[error("invalid instruction at pc {pc}: {reason}")]
    InvalidInsn { pc: usize, reason: String },
    /// Nothing was emitted.
    #[error("empty program")]
    Empty,
}

/// Builds a program out of [`Insn`]s with symbolic labels, source origins and
/// comments; see [`Assembler::finish`] for the checks performed.
#[derive(Debug, Default)]
pub struct Assembler {
    insns: Vec<Insn>,
    /// (pc of a jump, its target label), patched in `finish`.
    fixups: Vec<(usize, Label)>,
    /// Bound pc of each label.
    labels: Vec<Option<usize>>,
    /// (first pc, text) each time the origin changed.
    origins: Vec<(usize, String)>,
    comments: BTreeMap<usize, String>,
    pending_comment: Option<String>,
    /// First misuse seen during emission.
    error: Option<AsmError>,
}

impl Assembler {
    /// An empty assembler.
    pub fn new() -> Self {
        Self::default()
    }

    /// A fresh, unbound label.
    pub fn new_label(&mut self) -> Label {
        self.labels.push(None);
        Label(self.labels.len() as u32 - 1)
    }

    /// Makes `l` point at the next emitted instruction. Binding twice is an
    /// error reported by `finish`.
    pub fn bind(&mut self, l: Label) {
        let pc = self.insns.len();
        match self.labels.get_mut(l.0 as usize) {
            Some(slot @ None) => *slot = Some(pc),
            Some(Some(_)) => self.fail(AsmError::LabelBoundTwice(l)),
            None => self.fail(AsmError::UnboundLabel(l)),
        }
    }

    /// `dst op= src` on 64 bits. For `AluOp::Neg` the `src` is ignored (`dst = -dst`).
    pub fn alu64(&mut self, op: AluOp, dst: Reg, src: Src) {
        self.alu(op, dst, src, 64);
    }

    /// `wdst op= src` on the low 32 bits; the upper 32 bits of `dst` are zeroed.
    pub fn alu32(&mut self, op: AluOp, dst: Reg, src: Src) {
        self.alu(op, dst, src, 32);
    }

    /// `dst = src` (64-bit; an immediate is sign-extended).
    pub fn mov64(&mut self, dst: Reg, src: Src) {
        self.alu64(AluOp::Mov, dst, src);
    }

    /// `dst = v` (two slots).
    pub fn ld_imm64(&mut self, dst: Reg, v: u64) {
        self.check_dst(dst);
        self.push_pair(insn::ld_imm64(dst, v));
    }

    /// `dst = &map` for the map with file descriptor `fd` (two slots, `src` = `BPF_PSEUDO_MAP_FD`).
    pub fn ld_map_fd(&mut self, dst: Reg, fd: i32) {
        self.check_dst(dst);
        self.push_pair(insn::ld_imm64_raw(dst, insn::BPF_PSEUDO_MAP_FD, fd, 0));
    }

    /// `dst = &value_of(map fd)[0] + off`, the direct value address of a
    /// single-entry array map (two slots, `src` = `BPF_PSEUDO_MAP_VALUE`,
    /// `imm` = fd, second-slot `imm` = `off` in bytes).
    pub fn ld_map_value(&mut self, dst: Reg, fd: i32, off: u32) {
        self.check_dst(dst);
        self.push_pair(insn::ld_imm64_raw(
            dst,
            insn::BPF_PSEUDO_MAP_VALUE,
            fd,
            off as i32,
        ));
    }

    /// `dst = *(size *)(base + off)`, zero-extended.
    pub fn ldx(&mut self, size: Size, dst: Reg, base: Reg, off: i16) {
        self.check_dst(dst);
        self.push(insn::ldx(size, dst, base, off));
    }

    /// `*(size *)(base + off) = src` (low `size` bytes of `src`).
    pub fn stx(&mut self, size: Size, base: Reg, off: i16, src: Reg) {
        self.push(insn::stx(size, base, off, src));
    }

    /// `*(size *)(base + off) = imm`.
    pub fn st_imm(&mut self, size: Size, base: Reg, off: i16, imm: i32) {
        self.push(insn::st_imm(size, base, off, imm));
    }

    /// `lock *(size *)(base + off) += src`; `size` must be `W` or `DW`.
    pub fn atomic_add(&mut self, size: Size, base: Reg, off: i16, src: Reg) {
        self.atomic(size, base, off, src, insn::BPF_ATOMIC_ADD);
    }

    /// Like [`Assembler::atomic_add`] but with `BPF_FETCH`: `src` receives the old value.
    pub fn atomic_fetch_add(&mut self, size: Size, base: Reg, off: i16, src: Reg) {
        self.check_dst(src);
        self.atomic(size, base, off, src, insn::BPF_ATOMIC_ADD | insn::BPF_FETCH);
    }

    /// `r0 = atomic_cmpxchg((size *)(base + off), r0, src)`: stores `src`
    /// if the memory holds r0; r0 receives the old value either way
    /// (instruction-set.rst "Atomic operations").
    pub fn atomic_cmpxchg(&mut self, size: Size, base: Reg, off: i16, src: Reg) {
        self.atomic(size, base, off, src, insn::BPF_CMPXCHG);
    }

    /// `if dst cond src goto target` (64-bit compare).
    pub fn jmp(&mut self, cond: JmpCond, dst: Reg, src: Src, target: Label) {
        self.fixups.push((self.insns.len(), target));
        self.push(match src {
            Src::Reg(s) => insn::jmp_reg(cond, dst, s, 0),
            Src::Imm(i) => insn::jmp_imm(cond, dst, i, 0),
        });
    }

    /// `goto target`.
    pub fn ja(&mut self, target: Label) {
        self.fixups.push((self.insns.len(), target));
        self.push(insn::ja(0));
    }

    /// Calls kernel helper `helper` (see [`crate::helper`]); clobbers `r0`-`r5`.
    pub fn call(&mut self, helper: i32) {
        self.push(insn::call(helper));
    }

    /// Calls kernel function `k` (its index as `imm`, patched to its BTF id
    /// at load: [`crate::kfunc`]); clobbers `r0`-`r5`.
    pub fn call_kfunc(&mut self, k: crate::Kfunc) {
        self.push(insn::Insn::new(
            insn::BPF_JMP | insn::BPF_CALL,
            0,
            insn::BPF_PSEUDO_KFUNC_CALL,
            0,
            k.index(),
        ));
    }

    /// Returns `r0`.
    pub fn exit(&mut self) {
        self.push(insn::exit());
    }

    /// Appends a raw slot unchecked (jump offsets are taken as-is, not
    /// resolved); `finish` still validates reachability and jump targets.
    pub fn emit(&mut self, insn: Insn) {
        self.push(insn);
    }

    /// Everything emitted from now on is attributed to this plan node / query fragment until the next call
    pub fn origin(&mut self, text: impl Into<String>) {
        self.origins.push((self.insns.len(), text.into()));
    }

    /// Comment attached to the next emitted instruction (shown as `;; text` in
    /// listings). Several comments before one instruction are kept as separate lines.
    pub fn comment(&mut self, text: impl Into<String>) {
        let text = text.into();
        match &mut self.pending_comment {
            Some(c) => {
                c.push('\n');
                c.push_str(&text);
            }
            None => self.pending_comment = Some(text),
        }
    }

    /// Number of 8-byte slots emitted so far (ld_imm64 counts 2).
    pub fn len(&self) -> usize {
        self.insns.len()
    }

    /// True if nothing was emitted yet.
    pub fn is_empty(&self) -> bool {
        self.insns.is_empty()
    }

    /// Resolve labels (offset = target - (pc + 1), in slots), check every label bound, offsets fit i16,
    /// the program ends in exit/ja (no fall-through off the end), and EVERY instruction is reachable
    /// (the verifier rejects unreachable insns: do a CFG walk; return AsmError::Unreachable{pc, origin}).
    ///
    /// Errors recorded during emission are returned first.
    pub fn finish(mut self) -> Result<Program, AsmError> {
        if let Some(e) = self.error.take() {
            return Err(e);
        }
        if self.insns.is_empty() {
            return Err(AsmError::Empty);
        }
        let len = self.insns.len();
        for &(pc, label) in &self.fixups {
            let target = self
                .labels
                .get(label.0 as usize)
                .copied()
                .flatten()
                .ok_or(AsmError::UnboundLabel(label))?;
            let offset = target as i64 - (pc as i64 + 1);
            self.insns[pc].off =
                i16::try_from(offset).map_err(|_| AsmError::JumpTooFar { pc, offset })?;
        }

        let mut origins = Vec::new();
        for (k, (start, text)) in self.origins.iter().enumerate() {
            let end = self.origins.get(k + 1).map_or(len, |(s, _)| *s);
            if end > *start {
                origins.push((*start..end, text.clone()));
            }
        }
        let program = Program {
            insns: self.insns,
            origins,
            comments: self.comments,
        };
        check_control_flow(&program)?;
        Ok(program)
    }

    fn alu(&mut self, op: AluOp, dst: Reg, src: Src, bits: i32) {
        self.check_dst(dst);
        let make: fn(AluOp, Reg, i32) -> Insn = if bits == 64 {
            insn::alu64_imm
        } else {
            insn::alu32_imm
        };
        let insn = match (op, src) {
            (AluOp::Neg, _) => make(op, dst, 0),
            (AluOp::Lsh | AluOp::Rsh | AluOp::Arsh, Src::Imm(i)) if !(0..bits).contains(&i) => {
                return self.invalid(format!("shift by {i} on a {bits}-bit operand"));
            }
            (AluOp::Div | AluOp::Mod, Src::Imm(0)) => {
                return self.invalid("division by constant zero".into())
            }
            (_, Src::Imm(i)) => make(op, dst, i),
            (_, Src::Reg(s)) if bits == 64 => insn::alu64_reg(op, dst, s),
            (_, Src::Reg(s)) => insn::alu32_reg(op, dst, s),
        };
        self.push(insn);
    }

    fn atomic(&mut self, size: Size, base: Reg, off: i16, src: Reg, op: i32) {
        if !matches!(size, Size::W | Size::DW) {
            return self.invalid(format!("atomic operations need W or DW, not {size:?}"));
        }
        self.push(insn::atomic(size, base, off, src, op));
    }

    fn check_dst(&mut self, dst: Reg) {
        if dst == Reg::R10 {
            self.invalid("r10 (frame pointer) is read-only".into());
        }
    }

    fn invalid(&mut self, reason: String) {
        let pc = self.insns.len();
        self.fail(AsmError::InvalidInsn { pc, reason });
    }

    fn fail(&mut self, e: AsmError) {
        self.error.get_or_insert(e);
    }

    fn push(&mut self, insn: Insn) {
        if let Some(c) = self.pending_comment.take() {
            self.comments.insert(self.insns.len(), c);
        }
        self.insns.push(insn);
    }

    fn push_pair(&mut self, pair: [Insn; 2]) {
        self.push(pair[0]);
        self.insns.push(pair[1]);
    }
}

/// Successors of the instruction at `pc`: (fall-through pc if any, jump target if any).
fn successors(insns: &[Insn], pc: usize) -> (Option<i64>, Option<i64>) {
    let i = insns[pc];
    let next = pc as i64 + 1;
    if i.is_ld_imm64() {
        return (Some(next + 1), None);
    }
    let (class, op) = (i.class(), i.code & 0xf0);
    if class != insn::BPF_JMP && class != insn::BPF_JMP32 {
        return (Some(next), None);
    }
    match op {
        insn::BPF_EXIT if class == insn::BPF_JMP => (None, None),
        insn::BPF_CALL if class == insn::BPF_JMP && i.src == insn::BPF_PSEUDO_CALL => {
            (Some(next), Some(next + i.imm as i64))
        }
        insn::BPF_CALL if class == insn::BPF_JMP => (Some(next), None),
        // JMP32 | JA ("gotol") keeps its 32-bit offset in imm.
        insn::BPF_JA if class == insn::BPF_JMP32 => (None, Some(next + i.imm as i64)),
        insn::BPF_JA => (None, Some(next + i.off as i64)),
        _ => (Some(next), Some(next + i.off as i64)),
    }
}

/// Depth-first walk from pc 0 checking jump targets, fall-through off the end
/// and reachability of every instruction.
fn check_control_flow(p: &Program) -> Result<(), AsmError> {
    let len = p.insns.len();
    // Which slots start an instruction (second halves of ld_imm64 do not).
    let mut starts = vec![false; len];
    let mut pc = 0;
    while pc < len {
        starts[pc] = true;
        if p.insns[pc].is_ld_imm64() {
            if pc + 1 == len {
                return Err(AsmError::InvalidInsn {
                    pc,
                    reason: "truncated ld_imm64".into(),
                });
            }
            pc += 2;
        } else {
            pc += 1;
        }
    }

    let mut reached = vec![false; len];
    let mut work = vec![0usize];
    while let Some(pc) = work.pop() {
        if reached[pc] {
            continue;
        }
        reached[pc] = true;
        if p.insns[pc].is_ld_imm64() {
            reached[pc + 1] = true;
        }
        let (fall, jump) = successors(&p.insns, pc);
        if let Some(next) = fall {
            if next as usize >= len {
                return Err(AsmError::FallsOffEnd);
            }
            work.push(next as usize);
        }
        if let Some(target) = jump {
            if target < 0 || target as usize >= len || !starts[target as usize] {
                return Err(AsmError::BadJumpTarget { pc, target });
            }
            work.push(target as usize);
        }
    }
    match reached.iter().position(|r| !r) {
        Some(pc) => Err(AsmError::Unreachable {
            pc,
            origin: p.origin_of(pc).unwrap_or("<no origin>").to_string(),
        }),
        None => Ok(()),
    }
}

/// A finished, checked program.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Program {
    /// The slots, jump offsets resolved.
    pub insns: Vec<Insn>,
    /// Non-empty, ascending slot ranges and the origin text they were emitted under.
    pub origins: Vec<(Range<usize>, String)>,
    /// Comment text (lines separated by `\n`) keyed by the pc it precedes.
    pub comments: BTreeMap<usize, String>,
}

impl Program {
    /// Little-endian bytes for `BPF_PROG_LOAD` (`8 * insns.len()` bytes).
    pub fn bytes(&self) -> Vec<u8> {
        insn::encode_program(&self.insns)
    }

    /// Origin text of the instruction at slot `pc`, if one was set (binary search).
    pub fn origin_of(&self, pc: usize) -> Option<&str> {
        let k = self.origins.partition_point(|(r, _)| r.end <= pc);
        let (range, text) = self.origins.get(k)?;
        range.contains(&pc).then_some(text.as_str())
    }

    /// Human-readable listing: `;; origin` whenever the origin changes,
    /// indented `;; comment` lines, then `{pc:>4}: {disassembly}` per instruction.
    pub fn listing(&self) -> String {
        let mut out = String::new();
        let mut last_origin = None;
        for (pc, text) in crate::disasm::disassemble(&self.insns) {
            let origin = self.origin_of(pc);
            match origin {
                Some(o) if origin != last_origin => out.push_str(&format!(";; {o}\n")),
                _ => {}
            }
            last_origin = origin;
            if let Some(c) = self.comments.get(&pc) {
                for line in c.lines() {
                    out.push_str(&format!("      ;; {line}\n"));
                }
            }
            out.push_str(&format!("{pc:>4}: {text}\n"));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::helper;
    use Reg::*;

    #[test]
    fn minimal_program_bytes() {
        let mut a = Assembler::new();
        a.mov64(R0, Src::Imm(0));
        a.exit();
        let p = a.finish().unwrap();
        assert_eq!(
            p.bytes(),
            [0xb7, 0, 0, 0, 0, 0, 0, 0, 0x95, 0, 0, 0, 0, 0, 0, 0]
        );
    }

    #[test]
    fn forward_and_backward_labels() {
        let mut a = Assembler::new();
        let (top, out, done) = (a.new_label(), a.new_label(), a.new_label());
        a.mov64(R0, Src::Imm(0)); // 0
        a.bind(top);
        a.alu64(AluOp::Add, R0, Src::Imm(1)); // 1
        a.jmp(JmpCond::Ge, R0, Src::Reg(R1), out); // 2 -> 5: off +2 (forward)
        a.ja(top); // 3 -> 1: off -3 (backward)
        a.bind(done);
        a.exit(); // 4, reached only from pc 6
        a.bind(out);
        a.jmp(JmpCond::Eq, R0, Src::Imm(7), top); // 5 -> 1: off -5
        a.ja(done); // 6 -> 4: off -3
        let p = a.finish().unwrap();
        assert_eq!(p.insns[2].to_bytes(), [0x3d, 0x10, 2, 0, 0, 0, 0, 0]);
        assert_eq!(p.insns[3].to_bytes(), [0x05, 0, 0xfd, 0xff, 0, 0, 0, 0]);
        assert_eq!(p.insns[5].to_bytes(), [0x15, 0, 0xfb, 0xff, 7, 0, 0, 0]);
        assert_eq!(p.insns[6].to_bytes(), [0x05, 0, 0xfd, 0xff, 0, 0, 0, 0]);
    }

    #[test]
    fn jump_across_ld_imm64_counts_two_slots() {
        let mut a = Assembler::new();
        let skip = a.new_label();
        a.mov64(R0, Src::Imm(0)); // 0
        a.jmp(JmpCond::Ne, R1, Src::Imm(3), skip); // 1
        a.ld_imm64(R0, 0x10); // 2,3
        a.ld_map_fd(R2, 5); // 4,5
        a.bind(skip);
        a.exit(); // 6
        let p = a.finish().unwrap();
        assert_eq!(p.insns[1].to_bytes(), [0x55, 0x01, 4, 0, 3, 0, 0, 0]);
        assert_eq!(p.insns[2].to_bytes(), [0x18, 0x00, 0, 0, 0x10, 0, 0, 0]);
        assert_eq!(p.insns[4].to_bytes(), [0x18, 0x12, 0, 0, 5, 0, 0, 0]);
        assert_eq!(p.insns[5].to_bytes(), [0; 8]);
    }

    #[test]
    fn map_value_and_atomics() {
        let mut a = Assembler::new();
        a.ld_map_value(R1, 7, 24);
        a.mov64(R2, Src::Imm(1));
        a.atomic_add(Size::DW, R1, 0, R2);
        a.atomic_fetch_add(Size::W, R10, -4, R2);
        a.mov64(R0, Src::Imm(0));
        a.exit();
        let p = a.finish().unwrap();
        assert_eq!(p.insns[0].to_bytes(), [0x18, 0x21, 0, 0, 7, 0, 0, 0]);
        assert_eq!(p.insns[1].to_bytes(), [0, 0, 0, 0, 24, 0, 0, 0]);
        assert_eq!(p.insns[3].to_bytes(), [0xdb, 0x21, 0, 0, 0x00, 0, 0, 0]);
        assert_eq!(
            p.insns[4].to_bytes(),
            [0xc3, 0x2a, 0xfc, 0xff, 0x01, 0, 0, 0]
        );
    }

    #[test]
    fn label_errors() {
        let mut a = Assembler::new();
        let l = a.new_label();
        a.jmp(JmpCond::Eq, R1, Src::Imm(0), l);
        a.exit();
        assert_eq!(a.finish().unwrap_err(), AsmError::UnboundLabel(l));

        let mut a = Assembler::new();
        let l = a.new_label();
        a.bind(l);
        a.exit();
        a.bind(l);
        assert_eq!(a.finish().unwrap_err(), AsmError::LabelBoundTwice(l));

        // Label bound after the last instruction.
        let mut a = Assembler::new();
        let end = a.new_label();
        a.ja(end);
        a.bind(end);
        assert_eq!(
            a.finish().unwrap_err(),
            AsmError::BadJumpTarget { pc: 0, target: 1 }
        );
    }

    #[test]
    fn jump_too_far() {
        let mut a = Assembler::new();
        let far = a.new_label();
        a.mov64(R0, Src::Imm(0));
        a.jmp(JmpCond::Eq, R1, Src::Imm(0), far);
        for _ in 0..40_000 {
            a.mov64(R0, Src::Imm(0));
        }
        a.bind(far);
        a.exit();
        assert_eq!(
            a.finish().unwrap_err(),
            AsmError::JumpTooFar {
                pc: 1,
                offset: 40_000
            }
        );
    }

    #[test]
    fn unreachable_is_reported_with_origin() {
        let mut a = Assembler::new();
        a.origin("filter");
        a.mov64(R0, Src::Imm(0));
        a.exit();
        a.origin("projection");
        a.mov64(R0, Src::Imm(1)); // dead
        a.exit();
        let err = a.finish().unwrap_err();
        assert_eq!(
            err,
            AsmError::Unreachable {
                pc: 2,
                origin: "projection".into()
            }
        );

        // Dead code skipped by an unconditional jump.
        let mut a = Assembler::new();
        let l = a.new_label();
        a.mov64(R0, Src::Imm(0));
        a.ja(l);
        a.ld_imm64(R1, 1);
        a.bind(l);
        a.exit();
        assert!(matches!(
            a.finish(),
            Err(AsmError::Unreachable { pc: 2, .. })
        ));
    }

    #[test]
    fn fall_off_end() {
        let mut a = Assembler::new();
        a.mov64(R0, Src::Imm(0));
        assert_eq!(a.finish().unwrap_err(), AsmError::FallsOffEnd);

        // The last instruction is a conditional jump: its fall-through leaves the program.
        let mut a = Assembler::new();
        let l = a.new_label();
        a.bind(l);
        a.mov64(R0, Src::Imm(0));
        a.jmp(JmpCond::Eq, R0, Src::Imm(0), l);
        assert_eq!(a.finish().unwrap_err(), AsmError::FallsOffEnd);

        assert_eq!(Assembler::new().finish().unwrap_err(), AsmError::Empty);
    }

    #[test]
    fn raw_jump_into_ld_imm64_is_rejected() {
        let mut a = Assembler::new();
        a.emit(insn::jmp_imm(JmpCond::Eq, R1, 0, 1)); // 0 -> 2, the second slot
        a.ld_imm64(R0, 5); // 1,2
        a.exit(); // 3
        assert_eq!(
            a.finish().unwrap_err(),
            AsmError::BadJumpTarget { pc: 0, target: 2 }
        );
    }

    #[test]
    fn operand_misuse() {
        let cases: Vec<fn(&mut Assembler)> = vec![
            |a| a.atomic_add(Size::B, R10, -8, R1),
            |a| a.alu64(AluOp::Lsh, R1, Src::Imm(64)),
            |a| a.alu32(AluOp::Arsh, R1, Src::Imm(32)),
            |a| a.alu64(AluOp::Div, R1, Src::Imm(0)),
            |a| a.mov64(R10, Src::Imm(0)),
            |a| a.ldx(Size::DW, R10, R1, 0),
        ];
        for f in cases {
            let mut a = Assembler::new();
            a.mov64(R0, Src::Imm(0));
            f(&mut a);
            a.exit();
            assert!(matches!(
                a.finish(),
                Err(AsmError::InvalidInsn { pc: 1, .. })
            ));
        }
    }

    #[test]
    fn alu_encodings_via_assembler() {
        let mut a = Assembler::new();
        a.alu64(AluOp::Neg, R3, Src::Reg(R4)); // src ignored
        a.alu32(AluOp::Mov, R1, Src::Reg(R2));
        a.alu32(AluOp::Add, R1, Src::Imm(-1));
        a.alu64(AluOp::Rsh, R1, Src::Imm(63));
        a.exit();
        let p = a.finish().unwrap();
        assert_eq!(p.insns[0].to_bytes(), [0x87, 0x03, 0, 0, 0, 0, 0, 0]);
        assert_eq!(p.insns[1].to_bytes(), [0xbc, 0x21, 0, 0, 0, 0, 0, 0]);
        assert_eq!(
            p.insns[2].to_bytes(),
            [0x04, 0x01, 0, 0, 0xff, 0xff, 0xff, 0xff]
        );
        assert_eq!(p.insns[3].to_bytes(), [0x77, 0x01, 0, 0, 63, 0, 0, 0]);
    }

    #[test]
    fn origins_comments_and_listing() {
        let mut a = Assembler::new();
        let miss = a.new_label();
        a.origin("scan: kprobe/do_sys_open");
        a.comment("key = cpu");
        a.call(helper::GET_SMP_PROCESSOR_ID);
        a.stx(Size::W, R10, -4, R0);
        a.origin("aggregate: count(*)");
        a.ld_map_fd(R1, 3);
        a.mov64(R2, Src::Reg(R10));
        a.alu64(AluOp::Add, R2, Src::Imm(-4));
        a.call(helper::MAP_LOOKUP_ELEM);
        a.comment("NULL check");
        a.comment("required by the verifier");
        a.jmp(JmpCond::Eq, R0, Src::Imm(0), miss);
        a.mov64(R1, Src::Imm(1));
        a.atomic_add(Size::DW, R0, 0, R1);
        a.bind(miss);
        a.mov64(R0, Src::Imm(0));
        a.exit();
        a.origin("unused"); // empty range, dropped
        let p = a.finish().unwrap();

        assert_eq!(p.origin_of(1), Some("scan: kprobe/do_sys_open"));
        assert_eq!(p.origin_of(3), Some("aggregate: count(*)"));
        assert_eq!(p.origin_of(99), None);
        assert_eq!(p.origins.len(), 2);
        assert_eq!(p.origins[1].0, 2..12);
        let expected = "\
;; scan: kprobe/do_sys_open
      ;; key = cpu
   0: call bpf_get_smp_processor_id#8
   1: *(u32 *)(r10 - 4) = r0
;; aggregate: count(*)
   2: r1 = map_fd(3)
   4: r2 = r10
   5: r2 += -4
   6: call bpf_map_lookup_elem#1
      ;; NULL check
      ;; required by the verifier
   7: if r0 == 0x0 goto +2 <pc 10>
   8: r1 = 1
   9: lock *(u64 *)(r0 + 0) += r1
  10: r0 = 0
  11: exit
";
        assert_eq!(p.listing(), expected);
    }
}
