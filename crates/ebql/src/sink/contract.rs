//! The contract between the engine and every sink: the [`Sink`] trait, what
//! a sink learns when it opens ([`QueryInfo`], [`WindowKind`]), and the
//! text output the text formats share ([`TextOutput`]). The sinks import
//! this (not `sink/mod.rs`, which builds them), so no cycle runs through
//! the sink module.

use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use arrow::datatypes::SchemaRef;

pub use crate::error::SinkError;
use crate::executor::RunningQuery;
use crate::window::{QueryStats, WallClock, WindowBatch};

/// Output format of `ebql query` (`--format`): which sink
/// [`super::for_format`] builds (one module of `sink` each). The variants'
/// doc comments are the `--help` text of the values, written for users.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "cli", derive(clap::ValueEnum))]
pub enum Format {
    /// Aligned columns, one table per window headed by its start time.
    Table,
    /// One JSON object per row (NDJSON), with window_start/window_end
    /// (wall clock, RFC 3339 UTC) for windowed queries.
    Json,
    /// CSV with one header line; histograms and lists as JSON text.
    Csv,
    /// Flame-graph "folded" lines (`frame;frame;frame count`, root first)
    /// for flamegraph.pl and inferno: needs a stack (string) column and one
    /// integer count.
    Folded,
    /// The current window redrawn in place, top-like (the table format when
    /// the output is not a terminal).
    Live,
    /// Parquet files in --output: a directory of rolled files, or one
    /// FILE.parquet.
    Parquet,
    /// Arrow IPC: the file format to --output FILE.arrow, the stream format
    /// to a pipe or FILE.arrows.
    Arrow,
    /// Nothing: every window is computed and dropped (the row count is in
    /// the final stats), the cost of processing without keeping.
    Null,
}

impl Format {
    /// The name `--format` takes.
    pub fn name(self) -> &'static str {
        match self {
            Format::Table => "table",
            Format::Json => "json",
            Format::Csv => "csv",
            Format::Folded => "folded",
            Format::Live => "live",
            Format::Parquet => "parquet",
            Format::Arrow => "arrow",
            Format::Null => "null",
        }
    }

    /// A binary format, which a terminal cannot show.
    pub fn is_binary(self) -> bool {
        matches!(self, Format::Parquet | Format::Arrow)
    }
}

/// A format that cannot take a query's results, or cannot write where it was
/// asked to, found before the query attaches ([`super::check_format`],
/// [`super::check_output`]). Not a failure of the run: the CLI's exit code 2,
/// as for a bad query.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FormatRefused {
    /// What does not fit, e.g. `--format folded needs one integer column …`.
    pub problem: String,
    /// What to do instead.
    pub hint: String,
}

impl std::fmt::Display for FormatRefused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}; hint: {}", self.problem, self.hint)
    }
}

impl std::error::Error for FormatRefused {}

/// The [`SinkError::cause`] of a write to a pipe whose reader has gone
/// (`ebql query … | head`): the CLI ends quietly on it.
pub const READER_GONE: &str = "the reader closed the pipe";

/// Where a text sink writes: stdout, a file (created when the sink opens,
/// so a bad path fails the query before its first window), or any writer.
pub struct TextOutput {
    path: Option<PathBuf>,
    out: Option<Box<dyn Write + Send>>,
}

impl TextOutput {
    /// Standard output.
    pub fn stdout() -> TextOutput {
        TextOutput {
            path: None,
            out: Some(Box::new(std::io::stdout())),
        }
    }

    /// A file, created (truncated) by [`TextOutput::open`].
    pub fn file(path: PathBuf) -> TextOutput {
        TextOutput {
            path: Some(path),
            out: None,
        }
    }

    /// Any writer (tests, buffers).
    pub fn writer(out: Box<dyn Write + Send>) -> TextOutput {
        TextOutput {
            path: None,
            out: Some(out),
        }
    }

    /// Creates the file, if this output is one. Errors name the path.
    pub fn open(&mut self) -> Result<(), SinkError> {
        if let (Some(path), None) = (&self.path, &self.out) {
            let f = std::fs::File::create(path)
                .map_err(|e| SinkError::new(format!("creating {}", path.display()), e))?;
            self.out = Some(Box::new(std::io::BufWriter::new(f)));
        }
        Ok(())
    }

