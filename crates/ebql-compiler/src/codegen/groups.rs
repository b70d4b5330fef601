//! In-kernel aggregates: the group table's key (hash) or slot (array, with
//! its overflow hash), the insert of a new group, and the update of every
//! aggregate state, COUNT(DISTINCT)'s set included.

use super::expr::simplify;
use super::gen::{imm32, stack_err, Cached, Gen, EVAL_REGS, PTR};
use super::hashkey::{percpu_hash, zero_value, HashKey};
use super::options::CodegenOptions;
use crate::agg::{Slot, State, UpdateCx};
use crate::contract::{ctl, MapKind, MapSpec, OutputLayout, MAP_OUT};
use crate::groupmap::GroupMap;
use crate::kexpr::{KExpr, KPred};
use crate::prepass::WindowSpec;
use crate::split::{GroupSpec, ValueSrc};
use crate::CompileError;
use ebql_bpf::{helper, AluOp, JmpCond, Label, Reg, Size, Src};

/// Origin of the test that sends a dense-range key's value outside its
/// range to the overflow hash ([`crate::groupmap`]): the cost model reads
/// the jump as rarely taken.
pub const DENSE_TEST_ORIGIN: &str = "GroupBy: dense range test, else the overflow hash:";

/// Where the COUNT(DISTINCT) set is and where its key is built.
#[derive(Clone, Copy)]
pub(super) struct DistinctSet {
    /// Map placeholder of the set.
    map: i32,
    /// Map placeholder of the all-zero value (the set's value is never read).
    zero_map: i32,
    /// Stack offset of the group key; the value goes right after it.
    key_off: i16,
    /// Bytes of the group key.
    key_size: u32,
}

/// Slot indexes grouped by argument, in first-use order, so each distinct
/// argument is evaluated once per event (conditional counts have none).
pub(super) fn slots_by_argument(slots: &[Slot]) -> Vec<(&KExpr, Vec<usize>)> {
    let mut groups: Vec<(&KExpr, Vec<usize>)> = Vec::new();
    for (i, s) in slots
        .iter()
        .enumerate()
        .filter(|(_, s)| s.when.is_none() && s.weight.is_none() && s.state.needs_arg())
    {
        match groups.iter_mut().find(|(e, _)| **e == s.expr) {
            Some((_, v)) => v.push(i),
            None => groups.push((&s.expr, vec![i])),
        }
    }
    groups
}

