//! Strings: reads by the `bpf_probe_read_*_str` helpers, BTF `char[]`
//! arrays, and the copies into group keys (NUL-padded, nothing stale after
//! the NUL) and ring-buffer records.

use super::gen::{stack_err, Cached, Gen, Loc, CTX, EVAL_REGS};
use crate::contract::ctl;
use crate::kexpr::{KExpr, StrSrc};
use crate::CompileError;
use ebql_bpf::{helper, AluOp, JmpCond, Reg, Size, Src};

/// How a stored start string (read by the start program as `of`) is copied
/// by the end program: (bytes, helper). A string a `_str` helper read is
/// copied up to its NUL, into a record with its truncation byte
/// ([`StrSrc::record_bytes`]), into a group key within its buffer (cut as
/// `str(p, n)` is); a fixed-size one, stored with zeroes after its NUL, as is.
pub(super) fn stored_copy(of: &StrSrc, record: bool) -> (u32, i32) {
    match of.helper_buffer() {
        Some(n) => (
            if record { n + 1 } else { n },
            helper::PROBE_READ_KERNEL_STR,
        ),
        None => (of.len(), helper::PROBE_READ_KERNEL),
    }
}

/// The comment on `bytes()`'s jump to its read when the length is not 0:
/// the cost model takes that jump (`cost::profile`), pricing the read at
/// its bound, since how long the values will be is not known.
pub const READ_UNLESS_EMPTY: &str = "the read, unless the length is 0";

impl Gen {
    /// Copies the `char[len]` array at the end of a BTF path into a fresh
    /// zeroed stack buffer with `bpf_probe_read_kernel_str` (the pointers
    /// on the way loaded directly or probe-read, as in [`Gen::load_btf`])
    /// and returns the buffer's offset. Clobbers r0–r5.
    pub(super) fn read_btf_str(
        &mut self,
        access: &ebql_catalog::Access,
        len: u32,
    ) -> Result<i16, CompileError> {
        let ebql_catalog::Access::Btf { arg, steps, direct } = access else {
            return Err(CompileError::Internal(format!("string through {access:?}")));
        };
        let (last, path) = steps
            .split_last()
            .ok_or_else(|| CompileError::Internal("a string argument".into()))?;
        let buf = self
            .stack
            .alloc(len.div_ceil(8) as usize * 8, 8)
            .map_err(stack_err)?;
        for i in 0..len.div_ceil(8) as i16 {
            self.asm.st_imm(Size::DW, Reg::R10, buf + 8 * i, 0);
        }
        // The struct holding the array: the path without its last step, as a pointer.
        let mut to_struct = path.to_vec();
        if let Some(p) = to_struct.last_mut() {
            p.deref = true;
        }
        if to_struct.is_empty() {
            self.asm.ldx(Size::DW, Reg::R3, CTX, 8 * *arg as i16);
        } else {
            // A pointer-sized load of the last pointer on the way.
            let pointer_path: Vec<ebql_catalog::BtfStep> = to_struct
                .iter()
                .map(|s| ebql_catalog::BtfStep {
                    offset: s.offset,
                    deref: s.deref,
                })
                .collect();
            self.load_btf(*arg, &pointer_path, *direct, 8, &EVAL_REGS)?;
            self.asm.mov64(Reg::R3, Src::Reg(EVAL_REGS[0]));
        }
        self.asm
            .alu64(AluOp::Add, Reg::R3, Src::Imm(last.offset as i32));
        self.asm.mov64(Reg::R1, Src::Reg(Reg::R10));
        self.asm.alu64(AluOp::Add, Reg::R1, Src::Imm(buf as i32));
        self.asm.mov64(Reg::R2, Src::Imm(len as i32));
        self.asm.call(helper::PROBE_READ_KERNEL_STR);
        Ok(buf)
    }

