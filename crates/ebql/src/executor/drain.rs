//! Draining the kernel's state: the ring buffers (query and tap), the group
//! table (hash, array, overflow hash, COUNT(DISTINCT) set) by window tag,
//! the drop counters per window, and what is left at detach.

use super::load::starts_live;
use super::worker::Worker;
use crate::decode::{self, Cell};
use crate::error::Result;
use crate::symbolize::{symbolize_rows, user_stack_fields, Stacks};
use crate::window::WindowDrops;
use datafusion::arrow::datatypes::SchemaRef;
use ebql_compiler::codegen::{ctl, OutputLayout};
use ebql_runtime::{wait_for_probes, MmapArray};
use std::collections::BTreeMap;
use std::sync::atomic::Ordering;

/// Notes the processes of the user stacks in drained records of `layout`
/// (a stream's), see [`Worker::note_group_stack_processes`].
fn note_stack_processes(
    stacks: &mut Stacks,
    layout: &OutputLayout,
    schema: &SchemaRef,
    data: &[u8],
) {
    if let OutputLayout::Stream { record_size, .. } = layout {
        let fields = user_stack_fields(layout, schema);
        stacks.note_records(&fields, *record_size as usize, data);
    }
}

/// The drops of the control slot pair `pair` of the windows still open
/// (both generations' counters, [`ctl`]).
fn open_drops(ctl: &MmapArray, pair: u32) -> u64 {
    ctl.u64_at(pair).load(Ordering::SeqCst) + ctl.u64_at(pair + 8).load(Ordering::SeqCst)
}

/// Drained group-table entries per window tag: (key, CPU, value) as
/// [`decode::group_values`] gives them.
type GroupValuesByTag = BTreeMap<Option<u64>, Vec<(Vec<u8>, usize, Vec<u8>)>>;

impl Worker {
    /// Detaches the probe and waits for runs in flight: nothing changes after this.
    pub(super) fn detach(&mut self) -> Result<()> {
        if !self.probe.links.is_empty() {
            self.probe.links.clear();
            wait_for_probes()?;
            self.control.local.pair_starts_left =
                match (&self.probe.k.pair_live, &self.probe.k.pair_map) {
                    // Task storage cannot be listed: the probes counted the valid slots.
                    (Some(live), _) => starts_live(live)?,
                    // Nothing writes the start map any more: what is left never met its end.
                    (None, Some(starts)) => {
                        let keys = starts.keys()?;
                        // A LEFT JOIN pairing: each is an unmatched start's row of the last window.
                        if let OutputLayout::Stream {
                            record_size,
                            gen_in_record,
                            outer: Some(outer),
                            ..
                        } = &self.main.layout
                        {
                            let mut value = vec![0u8; outer.value_size as usize];
                            for key in &keys {
                                if starts.lookup(key, &mut value)? {
                                    self.control.local.events_matched +=
                                        self.main.pending.push(&outer.unmatched_row(
                                            *record_size,
                                            gen_in_record.then_some(self.progress.gen),
                                            &value,
                                        )) as u64;
                                }
                            }
                        }
                        keys.len() as u64
                    }
                    (None, None) => 0,
                };
        }
        Ok(())
    }

    pub(super) fn drain_ringbuf(&mut self) -> Result<()> {
        if self.decodes_wire_in_place() {
            let (ctl, closed) = (&self.probe.k.ctl, self.drops.closed.ringbuf_full);
            let ring_drops = || closed + open_drops(ctl, ctl::DROP_RINGBUF_FULL);
            if let (Some(rb), Some(w)) = (self.probe.k.ringbuf.as_mut(), self.main.wire.as_mut()) {
                w.feed_from_ring(rb, ring_drops)?;
            }
        } else if let Some(rb) = self.probe.k.ringbuf.as_mut() {
            // Records stay bytes until their window's batch is built.
            let data = self.main.pending.drain(rb)?;
            note_stack_processes(
                &mut self.stacks,
                &self.main.layout,
                &self.main.kernel_schema,
                data,
            );
        }
        if let (Some(rb), Some(tap)) = (self.probe.k.tap.as_mut(), self.tap.as_mut()) {
            let data = tap.pending.drain(rb)?;
            note_stack_processes(&mut self.stacks, &tap.layout, &tap.kernel_schema, data);
        }
        Ok(())
    }

