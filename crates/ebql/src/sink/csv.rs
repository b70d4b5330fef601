//! `--format csv`: one header line, then every window's rows
//! (`window_start,window_end` first for windowed queries). A value with a
//! comma, a quote or a line break is quoted (RFC 4180), so it stays one field
//! of one row. A failed window is a comment line in place of its rows,
//! `# error: window_start=S window_end=E: <cause>` (`# error: <cause>` without
//! a WINDOW clause; line breaks of the cause as spaces): CSV has no error
//! row, and readers skip comments when told (`pandas.read_csv(…,
//! comment='#')`, arrow's `with_comment(b'#')`).

use super::contract::{QueryInfo, Sink, SinkError, TextOutput};
use crate::window::{QueryStats, WindowBatch};

/// Writes rows as CSV.
pub struct CsvSink {
    out: TextOutput,
    header_done: bool,
}

impl CsvSink {
    /// A CSV sink writing to `out`.
    pub fn new(out: TextOutput) -> CsvSink {
        CsvSink {
            out,
            header_done: false,
        }
    }
}

impl Sink for CsvSink {
    fn open(&mut self, _: &QueryInfo) -> Result<(), SinkError> {
        self.out.open()
    }

    fn write(&mut self, w: &WindowBatch) -> Result<(), SinkError> {
        let mut buf = encode(&w.batch, !self.header_done)?;
        self.header_done = true;
        if let Some(e) = &w.error {
            buf.extend_from_slice(error_comment(w, &e.cause).as_bytes());
        }
        self.out.write_all(&buf)
    }

    fn finish(&mut self, _: &QueryStats) -> Result<(), SinkError> {
        self.out.close()
    }
}

/// The comment line of a failed window.
fn error_comment(w: &WindowBatch, cause: &str) -> String {
    let cause: String = cause
        .chars()
        .map(|c| if c == '\n' || c == '\r' { ' ' } else { c })
        .collect();
    match w.bounds {
        Some(b) => format!(
            "# error: window_start={} window_end={}: {cause}\n",
            b.start, b.end
        ),
        None => format!("# error: {cause}\n"),
    }
}

/// `batch` as CSV lines, after a header line if `header`.
fn encode(batch: &arrow::record_batch::RecordBatch, header: bool) -> Result<Vec<u8>, SinkError> {
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
        assert_eq!(back, vec![rows]);
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
