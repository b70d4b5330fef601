//! `--format csv`: one header line, then every window's rows
//! (`window_start,window_end` first for windowed queries). A value with a
//! comma, a quote or a line break is quoted (RFC 4180), so it stays one field
//! of one row.

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
        let buf = encode(&w.batch, !self.header_done)?;
        self.header_done = true;
        self.out.write_all(&buf)
    }

    fn finish(&mut self, _: &QueryStats) -> Result<(), SinkError> {
        self.out.close()
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
