//! Disassembler producing bpftool / llvm-objdump style text, e.g.
//! `r0 = *(u64 *)(r1 + 16)`, `if r0 != 0x3 goto +5 <pc 12>`,
//! `call bpf_map_lookup_elem#1`, `lock *(u64 *)(r10 - 8) += r1`.
//!
//! Following the kernel's `kernel/bpf/disasm.c`, ALU and store immediates
//! are decimal, jump-compare and ld_imm64 immediates hexadecimal.

use crate::helper::helper_name;
use crate::insn::*;

/// Text of the instruction starting at slot `pc` and the number of slots it
/// uses (2 for ld_imm64, else 1). Undecodable slots yield `invalid ...` text.
/// Panics if `pc >= insns.len()`.
pub fn disassemble_one(insns: &[Insn], pc: usize) -> (String, usize) {
    let i = insns[pc];
    let text = match i.class() {
        BPF_ALU | BPF_ALU64 => fmt_alu(&i),
        BPF_LDX if i.code & 0xe0 == BPF_MEM => {
            format!("r{} = *({} *)({})", i.dst, ty(&i), addr(i.src, i.off))
        }
        BPF_STX if i.code & 0xe0 == BPF_MEM => {
            format!("*({} *)({}) = r{}", ty(&i), addr(i.dst, i.off), i.src)
        }
        BPF_ST if i.code & 0xe0 == BPF_MEM => {
            format!("*({} *)({}) = {}", ty(&i), addr(i.dst, i.off), i.imm)
        }
        BPF_STX if i.code & 0xe0 == BPF_ATOMIC => fmt_atomic(&i),
        BPF_LD if i.is_ld_imm64() => return fmt_ld_imm64(insns, pc),
        BPF_JMP | BPF_JMP32 => fmt_jmp(&i, pc),
        _ => invalid(&i),
    };
    (text, 1)
}

/// All instructions as `(pc, text)`, ld_imm64 listed once at its first slot.
pub fn disassemble(insns: &[Insn]) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut pc = 0;
    while pc < insns.len() {
        let (text, n) = disassemble_one(insns, pc);
        out.push((pc, text));
        pc += n;
    }
    out
}

fn invalid(i: &Insn) -> String {
    format!("invalid opcode 0x{:02x}", i.code)
}

/// `u8`..`u64` for the size bits of a load/store.
fn ty(i: &Insn) -> &'static str {
    match Size::from_code(i.code) {
        Size::B => "u8",
        Size::H => "u16",
        Size::W => "u32",
        Size::DW => "u64",
    }
}

/// `rN + off` / `rN - off`.
fn addr(reg: u8, off: i16) -> String {
    let sign = if off < 0 { '-' } else { '+' };
    format!("r{reg} {sign} {}", (off as i32).abs())
}

/// Hex with a leading `-` for negative values (sign-extended compare operands).
fn signed_hex(v: i32) -> String {
    let sign = if v < 0 { "-" } else { "" };
    format!("{sign}0x{:x}", (v as i64).unsigned_abs())
}

/// `+N <pc T>` for a jump from `pc` with relative offset `off`.
fn target(pc: usize, off: i64) -> String {
    format!("{off:+} <pc {}>", pc as i64 + 1 + off)
}

fn fmt_alu(i: &Insn) -> String {
    let r = if i.class() == BPF_ALU64 { 'r' } else { 'w' };
    let src = if i.code & BPF_X != 0 {
        format!("{r}{}", i.src)
    } else {
        i.imm.to_string()
    };
    if i.code & 0xf0 == BPF_END {
        let kind = match (i.class(), i.code & BPF_X != 0) {
            (BPF_ALU64, _) => "bswap",
            (_, true) => "be",
            (_, false) => "le",
        };
        return format!("r{} = {kind}{} r{}", i.dst, i.imm, i.dst);
    }
    let Some(op) = AluOp::from_code(i.code & 0xf0) else {
        return invalid(i);
    };
    let sym = match op {
        AluOp::Mov => return format!("{r}{} = {src}", i.dst),
        AluOp::Neg => return format!("{r}{0} = -{r}{0}", i.dst),
        AluOp::Add => "+",
        AluOp::Sub => "-",
        AluOp::Mul => "*",
        AluOp::Div => "/",
        AluOp::Or => "|",
        AluOp::And => "&",
        AluOp::Lsh => "<<",
        AluOp::Rsh => ">>",
        AluOp::Mod => "%",
        AluOp::Xor => "^",
        AluOp::Arsh => "s>>",
    };
    format!("{r}{} {sym}= {src}", i.dst)
}

