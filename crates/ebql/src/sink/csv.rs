//! `--format csv`: one header line, then every window's rows (the window's
//! columns first for windowed queries: time windows
//! `window_start,window_end,window_start_mono_ns,window_end_mono_ns`, the
//! first two wall clock as RFC 3339 UTC with nanoseconds,
//! `2025-01-02T09:11:12.345000000Z`, as every wall-clock column such as
//! `walltime(time)`, the last two CLOCK_MONOTONIC ns; count windows
//! `window_start,window_end`, ordinals). A value with a
//! comma, a quote or a line break is quoted (RFC 4180), so it stays one field
//! of one row. A failed window is a comment line in place of its rows,
//! `# error: window_start=S window_end=E: <cause>` (time windows: `S`, `E`
//! RFC 3339 as in the rows, then `window_start_mono_ns=… window_end_mono_ns=…`;
//! `# error: <cause>` without
//! a WINDOW clause; line breaks of the cause as spaces): CSV has no error
//! row, and readers skip comments when told (`pandas.read_csv(…,
//! comment='#')`, arrow's `with_comment(b'#')`).
//!
//! CSV has no nested values: a HIST/LHIST column (a list of `{lo, hi,
//! count}` buckets), or any other list, struct or map column, is written as
//! its JSON text in one (quoted) field, as `--format json` writes it, e.g.
//! `"[{""lo"":64,""hi"":127,""count"":3}]"`; NULL stays an empty field.
//! [`check_schema`] refuses, before the query runs, a result with a column
//! that even so cannot be written.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, StringArray};
use arrow::datatypes::{DataType, Field, SchemaRef};
use arrow::record_batch::RecordBatch;

use super::contract::{FormatRefused, QueryInfo, Sink, SinkError, TextOutput, WindowKind};
use super::wall_clock::{replace_columns, timestamps_as_text, WallClock};
use crate::window::{QueryStats, WindowBatch};

/// Writes rows as CSV.
pub struct CsvSink {
    out: TextOutput,
    header_done: bool,
    /// The run's clock, for time windows (a failed window's bounds).
    clock: Option<WallClock>,
}

impl CsvSink {
    /// A CSV sink writing to `out`.
    pub fn new(out: TextOutput) -> CsvSink {
        CsvSink {
            out,
            header_done: false,
            clock: None,
        }
    }
}

impl Sink for CsvSink {
    fn open(&mut self, info: &QueryInfo) -> Result<(), SinkError> {
        self.clock = (info.window == WindowKind::Time).then_some(info.clock);
        self.out.open()
    }

    fn write(&mut self, w: &WindowBatch) -> Result<(), SinkError> {
        let mut buf = encode(&flatten(&w.batch)?, !self.header_done)?;
        self.header_done = true;
        if let Some(e) = &w.error {
            buf.extend_from_slice(error_comment(w, &e.cause, self.clock.as_ref()).as_bytes());
        }
        self.out.write_all(&buf)
    }

    fn finish(&mut self, _: &QueryStats) -> Result<(), SinkError> {
        self.out.close()
    }
}

/// The comment line of a failed window (`clock`: the run's, for time windows).
fn error_comment(w: &WindowBatch, cause: &str, clock: Option<&WallClock>) -> String {
    let cause: String = cause
        .chars()
        .map(|c| if c == '\n' || c == '\r' { ' ' } else { c })
        .collect();
    match w.bounds {
        Some(b) if clock.is_some() => {
            let c = clock.expect("tested");
            format!(
                "# error: window_start={} window_end={} window_start_mono_ns={} window_end_mono_ns={}: {cause}\n",
                c.rfc3339(b.start),
                c.rfc3339(b.end),
                b.start,
                b.end
            )
        }
        Some(b) => format!(
            "# error: window_start={} window_end={}: {cause}\n",
            b.start, b.end
        ),
        None => format!("# error: {cause}\n"),
    }
}

/// Refuses a result schema CSV cannot write, even with nested columns as
/// JSON text (a type neither the CSV nor the JSON writer knows).
pub fn check_schema(schema: &SchemaRef) -> Result<(), FormatRefused> {
    let empty = RecordBatch::new_empty(schema.clone());
    flatten(&empty)
        .and_then(|flat| encode(&flat, true))
        .map(|_| ())
        .map_err(|e| FormatRefused {
            problem: format!(
                "--format csv cannot write this query's results: {}",
                e.cause
            ),
            hint: "use --format json, arrow or parquet".into(),
        })
}

/// `batch` with every nested column (list, struct, map: HIST/LHIST) as a
/// string column of each value's JSON text (NULL stays NULL), and every
/// wall-clock column as RFC 3339 text ([`timestamps_as_text`]).
fn flatten(batch: &RecordBatch) -> Result<RecordBatch, SinkError> {
    let batch = &timestamps_as_text(batch).map_err(|e| SinkError::new("encoding CSV", e))?;
    replace_columns(
        batch,
        |f, c| {
            Ok(c.data_type()
                .is_nested()
                .then(|| json_texts(c))
                .transpose()?
                .map(|texts| (Field::new(f.name(), DataType::Utf8, true), texts)))
        },
        |e| SinkError::new("encoding CSV", e),
    )
}

