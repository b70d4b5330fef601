//! `--format table`: aligned columns, one table per window headed by its
//! start (wall-clock time for time windows, event ordinals for count
//! windows), its row count, its losses and, for the first windows of a
//! hopping query, how many of its panes it holds. Histograms are drawn.

use arrow::record_batch::RecordBatch;

use super::contract::{QueryInfo, Sink, SinkError, TextOutput, WindowKind};
use crate::window::{DropCause, QueryStats, WindowBatch, WindowBounds, WindowDrops};
use ebql_compiler::bytetext;

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
        self.clock = info.clock;
        self.out.open()
    }

    fn write(&mut self, w: &WindowBatch) -> Result<(), SinkError> {
        if let Some(failed) = failure_line(self.window, &self.clock, w) {
            // The window's rows are replaced by its error.
            return self
                .out
                .write_all(format!("error: {}\n\n", escape_control(&failed)).as_bytes());
        }
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
    let head = window_label(kind, clock, &b);
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

/// `window 2025-01-02 10:11:12.345 +1.000s` (time) or `window events 100..200` (count).
pub fn window_label(kind: WindowKind, clock: &WallClock, b: &WindowBounds) -> String {
    match kind {
        WindowKind::Time => format!(
            "window {} +{:.3}s",
            clock.show(b.start),
            b.end.saturating_sub(b.start) as f64 / 1e9
        ),
        _ => format!("window events {}..{}", b.start, b.end),
    }
}

/// `window 2025-01-02 10:11:12.345 +1.000s (3 rows) is missing 7 events: 7
/// group table full (raise --max-groups)`: which window (or, without a
/// WINDOW clause, which rows) lost how many events, and why.
///
/// Strings the probe could not read are not losses: named after them (`;
/// 2 string reads failed (each value is NULL, its row kept: …)`), or alone.
pub fn drop_warning(kind: WindowKind, clock: &WallClock, w: &WindowBatch) -> Option<String> {
    let lost = w.drops.query_total();
    // Not losses of events: strings read as NULL, a wire relation's calls not decoded.
    let unread = match (w.drops.unread_note(), w.drops.wire_note()) {
        (Some(u), Some(n)) => Some(format!("{u}; {n}")),
        (u, n) => u.or(n),
    };
    if lost == 0 {
        let rows = w.batch.num_rows();
        return unread.map(|u| match w.bounds {
            Some(b) => format!("{} ({rows} rows): {u}", window_label(kind, clock, &b)),
            None => format!("the {rows} rows that follow: {u}"),
        });
    }
    let why = DropCause::describe(&w.drops.query_causes());
    let why = match unread {
        Some(u) => format!("{why}; {u}"),
        None => why,
    };
    let rows = w.batch.num_rows();
    Some(match w.bounds {
        Some(b) => format!(
            "{} ({rows} rows) is missing {lost} events: {why}",
            window_label(kind, clock, &b)
        ),
        None => format!(
            "the {rows} rows that follow are missing {lost} events, lost since the previous rows or the start (the query has no WINDOW clause): {why}"
        ),
    })
}

/// `window 2025-01-02 10:11:12.345 +1.000s [2025-01-02T09:11:12.345000000Z,
/// 2025-01-02T09:11:13.345000000Z) failed: sum(x) = … does not fit …` for a
/// window whose evaluation failed (its label, its bounds as the
/// `window_start`/`window_end` values of its rows would be, RFC 3339 UTC for
/// time windows, ordinals for count windows, the cause), else `None`.
pub fn failure_line(kind: WindowKind, clock: &WallClock, w: &WindowBatch) -> Option<String> {
    let e = w.error.as_ref()?;
    Some(match w.bounds {
        Some(b) if kind == WindowKind::Time => format!(
            "{} [{}, {}) failed: {e}",
            window_label(kind, clock, &b),
            clock.rfc3339(b.start),
            clock.rfc3339(b.end)
        ),
        Some(b) => format!(
            "{} [{}, {}) failed: {e}",
            window_label(kind, clock, &b),
            b.start,
            b.end
        ),
        None => format!("the result (the query has no WINDOW clause) failed: {e}"),
    })
}

/// `, N events dropped: …` (every non-zero cause) for a window that lost events, else empty.
pub fn drops_note(d: &WindowDrops) -> String {
    match d.query_total() {
        0 => String::new(),
        n => format!(
            ", {n} events dropped: {}",
            DropCause::describe(&d.query_causes())
        ),
    }
}

/// `batch` as an aligned table, histograms drawn, control characters of
/// its values escaped ([`escape_control`]).
pub fn render(batch: &RecordBatch) -> Result<String, SinkError> {
    let escaped = escape_cells(batch).map_err(|e| SinkError::new("escaping values", e))?;
    let drawn = draw_histograms(&escaped).map_err(|e| SinkError::new("drawing histograms", e))?;
    arrow::util::pretty::pretty_format_batches(&[drawn])
        .map(|t| t.to_string())
        .map_err(|e| SinkError::new("formatting a table", e))
}

/// The bytes of the value `s` (its text is [`bytetext`]'s) with every
/// character that a terminal would act on instead of showing written as a
/// visible escape: `\n`, `\r`, `\t`, other C0 controls and DEL as `\xNN`
/// (ESC is `\x1b`), C1 controls, the bidirectional overrides and isolates
/// (U+202A–U+202E, U+2066–U+2069) as `\u{NNNN}`, a byte that is not valid
/// UTF-8 as `\xNN` (0x80–0xff: never a character), and the backslash itself
/// as `\\`, so an escape in the output always means one in the value and
/// two different byte strings never look alike. A traced string (a comm, a
/// file name) cannot move the cursor, recolour the screen or start a fake row.
pub fn escape_control(s: &str) -> std::borrow::Cow<'_, str> {
    let plain = |c: char| {
        !(c.is_control()
            || c == '\\'
            || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}'))
    };
    if s.chars().all(plain) {
        return s.into();
    }
    let mut out = String::with_capacity(s.len() + 8);
    for chunk in bytetext::decode(s).utf8_chunks() {
        for c in chunk.valid().chars() {
            match c {
                _ if plain(c) => out.push(c),
                '\\' => out.push_str("\\\\"),
                '\n' => out.push_str("\\n"),
                '\r' => out.push_str("\\r"),
                '\t' => out.push_str("\\t"),
                c if (c as u32) < 0x80 => out.push_str(&format!("\\x{:02x}", c as u32)),
                c => out.push_str(&format!("\\u{{{:04x}}}", c as u32)),
            }
        }
        for b in chunk.invalid() {
            out.push_str(&format!("\\x{b:02x}"));
        }
    }
    out.into()
}

