//! The probability-weighted walk over one generated program that prices
//! each instruction, helper call and map operation ([`profile_program`]).

use crate::codegen::{MapSpec, ProgramSpec};
use crate::cost::model::*;
use ebql_bpf::insn::{self, Insn};
use ebql_bpf::{helper, AluOp, JmpCond};
use ebql_catalog::EventKind;
use std::collections::BTreeMap;

/// Whether an instruction range's origin is one of the query's filter terms
/// (codegen's `Filter: <text>` and a pairing end's `Pair end: thread filter <text>`).
pub fn is_filter_origin(origin: &str) -> bool {
    origin.starts_with("Filter: ") || origin.starts_with("Pair end: thread filter ")
}

/// How an event goes through a program's filters.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Through {
    /// Passes every filter.
    Matched,
    /// Rejected by the first filter.
    Rejected,
}

/// One executed kind of instruction, for the breakdown.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Charge {
    Insns,
    Call(String),
}

/// Where each slot's jump lands and what the slot is.
struct Decoded<'a> {
    insns: &'a [Insn],
    /// Slot index of the next instruction (ld_imm64 takes two slots).
    next: Vec<usize>,
}

impl<'a> Decoded<'a> {
    fn new(insns: &'a [Insn]) -> Self {
        let next = (0..insns.len())
            .map(|pc| pc + if insns[pc].is_ld_imm64() { 2 } else { 1 })
            .collect();
        Decoded { insns, next }
    }

    /// Real instruction starts (not the second slot of an ld_imm64).
    fn starts(&self) -> Vec<usize> {
        let mut out = Vec::new();
        let mut pc = 0;
        while pc < self.insns.len() {
            out.push(pc);
            pc = self.next[pc];
        }
        out
    }
}

fn is_jmp_class(i: &Insn) -> bool {
    matches!(i.class(), insn::BPF_JMP | insn::BPF_JMP32)
}

/// A helper or kfunc call (not a call of a BPF subprogram).
fn is_call(i: &Insn) -> bool {
    i.code == insn::BPF_JMP | insn::BPF_CALL && (i.src == 0 || i.src == insn::BPF_PSEUDO_KFUNC_CALL)
}

fn is_exit(i: &Insn) -> bool {
    i.code == insn::BPF_JMP | insn::BPF_EXIT
}

fn is_ja(i: &Insn) -> bool {
    i.code == insn::BPF_JMP | insn::BPF_JA
}

fn is_cond(i: &Insn) -> bool {
    is_jmp_class(i) && !is_exit(i) && !is_ja(i) && i.code & 0xf0 != insn::BPF_CALL
}

/// Whether the instruction writes register `reg` (a call writes r0-r5).
fn writes(i: &Insn, reg: u8) -> bool {
    if is_call(i) {
        return reg <= 5;
    }
    match i.class() {
        insn::BPF_ALU | insn::BPF_ALU64 | insn::BPF_LDX | insn::BPF_LD => i.dst == reg,
        // Atomic fetch writes its source register.
        insn::BPF_STX if i.code & 0xe0 == insn::BPF_ATOMIC && i.imm & insn::BPF_FETCH != 0 => {
            i.src == reg
        }
        _ => false,
    }
}

/// The constant a register was last set to before `at` in straight-line
/// code, if a `mov reg, imm` set it (codegen passes sizes and flags so).
fn const_before(d: &Decoded, starts: &[usize], at: usize, reg: u8) -> Option<i64> {
    let k = starts.partition_point(|&s| s < at);
    for &pc in starts[..k].iter().rev().take(16) {
        let i = &d.insns[pc];
        if is_jmp_class(i) && !is_call(i) {
            return None;
        }
        if writes(i, reg) {
            let mov = AluOp::Mov.code();
            if i.code == insn::BPF_ALU64 | insn::BPF_K | mov
                || i.code == insn::BPF_ALU | insn::BPF_K | mov
            {
                return Some(i.imm as i64);
            }
            return None;
        }
    }
    None
}