impl Gen {
    pub(super) fn emit_groups(
        &mut self,
        spec: &GroupSpec,
        window: Option<WindowSpec>,
        maps: &mut Vec<MapSpec>,
        opts: &CodegenOptions,
        group_map: &GroupMap,
    ) -> Result<OutputLayout, CompileError> {
        let hash_key = HashKey::of(&spec.keys, window)?;
        let (keys, window_tag, key_size) = (
            hash_key.keys.clone(),
            hash_key.window_tag,
            hash_key.key_size,
        );
        let value_size = spec.value_size();
        let windows = if window.is_some() { 2 } else { 1 };
        let entries = opts.max_groups.saturating_mul(windows);
        let array = match group_map {
            GroupMap::Array(ix) => Some(ix),
            GroupMap::Hash { .. } => None,
        };
        let hash = |name: &str| percpu_hash(name, key_size, value_size, entries);
        // An array is keyed by its u32 slot; the layout keeps the hash key's shape (user space rebuilds it per slot).
        maps.push(match array {
            Some(ix) => MapSpec {
                name: "ebql_groups".into(),
                kind: MapKind::PercpuArray,
                key_size: 4,
                value_size,
                max_entries: ix.entries(),
            },
            None => hash("ebql_groups"),
        });
        // Plan maps after the output map are numbered after the tap or start map, if any.
        let zero_map = maps.len() + self.maps.reserved;
        maps.push(zero_value(value_size));
        // Groups whose dense-range key falls outside the array ([`crate::groupmap`]).
        let overflow = array.filter(|ix| ix.overflow()).map(|_| {
            maps.push(hash("ebql_groups_overflow"));
            maps.len() - 1 + self.maps.reserved
        });
        let distinct = spec
            .slots
            .iter()
            .any(|s| matches!(s.state, State::Distinct(_)));
        let distinct_set = distinct.then(|| {
            maps.push(MapSpec {
                name: "ebql_distinct".into(),
                kind: MapKind::SharedHash,
                key_size: key_size + 8,
                value_size: 8,
                max_entries: opts.max_distinct.saturating_mul(windows),
            });
            maps.len() - 1 + self.maps.reserved
        });
        let layout = OutputLayout::Groups {
            key_size,
            value_size,
            window_tag,
            keys: keys.clone(),
            distinct_set,
            array: array.cloned(),
            overflow,
        };

        // Attributes read by keys and aggregates (the per-CPU `cpu` key needs no helper).
        let mut attrs = Vec::new();
        for k in spec.keys.iter().filter(|k| !k.per_cpu) {
            match &k.value {
                ValueSrc::Int(e) => e.attrs(&mut attrs),
                ValueSrc::Str(s) | ValueSrc::Truncated(s) => s.attrs(&mut attrs),
            }
        }
        for s in &spec.slots {
            s.exprs().for_each(|e| e.attrs(&mut attrs));
            if let Some(p) = &s.when {
                p.attrs(&mut attrs);
            }
        }
        self.asm.origin("Aggregate: system attributes");
        self.materialize_gen()?;
        self.materialize(&attrs)?;

        let outside = self.asm.new_label();
        let key_off = match array {
            Some(ix) => self.emit_array_slot(spec, ix, window, outside)?,
            None => self.emit_group_key(&spec.keys, &hash_key, window, distinct)?,
        };

        let aggs_text: Vec<&str> = spec.aggs.iter().map(|a| a.2.as_str()).collect();
        self.asm.origin(format!(
            "Aggregate: lookup group ({})",
            aggs_text.join(", ")
        ));
        let new_group = self.asm.new_label();
        let update = self.asm.new_label();
        let first_here = self.asm.new_label();
        self.lookup_value(MAP_OUT, key_off, new_group);
        self.asm.bind(update);
        self.asm
            .origin(format!("Aggregate: update ({})", aggs_text.join(", ")));
        self.asm
            .comment("count 0: the group is new on this CPU and its value all zeroes");
        self.asm.ldx(Size::DW, Reg::R1, PTR, 0);
        self.asm.jmp(JmpCond::Eq, Reg::R1, Src::Imm(0), first_here);
        self.asm.alu64(AluOp::Add, Reg::R1, Src::Imm(1));
        self.asm.stx(Size::DW, PTR, 0, Reg::R1);
        let set = distinct_set.map(|m| DistinctSet {
            map: m as i32,
            zero_map: zero_map as i32,
            key_off,
            key_size,
        });
        self.update_states(spec, false, set)?;
        self.asm.ja(self.exit);

        self.asm.bind(first_here);
        self.asm
            .origin("Aggregate: first event of the group on this CPU");
        self.asm.st_imm(Size::DW, PTR, 0, 1);
        self.update_states(spec, true, set)?;
        self.asm.ja(self.exit);

        if array.is_some() {
            // The filters bound every key (crate::groupmap): a slot is always found.
            self.asm.bind(new_group);
            self.asm.origin(
                "Aggregate: slot out of the array (the key bounds exclude it), count the drop",
            );
            self.count_drop(ctl::DROP_GROUPS_FULL, self.exit)?;
            if let Some(map) = overflow {
                // Rare by construction: the dense range holds the usual values.
                self.asm.bind(outside);
                let overflow_key = self.emit_group_key(&spec.keys, &hash_key, window, false)?;
                let new_overflow = self.asm.new_label();
                self.asm
                    .origin("Aggregate: lookup group in the overflow hash");
                self.lookup_value(map, overflow_key, new_overflow);
                self.asm.ja(update);
                self.emit_new_group(map, overflow_key, zero_map, update, new_overflow)?;
            }
            return Ok(layout);
        }
        self.emit_new_group(MAP_OUT, key_off, zero_map, update, new_group)?;
        Ok(layout)
    }

