//! Kernel expressions: the subset of DataFusion expressions our BPF backend compiles.
//!
//! Translation from a DataFusion [`Expr`] either succeeds or says, in words, why
//! the expression has to run in user space. The rule: a translated expression
//! computes exactly what DataFusion 55 computes on the same row, else it is
//! not translated. Integer values live in 64-bit registers; results of
//! narrower types are wrapped to their width after every operation, which
//! matches DataFusion's wrapping arithmetic (`add_wrapping`, `neg_wrapping`,
//! shift amounts modulo the width as in `wrapping_shl`). Kernel values are
//! never NULL; casts that could fail or give NULL (narrowing, sign-changing)
//! and signed division stay in user space.

use datafusion::arrow::datatypes::DataType;
use datafusion::common::{DFSchema, ScalarValue};
use datafusion::logical_expr::{Expr, ExprSchemable, Operator};
use ebql_catalog::{Access, Column as EventColumn, EventSchema, FieldKind, SystemAttr, TraceField};
use std::fmt;

pub use crate::contract::IntType;

/// Arrow conversions of [`IntType`] (the type itself is the contract's).
impl IntType {
    /// The integer type of an Arrow type, if it is one. Booleans are not
    /// integers: `CAST(x AS BOOLEAN)` is `x <> 0`, not an 8-bit wrap.
    pub fn of(dt: &DataType) -> Option<IntType> {
        let (bits, signed) = match dt {
            DataType::Int8 => (8, true),
            DataType::Int16 => (16, true),
            DataType::Int32 => (32, true),
            DataType::Int64 => (64, true),
            DataType::UInt8 => (8, false),
            DataType::UInt16 => (16, false),
            DataType::UInt32 => (32, false),
            DataType::UInt64 => (64, false),
            _ => return None,
        };
        Some(IntType { bits, signed })
    }

    /// Arrow type for this integer type.
    pub fn data_type(self) -> DataType {
        match (self.bits, self.signed) {
            (8, true) => DataType::Int8,
            (16, true) => DataType::Int16,
            (32, true) => DataType::Int32,
            (64, true) => DataType::Int64,
            (8, false) => DataType::UInt8,
            (16, false) => DataType::UInt16,
            (32, false) => DataType::UInt32,
            _ => DataType::UInt64,
        }
    }
}

/// Integer operators the backend emits directly.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ArithOp {
    /// `+` (wrapping).
    Add,
    /// `-` (wrapping).
    Sub,
    /// `*` (wrapping).
    Mul,
    /// Unsigned division by a non-zero constant only (signed division and
    /// division by zero have SQL semantics BPF does not: user space).
    Div,
    /// Unsigned remainder by a non-zero constant only.
    Mod,
    /// `&` (bitwise).
    And,
    /// `|` (bitwise).
    Or,
    /// `^` (bitwise).
    Xor,
    /// `<<`; the amount is taken modulo the width, like Rust's `wrapping_shl`
    /// that DataFusion's shift kernels use (`2 << 33` is 4 for Int32).
    Shl,
    /// `>>` (logical for unsigned, arithmetic for signed values); the amount
    /// is taken modulo the width, like `wrapping_shr`.
    Shr,
}

/// Comparison operators.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CmpOp {
    /// `=`.
    Eq,
    /// `<>`.
    Ne,
    /// `<`.
    Lt,
    /// `<=`.
    Le,
    /// `>`.
    Gt,
    /// `>=`.
    Ge,
}

impl CmpOp {
    /// The operator that holds exactly when `self` does not (`<` → `>=`).
    pub fn negate(self) -> CmpOp {
        match self {
            CmpOp::Eq => CmpOp::Ne,
            CmpOp::Ne => CmpOp::Eq,
            CmpOp::Lt => CmpOp::Ge,
            CmpOp::Le => CmpOp::Gt,
            CmpOp::Gt => CmpOp::Le,
            CmpOp::Ge => CmpOp::Lt,
        }
    }
}

/// Default buffer of a string read through a pointer or a `__data_loc`
/// field, in bytes including the terminating NUL: strings are cut to 2,047
/// bytes unless the query asks for another size with `str(x, n)` (statement
/// texts, issue 10, need at least 2 KiB; `bpf_probe_read_*_str` copies only
/// up to the NUL, so a short string costs no more with a larger buffer, but
/// each streamed record reserves the whole buffer in the ring buffer).
pub const STR_DEFAULT_BYTES: u32 = 2048;

/// Largest `n` of `str(x, n)`. The buffer is never on the 512-byte BPF
/// stack: it is a field of the ring-buffer record, of a pairing's start
/// value (task storage or a hash value built in a per-CPU scratch value),
/// or of a group key (keys are at most 256 bytes in all, so larger strings
/// are grouped in user space). A record must stay addressable by the
/// 16-bit offsets of BPF loads and stores ([`MAX_RECORD_BYTES`]).
pub const STR_MAX_BYTES: u32 = 16384;

/// Largest ring-buffer record or start-map value the code generator lays
/// out: BPF load and store offsets are signed 16-bit.
pub const MAX_RECORD_BYTES: u32 = 32760;

/// Where a string value comes from.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum StrSrc {
    /// The task's comm, 16 bytes (bpf_get_current_comm).
    Comm,
    /// A fixed `char name[len]` array in the tracepoint record.
    CtxChars {
        /// Field name.
        name: String,
        /// Byte offset in the tracepoint record.
        offset: u32,
        /// Array length in bytes.
        len: u32,
    },
    /// A `char name[len]` array inside a kernel struct, reached through BTF
    /// ([`Access::Btf`]): copied with `bpf_probe_read_kernel_str` into a
    /// zeroed stack buffer (so the bytes after the NUL are 0), then used as
    /// a stack string. An array filled to its last byte loses that byte.
    Btf {
        /// Column name (`prev.comm`).
        name: String,
        /// The path to the array.
        access: Access,
        /// Array length in bytes.
        len: u32,
    },
    /// A `__data_loc char[]` field of a tracefs record: the u32 at `offset`
    /// locates the string in the record (offset in its low 16 bits); it is
    /// copied with `bpf_probe_read_kernel_str` into `size` bytes.
    DataLoc {
        /// Field name.
        name: String,
        /// Byte offset of the u32 locator in the record.
        offset: u32,
        /// Buffer bytes including the NUL: the string keeps at most `size - 1` bytes.
        size: u32,
    },
    /// `str(ptr)`: a NUL-terminated string at the address `ptr` evaluates to,
    /// copied with `bpf_probe_read_user_str` (`user`) or
    /// `bpf_probe_read_kernel_str` into `size` bytes. A fault (bad pointer, or
    /// a user page not resident) gives the empty string.
    Ptr {
        /// The address.
        ptr: Box<KExpr>,
        /// User-space memory (true) or kernel memory (false).
        user: bool,
        /// Buffer bytes including the NUL: the string keeps at most `size - 1` bytes.
        size: u32,
        /// `str(ptr, n, len)`: the bytes at `ptr` are a string of `len` bytes
        /// with no NUL of its own (MariaDB's `packet`, `packet_length`): at
        /// most `min(len, size - 1)` bytes are read (still stopping at a NUL;
        /// a negative `len` reads nothing).
        len: Option<Box<KExpr>>,
    },
    /// The payload prefix of a packet at the TC hook, parsed into the
    /// stack ([`crate::packet`]); `PAYLOAD_PREFIX` bytes, NUL-padded.
    Packet {
        /// Column name.
        name: String,
    },
    /// A string of the start event of a pairing, read by the start program
    /// (as `of` says) into the start map's value and copied from there by the
    /// end program ([`crate::pair`]): `str(s.arg0, 4096)` in a query pairing
    /// `s` with another event.
    Stored {
        /// The string as the query writes it.
        name: String,
        /// Position among the pairing's stored strings ([`crate::pair::PairPlan::stored_strs`]).
        index: usize,
        /// How the start program reads it.
        of: Box<StrSrc>,
    },
}