    /// Moves the records of `DISTINCT ON`'s latest-record table whose
    /// window tag is `gen`'s (every record when `gen` is `None`: no window,
    /// or the query stopped) into the pending records, one per CPU that
    /// saw the key, and deletes their entries. Call only when the probes
    /// no longer write those windows (after the grace period, or detached).
    pub(super) fn drain_latest(&mut self, gen: Option<u64>) -> Result<()> {
        let OutputLayout::Stream {
            record_size,
            latest: Some(table),
            ..
        } = &self.main.layout
        else {
            return Ok(());
        };
        let (record_size, value_size) = (*record_size as usize, table.value_size as usize);
        let ncpu = ebql_runtime::num_possible_cpus()?;
        let stride = value_size.div_ceil(8) * 8;
        let mut values = vec![0u8; stride * ncpu];
        let map = &self.probe.k.out;
        let mut records = Vec::new();
        for key in map.keys()? {
            let tag = table
                .window_tag
                .map(|(off, bytes)| decode::uint_at(&key, off as usize, bytes as usize));
            if gen.is_some_and(|g| tag != Some(g & 0xffff_ffff))
                || !map.lookup(&key, &mut values)?
            {
                continue;
            }
            map.delete(&key)?;
            for value in values.chunks_exact(stride) {
                // A CPU that never saw the key holds zeroes: no event, no record.
                if decode::uint_at(value, record_size, 8) != 0 {
                    records.extend_from_slice(&value[..record_size]);
                }
            }
        }
        self.main.pending.push(&records);
        note_stack_processes(
            &mut self.stacks,
            &self.main.layout,
            &self.main.kernel_schema,
            &records,
        );
        Ok(())
    }

    /// Keeps the mappings of processes whose user stacks are in the group
    /// table for the first time (a scan of its keys, at most every
    /// [`crate::symbolize::SCAN_INTERVAL`]), so that a process that exits
    /// before its window closes is symbolized all the same
    /// ([`crate::symbolize`]). Streams do this at every drain.
    pub(super) fn note_group_stack_processes(&mut self) -> Result<()> {
        let layout = &self.main.layout;
        let fields = user_stack_fields(layout, &self.main.kernel_schema);
        let OutputLayout::Groups {
            key_size,
            array,
            overflow,
            ..
        } = layout
        else {
            return Ok(());
        };
        if fields.is_empty() || self.probe.k.stack_map().is_none() {
            return Ok(());
        }
        // An array group table's keys are dense integers, never stack ids: only hashes hold them.
        let hash = match array {
            None => Some(&self.probe.k.out),
            Some(_) => overflow.map(|i| self.probe.k.plan_map(i)),
        };
        let Some(hash) = hash else {
            return Ok(());
        };
        if !self.stacks.scan_due() {
            return Ok(());
        }
        let began = std::time::Instant::now();
        let keys = hash.keys()?.concat();
        self.stacks.note_records(&fields, *key_size as usize, &keys);
        self.stacks.scanned(began.elapsed());
        Ok(())
    }

    /// Rows of the group table whose window tag satisfies `select`; deletes them.
    pub(super) fn drain_groups(
        &mut self,
        select: impl Fn(Option<u64>) -> bool,
    ) -> Result<BTreeMap<Option<u64>, Vec<Vec<Cell>>>> {
        let entries = self.drain_group_values(select)?;
        let spec = self
            .shape
            .group_spec
            .as_ref()
            .expect("group spec with group layout");
        let layout = &self.main.layout;
        let (stacks, map, schema) = (
            &mut self.stacks,
            self.probe.k.stack_map(),
            &self.main.kernel_schema,
        );
        Ok(entries
            .into_iter()
            .map(|(tag, groups)| {
                (
                    tag,
                    symbolize_rows(
                        stacks,
                        map,
                        schema,
                        groups
                            .into_iter()
                            .map(|(key, cpu, v)| decode::group_row(layout, spec, &key, cpu, &v))
                            .collect(),
                    ),
                )
            })
            .collect())
    }