/// The bound of a size computed at run time (`bytes(p, len, n)`'s
/// `min(len, n)`): the immediate of the nearest `if rX <= n` (or `< n`)
/// before the call at `at`, within the few instructions that clamp it.
fn clamp_before(d: &Decoded, starts: &[usize], at: usize) -> Option<i64> {
    let k = starts.partition_point(|&s| s < at);
    starts[..k].iter().rev().take(24).find_map(|&pc| {
        let i = &d.insns[pc];
        let bounded = matches!(JmpCond::from_code(i.code), Some(JmpCond::Le | JmpCond::Lt));
        (is_jmp_class(i) && !is_call(i) && bounded && i.code & 0x08 == insn::BPF_K)
            .then_some(i.imm as i64)
    })
}

/// The map index an `r1 = map_fd(i)` before the call at `at` names.
fn map_before(d: &Decoded, starts: &[usize], at: usize) -> Option<usize> {
    let k = starts.partition_point(|&s| s < at);
    for &pc in starts[..k].iter().rev().take(16) {
        let i = &d.insns[pc];
        if is_jmp_class(i) && !is_call(i) {
            return None;
        }
        if writes(i, 1) {
            return (i.is_ld_imm64() && i.src == insn::BPF_PSEUDO_MAP_FD).then_some(i.imm as usize);
        }
    }
    None
}

/// What a call costs and how it is named in the breakdown.
fn price_call(
    model: &CostModel,
    d: &Decoded,
    starts: &[usize],
    pc: usize,
    maps: &[MapSpec],
) -> (String, f64) {
    let id = d.insns[pc].imm;
    if d.insns[pc].src == insn::BPF_PSEUDO_KFUNC_CALL {
        return match ebql_bpf::Kfunc::from_index(id) {
            Some(ebql_bpf::Kfunc::CopyFromUserStr) => {
                let bytes = const_before(d, starts, pc, 2)
                    .filter(|&n| n > 0)
                    .unwrap_or(256);
                (
                    format!("bpf_copy_from_user_str of ≤ {bytes} B (faults the pages in)"),
                    model.str_read.at(bytes as u32),
                )
            }
            Some(k) => (k.name().to_string(), model.helper_by_name(k.name())),
            None => ("unknown kfunc".into(), model.other_helper_ns),
        };
    }
    let name = helper::helper_name(id)
        .unwrap_or("unknown helper")
        .to_string();
    let map = || {
        map_before(d, starts, pc)
            .and_then(|m| maps.get(m))
            .and_then(|m| MapClass::of(m.kind))
    };
    let size = |reg: u8| {
        const_before(d, starts, pc, reg)
            .filter(|&n| n > 0)
            .map(|n| n as u32)
    };
    let map_op = |op: MapOp| match map() {
        Some(class) => (
            format!("{name} on {}", class.label()),
            model.map_op_ns(class, op),
        ),
        None => (name.clone(), model.map_op_ns(MapClass::Hash, op)),
    };
    match id {
        helper::MAP_LOOKUP_ELEM => map_op(MapOp::Lookup),
        helper::MAP_UPDATE_ELEM => map_op(MapOp::Update),
        helper::MAP_DELETE_ELEM => map_op(MapOp::Delete),
        helper::TASK_STORAGE_GET => (name, model.map_op_ns(MapClass::TaskStorage, MapOp::Lookup)),
        helper::RINGBUF_RESERVE => {
            let bytes = size(2).unwrap_or(8);
            (
                format!("ring-buffer record of {bytes} B (reserve + submit)"),
                model.ringbuf_record.at(bytes),
            )
        }
        helper::RINGBUF_OUTPUT => {
            // A size known only at run time is priced at its bound.
            let bytes = size(3)
                .or_else(|| clamp_before(d, starts, pc).map(|n| n.max(0) as u32))
                .unwrap_or(8);
            (
                format!("ring-buffer record of ≤ {bytes} B (output)"),
                model.ringbuf_record.at(bytes),
            )
        }
        // Priced with the reservation.
        helper::RINGBUF_SUBMIT | helper::RINGBUF_DISCARD => (
            "bpf_ringbuf_submit (priced with the reservation)".into(),
            0.0,
        ),
        helper::PROBE_READ_USER_STR | helper::PROBE_READ_KERNEL_STR | helper::PROBE_READ_STR => {
            let bytes = size(2).unwrap_or(256);
            (format!("{name} of ≤ {bytes} B"), model.str_read.at(bytes))
        }
        helper::PROBE_READ_USER | helper::PROBE_READ_KERNEL | helper::PROBE_READ => {
            // A size known only at run time is priced at its bound (the most it copies).
            let bytes = size(2)
                .or_else(|| clamp_before(d, starts, pc).map(|n| n.max(0) as u32))
                .unwrap_or(8);
            (format!("{name} of {bytes} B"), model.probe_read.at(bytes))
        }
        helper::GET_STACKID => {
            let user = const_before(d, starts, pc, 3).is_some_and(|f| f & (1 << 8) != 0);
            if user {
                ("bpf_get_stackid (user stack)".into(), model.stackid_user_ns)
            } else {
                (
                    "bpf_get_stackid (kernel stack)".into(),
                    model.stackid_kernel_ns,
                )
            }
        }
        _ => {
            let ns = model.helper_by_name(&name);
            (name, ns)
        }
    }
}

