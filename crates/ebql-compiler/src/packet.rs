//! Parsed packet columns at the TC hook ([`ebql_catalog::Access::Packet`]).
//!
//! When a query reads any of them, the program parses the packet once, at
//! its start, into an area of its stack ([`AREA_BYTES`], layout below) with
//! `bpf_skb_load_bytes` (which also reads non-linear packets), and every
//! packet column is then a stack load. The area is zeroed first, so a
//! header the packet does not have leaves its columns 0 (the catalog,
//! `ebql_catalog::source::tc`, documents each column).
//!
//! Layout (byte offsets in the area, numbers in host order):
//!
//! | offset | bytes | column |
//! |---|---|---|
//! | 0, 8, 16, 24 | 8 each | `saddr6_hi`, `saddr6_lo`, `daddr6_hi`, `daddr6_lo` |
//! | 32, 36 | 4 each | `saddr`, `daddr` |
//! | 40, 44 | 4 each | `payload_len`, `payload_caplen` |
//! | 48, 50, 52 | 2 each | `ethertype`, `sport`, `dport` |
//! | 54, 55 | 1 each | `l4proto`, `tcpflags` |
//! | 56 | 64 | `payload` |
//! | 120 | 40 | scratch: the header being read |
//! | 160 | 4 | offset of the L4 header, then of the payload |

use ebql_bpf::insn::{BPF_ALU, BPF_END, BPF_X};
use ebql_bpf::{helper, AluOp, Assembler, Insn, JmpCond, Reg, Size, Src};
use ebql_catalog::source::tc::{PacketField, PAYLOAD_PREFIX};
use ebql_catalog::Access;

use crate::kexpr::{KExpr, KPred, StrSrc};
use crate::split::{KernelOutput, KernelPlan, ValueSrc};

/// Bytes of stack the parsed packet takes (8-aligned).
pub const AREA_BYTES: usize = 168;

const PAYLOAD: i16 = 56;
const SCRATCH: i16 = 120;
const NEXT_OFF: i16 = 160;
/// Bytes zeroed before parsing: every column, not the scratch.
const COLUMN_BYTES: i16 = SCRATCH;

const ETH_HLEN: i32 = 14;
const ETH_P_IP: i32 = 0x0800;
const ETH_P_IPV6: i32 = 0x86dd;
const IPPROTO_TCP: i32 = 6;
const IPPROTO_UDP: i32 = 17;

/// Offset of a column in the area.
pub fn offset(f: PacketField) -> i16 {
    match f {
        PacketField::Saddr6Hi => 0,
        PacketField::Saddr6Lo => 8,
        PacketField::Daddr6Hi => 16,
        PacketField::Daddr6Lo => 24,
        PacketField::Saddr => 32,
        PacketField::Daddr => 36,
        PacketField::PayloadLen => 40,
        PacketField::PayloadCaplen => 44,
        PacketField::Ethertype => 48,
        PacketField::Sport => 50,
        PacketField::Dport => 52,
        PacketField::L4proto => 54,
        PacketField::TcpFlags => 55,
        PacketField::Payload => PAYLOAD,
    }
}

/// True when the expression reads a parsed packet column.
pub fn reads_expr(e: &KExpr) -> bool {
    match e {
        KExpr::Field { access, .. } => matches!(access, Access::Packet(_)),
        KExpr::Neg(x, _)
        | KExpr::BitNot(x, _)
        | KExpr::Cast(x, _)
        | KExpr::Load { addr: x, .. } => reads_expr(x),
        KExpr::Arith(_, l, r, _) => reads_expr(l) || reads_expr(r),
        KExpr::Attr(..) | KExpr::Const(..) | KExpr::Stored { .. } => false,
    }
}

/// True when the predicate reads a parsed packet column.
pub fn reads_pred(p: &KPred) -> bool {
    match p {
        KPred::Const(_) => false,
        KPred::Cmp { l, r, .. } => reads_expr(l) || reads_expr(r),
        KPred::And(v) | KPred::Or(v) => v.iter().any(reads_pred),
        KPred::Not(q) => reads_pred(q),
        KPred::In { e, .. } => reads_expr(e),
        KPred::StrEq { src, .. } => matches!(src, StrSrc::Packet { .. }),
    }
}

/// True when the value reads a parsed packet column.
pub fn reads_value(v: &ValueSrc) -> bool {
    match v {
        ValueSrc::Int(e) => reads_expr(e),
        ValueSrc::Str(s) | ValueSrc::Truncated(s) => matches!(s, StrSrc::Packet { .. }),
    }
}