impl StrSrc {
    /// Bytes the value occupies in group keys (and, for strings not read by
    /// a `_str` helper, in records: [`StrSrc::record_bytes`]).
    pub fn len(&self) -> u32 {
        match self {
            StrSrc::Comm => 16,
            StrSrc::CtxChars { len, .. } | StrSrc::Btf { len, .. } => *len,
            StrSrc::DataLoc { size, .. } | StrSrc::Ptr { size, .. } => *size,
            StrSrc::Packet { .. } => ebql_catalog::source::tc::PAYLOAD_PREFIX,
            StrSrc::Stored { of, .. } => of.len(),
        }
    }

    /// Bytes the value occupies in a ring-buffer record or a pairing's
    /// start value: a string a `_str` helper reads gets one byte more than
    /// its buffer, so that a string of exactly `size - 1` bytes (kept whole)
    /// and a longer one (cut) differ: the helper copies `min(length, size)`
    /// bytes and a NUL, and the string was cut exactly when it copied `size`
    /// ([`crate::contract::Stored::ReadStr`], [`crate::contract::Stored::Truncated`]).
    pub fn record_bytes(&self) -> u32 {
        match self {
            StrSrc::DataLoc { size, .. } | StrSrc::Ptr { size, .. } => size + 1,
            StrSrc::Stored { of, .. } => of.record_bytes(),
            other => other.len(),
        }
    }

    /// The buffer `n` of a string a `_str` helper reads (`str(p, n)`, a
    /// `__data_loc` field), stored or not; `None` for fixed-size strings,
    /// which are never cut.
    pub fn helper_buffer(&self) -> Option<u32> {
        match self {
            StrSrc::DataLoc { size, .. } | StrSrc::Ptr { size, .. } => Some(*size),
            StrSrc::Stored { of, .. } => of.helper_buffer(),
            _ => None,
        }
    }

    /// The string of a `char name[len]` field, wherever its access says it is.
    pub fn char_array(f: &TraceField, len: u32) -> StrSrc {
        match &f.access {
            Access::Btf { .. } => StrSrc::Btf {
                name: f.name.clone(),
                access: f.access.clone(),
                len,
            },
            Access::Packet(_) => StrSrc::Packet {
                name: f.name.clone(),
            },
            _ => StrSrc::CtxChars {
                name: f.name.clone(),
                offset: f.offset,
                len,
            },
        }
    }

    /// Longest string the value can hold: sources read by a `_str` helper
    /// always end in a NUL within their buffer; a char array may fill its own.
    pub fn max_chars(&self) -> u32 {
        match self {
            StrSrc::CtxChars { len, .. } | StrSrc::Btf { len, .. } => *len,
            StrSrc::Packet { .. } => ebql_catalog::source::tc::PAYLOAD_PREFIX,
            StrSrc::Stored { of, .. } => of.max_chars(),
            other => other.len() - 1,
        }
    }

    /// True when the bytes are copied by a `bpf_probe_read_*_str` helper
    /// straight into their destination (`__data_loc` fields and `str()`;
    /// comm and char arrays are loaded directly, BTF char arrays go through
    /// a zeroed stack buffer first).
    pub fn read_by_helper(&self) -> bool {
        matches!(self, StrSrc::DataLoc { .. } | StrSrc::Ptr { .. })
    }

    /// System attributes reading the string needs.
    pub fn attrs(&self, out: &mut Vec<SystemAttr>) {
        match self {
            StrSrc::Comm => out.push(SystemAttr::Comm),
            StrSrc::Ptr { ptr, len, .. } => {
                ptr.attrs(out);
                if let Some(len) = len {
                    len.attrs(out);
                }
            }
            StrSrc::CtxChars { .. }
            | StrSrc::DataLoc { .. }
            | StrSrc::Btf { .. }
            | StrSrc::Packet { .. }
            | StrSrc::Stored { .. } => {}
        }
    }
}

impl fmt::Display for StrSrc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StrSrc::Comm => write!(f, "comm"),
            StrSrc::CtxChars { name, .. }
            | StrSrc::Btf { name, .. }
            | StrSrc::Packet { name }
            | StrSrc::Stored { name, .. } => write!(f, "{name}"),
            StrSrc::DataLoc { name, size, .. } => write!(f, "{name} (__data_loc, {size} bytes)"),
            StrSrc::Ptr {
                ptr,
                user,
                size,
                len,
            } => {
                write!(f, "{}({ptr}, {size}", if *user { "ustr" } else { "kstr" })?;
                match len {
                    Some(len) => write!(f, ", {len})"),
                    None => write!(f, ")"),
                }
            }
        }
    }
}

/// An integer-valued kernel expression.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum KExpr {
    /// Integer or pointer field of the tracepoint record, `size` bytes at `offset`.
    Field {
        /// Field name.
        name: String,
        /// How the probe reaches it ([`Access::Ctx`]: `size` bytes at ctx + `offset`;
        /// [`Access::Btf`]: the argument's u64, then the path's steps;
        /// [`Access::Packet`]: the parsed packet, [`crate::packet`]).
        access: Access,
        /// Byte offset in the context (for [`Access::Ctx`]).
        offset: u32,
        /// Bytes loaded: the C type's width ([`field_width`]), 8 for pointers.
        size: u32,
        /// Type of the loaded value.
        ty: IntType,
    },
    /// A system attribute (not `comm`).
    Attr(SystemAttr, IntType),
    /// A constant, as 64-bit two's complement, and its type.
    Const(u64, IntType),
    /// `-x` (wrapping), with the result type.
    Neg(Box<KExpr>, IntType),
    /// `~x` (bitwise not), with the result type.
    BitNot(Box<KExpr>, IntType),
    /// `l op r`, wrapped to the result type.
    Arith(ArithOp, Box<KExpr>, Box<KExpr>, IntType),
    /// Conversion to another integer type (wraps to its width).
    Cast(Box<KExpr>, IntType),
    /// The integer of type `ty` at the address `addr` evaluates to, read with
    /// `bpf_probe_read_user` (`user`) or `bpf_probe_read_kernel`; 0 when the
    /// read faults ([`crate::memfn`]: `u64_at(p)` …).
    Load {
        /// The address.
        addr: Box<KExpr>,
        /// User-space memory (true) or kernel memory.
        user: bool,
        /// Type (and width) of the value read.
        ty: IntType,
    },
    /// A column of the start event of an enter/exit pairing, as the start
    /// program stored it: the `index`-th u64 of the start map's value (the end
    /// program copies the value to its stack before deleting the entry).
    Stored {
        /// The column as the query names it (`e.time`).
        name: String,
        /// Position in the stored value (byte offset `8 * index`).
        index: usize,
        /// Type of the value (stored already wrapped to it).
        ty: IntType,
    },
}