/// What a helper returns when it succeeds, for the branch that tests it.
fn success_value(helper_id: i32) -> i64 {
    match helper_id {
        helper::MAP_LOOKUP_ELEM
        | helper::RINGBUF_RESERVE
        | helper::TASK_STORAGE_GET
        | helper::GET_CURRENT_TASK_BTF
        | helper::GET_CURRENT_TASK => 0x1000,
        // A string read returns the bytes copied, NUL included.
        helper::PROBE_READ_USER_STR | helper::PROBE_READ_KERNEL_STR | helper::PROBE_READ_STR => 8,
        _ => 0,
    }
}

/// Whether `if dst <cond> imm` is taken for `v`.
fn taken(cond: JmpCond, v: i64, imm: i64, wide: bool) -> bool {
    let (v, imm) = if wide {
        (v, imm)
    } else {
        (v as i32 as i64, imm as i32 as i64)
    };
    let (uv, uimm) = if wide {
        (v as u64, imm as u64)
    } else {
        (v as u32 as u64, imm as u32 as u64)
    };
    match cond {
        JmpCond::Eq => v == imm,
        JmpCond::Ne => v != imm,
        JmpCond::Gt => uv > uimm,
        JmpCond::Ge => uv >= uimm,
        JmpCond::Lt => uv < uimm,
        JmpCond::Le => uv <= uimm,
        JmpCond::Sgt => v > imm,
        JmpCond::Sge => v >= imm,
        JmpCond::Slt => v < imm,
        JmpCond::Sle => v <= imm,
        JmpCond::Set => v & imm != 0,
    }
}

/// For each conditional jump that tests a helper's result in `r0` against
/// a constant (the call before it in straight-line code, `r0` untouched
/// since): whether the success outcome takes the jump.
fn helper_tests(d: &Decoded, starts: &[usize]) -> BTreeMap<usize, bool> {
    let mut out = BTreeMap::new();
    let mut r0_from: Option<i32> = None;
    for &pc in starts {
        let i = &d.insns[pc];
        if is_call(i) {
            // A kfunc's index is not a helper id: its result is not tested.
            r0_from = (i.src == 0).then_some(i.imm);
            continue;
        }
        if is_cond(i) {
            if let (Some(h), true, 0) = (r0_from, i.code & insn::BPF_X == 0, i.dst) {
                if let Some(cond) = JmpCond::from_code(i.code & 0xf0) {
                    out.insert(
                        pc,
                        taken(
                            cond,
                            success_value(h),
                            i.imm as i64,
                            i.class() == insn::BPF_JMP,
                        ),
                    );
                }
            }
            // r0 keeps its value on both outcomes; a later test of it still counts.
            continue;
        }
        if is_jmp_class(i) || writes(i, 0) {
            r0_from = None;
        }
    }
    out
}