/// Replaces each column that can hold text (strings, lists, structs… but
/// not numbers, booleans or times, nor histograms, drawn by
/// [`draw_histograms`]) by its values as the table shows them, escaped by
/// [`escape_control`]; NULL stays NULL.
pub fn escape_cells(batch: &RecordBatch) -> Result<RecordBatch, arrow::error::ArrowError> {
    use arrow::array::{Array, ArrayRef, StringArray};
    use arrow::datatypes::{DataType, Field, Schema};
    use arrow::util::display::{ArrayFormatter, FormatOptions};
    use std::sync::Arc;
    let textual = |dt: &DataType| {
        !(dt.is_primitive() || matches!(dt, DataType::Boolean | DataType::Null) || is_histogram(dt))
    };
    let schema = batch.schema();
    if !schema.fields().iter().any(|f| textual(f.data_type())) {
        return Ok(batch.clone());
    }
    let mut fields = Vec::new();
    let mut cols: Vec<ArrayRef> = Vec::new();
    for (f, c) in schema.fields().iter().zip(batch.columns()) {
        if !textual(f.data_type()) {
            fields.push(f.as_ref().clone());
            cols.push(c.clone());
            continue;
        }
        // The options `pretty_format_batches` shows values with.
        let opts = FormatOptions::default().with_display_error(true);
        let show = ArrayFormatter::try_new(c.as_ref(), &opts)?;
        let text = (0..c.len()).map(|row| {
            (!c.is_null(row)).then(|| escape_control(&show.value(row).to_string()).into_owned())
        });
        cols.push(Arc::new(StringArray::from_iter(text)));
        fields.push(Field::new(f.name(), DataType::Utf8, true));
    }
    RecordBatch::try_new(
        Arc::new(Schema::new(fields).with_metadata(schema.metadata().clone())),
        cols,
    )
}

