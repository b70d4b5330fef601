//! `--format arrow`: an Arrow IPC stream (the "streaming format": schema
//! message, then one record batch message per window, then the
//! end-of-stream marker), to stdout or a file. Readers: `pyarrow.ipc.open_stream`,
//! `polars.read_ipc_stream`, DuckDB's `arrow` extension, `arrow::ipc::reader::StreamReader`.
//!
//! The schema carries [`META_QUERY`], [`META_VERSION`] and [`META_WINDOW`] in
//! its metadata; each window's bounds are its `window_start`/`window_end`
//! columns. The stream is flushed after every window, so a reader on a pipe
//! sees each window as it closes. A failed window writes nothing (the
//! stream's one schema has no room for an error, and an empty batch is an
//! empty window): the CLI's stderr warning, the stats' `windows_failed` and
//! exit code 4 report it.

use std::io::Write;

use arrow::datatypes::SchemaRef;
use arrow::ipc::writer::StreamWriter;

use super::contract::{QueryInfo, Sink, SinkError};
pub use super::file_schema::{
    conform, file_schema, window_kind_name, META_QUERY, META_VERSION, META_WINDOW,
};
use crate::window::{QueryStats, WindowBatch};

/// Writes an Arrow IPC stream to `out` (stdout or a file).
pub struct ArrowIpcSink {
    out: Option<Box<dyn Write + Send>>,
    /// Where `out` goes, for error messages (`stdout` or the path).
    name: String,
    writer: Option<StreamWriter<Box<dyn Write + Send>>>,
    schema: Option<SchemaRef>,
}

impl ArrowIpcSink {
    /// A sink writing to `out`, called `name` in errors.
    pub fn new(out: Box<dyn Write + Send>, name: impl Into<String>) -> ArrowIpcSink {
        ArrowIpcSink {
            out: Some(out),
            name: name.into(),
            writer: None,
            schema: None,
        }
    }

    fn err(&self, doing: &str, e: impl std::fmt::Display) -> SinkError {
        SinkError::new(format!("{doing} the Arrow IPC stream to {}", self.name), e)
    }
}

impl Sink for ArrowIpcSink {
    fn open(&mut self, info: &QueryInfo) -> Result<(), SinkError> {
        let schema = file_schema(info);
        let out = self
            .out
            .take()
            .ok_or_else(|| self.err("opening", "opened twice"))?;
        let mut writer =
            StreamWriter::try_new(out, &schema).map_err(|e| self.err("starting", e))?;
        writer.flush().map_err(|e| self.err("writing", e))?;
        self.writer = Some(writer);
        self.schema = Some(schema);
        Ok(())
    }

    fn write(&mut self, window: &WindowBatch) -> Result<(), SinkError> {
        let (Some(writer), Some(schema)) = (self.writer.as_mut(), self.schema.as_ref()) else {
            return Err(self.err("writing", "the sink is not open"));
        };
        if window.error.is_some() {
            // A stream has one schema and no per-batch note: a failed window
            // writes nothing (an empty batch is an empty window); stderr,
            // the stats and the exit code report it.
            return Ok(());
        }
        let batch = conform(&window.batch, schema)?;
        let res = writer.write(&batch).and_then(|_| writer.flush());
        res.map_err(|e| self.err("writing", e))
    }

    fn finish(&mut self, _stats: &QueryStats) -> Result<(), SinkError> {
        match self.writer.take() {
            Some(mut w) => w
                .finish()
                .and_then(|_| w.flush())
                .map_err(|e| self.err("finishing", e)),
            None => Ok(()),
        }
    }
}