impl KExpr {
    /// Type of the expression's value.
    pub fn ty(&self) -> IntType {
        match self {
            KExpr::Field { ty, .. }
            | KExpr::Attr(_, ty)
            | KExpr::Const(_, ty)
            | KExpr::Neg(_, ty)
            | KExpr::BitNot(_, ty)
            | KExpr::Arith(_, _, _, ty)
            | KExpr::Cast(_, ty)
            | KExpr::Load { ty, .. }
            | KExpr::Stored { ty, .. } => *ty,
        }
    }

    /// System attributes this expression reads.
    pub fn attrs(&self, out: &mut Vec<SystemAttr>) {
        match self {
            KExpr::Attr(a, _) => out.push(*a),
            KExpr::Neg(e, _)
            | KExpr::BitNot(e, _)
            | KExpr::Cast(e, _)
            | KExpr::Load { addr: e, .. } => e.attrs(out),
            KExpr::Arith(_, l, r, _) => {
                l.attrs(out);
                r.attrs(out)
            }
            KExpr::Field { .. } | KExpr::Const(..) | KExpr::Stored { .. } => {}
        }
    }

    /// True when evaluating it reads memory through a helper ([`KExpr::Load`]).
    pub fn reads_memory(&self) -> bool {
        match self {
            KExpr::Load { .. } => true,
            KExpr::Neg(e, _) | KExpr::BitNot(e, _) | KExpr::Cast(e, _) => e.reads_memory(),
            KExpr::Arith(_, l, r, _) => l.reads_memory() || r.reads_memory(),
            KExpr::Field { .. } | KExpr::Attr(..) | KExpr::Const(..) | KExpr::Stored { .. } => {
                false
            }
        }
    }

    /// Upper bound of the instructions the code generator emits to evaluate it.
    pub fn insns(&self) -> usize {
        match self {
            // A BTF path: the argument, one load (or probe read: spills and a call) per step.
            KExpr::Field {
                access: Access::Btf { steps, .. },
                ..
            } => 4 + 24 * steps.len(),
            KExpr::Field { .. } | KExpr::Attr(..) | KExpr::Stored { .. } => 3,
            KExpr::Const(..) => 2,
            KExpr::Neg(e, _) | KExpr::BitNot(e, _) | KExpr::Cast(e, _) => e.insns() + 3,
            // The address, five spills and reloads around the helper call, the call and the load.
            KExpr::Load { addr, .. } => addr.insns() + 24,
            KExpr::Arith(_, l, r, _) => l.insns() + r.insns() + 3,
        }
    }

    /// Registers the code generator uses to evaluate this expression: it
    /// evaluates the left operand first into the destination, then the right
    /// one into the next registers (a constant that fits an immediate needs none).
    pub fn regs_needed(&self) -> usize {
        match self {
            KExpr::Field { .. } | KExpr::Attr(..) | KExpr::Const(..) | KExpr::Stored { .. } => 1,
            KExpr::Neg(e, _)
            | KExpr::BitNot(e, _)
            | KExpr::Cast(e, _)
            | KExpr::Load { addr: e, .. } => e.regs_needed(),
            KExpr::Arith(_, l, r, _) => l.regs_needed().max(1 + r.operand_regs()),
        }
    }

    /// Registers needed as a right operand: none for an immediate constant.
    pub fn operand_regs(&self) -> usize {
        match self {
            KExpr::Const(v, _) if i32::try_from(*v as i64).is_ok() => 0,
            other => other.regs_needed(),
        }
    }
}

impl fmt::Display for KExpr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KExpr::Field { name, .. } | KExpr::Stored { name, .. } => write!(f, "{name}"),
            KExpr::Attr(a, _) => write!(f, "{}", a.name()),
            KExpr::Const(v, ty) if ty.signed => write!(f, "{}", *v as i64),
            KExpr::Const(v, _) => write!(f, "{v}"),
            KExpr::Neg(e, _) => write!(f, "-({e})"),
            KExpr::BitNot(e, _) => write!(f, "~({e})"),
            KExpr::Arith(op, l, r, _) => write!(f, "({l} {op:?} {r})"),
            KExpr::Cast(e, ty) => write!(f, "{e}::{}", ty.data_type()),
            KExpr::Load { addr, user, ty } => write!(
                f,
                "{}{}_at({addr}) ({} memory)",
                if ty.signed { "i" } else { "u" },
                ty.bits,
                if *user { "user" } else { "kernel" }
            ),
        }
    }
}

/// A kernel predicate: compiled to jumps, never materialized as a value.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum KPred {
    /// Always true or always false.
    Const(bool),
    /// Integer comparison; `signed` picks signed jumps.
    Cmp {
        /// Operator.
        op: CmpOp,
        /// Left operand.
        l: KExpr,
        /// Right operand.
        r: KExpr,
        /// Signed comparison (the left operand's type is signed).
        signed: bool,
    },
    /// All conjuncts hold (short-circuit).
    And(Vec<KPred>),
    /// At least one disjunct holds (short-circuit).
    Or(Vec<KPred>),
    /// Negation.
    Not(Box<KPred>),
    /// `e [NOT] IN (list)` over at most 64 constants.
    In {
        /// Tested value.
        e: KExpr,
        /// Constants, wrapped to the type of `e`.
        list: Vec<u64>,
        /// `NOT IN`.
        negated: bool,
    },
    /// String equality against a literal (compares up to and including the
    /// NUL), or with `prefix` a prefix test (`LIKE 'abc%'`, `starts_with`:
    /// compares the literal's bytes only).
    StrEq {
        /// Where the string is read from.
        src: StrSrc,
        /// The literal's UTF-8 bytes, without NUL.
        lit: Vec<u8>,
        /// `<>` instead of `=` (`NOT LIKE` for a prefix).
        negated: bool,
        /// The string starts with `lit` (instead of: is `lit`).
        prefix: bool,
    },
}