    /// The array slot of this event's group ([`crate::groupmap`]) as a u32
    /// on the stack, and its offset: `parity(gen) · slots + Σ (key − lo) · stride`.
    /// A dense-range key's value outside its range jumps to `outside`.
    pub(super) fn emit_array_slot(
        &mut self,
        spec: &GroupSpec,
        ix: &crate::groupmap::ArrayIndex,
        window: Option<WindowSpec>,
        outside: Label,
    ) -> Result<i16, CompileError> {
        let acc = self.stack.alloc(8, 8).map_err(stack_err)?;
        self.asm.origin("GroupBy: array slot");
        self.asm.st_imm(Size::DW, Reg::R10, acc, 0);
        for d in &ix.dims {
            let k = &spec.keys[d.key];
            let ValueSrc::Int(e) = &k.value else {
                return Err(CompileError::Internal(format!(
                    "array key `{}` is a string",
                    k.text
                )));
            };
            self.asm.origin(format!(
                "GroupBy key: {} (slot += ({} − {}) × {})",
                k.text, k.text, d.lo, d.stride
            ));
            self.eval(e, &EVAL_REGS)?;
            let r = EVAL_REGS[0];
            if d.lo != 0 {
                match imm32(d.lo as u64) {
                    Some(i) => self.asm.alu64(AluOp::Sub, r, Src::Imm(i)),
                    None => {
                        self.asm.ld_imm64(EVAL_REGS[1], d.lo as u64);
                        self.asm.alu64(AluOp::Sub, r, Src::Reg(EVAL_REGS[1]));
                    }
                }
            }
            if d.partial {
                self.asm.origin(format!(
                    "{DENSE_TEST_ORIGIN} {} in {}..={}",
                    k.text,
                    d.lo,
                    d.lo + i64::from(d.count) - 1
                ));
                self.asm
                    .comment("unsigned: a value below the range is outside too");
                self.asm
                    .jmp(JmpCond::Gt, r, Src::Imm(d.count as i32 - 1), outside);
                self.asm.origin(format!(
                    "GroupBy key: {} (slot += ({} − {}) × {})",
                    k.text, k.text, d.lo, d.stride
                ));
            }
            if d.stride != 1 {
                self.asm.alu64(AluOp::Mul, r, Src::Imm(d.stride as i32));
            }
            self.asm.ldx(Size::DW, EVAL_REGS[1], Reg::R10, acc);
            self.asm.alu64(AluOp::Add, r, Src::Reg(EVAL_REGS[1]));
            self.asm.stx(Size::DW, Reg::R10, acc, r);
        }
        if ix.windows == 2 && matches!(window, Some(WindowSpec::Time { .. })) {
            self.asm
                .origin(format!("Window(time): slot += (gen & 1) × {}", ix.slots));
            self.load_cached(Cached::Gen, Reg::R1)?;
            self.asm.alu64(AluOp::And, Reg::R1, Src::Imm(1));
            self.asm
                .alu64(AluOp::Mul, Reg::R1, Src::Imm(ix.slots as i32));
            self.asm.ldx(Size::DW, Reg::R2, Reg::R10, acc);
            self.asm.alu64(AluOp::Add, Reg::R1, Src::Reg(Reg::R2));
            self.asm.stx(Size::DW, Reg::R10, acc, Reg::R1);
        }
        // The map key is the low 4 bytes (little-endian) of the slot.
        Ok(acc)
    }