/// Whether the straight-line code from `pc` (fall-throughs and `ja`, up to
/// the next conditional jump or exit) counts an anomaly: an atomic add
/// without fetch, which is how codegen counts drops and overwritten starts
/// in the control map, and ends without a start in the per-CPU counters.
/// Such code is not the steady state.
fn counts_anomaly(d: &Decoded, mut pc: usize) -> bool {
    for _ in 0..64 {
        let Some(i) = d.insns.get(pc) else {
            return false;
        };
        if i.class() == insn::BPF_STX
            && i.code & 0xe0 == insn::BPF_ATOMIC
            && i.imm == insn::BPF_ATOMIC_ADD
        {
            return true;
        }
        if is_exit(i) || is_cond(i) {
            return false;
        }
        pc = if is_ja(i) {
            (pc as i64 + 1 + i.off as i64) as usize
        } else {
            d.next[pc]
        };
    }
    false
}

/// Expected cost of one run of `spec` (maps as [`crate::Compiled::maps`]),
/// for an event that passes every filter or is rejected by the first.
fn walk(
    model: &CostModel,
    spec: &ProgramSpec,
    maps: &[MapSpec],
    through: Through,
) -> Vec<(Charge, f64)> {
    let prog = &spec.program;
    let d = Decoded::new(&prog.insns);
    let starts = d.starts();
    let tests = helper_tests(&d, &starts);
    let n = prog.insns.len();
    // Filter regions: (first slot, end slot), in program order.
    let regions: Vec<(usize, usize)> = prog
        .origins
        .iter()
        .filter(|(_, o)| is_filter_origin(o))
        .map(|(r, _)| (r.start, r.end))
        .collect();
    let mut w = vec![0.0f64; n + 1];
    w[0] = 1.0;
    let mut charges: BTreeMap<Charge, f64> = BTreeMap::new();
    let mut first_region = true;
    let mut pc = 0;
    while pc < n {
        let here = w[pc];
        if here <= 0.0 {
            pc = d.next[pc];
            continue;
        }
        if let Some(&(start, end)) = regions.iter().find(|(s, _)| *s == pc) {
            // A filter term as a unit: every instruction of it runs (upper
            // bound), then the event goes on with the term's selectivity.
            let (mut count, mut k) = (0usize, start);
            while k < end {
                if is_call(&d.insns[k]) {
                    let (what, ns) = price_call(model, &d, &starts, k, maps);
                    *charges.entry(Charge::Call(what)).or_default() += here * ns;
                } else {
                    count += 1;
                }
                k = d.next[k];
            }
            *charges.entry(Charge::Insns).or_default() += here * count as f64;
            let pass = match through {
                Through::Matched => 1.0,
                Through::Rejected if first_region => 0.0,
                Through::Rejected => 1.0,
            };
            first_region = false;
            // The rejected share runs the exit block (`r0 = 0; exit`).
            *charges.entry(Charge::Insns).or_default() += here * (1.0 - pass) * 2.0;
            w[end.min(n)] += here * pass;
            pc = end;
            continue;
        }
        let i = &d.insns[pc];
        let next = d.next[pc];
        if is_call(i) {
            let (what, ns) = price_call(model, &d, &starts, pc, maps);
            *charges.entry(Charge::Call(what)).or_default() += here * ns;
            w[next] += here;
        } else {
            *charges.entry(Charge::Insns).or_default() += here;
            if is_exit(i) {
                // done
            } else if is_ja(i) || is_cond(i) {
                let target = (pc as i64 + 1 + i.off as i64) as usize;
                let p_taken = if is_ja(i) {
                    1.0
                } else if prog
                    .origin_of(pc)
                    .is_some_and(|o| o.starts_with(crate::codegen::DENSE_TEST_ORIGIN))
                {
                    // The dense range holds the usual values (crate::groupmap).
                    0.0
                } else if prog
                    .comments
                    .get(&pc)
                    .is_some_and(|c| c.contains(crate::codegen::READ_UNLESS_EMPTY))
                {
                    // A bytes() value's read, priced at its bound.
                    1.0
                } else {
                    match tests.get(&pc) {
                        Some(true) => 1.0,
                        Some(false) => 0.0,
                        None => match (counts_anomaly(&d, target), counts_anomaly(&d, next)) {
                            (true, false) => 0.0,
                            (false, true) => 1.0,
                            _ => 0.5,
                        },
                    }
                };
                // A backward jump only closes a retry loop on a failure
                // path (a new group's insert); the walk never follows it.
                if target > pc && target <= n {
                    w[target] += here * p_taken;
                }
                w[next] += here * (1.0 - p_taken);
            } else {
                w[next] += here;
            }
        }
        pc = next;
    }
    let insn_ns = model.insn_ns;
    charges
        .into_iter()
        .map(|(c, v)| match c {
            Charge::Insns => (Charge::Insns, v * insn_ns),
            other => (other, v),
        })
        .collect()
}