impl KPred {
    /// System attributes the predicate reads (`comm` included).
    pub fn attrs(&self, out: &mut Vec<SystemAttr>) {
        match self {
            KPred::Const(_) => {}
            KPred::Cmp { l, r, .. } => {
                l.attrs(out);
                r.attrs(out)
            }
            KPred::And(v) | KPred::Or(v) => v.iter().for_each(|p| p.attrs(out)),
            KPred::Not(p) => p.attrs(out),
            KPred::In { e, .. } => e.attrs(out),
            KPred::StrEq { src, .. } => src.attrs(out),
        }
    }

    /// True when testing it reads memory through a helper ([`KExpr::Load`]).
    pub fn reads_memory(&self) -> bool {
        match self {
            KPred::Const(_) | KPred::StrEq { .. } => false,
            KPred::Cmp { l, r, .. } => l.reads_memory() || r.reads_memory(),
            KPred::And(v) | KPred::Or(v) => v.iter().any(KPred::reads_memory),
            KPred::Not(p) => p.reads_memory(),
            KPred::In { e, .. } => e.reads_memory(),
        }
    }

    /// Upper bound of the instructions the code generator emits for the predicate.
    pub fn insns(&self) -> usize {
        match self {
            KPred::Const(_) => 1,
            KPred::Cmp { l, r, .. } => l.insns() + r.insns() + 1,
            KPred::And(v) | KPred::Or(v) => v.iter().map(KPred::insns).sum::<usize>() + 1,
            KPred::Not(p) => p.insns(),
            KPred::In { e, list, .. } => e.insns() + 3 * list.len() + 2,
            KPred::StrEq { src, lit, .. } => {
                2 * (lit.len() + 1) + 1 + if src.read_by_helper() { 12 } else { 0 }
            }
        }
    }

    /// Cost class used to order conjuncts: pid/tid tests first (thesis §3.4,
    /// paper 004: every instruction before the pid test is paid by untraced
    /// processes), then values loaded directly, then other helpers (probe
    /// reads included), then strings ([`crate::choose::cost_class`]).
    pub fn cost_class(&self) -> u8 {
        crate::choose::cost_class(self)
    }
}

/// Width in bytes of an integer field's value: the width of its C type when
/// the record stores it in a wider slot (syscall tracepoints declare
/// `unsigned int fd` with `size:8`: the syscall sees a 32-bit int), else its size.
pub fn field_width(f: &TraceField) -> u32 {
    let t = f.c_type.replace("const ", "").replace("volatile ", "");
    let t = t.trim();
    let width = match t {
        "char" | "signed char" | "unsigned char" | "u8" | "s8" | "__u8" | "__s8" | "int8_t"
        | "uint8_t" | "bool" | "_Bool" => 1,
        "short" | "unsigned short" | "short int" | "short unsigned int" | "u16" | "s16"
        | "__u16" | "__s16" => 2,
        "short signed int" | "signed short" | "short unsigned" | "unsigned short int"
        | "int16_t" | "uint16_t" | "umode_t" => 2,
        "int" | "signed" | "signed int" | "unsigned int" | "unsigned" | "uint" | "u32" | "s32"
        | "__u32" | "__s32" | "int32_t" | "uint32_t" | "pid_t" | "uid_t" | "gid_t" | "qid_t"
        | "key_serial_t" | "key_t" | "clockid_t" | "timer_t" | "mqd_t" | "rwf_t"
        | "__kernel_pid_t" | "__kernel_clockid_t" | "__kernel_timer_t" | "__kernel_key_t"
        | "__kernel_mqd_t" | "__kernel_rwf_t" => 4,
        _ => f.size,
    };
    width.min(f.size)
}

/// The kernel expression reading an integer or pointer field, if it is one.
pub fn field_expr(f: &TraceField) -> Option<KExpr> {
    let (width, signed) = match &f.kind {
        FieldKind::Int { signed } => (field_width(f), *signed),
        FieldKind::Pointer => (8, false),
        _ => return None,
    };
    if !matches!(
        f.access,
        Access::Ctx | Access::Btf { .. } | Access::Usdt(_) | Access::Packet(_)
    ) {
        return None;
    }
    Some(KExpr::Field {
        name: f.name.clone(),
        access: f.access.clone(),
        offset: f.offset,
        size: width,
        ty: IntType {
            bits: (width * 8).min(64) as u8,
            signed,
        },
    })
}

/// Registers every code path of the generator has for evaluating one value
/// (the aggregate update keeps one of the six scratch registers for the old
/// accumulator). Expressions needing more run in user space.
pub const EVAL_REG_BUDGET: usize = 5;

/// Resolves column references and types while translating.
pub struct Scope<'a> {
    /// The event whose fields and system attributes columns name.
    pub event: &'a EventSchema,
    /// DataFusion schema the expressions are typed against.
    pub schema: &'a DFSchema,
    /// In the end program of a pairing: the start event, whose columns
    /// become [`KExpr::Stored`] loads.
    pub start: Option<&'a StartSide<'a>>,
}

/// The start event of an enter/exit pairing, seen from the end program:
/// columns qualified by one of `qualifiers` are the start event's; each one an
/// expression reads is added to `stored` (the start program stores them).
pub struct StartSide<'a> {
    /// The start event.
    pub event: &'a EventSchema,
    /// Names that qualify its columns (its alias and table name).
    pub qualifiers: Vec<String>,
    /// Start columns to store, in value order: (how the start program reads it, its name).
    pub stored: std::cell::RefCell<Vec<(KExpr, String)>>,
    /// Start strings to store, after the integer columns: (how the start
    /// program reads it, the string as the query writes it).
    pub stored_strs: std::cell::RefCell<Vec<(StrSrc, String)>>,
}

impl StartSide<'_> {
    /// The start program stores `src` (once, however often the query reads
    /// it); the end program reads it as the returned [`StrSrc::Stored`].
    fn store_str(&self, src: StrSrc, name: String) -> StrSrc {
        let mut v = self.stored_strs.borrow_mut();
        let index = match v.iter().position(|(s, _)| *s == src) {
            Some(i) => i,
            None => {
                v.push((src.clone(), name.clone()));
                v.len() - 1
            }
        };
        StrSrc::Stored {
            name,
            index,
            of: Box::new(src),
        }
    }
}

impl Scope<'_> {
    /// The start event, if `c` is one of its columns.
    pub fn start_of(&self, c: &datafusion::common::Column) -> Option<&StartSide<'_>> {
        let start = self.start?;
        let q = c.relation.as_ref()?;
        start
            .qualifiers
            .iter()
            .any(|s| s == q.table())
            .then_some(start)
    }
}

type Why = String;