/// True when the plan (filters, keys, aggregates, streamed columns) or the
/// oracle's tap columns read a parsed packet column.
pub fn plan_reads<'a>(plan: &KernelPlan, tap: impl IntoIterator<Item = &'a ValueSrc>) -> bool {
    let output = match &plan.output {
        KernelOutput::Groups(spec) => {
            spec.keys.iter().any(|k| reads_value(&k.value))
                || spec
                    .slots
                    .iter()
                    .any(|s| s.exprs().any(reads_expr) || s.when.as_ref().is_some_and(reads_pred))
        }
        KernelOutput::Stream { columns, latest } => {
            columns.iter().any(|(_, v, _)| reads_value(v))
                || latest.iter().flatten().any(|k| reads_value(&k.value))
        }
    };
    output || plan.filters.iter().any(|(p, _)| reads_pred(p)) || tap.into_iter().any(reads_value)
}

/// `dst` = its low `bits` converted from network (big-endian) byte order.
fn from_be(asm: &mut Assembler, dst: Reg, bits: i32) {
    asm.emit(Insn::new(BPF_ALU | BPF_X | BPF_END, dst.num(), 0, 0, bits));
}

/// r0 = bpf_skb_load_bytes(ctx, r2, stack[base + to], len); r2 must hold the offset.
fn load_bytes(asm: &mut Assembler, ctx: Reg, base: i16, to: i16, len: i32) {
    asm.mov64(Reg::R1, Src::Reg(ctx));
    asm.mov64(Reg::R3, Src::Reg(Reg::R10));
    asm.alu64(AluOp::Add, Reg::R3, Src::Imm((base + to) as i32));
    asm.mov64(Reg::R4, Src::Imm(len));
    asm.call(helper::SKB_LOAD_BYTES);
}

/// Copies the big-endian `bytes` at scratch + `from` to column `to` as a number.
fn field_from_scratch(asm: &mut Assembler, base: i16, from: i16, to: i16, bytes: usize) {
    let size = Size::from_bytes(bytes).expect("1, 2, 4 or 8");
    asm.ldx(size, Reg::R1, Reg::R10, base + SCRATCH + from);
    if bytes > 1 {
        from_be(asm, Reg::R1, 8 * bytes as i32);
    }
    asm.stx(size, Reg::R10, base + to, Reg::R1);
}

