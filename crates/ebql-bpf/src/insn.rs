//! eBPF instruction encoding.
//!
//! All opcode values below come from the kernel doc
//! `Documentation/bpf/standardization/instruction-set.rst` (mirrored in
//! `include/uapi/linux/bpf.h` / `bpf_common.h`). An opcode byte is
//! `class (3 bits) | source-or-size (bits 3-4) | operation-or-mode (bits 5-7)`.

// ---- instruction classes (low 3 bits of `code`) ----
/// Non-standard load class; only `ld_imm64` (`BPF_LD | BPF_IMM | BPF_DW`) is used.
pub const BPF_LD: u8 = 0x00;
/// Load into register from memory.
pub const BPF_LDX: u8 = 0x01;
/// Store immediate into memory.
pub const BPF_ST: u8 = 0x02;
/// Store register into memory (also atomics).
pub const BPF_STX: u8 = 0x03;
/// 32-bit arithmetic.
pub const BPF_ALU: u8 = 0x04;
/// 64-bit jumps, call, exit.
pub const BPF_JMP: u8 = 0x05;
/// 32-bit compare jumps.
pub const BPF_JMP32: u8 = 0x06;
/// 64-bit arithmetic.
pub const BPF_ALU64: u8 = 0x07;

// ---- source bit for ALU/JMP ----
/// Operand is the 32-bit `imm` field (sign-extended for 64-bit ops).
pub const BPF_K: u8 = 0x00;
/// Operand is register `src`.
pub const BPF_X: u8 = 0x08;

// ---- size bits for load/store ----
/// 4 bytes.
pub const BPF_W: u8 = 0x00;
/// 2 bytes.
pub const BPF_H: u8 = 0x08;
/// 1 byte.
pub const BPF_B: u8 = 0x10;
/// 8 bytes.
pub const BPF_DW: u8 = 0x18;

// ---- mode bits for load/store ----
/// 64-bit immediate (with `BPF_LD | BPF_DW`: the two-slot `ld_imm64`).
pub const BPF_IMM: u8 = 0x00;
/// Regular `base + off` memory access.
pub const BPF_MEM: u8 = 0x60;
/// Atomic read-modify-write; the operation is in `imm`.
pub const BPF_ATOMIC: u8 = 0xc0;

// ---- atomic operations (the `imm` field of a BPF_ATOMIC insn) ----
/// `*addr += src`.
pub const BPF_ATOMIC_ADD: i32 = 0x00;
/// `*addr |= src`.
pub const BPF_ATOMIC_OR: i32 = 0x40;
/// `*addr &= src`.
pub const BPF_ATOMIC_AND: i32 = 0x50;
/// `*addr ^= src`.
pub const BPF_ATOMIC_XOR: i32 = 0xa0;
/// Modifier: return the old value in `src`.
pub const BPF_FETCH: i32 = 0x01;
/// Exchange (always fetches): `0xe0 | BPF_FETCH`.
pub const BPF_XCHG: i32 = 0xe1;
/// Compare-and-exchange against `r0` (always fetches): `0xf0 | BPF_FETCH`.
pub const BPF_CMPXCHG: i32 = 0xf1;

// ---- special jump-class operations ----
/// Unconditional jump.
pub const BPF_JA: u8 = 0x00;
/// Helper / subprogram / kfunc call.
pub const BPF_CALL: u8 = 0x80;
/// Return `r0`.
pub const BPF_EXIT: u8 = 0x90;
/// Byte-swap ALU operation (`BPF_TO_LE` = `BPF_K`, `BPF_TO_BE` = `BPF_X`).
pub const BPF_END: u8 = 0xd0;

// ---- `src` field values of ld_imm64 / call (include/uapi/linux/bpf.h) ----
/// ld_imm64: `imm` is a map fd, loads the map pointer.
pub const BPF_PSEUDO_MAP_FD: u8 = 1;
/// ld_imm64: `imm` is a map fd, second-slot `imm` an offset into its value.
pub const BPF_PSEUDO_MAP_VALUE: u8 = 2;
/// call: `imm` is a relative pc of a BPF subprogram.
pub const BPF_PSEUDO_CALL: u8 = 1;
/// call: `imm` is a BTF id of a kernel function (kfunc).
pub const BPF_PSEUDO_KFUNC_CALL: u8 = 2;

/// Opcode of `ld_imm64` (`BPF_LD | BPF_IMM | BPF_DW`).
pub const LD_IMM64: u8 = BPF_LD | BPF_IMM | BPF_DW;

