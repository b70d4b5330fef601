//! Expressions: integer evaluation into registers ([`Gen::eval`]), predicates
//! as conditional jumps ([`Gen::jump_if`]), and the constant folding that
//! keeps dead code out ([`simplify`]).

use super::gen::{imm32, stack_err, Cached, Gen, Loc, CTX, EVAL_REGS};
use super::reads::cached_for;
use crate::kexpr::{ArithOp, CmpOp, IntType, KExpr, KPred, StrSrc};
use crate::CompileError;
use ebql_bpf::{AluOp, JmpCond, Label, Reg, Size, Src};
use ebql_catalog::SystemAttr;

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

pub(super) fn jmp_cond(op: CmpOp, signed: bool) -> JmpCond {
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

impl Gen {
    /// Wraps `r` to the width of `ty`.
    pub(super) fn normalize(&mut self, r: Reg, ty: IntType) {
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

    /// Replaces the address in `regs[0]` by the `ty` integer stored there
    /// (user or kernel memory; 0 when the read faults: the helper zeroes its
    /// buffer), wrapped to `ty`. The helper call clobbers r0–r5, so the
    /// evaluation registers a caller may hold values in (those not in
    /// `regs`) are spilled around it, as for USDT memory operands.
    pub(super) fn load_at(
        &mut self,
        user: bool,
        ty: IntType,
        regs: &[Reg],
    ) -> Result<(), CompileError> {
        let dst = regs[0];
        let size = (ty.bits / 8) as u32;
        let sz = Size::from_bytes(size as usize)
            .ok_or_else(|| CompileError::Internal(format!("load of {size} bytes")))?;
        let comment = format!(
            "bpf_probe_read_{}({size} bytes at the address)",
            if user { "user" } else { "kernel" }
        );
        self.probe_read(user, sz, regs, comment, |asm| {
            asm.mov64(Reg::R3, Src::Reg(dst))
        })?;
        self.normalize(dst, ty);
        Ok(())
    }

    /// Evaluates `e` into `regs[0]`, using the rest of `regs` as temporaries.
    pub(super) fn eval(&mut self, e: &KExpr, regs: &[Reg]) -> Result<(), CompileError> {
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
                access: ebql_catalog::Access::TaskRegs { offset },
                size,
                ty,
                ..
            } => {
                self.load_task_reg(*offset, *size, regs)?;
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
                let at = self.pair.stored_at.ok_or_else(|| {
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
    pub(super) fn jump_if(
        &mut self,
        p: &KPred,
        want: bool,
        target: Label,
    ) -> Result<(), CompileError> {
        match p {
            KPred::Const(b) => {
                if *b == want {
                    self.asm.ja(target);
                }
            }
            KPred::Not(q) => {
                self.negated = !self.negated;
                self.jump_if(q, !want, target)?;
                self.negated = !self.negated;
            }
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
                // A NULL string (a failed read) makes the comparison false
                // where it stands, under its NOTs (SQL: never true): this
                // test jumps on NULL exactly when its value there, true under
                // an odd number of NOTs, is `want`.
                let past = self.asm.new_label();
                let on_null = if self.negated == want { target } else { past };
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
                    StrSrc::Comm => match (self.reads.cache.get(&Cached::Comm))
                        .or_else(|| self.reads.cache.get(&Cached::CommDirect))
                    {
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
                        self.asm.jmp(JmpCond::Slt, Reg::R0, Src::Imm(0), on_null);
                        (Reg::R10, buf as i32)
                    }
                    StrSrc::Bytes { .. } => {
                        return Err(CompileError::Internal(format!(
                            "`{src}` compared in the kernel"
                        )))
                    }
                    StrSrc::Packet { .. } => (
                        Reg::R10,
                        (self.packet_base()?
                            + crate::packet::offset(ebql_catalog::source::tc::PacketField::Payload))
                            as i32,
                    ),
                    StrSrc::Stored { index, of, .. } => {
                        let (slot, offsets) =
                            self.pair.stored_strs_at.clone().ok_or_else(|| {
                                CompileError::Internal(
                                    "a start string outside a pairing's end program".into(),
                                )
                            })?;
                        self.asm.ldx(Size::DW, Reg::R2, Reg::R10, slot);
                        let at = offsets[*index] as i32;
                        if let Some(size) = of.helper_buffer() {
                            self.asm.comment("the start string's NULL flag");
                            self.asm
                                .ldx(Size::B, Reg::R1, Reg::R2, (at + size as i32 + 1) as i16);
                            self.asm.jmp(JmpCond::Ne, Reg::R1, Src::Imm(0), on_null);
                        }
                        (Reg::R2, at)
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
                self.asm.bind(past);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{compile, section, PREAD};
    use super::simplify;
    use crate::kexpr::{IntType, KExpr, KPred};

    #[test]
    fn a_pid_filter_calls_the_pid_helper_then_compares() {
        let q = compile(&format!("SELECT COUNT(*) FROM {PREAD} WHERE pid = 4242"));
        let l = super::super::testing::listing(&q, 0);
        let f = section(&l, "Filter: sys_enter_pread64.pid = UInt32(4242)");
        assert_eq!(
            f[..4],
            [
                "call bpf_get_current_pid_tgid#14",
                "r7 = r0",
                "r1 = r7",
                "r1 >>= 32"
            ],
            "{l}"
        );
        assert!(f[4].starts_with("if r1 != 0x1092 goto"), "{l}");
        assert_eq!(f.len(), 5, "{l}");
    }

    #[test]
    fn an_or_jumps_past_the_rest_on_its_first_true_term() {
        // DataFusion rewrites `fd IN (3, 5)` into `fd = 3 OR fd = 5`.
        let q = compile(&format!("SELECT COUNT(*) FROM {PREAD} WHERE fd IN (3, 5)"));
        let l = super::super::testing::listing(&q, 0);
        let f = section(&l, "Filter: sys_enter_pread64.fd = UInt32(3) OR");
        assert_eq!(f.len(), 4, "{l}");
        assert_eq!(f[0], "r1 = *(u32 *)(r6 + 16)", "{l}");
        assert_eq!(f[1], "if r1 == 0x3 goto +2 <pc 16>", "{l}");
        assert_eq!(f[2], "r1 = *(u32 *)(r6 + 16)", "{l}");
        assert!(f[3].starts_with("if r1 != 0x5 goto"), "{l}");
    }

    #[test]
    fn simplify_folds_constants() {
        let x = KPred::Cmp {
            op: crate::kexpr::CmpOp::Eq,
            l: KExpr::Const(1, IntType::U64),
            r: KExpr::Const(2, IntType::U64),
            signed: false,
        };
        let and = KPred::And(vec![KPred::Const(true), x.clone()]);
        assert_eq!(simplify(and), x);
        let or = KPred::Or(vec![x.clone(), KPred::Const(true)]);
        assert_eq!(simplify(or), KPred::Const(true));
        let not = KPred::Not(Box::new(KPred::And(vec![KPred::Const(false), x.clone()])));
        assert_eq!(simplify(not), KPred::Const(true));
        let empty_in = KPred::In {
            e: KExpr::Const(1, IntType::U64),
            list: vec![],
            negated: true,
        };
        assert_eq!(simplify(empty_in), KPred::Const(true));
    }
}