fn dtype(e: &Expr, scope: &Scope) -> Result<DataType, Why> {
    e.get_type(scope.schema)
        .map_err(|err| format!("cannot type `{e}`: {err}"))
}

fn int_type(e: &Expr, scope: &Scope) -> Result<IntType, Why> {
    let dt = dtype(e, scope)?;
    IntType::of(&dt)
        .ok_or_else(|| format!("`{e}` has type {dt}; the kernel computes on integers only"))
}

fn literal_u64(v: &ScalarValue) -> Option<u64> {
    Some(match v {
        ScalarValue::Int8(Some(x)) => *x as i64 as u64,
        ScalarValue::Int16(Some(x)) => *x as i64 as u64,
        ScalarValue::Int32(Some(x)) => *x as i64 as u64,
        ScalarValue::Int64(Some(x)) => *x as u64,
        ScalarValue::UInt8(Some(x)) => *x as u64,
        ScalarValue::UInt16(Some(x)) => *x as u64,
        ScalarValue::UInt32(Some(x)) => *x as u64,
        ScalarValue::UInt64(Some(x)) => *x,
        ScalarValue::Boolean(Some(b)) => *b as u64,
        _ => return None,
    })
}

fn strip_alias(e: &Expr) -> &Expr {
    match e {
        Expr::Alias(a) => strip_alias(&a.expr),
        other => other,
    }
}

/// Translates an integer-valued expression. The result never is NULL and
/// fits the code generator's registers.
pub fn translate_value(e: &Expr, scope: &Scope) -> Result<KExpr, Why> {
    let k = translate_value_inner(e, scope)?;
    if k.regs_needed() > EVAL_REG_BUDGET {
        return Err(format!("`{e}` needs more registers than the kernel has ({EVAL_REG_BUDGET}); it runs in user space"));
    }
    Ok(k)
}

fn translate_value_inner(e: &Expr, scope: &Scope) -> Result<KExpr, Why> {
    let e = strip_alias(e);
    match e {
        Expr::Column(c) if scope.start_of(c).is_some() => {
            let start = scope.start_of(c).expect("checked");
            let read = match start.event.resolve(&c.name) {
                Some(EventColumn::Field(f)) => field_expr(&f).ok_or_else(|| format!("start column `{c}` is a string: it can be selected, grouped by or compared with a literal, not computed on"))?,
                Some(EventColumn::Attr(SystemAttr::Comm)) => return Err(format!("start column `{c}` is a string: it can be selected, grouped by or compared with a literal, not computed on")),
                Some(EventColumn::Attr(a)) => KExpr::Attr(a, IntType::of(&crate::planner::attr_type(a)).expect("integer attribute")),
                None => return Err(format!("unknown column `{c}`")),
            };
            let ty = read.ty();
            let mut stored = start.stored.borrow_mut();
            let index = match stored.iter().position(|(k, _)| *k == read) {
                Some(i) => i,
                None => {
                    stored.push((read, c.flat_name()));
                    stored.len() - 1
                }
            };
            Ok(KExpr::Stored {
                name: c.flat_name(),
                index,
                ty,
            })
        }
        Expr::Column(c) => match scope.event.resolve(&c.name) {
            Some(EventColumn::Field(f)) => field_expr(&f).ok_or_else(|| {
                format!(
                    "field `{}` is a string; strings are compared with = or <> against a literal",
                    f.name
                )
            }),
            Some(EventColumn::Attr(SystemAttr::Comm)) => Err("`comm` is a string".into()),
            Some(EventColumn::Attr(a)) => Ok(KExpr::Attr(a, int_type(e, scope)?)),
            None => Err(format!("unknown column `{}`", c.name)),
        },
        Expr::Literal(v, _) => {
            let ty = int_type(e, scope)?;
            literal_u64(v)
                .map(|x| KExpr::Const(x, ty))
                .ok_or_else(|| format!("literal {v} is not an integer"))
        }
        Expr::ScalarFunction(f) if crate::memfn::load_type(f.name()).is_some() => load(e, f, scope),
        Expr::Negative(inner) => Ok(KExpr::Neg(
            Box::new(translate_value_inner(inner, scope)?),
            int_type(e, scope)?,
        )),
        Expr::Cast(c) => cast(&c.expr, c.field.data_type(), scope),
        Expr::TryCast(c) => cast(&c.expr, c.field.data_type(), scope),
        Expr::BinaryExpr(b) => {
            let op = match b.op {
                Operator::Plus => ArithOp::Add,
                Operator::Minus => ArithOp::Sub,
                Operator::Multiply => ArithOp::Mul,
                Operator::Divide => ArithOp::Div,
                Operator::Modulo => ArithOp::Mod,
                Operator::BitwiseAnd => ArithOp::And,
                Operator::BitwiseOr => ArithOp::Or,
                Operator::BitwiseXor => ArithOp::Xor,
                Operator::BitwiseShiftLeft => ArithOp::Shl,
                Operator::BitwiseShiftRight => ArithOp::Shr,
                other => return Err(format!("operator {other} does not give an integer")),
            };
            let ty = int_type(e, scope)?;
            let l = translate_value_inner(&b.left, scope)?;
            let r = translate_value_inner(&b.right, scope)?;
            if l.ty() != ty || (r.ty() != ty && !matches!(op, ArithOp::Shl | ArithOp::Shr)) {
                // DataFusion coerces both operands to the result type first; anything else is not ours to guess.
                return Err(format!(
                    "`{e}`: operands of types {} and {} with result {}",
                    l.ty().data_type(),
                    r.ty().data_type(),
                    ty.data_type()
                ));
            }
            let r = match op {
                ArithOp::Div | ArithOp::Mod => {
                    let divisor_ok = matches!(r, KExpr::Const(v, _) if v != 0) && !ty.signed;
                    if !divisor_ok {
                        return Err(format!(
                            "`{e}`: the kernel divides only unsigned values by a non-zero constant (SQL division by zero is an error, BPF's is 0)"
                        ));
                    }
                    r
                }
                // Shift amounts modulo the width (wrapping_shl/shr); BPF masks
                // register amounts to 63 only, and rejects constant amounts >= 64.
                ArithOp::Shl | ArithOp::Shr => match r {
                    KExpr::Const(v, t) => KExpr::Const(v & (ty.bits as u64 - 1), t),
                    other => KExpr::Arith(
                        ArithOp::And,
                        Box::new(other),
                        Box::new(KExpr::Const(ty.bits as u64 - 1, ty)),
                        ty,
                    ),
                },
                _ => r,
            };
            Ok(KExpr::Arith(op, Box::new(l), Box::new(r), ty))
        }
        other => Err(format!("`{other}` has no kernel implementation")),
    }
}