/// eBPF registers. `R0` return value, `R1`-`R5` helper arguments
/// (caller-saved), `R6`-`R9` callee-saved, `R10` read-only frame pointer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Reg {
    R0,
    R1,
    R2,
    R3,
    R4,
    R5,
    R6,
    R7,
    R8,
    R9,
    R10,
}

impl Reg {
    /// Register number 0..=10 as encoded in the `dst`/`src` nibbles.
    pub fn num(self) -> u8 {
        self as u8
    }

    /// Inverse of [`Reg::num`]; `None` for 11..=15.
    pub fn from_num(n: u8) -> Option<Reg> {
        use Reg::*;
        [R0, R1, R2, R3, R4, R5, R6, R7, R8, R9, R10]
            .get(n as usize)
            .copied()
    }
}

impl std::fmt::Display for Reg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "r{}", self.num())
    }
}

/// Memory access width: `B`=1, `H`=2, `W`=4, `DW`=8 bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Size {
    B,
    H,
    W,
    DW,
}

impl Size {
    /// Size for a width in bytes (1, 2, 4 or 8), else `None`.
    pub fn from_bytes(n: usize) -> Option<Size> {
        match n {
            1 => Some(Size::B),
            2 => Some(Size::H),
            4 => Some(Size::W),
            8 => Some(Size::DW),
            _ => None,
        }
    }

    /// Width in bytes.
    pub fn bytes(self) -> usize {
        match self {
            Size::B => 1,
            Size::H => 2,
            Size::W => 4,
            Size::DW => 8,
        }
    }

    /// The size bits of a load/store opcode (`BPF_B`..`BPF_DW`).
    pub fn code(self) -> u8 {
        match self {
            Size::B => BPF_B,
            Size::H => BPF_H,
            Size::W => BPF_W,
            Size::DW => BPF_DW,
        }
    }

    /// Inverse of [`Size::code`] (only bits 3-4 are looked at).
    pub fn from_code(code: u8) -> Size {
        match code & 0x18 {
            BPF_B => Size::B,
            BPF_H => Size::H,
            BPF_W => Size::W,
            _ => Size::DW,
        }
    }
}

/// ALU operations (the high nibble of an ALU/ALU64 opcode).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AluOp {
    Add,
    Sub,
    Mul,
    Div,
    Or,
    And,
    Lsh,
    Rsh,
    Neg,
    Mod,
    Xor,
    Mov,
    Arsh,
}

impl AluOp {
    /// Operation bits: `Add`=0x00, `Sub`=0x10, ... `Arsh`=0xc0 (instruction-set.rst).
    pub fn code(self) -> u8 {
        (self as u8) << 4
    }

    /// Inverse of [`AluOp::code`]; `None` for `BPF_END` (0xd0) and unused values.
    pub fn from_code(code: u8) -> Option<AluOp> {
        use AluOp::*;
        let all = [
            Add, Sub, Mul, Div, Or, And, Lsh, Rsh, Neg, Mod, Xor, Mov, Arsh,
        ];
        all.get((code >> 4) as usize).copied()
    }
}

/// Conditional jump predicates. `Gt/Ge/Lt/Le` compare unsigned, `S*` signed,
/// `Set` jumps if `dst & src != 0` (JSET).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum JmpCond {
    Eq,
    Ne,
    Gt,
    Ge,
    Lt,
    Le,
    Sgt,
    Sge,
    Slt,
    Sle,
    Set,
}

impl JmpCond {
    /// Operation bits of the jump opcode (instruction-set.rst "Jump instructions").
    pub fn code(self) -> u8 {
        match self {
            JmpCond::Eq => 0x10,
            JmpCond::Gt => 0x20,
            JmpCond::Ge => 0x30,
            JmpCond::Set => 0x40,
            JmpCond::Ne => 0x50,
            JmpCond::Sgt => 0x60,
            JmpCond::Sge => 0x70,
            JmpCond::Lt => 0xa0,
            JmpCond::Le => 0xb0,
            JmpCond::Slt => 0xc0,
            JmpCond::Sle => 0xd0,
        }
    }

    /// Inverse of [`JmpCond::code`] (high nibble only); `None` for JA/CALL/EXIT etc.
    pub fn from_code(code: u8) -> Option<JmpCond> {
        use JmpCond::*;
        [Eq, Ne, Gt, Ge, Lt, Le, Sgt, Sge, Slt, Sle, Set]
            .into_iter()
            .find(|c| c.code() == code & 0xf0)
    }