    /// Writes `text` and flushes (a window is visible as soon as it closes).
    /// A closed pipe is reported with the cause [`READER_GONE`].
    pub fn write_all(&mut self, text: &[u8]) -> Result<(), SinkError> {
        let what = self.what();
        let out = self
            .out
            .as_mut()
            .ok_or_else(|| SinkError::new(what.clone(), "the output was not opened"))?;
        out.write_all(text)
            .and_then(|()| out.flush())
            .map_err(|e| match e.kind() {
                std::io::ErrorKind::BrokenPipe => SinkError::new(what, READER_GONE),
                _ => SinkError::new(what, e),
            })
    }

    /// Flushes and closes a file output (stdout stays open).
    pub fn close(&mut self) -> Result<(), SinkError> {
        let what = self.what();
        match self.out.as_mut() {
            Some(out) => out.flush().map_err(|e| SinkError::new(what, e)),
            None => Ok(()),
        }?;
        if self.path.is_some() {
            self.out = None;
        }
        Ok(())
    }

    fn what(&self) -> String {
        match &self.path {
            Some(p) => format!("writing {}", p.display()),
            None => "writing results".to_string(),
        }
    }
}

/// How a query's windows are delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WindowKind {
    /// No WINDOW clause: batches are drains of a raw stream, or one result at stop.
    None,
    /// Time windows: [`crate::window::WindowBounds`] are CLOCK_MONOTONIC
    /// ns; the rows carry them as wall-clock `window_start`/`window_end`
    /// (`Timestamp(Nanosecond, "UTC")`, converted with [`QueryInfo::clock`])
    /// and as `window_start_mono_ns`/`window_end_mono_ns`.
    Time,
    /// Count windows: bounds are event ordinals (events that passed the filter).
    Count,
}

/// What a sink learns when it opens.
#[derive(Debug, Clone)]
pub struct QueryInfo {
    /// The query as the user wrote it.
    pub sql: String,
    /// Schema of every batch (the window's columns first when windowed,
    /// [`crate::window::bound_fields`]).
    pub schema: SchemaRef,
    /// How windows are delimited.
    pub window: WindowKind,
    /// The run's wall clock (CLOCK_REALTIME − CLOCK_MONOTONIC, read once
    /// when the query started): what a sink showing a CLOCK_MONOTONIC
    /// instant as wall-clock time converts with, so that it agrees with
    /// the rows' `window_start`/`window_end`.
    pub clock: WallClock,
    /// eBQL's version (`CARGO_PKG_VERSION`), for file metadata.
    pub version: &'static str,
    /// The host the rows are from: `--host-id` with `--partial`, else the
    /// hostname (Kafka's message key and `ebql-host` header).
    pub host: String,
}

impl QueryInfo {
    /// What a sink needs to know about `q`, started from `sql`.
    pub fn of(sql: &str, q: &RunningQuery) -> QueryInfo {
        use ebql_compiler::prepass::WindowSpec;
        let window = match q.window() {
            None => WindowKind::None,
            Some(WindowSpec::Time { .. }) => WindowKind::Time,
            Some(WindowSpec::Count { .. }) => WindowKind::Count,
        };
        QueryInfo {
            sql: sql.to_string(),
            schema: q.schema(),
            window,
            clock: q.wall_clock(),
            version: env!("CARGO_PKG_VERSION"),
            host: q.host().to_string(),
        }
    }
}

/// A destination for query results.
///
/// Call order: `open` once, `write` per closed window (in order), `finish`
/// once, also after an error in `write` or an interruption, so the sink can
/// close what it opened. Errors stop the query (the CLI exits 1).
pub trait Sink: Send {
    /// Prepares the destination (creates files, binds ports, connects).
    fn open(&mut self, info: &QueryInfo) -> Result<(), SinkError>;
    /// Takes one closed window.
    fn write(&mut self, window: &WindowBatch) -> Result<(), SinkError>;
    /// Flushes and closes; `stats` are the run's final counters.
    fn finish(&mut self, stats: &QueryStats) -> Result<(), SinkError>;
    /// The run's counters so far, after every window and about every
    /// [`PROGRESS_INTERVAL`], for sinks that show live rates (the live view).
    /// Default: ignored.
    fn progress(&mut self, _stats: &QueryStats) -> Result<(), SinkError> {
        Ok(())
    }
}

/// How often [`drive`] passes the counters to [`Sink::progress`] between windows.
pub const PROGRESS_INTERVAL: Duration = Duration::from_secs(1);
