//! `--format table`: aligned columns, one table per window headed by its
//! start (wall-clock time for time windows, event ordinals for count
//! windows), its row count, its losses and, for the first windows of a
//! hopping query, how many of its panes it holds. Histograms are drawn.

use arrow::record_batch::RecordBatch;

use super::contract::{QueryInfo, Sink, SinkError, TextOutput, WindowKind};
use crate::window::{QueryStats, WindowBatch, WindowDrops};

pub use super::wall_clock::WallClock;

/// Writes each window as an aligned table.
pub struct TableSink {
    out: TextOutput,
    window: WindowKind,
    clock: WallClock,
}

impl TableSink {
    /// A table sink writing to `out`.
    pub fn new(out: TextOutput) -> TableSink {
        TableSink {
            out,
            window: WindowKind::None,
            clock: WallClock::now(),
        }
    }
}

impl Sink for TableSink {
    fn open(&mut self, info: &QueryInfo) -> Result<(), SinkError> {
        self.window = info.window;
        self.out.open()
    }

    fn write(&mut self, w: &WindowBatch) -> Result<(), SinkError> {
        let mut text = String::new();
        if w.bounds.is_some() {
            text += &window_heading(self.window, &self.clock, w);
            text.push('\n');
        }
        let body = w.rows_without_bounds();
        if body.num_rows() > 0 || w.bounds.is_none() {
            text += &render(&body)?;
            text.push('\n');
        }
        self.out.write_all(text.as_bytes())
    }

    fn finish(&mut self, _: &QueryStats) -> Result<(), SinkError> {
        self.out.close()
    }
}

/// `window 2025-01-02 10:11:12.345 +1.000s (3 rows, 7 events dropped: …, partial: 1 of 4 panes)`.
pub fn window_heading(kind: WindowKind, clock: &WallClock, w: &WindowBatch) -> String {
    let Some(b) = w.bounds else {
        return String::new();
    };
    let head = match kind {
        WindowKind::Time => format!(
            "window {} +{:.3}s",
            clock.show(b.start),
            b.end.saturating_sub(b.start) as f64 / 1e9
        ),
        _ => format!("window events {}..{}", b.start, b.end),
    };
    // A hopping window emitted before the query ran for its size holds fewer panes.
    let partial = match b.panes {
        Some((have, full)) if have != full => format!(", partial: {have} of {full} panes"),
        _ => String::new(),
    };
    format!(
        "{head} ({} rows{}{partial})",
        w.batch.num_rows(),
        drops_note(&w.drops)
    )
}

/// `, N events dropped: …` for a window that lost events, else empty.
pub fn drops_note(d: &WindowDrops) -> String {
    match (d.groups_full, d.ringbuf_full) {
        _ if d.distinct_full > 0 => format!(
            ", {} events dropped: {} group table full, {} ring buffer full, {} COUNT(DISTINCT) set full",
            d.query_total(),
            d.groups_full,
            d.ringbuf_full,
            d.distinct_full
        ),
        (0, 0) => String::new(),
        (g, 0) => format!(", {g} events dropped: group table full"),
        (0, r) => format!(", {r} events dropped: ring buffer full"),
        (g, r) => format!(", {} events dropped: {g} group table full, {r} ring buffer full", g + r),
    }
}

/// `batch` as an aligned table, histograms drawn.
pub fn render(batch: &RecordBatch) -> Result<String, SinkError> {
    let drawn = draw_histograms(batch).map_err(|e| SinkError::new("drawing histograms", e))?;
    arrow::util::pretty::pretty_format_batches(&[drawn])
        .map(|t| t.to_string())
        .map_err(|e| SinkError::new("formatting a table", e))
}

/// Width of a full histogram bar, in `@`s.
const BAR_WIDTH: usize = 40;

/// Replaces each histogram column (a list of `{lo, hi, count}` structs, see
/// `ebql_compiler::agg::hist`) by its bpftrace-style drawing: one line per
/// non-empty bucket, `[lo, hi]` (inclusive; `[v]` for one value), the count
/// and a bar scaled to the row's largest bucket. Other columns are unchanged.
pub fn draw_histograms(batch: &RecordBatch) -> Result<RecordBatch, arrow::error::ArrowError> {
    use arrow::array::{Array, ArrayRef, AsArray, StringArray};
    use arrow::datatypes::{DataType, Field, Schema};
    use std::sync::Arc;
    let is_hist = |dt: &DataType| match dt {
        DataType::List(item) => {
            matches!(item.data_type(), DataType::Struct(f) if f.len() == 3 && f[0].name() == "lo" && f[1].name() == "hi" && f[2].name() == "count")
        }
        _ => false,
    };
    if !batch
        .schema()
        .fields()
        .iter()
        .any(|f| is_hist(f.data_type()))
    {
        return Ok(batch.clone());
    }
    let mut fields = Vec::new();
    let mut cols: Vec<ArrayRef> = Vec::new();
    for (f, c) in batch.schema().fields().iter().zip(batch.columns()) {
        if !is_hist(f.data_type()) {
            fields.push(f.as_ref().clone());
            cols.push(c.clone());
            continue;
        }
        let list = c.as_list::<i32>();
        let text = (0..list.len()).map(|row| {
            if list.is_null(row) {
                return None;
            }
            let buckets = list.value(row);
            let s = buckets.as_struct();
            let show = |col: usize| {
                arrow::util::display::ArrayFormatter::try_new(
                    s.column(col).as_ref(),
                    &Default::default(),
                )
                .map(|f| {
                    (0..s.len())
                        .map(|i| f.value(i).to_string())
                        .collect::<Vec<_>>()
                })
            };
            let (lo, hi) = (show(0).unwrap_or_default(), show(1).unwrap_or_default());
            let counts = arrow::compute::cast(s.column(2), &DataType::UInt64).ok()?;
            let counts = counts.as_primitive::<arrow::datatypes::UInt64Type>();
            let max = counts.values().iter().copied().max().unwrap_or(0).max(1);
            let labels: Vec<String> = lo
                .iter()
                .zip(&hi)
                .map(|(l, h)| {
                    if l == h {
                        format!("[{l}]")
                    } else {
                        format!("[{l}, {h}]")
                    }
                })
                .collect();
            let lw = labels.iter().map(String::len).max().unwrap_or(0);
            let cw = counts
                .values()
                .iter()
                .map(|c| c.to_string().len())
                .max()
                .unwrap_or(1);
            let lines: Vec<String> = labels
                .iter()
                .zip(counts.values())
                .map(|(l, &n)| {
                    let bar = (n as u128 * BAR_WIDTH as u128).div_ceil(max as u128) as usize;
                    format!(
                        "{l:<lw$} {n:>cw$} |{}{}|",
                        "@".repeat(bar),
                        " ".repeat(BAR_WIDTH - bar)
                    )
                })
                .collect();
            Some(lines.join("\n"))
        });
        cols.push(Arc::new(StringArray::from_iter(text)));
        fields.push(Field::new(f.name(), DataType::Utf8, true));
    }
    RecordBatch::try_new(
        Arc::new(Schema::new(fields).with_metadata(batch.schema().metadata().clone())),
        cols,
    )
}
