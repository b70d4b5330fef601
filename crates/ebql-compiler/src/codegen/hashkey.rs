//! The key of a hash table the probe builds per event: a group table's
//! (`GROUP BY`) or the latest-record table's (`DISTINCT ON`). Window tag and
//! integer keys at their natural width, widest first so nothing needs
//! alignment padding, then strings; the size is a multiple of 4 (the kernel
//! hashes such keys with jhash2). Narrow keys hash and compare faster.

use super::gen::{imm32, stack_err, Cached, Gen, EVAL_REGS};
use crate::contract::{ctl, MapKind, MapSpec, Stored, MAP_CTL};
use crate::kexpr::IntType;
use crate::prepass::WindowSpec;
use crate::split::{GroupKey, ValueSrc};
use crate::CompileError;
use ebql_bpf::{AluOp, Reg, Size, Src};

/// Where each part of a hash key lies.
#[derive(Clone, Debug)]
pub(super) struct HashKey {
    /// Per key, in plan order: `None` for the per-CPU `cpu` key (not in
    /// the map key), else (byte offset, storage).
    pub keys: Vec<Option<(u32, Stored)>>,
    /// (offset, bytes) of the window tag: the time-window generation (u32,
    /// wrapping) or the count-window number (u64).
    pub window_tag: Option<(u32, u32)>,
    /// Bytes of the key: the fields, rounded up to a multiple of 4 (at least 4).
    pub key_size: u32,
    /// Bytes the fields use (the rest is zeroed padding).
    pub used: u32,
    /// No field at all (a global aggregate without a window): the key is padding.
    pub empty: bool,
}

impl HashKey {
    /// The layout of `keys` under `window`.
    ///
    /// Errors: `Internal` for a `truncated()` key, which the split never makes.
    pub(super) fn of(
        keys: &[GroupKey],
        window: Option<WindowSpec>,
    ) -> Result<HashKey, CompileError> {
        let tag_bytes = match window {
            Some(WindowSpec::Time { .. }) => 4,
            Some(WindowSpec::Count { .. }) => 8,
            None => 0,
        };
        // (key index or None = tag, storage, bytes)
        let mut items: Vec<(Option<usize>, Stored, u32)> = Vec::new();
        if tag_bytes > 0 {
            items.push((
                None,
                Stored::Int {
                    ty: IntType::U64,
                    bytes: tag_bytes,
                },
                tag_bytes,
            ));
        }
        for (i, k) in keys.iter().enumerate() {
            if k.per_cpu {
                continue;
            }
            let (stored, bytes) = match &k.value {
                ValueSrc::Int(e) => {
                    let b = (e.ty().bits as u32 / 8).max(1);
                    (
                        Stored::Int {
                            ty: e.ty(),
                            bytes: b,
                        },
                        b,
                    )
                }
                // A string a helper reads may be NULL: its flag is the key's last byte.
                ValueSrc::Str(st) if st.helper_buffer().is_some() => {
                    (Stored::ReadKey(st.len()), st.len())
                }
                ValueSrc::Str(st) => (Stored::Str(st.len()), st.len()),
                ValueSrc::Truncated(_) => {
                    return Err(CompileError::Internal(
                        "truncated() as a kernel group key".into(),
                    ))
                }
            };
            items.push((Some(i), stored, bytes));
        }
        let align = |st: &Stored, b: u32| {
            if matches!(st, Stored::Str(_) | Stored::ReadKey(_)) {
                0
            } else {
                b
            }
        };
        items.sort_by_key(|(_, st, b)| std::cmp::Reverse(align(st, *b)));
        let mut layout = vec![None; keys.len()];
        let mut window_tag = None;
        let mut used = 0u32;
        for (idx, stored, bytes) in &items {
            match idx {
                Some(i) => layout[*i] = Some((used, *stored)),
                None => window_tag = Some((used, *bytes)),
            }
            used += bytes;
        }
        Ok(HashKey {
            keys: layout,
            window_tag,
            key_size: used.div_ceil(4).max(1) * 4,
            used,
            empty: items.is_empty(),
        })
    }
}

