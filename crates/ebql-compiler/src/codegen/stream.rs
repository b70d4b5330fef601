//! Streams: one ring-buffer record per event with the projected columns,
//! for the plan's output or the differential oracle's tap ([`Tap`]).

use super::gen::{Cached, Gen, EVAL_REGS, PTR};
use super::options::CodegenOptions;
use crate::contract::{
    ctl, BytesTail, MapKind, MapSpec, OutputLayout, Stored, BYTES_HEADER, MAP_OUT,
};
use crate::kexpr::{KExpr, StrSrc};
use crate::pair::PairPlan;
use crate::prepass::WindowSpec;
use crate::split::{GroupKey, KernelOutput, KernelPlan, ValueSrc};
use crate::CompileError;
use ebql_bpf::{helper, AluOp, JmpCond, Label, Reg, Size, Src};
use std::collections::HashMap;

/// Whether a stream is the oracle's tap or the plan's output.
#[derive(Clone)]
pub(super) enum Tap {
    /// The plan's output; `variable`: records of their used length
    /// ([`variable_records`]); `latest`: `DISTINCT ON`'s keys, whose latest
    /// record per key is kept in a hash instead ([`super::latest`]).
    /// `side`: in a query over several events ([`crate::multi`]), the
    /// branch index this program writes in column 0 and the columns it
    /// writes (it zeroes the others).
    No {
        variable: bool,
        latest: Option<Vec<GroupKey>>,
        side: Option<(u64, std::ops::Range<usize>)>,
    },
    Yes {
        /// Where the plan's code continues after the tap.
        done: Label,
        /// The tap's ring buffer.
        map: usize,
        /// A paired query's tap: this program's side; it writes the side
        /// column and its own columns, and zeroes the other side's.
        side: Option<(u64, std::ops::Range<usize>)>,
    },
}

/// Columns the differential oracle's tap streams: (name, value, Arrow type).
pub type TapColumns<'a> = &'a [(String, ValueSrc, datafusion::arrow::datatypes::DataType)];

/// What the differential oracle's tap streams ([`super::compile_tapped`]).
#[derive(Clone)]
pub struct TapSpec<'a> {
    /// The tap's columns.
    pub columns: TapColumns<'a>,
    /// A paired query: both programs write the same record layout into one
    /// ring buffer. Column 0 is the side (0: start, 1: end), then the start
    /// event's columns (`start`), then the end event's (`end`); each
    /// program zeroes the other side's columns.
    pub sides: Option<TapSides>,
    /// A query over several events ([`crate::multi`]): per program, the
    /// branch index it writes in column 0 and the columns it writes (it
    /// zeroes the others). Empty otherwise.
    pub branches: Vec<(u64, std::ops::Range<usize>)>,
}

/// Which tap columns each program of a paired query writes ([`TapSpec::sides`]).
#[derive(Clone, Debug)]
pub struct TapSides {
    /// The start event's columns.
    pub start: std::ops::Range<usize>,
    /// The end event's columns.
    pub end: std::ops::Range<usize>,
}

/// Whether the plan's streamed records are built in a per-CPU record
/// buffer and output with only the bytes they use (`bpf_ringbuf_output`)
/// instead of reserved whole: records that end in a `bytes()` value
/// ([`BytesTail`]; a wire capture's 2 KiB buffer usually holds a few
/// hundred bytes), so the ring buffer holds and user space reads the used
/// bytes only. Not in a sleepable program, where another run of it could
/// take the CPU's buffer while this one sleeps, nor in a `LEFT JOIN`
/// pairing, whose records end in the matched word.
pub(super) fn variable_records(plan: &KernelPlan, opts: &CodegenOptions) -> bool {
    let KernelOutput::Stream {
        columns,
        latest: None,
    } = &plan.output
    else {
        return false;
    };
    let sleepable = opts.faulting_user_strings && plan.event.event.kind.may_sleep();
    if sleepable || outer_of(plan).is_some() {
        return false;
    }
    let gen_in_record = matches!(plan.window, Some(WindowSpec::Time { .. }));
    let (columns, _, size) = stream_layout(columns, gen_in_record);
    BytesTail::of(&OutputLayout::Stream {
        record_size: size.max(8),
        gen_in_record,
        columns,
        outer: None,
        latest: None,
    })
    .is_some()
}