fn breakdown(charges: &[(Charge, f64)], model: &CostModel) -> Vec<CostItem> {
    charges
        .iter()
        .filter(|(_, ns)| *ns > 0.0)
        .map(|(c, ns)| CostItem {
            what: match c {
                Charge::Insns => format!(
                    "{:.0} instructions × {:.2} ns",
                    ns / model.insn_ns,
                    model.insn_ns
                ),
                Charge::Call(what) => what.clone(),
            },
            ns: *ns,
        })
        .collect()
}

/// What one generated program costs per event ([`ProgramCost`]).
pub fn profile_program(model: &CostModel, spec: &ProgramSpec, maps: &[MapSpec]) -> ProgramCost {
    let matched = walk(model, spec, maps, Through::Matched);
    let filtered = spec
        .program
        .origins
        .iter()
        .any(|(_, o)| is_filter_origin(o));
    let unmatched = if filtered {
        walk(model, spec, maps, Through::Rejected)
    } else {
        matched.clone()
    };
    let hook = Hook::of(spec.event.kind);
    ProgramCost {
        name: spec.name.clone(),
        event: spec.event.to_string(),
        hook,
        hook_ns: model.hook_ns(hook),
        unmatched_ns: unmatched.iter().map(|(_, v)| v).sum(),
        matched_ns: matched.iter().map(|(_, v)| v).sum(),
        matched_breakdown: breakdown(&matched, model),
        unmatched_breakdown: breakdown(&unmatched, model),
        filtered,
        syscall_tracepoint: is_syscall_tracepoint(spec),
    }
}

/// Whether events of this program are system calls seen through a tracefs
/// syscall tracepoint (enabling one puts every task's system calls on the
/// slow path: [`CostModel::untraced_syscall_ns`]).
pub fn is_syscall_tracepoint(spec: &ProgramSpec) -> bool {
    spec.event.kind == EventKind::Tracepoint && spec.event.category == "syscalls"
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jump_conditions() {
        assert!(taken(JmpCond::Ne, 0x1000, 0, true));
        assert!(!taken(JmpCond::Eq, 0x1000, 0, true));
        assert!(!taken(JmpCond::Eq, 0, -17, true));
        assert!(taken(JmpCond::Sge, 0, 0, true));
        assert!(taken(JmpCond::Gt, -1, 5, true), "unsigned compare");
        assert!(!taken(JmpCond::Sgt, -1, 5, true));
    }
}
