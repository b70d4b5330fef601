//! Cutting windows: closing a time pane and emitting the window of the last
//! panes, count windows (by the kernel's event ordinal for groups, by the
//! cutter for streams), and unwindowed queries (raw streams in batches, an
//! aggregate once at stop), each with its reference rows under `ebql check`.

use super::cutter::CountCutter;
use super::side::{records_batch, Rows, TapRows};
use super::worker::Worker;
use crate::decode;
use crate::error::{Error, Result};
use crate::panes::{Pane, PaneRows, WindowRows};
use crate::symbolize::symbolize_rows;
use crate::window::WindowBounds;
use datafusion::arrow::record_batch::{RecordBatch, RecordBatchOptions};
use ebql_compiler::codegen::{ctl, OutputLayout};
use ebql_runtime::wait_for_probes;
use std::sync::atomic::Ordering;
use std::time::Duration;

/// A count window over event ordinals `start..end`.
fn count_window(start: u64, end: u64) -> WindowBounds {
    WindowBounds {
        start,
        end,
        panes: None,
    }
}

/// An unwindowed raw stream is emitted at least this often…
const STREAM_BATCH_INTERVAL: Duration = Duration::from_millis(200);
/// …or as soon as this many rows are waiting.
const STREAM_BATCH_ROWS: usize = 65536;

impl Worker {
    /// Closes pane `gen` (its generation was flipped and the grace period
    /// passed, or the probe is detached), adds it to the open panes and
    /// emits the window of the last `size / step` panes.
    pub(super) fn close_time_window(
        &mut self,
        rt: &tokio::runtime::Runtime,
        start: u64,
        end: u64,
    ) -> Result<()> {
        let gen = self.progress.gen;
        // Every probe run that read `gen` has finished: its drop counters are final.
        let mut drops = self.take_window_drops(gen);
        self.drain_ringbuf()?;
        let rows = match &self.main.layout {
            OutputLayout::Groups {
                window_tag, keys, ..
            } => {
                // The key holds the generation's low 32 bits; zeroed in the pane so a group has one id in every pane.
                let tag = gen & 0xffff_ffff;
                let (tag_off, tag_len) =
                    window_tag.map_or((0, 0), |(o, l)| (o as usize, l as usize));
                let per_cpu_key = keys.iter().any(Option::is_none);
                let entries = self
                    .drain_group_values(|t| t == Some(tag))?
                    .remove(&Some(tag))
                    .unwrap_or_default();
                PaneRows::Groups(
                    entries
                        .into_iter()
                        .map(|(mut key, cpu, v)| {
                            key[tag_off..tag_off + tag_len].fill(0);
                            ((key, if per_cpu_key { cpu } else { 0 }), v)
                        })
                        .collect(),
                )
            }
            OutputLayout::Stream { .. } => {
                self.drain_latest(Some(gen))?;
                let records = self.main.pending.take_generation(gen);
                let batch = self.main_batch(&records)?;
                self.main.pending.recycle(records);
                PaneRows::Rows(batch)
            }
        };
        let (reference, reference_unordered) = match self.tap.as_mut() {
            Some(tap) => {
                let records = tap.pending.take_generation(gen);
                // Detached: this is the last window.
                let last = self.probe.links.is_empty();
                let (batch, unordered) = self.tap_rows(rt, &records, last)?;
                (Some(batch), unordered)
            }
            None => (None, 0),
        };
        // The pane's rows were decoded above: what the decoder skipped meanwhile is the pane's.
        drops.wire_not_decoded = self.wire_not_decoded_since();
        let panes = self
            .progress
            .panes
            .as_mut()
            .ok_or_else(|| Error::Internal("a time window without its panes".into()))?;
        panes.push(Pane {
            start,
            end,
            rows,
            reference,
            reference_unordered,
            drops,
        });
        let spec = self.shape.group_spec.as_ref();
        let window = panes
            .window(|into, from| {
                decode::merge_value(spec.expect("groups only with a group spec"), into, from)
            })
            .expect("a pane was just added");
        let rows = match window.rows {
            WindowRows::Groups(groups) => {
                let spec = spec.expect("groups only with a group spec");
                let rows = groups
                    .iter()
                    .map(|((key, cpu), v)| decode::group_row(&self.main.layout, spec, key, *cpu, v))
                    .collect();
                Rows::Cells(symbolize_rows(
                    &mut self.stacks,
                    self.probe.k.stack_map(),
                    &self.main.kernel_schema,
                    rows,
                ))
            }
            WindowRows::Rows(batches) => Rows::Batches(batches),
        };
        let bounds = WindowBounds {
            start: window.start,
            end: window.end,
            panes: Some((window.panes as u32, window.panes_full as u32)),
        };
        self.emit(
            rt,
            rows,
            Some(bounds),
            window.drops,
            window.reference.map(|b| TapRows {
                rows: Rows::Batches(b),
                unordered: window.reference_unordered,
            }),
        )
    }

