//! `--format arrow`: an Arrow IPC stream (the "streaming format": schema
//! message, then one record batch message per window, then the
//! end-of-stream marker), to stdout or a file. Readers: `pyarrow.ipc.open_stream`,
//! `polars.read_ipc_stream`, DuckDB's `arrow` extension, `arrow::ipc::reader::StreamReader`.
//!
//! The schema carries [`META_QUERY`], [`META_VERSION`] and [`META_WINDOW`] in
//! its metadata; each window's bounds are its `window_start`/`window_end`
//! columns. The stream is flushed after every window, so a reader on a pipe
//! sees each window as it closes.

use std::collections::HashMap;
use std::io::Write;
use std::sync::Arc;

use arrow::datatypes::{Schema, SchemaRef};
use arrow::ipc::writer::StreamWriter;
use arrow::record_batch::{RecordBatch, RecordBatchOptions};

use super::{QueryInfo, Sink, SinkError, WindowBatch, WindowKind};
use crate::executor::QueryStats;

/// Schema (and Parquet file) metadata key: the query as the user wrote it.
pub const META_QUERY: &str = "ebql.query";
/// Metadata key: eBQL's version.
pub const META_VERSION: &str = "ebql.version";
/// Metadata key: the window kind, `none`, `time` (bounds in CLOCK_MONOTONIC ns) or `count` (bounds in event ordinals).
pub const META_WINDOW: &str = "ebql.window";

/// The name [`META_WINDOW`] gives a window kind.
pub fn window_kind_name(kind: WindowKind) -> &'static str {
    match kind {
        WindowKind::None => "none",
        WindowKind::Time => "time",
        WindowKind::Count => "count",
    }
}

/// The schema files and streams are written with: the query's result schema
/// with the query, version and window kind in its metadata (and nothing
/// window-specific, so every batch of the run shares it).
pub fn file_schema(info: &QueryInfo) -> SchemaRef {
    let md = HashMap::from([
        (META_QUERY.to_string(), info.sql.clone()),
        (META_VERSION.to_string(), info.version.to_string()),
        (
            META_WINDOW.to_string(),
            window_kind_name(info.window).to_string(),
        ),
    ]);
    Arc::new(Schema::new(info.schema.fields().clone()).with_metadata(md))
}

/// `batch`'s columns under `schema` (its own schema carries per-window
/// metadata, which a stream or file writer would take for a schema change).
///
/// Errors: a column whose type differs from the schema's.
pub fn conform(batch: &RecordBatch, schema: &SchemaRef) -> Result<RecordBatch, SinkError> {
    RecordBatch::try_new_with_options(
        schema.clone(),
        batch.columns().to_vec(),
        &RecordBatchOptions::new().with_row_count(Some(batch.num_rows())),
    )
    .map_err(|e| SinkError::new("matching a window's rows to the output schema", e))
}

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
