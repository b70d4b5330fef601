//! Sinks for record batches: aligned tables per window, NDJSON, CSV.

use arrow::record_batch::RecordBatch;
use std::io::{self, Write};

/// Output format of `ebql query`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// Aligned columns, one table per window headed by its start time.
    Table,
    /// One JSON object per row (NDJSON), with window_start/window_end.
    Json,
    /// CSV with one header line.
    Csv,
    /// Flame-graph "folded" lines (`frame;frame;frame count`, root first),
    /// the input of flamegraph.pl and inferno: per row, the string columns
    /// joined by `;` in column order (e.g. `comm, ustack`), offsets
    /// (`+0x…`) dropped, then the row's integer column as the count; equal
    /// stacks of a window are summed. Needs exactly one integer column.
    Folded,
    /// Parquet files in `--output` (a directory of rolled files, or one
    /// `.parquet` file): `sink::parquet`.
    Parquet,
    /// An Arrow IPC stream to stdout or `--output`: `sink::arrow_ipc`.
    Arrow,
}

/// How window bounds are shown in tables.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WindowKind {
    /// No WINDOW clause: no bounds shown.
    None,
    /// Bounds are CLOCK_MONOTONIC ns.
    Time,
    /// Bounds are event ordinals.
    Count,
}

/// Writes batches in one format to one destination.
pub struct Printer {
    format: Format,
    out: Box<dyn Write + Send>,
    window: WindowKind,
    header_done: bool,
    /// CLOCK_REALTIME − CLOCK_MONOTONIC, ns, to show window starts as wall-clock time.
    wall_offset_ns: i128,
}

fn clock_ns(clock: libc::clockid_t) -> i128 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: valid out-pointer.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    ts.tv_sec as i128 * 1_000_000_000 + ts.tv_nsec as i128
}

/// Local wall-clock time of a CLOCK_REALTIME instant, as YYYY-MM-DD HH:MM:SS.mmm.
fn wall_time(realtime_ns: i128) -> String {
    let secs = (realtime_ns / 1_000_000_000) as libc::time_t;
    let ms = (realtime_ns % 1_000_000_000) / 1_000_000;
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    // SAFETY: valid pointers; localtime_r is thread-safe.
    unsafe { libc::localtime_r(&secs, &mut tm) };
    format!("{:04}-{:02}-{:02} {:02}:{:02}:{:02}.{:03}", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, ms)
}

impl Printer {
    /// A printer writing `format` to `out`, showing window bounds as `window` says.
    pub fn new(format: Format, out: Box<dyn Write + Send>, window: WindowKind) -> Printer {
        let wall_offset_ns = clock_ns(libc::CLOCK_REALTIME) - clock_ns(libc::CLOCK_MONOTONIC);
        Printer { format, out, window, header_done: false, wall_offset_ns }
    }