    pub(super) fn poll_count_windows(
        &mut self,
        rt: &tokio::runtime::Runtime,
        size: u64,
        stopping: bool,
    ) -> Result<()> {
        if self.shape.group_spec.is_some() {
            let seq = self.probe.k.ctl.u64_at(ctl::SEQ).load(Ordering::SeqCst);
            let full = seq / size;
            if full <= self.progress.next_count_window && !stopping {
                if self.tap.is_some() {
                    self.drain_ringbuf()?;
                    self.filter_tap_rows(rt)?;
                }
                return Ok(());
            }
            wait_for_probes()?;
            self.drain_ringbuf()?;
            self.filter_tap_rows(rt)?;
            let from = self.progress.next_count_window;
            let mut by_window =
                self.drain_groups(|tag| tag.is_some_and(|w| w >= from && (stopping || w < full)))?;
            let last = if stopping { seq.div_ceil(size) } else { full };
            for w in from..last {
                let rows = by_window.remove(&Some(w)).unwrap_or_default();
                let drops = self.drops_since_last_emit();
                let reference = self.take_filtered(size as usize, stopping && w + 1 == last);
                self.emit(
                    rt,
                    Rows::Cells(rows),
                    Some(count_window(w * size, (w + 1) * size)),
                    drops,
                    reference,
                )?;
            }
            self.progress.next_count_window = last;
        } else {
            self.drain_ringbuf()?;
            self.filter_tap_rows(rt)?;
            if !self.main.pending.is_empty() {
                let records = self.main.pending.take_all();
                let batch = self.main_batch(&records)?;
                self.main.pending.recycle(records);
                let cutter = self.main.cutter.as_mut().ok_or_else(|| {
                    Error::Internal("count window over a stream without its cutter".into())
                })?;
                cutter.push(rt, &self.main.plan.ctx, &self.main.plan.input, batch)?;
            }
            let size_rows = size as usize;
            while let Some(waiting) = self
                .main
                .cutter
                .as_ref()
                .map(CountCutter::len)
                .filter(|&n| n >= size_rows || (stopping && n > 0))
            {
                let last = stopping && waiting <= size_rows;
                let rows = self
                    .main
                    .cutter
                    .as_mut()
                    .expect("checked above")
                    .take(size_rows);
                let w = self.progress.next_count_window;
                let drops = self.drops_since_last_emit();
                let reference = self.take_filtered(size_rows, last);
                self.emit(
                    rt,
                    Rows::Batches(rows),
                    Some(count_window(w * size, (w + 1) * size)),
                    drops,
                    reference,
                )?;
                self.progress.next_count_window += 1;
            }
        }
        Ok(())
    }

    /// Count windows under `ebql check`: runs the reference's WHERE over the
    /// tap rows drained so far and keeps the rows that pass, in order.
    fn filter_tap_rows(&mut self, rt: &tokio::runtime::Runtime) -> Result<()> {
        let Some(tap) = self.tap.as_mut() else {
            return Ok(());
        };
        if tap.pending.is_empty() {
            return Ok(());
        }
        let batch = records_batch(
            &mut self.stacks,
            self.probe.k.stack_map(),
            &tap.layout,
            &tap.kernel_schema,
            &tap.pending.take_all(),
        )?;
        let cutter = tap
            .cutter
            .as_mut()
            .ok_or_else(|| Error::Internal("a checked count window without its cutter".into()))?;
        cutter.push(rt, &tap.plan.ctx, &tap.plan.input, batch)
    }

    /// Count windows under `ebql check`: the next `n` filtered reference rows (all of them if `all`).
    fn take_filtered(&mut self, n: usize, all: bool) -> Option<TapRows> {
        let cutter = self.tap.as_mut()?.cutter.as_mut()?;
        let n = if all { cutter.len() } else { n };
        Some(TapRows {
            rows: Rows::Batches(cutter.take(n)),
            unordered: 0,
        })
    }