    /// A new group of the hash: inserted as the all-zero value, then looked
    /// up and updated from `update`; a full table counts a drop.
    pub(super) fn emit_new_group(
        &mut self,
        map: usize,
        key_off: i16,
        zero_map: usize,
        update: Label,
        new_group: Label,
    ) -> Result<(), CompileError> {
        // A new group is inserted as the all-zero value of a one-entry array
        // (any size, nothing built on the 512-byte stack), then updated in
        // place like any group this CPU has not seen yet.
        let zero_map = zero_map as i32;
        self.asm.bind(new_group);
        self.asm
            .origin("Aggregate: new group, inserted as all zeroes");
        self.asm.ld_map_fd(Reg::R1, map as i32);
        self.asm.mov64(Reg::R2, Src::Reg(Reg::R10));
        self.asm
            .alu64(AluOp::Add, Reg::R2, Src::Imm(key_off as i32));
        self.asm.ld_map_value(Reg::R3, zero_map, 0);
        self.asm
            .mov64(Reg::R4, Src::Imm(helper::BPF_NOEXIST as i32));
        self.asm.call(helper::MAP_UPDATE_ELEM);
        let inserted = self.asm.new_label();
        self.asm.jmp(JmpCond::Eq, Reg::R0, Src::Imm(0), inserted);
        self.asm
            .comment("-EEXIST: another CPU inserted the group first");
        self.asm.jmp(JmpCond::Eq, Reg::R0, Src::Imm(-17), inserted);
        let drop = self.asm.new_label();
        self.asm.bind(drop);
        self.asm
            .origin("Aggregate: group table full, count the drop");
        self.count_drop(ctl::DROP_GROUPS_FULL, self.exit)?;
        self.asm.bind(inserted);
        self.asm.origin("Aggregate: lookup the inserted group");
        self.lookup_value(map, key_off, drop);
        self.asm.ja(update);
        Ok(())
    }

