//! Pure eBPF instruction layer for eBQL.
//!
//! Everything here is plain data manipulation: no syscalls, no libbpf, no
//! `unsafe`. The encoding follows the kernel's
//! `Documentation/bpf/standardization/instruction-set.rst`; helper ids come
//! from `include/uapi/linux/bpf.h` (`___BPF_FUNC_MAPPER`).
//!
//! * [`insn`]: the 8-byte [`Insn`] slot, opcode constants, raw constructors.
//! * [`asm`]: [`Assembler`] with labels resolved at [`Assembler::finish`],
//!   plus reachability / fall-through checks the verifier would otherwise
//!   reject with a much less helpful message.
//! * [`disasm`]: bpftool/llvm-objdump style text for listings and tests.
//! * [`helper`]: kernel helper ids and map/ringbuf flag constants.
//! * [`kfunc`]: kernel functions called by name (BTF ids patched at load).
//! * [`stack`]: bump allocator for the 512-byte stack frame below `r10`.

pub mod asm;
pub mod disasm;
pub mod event_cache;
pub mod helper;
pub mod insn;
pub mod kfunc;
pub mod stack;

pub use asm::{AsmError, Assembler, Label, Program, Src};
pub use insn::{AluOp, Insn, JmpCond, Reg, Size};
pub use kfunc::Kfunc;
pub use stack::{StackAlloc, StackError};
