//! `--format arrow`: Arrow IPC, in one of its two layouts:
//!
//! * the *stream* format (schema message, one record batch message per
//!   window, end-of-stream marker) to stdout, a pipe or an `--output` not
//!   ending in `.arrow`/`.feather` (e.g. `FILE.arrows`); the stream is
//!   flushed after every window, so a reader on a pipe sees each window as
//!   it closes. Readers: `pyarrow.ipc.open_stream`, `polars.read_ipc_stream`,
//!   DuckDB's `arrow` extension, `arrow::ipc::reader::StreamReader`;
//! * the *file* format (the stream framed by a magic number and ended by a
//!   footer indexing the batches, readable with random access) to an
//!   `--output` ending in `.arrow` or `.feather`: `pyarrow.ipc.open_file`,
//!   `polars.read_ipc`, `arrow::ipc::reader::FileReader`. The footer is
//!   written when the run ends (`--duration`, Ctrl-C, SIGTERM).
//!
//! The schema carries [`META_QUERY`], [`META_VERSION`] and [`META_WINDOW`] in
//! its metadata; each window's bounds are its leading columns: time
//! windows `window_start`/`window_end` as `timestamp[ns, tz=UTC]` (the
//! run's wall clock) and `window_start_mono_ns`/`window_end_mono_ns` as
//! uint64 CLOCK_MONOTONIC ns; count windows `window_start`/`window_end` as
//! uint64 ordinals. A failed window writes nothing (the one schema has no room for
//! an error, and an empty batch is an empty window): the CLI's stderr
//! warning, the stats' `windows_failed` and exit code 4 report it. A reader
//! that closed the pipe is reported as [`READER_GONE`].

use std::io::Write;

use std::path::Path;

use arrow::datatypes::SchemaRef;
use arrow::error::ArrowError;
use arrow::ipc::writer::{FileWriter, StreamWriter};
use arrow::record_batch::RecordBatch;

use super::contract::{QueryInfo, Sink, SinkError, READER_GONE};
pub use super::file_schema::{
    conform, file_schema, window_kind_name, META_QUERY, META_VERSION, META_WINDOW,
};
use crate::window::{QueryStats, WindowBatch};

/// The two layouts of Arrow IPC.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// The streaming format: for pipes and readers that follow the run.
    Stream,
    /// The file format (footer at the end): for files read afterwards.
    File,
}

impl Layout {
    /// The layout for an output path: the file format for `.arrow` and
    /// `.feather` (the extensions readers expect it under), unless the path
    /// is a pipe or a character device; the stream format otherwise
    /// (`.arrows`, other names).
    pub fn for_path(path: &Path) -> Layout {
        use std::os::unix::fs::FileTypeExt;
        let file_ext = path
            .extension()
            .is_some_and(|e| e == "arrow" || e == "feather");
        let special = std::fs::metadata(path)
            .is_ok_and(|m| m.file_type().is_fifo() || m.file_type().is_char_device());
        if file_ext && !special {
            Layout::File
        } else {
            Layout::Stream
        }
    }
}

type Out = Box<dyn Write + Send>;

enum IpcWriter {
    Stream(StreamWriter<Out>),
    File(FileWriter<Out>),
}

impl IpcWriter {
    fn write(&mut self, batch: &RecordBatch) -> Result<(), ArrowError> {
        match self {
            IpcWriter::Stream(w) => w.write(batch).and_then(|()| w.flush()),
            IpcWriter::File(w) => w.write(batch).and_then(|()| w.flush()),
        }
    }

    fn finish(&mut self) -> Result<(), ArrowError> {
        match self {
            IpcWriter::Stream(w) => w.finish().and_then(|()| w.flush()),
            IpcWriter::File(w) => w.finish().and_then(|()| w.flush()),
        }
    }
}

/// Writes Arrow IPC (either [`Layout`]) to `out` (stdout or a file).
pub struct ArrowIpcSink {
    out: Option<Out>,
    /// Where `out` goes, for error messages (`stdout` or the path).
    name: String,
    layout: Layout,
    writer: Option<IpcWriter>,
    schema: Option<SchemaRef>,
}

impl ArrowIpcSink {
    /// A sink writing the stream format to `out`, called `name` in errors.
    pub fn new(out: Out, name: impl Into<String>) -> ArrowIpcSink {
        ArrowIpcSink::with_layout(out, name, Layout::Stream)
    }

    /// A sink writing `layout` to `out`, called `name` in errors.
    pub fn with_layout(out: Out, name: impl Into<String>, layout: Layout) -> ArrowIpcSink {
        ArrowIpcSink {
            out: Some(out),
            name: name.into(),
            layout,
            writer: None,
            schema: None,
        }
    }

    fn err(&self, doing: &str, e: ArrowError) -> SinkError {
        let what = match self.layout {
            Layout::Stream => "stream",
            Layout::File => "file",
        };
        let what = format!("{doing} the Arrow IPC {what} to {}", self.name);
        match &e {
            ArrowError::IoError(_, io) if io.kind() == std::io::ErrorKind::BrokenPipe => {
                SinkError::new(what, READER_GONE)
            }
            _ => SinkError::new(what, e),
        }
    }
}

impl Sink for ArrowIpcSink {
    fn open(&mut self, info: &QueryInfo) -> Result<(), SinkError> {
        let schema = file_schema(info);
        let Some(out) = self.out.take() else {
            return Err(SinkError::new(
                format!("opening the Arrow IPC output {}", self.name),
                "opened twice",
            ));
        };
        let mut writer = match self.layout {
            Layout::Stream => StreamWriter::try_new(out, &schema).map(IpcWriter::Stream),
            Layout::File => FileWriter::try_new(out, &schema).map(IpcWriter::File),
        }
        .map_err(|e| self.err("starting", e))?;
        // The schema goes out at once: a reader on a pipe can start.
        let flushed = match &mut writer {
            IpcWriter::Stream(w) => w.flush(),
            IpcWriter::File(w) => w.flush(),
        };
        flushed.map_err(|e| self.err("writing", e))?;
        self.writer = Some(writer);
        self.schema = Some(schema);
        Ok(())
    }

    fn write(&mut self, window: &WindowBatch) -> Result<(), SinkError> {
        let (Some(writer), Some(schema)) = (self.writer.as_mut(), self.schema.as_ref()) else {
            return Err(SinkError::new(
                format!("writing the Arrow IPC output {}", self.name),
                "the sink is not open",
            ));
        };
        if window.error.is_some() {
            // One schema and no per-batch note: a failed window writes
            // nothing (an empty batch is an empty window); stderr, the stats
            // and the exit code report it.
            return Ok(());
        }
        let batch = conform(&window.batch, schema)?;
        let res = writer.write(&batch);
        res.map_err(|e| self.err("writing", e))
    }

    fn finish(&mut self, _stats: &QueryStats) -> Result<(), SinkError> {
        match self.writer.take() {
            Some(mut w) => w.finish().map_err(|e| self.err("finishing", e)),
            None => Ok(()),
        }
    }
}