    pub(super) fn poll_unwindowed(
        &mut self,
        rt: &tokio::runtime::Runtime,
        stopping: bool,
    ) -> Result<()> {
        if self.shape.group_spec.is_some() {
            if stopping {
                self.drain_ringbuf()?;
                let rows = self
                    .drain_groups(|_| true)?
                    .into_values()
                    .flatten()
                    .collect();
                let drops = self.drops_since_last_emit();
                let reference = self.take_all_tap_rows(rt)?;
                self.emit(rt, Rows::Cells(rows), None, drops, reference)?;
            } else if self.tap.is_some() {
                self.drain_ringbuf()?;
            }
            return Ok(());
        }
        self.drain_ringbuf()?;
        if stopping {
            self.drain_latest(None)?;
        }
        let waiting = self.main.pending.len() + self.main.wire.as_ref().map_or(0, |w| w.waiting());
        // Raw streams are emitted in batches of up to STREAM_BATCH_INTERVAL, not per drain.
        let due = self.progress.last_stream_emit.elapsed() >= STREAM_BATCH_INTERVAL
            || waiting >= STREAM_BATCH_ROWS;
        if (self.shape.streamable && waiting > 0 && due) || stopping {
            self.progress.last_stream_emit = std::time::Instant::now();
            let room = self.shape.stream_limit.map_or(usize::MAX, |limit| {
                limit.saturating_sub(self.control.local.rows_emitted as usize)
            });
            let records = self.main.pending.take_first(room);
            let decoded = self.main.wire.as_ref().is_some_and(|w| w.waiting() > 0);
            if !records.is_empty() || decoded || !self.shape.streamable {
                let batch = self.main_batch(&records)?;
                self.main.pending.recycle(records);
                let drops = self.drops_since_last_emit();
                let reference = self.take_all_tap_rows(rt)?;
                self.emit(rt, Rows::Batches(vec![batch]), None, drops, reference)?;
            }
        }
        Ok(())
    }

    /// The main side's rows of `records`: decoded, and for a wire
    /// relation ([`super::wire`]) decoded again from the captured calls
    /// into the relation's rows (with the statements decoded from calls
    /// fed earlier, [`Worker::feed_wire`]).
    fn main_batch(&mut self, records: &[u8]) -> Result<RecordBatch> {
        if self.main.wire.is_none() {
            return records_batch(
                &mut self.stacks,
                self.probe.k.stack_map(),
                &self.main.layout,
                &self.main.kernel_schema,
                records,
            );
        }
        self.feed_wire(records);
        let w = self.main.wire.as_mut().expect("checked above");
        // The relation's columns under the placeholder's names (`c0`, …);
        // the row count too, for a query that reads no column (`COUNT(*)`).
        let rows = w.take_rows()?;
        let count = RecordBatchOptions::new().with_row_count(Some(rows.num_rows()));
        Ok(RecordBatch::try_new_with_options(
            self.main.kernel_schema.clone(),
            rows.columns().to_vec(),
            &count,
        )?)
    }

    /// Feeds a wire relation's captured calls `records` to its decoder
    /// (nothing without one).
    fn feed_wire(&mut self, records: &[u8]) {
        if self.main.wire.is_none() {
            return;
        }
        // Only a wire relation's decoding needs the drop count (read once per feed).
        let ring_drops = self.drop_totals().ringbuf_full;
        let w = self.main.wire.as_mut().expect("checked above");
        w.feed(records, ring_drops);
    }

    /// Whether the main ring buffer's records are a wire relation's calls
    /// decoded where they lie as they are drained ([`super::wire::WireStage::feed_from_ring`]):
    /// an unwindowed relation without a LIMIT, whose statements are
    /// emitted as they complete. 10 ms of a busy server's calls are a few
    /// MB of records; copied out and decoded later, they were read back
    /// from memory (BENCHMARKS.md, "Issue 21, twelfth session" and
    /// "twentieth session"). A windowed relation keeps its records until
    /// its window closes.
    pub(super) fn decodes_wire_in_place(&self) -> bool {
        self.main.wire.is_some() && self.shape.window.is_none() && self.shape.stream_limit.is_none()
    }

    /// All tap rows left, at stop (the reference's input, paired if the query pairs).
    fn take_all_tap_rows(&mut self, rt: &tokio::runtime::Runtime) -> Result<Option<TapRows>> {
        let Some(tap) = self.tap.as_mut() else {
            return Ok(None);
        };
        let records = tap.pending.take_all();
        let (batch, unordered) = self.tap_rows(rt, &records, true)?;
        Ok(Some(TapRows {
            rows: Rows::Batches(vec![batch]),
            unordered,
        }))
    }

    /// Tap records decoded, then paired when the query pairs (`last`: the
    /// query's last window, where a LEFT JOIN's stored starts are rows),
    /// with the count of events the pairing could not order.
    fn tap_rows(
        &mut self,
        rt: &tokio::runtime::Runtime,
        records: &[u8],
        last: bool,
    ) -> Result<(RecordBatch, u64)> {
        let tap = self
            .tap
            .as_mut()
            .ok_or_else(|| Error::Internal("tap rows without a tap".into()))?;
        let batch = records_batch(
            &mut self.stacks,
            self.probe.k.stack_map(),
            &tap.layout,
            &tap.kernel_schema,
            records,
        )?;
        match tap.pairing.as_mut() {
            Some(p) => p.pair(rt, &tap.plan.ctx, &tap.plan.input, &batch, last),
            None => Ok((batch, 0)),
        }
    }
}
