//! Where results go: one contract for every sink (terminal formats, files,
//! Prometheus, Kafka, …), one module per sink.
//!
//! A sink is opened once with what it needs to know about the query
//! ([`QueryInfo`]: the SQL, the result schema, the window kind), receives
//! every closed window as a [`WindowBatch`] (its rows as one Arrow record
//! batch, its bounds as typed values, the events it lost), and is finished
//! once with the run's [`QueryStats`] — also on Ctrl-C/SIGTERM, so files are
//! closed properly. [`drive`] runs a query into a sink until told to stop.

pub mod arrow_ipc;
pub mod parquet;

use std::sync::mpsc::RecvTimeoutError;
use std::time::Duration;

use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;

use crate::executor::{QueryStats, RunningQuery, WindowDrops, META_WINDOW_END, META_WINDOW_PANES, META_WINDOW_START};

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
        WindowBatch { batch, bounds, drops }
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
        SinkError { what: what.into(), cause: cause.to_string() }
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
}

/// Runs `q` into `sink` until `stop()` says so or the query ends, then
/// stops the query, writes the last window and finishes the sink (also when
/// a write failed: the first error is returned after `finish`).
///
/// Errors: the query's own failure, else the sink's first error.
pub fn drive(mut q: RunningQuery, info: &QueryInfo, sink: &mut dyn Sink, mut stop: impl FnMut() -> bool) -> Result<QueryStats, crate::Error> {
    let rx = q.take_receiver().expect("receiver of a fresh query");
    sink.open(info).map_err(crate::Error::Sink)?;
    let mut first_err: Option<SinkError> = None;
    while first_err.is_none() && !stop() && !q.is_finished() {
        match rx.recv_timeout(Duration::from_millis(50)) {
            Ok(batch) => first_err = sink.write(&WindowBatch::from_batch(batch)).err(),
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => break,
        }
    }
    let stats = q.stop();
    // The last window arrives after stop.
    for batch in rx.try_iter() {
        if first_err.is_none() {
            first_err = sink.write(&WindowBatch::from_batch(batch)).err();
        }
    }
    let stats = stats?;
    let finished = sink.finish(&stats);
    match first_err.or(finished.err()) {
        Some(e) => Err(crate::Error::Sink(e)),
        None => Ok(stats),
    }
}