    /// Folds this event into every state of the group's value at `PTR`
    /// (`first`: the value is all zeroes). Each distinct argument is evaluated
    /// once, then updates every unconditional state that uses it; states under
    /// a predicate are guarded by it.
    pub(super) fn update_states(
        &mut self,
        spec: &GroupSpec,
        first: bool,
        set: Option<DistinctSet>,
    ) -> Result<(), CompileError> {
        const SCRATCH: [Reg; 5] = [Reg::R2, Reg::R3, Reg::R4, Reg::R5, Reg::R0];
        for (expr, slots) in slots_by_argument(&spec.slots) {
            let slots: Vec<usize> = slots
                .into_iter()
                .filter(|&j| !matches!(spec.slots[j].state, State::Distinct(_)))
                .collect();
            if slots.is_empty() {
                continue;
            }
            self.eval(expr, &EVAL_REGS)?;
            for j in slots {
                let mut cx = UpdateCx {
                    asm: &mut self.asm,
                    value_ptr: PTR,
                    off: spec.slot_offset(j) as i16,
                    arg: Some((EVAL_REGS[0], expr.ty())),
                    weight: None,
                    scratch: &SCRATCH,
                };
                spec.slots[j].state.synopsis().emit_update(&mut cx, first)?;
            }
        }
        for (j, slot) in spec
            .slots
            .iter()
            .enumerate()
            .filter(|(_, s)| s.when.is_some() || s.weight.is_some() || !s.state.needs_arg())
        {
            let off = spec.slot_offset(j) as i16;
            self.guarded(slot, |g| {
                let arg = if slot.state.needs_arg() {
                    g.eval(&slot.expr, &EVAL_REGS)?;
                    Some((EVAL_REGS[0], slot.expr.ty()))
                } else {
                    None
                };
                // A weight is evaluated into the next register, the argument's
                // kept live (spilled around any probe read), and is no scratch.
                let (weight, scratch) = match &slot.weight {
                    Some(w) => {
                        g.eval(w, &EVAL_REGS[1..])?;
                        (Some((EVAL_REGS[1], w.ty())), &SCRATCH[1..])
                    }
                    None => (None, &SCRATCH[..]),
                };
                let mut cx = UpdateCx {
                    asm: &mut g.asm,
                    value_ptr: PTR,
                    off,
                    arg,
                    weight,
                    scratch,
                };
                slot.state.synopsis().emit_update(&mut cx, first)
            })?;
        }
        // COUNT(DISTINCT): last, because the set insert is a helper call (it clobbers r0-r5).
        for (j, slot) in spec
            .slots
            .iter()
            .enumerate()
            .filter(|(_, s)| matches!(s.state, State::Distinct(_)))
        {
            let set = set.ok_or_else(|| {
                CompileError::Internal("COUNT(DISTINCT) without its set map".into())
            })?;
            let at = set.key_off + set.key_size as i16;
            self.asm
                .origin("Aggregate: COUNT(DISTINCT) insert (window, group, value) into the set");
            self.eval(&slot.expr, &EVAL_REGS)?;
            self.asm.comment(
                "set key = group key ++ value (two 4-byte stores: the key may be 4-aligned only)",
            );
            self.asm.stx(Size::W, Reg::R10, at, EVAL_REGS[0]);
            self.asm.alu64(AluOp::Rsh, EVAL_REGS[0], Src::Imm(32));
            self.asm.stx(Size::W, Reg::R10, at + 4, EVAL_REGS[0]);
            self.asm.ld_map_fd(Reg::R1, set.map);
            self.asm.mov64(Reg::R2, Src::Reg(Reg::R10));
            self.asm
                .alu64(AluOp::Add, Reg::R2, Src::Imm(set.key_off as i32));
            self.asm.ld_map_value(Reg::R3, set.zero_map, 0);
            self.asm
                .mov64(Reg::R4, Src::Imm(helper::BPF_NOEXIST as i32));
            self.asm.call(helper::MAP_UPDATE_ELEM);
            let (new_value, done) = (self.asm.new_label(), self.asm.new_label());
            self.asm.jmp(JmpCond::Eq, Reg::R0, Src::Imm(0), new_value);
            self.asm
                .comment("-EEXIST: the value was already counted (on some CPU) in this window");
            self.asm.jmp(JmpCond::Eq, Reg::R0, Src::Imm(-17), done);
            self.asm
                .origin("Aggregate: distinct set full, count the drop");
            self.count_drop(ctl::DROP_DISTINCT_FULL, done)?;
            self.asm.bind(new_value);
            self.asm
                .origin("Aggregate: COUNT(DISTINCT) new value, count it");
            let mut cx = UpdateCx {
                asm: &mut self.asm,
                value_ptr: PTR,
                off: spec.slot_offset(j) as i16,
                arg: None,
                weight: None,
                scratch: &SCRATCH,
            };
            slot.state.synopsis().emit_update(&mut cx, first)?;
            self.asm.bind(done);
        }
        Ok(())
    }

    /// Emits `then` guarded by a slot's predicate (nothing when it is constant
    /// false, no test when there is none or it is constant true: no dead code).
    pub(super) fn guarded(
        &mut self,
        slot: &Slot,
        then: impl FnOnce(&mut Gen) -> Result<(), CompileError>,
    ) -> Result<(), CompileError> {
        match slot.when.clone().map(simplify) {
            Some(KPred::Const(false)) => Ok(()),
            None | Some(KPred::Const(true)) => then(self),
            Some(p) => {
                let skip = self.asm.new_label();
                self.jump_if(&p, false, skip)?;
                then(self)?;
                self.asm.bind(skip);
                Ok(())
            }
        }
    }

    /// [`Gen::lookup`] into `PTR`; to `missing` when the key has no value.
    pub(super) fn lookup_value(&mut self, map: usize, key_off: i16, missing: Label) {
        self.lookup(map, key_off);
        self.asm.jmp(JmpCond::Eq, Reg::R0, Src::Imm(0), missing);
        self.asm.mov64(PTR, Src::Reg(Reg::R0));
    }