/// `u64_at(p)` and the other [`crate::memfn`] loads: the address is a
/// 64-bit kernel value; on a pairing's start event (its address reads start
/// columns) the start program reads it and stores the value.
fn load(
    e: &Expr,
    f: &datafusion::logical_expr::expr::ScalarFunction,
    scope: &Scope,
) -> Result<KExpr, Why> {
    let name = f.name();
    let ty = IntType::of(&crate::memfn::load_type(name).expect("a load function"))
        .expect("an integer type");
    let [arg] = f.args.as_slice() else {
        return Err(format!("{name}(p) takes one address"));
    };
    if let Some(start) = scope.start {
        let refs = arg.column_refs();
        let of_start = refs.iter().filter(|c| scope.start_of(c).is_some()).count();
        if of_start > 0 && of_start < refs.len() {
            return Err(format!(
                "`{e}` reads columns of both events; memory is read at one of them"
            ));
        }
        if of_start > 0 {
            let read = translate_value_inner(
                e,
                &Scope {
                    event: start.event,
                    schema: scope.schema,
                    start: None,
                },
            )?;
            let mut stored = start.stored.borrow_mut();
            let index = match stored.iter().position(|(k, _)| *k == read) {
                Some(i) => i,
                None => {
                    stored.push((read, e.to_string()));
                    stored.len() - 1
                }
            };
            return Ok(KExpr::Stored {
                name: e.to_string(),
                index,
                ty,
            });
        }
    }
    let addr = translate_value_inner(arg, scope)?;
    if addr.ty().bits != 64 {
        return Err(format!(
            "{name}() reads at a 64-bit address; `{arg}` is {}",
            addr.ty().data_type()
        ));
    }
    Ok(KExpr::Load {
        addr: Box::new(addr),
        user: pointers_are_user(&scope.event.event),
        ty,
    })
}

/// Only widening casts: DataFusion's CAST fails and TRY_CAST gives NULL
/// when a value does not fit the target type; the kernel would wrap it.
fn cast(inner: &Expr, to: &DataType, scope: &Scope) -> Result<KExpr, Why> {
    let ty = IntType::of(to).ok_or_else(|| format!("cast to {to} runs in user space"))?;
    let k = translate_value_inner(inner, scope)?;
    if !k.ty().fits_in(ty) {
        return Err(format!(
            "cast from {} to {to} can fail or give NULL for values that do not fit; it runs in user space",
            k.ty().data_type()
        ));
    }
    Ok(if k.ty() == ty {
        k
    } else {
        KExpr::Cast(Box::new(k), ty)
    })
}

/// Largest predicate (in estimated instructions, [`KPred::insns`]) one
/// pushed filter may compile to: BPF conditional jumps reach ±32767
/// instructions, and every filter jumps to the program's exit.
pub const MAX_PRED_INSNS: usize = 2048;

/// Translates a boolean predicate; the result is never NULL (SQL's third
/// value cannot arise from kernel values) and at most [`MAX_PRED_INSNS`] long.
pub fn translate_pred(e: &Expr, scope: &Scope) -> Result<KPred, Why> {
    let p = translate_pred_inner(e, scope)?;
    if p.insns() > MAX_PRED_INSNS {
        return Err(format!("`{e}` would compile to more than {MAX_PRED_INSNS} BPF instructions; it runs in user space"));
    }
    Ok(p)
}

fn translate_pred_inner(e: &Expr, scope: &Scope) -> Result<KPred, Why> {
    let e = strip_alias(e);
    match e {
        Expr::Literal(ScalarValue::Boolean(Some(b)), _) => Ok(KPred::Const(*b)),
        Expr::Not(inner) => Ok(KPred::Not(Box::new(translate_pred_inner(inner, scope)?))),
        Expr::BinaryExpr(b) if matches!(b.op, Operator::And | Operator::Or) => {
            let l = translate_pred_inner(&b.left, scope)?;
            let r = translate_pred_inner(&b.right, scope)?;
            Ok(if b.op == Operator::And {
                KPred::And(vec![l, r])
            } else {
                KPred::Or(vec![l, r])
            })
        }
        Expr::BinaryExpr(b) => {
            let op = match b.op {
                Operator::Eq => CmpOp::Eq,
                Operator::NotEq => CmpOp::Ne,
                Operator::Lt => CmpOp::Lt,
                Operator::LtEq => CmpOp::Le,
                Operator::Gt => CmpOp::Gt,
                Operator::GtEq => CmpOp::Ge,
                // Equal to <> and = when neither side can be NULL, as in the kernel.
                Operator::IsDistinctFrom => CmpOp::Ne,
                Operator::IsNotDistinctFrom => CmpOp::Eq,
                other => return Err(format!("operator {other} has no kernel implementation")),
            };
            if let Some(p) = string_eq(&b.left, &b.right, op, scope)? {
                return Ok(p);
            }
            let l = translate_value(&b.left, scope)?;
            let r = translate_value(&b.right, scope)?;
            if l.ty().signed != r.ty().signed {
                // Registers hold sign- or zero-extended values: a comparison is
                // exact only when both sides agree on signedness.
                return Err(format!(
                    "`{e}` compares {} with {}",
                    l.ty().data_type(),
                    r.ty().data_type()
                ));
            }
            let signed = l.ty().signed;
            Ok(KPred::Cmp { op, l, r, signed })
        }
        Expr::Between(bt) => {
            let lo = Expr::BinaryExpr(datafusion::logical_expr::BinaryExpr::new(
                bt.expr.clone(),
                Operator::GtEq,
                bt.low.clone(),
            ));
            let hi = Expr::BinaryExpr(datafusion::logical_expr::BinaryExpr::new(
                bt.expr.clone(),
                Operator::LtEq,
                bt.high.clone(),
            ));
            let both = KPred::And(vec![
                translate_pred_inner(&lo, scope)?,
                translate_pred_inner(&hi, scope)?,
            ]);
            Ok(if bt.negated {
                KPred::Not(Box::new(both))
            } else {
                both
            })
        }
        Expr::InList(il) => {
            let v = translate_value(&il.expr, scope)?;
            let ty = v.ty();
            let mut list = Vec::with_capacity(il.list.len());
            for item in &il.list {
                match translate_value(item, scope)? {
                    // A constant outside the tested type's range never equals it (do not wrap it into range).
                    KExpr::Const(c, cty) => {
                        let exact = if cty.signed {
                            c as i64 as i128
                        } else {
                            c as i128
                        };
                        if ty.min() <= exact && exact <= ty.max() {
                            list.push(wrap(c, ty));
                        }
                    }
                    _ => return Err("IN lists in the kernel hold constants only".into()),
                }
            }
            if list.len() > 64 {
                return Err("IN lists longer than 64 run in user space".into());
            }
            Ok(KPred::In {
                e: v,
                list,
                negated: il.negated,
            })
        }
        // Kernel values are never NULL, so the test is constant, but only
        // for operands the kernel computes: `NULLIF(count, 100) IS NULL` is not.
        Expr::IsNull(x) | Expr::IsNotNull(x) => {
            never_null(x, scope)?;
            Ok(KPred::Const(matches!(e, Expr::IsNotNull(_))))
        }
        // Kernel predicates are never NULL: IS TRUE is the predicate, IS UNKNOWN never holds.
        Expr::IsTrue(p) | Expr::IsNotFalse(p) => translate_pred_inner(p, scope),
        Expr::IsFalse(p) | Expr::IsNotTrue(p) => {
            Ok(KPred::Not(Box::new(translate_pred_inner(p, scope)?)))
        }
        Expr::IsUnknown(p) | Expr::IsNotUnknown(p) => {
            translate_pred_inner(p, scope)?;
            Ok(KPred::Const(matches!(e, Expr::IsNotUnknown(_))))
        }
        Expr::Like(like) if !like.case_insensitive && like.escape_char.is_none() => {
            let Expr::Literal(
                ScalarValue::Utf8(Some(pat))
                | ScalarValue::LargeUtf8(Some(pat))
                | ScalarValue::Utf8View(Some(pat)),
                _,
            ) = strip_cast(&like.pattern)
            else {
                return Err("LIKE with a pattern that is not a literal runs in user space".into());
            };
            let Some(lit) = like_prefix(pat) else {
                return Err(format!("LIKE '{pat}': the kernel tests only 'text' and 'prefix%' patterns (no _ or inner %)"));
            };
            let src = str_src(&like.expr, scope)?
                .ok_or_else(|| format!("`{}` is not a string the kernel reads", like.expr))?;
            string_pred(src, lit.0, like.negated, lit.1)
        }
        Expr::ScalarFunction(f) if f.name() == "starts_with" && f.args.len() == 2 => {
            let Expr::Literal(
                ScalarValue::Utf8(Some(lit))
                | ScalarValue::LargeUtf8(Some(lit))
                | ScalarValue::Utf8View(Some(lit)),
                _,
            ) = strip_cast(&f.args[1])
            else {
                return Err(
                    "starts_with with a prefix that is not a literal runs in user space".into(),
                );
            };
            let src = str_src(&f.args[0], scope)?
                .ok_or_else(|| format!("`{}` is not a string the kernel reads", f.args[0]))?;
            string_pred(src, lit, false, true)
        }
        // Arrow casts integers to booleans as `x <> 0`.
        Expr::Cast(c) if c.field.data_type() == &DataType::Boolean => {
            let v = translate_value(&c.expr, scope)?;
            let ty = v.ty();
            Ok(KPred::Cmp {
                op: CmpOp::Ne,
                l: v,
                r: KExpr::Const(0, ty),
                signed: false,
            })
        }
        other => Err(format!("`{other}` has no kernel implementation")),
    }
}

