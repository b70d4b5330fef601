//! Sleepable programs: the user pages a program's strings lie in are
//! faulted in before the program does anything else.
//!
//! A probe's `bpf_probe_read_user_str` cannot take a page fault: a string in
//! a page the process has not touched yet (a uprobe's first call of a
//! function whose argument lies in such a page) reads as a failure (NULL,
//! counted in `str_read_failed`). A uprobe or USDT program loaded sleepable
//! (`BPF_F_SLEEPABLE`) may call `bpf_copy_from_user_str`, which faults the
//! pages in, and may sleep while it does.
//!
//! Sleeping anywhere in the program would break the window protocol: user
//! space waits for probes in flight with an RCU grace period
//! (`ebql_runtime::grace`), which does not wait for a sleepable program
//! (those run under RCU *tasks trace*). So a sleepable program is laid out:
//!
//! ```text
//! entry:    r6 = ctx; goto prologue
//! body:     the program as it would be without sleeping (non-faulting
//!           reads, the window generation, map updates), then goto exit
//! exit:     bpf_rcu_read_unlock(); r0 = …; exit
//! prologue: for each user string the body reads:
//!               bpf_copy_from_user_str(fault-in buffer, size, ptr, 0)
//!           bpf_rcu_read_lock(); goto body
//! ```
//!
//! The prologue touches no state (the fault-in buffer is one value shared
//! by every CPU, written and never read), and the body runs in an RCU
//! read-side section like a non-sleepable program, so the grace period
//! covers it exactly as before. The body's non-faulting reads then find the
//! pages resident. The prologue is emitted last, once the body has said
//! which strings it reads; it reads them before the body's filters, which
//! is its cost (BENCHMARKS.md, "faulting string reads").
//!
//! A program that reads a stack (`bpf_get_stackid` needs a stack-trace map,
//! which sleepable programs may not use) or no user string stays
//! non-sleepable: its prologue is only the jump back.

use super::gen::{Cached, FaultIn, Gen, UserRead};
use crate::kexpr::KExpr;
use crate::CompileError;
use ebql_bpf::{Kfunc, Reg, Size, Src};

impl Gen {
    /// At the program's entry, right after `r6 = ctx`: on a hook whose
    /// programs may sleep, with faulting reads enabled, jumps to the
    /// prologue [`Gen::end_fault_in`] emits; the body follows.
    pub(super) fn begin_fault_in(&mut self, enabled: bool) {
        if !enabled {
            return;
        }
        let prologue = self.asm.new_label();
        let body = self.asm.new_label();
        self.asm
            .comment("the prologue (after the exit) faults user strings in first");
        self.asm.ja(prologue);
        self.asm.bind(body);
        self.fault_in = Some(FaultIn {
            prologue,
            body,
            reads: Vec::new(),
        });
    }

    /// Notes a user string the body reads (`size` buffer bytes, at most
    /// `len` of them when given), for the prologue to fault in.
    pub(super) fn note_user_read(&mut self, ptr: &KExpr, len: Option<&KExpr>, size: u32) {
        if let Some(f) = &mut self.fault_in {
            let read = UserRead {
                ptr: ptr.clone(),
                len: len.cloned(),
                size,
            };
            if !f
                .reads
                .iter()
                .any(|r| r.ptr == read.ptr && r.len == read.len && r.size >= size)
            {
                f.reads.push(read);
            }
        }
    }

    /// Whether the program is loaded sleepable: it began a fault-in, its
    /// body reads a user string and no stack.
    pub(super) fn sleepable(&self) -> bool {
        let stacks = self
            .reads
            .cache
            .keys()
            .any(|c| matches!(c, Cached::Stack(_)));
        self.fault_in.as_ref().is_some_and(|f| !f.reads.is_empty()) && !stacks
    }

    /// Emits the prologue after the program's exit: when `sleepable`, one
    /// `bpf_copy_from_user_str` per noted read into the fault-in buffer
    /// (map [`super::maps::LateMaps::fault_in`]), then `bpf_rcu_read_lock()`;
    /// in any case the jump to the body. Returns the buffer's size in bytes
    /// (0 when the program does not use it).
    pub(super) fn end_fault_in(&mut self, sleepable: bool) -> Result<u32, CompileError> {
        let Some(f) = self.fault_in.take() else {
            return Ok(0);
        };
        self.asm.bind(f.prologue);
        self.asm.origin("Fault-in: user strings, before the body");
        let mut bytes = 0;
        if sleepable {
            // The body's cached helper results are not there yet.
            let cached = std::mem::take(&mut self.reads.cache);
            let saved = std::mem::take(&mut self.reads.free_saved);
            for r in &f.reads {
                self.fault_in_one(r)?;
                bytes = bytes.max(r.size.next_multiple_of(8));
            }
            self.reads.cache = cached;
            self.reads.free_saved = saved;
            self.asm
                .comment("the body runs in an RCU read-side section, as a non-sleepable program");
            self.asm.call_kfunc(Kfunc::RcuReadLock);
        }
        self.asm.ja(f.body);
        Ok(bytes)
    }

    fn fault_in_one(&mut self, r: &UserRead) -> Result<(), CompileError> {
        self.asm.comment(format!(
            "bpf_copy_from_user_str(fault-in buffer, {}, {}, 0): may sleep",
            r.size, r.ptr
        ));
        let bound = match &r.len {
            Some(len) => Some(self.str_read_size(len, r.size)?),
            None => None,
        };
        self.eval(
            &r.ptr,
            &[Reg::R3, Reg::R4, Reg::R5, Reg::R0, Reg::R1, Reg::R2],
        )?;
        self.asm
            .ld_map_value(Reg::R1, self.maps.late.fault_in as i32, 0);
        match bound {
            Some(slot) => self.asm.ldx(Size::DW, Reg::R2, Reg::R10, slot),
            None => self.asm.mov64(Reg::R2, Src::Imm(r.size as i32)),
        }
        self.asm.mov64(Reg::R4, Src::Imm(0));
        self.asm.call_kfunc(Kfunc::CopyFromUserStr);
        Ok(())
    }
}