    /// Stores zeroes into `size` bytes at `base+off` (no stale bytes after a NUL).
    pub(super) fn zero(&mut self, base: Reg, off: i16, size: u32) {
        self.asm
            .comment("zero the buffer: no stale bytes after the NUL");
        let mut i = 0i16;
        while i < size as i16 {
            let chunk = [8i16, 4, 2, 1]
                .into_iter()
                .find(|&c| i + c <= size as i16 && (off + i) % c == 0)
                .expect("1-byte chunks always fit");
            self.asm.st_imm(
                Size::from_bytes(chunk as usize).expect("1, 2, 4 or 8"),
                base,
                off + i,
                0,
            );
            i += chunk;
        }
    }

    /// Copies a string read by a `bpf_probe_read_*_str` helper (a
    /// `__data_loc` field or `str(ptr)`) into `size` bytes at `base+off`.
    /// The helper stops after the NUL, so with `zero` (group keys) the buffer
    /// is zeroed first: equal strings give equal keys. A fault makes the
    /// helper zero the buffer and return a negative errno, which r0 holds
    /// afterwards (a read of nothing, `str(p, n, len)` with `len <= 0`, is
    /// never a failure: r0 is then 0); the failure is counted in
    /// [`ctl::STR_READ_FAILED`] unless the tap reads ([`Gen::count_str_failures`]).
    /// The caller turns r0 into the value's NULL flag. Clobbers r0–r5.
    pub(super) fn read_str(
        &mut self,
        src: &StrSrc,
        base: Reg,
        off: i16,
        size: u32,
        zero: bool,
    ) -> Result<(), CompileError> {
        if zero {
            self.zero(base, off, size);
        }
        let helper = match src {
            StrSrc::DataLoc { offset, .. } => {
                self.asm.comment(
                    "r3 = ctx + (__data_loc & 0xffff): the string inside the trace record",
                );
                self.asm.ldx(Size::W, Reg::R1, CTX, *offset as i16);
                self.asm.alu64(AluOp::And, Reg::R1, Src::Imm(0xffff));
                self.asm.mov64(Reg::R3, Src::Reg(CTX));
                self.asm.alu64(AluOp::Add, Reg::R3, Src::Reg(Reg::R1));
                helper::PROBE_READ_KERNEL_STR
            }
            StrSrc::Ptr { ptr, user, len, .. } => {
                let bound = match len {
                    Some(len) => Some(self.str_read_size(len, size)?),
                    None => None,
                };
                if *user {
                    self.note_user_read(ptr, len.as_deref(), size);
                }
                self.eval(ptr, &[Reg::R3, Reg::R4, Reg::R5, Reg::R0, Reg::R1, Reg::R2])?;
                self.asm.mov64(Reg::R1, Src::Reg(base));
                self.asm.alu64(AluOp::Add, Reg::R1, Src::Imm(off as i32));
                match bound {
                    Some(slot) => self.asm.ldx(Size::DW, Reg::R2, Reg::R10, slot),
                    None => self.asm.mov64(Reg::R2, Src::Imm(size as i32)),
                }
                self.asm.call(if *user {
                    helper::PROBE_READ_USER_STR
                } else {
                    helper::PROBE_READ_KERNEL_STR
                });
                if let Some(slot) = bound {
                    // A size of 1 reads nothing: the empty string, whatever the pointer.
                    let read = self.asm.new_label();
                    self.asm.ldx(Size::DW, Reg::R1, Reg::R10, slot);
                    self.asm.jmp(JmpCond::Gt, Reg::R1, Src::Imm(1), read);
                    self.asm.mov64(Reg::R0, Src::Imm(0));
                    self.asm.bind(read);
                }
                return self.count_str_failure();
            }
            StrSrc::Comm
            | StrSrc::CtxChars { .. }
            | StrSrc::Btf { .. }
            | StrSrc::Bytes { .. }
            | StrSrc::Packet { .. }
            | StrSrc::Stored { .. } => {
                return Err(CompileError::Internal(format!(
                    "`{src}` is not read by a helper"
                )))
            }
        };
        self.asm.mov64(Reg::R1, Src::Reg(base));
        self.asm.alu64(AluOp::Add, Reg::R1, Src::Imm(off as i32));
        self.asm.mov64(Reg::R2, Src::Imm(size as i32));
        self.asm.call(helper);
        self.count_str_failure()
    }