/// Ok when the kernel computes `e` (so it is never NULL): an event column,
/// an integer value or a predicate; else why `e` may be NULL.
pub fn never_null(e: &Expr, scope: &Scope) -> Result<(), Why> {
    if let Expr::Column(c) = strip_alias(e) {
        if scope.start_of(c).is_none() && scope.event.resolve(&c.name).is_some() {
            return Ok(()); // every event column is NOT NULL
        }
    }
    if translate_value(e, scope).is_ok() || translate_pred(e, scope).is_ok() {
        return Ok(());
    }
    Err(format!("`{e}` may be NULL; the test runs in user space"))
}

/// `s = 'literal'` or `s <> 'literal'` on a string the kernel reads ([`str_src`]).
fn string_eq(l: &Expr, r: &Expr, op: CmpOp, scope: &Scope) -> Result<Option<KPred>, Why> {
    let (s, text) = match (strip_cast(l), strip_cast(r)) {
        (Expr::Literal(v, _), other) | (other, Expr::Literal(v, _)) => match v {
            ScalarValue::Utf8(Some(t))
            | ScalarValue::LargeUtf8(Some(t))
            | ScalarValue::Utf8View(Some(t)) => (other, t),
            _ => return Ok(None),
        },
        _ => return Ok(None),
    };
    let Some(src) = str_src(s, scope)? else {
        return Ok(None);
    };
    let negated = match op {
        CmpOp::Eq => false,
        CmpOp::Ne => true,
        _ => {
            return Err("strings are ordered in user space; the kernel tests only = and <>".into())
        }
    };
    string_pred(src, text, negated, false).map(Some)
}

/// The kernel test of `src` against a literal: equality or prefix.
fn string_pred(src: StrSrc, text: &str, negated: bool, prefix: bool) -> Result<KPred, Why> {
    if text.as_bytes().contains(&0) || text.contains(char::REPLACEMENT_CHARACTER) {
        // User space reads up to the NUL and decodes invalid UTF-8 lossily (as U+FFFD):
        // such literals can match strings whose bytes differ from theirs.
        return Err("a string literal with a NUL byte or U+FFFD is compared in user space".into());
    }
    Ok(KPred::StrEq {
        src,
        lit: text.as_bytes().to_vec(),
        negated,
        prefix,
    })
}

/// The literal of a LIKE pattern that is an equality (`'abc'`, `false`) or a
/// prefix test (`'abc%'`, `true`); `None` for any other pattern.
fn like_prefix(pat: &str) -> Option<(&str, bool)> {
    let (body, prefix) = match pat.strip_suffix('%') {
        Some(b) => (b, true),
        None => (pat, false),
    };
    (!body.contains(['%', '_', '\\'])).then_some((body, prefix))
}

/// The names of the string functions: `str` (user or kernel memory by the
/// event, see [`pointers_are_user`]), `ustr` (user memory), `kstr` (kernel memory).
pub const STR_FUNCTIONS: [&str; 3] = ["str", "ustr", "kstr"];

/// `truncated(s)`: whether the string `s` a `_str` helper read was cut to its
/// buffer ([`crate::strfn`]).
pub const TRUNCATED_FUNCTION: &str = "truncated";

/// Whether pointers of `event` point into user memory when the query does
/// not say (`str` rather than `ustr`/`kstr`): arguments of system-call
/// tracepoints (`syscalls:sys_enter_*`: the kernel has not copied them yet)
/// and of uprobes and USDT probes are user addresses; every other event's
/// pointers are kernel addresses.
pub fn pointers_are_user(event: &ebql_catalog::EventName) -> bool {
    use ebql_catalog::EventKind;
    match event.kind {
        EventKind::Uprobe | EventKind::Uretprobe | EventKind::Usdt => true,
        EventKind::Tracepoint => event.category == "syscalls",
        _ => false,
    }
}

