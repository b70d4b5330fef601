//! `--format csv`: one header line, then every window's rows
//! (`window_start,window_end` first for windowed queries).

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
        let mut buf = Vec::new();
        arrow::csv::WriterBuilder::new()
            .with_header(!self.header_done)
            .build(&mut buf)
            .write(&w.batch)
            .map_err(|e| SinkError::new("encoding CSV", e))?;
        self.header_done = true;
        self.out.write_all(&buf)
    }

    fn finish(&mut self, _: &QueryStats) -> Result<(), SinkError> {
        self.out.close()
    }
}