fn fmt_atomic(i: &Insn) -> String {
    let (r, ty) = if Size::from_code(i.code) == Size::DW {
        ('r', "u64")
    } else {
        ('w', "u32")
    };
    let (mem, s) = (format!("({ty} *)({})", addr(i.dst, i.off)), i.src);
    let name = match i.imm & !BPF_FETCH {
        BPF_ATOMIC_ADD => "add",
        BPF_ATOMIC_OR => "or",
        BPF_ATOMIC_AND => "and",
        BPF_ATOMIC_XOR => "xor",
        _ if i.imm == BPF_XCHG => return format!("{r}{s} = atomic_xchg({mem}, {r}{s})"),
        _ if i.imm == BPF_CMPXCHG => return format!("r0 = atomic_cmpxchg({mem}, r0, {r}{s})"),
        _ => return format!("invalid atomic op 0x{:x}", i.imm),
    };
    if i.imm & BPF_FETCH != 0 {
        format!("{r}{s} = atomic_fetch_{name}({mem}, {r}{s})")
    } else {
        let sym = match name {
            "add" => "+",
            "or" => "|",
            "and" => "&",
            _ => "^",
        };
        format!("lock *{mem} {sym}= {r}{s}")
    }
}

fn fmt_ld_imm64(insns: &[Insn], pc: usize) -> (String, usize) {
    let i = insns[pc];
    let Some(hi) = insns.get(pc + 1) else {
        return ("invalid ld_imm64 (truncated)".to_string(), 1);
    };
    let text = match i.src {
        0 => {
            let v = (hi.imm as u32 as u64) << 32 | i.imm as u32 as u64;
            format!("r{} = 0x{v:x} ll", i.dst)
        }
        BPF_PSEUDO_MAP_FD => format!("r{} = map_fd({})", i.dst, i.imm),
        BPF_PSEUDO_MAP_VALUE => format!("r{} = map_value({})+{}", i.dst, i.imm, hi.imm as u32),
        src => format!(
            "r{} = ld_pseudo(src={src}, 0x{:x}, 0x{:x})",
            i.dst, i.imm, hi.imm
        ),
    };
    (text, 2)
}