    /// After a `_str` helper: when r0 is negative (the read failed), adds one
    /// to [`ctl::STR_READ_FAILED`] of this event's window; r0 is kept.
    /// Nothing for the oracle's tap, which reads the strings the query's
    /// code reads again. Clobbers r1, r2.
    fn count_str_failure(&mut self) -> Result<(), CompileError> {
        if !self.count_str_failures {
            return Ok(());
        }
        if matches!(self.window, Some(crate::prepass::WindowSpec::Time { .. }))
            && !self.reads.cache.contains_key(&Cached::Gen)
        {
            return Err(CompileError::Internal(
                "a string read before the window generation was read".into(),
            ));
        }
        let ok = self.asm.new_label();
        self.asm
            .comment("the read failed (r0 < 0): NULL, counted in ctl.str_read_failed");
        self.asm.jmp(JmpCond::Sge, Reg::R0, Src::Imm(0), ok);
        self.count_in(ctl::STR_READ_FAILED)?;
        self.asm.bind(ok);
        Ok(())
    }

    /// Reads a string with its `_str` helper ([`Gen::read_str`]) into a
    /// record or a start value at `base+off` (`record`: `n + 1` bytes and
    /// the NULL flag byte after them, [`crate::contract::Stored::ReadStr`])
    /// or into a zeroed group key of `n` bytes (the flag in its last byte,
    /// [`crate::contract::Stored::ReadKey`]): the flag is 1 exactly when the
    /// read failed (r0's sign bit). Clobbers r0–r5.
    pub(super) fn read_str_flagged(
        &mut self,
        src: &StrSrc,
        base: Reg,
        off: i16,
        n: u32,
        record: bool,
    ) -> Result<(), CompileError> {
        let (size, flag) = if record { (n + 1, n + 1) } else { (n, n - 1) };
        self.read_str(src, base, off, size, !record)?;
        self.asm.comment("NULL flag = (r0 < 0)");
        self.asm.mov64(Reg::R1, Src::Reg(Reg::R0));
        self.asm.alu64(AluOp::Rsh, Reg::R1, Src::Imm(63));
        self.asm.stx(Size::B, base, off + flag as i16, Reg::R1);
        Ok(())
    }

    /// End program: copies the NULL flag of stored start string `of` (at
    /// `from` + its offset in the start value, the pointer in stack slot
    /// `value`) next to its copy at `base+off` (`record`: after the `n + 1`
    /// bytes; a group key: its last byte). Nothing for fixed-size strings.
    /// Clobbers r1, r3.
    pub(super) fn copy_stored_flag(
        &mut self,
        of: &StrSrc,
        value: i16,
        from: i32,
        base: Reg,
        off: i16,
        record: bool,
    ) {
        let Some(n) = of.helper_buffer() else { return };
        let at = if record { n + 1 } else { n - 1 };
        self.asm.comment("the start string's NULL flag");
        self.asm.ldx(Size::DW, Reg::R3, Reg::R10, value);
        self.asm
            .ldx(Size::B, Reg::R1, Reg::R3, (from + n as i32 + 1) as i16);
        self.asm.stx(Size::B, base, off + at as i16, Reg::R1);
    }

