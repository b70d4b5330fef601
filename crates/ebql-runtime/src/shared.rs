//! Shared hooks: the programs of many queries on one hook run as one
//! chain of programs, and queries join and leave it while events flow.
//!
//! A hook that several queries trace gets one *dispatcher*, attached once:
//! it tail-calls slot 0 of its program array. Each slot holds a *chunk*: a
//! program that calls each of its members' code in turn as a BPF-to-BPF
//! subprogram with the hook's context, then tail-calls the next slot (an
//! empty slot ends the chain). A member's code is its query's program
//! unchanged (its own maps, its own window generation); the verifier checks
//! each call in its caller's context, so a chunk's verification grows
//! linearly with its members. A chunk ends where the kernel's limit of 64
//! maps per program (`MAX_USED_MAPS`) or its verifier budget does; 32
//! chunks (the tail-call limit is 33) hold the hook's members.
//!
//! A member joining or leaving loads a new version of its chunk and stores
//! it in the chunk's slot: one map update, atomic for every event. An event
//! runs the old version of the chunk or the new one, whole, and members
//! never move between chunks, so a member counts every event exactly once
//! across the swap, and no event falls in a detach gap. Raw and BTF
//! tracepoint links cannot take another program (`bpf_link_update` serves
//! only some link types), hence the slots.
//!
//! What it saves: the hook's dispatch per program (perf's tracepoint record
//! for a tracefs tracepoint is made once either way); the helper calls the
//! members share through the per-event cache ([`ebql_bpf::event_cache`]);
//! and, for members whose filters pin one process (`pid = N`), the calls
//! themselves on other processes' events: the chunk tests the tgid once per
//! run of members of one pid. Each member's own filters and map update
//! still run in it (queries of one kernel part share those a level up,
//! in the executor's shared synopses).

use crate::attach::Link;
use crate::prog::patch_map_fds;
use crate::{Map, MapType, Program, Result, RuntimeError};
use ebql_bpf::insn::{self, Insn};
use ebql_bpf::{event_cache, helper, AluOp, JmpCond, Reg, Size};
use ebql_catalog::{Attach, EventKind};
use std::os::fd::RawFd;
use std::sync::{Arc, Mutex, MutexGuard};

use crate::LoadTarget;

/// `src_reg` of a call to a subprogram (`BPF_PSEUDO_CALL`, kernel
/// `include/uapi/linux/bpf.h`): `imm` is the callee's offset from the next
/// instruction.
const PSEUDO_CALL: u8 = 1;

/// Chunks per hook: the dispatcher's tail call and one per chunk stay within
/// the kernel's 33 tail calls per event (`MAX_TAIL_CALL_CNT`).
pub const MAX_CHUNKS: usize = 32;

/// The hooks this process shares among its queries. Cloning gives another
/// handle on the same hooks; a query joins with [`SharedHooks::join`].
#[derive(Clone, Default)]
pub struct SharedHooks {
    hooks: Arc<Mutex<Vec<Hook>>>,
}

impl std::fmt::Debug for SharedHooks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.shares()).finish()
    }
}

/// One shared hook: where it attaches, its dispatcher and chunks.
/// Field order is drop order: the link (detach) first.
struct Hook {
    link: Option<Link>,
    chunks: Vec<Chunk>,
    dispatcher: Program,
    slots: Map,
    target: LoadTarget,
    kind: EventKind,
    attach: Attach,
}

/// One slot's program and the members it calls.
struct Chunk {
    program: Option<Program>,
    members: Vec<Member>,
    /// The kernel found it too large with one more member: joiners skip
    /// it until a member leaves.
    full: bool,
}

/// A query's program in a shared hook: its code with its map fds in place.
/// The fds stay valid while the member is in: the query's maps outlive its
/// [`Link`], whose drop makes it leave.
struct Member {
    id: u64,
    code: Vec<u8>,
    /// The one process whose events pass its filters, if its filters say
    /// so: the chunk tests it once for all its members of that process.
    pid: Option<u32>,
}

/// The state of one shared hook, for a query's statistics and tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HookShare {
    /// Members of the hook now (this query included).
    pub members: usize,
    /// Chunks (programs chained by tail calls) they are in.
    pub chunks: usize,
}

impl SharedHooks {
    /// No hooks yet: the first query on a hook attaches its dispatcher.
    pub fn new() -> SharedHooks {
        SharedHooks::default()
    }

