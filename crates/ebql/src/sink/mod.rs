//! Where results go: one contract for every sink (terminal formats, files,
//! Prometheus, Kafka, …), one module per sink.
//!
//! A sink is opened once with what it needs to know about the query
//! ([`QueryInfo`]: the SQL, the result schema, the window kind), receives
//! every closed window as a [`WindowBatch`] (its rows as one Arrow record
//! batch, its bounds as typed values, the events it lost), and is finished
//! once with the run's [`QueryStats`] — also on Ctrl-C/SIGTERM, so files are
//! closed properly. [`drive`] runs a query into a sink until told to stop.

use std::collections::HashMap;
use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::sync::mpsc::RecvTimeoutError;
use std::sync::Arc;
use std::time::Duration;

use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;

use crate::executor::{
    QueryStats, RunningQuery, WindowDrops, META_DROPPED_DISTINCT_FULL, META_DROPPED_GROUPS_FULL,
    META_DROPPED_RINGBUF_FULL, META_WINDOW_END, META_WINDOW_PANES, META_WINDOW_START,
};

pub mod arrow_ipc;
pub mod csv;
pub mod folded;
pub mod kafka;
pub mod live;
pub mod ndjson;
pub mod null;
pub mod parquet;
pub mod prometheus;
pub mod table;

/// Output format of `ebql query` (`--format`): which sink [`for_format`] builds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "cli", derive(clap::ValueEnum))]
pub enum Format {
    /// Aligned columns, one table per window headed by its start time ([`table::TableSink`]).
    Table,
    /// One JSON object per row (NDJSON), with window_start/window_end ([`ndjson::NdjsonSink`]).
    Json,
    /// CSV with one header line ([`csv::CsvSink`]).
    Csv,
    /// Flame-graph "folded" lines (`frame;frame;frame count`, root first),
    /// the input of flamegraph.pl and inferno ([`folded::FoldedSink`]).
    Folded,
    /// The current window redrawn in place, top-like ([`live::LiveSink`]);
    /// the table format when the output is not a terminal.
    Live,
    /// Parquet files in `--output` (a directory of rolled files, or one
    /// `FILE.parquet`) ([`parquet::ParquetSink`]).
    Parquet,
    /// An Arrow IPC stream to stdout or `--output` ([`arrow_ipc::ArrowIpcSink`]).
    Arrow,
    /// Nothing: every window is computed and dropped ([`null::NullSink`];
    /// the row count is in the final stats): the cost of processing without keeping.
    Null,
}

/// Settings of the sinks that need more than a destination.
#[derive(Debug, Clone, Copy, Default)]
pub struct SinkOptions {
    /// When a Parquet directory starts a new file.
    pub roll: parquet::Roll,
}

/// The sink for `format` writing to `output` (text formats: a file created
/// when the sink opens; `kafka://HOST:PORT/TOPIC`: a Kafka topic, the
/// format choosing the payload) or to stdout. One match arm per sink.
///
/// Errors: Parquet without `--output`; an Arrow IPC file that cannot be
/// created; a Kafka broker that does not answer or a format it cannot carry.
pub fn for_format(
    format: Format,
    output: Option<PathBuf>,
    opts: &SinkOptions,
) -> Result<Box<dyn Sink>, SinkError> {
    if let Some(url) = output
        .as_deref()
        .and_then(|p| p.to_str())
        .filter(|s| s.starts_with(kafka::SCHEME))
    {
        return Ok(Box::new(kafka::KafkaSink::connect(url, format)?));
    }
    let to_terminal = output.is_none() && std::io::stdout().is_terminal();
    let text = |output: Option<PathBuf>| match output {
        Some(path) => TextOutput::file(path),
        None => TextOutput::stdout(),
    };
    Ok(match format {
        Format::Table => Box::new(table::TableSink::new(text(output))),
        Format::Json => Box::new(ndjson::NdjsonSink::new(text(output))),
        Format::Csv => Box::new(csv::CsvSink::new(text(output))),
        Format::Folded => Box::new(folded::FoldedSink::new(text(output))),
        Format::Live if to_terminal => Box::new(live::LiveSink::new(text(output))),
        Format::Live => Box::new(table::TableSink::new(text(output))),
        Format::Parquet => match output {
            Some(p) => Box::new(parquet::ParquetSink::new(parquet::Target::of(
                &p, opts.roll,
            ))),
            None => {
                return Err(SinkError::new(
                    "--format parquet",
                    "needs --output DIR (rolled files) or --output FILE.parquet",
                ))
            }
        },
        Format::Null => Box::new(null::NullSink),
        Format::Arrow => match output {
            Some(p) => {
                let f = std::fs::File::create(&p)
                    .map_err(|e| SinkError::new(format!("creating {}", p.display()), e))?;
                Box::new(arrow_ipc::ArrowIpcSink::new(
                    Box::new(std::io::BufWriter::new(f)),
                    p.display().to_string(),
                ))
            }
            None => Box::new(arrow_ipc::ArrowIpcSink::new(
                Box::new(std::io::stdout()),
                "stdout",
            )),
        },
    })
}

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
    /// Time windows: bounds are CLOCK_MONOTONIC ns.
    Time,
    /// Count windows: bounds are event ordinals (events that passed the filter).
    Count,
}

/// What a sink learns when it opens.
#[derive(Debug, Clone)]
pub struct QueryInfo {
    /// The query as the user wrote it.
    pub sql: String,
    /// Schema of every batch (`window_start`/`window_end` first when windowed).
    pub schema: SchemaRef,
    /// How windows are delimited.
    pub window: WindowKind,
    /// eBQL's version (`CARGO_PKG_VERSION`), for file metadata.
    pub version: &'static str,
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
            version: env!("CARGO_PKG_VERSION"),
        }
    }
}

