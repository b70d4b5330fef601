//! The kernel expression language: integer types, operators, values
//! ([`KExpr`]), predicates ([`KPred`]) and strings the probe reads
//! ([`StrSrc`]), with their cost estimates. What [`super::translate`]
//! produces and codegen compiles.

use datafusion::arrow::datatypes::DataType;
use ebql_catalog::{Access, FieldKind, SystemAttr, TraceField};
use std::fmt;

pub use crate::contract::IntType;

/// Arrow conversions of [`IntType`] (the type itself is the contract's, which
/// depends on nothing else in the compiler).
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

pub use crate::contract::BYTES_HEADER;

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
    /// a user page not resident) gives SQL NULL, counted in
    /// [`crate::contract::ctl::STR_READ_FAILED`].
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
    /// `bytes(ptr, len [, n])`: the `len` bytes at `ptr`, NULs and all,
    /// copied with `bpf_probe_read_user` (`user`) or `bpf_probe_read_kernel`:
    /// at most `size` of them (`len` beyond `size` is cut and flagged; a
    /// negative `len` reads nothing). A fault gives SQL NULL, counted in
    /// [`crate::contract::ctl::STR_READ_FAILED`]. A Binary column of a
    /// streamed row only ([`crate::contract::Stored::ReadBytes`]): group keys
    /// and filters over it run in user space.
    Bytes {
        /// The address.
        ptr: Box<KExpr>,
        /// User-space memory (true) or kernel memory (false).
        user: bool,
        /// Most bytes kept, from 1 to [`STR_MAX_BYTES`].
        size: u32,
        /// How many bytes are there (a system call's return value, a length argument).
        len: Box<KExpr>,
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
    #[allow(clippy::len_without_is_empty)] // a buffer size: never empty
    pub fn len(&self) -> u32 {
        match self {
            StrSrc::Comm => 16,
            StrSrc::CtxChars { len, .. } | StrSrc::Btf { len, .. } => *len,
            StrSrc::DataLoc { size, .. } | StrSrc::Ptr { size, .. } => *size,
            StrSrc::Bytes { size, .. } => size + BYTES_HEADER,
            StrSrc::Packet { .. } => ebql_catalog::source::tc::PAYLOAD_PREFIX,
            StrSrc::Stored { of, .. } => of.len(),
        }
    }

    /// Bytes the value occupies in a ring-buffer record or a pairing's
    /// start value: a string a `_str` helper reads gets one byte more than
    /// its buffer, so that a string of exactly `size - 1` bytes (kept whole)
    /// and a longer one (cut) differ: the helper copies `min(length, size)`
    /// bytes and a NUL, and the string was cut exactly when it copied `size`
    /// ([`crate::contract::Stored::ReadStr`], [`crate::contract::Stored::Truncated`]),
    /// and one more for the flag that says the read failed (SQL NULL).
    /// `bytes()` takes its [`BYTES_HEADER`] and its buffer.
    pub fn record_bytes(&self) -> u32 {
        match self {
            StrSrc::DataLoc { size, .. } | StrSrc::Ptr { size, .. } => size + 2,
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
            StrSrc::Bytes { size, .. } => *size,
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

    /// True when its address or length reads the task's user registers
    /// ([`KExpr::reads_user_regs`]).
    pub fn reads_user_regs(&self) -> bool {
        match self {
            StrSrc::Ptr { ptr, len, .. } => {
                ptr.reads_user_regs() || len.as_ref().is_some_and(|l| l.reads_user_regs())
            }
            StrSrc::Bytes { ptr, len, .. } => ptr.reads_user_regs() || len.reads_user_regs(),
            _ => false,
        }
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
            StrSrc::Bytes { ptr, len, .. } => {
                ptr.attrs(out);
                len.attrs(out);
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
            StrSrc::Bytes {
                ptr,
                user,
                size,
                len,
            } => write!(
                f,
                "{}bytes({ptr}, {len}, {size})",
                if *user { "user " } else { "kernel " }
            ),
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

    /// True when it reads one of the task's user registers
    /// ([`Access::TaskRegs`], [`crate::uregs`]): an address computed from
    /// one is user memory.
    pub fn reads_user_regs(&self) -> bool {
        match self {
            KExpr::Field { access, .. } => matches!(access, Access::TaskRegs { .. }),
            KExpr::Neg(e, _) | KExpr::BitNot(e, _) | KExpr::Cast(e, _) => e.reads_user_regs(),
            KExpr::Load { addr, .. } => addr.reads_user_regs(),
            KExpr::Arith(_, l, r, _) => l.reads_user_regs() || r.reads_user_regs(),
            KExpr::Attr(..) | KExpr::Const(..) | KExpr::Stored { .. } => false,
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
    /// True when testing it reads the task's user registers
    /// ([`KExpr::reads_user_regs`]).
    pub fn reads_user_regs(&self) -> bool {
        match self {
            KPred::Const(_) => false,
            KPred::Cmp { l, r, .. } => l.reads_user_regs() || r.reads_user_regs(),
            KPred::And(v) | KPred::Or(v) => v.iter().any(KPred::reads_user_regs),
            KPred::Not(p) => p.reads_user_regs(),
            KPred::In { e, .. } => e.reads_user_regs(),
            KPred::StrEq { src, .. } => src.reads_user_regs(),
        }
    }

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

    /// True when testing it reads a string with a `_str` helper, which can
    /// fail ([`crate::contract::ctl::STR_READ_FAILED`]).
    pub fn reads_str_by_helper(&self) -> bool {
        match self {
            KPred::StrEq { src, .. } => src.read_by_helper(),
            KPred::And(v) | KPred::Or(v) => v.iter().any(KPred::reads_str_by_helper),
            KPred::Not(p) => p.reads_str_by_helper(),
            KPred::Const(_) | KPred::Cmp { .. } | KPred::In { .. } => false,
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
    /// reads included), then strings. What evaluating the conjunct calls,
    /// from its system attributes and how its fields are read; the planner
    /// orders filters by it ([`crate::choose`]).
    pub fn cost_class(&self) -> u8 {
        let mut attrs = Vec::new();
        self.attrs(&mut attrs);
        if matches!(self, KPred::StrEq { .. }) || attrs.contains(&SystemAttr::Comm) {
            3
        } else if !attrs.is_empty()
            && attrs
                .iter()
                .all(|a| matches!(a, SystemAttr::Pid | SystemAttr::Tid))
        {
            0
        } else if attrs.is_empty() && !pred_reads_by_helper(self) {
            1
        } else {
            2
        }
    }
}

/// True when a field the predicate reads is fetched by a helper call
/// (`bpf_probe_read_*`: raw tracepoint struct paths, USDT memory operands).
fn pred_reads_by_helper(p: &KPred) -> bool {
    match p {
        KPred::Const(_) | KPred::StrEq { .. } => false,
        KPred::Cmp { l, r, .. } => expr_reads_by_helper(l) || expr_reads_by_helper(r),
        KPred::And(v) | KPred::Or(v) => v.iter().any(pred_reads_by_helper),
        KPred::Not(q) => pred_reads_by_helper(q),
        KPred::In { e, .. } => expr_reads_by_helper(e),
    }
}

fn expr_reads_by_helper(e: &KExpr) -> bool {
    match e {
        KExpr::Field {
            access: Access::Btf { steps, direct, .. },
            ..
        } => !direct && !steps.is_empty(),
        KExpr::Field {
            access:
                Access::Usdt(ebql_catalog::UsdtArg::Mem { .. })
                | Access::StackId { .. }
                | Access::Packet(_),
            ..
        } => true,
        KExpr::Load { .. } => true,
        KExpr::Field { .. } | KExpr::Attr(..) | KExpr::Const(..) | KExpr::Stored { .. } => false,
        KExpr::Neg(x, _) | KExpr::BitNot(x, _) | KExpr::Cast(x, _) => expr_reads_by_helper(x),
        KExpr::Arith(_, l, r, _) => expr_reads_by_helper(l) || expr_reads_by_helper(r),
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