fn fmt_jmp(i: &Insn, pc: usize) -> String {
    let is32 = i.class() == BPF_JMP32;
    match i.code & 0xf0 {
        BPF_JA if is32 => return format!("gotol {}", target(pc, i.imm as i64)),
        BPF_JA => return format!("goto {}", target(pc, i.off as i64)),
        BPF_CALL if !is32 => {
            return match i.src {
                BPF_PSEUDO_CALL => format!("call {}", target(pc, i.imm as i64)),
                BPF_PSEUDO_KFUNC_CALL => match crate::Kfunc::from_index(i.imm) {
                    Some(k) => format!("call {}", k.name()),
                    None => format!("call kfunc#{}", i.imm),
                },
                _ => match helper_name(i.imm) {
                    Some(name) => format!("call {name}#{}", i.imm),
                    None => format!("call #{}", i.imm),
                },
            };
        }
        BPF_EXIT if !is32 => return "exit".to_string(),
        _ => {}
    }
    let Some(cond) = JmpCond::from_code(i.code) else {
        return invalid(i);
    };
    let sym = match cond {
        JmpCond::Eq => "==",
        JmpCond::Ne => "!=",
        JmpCond::Gt => ">",
        JmpCond::Ge => ">=",
        JmpCond::Lt => "<",
        JmpCond::Le => "<=",
        JmpCond::Sgt => "s>",
        JmpCond::Sge => "s>=",
        JmpCond::Slt => "s<",
        JmpCond::Sle => "s<=",
        JmpCond::Set => "&",
    };
    let r = if is32 { 'w' } else { 'r' };
    let src = if i.code & BPF_X != 0 {
        format!("{r}{}", i.src)
    } else {
        signed_hex(i.imm)
    };
    format!(
        "if {r}{} {sym} {src} goto {}",
        i.dst,
        target(pc, i.off as i64)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::asm::{Assembler, Src};
    use crate::helper;
    use Reg::*;

    fn one(i: Insn) -> String {
        let (text, n) = disassemble_one(&[i], 0);
        assert_eq!(n, 1);
        text
    }

    #[test]
    fn alu_text() {
        assert_eq!(one(mov64_imm(R0, 0)), "r0 = 0");
        assert_eq!(one(mov64_reg(R6, R1)), "r6 = r1");
        assert_eq!(one(alu64_imm(AluOp::Add, R2, -8)), "r2 += -8");
        assert_eq!(one(alu64_reg(AluOp::Arsh, R4, R5)), "r4 s>>= r5");
        assert_eq!(one(alu32_imm(AluOp::And, R1, 255)), "w1 &= 255");
        assert_eq!(one(alu32_reg(AluOp::Mov, R1, R2)), "w1 = w2");
        assert_eq!(one(alu64_imm(AluOp::Neg, R3, 0)), "r3 = -r3");
        assert_eq!(
            one(Insn::new(BPF_ALU | BPF_X | BPF_END, 1, 0, 0, 32)),
            "r1 = be32 r1"
        );
    }

    #[test]
    fn memory_text() {
        assert_eq!(one(ldx(Size::DW, R0, R1, 16)), "r0 = *(u64 *)(r1 + 16)");
        assert_eq!(one(ldx(Size::B, R3, R1, 0)), "r3 = *(u8 *)(r1 + 0)");
        assert_eq!(one(stx(Size::H, R10, -2, R7)), "*(u16 *)(r10 - 2) = r7");
        assert_eq!(one(st_imm(Size::W, R10, -4, 7)), "*(u32 *)(r10 - 4) = 7");
        assert_eq!(
            one(ldx(Size::W, R0, R1, i16::MIN)),
            "r0 = *(u32 *)(r1 - 32768)"
        );
    }

    #[test]
    fn atomic_text() {
        let add = atomic(Size::DW, R10, -8, R1, BPF_ATOMIC_ADD);
        assert_eq!(one(add), "lock *(u64 *)(r10 - 8) += r1");
        let fetch = atomic(Size::W, R0, 4, R2, BPF_ATOMIC_ADD | BPF_FETCH);
        assert_eq!(one(fetch), "w2 = atomic_fetch_add((u32 *)(r0 + 4), w2)");
        assert_eq!(
            one(atomic(Size::DW, R0, 0, R1, BPF_ATOMIC_XOR)),
            "lock *(u64 *)(r0 + 0) ^= r1"
        );
        assert_eq!(
            one(atomic(Size::DW, R0, 0, R1, BPF_XCHG)),
            "r1 = atomic_xchg((u64 *)(r0 + 0), r1)"
        );
        assert_eq!(
            one(atomic(Size::DW, R0, 0, R1, BPF_CMPXCHG)),
            "r0 = atomic_cmpxchg((u64 *)(r0 + 0), r0, r1)"
        );
    }

    #[test]
    fn jump_and_call_text() {
        let prog = [mov64_imm(R0, 0), jmp_imm(JmpCond::Ne, R0, 3, 5)];
        assert_eq!(disassemble_one(&prog, 1).0, "if r0 != 0x3 goto +5 <pc 7>");
        let back = [
            mov64_imm(R0, 0),
            mov64_imm(R0, 0),
            jmp_reg(JmpCond::Sle, R1, R2, -3),
        ];
        assert_eq!(disassemble_one(&back, 2).0, "if r1 s<= r2 goto -3 <pc 0>");
        assert_eq!(
            one(jmp_imm(JmpCond::Set, R1, 1, 0)),
            "if r1 & 0x1 goto +0 <pc 1>"
        );
        assert_eq!(
            one(jmp_imm(JmpCond::Sgt, R1, -1, 2)),
            "if r1 s> -0x1 goto +2 <pc 3>"
        );
        assert_eq!(
            one(Insn::new(BPF_JMP32 | BPF_K | 0x10, 1, 0, 1, 9)),
            "if w1 == 0x9 goto +1 <pc 2>"
        );
        assert_eq!(one(ja(4)), "goto +4 <pc 5>");
        assert_eq!(
            one(call(helper::MAP_LOOKUP_ELEM)),
            "call bpf_map_lookup_elem#1"
        );
        assert_eq!(
            one(call(helper::RINGBUF_RESERVE)),
            "call bpf_ringbuf_reserve#131"
        );
        assert_eq!(one(call(99_999)), "call #99999");
        assert_eq!(one(exit()), "exit");
        assert_eq!(one(Insn::new(0xff, 0, 0, 0, 0)), "invalid opcode 0xff");
    }

    #[test]
    fn ld_imm64_text() {
        let v = ld_imm64(R0, 0x10);
        assert_eq!(disassemble_one(&v, 0), ("r0 = 0x10 ll".to_string(), 2));
        let big = ld_imm64(R3, 0xdead_beef_0000_0001);
        assert_eq!(disassemble_one(&big, 0).0, "r3 = 0xdeadbeef00000001 ll");
        let m = ld_imm64_raw(R1, BPF_PSEUDO_MAP_FD, 5, 0);
        assert_eq!(disassemble_one(&m, 0).0, "r1 = map_fd(5)");
        let mv = ld_imm64_raw(R1, BPF_PSEUDO_MAP_VALUE, 5, 8);
        assert_eq!(disassemble_one(&mv, 0).0, "r1 = map_value(5)+8");
        assert_eq!(
            disassemble_one(&v[..1], 0),
            ("invalid ld_imm64 (truncated)".to_string(), 1)
        );
    }

    #[test]
    fn round_trip_through_bytes() {
        // Assemble, encode, decode, disassemble: text survives the byte round trip.
        let mut a = Assembler::new();
        let l = a.new_label();
        a.ld_imm64(R6, u64::MAX);
        a.ld_map_value(R1, 4, 16);
        a.jmp(JmpCond::Lt, R6, Src::Imm(10), l);
        a.atomic_fetch_add(Size::DW, R1, 0, R6);
        a.bind(l);
        a.mov64(R0, Src::Imm(0));
        a.exit();
        let p = a.finish().unwrap();
        let decoded = decode_program(&p.bytes()).unwrap();
        let text: Vec<_> = disassemble(&decoded)
            .into_iter()
            .map(|(pc, t)| format!("{pc}: {t}"))
            .collect();
        assert_eq!(
            text,
            [
                "0: r6 = 0xffffffffffffffff ll",
                "2: r1 = map_value(4)+16",
                "4: if r6 < 0xa goto +1 <pc 6>",
                "5: r6 = atomic_fetch_add((u64 *)(r1 + 0), r6)",
                "6: r0 = 0",
                "7: exit",
            ]
        );
    }
}