/// The string `e` is in the kernel, if it is one: `comm`, a char-array or
/// `__data_loc` field, or a call `str(ptr [, n [, len]])` / `ustr(…)` / `kstr(…)`.
/// `Ok(None)`: `e` is not a string the kernel reads (no opinion);
/// `Err`: it is one, but this form of it runs in user space.
pub fn str_src(e: &Expr, scope: &Scope) -> Result<Option<StrSrc>, Why> {
    let e = strip_alias(e);
    // A string of a pairing's start event: read by the start program, stored with the start.
    if let Some(start) = scope.start {
        let refs = e.column_refs();
        let of_start = refs.iter().filter(|c| scope.start_of(c).is_some()).count();
        if of_start > 0 && of_start < refs.len() {
            return Err(format!(
                "`{e}` reads columns of both events; a string is read at one of them"
            ));
        }
        if of_start > 0 {
            let start_scope = Scope {
                event: start.event,
                schema: scope.schema,
                start: None,
            };
            return Ok(str_src(e, &start_scope)?.map(|src| start.store_str(src, e.to_string())));
        }
    }
    if let Expr::Column(c) = e {
        return Ok(match scope.event.resolve(&c.name) {
            Some(EventColumn::Attr(SystemAttr::Comm)) => Some(StrSrc::Comm),
            Some(EventColumn::Field(f)) => match f.kind {
                FieldKind::CharArray { len } => Some(StrSrc::char_array(&f, len)),
                FieldKind::DataLocString => Some(StrSrc::DataLoc {
                    name: f.name.clone(),
                    offset: f.offset,
                    size: STR_DEFAULT_BYTES,
                }),
                _ => None,
            },
            _ => None,
        });
    }
    let Expr::ScalarFunction(f) = e else {
        return Ok(None);
    };
    let name = f.name();
    if !STR_FUNCTIONS.contains(&name) {
        return Ok(None);
    }
    let size = match f.args.get(1).map(strip_cast) {
        None => STR_DEFAULT_BYTES,
        Some(Expr::Literal(v, _)) => match literal_u64(v).filter(|n| (2..=STR_MAX_BYTES as u64).contains(n)) {
            Some(n) => n as u32,
            None => return Err(format!("{name}(x, n): n is the buffer size in bytes with the NUL, from 2 to {STR_MAX_BYTES}; got {v}")),
        },
        Some(other) => return Err(format!("{name}(x, n): n must be a constant, got `{other}`")),
    };
    let arg = f
        .args
        .first()
        .ok_or_else(|| format!("{name}() needs a pointer"))?;
    let len = match f.args.get(2) {
        Some(l) => Some(Box::new(str_len(name, l, scope)?)),
        None => None,
    };
    if let Some(inner) = str_src(arg, scope)? {
        return match inner {
            _ if len.is_some() => Err(format!("{name}(x, n, len): x must be a pointer; `{arg}` is already a string")),
            StrSrc::DataLoc { name: field, offset, .. } if name != "ustr" => Ok(Some(StrSrc::DataLoc { name: field, offset, size })),
            StrSrc::DataLoc { name: field, .. } => Err(format!("`{field}` is in the kernel's trace record: read it with str() or kstr(), not ustr()")),
            other => Err(format!("`{other}` is already a string; {name}() reads a pointer")),
        };
    }
    let ptr = translate_value(arg, scope)?;
    if ptr.ty().bits != 64 {
        return Err(format!(
            "{name}() reads a 64-bit pointer; `{arg}` is {}",
            ptr.ty().data_type()
        ));
    }
    let user = match name {
        "ustr" => true,
        "kstr" => false,
        _ => pointers_are_user(&scope.event.event),
    };
    Ok(Some(StrSrc::Ptr {
        ptr: Box::new(ptr),
        user,
        size,
        len,
    }))
}

/// The `len` of `str(p, n, len)`: an integer the probe computes (a length
/// argument such as `arg3`; a negative one reads nothing).
fn str_len(name: &str, e: &Expr, scope: &Scope) -> Result<KExpr, Why> {
    translate_value(e, scope).map_err(|why| {
        format!("{name}(x, n, len): the length `{e}` must be an integer the probe computes: {why}")
    })
}

fn strip_cast(e: &Expr) -> &Expr {
    match e {
        Expr::Cast(c) => strip_cast(&c.expr),
        Expr::TryCast(c) => strip_cast(&c.expr),
        other => other,
    }
}

/// Wraps a value to the width of `ty` (sign-extending signed types), as registers hold it.
pub fn wrap(v: u64, ty: IntType) -> u64 {
    if ty.bits >= 64 {
        return v;
    }
    let shift = 64 - ty.bits as u32;
    if ty.signed {
        (((v << shift) as i64) >> shift) as u64
    } else {
        (v << shift) >> shift
    }
}

/// The process every event passing `filters` comes from, if they say so: a
/// top-level conjunct `pid = <constant>` (either side). The program still
/// tests it; the runtime can also attach with it (uprobes, USDT: perf
/// `pid`), so other processes never trap at all.
pub fn pinned_pid<'a>(filters: impl IntoIterator<Item = &'a KPred>) -> Option<u32> {
    fn of(p: &KPred) -> Option<u32> {
        match p {
            KPred::Cmp {
                op: CmpOp::Eq,
                l,
                r,
                ..
            } => match (l, r) {
                (KExpr::Attr(SystemAttr::Pid, _), KExpr::Const(v, _))
                | (KExpr::Const(v, _), KExpr::Attr(SystemAttr::Pid, _)) => u32::try_from(*v).ok(),
                _ => None,
            },
            KPred::And(ps) => ps.iter().find_map(of),
            _ => None,
        }
    }
    filters.into_iter().find_map(of)
}

/// Splits a predicate into its top-level conjuncts.
pub fn conjuncts(p: KPred, out: &mut Vec<KPred>) {
    match p {
        KPred::And(v) => v.into_iter().for_each(|q| conjuncts(q, out)),
        other => out.push(other),
    }
}

#[cfg(test)]
mod tests {
    use super::{like_prefix, pointers_are_user};
    use ebql_catalog::{EventKind, EventName};

    #[test]
    fn like_patterns_the_kernel_tests() {
        assert_eq!(like_prefix("/etc/%"), Some(("/etc/", true)));
        assert_eq!(like_prefix("/etc/passwd"), Some(("/etc/passwd", false)));
        assert_eq!(like_prefix("%"), Some(("", true)));
        for other in ["%host%", "/etc/_", "a%b%", "a\\%"] {
            assert_eq!(like_prefix(other), None, "{other}");
        }
    }

    #[test]
    fn syscall_and_user_probe_pointers_are_user_memory() {
        assert!(pointers_are_user(&EventName::tracepoint(
            "syscalls",
            "sys_enter_openat"
        )));
        assert!(!pointers_are_user(&EventName::tracepoint(
            "sched",
            "sched_switch"
        )));
        assert!(pointers_are_user(&EventName::new(
            EventKind::Uprobe,
            "/bin/bash",
            "readline"
        )));
        assert!(!pointers_are_user(&EventName::new(
            EventKind::TpBtf,
            "sched",
            "sched_switch"
        )));
    }
}
