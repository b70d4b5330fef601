//! `DISTINCT ON`'s latest-record table ([`crate::latest`]): instead of
//! reserving a ring-buffer record, the probe finds its key's record in a
//! per-CPU hash (inserting it as all zeroes when new, as a group is) and
//! the stream code overwrites it with this event's columns. One map
//! operation per event, as for a group; a full table counts a drop.

use super::gen::{Gen, PTR};
use super::hashkey::{percpu_hash, zero_value, HashKey};
use super::options::CodegenOptions;
use crate::contract::{LatestTable, MapSpec, MAP_OUT};
use crate::prepass::WindowSpec;
use crate::split::GroupKey;
use crate::CompileError;
use ebql_bpf::{AluOp, Reg, Size, Src};

impl Gen {
    /// Adds the latest-record table (at [`MAP_OUT`]) and its all-zero
    /// value to `maps`, and emits the lookup of this event's key: on
    /// return `PTR` points at this CPU's `record_size`-byte record, whose
    /// count (after the record) was incremented. The key's attributes must
    /// be materialized.
    pub(super) fn emit_latest_slot(
        &mut self,
        keys: &[GroupKey],
        window: Option<WindowSpec>,
        record_size: u32,
        maps: &mut Vec<MapSpec>,
        opts: &CodegenOptions,
    ) -> Result<LatestTable, CompileError> {
        let hash_key = HashKey::of(keys, window)?;
        let value_size = record_size + 8;
        let windows = if window.is_some() { 2 } else { 1 };
        maps.push(percpu_hash(
            "ebql_latest",
            hash_key.key_size,
            value_size,
            opts.max_groups.saturating_mul(windows),
        ));
        let zero_map = maps.len() + self.maps.reserved;
        maps.push(zero_value(value_size));
        let key_off = self.emit_group_key(keys, &hash_key, window, false)?;
        let text: Vec<&str> = keys.iter().map(|k| k.text.as_str()).collect();
        self.asm.origin(format!(
            "Distinct on ({}): lookup the key's latest record",
            text.join(", ")
        ));
        let new_key = self.asm.new_label();
        let update = self.asm.new_label();
        let write = self.asm.new_label();
        self.lookup_value(MAP_OUT, key_off, new_key);
        self.asm.bind(update);
        self.asm.origin(format!(
            "Distinct on ({}): count the event, then overwrite the record",
            text.join(", ")
        ));
        let count = record_size as i16;
        self.asm.ldx(Size::DW, Reg::R1, PTR, count);
        self.asm.alu64(AluOp::Add, Reg::R1, Src::Imm(1));
        self.asm.stx(Size::DW, PTR, count, Reg::R1);
        self.asm.ja(write);
        self.emit_new_group(MAP_OUT, key_off, zero_map, update, new_key)?;
        self.asm.bind(write);
        Ok(LatestTable {
            key_size: hash_key.key_size,
            window_tag: hash_key.window_tag,
            value_size,
        })
    }
}