    /// The predicate that holds exactly when `self` does not; `None` for `Set`.
    pub fn negate(self) -> Option<JmpCond> {
        use JmpCond::*;
        Some(match self {
            Eq => Ne,
            Ne => Eq,
            Gt => Le,
            Le => Gt,
            Ge => Lt,
            Lt => Ge,
            Sgt => Sle,
            Sle => Sgt,
            Sge => Slt,
            Slt => Sge,
            Set => return None,
        })
    }
}

/// One 8-byte slot, kernel `struct bpf_insn` layout (code u8, dst:4|src:4,
/// off i16, imm i32). ld_imm64 occupies two Insn slots.
///
/// `dst` and `src` are register numbers (or pseudo values for `src`); only
/// their low 4 bits are encoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct Insn {
    pub code: u8,
    pub dst: u8,
    pub src: u8,
    pub off: i16,
    pub imm: i32,
}

impl Insn {
    /// Builds a slot from raw fields.
    pub fn new(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> Insn {
        Insn {
            code,
            dst,
            src,
            off,
            imm,
        }
    }

    /// Little-endian encoding: `code`, `src << 4 | dst`, `off` (2 bytes), `imm` (4 bytes).
    pub fn to_bytes(&self) -> [u8; 8] {
        let mut b = [0u8; 8];
        b[0] = self.code;
        b[1] = (self.src & 0x0f) << 4 | (self.dst & 0x0f);
        b[2..4].copy_from_slice(&self.off.to_le_bytes());
        b[4..8].copy_from_slice(&self.imm.to_le_bytes());
        b
    }

    /// Inverse of [`Insn::to_bytes`].
    pub fn from_bytes(b: [u8; 8]) -> Insn {
        Insn {
            code: b[0],
            dst: b[1] & 0x0f,
            src: b[1] >> 4,
            off: i16::from_le_bytes([b[2], b[3]]),
            imm: i32::from_le_bytes([b[4], b[5], b[6], b[7]]),
        }
    }

    /// Instruction class (`BPF_LD`..`BPF_ALU64`).
    pub fn class(&self) -> u8 {
        self.code & 0x07
    }

    /// True for the first slot of a two-slot `ld_imm64`.
    pub fn is_ld_imm64(&self) -> bool {
        self.code == LD_IMM64
    }
}

/// Concatenated little-endian encoding of `insns`, ready for `BPF_PROG_LOAD`
/// (`8 * insns.len()` bytes).
pub fn encode_program(insns: &[Insn]) -> Vec<u8> {
    insns.iter().flat_map(|i| i.to_bytes()).collect()
}

/// Splits bytes back into slots; `None` if the length is not a multiple of 8.
pub fn decode_program(bytes: &[u8]) -> Option<Vec<Insn>> {
    let chunks = bytes.chunks_exact(8);
    if !chunks.remainder().is_empty() {
        return None;
    }
    Some(
        chunks
            .map(|c| Insn::from_bytes(c.try_into().unwrap()))
            .collect(),
    )
}

// ---- raw constructors (no validation; the Assembler is the checked layer) ----

/// `dst op= src` on 64 bits (`BPF_ALU64 | BPF_X | op`).
pub fn alu64_reg(op: AluOp, dst: Reg, src: Reg) -> Insn {
    Insn::new(BPF_ALU64 | BPF_X | op.code(), dst.num(), src.num(), 0, 0)
}

/// `dst op= imm` on 64 bits, `imm` sign-extended (`BPF_ALU64 | BPF_K | op`).
pub fn alu64_imm(op: AluOp, dst: Reg, imm: i32) -> Insn {
    Insn::new(BPF_ALU64 | BPF_K | op.code(), dst.num(), 0, 0, imm)
}

/// `wdst op= wsrc` on 32 bits, upper half of `dst` zeroed (`BPF_ALU | BPF_X | op`).
pub fn alu32_reg(op: AluOp, dst: Reg, src: Reg) -> Insn {
    Insn::new(BPF_ALU | BPF_X | op.code(), dst.num(), src.num(), 0, 0)
}

/// `wdst op= imm` on 32 bits, upper half of `dst` zeroed (`BPF_ALU | BPF_K | op`).
pub fn alu32_imm(op: AluOp, dst: Reg, imm: i32) -> Insn {
    Insn::new(BPF_ALU | BPF_K | op.code(), dst.num(), 0, 0, imm)
}

/// `dst = src` (opcode 0xbf).
pub fn mov64_reg(dst: Reg, src: Reg) -> Insn {
    alu64_reg(AluOp::Mov, dst, src)
}

/// `dst = imm` sign-extended to 64 bits (opcode 0xb7).
pub fn mov64_imm(dst: Reg, imm: i32) -> Insn {
    alu64_imm(AluOp::Mov, dst, imm)
}

/// `dst = *(size *)(base + off)` (`BPF_LDX | BPF_MEM | size`).
pub fn ldx(size: Size, dst: Reg, base: Reg, off: i16) -> Insn {
    Insn::new(
        BPF_LDX | BPF_MEM | size.code(),
        dst.num(),
        base.num(),
        off,
        0,
    )
}

/// `*(size *)(base + off) = src` (`BPF_STX | BPF_MEM | size`).
pub fn stx(size: Size, base: Reg, off: i16, src: Reg) -> Insn {
    Insn::new(
        BPF_STX | BPF_MEM | size.code(),
        base.num(),
        src.num(),
        off,
        0,
    )
}

/// `*(size *)(base + off) = imm` (`BPF_ST | BPF_MEM | size`); a DW store sign-extends.
pub fn st_imm(size: Size, base: Reg, off: i16, imm: i32) -> Insn {
    Insn::new(BPF_ST | BPF_MEM | size.code(), base.num(), 0, off, imm)
}

/// Atomic RMW on `*(size *)(base + off)` with operand `src`; `op` is one of
/// the `BPF_ATOMIC_*` / `BPF_XCHG` / `BPF_CMPXCHG` values, optionally `| BPF_FETCH`.
/// Only `Size::W` and `Size::DW` are valid.
pub fn atomic(size: Size, base: Reg, off: i16, src: Reg, op: i32) -> Insn {
    Insn::new(
        BPF_STX | BPF_ATOMIC | size.code(),
        base.num(),
        src.num(),
        off,
        op,
    )
}

/// `if dst cond src goto pc + 1 + off` (64-bit compare).
pub fn jmp_reg(cond: JmpCond, dst: Reg, src: Reg, off: i16) -> Insn {
    Insn::new(BPF_JMP | BPF_X | cond.code(), dst.num(), src.num(), off, 0)
}

/// `if dst cond imm goto pc + 1 + off` (64-bit compare, `imm` sign-extended).
pub fn jmp_imm(cond: JmpCond, dst: Reg, imm: i32, off: i16) -> Insn {
    Insn::new(BPF_JMP | BPF_K | cond.code(), dst.num(), 0, off, imm)
}

/// `goto pc + 1 + off` (opcode 0x05).
pub fn ja(off: i16) -> Insn {
    Insn::new(BPF_JMP | BPF_JA, 0, 0, off, 0)
}

/// Call kernel helper number `helper` (opcode 0x85, `src` = 0).
pub fn call(helper: i32) -> Insn {
    Insn::new(BPF_JMP | BPF_CALL, 0, 0, 0, helper)
}

/// Return `r0` (opcode 0x95).
pub fn exit() -> Insn {
    Insn::new(BPF_JMP | BPF_EXIT, 0, 0, 0, 0)
}

/// `dst = v` as the two-slot ld_imm64: slot 0 `imm` = low 32 bits, slot 1
/// (code 0) `imm` = high 32 bits.
pub fn ld_imm64(dst: Reg, v: u64) -> [Insn; 2] {
    ld_imm64_raw(dst, 0, v as u32 as i32, (v >> 32) as u32 as i32)
}

/// ld_imm64 with an explicit pseudo `src` (e.g. [`BPF_PSEUDO_MAP_FD`]) and
/// the two `imm` words as given.
pub fn ld_imm64_raw(dst: Reg, src: u8, imm_lo: i32, imm_hi: i32) -> [Insn; 2] {
    [
        Insn::new(LD_IMM64, dst.num(), src, 0, imm_lo),
        Insn::new(0, 0, 0, 0, imm_hi),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use Reg::*;

    /// Asserts the encoding of `i` against a hex string derived by hand from
    /// instruction-set.rst (`code`, `src<<4|dst`, `off` LE, `imm` LE).
    #[track_caller]
    fn enc(i: Insn, hex: &str) {
        let got: Vec<String> = i.to_bytes().iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(got.join(" "), hex);
    }

    #[test]
    fn mov_and_exit() {
        // r0 = 0; exit -- the canonical minimal program.
        let bytes = encode_program(&[mov64_imm(R0, 0), exit()]);
        assert_eq!(
            bytes,
            [0xb7, 0, 0, 0, 0, 0, 0, 0, 0x95, 0, 0, 0, 0, 0, 0, 0]
        );
    }

    #[test]
    fn alu_register_nibbles_and_little_endian_fields() {
        enc(mov64_reg(R3, R7), "bf 73 00 00 00 00 00 00"); // dst low nibble, src high
        enc(alu64_imm(AluOp::Add, R1, -8), "07 01 00 00 f8 ff ff ff");
        enc(
            alu32_imm(AluOp::Xor, R2, 0x1234_5678),
            "a4 02 00 00 78 56 34 12",
        );
        enc(alu64_reg(AluOp::Arsh, R4, R5), "cf 54 00 00 00 00 00 00");
        enc(alu32_reg(AluOp::Mov, R1, R2), "bc 21 00 00 00 00 00 00");
    }

    #[test]
    fn load_store_sizes() {
        enc(ldx(Size::DW, R0, R1, 16), "79 10 10 00 00 00 00 00");
        enc(ldx(Size::W, R0, R1, 0), "61 10 00 00 00 00 00 00");
        enc(ldx(Size::H, R0, R1, 0), "69 10 00 00 00 00 00 00");
        enc(ldx(Size::B, R0, R1, 0), "71 10 00 00 00 00 00 00");
        enc(stx(Size::DW, R10, -8, R1), "7b 1a f8 ff 00 00 00 00");
        enc(stx(Size::W, R10, -4, R1), "63 1a fc ff 00 00 00 00");
        enc(stx(Size::H, R10, -2, R1), "6b 1a fe ff 00 00 00 00");
        enc(stx(Size::B, R10, -1, R1), "73 1a ff ff 00 00 00 00");
        enc(st_imm(Size::W, R10, -4, 7), "62 0a fc ff 07 00 00 00");
        enc(st_imm(Size::DW, R10, -8, -1), "7a 0a f8 ff ff ff ff ff");
    }

    #[test]
    fn atomics() {
        enc(
            atomic(Size::DW, R10, -8, R1, BPF_ATOMIC_ADD),
            "db 1a f8 ff 00 00 00 00",
        );
        enc(
            atomic(Size::W, R2, 4, R3, BPF_ATOMIC_ADD | BPF_FETCH),
            "c3 32 04 00 01 00 00 00",
        );
    }

    #[test]
    fn ld_imm64_two_slots() {
        let [a, b] = ld_imm64(R2, 0x1122_3344_5566_7788);
        enc(a, "18 02 00 00 88 77 66 55");
        enc(b, "00 00 00 00 44 33 22 11");
        let [m, n] = ld_imm64_raw(R1, BPF_PSEUDO_MAP_FD, 5, 0);
        enc(m, "18 11 00 00 05 00 00 00");
        enc(n, "00 00 00 00 00 00 00 00");
    }

    #[test]
    fn jumps_and_calls() {
        enc(jmp_imm(JmpCond::Ne, R0, 3, 5), "55 00 05 00 03 00 00 00");
        enc(jmp_reg(JmpCond::Slt, R1, R2, -2), "cd 21 fe ff 00 00 00 00");
        enc(jmp_imm(JmpCond::Set, R0, 1, 0), "45 00 00 00 01 00 00 00");
        enc(jmp_imm(JmpCond::Le, R0, 1, 0), "b5 00 00 00 01 00 00 00");
        enc(ja(1), "05 00 01 00 00 00 00 00");
        enc(call(1), "85 00 00 00 01 00 00 00");
    }

    #[test]
    fn bytes_round_trip_and_enum_codes() {
        let i = Insn::new(0xdb, 10, 1, -8, 0x01);
        assert_eq!(Insn::from_bytes(i.to_bytes()), i);
        let prog = [mov64_imm(R0, 1), exit()];
        assert_eq!(decode_program(&encode_program(&prog)).unwrap(), prog);
        assert!(decode_program(&[0; 7]).is_none());
        for code in (0..=0xc0).step_by(0x10) {
            assert_eq!(AluOp::from_code(code).unwrap().code(), code);
        }
        assert_eq!(AluOp::Mov.code(), 0xb0);
        assert_eq!(AluOp::from_code(BPF_END), None);
        for n in 1..=8 {
            if let Some(s) = Size::from_bytes(n) {
                assert_eq!((s.bytes(), Size::from_code(s.code())), (n, s));
            }
        }
        assert_eq!(Size::from_bytes(3), None);
        assert_eq!(JmpCond::from_code(0xdd), Some(JmpCond::Sle));
        assert_eq!(JmpCond::Ge.negate(), Some(JmpCond::Lt));
        assert_eq!((Reg::from_num(10), Reg::from_num(11)), (Some(R10), None));
    }
}