/// The start side of a `LEFT JOIN` pairing whose rows are streamed.
pub(super) fn outer_of(plan: &KernelPlan) -> Option<PairPlan> {
    match (&plan.pair, &plan.output) {
        (Some(p), KernelOutput::Stream { .. }) if p.outer => Some(p.clone()),
        _ => None,
    }
}

/// True when a streamed value is the start event's (stored): an unmatched
/// start's row has it, its other columns are NULL.
pub(super) fn start_only(v: &ValueSrc) -> bool {
    matches!(
        v,
        ValueSrc::Int(KExpr::Stored { .. })
            | ValueSrc::Str(StrSrc::Stored { .. })
            | ValueSrc::Truncated(StrSrc::Stored { .. })
    )
}

/// The unmatched starts' rows of a `LEFT JOIN` pairing's stream: the
/// matched word at `matched_at`, the end columns, and where each start
/// column the row writes comes from in the start value.
pub(super) fn outer_layout(
    columns: TapColumns,
    cols: &[(u32, Stored)],
    written: &[bool],
    matched_at: u32,
    pair: &PairPlan,
) -> crate::contract::Outer {
    let mut end_columns = Vec::new();
    let mut from_start = Vec::new();
    for (i, ((_, v, _), (at, _))) in columns.iter().zip(cols).enumerate() {
        match v {
            ValueSrc::Int(KExpr::Stored { index, .. }) => {
                from_start.push((*at, 8 * *index as u32, 8))
            }
            ValueSrc::Str(StrSrc::Stored { index, of, .. })
            | ValueSrc::Truncated(StrSrc::Stored { index, of, .. })
                if written[i] =>
            {
                from_start.push((*at, pair.str_offset(*index), of.record_bytes()))
            }
            v if !start_only(v) => end_columns.push(i),
            _ => {}
        }
    }
    crate::contract::Outer {
        matched_at,
        end_columns,
        from_start,
        value_size: pair.value_size(),
    }
}

/// Where each streamed column lies in a ring-buffer record: (offset,
/// storage) per column, whether the column writes its bytes (a
/// `truncated()` flag shares the bytes of a column holding the same
/// string, or of an earlier flag of it), and the bytes used. Integers take
/// 8 bytes, strings [`StrSrc::record_bytes`] rounded up to 8; the record
/// starts with the u64 generation when `gen_in_record`.
pub(super) fn stream_layout(
    columns: TapColumns,
    gen_in_record: bool,
) -> (Vec<(u32, Stored)>, Vec<bool>, u32) {
    let mut size = if gen_in_record { 8u32 } else { 0 };
    let mut at: HashMap<&StrSrc, u32> = HashMap::new();
    let mut cols = vec![(0, Stored::Str(0)); columns.len()];
    let mut written = vec![true; columns.len()];
    // Strings and integers first, so that a flag finds its string's offset;
    // bytes() values after the others, so that a record can end in one
    // and be output to its used length (BytesTail, `variable_records`).
    let rank = |v: &ValueSrc| match v {
        ValueSrc::Truncated(_) => 2,
        ValueSrc::Str(StrSrc::Bytes { .. }) => 1,
        _ => 0,
    };
    let mut order: Vec<usize> = (0..columns.len()).collect();
    order.sort_by_key(|&i| rank(&columns[i].1));
    for i in order {
        let (stored, src) = match &columns[i].1 {
            ValueSrc::Int(e) => (
                Stored::Int {
                    ty: e.ty(),
                    bytes: 8,
                },
                None,
            ),
            ValueSrc::Str(s @ StrSrc::Bytes { size, .. }) => (Stored::ReadBytes(*size), Some(s)),
            ValueSrc::Str(s) => (
                s.helper_buffer()
                    .map_or(Stored::Str(s.len()), Stored::ReadStr),
                Some(s),
            ),
            ValueSrc::Truncated(s @ StrSrc::Bytes { size, .. }) => {
                (Stored::BytesTruncated(*size), Some(s))
            }
            ValueSrc::Truncated(s) => (
                Stored::Truncated(s.helper_buffer().unwrap_or(s.len())),
                Some(s),
            ),
        };
        if let (Stored::Truncated(_) | Stored::BytesTruncated(_), Some(&off)) =
            (stored, src.and_then(|s| at.get(s)))
        {
            cols[i] = (off, stored);
            written[i] = false;
            continue;
        }
        if let (Some(s), false) = (src, matches!(stored, Stored::Str(_))) {
            at.insert(s, size);
        }
        cols[i] = (size, stored);
        size += src.map_or(8, |s| s.record_bytes().div_ceil(8) * 8);
    }
    (cols, written, size)
}

