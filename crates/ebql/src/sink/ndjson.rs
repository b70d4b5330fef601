//! `--format json`: one JSON object per row (NDJSON), window bounds as the
//! `window_start`/`window_end` members of windowed queries.

use super::contract::{QueryInfo, Sink, SinkError, TextOutput};
use crate::window::{QueryStats, WindowBatch};

/// Writes each row as one line of JSON.
pub struct NdjsonSink {
    out: TextOutput,
}

impl NdjsonSink {
    /// An NDJSON sink writing to `out`.
    pub fn new(out: TextOutput) -> NdjsonSink {
        NdjsonSink { out }
    }
}

impl Sink for NdjsonSink {
    fn open(&mut self, _: &QueryInfo) -> Result<(), SinkError> {
        self.out.open()
    }

    fn write(&mut self, w: &WindowBatch) -> Result<(), SinkError> {
        let mut buf = Vec::new();
        let mut json = arrow::json::LineDelimitedWriter::new(&mut buf);
        json.write(&w.batch)
            .and_then(|()| json.finish())
            .map_err(|e| SinkError::new("encoding JSON", e))?;
        self.out.write_all(&buf)
    }

    fn finish(&mut self, _: &QueryStats) -> Result<(), SinkError> {
        self.out.close()
    }
}
