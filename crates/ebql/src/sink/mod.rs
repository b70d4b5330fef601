//! Where results go: one contract for every sink (terminal formats, files,
//! Prometheus, Kafka, …), one module per sink.
//!
//! A sink is opened once with what it needs to know about the query
//! ([`QueryInfo`]: the SQL, the result schema, the window kind), receives
//! every closed window as a [`WindowBatch`] (its rows as one Arrow record
//! batch, its bounds as typed values, the events it lost), and is finished
//! once with the run's [`QueryStats`] — also on Ctrl-C/SIGTERM, so files are
//! closed properly. [`drive`] runs a query into a sink until told to stop.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::sync::mpsc::RecvTimeoutError;
use std::time::Duration;

use arrow::datatypes::SchemaRef;

use crate::executor::RunningQuery;
use crate::window::QueryStats;

pub mod arrow_ipc;
pub mod contract;
pub mod csv;
pub mod file_schema;
pub mod folded;
pub mod kafka;
pub mod live;
pub mod ndjson;
pub mod null;
pub mod parquet;
pub mod prometheus;
pub mod table;
pub mod wall_clock;

pub use crate::window::{WindowBatch, WindowBounds};
pub use contract::{
    Format, FormatRefused, QueryInfo, Sink, SinkError, TextOutput, WindowKind, PROGRESS_INTERVAL,
    READER_GONE,
};

/// Settings of the sinks that need more than a destination.
#[derive(Debug, Clone, Copy, Default)]
pub struct SinkOptions {
    /// When a Parquet directory starts a new file.
    pub roll: parquet::Roll,
}

/// Refuses a format that cannot show a query's results (schema as
/// [`crate::executor::result_schema`] gives it before the query attaches):
/// `csv` a column it cannot write even as JSON text, `folded` a result
/// without a stack (string) column or without exactly one integer count.
pub fn check_format(format: Format, schema: &SchemaRef) -> Result<(), FormatRefused> {
    match format {
        Format::Csv => csv::check_schema(schema),
        Format::Folded => folded::check_schema(schema),
        Format::Table
        | Format::Json
        | Format::Live
        | Format::Parquet
        | Format::Arrow
        | Format::Null => Ok(()),
    }
}

/// Refuses a destination a format cannot write to, before anything runs:
/// Parquet without `--output`, a binary format (Arrow, Parquet) to stdout
/// when `stdout_is_terminal`. Kafka outputs are checked when they connect.
pub fn check_output(
    format: Format,
    output: Option<&Path>,
    stdout_is_terminal: bool,
) -> Result<(), FormatRefused> {
    match (format, output) {
        (Format::Parquet, None) => Err(FormatRefused {
            problem: "--format parquet writes files, not stdout".into(),
            hint: "use -o FILE.parquet (one file) or -o DIR (rolled files)".into(),
        }),
        (f, None) if f.is_binary() && stdout_is_terminal => Err(FormatRefused {
            problem: format!("--format {} is binary and stdout is a terminal", f.name()),
            hint: "use -o FILE or a pipe (`| python3 …`)".into(),
        }),
        _ => Ok(()),
    }
}

/// The sink for `format` writing to `output` (text formats: a file created
/// when the sink opens; `kafka://HOST:PORT/TOPIC`: a Kafka topic, the
/// format choosing the payload) or to stdout. One match arm per sink.
///
/// Errors: Parquet without `--output` ([`check_output`] says it first); an
/// Arrow IPC file that cannot be created; a Kafka broker that does not
/// answer or a format it cannot carry.
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
                let layout = arrow_ipc::Layout::for_path(&p);
                let f = std::fs::File::create(&p)
                    .map_err(|e| SinkError::new(format!("creating {}", p.display()), e))?;
                Box::new(arrow_ipc::ArrowIpcSink::with_layout(
                    Box::new(std::io::BufWriter::new(f)),
                    p.display().to_string(),
                    layout,
                ))
            }
            None => Box::new(arrow_ipc::ArrowIpcSink::new(
                Box::new(std::io::stdout()),
                "stdout",
            )),
        },
    })
}

/// A run [`drive`] ended with an error.
#[derive(Debug)]
pub struct DriveError {
    /// The query's own failure, else the sink's first error.
    pub error: crate::Error,
    /// The query's counters when it stopped (what it counted until the
    /// failure); `None` when the sink could not open, so the query never ran.
    pub stats: Option<Box<QueryStats>>,
}

impl From<DriveError> for crate::Error {
    fn from(e: DriveError) -> crate::Error {
        e.error
    }
}

/// Runs `q` into `sink` until `stop()` says so or the query ends, then
/// stops the query, writes the last window and finishes the sink (also when
/// a write failed or the query failed: the first error is returned after
/// `finish`, with the counters).
///
/// Errors: the sink did not open (no counters: the query did not run,
/// unless the reader of the pipe left, [`READER_GONE`]); the query's own
/// failure, else the sink's first error (with the counters).
pub fn drive(
    mut q: RunningQuery,
    info: &QueryInfo,
    sink: &mut dyn Sink,
    mut stop: impl FnMut() -> bool,
) -> Result<QueryStats, DriveError> {
    let rx = q.take_windows().expect("windows of a fresh query");
    // On an error here `q` is dropped, which detaches the probe. A reader
    // that left while the sink opened (`| head -c 100` of the Arrow schema)
    // ends a run that did attach: its counters go with the error.
    sink.open(info).map_err(|e| DriveError {
        stats: (e.cause == READER_GONE).then(|| Box::new(q.stats())),
        error: crate::Error::Sink(e),
    })?;
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
    // A query that failed stops with an error, not its counters: read them
    // from the shared cell, which holds what it counted until then.
    let counters = q.stats_source();
    let stopped = q.stop();
    let stats = stopped.as_ref().map_or_else(|_| counters(), |s| *s);
    // The last window arrives after stop.
    for window in rx.try_iter() {
        if first_err.is_none() {
            first_err = sink.write(&window).err();
        }
    }
    let finished = sink.finish(&stats);
    let error = match stopped {
        Err(e) => Some(e),
        Ok(_) => first_err.or(finished.err()).map(crate::Error::Sink),
    };
    match error {
        Some(error) => Err(DriveError {
            error,
            stats: Some(Box::new(stats)),
        }),
        None => Ok(stats),
    }
}