/// Emits the parse of the packet (`ctx` = the `__sk_buff`) into the area at
/// `r10 + base`. Clobbers r0–r5; keeps `ctx`.
pub fn emit_parse(asm: &mut Assembler, ctx: Reg, base: i16) {
    let done = asm.new_label();
    asm.comment("packet columns = 0");
    for i in (0..COLUMN_BYTES).step_by(8) {
        asm.st_imm(Size::DW, Reg::R10, base + i, 0);
    }
    asm.comment("ethertype (bytes 12-13 of the Ethernet header)");
    asm.mov64(Reg::R2, Src::Imm(12));
    load_bytes(asm, ctx, base, SCRATCH, 2);
    asm.jmp(JmpCond::Ne, Reg::R0, Src::Imm(0), done);
    field_from_scratch(asm, base, 0, offset(PacketField::Ethertype), 2);
    let (v4, l4) = (asm.new_label(), asm.new_label());
    asm.jmp(JmpCond::Eq, Reg::R1, Src::Imm(ETH_P_IP), v4);
    asm.jmp(JmpCond::Ne, Reg::R1, Src::Imm(ETH_P_IPV6), done);

    asm.comment("IPv6 header (40 bytes): addresses, next header, payload length");
    asm.mov64(Reg::R2, Src::Imm(ETH_HLEN));
    load_bytes(asm, ctx, base, SCRATCH, 40);
    asm.jmp(JmpCond::Ne, Reg::R0, Src::Imm(0), done);
    for (from, f) in [
        (8, PacketField::Saddr6Hi),
        (16, PacketField::Saddr6Lo),
        (24, PacketField::Daddr6Hi),
        (32, PacketField::Daddr6Lo),
    ] {
        field_from_scratch(asm, base, from, offset(f), 8);
    }
    field_from_scratch(asm, base, 6, offset(PacketField::L4proto), 1);
    field_from_scratch(asm, base, 4, offset(PacketField::PayloadLen), 2);
    asm.st_imm(Size::W, Reg::R10, base + NEXT_OFF, ETH_HLEN + 40);
    asm.ja(l4);

    asm.bind(v4);
    asm.comment("IPv4 header (20 bytes without options): addresses, protocol, lengths");
    asm.mov64(Reg::R2, Src::Imm(ETH_HLEN));
    load_bytes(asm, ctx, base, SCRATCH, 20);
    asm.jmp(JmpCond::Ne, Reg::R0, Src::Imm(0), done);
    field_from_scratch(asm, base, 12, offset(PacketField::Saddr), 4);
    field_from_scratch(asm, base, 16, offset(PacketField::Daddr), 4);
    field_from_scratch(asm, base, 9, offset(PacketField::L4proto), 1);
    asm.comment("a fragment after the first carries no L4 header");
    asm.ldx(Size::H, Reg::R1, Reg::R10, base + SCRATCH + 6);
    from_be(asm, Reg::R1, 16);
    asm.alu64(AluOp::And, Reg::R1, Src::Imm(0x1fff));
    asm.jmp(JmpCond::Ne, Reg::R1, Src::Imm(0), done);
    asm.comment("r2 = header length (IHL * 4); bytes after the IP header = total length - r2");
    asm.ldx(Size::B, Reg::R2, Reg::R10, base + SCRATCH);
    asm.alu64(AluOp::And, Reg::R2, Src::Imm(0xf));
    asm.alu64(AluOp::Lsh, Reg::R2, Src::Imm(2));
    asm.ldx(Size::H, Reg::R1, Reg::R10, base + SCRATCH + 2);
    from_be(asm, Reg::R1, 16);
    asm.jmp(JmpCond::Lt, Reg::R1, Src::Reg(Reg::R2), done);
    asm.alu64(AluOp::Sub, Reg::R1, Src::Reg(Reg::R2));
    asm.stx(
        Size::W,
        Reg::R10,
        base + offset(PacketField::PayloadLen),
        Reg::R1,
    );
    asm.alu64(AluOp::Add, Reg::R2, Src::Imm(ETH_HLEN));
    asm.stx(Size::W, Reg::R10, base + NEXT_OFF, Reg::R2);

    asm.bind(l4);
    let (tcp, hdr, payload) = (asm.new_label(), asm.new_label(), asm.new_label());
    asm.ldx(
        Size::B,
        Reg::R1,
        Reg::R10,
        base + offset(PacketField::L4proto),
    );
    asm.jmp(JmpCond::Eq, Reg::R1, Src::Imm(IPPROTO_TCP), tcp);
    asm.comment("other IP protocols: the payload starts after the IP header");
    asm.jmp(JmpCond::Ne, Reg::R1, Src::Imm(IPPROTO_UDP), payload);
    asm.comment("UDP header (8 bytes): ports");
    asm.ldx(Size::W, Reg::R2, Reg::R10, base + NEXT_OFF);
    load_bytes(asm, ctx, base, SCRATCH, 8);
    asm.jmp(JmpCond::Ne, Reg::R0, Src::Imm(0), done);
    asm.mov64(Reg::R3, Src::Imm(8));
    asm.ja(hdr);
    asm.bind(tcp);
    asm.comment("TCP header (20 bytes without options): ports, flags, r3 = data offset * 4");
    asm.ldx(Size::W, Reg::R2, Reg::R10, base + NEXT_OFF);
    load_bytes(asm, ctx, base, SCRATCH, 20);
    asm.jmp(JmpCond::Ne, Reg::R0, Src::Imm(0), done);
    field_from_scratch(asm, base, 13, offset(PacketField::TcpFlags), 1);
    asm.ldx(Size::B, Reg::R3, Reg::R10, base + SCRATCH + 12);
    asm.alu64(AluOp::Rsh, Reg::R3, Src::Imm(4));
    asm.alu64(AluOp::Lsh, Reg::R3, Src::Imm(2));
    asm.bind(hdr);
    field_from_scratch(asm, base, 0, offset(PacketField::Sport), 2);
    field_from_scratch(asm, base, 2, offset(PacketField::Dport), 2);
    asm.comment("payload_len -= L4 header (r3); payload offset += r3");
    asm.ldx(
        Size::W,
        Reg::R1,
        Reg::R10,
        base + offset(PacketField::PayloadLen),
    );
    let short = asm.new_label();
    asm.jmp(JmpCond::Ge, Reg::R1, Src::Reg(Reg::R3), short);
    asm.comment("malformed: the IP length ends inside the L4 header");
    asm.mov64(Reg::R1, Src::Reg(Reg::R3));
    asm.bind(short);
    asm.alu64(AluOp::Sub, Reg::R1, Src::Reg(Reg::R3));
    asm.stx(
        Size::W,
        Reg::R10,
        base + offset(PacketField::PayloadLen),
        Reg::R1,
    );
    asm.ldx(Size::W, Reg::R2, Reg::R10, base + NEXT_OFF);
    asm.alu64(AluOp::Add, Reg::R2, Src::Reg(Reg::R3));
    asm.stx(Size::W, Reg::R10, base + NEXT_OFF, Reg::R2);

    asm.bind(payload);
    asm.comment(format!("payload prefix: r4 = min(payload_len, skb->len - offset, {PAYLOAD_PREFIX}) bytes at offset r2"));
    asm.ldx(
        Size::W,
        Reg::R4,
        Reg::R10,
        base + offset(PacketField::PayloadLen),
    );
    asm.ldx(Size::W, Reg::R2, Reg::R10, base + NEXT_OFF);
    asm.ldx(Size::W, Reg::R1, ctx, 0);
    asm.jmp(JmpCond::Le, Reg::R1, Src::Reg(Reg::R2), done);
    asm.alu64(AluOp::Sub, Reg::R1, Src::Reg(Reg::R2));
    let (fits, capped) = (asm.new_label(), asm.new_label());
    asm.jmp(JmpCond::Le, Reg::R4, Src::Reg(Reg::R1), fits);
    asm.mov64(Reg::R4, Src::Reg(Reg::R1));
    asm.bind(fits);
    asm.jmp(
        JmpCond::Le,
        Reg::R4,
        Src::Imm(PAYLOAD_PREFIX as i32),
        capped,
    );
    asm.mov64(Reg::R4, Src::Imm(PAYLOAD_PREFIX as i32));
    asm.bind(capped);
    asm.comment("the helper takes 1..=64 bytes (the verifier checks these bounds)");
    asm.jmp(JmpCond::Lt, Reg::R4, Src::Imm(1), done);
    asm.stx(
        Size::W,
        Reg::R10,
        base + offset(PacketField::PayloadCaplen),
        Reg::R4,
    );
    asm.mov64(Reg::R1, Src::Reg(ctx));
    asm.mov64(Reg::R3, Src::Reg(Reg::R10));
    asm.alu64(AluOp::Add, Reg::R3, Src::Imm((base + PAYLOAD) as i32));
    asm.call(helper::SKB_LOAD_BYTES);
    asm.jmp(JmpCond::Eq, Reg::R0, Src::Imm(0), done);
    asm.comment("not read (the helper zeroed the buffer): nothing captured");
    asm.st_imm(
        Size::W,
        Reg::R10,
        base + offset(PacketField::PayloadCaplen),
        0,
    );
    asm.bind(done);
}