/// A histogram column: a list of `{lo, hi, count}` structs.
fn is_histogram(dt: &arrow::datatypes::DataType) -> bool {
    use arrow::datatypes::DataType;
    match dt {
        DataType::List(item) => {
            matches!(item.data_type(), DataType::Struct(f) if f.len() == 3 && f[0].name() == "lo" && f[1].name() == "hi" && f[2].name() == "count")
        }
        _ => false,
    }
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
    let is_hist = is_histogram;
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

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{ArrayRef, ListBuilder, StringArray, StringBuilder, UInt64Array};
    use std::sync::Arc;

    #[test]
    fn control_characters_are_shown_as_escapes() {
        assert_eq!(escape_control("/usr/bin/ls"), "/usr/bin/ls");
        assert!(matches!(
            escape_control("plain é ✓"),
            std::borrow::Cow::Borrowed(_)
        ));
        assert_eq!(escape_control("a\x1b[31mred"), "a\\x1b[31mred");
        assert_eq!(escape_control("l1\nl2\rx\ty"), "l1\\nl2\\rx\\ty");
        assert_eq!(escape_control("\0\x07\x08\x7f"), "\\x00\\x07\\x08\\x7f");
        // C1 CSI (a one-character ESC [ for some terminals) and a right-to-left override.
        assert_eq!(
            escape_control("\u{9b}2J\u{202e}abc"),
            "\\u{009b}2J\\u{202e}abc"
        );
        // A byte that is not UTF-8 (the value's text `\x9b`, see `bytetext`) is `\x9b`, the
        // text `\x9b` (the value `\\x9b`) is a backslash and `x9b`, U+FFFD is itself.
        assert_eq!(escape_control("x-\\x9b"), "x-\\x9b");
        assert_eq!(escape_control("x-\\\\x9b"), "x-\\\\x9b");
        assert_eq!(escape_control("x-\u{fffd}"), "x-\u{fffd}");
        // A backslash in the value is doubled, so `\\n` in the output is a backslash and an n.
        assert_eq!(escape_control("C:\\new"), "C:\\\\new");
    }

    /// The characters a terminal acts on (the line breaks of the table aside).
    fn acted_on(text: &str) -> Vec<char> {
        text.chars()
            .filter(|&c| c != '\n' && (c.is_control() || ('\u{202a}'..='\u{202e}').contains(&c)))
            .collect()
    }

    #[test]
    fn a_traced_string_cannot_move_the_cursor_or_add_rows() {
        let comm: ArrayRef = Arc::new(StringArray::from(vec![
            Some("evil\x1b[2J\x1b[1;1H"),
            Some("two\nlines | 9 |"),
            Some("cr\rtab\tdel\x7f\u{9b}\u{202e}"),
            None,
        ]));
        let mut frames = ListBuilder::new(StringBuilder::new());
        frames.values().append_value("main\x1b[31m");
        frames.values().append_value("f\nx");
        frames.append(true);
        for _ in 0..3 {
            frames.append(false);
        }
        let frames: ArrayRef = Arc::new(frames.finish());
        let n: ArrayRef = Arc::new(UInt64Array::from(vec![1, 2, 3, 4]));
        let batch =
            RecordBatch::try_from_iter([("comm", comm), ("frames", frames), ("n", n)]).unwrap();
        let table = render(&batch).unwrap();
        assert_eq!(acted_on(&table), Vec::<char>::new(), "{table}");
        // Borders, header, its rule, four rows, bottom border: one line each.
        assert_eq!(table.lines().count(), 4 + 4, "{table}");
        for shown in [
            "evil\\x1b[2J\\x1b[1;1H",
            "two\\nlines | 9 |",
            "cr\\rtab\\tdel\\x7f\\u{009b}\\u{202e}",
            "[main\\x1b[31m, f\\nx]",
        ] {
            assert!(table.contains(shown), "{shown} not in\n{table}");
        }
    }

    fn window(bounds: Option<WindowBounds>, drops: WindowDrops) -> WindowBatch {
        let n: ArrayRef = Arc::new(UInt64Array::from(vec![1, 2]));
        WindowBatch {
            batch: RecordBatch::try_from_iter([("n", n)]).unwrap(),
            bounds,
            drops,
            error: None,
        }
    }

    #[test]
    fn a_failed_window_is_one_error_line_naming_its_bounds_and_cause() {
        let clock = WallClock::now();
        let now = crate::window::monotonic_ns();
        let mut w = window(
            Some(WindowBounds {
                start: now,
                end: now + 500_000_000,
                panes: None,
            }),
            WindowDrops::default(),
        );
        assert_eq!(failure_line(WindowKind::Time, &clock, &w), None);
        w.batch = w.batch.slice(0, 0);
        w.error = Some(crate::window::WindowError {
            cause: "sum(x) = 20000000000000000000 does not fit\nits type".into(),
            kind: crate::window::WindowErrorKind::Overflow,
        });
        let buf = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let mut sink = TableSink::new(TextOutput::writer(Box::new(Shared(buf.clone()))));
        sink.window = WindowKind::Time;
        sink.clock = clock;
        sink.out.open().unwrap();
        sink.write(&w).unwrap();
        let text = String::from_utf8(buf.lock().unwrap().clone()).unwrap();
        assert_eq!(
            text,
            format!(
                "error: window {} +0.500s [{}, {}) failed: sum(x) = 20000000000000000000 does not fit\\nits type\n\n",
                clock.show(now),
                clock.rfc3339(now),
                clock.rfc3339(now + 500_000_000)
            )
        );
        w.bounds = None;
        assert_eq!(
            failure_line(WindowKind::None, &clock, &w).unwrap(),
            "the result (the query has no WINDOW clause) failed: sum(x) = 20000000000000000000 does not fit\nits type"
        );
    }

    /// A writer the test can read back.
    struct Shared(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

    impl std::io::Write for Shared {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_drop_warning_names_its_window_or_rows_and_every_cause() {
        let clock = WallClock::now();
        let drops = WindowDrops {
            groups_full: 2,
            distinct_full: 3,
            ..Default::default()
        };
        assert_eq!(
            drop_warning(
                WindowKind::Time,
                &clock,
                &window(None, WindowDrops::default())
            ),
            None
        );
        let count = WindowBounds {
            start: 100,
            end: 200,
            panes: None,
        };
        assert_eq!(
            drop_warning(WindowKind::Count, &clock, &window(Some(count), drops)).unwrap(),
            "window events 100..200 (2 rows) is missing 5 events: 2 group table full (raise --max-groups), \
             3 COUNT(DISTINCT) set full (event counted, value not) (raise --max-distinct)"
        );
        let now = crate::window::monotonic_ns();
        let time = WindowBounds {
            start: now,
            end: now + 1_000_000_000,
            panes: None,
        };
        let w = drop_warning(WindowKind::Time, &clock, &window(Some(time), drops)).unwrap();
        assert!(
            w.starts_with(&format!(
                "window {} +1.000s (2 rows) is missing 5 events: 2 group table full",
                clock.show(now)
            )),
            "{w}"
        );
        let unwindowed = drop_warning(WindowKind::None, &clock, &window(None, drops)).unwrap();
        assert!(
            unwindowed.starts_with("the 2 rows that follow are missing 5 events")
                && unwindowed.contains("no WINDOW clause")
                && unwindowed.contains("raise --max-distinct"),
            "{unwindowed}"
        );
        // The oracle's tap is not the query's loss.
        let tap = WindowDrops {
            tap_full: 4,
            ..Default::default()
        };
        assert_eq!(
            drop_warning(WindowKind::None, &clock, &window(None, tap)),
            None
        );
        assert_eq!(drops_note(&tap), "");
        // A wire relation's calls not decoded are named per window, as no loss of events.
        let wire = WindowDrops {
            wire_not_decoded: 3,
            ..Default::default()
        };
        let w = drop_warning(WindowKind::Time, &clock, &window(Some(time), wire)).unwrap();
        assert!(
            w.ends_with("(2 rows): 3 captured socket calls not decoded (framing lost, TLS, or responses to requests not seen: see `wire` in the stats)"),
            "{w}"
        );
    }

    #[test]
    fn numbers_and_plain_strings_are_shown_as_before() {
        let batch = RecordBatch::try_from_iter([
            (
                "comm",
                Arc::new(StringArray::from(vec![Some("bash"), None])) as ArrayRef,
            ),
            ("n", Arc::new(UInt64Array::from(vec![7, 8])) as ArrayRef),
        ])
        .unwrap();
        let plain = arrow::util::pretty::pretty_format_batches(std::slice::from_ref(&batch))
            .unwrap()
            .to_string();
        assert_eq!(render(&batch).unwrap(), plain);
    }
}