impl Gen {
    /// The hash key of `keys` laid out as `layout` on the stack (window
    /// tag, integer keys, strings; with COUNT(DISTINCT), 8 more bytes for
    /// the value after it) and its offset.
    pub(super) fn emit_group_key(
        &mut self,
        keys: &[GroupKey],
        layout: &HashKey,
        window: Option<WindowSpec>,
        distinct: bool,
    ) -> Result<i16, CompileError> {
        let HashKey {
            keys: slots,
            window_tag,
            key_size,
            used,
            empty,
        } = layout;
        let (window_tag, key_size, used) = (*window_tag, *key_size, *used);
        // With COUNT(DISTINCT), the value follows the group key: together they are the set's key.
        let key_off = self
            .stack
            .alloc((key_size + 8 * distinct as u32) as usize, 8)
            .map_err(stack_err)?;
        if used < key_size || *empty {
            self.asm.origin("GroupBy: zero the key's padding");
            for b in used..key_size {
                self.asm.st_imm(Size::B, Reg::R10, key_off + b as i16, 0);
            }
        }
        if let Some((off, _)) = window_tag {
            let at = key_off + off as i16;
            match window {
                Some(WindowSpec::Time { .. }) => {
                    self.asm.origin("Window(time): key.generation = gen");
                    self.load_cached(Cached::Gen, Reg::R1)?;
                    self.asm.stx(Size::W, Reg::R10, at, Reg::R1);
                }
                Some(WindowSpec::Count { size, .. }) => {
                    self.asm.origin(format!(
                        "Window(count, {size}): key.window = fetch_add(ctl.seq, 1) / {size}"
                    ));
                    self.asm.ld_map_value(Reg::R1, MAP_CTL as i32, 0);
                    self.asm.mov64(Reg::R2, Src::Imm(1));
                    self.asm
                        .atomic_fetch_add(Size::DW, Reg::R1, ctl::SEQ as i16, Reg::R2);
                    match imm32(size) {
                        Some(i) => self.asm.alu64(AluOp::Div, Reg::R2, Src::Imm(i)),
                        None => {
                            self.asm.ld_imm64(Reg::R3, size);
                            self.asm.alu64(AluOp::Div, Reg::R2, Src::Reg(Reg::R3));
                        }
                    }
                    self.asm.stx(Size::DW, Reg::R10, at, Reg::R2);
                }
                None => {}
            }
        }
        for (k, slot) in keys.iter().zip(slots) {
            let Some((off, stored)) = slot else { continue };
            self.asm.origin(format!("GroupBy key: {}", k.text));
            let at = key_off + *off as i16;
            match (&k.value, stored) {
                (ValueSrc::Int(e), Stored::Int { bytes, .. }) => {
                    self.eval(e, &EVAL_REGS)?;
                    let size = Size::from_bytes(*bytes as usize).expect("1, 2, 4 or 8 bytes");
                    self.asm.stx(size, Reg::R10, at, EVAL_REGS[0]);
                }
                (ValueSrc::Str(s), _) => self.store_str(s, Reg::R10, at, false)?,
                _ => unreachable!("key storage matches its value"),
            }
        }
        Ok(key_off)
    }
}

/// A per-CPU hash keyed by `key_size` bytes with `value_size`-byte values
/// and `entries` entries: preallocated, within
/// [`crate::contract::PREALLOC_BUDGET_BYTES`], when its values are too large
/// for the probe to allocate.
pub(super) fn percpu_hash(name: &str, key_size: u32, value_size: u32, entries: u32) -> MapSpec {
    match value_size > crate::contract::PREALLOC_ABOVE_BYTES {
        true => MapSpec {
            name: name.into(),
            kind: MapKind::PercpuHashPrealloc,
            key_size,
            value_size,
            max_entries: entries.min((crate::contract::PREALLOC_BUDGET_BYTES / value_size).max(2)),
        },
        false => MapSpec {
            name: name.into(),
            kind: MapKind::PercpuHash,
            key_size,
            value_size,
            max_entries: entries,
        },
    }
}

/// The one-entry array holding the all-zero value a new group (or latest
/// record) of `value_size` bytes is inserted as ([`Gen::emit_new_group`]).
pub(super) fn zero_value(value_size: u32) -> MapSpec {
    MapSpec {
        name: "ebql_zero".into(),
        kind: MapKind::Array,
        key_size: 4,
        value_size,
        max_entries: 1,
    }
}