    /// Whether a program of `kind` (loaded for `target`) can share its hook
    /// ([`EventKind::shares_hook`]; sleepable programs attach alone).
    pub fn can_share(kind: EventKind, target: &LoadTarget) -> bool {
        kind.shares_hook() && !target.sleepable
    }

    /// Adds `code` (a program's instructions whose map references are
    /// indexes into `map_fds`, as [`Program::load`] takes them) to a chunk
    /// of the hook `kind`/`attach`, attaching the hook's dispatcher if it
    /// is the first. `pid`: the one process (tgid) whose events pass the
    /// program's filters, when a top-level `pid = N` says so (the program
    /// still tests it): the chunk skips the call for other processes'
    /// events, testing the pid once for all its members of that process.
    /// Returns a [`Link`] whose drop takes the member out
    /// again (after which the caller waits a grace period,
    /// [`crate::wait_for_probes`], before reading its maps for the last
    /// time, as after any detach), and the hook's share.
    ///
    /// Errors: the member fits no chunk (the verifier refused it in
    /// combination, [`RuntimeError::Verifier`], or found it too large
    /// alone in a new chunk, [`RuntimeError::is_too_big`]; the hook is left
    /// as it was, so the caller can attach the program alone), or a syscall
    /// failing.
    pub fn join(
        &self,
        kind: EventKind,
        attach: &Attach,
        target: LoadTarget,
        code: &[u8],
        map_fds: &[RawFd],
        pid: Option<u32>,
    ) -> Result<(Link, HookShare)> {
        let mut code = code.to_vec();
        patch_map_fds(&mut code, map_fds)?;
        let mut hooks = self.lock();
        let index = match hooks.iter().position(|h| h.is(kind, attach, target)) {
            Some(i) => i,
            None => {
                hooks.push(Hook::new(kind, attach, target)?);
                hooks.len() - 1
            }
        };
        let hook = &mut hooks[index];
        let id = hook
            .chunks
            .iter()
            .flat_map(|c| &c.members)
            .map(|m| m.id + 1)
            .max()
            .unwrap_or(0);
        let placed = hook.place(Member { id, code, pid }).and_then(|()| {
            if hook.link.is_none() {
                // Attached once slot 0 holds a chunk, so every event it
                // dispatches runs the first member.
                let opts = crate::AttachOptions::default();
                hook.link = Some(crate::attach(&hook.dispatcher, kind, attach, &opts)?);
            }
            Ok(())
        });
        if let Err(e) = placed {
            if hook.link.is_none() {
                hooks.remove(index);
            }
            return Err(e);
        }
        let share = hook.share();
        let me = self.clone();
        let attach = attach.clone();
        let leave = move || me.leave(kind, &attach, target, id);
        Ok((Link::new(vec![], vec![]).with_cleanup(leave), share))
    }

    /// Takes member `id` out of its hook; the last one out detaches the
    /// dispatcher. A new version of its chunk that fails to load leaves the
    /// old one in place: the member's code keeps running, its maps kept
    /// alive by the program, its counts read by no one.
    fn leave(&self, kind: EventKind, attach: &Attach, target: LoadTarget, id: u64) {
        let mut hooks = self.lock();
        let Some(index) = hooks.iter().position(|h| h.is(kind, attach, target)) else {
            return;
        };
        let hook = &mut hooks[index];
        let Some(c) = hook
            .chunks
            .iter()
            .position(|c| c.members.iter().any(|m| m.id == id))
        else {
            return;
        };
        hook.chunks[c].members.retain(|m| m.id != id);
        hook.chunks[c].full = false;
        if hook.chunks.iter().all(|c| c.members.is_empty()) {
            hooks.remove(index);
        } else if let Err(e) = hook.load_chunk(c) {
            eprintln!("ebql: a shared hook kept a departed query's code: {e}");
        }
    }

    /// Whether a hook of `kind` at `attach` has members now.
    pub fn has_hook(&self, kind: EventKind, attach: &Attach) -> bool {
        self.lock()
            .iter()
            .any(|h| h.kind == kind && h.attach == *attach)
    }

    /// Every hook's attachment and share now.
    pub fn shares(&self) -> Vec<(Attach, HookShare)> {
        self.lock()
            .iter()
            .map(|h| (h.attach.clone(), h.share()))
            .collect()
    }