    /// Entries of the group table whose window tag satisfies `select`,
    /// deleted from it: per tag, (key, CPU, value) as [`decode::group_values`]
    /// gives them (merged over CPUs unless `cpu` is a group key).
    pub(super) fn drain_group_values(
        &mut self,
        select: impl Fn(Option<u64>) -> bool,
    ) -> Result<GroupValuesByTag> {
        let OutputLayout::Groups {
            window_tag,
            value_size,
            distinct_set,
            key_size,
            ..
        } = self.main.layout
        else {
            return Ok(BTreeMap::new());
        };
        let spec = self
            .shape
            .group_spec
            .as_ref()
            .expect("group spec with group layout");
        let ncpu = ebql_runtime::num_possible_cpus()?;
        let stride = (value_size as usize).div_ceil(8) * 8;
        let per_group = stride * ncpu;
        let mut out: GroupValuesByTag = BTreeMap::new();
        let plan_map = |i: usize| self.probe.k.plan_map(i);
        // The window tag a group key (or a COUNT(DISTINCT) set key, which starts with one) carries.
        let window_of = |key: &[u8]| {
            window_tag.map(|(off, bytes)| decode::uint_at(key, off as usize, bytes as usize))
        };
        // An array's slots, a window's at a time in one batch read; each
        // slot's group key is rebuilt in the hash layout (ebql_compiler::groupmap).
        if let OutputLayout::Groups {
            array: Some(ix),
            keys,
            ..
        } = &self.main.layout
        {
            // Slots of parity gen & 1 hold generation `gen`, the others gen − 1 (tags are its low 32 bits).
            let gen = self.progress.gen;
            let tag_of = |parity: u32| if u64::from(parity) == gen & 1 { gen } else { gen.wrapping_sub(1) } & 0xffff_ffff;
            let array = &self.probe.k.out;
            for parity in 0..ix.windows {
                let first = parity * ix.slots;
                let tag = window_of(&ix.slot_key(first, key_size, keys, window_tag, tag_of));
                if !select(tag) {
                    continue;
                }
                let mut all = vec![0u8; per_group * ix.slots as usize];
                array.lookup_array_range(first, per_group, &mut all)?;
                let zeroes = vec![0u8; per_group];
                for (slot, values) in (first..).zip(all.chunks_exact(per_group)) {
                    // An untouched slot is no group; a touched one is zeroed for the generation that reuses it.
                    if values.chunks_exact(stride).all(|v| v[0..8] == [0; 8]) {
                        continue;
                    }
                    array.update_percpu(&slot.to_ne_bytes(), &zeroes)?;
                    let key = ix.slot_key(slot, key_size, keys, window_tag, tag_of);
                    let groups = decode::group_values(&self.main.layout, spec, values, stride);
                    out.entry(tag)
                        .or_default()
                        .extend(groups.into_iter().map(|(cpu, v)| (key.clone(), cpu, v)));
                }
            }
        }
        // A hash group table, or the overflow hash of an array with a dense-range key: keys are group keys.
        let hash = match &self.main.layout {
            OutputLayout::Groups { array: None, .. } => Some(&self.probe.k.out),
            OutputLayout::Groups { overflow, .. } => overflow.map(plan_map),
            OutputLayout::Stream { .. } => None,
        };
        if let Some(map) = hash {
            let mut values = vec![0u8; per_group];
            for key in map.keys()? {
                let tag = window_of(&key);
                if !select(tag) || !map.lookup(&key, &mut values)? {
                    continue;
                }
                map.delete(&key)?;
                let groups = decode::group_values(&self.main.layout, spec, &values, stride);
                out.entry(tag)
                    .or_default()
                    .extend(groups.into_iter().map(|(cpu, v)| (key.clone(), cpu, v)));
            }
        }
        // The COUNT(DISTINCT) set entries of the drained windows go with their groups.
        if let Some(set) = distinct_set.map(plan_map) {
            for key in set.keys()? {
                if select(window_of(&key)) {
                    set.delete(&key)?;
                }
            }
        }
        Ok(out)
    }

    /// Takes and zeroes the drop counters of time-window generation `gen`
    /// (call after the grace period that closed it).
    pub(super) fn take_window_drops(&mut self, gen: u64) -> WindowDrops {
        let ctl = &self.probe.k.ctl;
        let take = |pair: u32| {
            ctl.u64_at(ctl::drop_slot(pair, gen))
                .swap(0, Ordering::SeqCst)
        };
        let d = WindowDrops {
            groups_full: take(ctl::DROP_GROUPS_FULL),
            ringbuf_full: take(ctl::DROP_RINGBUF_FULL),
            tap_full: take(ctl::DROP_TAP_FULL),
            distinct_full: take(ctl::DROP_DISTINCT_FULL),
            str_read_failed: take(ctl::STR_READ_FAILED),
            // Counted by the decoder when the window's rows are decoded (`Worker::main_batch`).
            wire_not_decoded: 0,
        };
        self.drops.closed.add(&d);
        self.drops.emitted = self.drops.closed;
        d
    }

    /// Drops counted since the last emission (count windows and unwindowed queries).
    pub(super) fn drops_since_last_emit(&mut self) -> WindowDrops {
        let now = self.drop_totals();
        let d = WindowDrops {
            groups_full: now.groups_full - self.drops.emitted.groups_full,
            ringbuf_full: now.ringbuf_full - self.drops.emitted.ringbuf_full,
            tap_full: now.tap_full - self.drops.emitted.tap_full,
            distinct_full: now.distinct_full - self.drops.emitted.distinct_full,
            str_read_failed: now.str_read_failed - self.drops.emitted.str_read_failed,
            wire_not_decoded: self.wire_not_decoded_since(),
        };
        self.drops.emitted = now;
        d
    }

    /// All drops so far: closed windows plus what the open counters hold.
    pub(super) fn drop_totals(&self) -> WindowDrops {
        let ctl = &self.probe.k.ctl;
        let open = |pair: u32| open_drops(ctl, pair);
        WindowDrops {
            groups_full: self.drops.closed.groups_full + open(ctl::DROP_GROUPS_FULL),
            ringbuf_full: self.drops.closed.ringbuf_full + open(ctl::DROP_RINGBUF_FULL),
            tap_full: self.drops.closed.tap_full + open(ctl::DROP_TAP_FULL),
            distinct_full: self.drops.closed.distinct_full + open(ctl::DROP_DISTINCT_FULL),
            str_read_failed: self.drops.closed.str_read_failed + open(ctl::STR_READ_FAILED),
            wire_not_decoded: 0,
        }
    }

    /// A wire relation's calls not decoded since this was last asked (0
    /// for other queries): the rows decoded since are the window's.
    pub(super) fn wire_not_decoded_since(&mut self) -> u64 {
        self.main.wire.as_mut().map_or(0, |w| w.take_not_decoded())
    }
}