impl Gen {
    /// The oracle's tap at the top of a program: `columns` of every event
    /// into ring buffer `map` (a paired query's program writes its `side`'s
    /// columns). Returns the record layout and the ring buffer's spec.
    pub(super) fn emit_tap(
        &mut self,
        columns: TapColumns,
        window: Option<WindowSpec>,
        opts: &CodegenOptions,
        map: usize,
        side: Option<(u64, std::ops::Range<usize>)>,
    ) -> Result<(OutputLayout, MapSpec), CompileError> {
        let own = |i: &usize| side.as_ref().is_none_or(|(_, r)| r.contains(i));
        let values = columns
            .iter()
            .enumerate()
            .filter(|(i, _)| own(i))
            .map(|(_, (_, v, _))| v);
        self.materialize_stacks(&super::reads::stack_reads_of(values))?;
        let mut tap_maps = Vec::new();
        let done = self.asm.new_label();
        // The tap reads what the query reads: failed reads are the query's to count.
        self.count_str_failures = false;
        let layout = self.emit_stream(
            columns,
            window,
            &mut tap_maps,
            opts,
            Tap::Yes { done, map, side },
        )?;
        self.count_str_failures = true;
        self.asm.bind(done);
        Ok((layout, tap_maps.pop().expect("tap ring buffer")))
    }