    fn lock(&self) -> MutexGuard<'_, Vec<Hook>> {
        // Every change is complete before the lock is released, so a
        // panic elsewhere leaves the hooks consistent.
        self.hooks.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Hook {
    /// A hook's program array and dispatcher, not attached yet.
    fn new(kind: EventKind, attach: &Attach, target: LoadTarget) -> Result<Hook> {
        let slots = Map::create("ebql_shared", MapType::ProgArray, 4, 4, MAX_CHUNKS as u32)?;
        let dispatcher =
            Program::load("ebql_dispatch", target, &tail_call(kind, 0), &[slots.fd()])?;
        Ok(Hook {
            link: None,
            chunks: Vec::new(),
            dispatcher,
            slots,
            target,
            kind,
            attach: attach.clone(),
        })
    }

    fn is(&self, kind: EventKind, attach: &Attach, target: LoadTarget) -> bool {
        self.kind == kind && self.attach == *attach && self.target == target
    }

    /// Puts `member` in the first chunk not known to be full that takes it
    /// (the kernel loads the chunk with it), else in a new chunk.
    fn place(&mut self, member: Member) -> Result<()> {
        let mut member = member;
        for c in 0..self.chunks.len() {
            if self.chunks[c].full {
                continue;
            }
            self.chunks[c].members.push(member);
            match self.load_chunk(c) {
                Ok(()) => return Ok(()),
                Err(e) if e.is_too_big() => {
                    member = self.chunks[c].members.pop().expect("pushed above");
                    self.chunks[c].full = true;
                }
                Err(e) => {
                    self.chunks[c].members.pop();
                    return Err(e);
                }
            }
        }
        if self.chunks.len() == MAX_CHUNKS {
            return Err(RuntimeError::Unsupported(format!(
                "the shared hook's {MAX_CHUNKS} programs are full"
            )));
        }
        self.chunks.push(Chunk {
            program: None,
            members: vec![member],
            full: false,
        });
        let c = self.chunks.len() - 1;
        self.load_chunk(c).inspect_err(|_| {
            self.chunks.pop();
        })
    }

    /// Loads chunk `c` with its members now and stores it in its slot; the
    /// version it replaces is closed (the kernel frees it once no CPU runs it).
    fn load_chunk(&mut self, c: usize) -> Result<()> {
        let chunk = &self.chunks[c];
        let members = chunk.members.iter().map(|m| (m.code.as_slice(), m.pid));
        let code = chunk_code(self.kind, c, self.slots.fd(), members)?;
        let name = format!("ebql_shared{c}");
        let prog = Program::load_resolved(&name, self.target, code)?;
        self.slots
            .update(&(c as u32).to_ne_bytes(), &(prog.fd() as u32).to_ne_bytes())?;
        self.chunks[c].program = Some(prog);
        Ok(())
    }

    fn share(&self) -> HookShare {
        HookShare {
            members: self.chunks.iter().map(|c| c.members.len()).sum(),
            chunks: self.chunks.len(),
        }
    }
}

/// `r2 = map 0 (the slots); r3 = slot; tail call` with the context in r1;
/// falling through (an empty slot) returns the hook's exit value.
fn tail_call(kind: EventKind, slot: i32) -> Vec<u8> {
    insn::encode_program(&tail_call_insns(kind, slot))
}

fn tail_call_insns(kind: EventKind, slot: i32) -> [Insn; 6] {
    let [lo, hi] = insn::ld_imm64_raw(Reg::R2, 1, 0, 0);
    [
        lo,
        hi,
        insn::mov64_imm(Reg::R3, slot),
        insn::call(helper::TAIL_CALL),
        insn::mov64_imm(Reg::R0, kind.exit_value()),
        insn::exit(),
    ]
}

/// Zeroes the per-event cache of helper results at the top of the stack
/// ([`ebql_bpf::event_cache`]) and points `reg` at it.
fn cache_setup(reg: Reg) -> Vec<Insn> {
    let bytes = event_cache::BYTES;
    let mut out: Vec<Insn> = (1..=bytes / 8)
        .map(|k| insn::st_imm(Size::DW, Reg::R10, -8 * k, 0))
        .collect();
    out.push(insn::mov64_reg(reg, Reg::R10));
    out.push(insn::alu64_imm(AluOp::Add, reg, -i32::from(bytes)));
    out
}

/// A call of the subprogram starting `to - from - 1` instructions after
/// the call at `from`.
fn call_at(from: usize, to: usize) -> Insn {
    let offset = i32::try_from(to - from - 1).expect("a program below 2^31 instructions");
    Insn::new(0x85, 0, PSEUDO_CALL, 0, offset)
}

/// Chunk `c`'s program: a main part that zeroes the per-event cache, calls
/// each member's code with the context and the cache, then tail-calls slot
/// `c + 1`; the members follow, each a subprogram (their `exit`s return to
/// the main part). Its one map reference (the slots) is patched in before
/// the members, whose own references already hold their fds.
///
/// Members scoped to one process (`(code, Some(pid))`) are called in runs
/// of one pid, each behind one test of the event's tgid, which the main
/// part reads first into the cache (so the members find it there).
fn chunk_code<'a>(
    kind: EventKind,
    c: usize,
    slots: RawFd,
    members: impl Iterator<Item = (&'a [u8], Option<u32>)>,
) -> Result<Vec<u8>> {
    // Unscoped members first, then runs of one pid; order within is kept.
    let mut members: Vec<(&[u8], Option<u32>)> = members.collect();
    members.sort_by_key(|(_, pid)| *pid);
    let runs = members
        .chunk_by(|a, b| a.1 == b.1)
        .filter(|run| run[0].1.is_some())
        .count();
    let tail = tail_call_insns(kind, c as i32 + 1);
    let mut main = vec![insn::mov64_reg(Reg::R6, Reg::R1)];
    main.extend(cache_setup(Reg::R7));
    if runs > 0 {
        main.extend(tgid_into(Reg::R8));
    }
    // Per member: r1 = r6, r2 = r7, call; per run: one test; then r1 = r6 and the tail call.
    let main_len = main.len() + 3 * members.len() + runs + 1 + tail.len();
    let mut start = main_len;
    for run in members.chunk_by(|a, b| a.1 == b.1) {
        let test = run[0].1.map(|_| main.len());
        if test.is_some() {
            main.push(insn::ja(0)); // placeholder: the run's test
        }
        for (code, _) in run {
            main.push(insn::mov64_reg(Reg::R1, Reg::R6));
            main.push(insn::mov64_reg(Reg::R2, Reg::R7));
            main.push(call_at(main.len(), start));
            start += code.len() / 8;
        }
        if let (Some(at), Some(pid)) = (test, run[0].1) {
            // Other processes' events skip the run.
            let skip = i16::try_from(main.len() - at - 1).expect("a run below 2^15 instructions");
            let pid = i32::try_from(pid).map_err(|_| {
                RuntimeError::Unsupported(format!("pid {pid} beyond a BPF immediate"))
            })?;
            main[at] = insn::jmp_imm(JmpCond::Ne, Reg::R8, pid, skip);
        }
    }
    main.push(insn::mov64_reg(Reg::R1, Reg::R6));
    main.extend(tail);
    debug_assert_eq!(main.len(), main_len);
    let mut out = insn::encode_program(&main);
    patch_map_fds(&mut out, &[slots])?;
    for (code, _) in &members {
        out.extend_from_slice(code);
    }
    Ok(out)
}

/// The event's tgid into `reg`, its pid_tgid into the cache (r7) with its
/// flag set: the cache was just zeroed, so the flags word is that flag alone.
fn tgid_into(reg: Reg) -> Vec<Insn> {
    let (bit, off) = event_cache::slot(helper::GET_CURRENT_PID_TGID).expect("pid_tgid is cached");
    vec![
        insn::call(helper::GET_CURRENT_PID_TGID),
        insn::stx(Size::DW, Reg::R7, off, Reg::R0),
        insn::st_imm(Size::DW, Reg::R7, event_cache::FLAGS, bit),
        insn::mov64_reg(reg, Reg::R0),
        insn::alu64_imm(AluOp::Rsh, reg, 32),
    ]
}

impl SharedHooks {
    /// A program compiled to take the per-event cache
    /// (`ProgramSpec::event_cache`) made whole to run alone: a wrapper that
    /// owns a cache calls it and returns its result. Returns the code and
    /// the number of instructions before the program's own (to map a
    /// verifier's instruction index back).
    pub fn solo(code: &[u8]) -> (Vec<u8>, usize) {
        let mut main = cache_setup(Reg::R2);
        let len = main.len() + 2;
        main.push(call_at(main.len(), len));
        main.push(insn::exit());
        let mut out = insn::encode_program(&main);
        out.extend_from_slice(code);
        (out, len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chunk_calls_each_member_then_tail_calls_the_next_slot() {
        let a = insn::encode_program(&[insn::mov64_imm(Reg::R0, 0), insn::exit()]);
        let b = insn::encode_program(&[
            insn::mov64_imm(Reg::R0, 0),
            insn::mov64_imm(Reg::R0, 0),
            insn::exit(),
        ]);
        let members = [(a.as_slice(), None), (b.as_slice(), None)];
        let code = chunk_code(EventKind::Tracepoint, 3, 42, members.into_iter()).unwrap();
        let insns = insn::decode_program(&code).unwrap();
        // main: mov r6; cache setup; (mov r1, mov r2, call) × 2; mov r1;
        // ld_imm64 (2); mov r3; call; mov r0; exit.
        let setup = cache_setup(Reg::R7).len();
        let main_len = 1 + setup + 6 + 1 + 6;
        let calls: Vec<usize> = insns
            .iter()
            .enumerate()
            .filter(|(_, i)| i.code == 0x85 && i.src == PSEUDO_CALL)
            .map(|(pc, i)| (pc as i64 + 1 + i.imm as i64) as usize)
            .collect();
        assert_eq!(calls, vec![main_len, main_len + 2]);
        assert_eq!(insns.len(), main_len + 2 + 3);
        let tail = main_len - 6;
        assert_eq!((insns[tail].src, insns[tail].imm), (1, 42), "the slots' fd");
        assert_eq!(
            (insns[tail + 2].imm, insns[tail + 3].imm),
            (4, helper::TAIL_CALL),
            "slot c + 1"
        );
    }

    /// The call targets of a chunk's main part, in order.
    fn calls(insns: &[Insn]) -> Vec<usize> {
        insns
            .iter()
            .enumerate()
            .filter(|(_, i)| i.code == 0x85 && i.src == PSEUDO_CALL)
            .map(|(pc, i)| (pc as i64 + 1 + i.imm as i64) as usize)
            .collect()
    }

    #[test]
    fn members_of_one_process_are_called_behind_one_test_of_its_pid() {
        // Distinct lengths tell the members apart by where their code starts.
        let member = |n: usize| {
            let mut v = vec![insn::mov64_imm(Reg::R0, 0); n];
            v.push(insn::exit());
            insn::encode_program(&v)
        };
        let (a, b, c, d) = (member(1), member(2), member(3), member(4));
        let members = [
            (a.as_slice(), Some(7)),
            (b.as_slice(), None),
            (c.as_slice(), Some(7)),
            (d.as_slice(), Some(5)),
        ];
        let code = chunk_code(EventKind::Tracepoint, 0, 42, members.into_iter()).unwrap();
        let insns = insn::decode_program(&code).unwrap();
        // The tgid is read once, into r8 and the cache.
        let reads = insns
            .iter()
            .filter(|i| i.code == 0x85 && i.src == 0 && i.imm == helper::GET_CURRENT_PID_TGID)
            .count();
        assert_eq!(reads, 1);
        // Calls: b (unscoped), then pid 5's run (d), then pid 7's (a, c).
        let targets = calls(&insns);
        let main_len = targets[0];
        let sizes = [3, 5, 2, 4]; // b, d, a, c in instructions
        let starts: Vec<usize> = sizes
            .iter()
            .scan(main_len, |at, n| {
                let s = *at;
                *at += n;
                Some(s)
            })
            .collect();
        assert_eq!(targets, starts);
        // Two tests, each jumping past its run's calls when r8 is another pid.
        let tests: Vec<(usize, &Insn)> = insns[..main_len]
            .iter()
            .enumerate()
            .filter(|(_, i)| i.code == (0x05 | JmpCond::Ne.code()) && i.dst == Reg::R8.num())
            .collect();
        let pids: Vec<i32> = tests.iter().map(|(_, i)| i.imm).collect();
        assert_eq!(pids, [5, 7]);
        for ((at, test), members) in tests.iter().zip([1, 2]) {
            let past = at + 1 + test.off as usize;
            assert_eq!(past, at + 1 + 3 * members, "skips exactly its run's calls");
        }
    }

    #[test]
    fn solo_calls_the_program_with_a_zeroed_cache_and_returns_its_result() {
        let p = insn::encode_program(&[insn::mov64_imm(Reg::R0, 7), insn::exit()]);
        let (code, before) = SharedHooks::solo(&p);
        let insns = insn::decode_program(&code).unwrap();
        assert_eq!(insns.len(), before + 2);
        let zeroed = insns
            .iter()
            .filter(|i| i.code == 0x7a && i.imm == 0)
            .count();
        assert_eq!(zeroed as i16, event_cache::BYTES / 8);
        let call = insns.iter().position(|i| i.src == PSEUDO_CALL).unwrap();
        assert_eq!(call + 1 + insns[call].imm as usize, before);
        assert_eq!(insns[call + 1], insn::exit(), "the program's r0 returned");
    }
}