    /// Writes one batch (one window, or one drain of a raw stream).
    pub fn write(&mut self, batch: &RecordBatch) -> io::Result<()> {
        let to_io = |e: arrow::error::ArrowError| io::Error::other(e.to_string());
        match self.format {
            Format::Table => {
                let body = if self.window != WindowKind::None && batch.num_columns() >= 2 {
                    let (start, end) = window_bounds(batch);
                    let header = match self.window {
                        WindowKind::Time => format!(
                            "window {} +{:.3}s",
                            wall_time(start as i128 + self.wall_offset_ns),
                            (end.saturating_sub(start)) as f64 / 1e9
                        ),
                        _ => format!("window events {start}..{end}"),
                    };
                    let drops = crate::executor::WindowDrops::of_batch(batch);
                    let lost = match (drops.groups_full, drops.ringbuf_full) {
                        _ if drops.distinct_full > 0 => format!(
                            ", {} events dropped: {} group table full, {} ring buffer full, {} COUNT(DISTINCT) set full",
                            drops.query_total(),
                            drops.groups_full,
                            drops.ringbuf_full,
                            drops.distinct_full
                        ),
                        (0, 0) => String::new(),
                        (g, 0) => format!(", {g} events dropped: group table full"),
                        (0, r) => format!(", {r} events dropped: ring buffer full"),
                        (g, r) => format!(", {} events dropped: {g} group table full, {r} ring buffer full", g + r),
                    };
                    // A hopping window emitted before the query ran for its size holds fewer panes.
                    let partial = match batch.schema_ref().metadata().get(crate::executor::META_WINDOW_PANES).and_then(|p| p.split_once('/')) {
                        Some((have, full)) if have != full => format!(", partial: {have} of {full} panes"),
                        _ => String::new(),
                    };
                    writeln!(self.out, "{header} ({} rows{lost}{partial})", batch.num_rows())?;
                    batch.project(&(2..batch.num_columns()).collect::<Vec<_>>()).map_err(to_io)?
                } else {
                    batch.clone()
                };
                if body.num_rows() > 0 || self.window == WindowKind::None {
                    let body = draw_histograms(&body).map_err(to_io)?;
                    writeln!(self.out, "{}", arrow::util::pretty::pretty_format_batches(&[body]).map_err(to_io)?)?;
                }
            }
            Format::Json => {
                let mut w = arrow::json::LineDelimitedWriter::new(&mut self.out);
                w.write(batch).map_err(to_io)?;
                w.finish().map_err(to_io)?;
            }
            Format::Csv => {
                let mut w = arrow::csv::WriterBuilder::new().with_header(!self.header_done).build(&mut self.out);
                w.write(batch).map_err(to_io)?;
                self.header_done = true;
            }
            Format::Folded => {
                for (stack, count) in folded(batch).map_err(io::Error::other)? {
                    writeln!(self.out, "{stack} {count}")?;
                }
            }
            Format::Parquet | Format::Arrow => return Err(io::Error::other("binary formats are written by their sinks (crate::sink)")),
        }
        self.out.flush()
    }
}

/// A frame without its `+0x…` offset (`main+0x1f` → `main`).
fn frame_name(frame: &str) -> &str {
    match frame.rsplit_once("+0x") {
        Some((name, off)) if !name.is_empty() && !off.is_empty() && off.bytes().all(|b| b.is_ascii_hexdigit()) => name,
        _ => frame,
    }
}

/// The folded lines of a batch ([`Format::Folded`]): (stack, count), equal
/// stacks summed, in first-seen order.
pub fn folded(batch: &RecordBatch) -> Result<Vec<(String, u64)>, String> {
    use arrow::array::{Array, AsArray};
    use arrow::datatypes::{DataType, UInt64Type};
    let schema = batch.schema();
    let data: Vec<usize> = (0..batch.num_columns()).filter(|&i| !matches!(schema.field(i).name().as_str(), "window_start" | "window_end")).collect();
    let strings: Vec<usize> = data.iter().copied().filter(|&i| matches!(schema.field(i).data_type(), DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View)).collect();
    let ints: Vec<usize> = data.iter().copied().filter(|&i| schema.field(i).data_type().is_integer()).collect();
    let [count_col] = ints[..] else {
        return Err(format!("--format folded needs exactly one integer column (the count, e.g. COUNT(*)), the result has {}", ints.len()));
    };
    if strings.is_empty() {
        return Err("--format folded needs a string column (a stack such as ustack, or comm)".into());
    }
    let counts = arrow::compute::cast(batch.column(count_col), &DataType::UInt64).map_err(|e| e.to_string())?;
    let counts = counts.as_primitive::<UInt64Type>();
    let texts: Vec<_> = strings.iter().map(|&i| arrow::compute::cast(batch.column(i), &DataType::Utf8).map_err(|e| e.to_string())).collect::<Result<_, _>>()?;
    let mut out: Vec<(String, u64)> = Vec::new();
    let mut at: std::collections::HashMap<String, usize> = std::collections::HashMap::new();
    for row in 0..batch.num_rows() {
        let frames: Vec<&str> = texts
            .iter()
            .map(|c| c.as_string::<i32>())
            .filter(|c| !c.is_null(row) && !c.value(row).is_empty())
            .flat_map(|c| c.value(row).split(';'))
            .map(frame_name)
            .collect();
        let stack = frames.join(";");
        let n = if counts.is_null(row) { 0 } else { counts.value(row) };
        match at.get(&stack) {
            Some(&i) => out[i].1 += n,
            None => {
                at.insert(stack.clone(), out.len());
                out.push((stack, n));
            }
        }
    }
    Ok(out)
}