    /// `bpf_map_lookup_elem(map, fp + key_off)`: the value or NULL in r0.
    pub(super) fn lookup(&mut self, map: usize, key_off: i16) {
        self.asm.ld_map_fd(Reg::R1, map as i32);
        self.asm.mov64(Reg::R2, Src::Reg(Reg::R10));
        self.asm
            .alu64(AluOp::Add, Reg::R2, Src::Imm(key_off as i32));
        self.asm.call(helper::MAP_LOOKUP_ELEM);
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{compile, compile_with, listing, section, PREAD};
    use crate::choose::GroupMapChoice;
    use crate::contract::MAP_OUT;
    use crate::CodegenOptions;

    #[test]
    fn a_hash_count_looks_its_group_up_once() {
        let mut opts = CodegenOptions::default();
        opts.choices.group_map = GroupMapChoice::Hash;
        let q = compile_with(
            &format!("SELECT fd, COUNT(*) FROM {PREAD} GROUP BY fd"),
            &opts,
        );
        let l = listing(&q, 0);
        let lookup = section(&l, "Aggregate: lookup group (count(Int64(1)))");
        assert_eq!(
            lookup[..4],
            [
                format!("r1 = map_fd({MAP_OUT})").as_str(),
                "r2 = r10",
                lookup[2],
                "call bpf_map_lookup_elem#1"
            ],
            "{l}"
        );
        assert_eq!(
            lookup.iter().filter(|i| i.starts_with("call ")).count(),
            1,
            "{l}"
        );
        assert!(
            l.contains(";; Aggregate: new group, inserted as all zeroes"),
            "{l}"
        );
        assert!(!l.contains("array slot"), "{l}");
    }

    #[test]
    fn a_bounded_key_indexes_the_array() {
        let q = compile(&format!(
            "SELECT fd, COUNT(*) FROM {PREAD} WHERE fd < 64 GROUP BY fd"
        ));
        let l = listing(&q, 0);
        assert!(!section(&l, "GroupBy: array slot").is_empty(), "{l}");
        let update = section(&l, "Aggregate: update (count(Int64(1)))");
        assert_eq!(update[0], "r1 = *(u64 *)(r9 + 0)", "{l}");
        assert!(!l.contains("new group, inserted"), "{l}");
    }

    /// approx_top_k(x, k, w): the argument in r1, the weight in r2, an
    /// unrolled scan of the 16 entries from r9 with no helper call; the
    /// first event of a group writes entry 0 = {x, w, 0} directly.
    #[test]
    fn a_weighted_top_k_scans_its_entries_without_helper_calls() {
        let q = compile(&format!(
            "SELECT fd, approx_top_k(count, 4, pos) FROM {PREAD} GROUP BY fd"
        ));
        let l = listing(&q, 0);
        let update = section(
            &l,
            "Aggregate: update (approx_top_k(sys_enter_pread64.count, Int64(4), sys_enter_pread64.pos))",
        );
        assert!(!update.is_empty(), "{l}");
        assert!(!update.iter().any(|i| i.starts_with("call ")), "{l}");
        // Slot 0 at byte 8: entry i's value at 8 + 24 i, its count 8 later.
        for i in [0, 15] {
            let (v, c) = (8 + 24 * i, 16 + 24 * i);
            assert!(
                update.contains(&format!("r3 = *(u64 *)(r9 + {v})").as_str()),
                "{l}"
            );
            assert!(
                update.contains(&format!("r4 = *(u64 *)(r9 + {c})").as_str()),
                "{l}"
            );
        }
        assert!(
            !update.iter().any(|i| i.contains("(r9 + 392)")),
            "16 entries only: {l}"
        );
        // A hit adds the weight; an eviction stores min + w after min as the error.
        assert!(update.contains(&"r4 += r2"), "{l}");
        assert!(update.contains(&"r5 += r2"), "{l}");
        // Bounded: about 21 instructions per entry, in straight-line code.
        assert!(
            update.len() <= 24 * 16,
            "{} instructions: {l}",
            update.len()
        );
        let first = section(&l, "Aggregate: first event of the group on this CPU");
        assert!(first.contains(&"*(u64 *)(r9 + 8) = r1"), "{l}");
        assert!(first.contains(&"*(u64 *)(r9 + 16) = r2"), "{l}");
    }
}