    pub(super) fn emit_stream(
        &mut self,
        columns: TapColumns,
        window: Option<WindowSpec>,
        maps: &mut Vec<MapSpec>,
        opts: &CodegenOptions,
        tap: Tap,
    ) -> Result<OutputLayout, CompileError> {
        let (map, done, drops, what, side) = match &tap {
            Tap::No { side, .. } => (
                MAP_OUT,
                self.exit,
                ctl::DROP_RINGBUF_FULL,
                "Stream",
                side.clone(),
            ),
            Tap::Yes { done, map, side } => {
                (*map, *done, ctl::DROP_TAP_FULL, "Check tap", side.clone())
            }
        };
        let gen_in_record = matches!(window, Some(WindowSpec::Time { .. }));
        let (cols, written, mut size) = stream_layout(columns, gen_in_record);
        let outer_at = (self.pair.outer.is_some() && matches!(tap, Tap::No { .. })).then(|| {
            size += 8;
            size - 8
        });
        let latest = match &tap {
            Tap::No { latest, .. } => latest.as_deref(),
            Tap::Yes { .. } => None,
        };
        let mut attrs = Vec::new();
        let keys = latest.unwrap_or_default().iter().map(|k| &k.value);
        for v in columns.iter().map(|(_, v, _)| v).chain(keys) {
            match v {
                ValueSrc::Int(e) => e.attrs(&mut attrs),
                ValueSrc::Str(s) | ValueSrc::Truncated(s) => s.attrs(&mut attrs),
            }
        }
        if size > crate::kexpr::MAX_RECORD_BYTES {
            return Err(CompileError::Query(
                crate::Diagnostic::new(format!("a streamed row would take {size} bytes; the probe writes at most {} per event", crate::kexpr::MAX_RECORD_BYTES), None)
                    .with_hint("read fewer or shorter strings: str(p, n) reserves n + 1 bytes of each row"),
            ));
        }
        let record_size = size.max(8);
        if latest.is_none() {
            maps.push(MapSpec {
                name: "ebql_events".into(),
                kind: MapKind::RingBuf,
                key_size: 0,
                value_size: 0,
                max_entries: opts.ringbuf_bytes,
            });
        }
        let outer = match (outer_at, &self.pair.outer) {
            (Some(at), Some(pair)) => Some(outer_layout(columns, &cols, &written, at, pair)),
            _ => None,
        };
        self.asm.origin(format!("{what}: system attributes"));
        self.materialize_gen()?;
        self.materialize(&attrs)?;
        let latest = match latest {
            Some(keys) => Some(self.emit_latest_slot(keys, window, record_size, maps, opts)?),
            None => None,
        };
        let layout = OutputLayout::Stream {
            record_size,
            gen_in_record,
            columns: cols.clone(),
            outer,
            latest: latest.clone(),
        };
        let tail = match tap {
            Tap::No { variable: true, .. } => Some(BytesTail::of(&layout).ok_or_else(|| {
                CompileError::Internal("variable-length records without a bytes() tail".into())
            })?),
            _ => None,
        };
        let record_map = tail.map(|_| {
            let index = maps.len() + self.maps.reserved;
            maps.push(MapSpec {
                name: "ebql_record".into(),
                kind: MapKind::PercpuArray,
                key_size: 4,
                value_size: record_size,
                max_entries: 1,
            });
            index
        });

        if latest.is_some() {
            // emit_latest_slot found the record.
        } else if let Some(record_map) = record_map {
            self.asm.origin(format!(
                "{what}: build the {record_size}-byte record in this CPU's record buffer"
            ));
            self.array_entry(record_map, 0, done)?;
        } else {
            self.asm.origin(format!(
                "{what}: reserve a {record_size}-byte ring buffer record"
            ));
            self.asm.ld_map_fd(Reg::R1, map as i32);
            self.asm.mov64(Reg::R2, Src::Imm(record_size as i32));
            self.asm.mov64(Reg::R3, Src::Imm(0));
            self.asm.call(helper::RINGBUF_RESERVE);
            let have = self.asm.new_label();
            self.asm.jmp(JmpCond::Ne, Reg::R0, Src::Imm(0), have);
            self.asm
                .origin(format!("{what}: ring buffer full, count the drop"));
            self.count_drop(drops, done)?;
            self.asm.bind(have);
        }
        if latest.is_none() {
            self.asm.mov64(PTR, Src::Reg(Reg::R0));
        }
        if gen_in_record {
            self.asm.origin("Window(time): record.generation = gen");
            self.load_cached(Cached::Gen, Reg::R1)?;
            self.asm.stx(Size::DW, PTR, 0, Reg::R1);
        }
        let regs: Vec<Reg> = EVAL_REGS.to_vec();
        for (i, (((name, v, _), (off, _)), write)) in
            columns.iter().zip(&cols).zip(&written).enumerate()
        {
            if !write {
                continue; // a truncated() flag of a string another column writes
            }
            self.asm.origin(format!(
                "{}: {name}",
                if matches!(tap, Tap::Yes { .. }) {
                    "Check tap"
                } else {
                    "Project"
                }
            ));
            match (&side, v) {
                (Some((side, _)), _) if i == 0 => {
                    self.asm.st_imm(Size::DW, PTR, *off as i16, *side as i32);
                    continue;
                }
                // The other side's column: zero (an empty string).
                (Some((_, own)), _) if !own.contains(&i) => {
                    self.asm.st_imm(Size::DW, PTR, *off as i16, 0);
                    continue;
                }
                _ => {}
            }
            match v {
                ValueSrc::Int(e) => {
                    self.eval(e, &regs)?;
                    self.asm.stx(Size::DW, PTR, *off as i16, regs[0]);
                }
                ValueSrc::Str(s) | ValueSrc::Truncated(s) => {
                    self.store_str(s, PTR, *off as i16, true)?
                }
            }
        }
        if let Some(at) = outer_at {
            self.asm.origin("LEFT JOIN: matched = 1 (a pair's row)");
            self.asm.st_imm(Size::DW, PTR, at as i16, 1);
        }
        if let Some(tail) = tail {
            self.asm.origin(format!(
                "{what}: output the record's used bytes without wakeup (user space drains on a timer)"
            ));
            let at = tail.offset + BYTES_HEADER;
            self.asm.comment(format!(
                "size = {at} + the bytes the bytes() value read (at most {})",
                tail.n
            ));
            self.asm.ldx(Size::W, Reg::R3, PTR, tail.offset as i16);
            let bounded = self.asm.new_label();
            self.asm
                .jmp(JmpCond::Le, Reg::R3, Src::Imm(tail.n as i32), bounded);
            self.asm.mov64(Reg::R3, Src::Imm(tail.n as i32));
            self.asm.bind(bounded);
            self.asm.alu64(AluOp::Add, Reg::R3, Src::Imm(at as i32));
            self.asm.ld_map_fd(Reg::R1, map as i32);
            self.asm.mov64(Reg::R2, Src::Reg(PTR));
            self.asm
                .mov64(Reg::R4, Src::Imm(helper::BPF_RB_NO_WAKEUP as i32));
            self.asm.call(helper::RINGBUF_OUTPUT);
            self.asm.jmp(JmpCond::Sge, Reg::R0, Src::Imm(0), done);
            self.asm
                .origin(format!("{what}: ring buffer full, count the drop"));
            self.count_drop(drops, done)?;
            return Ok(layout);
        }
        if latest.is_some() {
            // The record stays in the table until its window is drained.
            self.asm.ja(done);
            return Ok(layout);
        }
        self.asm.origin(format!(
            "{what}: submit without wakeup (user space drains on a timer)"
        ));
        self.asm.mov64(Reg::R1, Src::Reg(PTR));
        self.asm
            .mov64(Reg::R2, Src::Imm(helper::BPF_RB_NO_WAKEUP as i32));
        self.asm.call(helper::RINGBUF_SUBMIT);
        self.asm.ja(done);
        Ok(layout)
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{compile, listing, section, PREAD};
    use crate::contract::MAP_OUT;

    /// A bytes() value the probe reads before another column it computes
    /// (here a load, as the wire capture's `uregs()`) still ends the
    /// record, so the record goes out at its used length, not whole.
    #[test]
    fn a_record_ends_in_its_bytes_whatever_the_column_order() {
        let q = compile(&format!(
            "SELECT bytes(buf, count, 64) AS b, u64_at(buf) AS v FROM {PREAD} WHERE pid = 7"
        ));
        let l = listing(&q, 0);
        assert!(
            l.contains("call bpf_ringbuf_output") && !l.contains("call bpf_ringbuf_reserve"),
            "{l}"
        );
    }

    #[test]
    fn a_stream_reserves_writes_and_submits_one_record() {
        let q = compile(&format!("SELECT fd, count FROM {PREAD} WHERE pid = 7"));
        let l = listing(&q, 0);
        let reserve = section(&l, "Stream: reserve a 16-byte ring buffer record");
        assert_eq!(
            reserve[..4],
            [
                format!("r1 = map_fd({MAP_OUT})").as_str(),
                "r2 = 16",
                "r3 = 0",
                "call bpf_ringbuf_reserve#131"
            ],
            "{l}"
        );
        let fd = section(&l, "Project: fd");
        assert_eq!(
            fd,
            ["r1 = *(u32 *)(r6 + 16)", "*(u64 *)(r9 + 0) = r1"],
            "{l}"
        );
        let count = section(&l, "Project: count");
        assert_eq!(
            count,
            ["r1 = *(u64 *)(r6 + 32)", "*(u64 *)(r9 + 8) = r1"],
            "{l}"
        );
        let submit = section(&l, "Stream: submit without wakeup");
        assert_eq!(
            submit[..3],
            ["r1 = r9", "r2 = 1", "call bpf_ringbuf_submit#132"],
            "{l}"
        );
    }

    /// A record ending in bytes() is built in the CPU's record buffer and
    /// output with the bytes it uses: fd, buf and count (the user-space
    /// plan's) and the value's header take 32 bytes, then the bytes read
    /// (at most 64).
    #[test]
    fn a_stream_ending_in_bytes_outputs_only_its_used_bytes() {
        let q = compile(&format!(
            "SELECT fd, bytes(buf, count, 64) AS b FROM {PREAD} WHERE pid = 7"
        ));
        let record = q.code.maps.iter().find(|m| m.name == "ebql_record");
        assert_eq!(record.map(|m| m.value_size), Some(24 + 8 + 64));
        let l = listing(&q, 0);
        assert!(!l.contains("bpf_ringbuf_reserve"), "{l}");
        let output = section(&l, "Stream: output the record's used bytes");
        assert_eq!(
            output[..9],
            [
                "r3 = *(u32 *)(r9 + 24)",
                "if r3 <= 0x40 goto +1 <pc 62>",
                "r3 = 64",
                "r3 += 32",
                format!("r1 = map_fd({MAP_OUT})").as_str(),
                "r2 = r9",
                "r4 = 1",
                "call bpf_ringbuf_output#130",
                "if r0 s>= 0x0 goto +5 <pc 74>",
            ],
            "{l}"
        );
    }
}