/// The bounds of one window, typed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WindowBounds {
    /// First instant (time: CLOCK_MONOTONIC ns) or ordinal (count) in the window.
    pub start: u64,
    /// End, exclusive, in the same unit.
    pub end: u64,
    /// Hopping windows: panes present / panes of a full window (the first
    /// windows of a run are partial), `None` for tumbling and count windows.
    pub panes: Option<(u32, u32)>,
}

/// One closed window: rows, bounds, losses.
#[derive(Debug, Clone)]
pub struct WindowBatch {
    /// The rows (the query's result schema, [`QueryInfo::schema`]).
    pub batch: RecordBatch,
    /// Bounds, for windowed queries.
    pub bounds: Option<WindowBounds>,
    /// Events of this window the kernel could not record.
    pub drops: WindowDrops,
}

impl WindowBatch {
    /// The window a batch from [`RunningQuery`]'s receiver carries (its
    /// bounds and drops are in its schema metadata until the executor
    /// sends [`WindowBatch`]es itself).
    pub fn from_batch(batch: RecordBatch) -> WindowBatch {
        let md = batch.schema_ref().metadata();
        let num = |k: &str| md.get(k).and_then(|v| v.parse::<u64>().ok());
        let panes = md.get(META_WINDOW_PANES).and_then(|v| {
            let (have, full) = v.split_once('/')?;
            Some((have.parse().ok()?, full.parse().ok()?))
        });
        let bounds = match (num(META_WINDOW_START), num(META_WINDOW_END)) {
            (Some(start), Some(end)) => Some(WindowBounds { start, end, panes }),
            _ => None,
        };
        let drops = WindowDrops::of_batch(&batch);
        WindowBatch {
            batch,
            bounds,
            drops,
        }
    }

    /// The rows with the bounds and drops in their schema metadata
    /// (`executor::META_*`): the encoding [`RunningQuery::take_receiver`]'s
    /// batches keep for compatibility; [`WindowBatch::from_batch`] reads it back.
    pub fn to_batch_with_metadata(&self) -> RecordBatch {
        let Some(WindowBounds { start, end, panes }) = self.bounds else {
            return self.batch.clone();
        };
        let d = &self.drops;
        let mut md = HashMap::from([
            (META_WINDOW_START.to_string(), start.to_string()),
            (META_WINDOW_END.to_string(), end.to_string()),
            (
                META_DROPPED_GROUPS_FULL.to_string(),
                d.groups_full.to_string(),
            ),
            (
                META_DROPPED_RINGBUF_FULL.to_string(),
                d.ringbuf_full.to_string(),
            ),
            (
                META_DROPPED_DISTINCT_FULL.to_string(),
                d.distinct_full.to_string(),
            ),
        ]);
        if let Some((have, full)) = panes {
            md.insert(META_WINDOW_PANES.to_string(), format!("{have}/{full}"));
        }
        let schema = Arc::new(self.batch.schema_ref().as_ref().clone().with_metadata(md));
        self.batch
            .clone()
            .with_schema(schema)
            .expect("only the metadata differs")
    }

    /// The rows without the window columns (`window_start`, `window_end`)
    /// when the window has bounds: what tables show under the window's heading.
    pub fn rows_without_bounds(&self) -> RecordBatch {
        match self.bounds {
            Some(_) if self.batch.num_columns() >= 2 => self
                .batch
                .project(&(2..self.batch.num_columns()).collect::<Vec<_>>())
                .expect("columns in range"),
            _ => self.batch.clone(),
        }
    }
}

/// Why a sink failed, for people: what it was doing and the cause.
#[derive(Debug, thiserror::Error)]
#[error("{what}: {cause}")]
pub struct SinkError {
    /// What the sink was doing, e.g. `writing /tmp/x/part-0001.parquet`.
    pub what: String,
    /// The underlying error, as text.
    pub cause: String,
}

impl SinkError {
    /// An error while doing `what`.
    pub fn new(what: impl Into<String>, cause: impl std::fmt::Display) -> SinkError {
        SinkError {
            what: what.into(),
            cause: cause.to_string(),
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

/// Runs `q` into `sink` until `stop()` says so or the query ends, then
/// stops the query, writes the last window and finishes the sink (also when
/// a write failed: the first error is returned after `finish`).
///
/// Errors: the query's own failure, else the sink's first error.
pub fn drive(
    mut q: RunningQuery,
    info: &QueryInfo,
    sink: &mut dyn Sink,
    mut stop: impl FnMut() -> bool,
) -> Result<QueryStats, crate::Error> {
    let rx = q.take_windows().expect("windows of a fresh query");
    // On an error here `q` is dropped, which detaches the probe.
    sink.open(info).map_err(crate::Error::Sink)?;
    let mut first_err: Option<SinkError> = None;
    let mut last_progress = std::time::Instant::now();
    while first_err.is_none() && !stop() && !q.is_finished() {
        let wrote = match rx.recv_timeout(Duration::from_millis(50)) {
            Ok(window) => {
                first_err = sink.write(&window).err();
                true
            }
            Err(RecvTimeoutError::Timeout) => false,
            Err(RecvTimeoutError::Disconnected) => break,
        };
        if first_err.is_none() && (wrote || last_progress.elapsed() >= PROGRESS_INTERVAL) {
            last_progress = std::time::Instant::now();
            first_err = sink.progress(&q.stats()).err();
        }
    }
    let stats = q.stop();
    // The last window arrives after stop.
    for window in rx.try_iter() {
        if first_err.is_none() {
            first_err = sink.write(&window).err();
        }
    }
    let stats = stats?;
    let finished = sink.finish(&stats);
    match first_err.or(finished.err()) {
        Some(e) => Err(crate::Error::Sink(e)),
        None => Ok(stats),
    }
}