/// (window_start, window_end) of a windowed batch, from the schema metadata
/// the executor sets (present even when the window has no rows).
fn window_bounds(batch: &RecordBatch) -> (u64, u64) {
    let md = batch.schema_ref().metadata();
    let get = |k: &str| md.get(k).and_then(|v| v.parse().ok()).unwrap_or(0);
    (get(crate::executor::META_WINDOW_START), get(crate::executor::META_WINDOW_END))
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
        DataType::List(item) => matches!(item.data_type(), DataType::Struct(f) if f.len() == 3 && f[0].name() == "lo" && f[1].name() == "hi" && f[2].name() == "count"),
        _ => false,
    };
    if !batch.schema().fields().iter().any(|f| is_hist(f.data_type())) {
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
            let show = |col: usize| arrow::util::display::ArrayFormatter::try_new(s.column(col).as_ref(), &Default::default()).map(|f| (0..s.len()).map(|i| f.value(i).to_string()).collect::<Vec<_>>());
            let (lo, hi) = (show(0).unwrap_or_default(), show(1).unwrap_or_default());
            let counts = arrow::compute::cast(s.column(2), &DataType::UInt64).ok()?;
            let counts = counts.as_primitive::<arrow::datatypes::UInt64Type>();
            let max = counts.values().iter().copied().max().unwrap_or(0).max(1);
            let labels: Vec<String> = lo.iter().zip(&hi).map(|(l, h)| if l == h { format!("[{l}]") } else { format!("[{l}, {h}]") }).collect();
            let lw = labels.iter().map(String::len).max().unwrap_or(0);
            let cw = counts.values().iter().map(|c| c.to_string().len()).max().unwrap_or(1);
            let lines: Vec<String> = labels
                .iter()
                .zip(counts.values())
                .map(|(l, &n)| {
                    let bar = (n as u128 * BAR_WIDTH as u128).div_ceil(max as u128) as usize;
                    format!("{l:<lw$} {n:>cw$} |{}{}|", "@".repeat(bar), " ".repeat(BAR_WIDTH - bar))
                })
                .collect();
            Some(lines.join("\n"))
        });
        cols.push(Arc::new(StringArray::from_iter(text)));
        fields.push(Field::new(f.name(), DataType::Utf8, true));
    }
    RecordBatch::try_new(Arc::new(Schema::new(fields).with_metadata(batch.schema().metadata().clone())), cols)
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{StringArray, UInt64Array};
    use arrow::datatypes::{DataType, Field, Schema};
    use std::sync::Arc;

    #[test]
    fn folded_lines_join_strings_root_first_and_sum_equal_stacks() {
        let schema = Arc::new(Schema::new(vec![Field::new("comm", DataType::Utf8, false), Field::new("ustack", DataType::Utf8, false), Field::new("n", DataType::UInt64, false)]));
        let batch = RecordBatch::try_new(
            schema,
            vec![
                Arc::new(StringArray::from(vec!["w", "w", "w"])),
                Arc::new(StringArray::from(vec!["main+0x10;spin+0x4f", "main+0x10;spin+0x2b", "[no stack: x (EFAULT)]"])),
                Arc::new(UInt64Array::from(vec![3, 4, 2])),
            ],
        )
        .unwrap();
        assert_eq!(folded(&batch).unwrap(), vec![("w;main;spin".to_string(), 7), ("w;[no stack: x (EFAULT)]".to_string(), 2)]);
        assert_eq!(frame_name("a+b+0x1f"), "a+b");
        assert_eq!(frame_name("0x7f00"), "0x7f00");
        let no_count = batch.project(&[0, 1]).unwrap();
        assert!(folded(&no_count).unwrap_err().contains("exactly one integer column"));
    }
}