/// Each value of `column` as JSON text, as `--format json` writes it.
fn json_texts(column: &ArrayRef) -> Result<ArrayRef, SinkError> {
    let err = |e: &dyn std::fmt::Display| SinkError::new("encoding CSV", e);
    let one = RecordBatch::try_from_iter([("v", column.clone())]).map_err(|e| err(&e))?;
    let mut buf = Vec::new();
    let mut json = arrow::json::WriterBuilder::new()
        .with_explicit_nulls(true)
        .build::<_, arrow::json::writer::LineDelimited>(&mut buf);
    json.write(&one)
        .and_then(|()| json.finish())
        .map_err(|e| err(&e))?;
    drop(json);
    let mut texts: Vec<Option<String>> = Vec::with_capacity(column.len());
    // Each line is `{"v":VALUE}`: VALUE is the text, members in the JSON
    // writer's order (a HIST bucket reads `{"lo":…,"hi":…,"count":…}`).
    for line in buf.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
        let value = line
            .strip_prefix(b"{\"v\":")
            .and_then(|v| v.strip_suffix(b"}"))
            .ok_or_else(|| {
                err(&format!(
                    "unexpected JSON {}",
                    String::from_utf8_lossy(line)
                ))
            })?;
        texts.push(match value {
            b"null" => None,
            v => Some(String::from_utf8_lossy(v).into_owned()),
        });
    }
    if texts.len() != column.len() {
        return Err(err(&format!(
            "{} JSON values for {} rows",
            texts.len(),
            column.len()
        )));
    }
    Ok(Arc::new(StringArray::from(texts)))
}

/// `batch` as CSV lines, after a header line if `header`.
fn encode(batch: &RecordBatch, header: bool) -> Result<Vec<u8>, SinkError> {
    let mut buf = Vec::new();
    arrow::csv::WriterBuilder::new()
        .with_header(header)
        .build(&mut buf)
        .write(batch)
        .map_err(|e| SinkError::new("encoding CSV", e))?;
    Ok(buf)
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{ArrayRef, StringArray, UInt64Array};
    use arrow::record_batch::RecordBatch;
    use std::sync::Arc;

    #[test]
    fn a_failed_window_is_a_comment_line_readers_skip() {
        let rows = RecordBatch::try_from_iter([(
            "n",
            Arc::new(UInt64Array::from(vec![1, 2])) as ArrayRef,
        )])
        .unwrap();
        let w = |batch: RecordBatch, error: Option<&str>| WindowBatch {
            batch,
            bounds: Some(crate::window::WindowBounds {
                start: 10,
                end: 20,
                panes: None,
            }),
            drops: Default::default(),
            error: error.map(|cause| crate::window::WindowError {
                cause: cause.into(),
                kind: crate::window::WindowErrorKind::Evaluation,
            }),
        };
        let buf = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
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
        let mut sink = CsvSink::new(TextOutput::writer(Box::new(Shared(buf.clone()))));
        // The first window fails: the header comes first all the same.
        sink.write(&w(rows.slice(0, 0), Some("cast\nfailed")))
            .unwrap();
        sink.write(&w(rows.clone(), None)).unwrap();
        let text = buf.lock().unwrap().clone();
        assert_eq!(
            String::from_utf8_lossy(&text),
            "n\n# error: window_start=10 window_end=20: cast failed\n1\n2\n"
        );
        let back = arrow::csv::ReaderBuilder::new(rows.schema())
            .with_header(true)
            .with_comment(b'#')
            .build(std::io::Cursor::new(text))
            .unwrap()
            .collect::<Result<Vec<_>, _>>()
            .unwrap();
        assert_eq!(back, vec![rows.clone()]);
        let clock = WallClock::from_offset_ns(1_736_000_000_000_000_000);
        assert_eq!(
            error_comment(&w(rows.slice(0, 0), None), "x", Some(&clock)),
            "# error: window_start=2025-01-04T14:13:20.000000010Z window_end=2025-01-04T14:13:20.000000020Z \
             window_start_mono_ns=10 window_end_mono_ns=20: x\n"
        );
    }

    #[test]
    fn a_histogram_column_is_its_json_text_in_one_field() {
        let h = ebql_compiler::agg::hist::hist_scalar(&[(64, 127, 3), (128, 255, 1)], false)
            .to_array()
            .unwrap();
        let none = arrow::array::new_null_array(h.data_type(), 1);
        let h = arrow::compute::concat(&[h.as_ref(), none.as_ref()]).unwrap();
        let batch = RecordBatch::try_from_iter([
            ("n", Arc::new(UInt64Array::from(vec![4, 0])) as ArrayRef),
            ("h", h),
        ])
        .unwrap();
        // The CSV writer alone refuses the list; the check passes the schema.
        assert!(encode(&batch, true).is_err());
        assert_eq!(check_schema(&batch.schema()), Ok(()));
        let text = String::from_utf8(encode(&flatten(&batch).unwrap(), true).unwrap()).unwrap();
        assert_eq!(
            text,
            "n,h\n4,\"[{\"\"lo\"\":64,\"\"hi\"\":127,\"\"count\"\":3},{\"\"lo\"\":128,\"\"hi\"\":255,\"\"count\"\":1}]\"\n0,\n"
        );
    }

    #[test]
    fn a_string_with_line_breaks_quotes_or_commas_stays_one_field() {
        let comm = vec![
            "a\nfake,row",
            "cr\r\nx",
            "say \"hi\"",
            "esc\x1b[2J",
            "plain",
        ];
        let batch = RecordBatch::try_from_iter([
            (
                "comm",
                Arc::new(StringArray::from(comm.clone())) as ArrayRef,
            ),
            (
                "n",
                Arc::new(UInt64Array::from(vec![1, 2, 3, 4, 5])) as ArrayRef,
            ),
        ])
        .unwrap();
        let text = encode(&batch, true).unwrap();
        assert!(
            String::from_utf8_lossy(&text).contains("\"a\nfake,row\",1"),
            "{text:?}"
        );
        // Read back: the same five rows of two fields.
        let back = arrow::csv::ReaderBuilder::new(batch.schema())
            .with_header(true)
            .build(std::io::Cursor::new(text))
            .unwrap()
            .collect::<Result<Vec<_>, _>>()
            .unwrap();
        assert_eq!(back, vec![batch]);
    }
}