    /// The `size` argument of a `_str` helper reading a string of `len`
    /// bytes (`str(p, n, len)`) into a buffer of `size`: `clamp(len, 0,
    /// size - 1) + 1` (the helper copies at most size − 1 bytes, then the
    /// NUL), kept on the stack (an 8-byte spill keeps its bounds for the
    /// verifier) while the pointer is evaluated. Returns the slot.
    pub(super) fn str_read_size(&mut self, len: &KExpr, size: u32) -> Result<i16, CompileError> {
        self.asm.comment(format!(
            "r1 = min({len}, {}) + 1: the helper's size",
            size - 1
        ));
        self.eval(len, &EVAL_REGS)?;
        if len.ty().signed {
            let positive = self.asm.new_label();
            self.asm.jmp(JmpCond::Sge, Reg::R1, Src::Imm(0), positive);
            self.asm.mov64(Reg::R1, Src::Imm(0));
            self.asm.bind(positive);
        }
        let fits = self.asm.new_label();
        self.asm
            .jmp(JmpCond::Le, Reg::R1, Src::Imm(size as i32 - 1), fits);
        self.asm.mov64(Reg::R1, Src::Imm(size as i32 - 1));
        self.asm.bind(fits);
        self.asm.alu64(AluOp::Add, Reg::R1, Src::Imm(1));
        let slot = self.stack.alloc(8, 8).map_err(stack_err)?;
        self.asm.stx(Size::DW, Reg::R10, slot, Reg::R1);
        Ok(slot)
    }

    /// `bytes(p, len, n)` into a record at `base+off`
    /// ([`crate::contract::Stored::ReadBytes`]): `m = clamp(len, 0, n)`
    /// bytes copied by `bpf_probe_read_{user,kernel}` after the header,
    /// which holds `m`, the NULL flag (the read failed: the helper zeroed
    /// the buffer and returned a negative errno; counted like a string's)
    /// and the cut flag (`len > n`). A length of 0 reads nothing, so it
    /// cannot fail: the empty value, never NULL, without the helper call
    /// (the wire capture's tail is empty for all but its longest calls).
    /// Clobbers r0–r5.
    fn read_bytes(&mut self, src: &StrSrc, base: Reg, off: i16) -> Result<(), CompileError> {
        let StrSrc::Bytes {
            ptr,
            user,
            size,
            len,
        } = src
        else {
            return Err(CompileError::Internal(format!("`{src}` is not bytes()")));
        };
        let header = crate::contract::BYTES_HEADER as i16;
        self.asm
            .comment(format!("m = clamp({len}, 0, {size}); cut = {len} > {size}"));
        self.eval(len, &EVAL_REGS)?;
        if len.ty().signed {
            let positive = self.asm.new_label();
            self.asm.jmp(JmpCond::Sge, Reg::R1, Src::Imm(0), positive);
            self.asm.mov64(Reg::R1, Src::Imm(0));
            self.asm.bind(positive);
        }
        self.asm.mov64(Reg::R2, Src::Imm(0));
        let fits = self.asm.new_label();
        self.asm
            .jmp(JmpCond::Le, Reg::R1, Src::Imm(*size as i32), fits);
        self.asm.mov64(Reg::R1, Src::Imm(*size as i32));
        self.asm.mov64(Reg::R2, Src::Imm(1));
        self.asm.bind(fits);
        self.asm.stx(Size::W, base, off, Reg::R1);
        self.asm.stx(Size::B, base, off + 5, Reg::R2);
        // An 8-byte spill keeps m's bounds for the verifier while p is evaluated.
        let slot = self.stack.alloc(8, 8).map_err(stack_err)?;
        self.asm.stx(Size::DW, Reg::R10, slot, Reg::R1);
        // Evaluated on every path: it may cache a helper's result that later code reads.
        self.eval(ptr, &[Reg::R3, Reg::R4, Reg::R5, Reg::R0, Reg::R1, Reg::R2])?;
        self.asm.ldx(Size::DW, Reg::R2, Reg::R10, slot);
        let (read, flag) = (self.asm.new_label(), self.asm.new_label());
        self.asm.comment(READ_UNLESS_EMPTY);
        self.asm.jmp(JmpCond::Ne, Reg::R2, Src::Imm(0), read);
        self.asm.comment("m = 0: nothing to read, not NULL");
        self.asm.mov64(Reg::R1, Src::Imm(0));
        self.asm.ja(flag);
        self.asm.bind(read);
        self.asm.mov64(Reg::R1, Src::Reg(base));
        self.asm
            .alu64(AluOp::Add, Reg::R1, Src::Imm((off + header) as i32));
        self.asm.call(if *user {
            helper::PROBE_READ_USER
        } else {
            helper::PROBE_READ_KERNEL
        });
        self.count_str_failure()?;
        self.asm.comment("NULL flag = (r0 < 0)");
        self.asm.mov64(Reg::R1, Src::Reg(Reg::R0));
        self.asm.alu64(AluOp::Rsh, Reg::R1, Src::Imm(63));
        self.asm.bind(flag);
        self.asm.stx(Size::B, base, off + 4, Reg::R1);
        Ok(())
    }