/// Copies `payload` to `dst + off`: a ring-buffer record takes its 64 bytes
/// as they are (user space reads up to the NUL); a group key gets every
/// byte after the first NUL zeroed, so equal strings give equal keys.
pub fn emit_payload_copy(asm: &mut Assembler, base: i16, dst: Reg, off: i16, key: bool) {
    let src = base + PAYLOAD;
    let len = PAYLOAD_PREFIX as i16;
    if !key {
        for i in (0..len).step_by(8) {
            asm.ldx(Size::DW, Reg::R1, Reg::R10, src + i);
            asm.stx(Size::DW, dst, off + i, Reg::R1);
        }
        return;
    }
    // r2 is all ones until a NUL was copied, then 0 (branch-free).
    asm.comment("copy up to the NUL, zero the rest");
    asm.mov64(Reg::R2, Src::Imm(-1));
    for i in 0..len {
        asm.ldx(Size::B, Reg::R1, Reg::R10, src + i);
        asm.alu64(AluOp::And, Reg::R1, Src::Reg(Reg::R2));
        asm.stx(Size::B, dst, off + i, Reg::R1);
        if i + 1 < len {
            asm.mov64(Reg::R2, Src::Reg(Reg::R1));
            asm.alu64(AluOp::Add, Reg::R2, Src::Imm(255));
            asm.alu64(AluOp::Rsh, Reg::R2, Src::Imm(8));
            asm.alu64(AluOp::Neg, Reg::R2, Src::Imm(0));
        }
    }
}