    /// Copies a string value to `base+off`: with `pad`, into a ring-buffer
    /// record, NUL-padded to a multiple of 8 bytes; without, into a group key,
    /// with every byte after the first NUL zeroed.
    pub(super) fn store_str(
        &mut self,
        src: &StrSrc,
        base: Reg,
        off: i16,
        pad: bool,
    ) -> Result<(), CompileError> {
        match src {
            StrSrc::Stored { index, of, .. } => {
                let (slot, offsets) = self.pair.stored_strs_at.clone().ok_or_else(|| {
                    CompileError::Internal("a start string outside a pairing's end program".into())
                })?;
                let (size, copy) = stored_copy(of, pad);
                if !pad && of.helper_buffer().is_some() {
                    // A key: the helper stops after the NUL, the rest must be 0.
                    self.zero(base, off, size);
                }
                self.asm.ldx(Size::DW, Reg::R3, Reg::R10, slot);
                self.asm
                    .alu64(AluOp::Add, Reg::R3, Src::Imm(offsets[*index] as i32));
                self.asm.mov64(Reg::R1, Src::Reg(base));
                self.asm.alu64(AluOp::Add, Reg::R1, Src::Imm(off as i32));
                self.asm.mov64(Reg::R2, Src::Imm(size as i32));
                self.asm.call(copy);
                self.copy_stored_flag(of, slot, offsets[*index] as i32, base, off, pad);
            }
            StrSrc::DataLoc { size, .. } | StrSrc::Ptr { size, .. } => {
                // A record is read up to its NUL, one byte more than the buffer
                // (the truncation flag, StrSrc::record_bytes), then the NULL
                // flag; a key is the buffer, with no stale bytes after the NUL
                // and the NULL flag in its last byte.
                self.read_str_flagged(src, base, off, *size, pad)?;
            }
            StrSrc::Bytes { .. } if pad => self.read_bytes(src, base, off)?,
            StrSrc::Bytes { .. } => {
                return Err(CompileError::Internal(format!("`{src}` in a group key")))
            }
            StrSrc::Packet { .. } => {
                let area = self.packet_base()?;
                crate::packet::emit_payload_copy(&mut self.asm, area, base, off, !pad);
            }
            StrSrc::Comm => match self.reads.cache.get(&Cached::Comm).copied() {
                Some(Loc::Stack(c)) => {
                    // Widest chunks both sides are aligned for: a key may put
                    // comm after a 4-byte field, and the verifier rejects
                    // misaligned stack accesses.
                    let mut i = 0i16;
                    while i < 16 {
                        let (src, dst) = (c + i, off + i);
                        let chunk = [8i16, 4, 2, 1]
                            .into_iter()
                            .find(|&n| i + n <= 16 && src % n == 0 && dst % n == 0)
                            .expect("1-byte chunks always fit");
                        let size = Size::from_bytes(chunk as usize).expect("1, 2, 4 or 8");
                        self.asm.ldx(size, Reg::R1, Reg::R10, src);
                        self.asm.stx(size, base, dst, Reg::R1);
                        i += chunk;
                    }
                }
                _ => {
                    self.asm.mov64(Reg::R1, Src::Reg(base));
                    self.asm.alu64(AluOp::Add, Reg::R1, Src::Imm(off as i32));
                    self.asm.mov64(Reg::R2, Src::Imm(16));
                    self.asm.call(helper::GET_CURRENT_COMM);
                }
            },
            StrSrc::Btf { access, len, .. } => {
                // Read into a zeroed buffer (nothing stale after the NUL), then copy;
                // a record gets the buffer's zero padding up to 8 bytes too.
                let buf = self.read_btf_str(access, *len)?;
                let n = if pad { len.div_ceil(8) * 8 } else { *len } as i16;
                let mut i = 0i16;
                while i < n {
                    let chunk = [8i16, 4, 2, 1]
                        .into_iter()
                        .find(|&c| i + c <= n && i % c == 0 && (off + i) % c == 0)
                        .expect("1-byte chunks always fit");
                    let size = Size::from_bytes(chunk as usize).expect("1, 2, 4 or 8");
                    self.asm.ldx(size, Reg::R1, Reg::R10, buf + i);
                    self.asm.stx(size, base, off + i, Reg::R1);
                    i += chunk;
                }
            }
            StrSrc::CtxChars { offset, len, .. } if !pad => {
                // A group key: equal strings must give equal keys, so the bytes
                // after the first NUL (whatever the record holds there) become 0.
                // r2 is all ones until a NUL was copied, then 0 (branch-free).
                self.asm.comment("copy up to the NUL, zero the rest");
                self.asm.mov64(Reg::R2, Src::Imm(-1));
                for i in 0..*len as i16 {
                    self.asm.ldx(Size::B, Reg::R1, CTX, *offset as i16 + i);
                    self.asm.alu64(AluOp::And, Reg::R1, Src::Reg(Reg::R2));
                    self.asm.stx(Size::B, base, off + i, Reg::R1);
                    if i + 1 < *len as i16 {
                        self.asm.mov64(Reg::R2, Src::Reg(Reg::R1));
                        self.asm.alu64(AluOp::Add, Reg::R2, Src::Imm(255));
                        self.asm.alu64(AluOp::Rsh, Reg::R2, Src::Imm(8));
                        self.asm.alu64(AluOp::Neg, Reg::R2, Src::Imm(0));
                    }
                }
            }
            StrSrc::CtxChars { offset, len, .. } => {
                // A ring-buffer record: user space reads up to the NUL. Widest chunks both sides are aligned for (ctx loads must be aligned).
                let mut i = 0i16;
                while i < *len as i16 {
                    let (src, dst) = (*offset as i16 + i, off + i);
                    let chunk = [8i16, 4, 2, 1]
                        .into_iter()
                        .find(|&c| i + c <= *len as i16 && src % c == 0 && dst % c == 0)
                        .expect("1-byte chunks always fit");
                    let size = Size::from_bytes(chunk as usize).expect("1, 2, 4 or 8");
                    self.asm.ldx(size, Reg::R1, CTX, src);
                    self.asm.stx(size, base, dst, Reg::R1);
                    i += chunk;
                }
                let end = if pad { len.div_ceil(8) * 8 } else { *len };
                for i in *len as i16..end as i16 {
                    self.asm.st_imm(Size::B, base, off + i, 0);
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{compile, listing, section, PREAD};

    #[test]
    fn comm_is_read_once_and_copied_into_the_record() {
        let q = compile(&format!("SELECT comm, fd FROM {PREAD} WHERE pid = 7"));
        let l = listing(&q, 0);
        assert_eq!(l.matches("call bpf_get_current_comm#16").count(), 1, "{l}");
        let comm = section(&l, "Project: comm");
        let stores: Vec<&&str> = comm.iter().filter(|i| i.starts_with("*(u")).collect();
        assert!(!stores.is_empty(), "{l}");
        assert!(stores.iter().all(|s| s.contains("(r9 + ")), "{l}");
    }

    /// A string read for a row: 17 bytes read for `str(buf, 16)`, then
    /// its NULL flag at byte 17 (the string is at 8, after `buf`) from r0's
    /// sign; a failed read is counted.
    #[test]
    fn a_failed_read_sets_the_null_flag_and_is_counted() {
        let q = compile(&format!(
            "SELECT str(buf, 16) AS s FROM {PREAD} WHERE pid = 7"
        ));
        let l = listing(&q, 0);
        let project = section(&l, "Project: __ebql_str0");
        let call = project
            .iter()
            .position(|i| i.starts_with("call bpf_probe_read_user_str"))
            .expect("the read");
        assert_eq!(project[call - 1], "r2 = 17", "{l}");
        assert!(project[call + 1].starts_with("if r0 s>= 0x0 goto"), "{l}");
        assert!(
            project
                .iter()
                .any(|i| i.starts_with("lock *(u64 *)(r1 + 104) += r2")),
            "{l}"
        );
        let flag = &project[project.len() - 3..];
        assert_eq!(
            flag,
            ["r1 = r0", "r1 >>= 63", "*(u8 *)(r9 + 25) = r1"],
            "{l}"
        );
    }

    /// `bytes(buf, count, 16)`: at most 16 bytes (a longer count is cut and
    /// flagged at byte 5), the count kept at byte 0, the data read by
    /// `bpf_probe_read_user` (not a `_str` helper: NULs are data) at byte
    /// 8 for the bounded count (no read for a count of 0), the NULL flag
    /// at byte 4. The value sits at
    /// 16 in the record, after the columns the call reads.
    #[test]
    fn bytes_are_read_for_their_clamped_length_with_their_flags() {
        let q = compile(&format!(
            "SELECT bytes(buf, count, 16) AS b FROM {PREAD} WHERE pid = 7"
        ));
        let l = listing(&q, 0);
        let project = section(&l, "Project: __ebql_str0");
        let has = |i: &str| project.iter().position(|x| *x == i);
        let clamp = has("r1 = 16").unwrap_or_else(|| panic!("{l}"));
        assert_eq!(project[clamp + 1], "r2 = 1", "the cut flag: {l}");
        assert!(has("*(u32 *)(r9 + 16) = r1").is_some(), "{l}");
        assert!(has("*(u8 *)(r9 + 21) = r2").is_some(), "{l}");
        let call = project
            .iter()
            .position(|i| i.starts_with("call bpf_probe_read_user#"))
            .unwrap_or_else(|| panic!("{l}"));
        assert_eq!(project[call - 2..call], ["r1 = r9", "r1 += 24"], "{l}");
        assert!(project[call - 6].starts_with("r2 = *(u64 *)(r10 "), "{l}");
        // A count of 0 reads nothing: the call skipped to the NULL flag's store (pc 56), r1 clear.
        assert_eq!(
            project[call - 5..call - 2],
            ["if r2 != 0x0 goto +2 <pc 46>", "r1 = 0", "goto +10 <pc 56>",],
            "{l}"
        );
        assert_eq!(
            &project[project.len() - 3..],
            ["r1 = r0", "r1 >>= 63", "*(u8 *)(r9 + 20) = r1"],
            "{l}"
        );
    }

    /// A test of a string that could not be read is not true, `=` or `<>`:
    /// at the top level both leave the program on a failed read.
    #[test]
    fn a_failed_read_fails_equality_and_inequality() {
        for op in ["=", "<>"] {
            let q = compile(&format!(
                "SELECT COUNT(*) FROM {PREAD} WHERE pid = 7 AND str(buf) {op} 'ab'"
            ));
            let l = listing(&q, 0);
            let f = section(&l, "Filter: str(");
            let call = f
                .iter()
                .position(|i| i.starts_with("call bpf_probe_read_user_str"))
                .expect("the read");
            let null = f[call..]
                .iter()
                .find(|i| i.starts_with("if r0 s< 0x0 goto"))
                .unwrap_or_else(|| panic!("{l}"));
            // The exit: `r0 = 0`, `exit`, the last two instructions.
            let exit_pc = l
                .lines()
                .rfind(|x| x.trim_end().ends_with(": r0 = 0"))
                .and_then(|x| x.split_once(':'))
                .map(|(pc, _)| pc.trim().to_string())
                .unwrap_or_else(|| panic!("{l}"));
            assert!(
                null.ends_with(&format!("<pc {exit_pc}>")),
                "{op}: {null}\n{l}"
            );
        }
    }
}
