//! `ebql query`: a query run into a sink until --duration, Ctrl-C or
//! SIGTERM, with the losses and final counters on stderr.

use super::common::{interrupt_flag, Busy};
use ebql::sink::table::{self, WallClock};
use ebql::sink::{self, QueryInfo, Sink, SinkError, WindowBatch, WindowKind};
use ebql::{Error, Executor, ExecutorOptions, QueryStats, RunningQuery};
use std::io::Write;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// Says on stderr when the cost rule moved the query's aggregate to user
/// space (the kernel is what users expect; `explain --rates` has the numbers).
pub(super) fn note_placement(q: &RunningQuery) {
    if let Some(d) = q
        .placement()
        .filter(|d| d.chosen == ebql_compiler::choose::Placement::User)
    {
        note!(
            "ebql: aggregating in user space over streamed rows: {}",
            d.why
        );
    }
}

/// Runs a query into `sink` until --duration, Ctrl-C or SIGTERM.
pub(super) fn run_query(
    sql: &str,
    sink: Box<dyn Sink>,
    duration: Option<Duration>,
    opts: ExecutorOptions,
) -> Result<(), Error> {
    let interrupted = interrupt_flag()?;
    let mut ex = Executor::with_options(opts);
    let q = {
        let _busy = Busy::start("compiling, loading and attaching");
        ex.execute(sql)?
    };
    note!("ebql: attached (program id {})", q.prog_id());
    note_placement(&q);
    let started = Instant::now();
    let stats = drive_to_end(sql, q, sink, || {
        duration.is_some_and(|d| started.elapsed() >= d) || interrupted.load(Ordering::Relaxed)
    })?;
    // Exit code 4: the run ended, but some windows failed.
    match Error::windows_failed(stats.windows_failed, stats.windows_emitted) {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// Runs a query into a sink until `done()` (or the query ends by itself),
/// warning about windows that lost events or failed, then reports its stats on stderr:
/// also when the run ends with an error (a sink that failed, the query
/// failing), not when the sink could not open (the query did not run).
/// A reader that closed our stdout (`| head`) ends the run without an error.
pub(super) fn drive_to_end(
    sql: &str,
    q: RunningQuery,
    sink: Box<dyn Sink>,
    done: impl FnMut() -> bool,
) -> Result<QueryStats, Error> {
    let info = QueryInfo::of(sql, &q);
    let (stats, ended) = match sink::drive(q, &info, &mut DropWarnings::new(sink), done) {
        Ok(stats) => (Some(stats), Ok(())),
        Err(e) => (e.stats.map(|s| *s), Err(e.error)),
    };
    if let Some(stats) = &stats {
        note!("ebql: stats {}", stats.to_json());
        if let Some(warning) = stats.drop_warning() {
            note!("ebql: warning: {warning}");
        }
        if let Some(warning) = stats.failure_warning() {
            note!("ebql: warning: {warning}");
        }
    }
    match ended {
        Err(Error::Sink(e)) if e.cause != sink::READER_GONE => Err(Error::Sink(e)),
        Err(Error::Sink(_)) | Ok(()) => Ok(stats.unwrap_or_default()),
        Err(e) => Err(e),
    }
}

/// A sink that says on stderr, next to the rows, when a window (or, without
/// a WINDOW clause, an output) did not record all its events, or failed
/// (every format, also those that cannot show the error in their output).
struct DropWarnings {
    sink: Box<dyn Sink>,
    window: WindowKind,
    clock: WallClock,
}

impl DropWarnings {
    fn new(sink: Box<dyn Sink>) -> DropWarnings {
        DropWarnings {
            sink,
            window: WindowKind::None,
            clock: WallClock::now(),
        }
    }
}

impl Sink for DropWarnings {
    fn open(&mut self, info: &QueryInfo) -> Result<(), SinkError> {
        self.window = info.window;
        self.sink.open(info)
    }

    fn write(&mut self, w: &WindowBatch) -> Result<(), SinkError> {
        if let Some(warning) = table::drop_warning(self.window, &self.clock, w) {
            note!("ebql: warning: {warning}");
        }
        if let Some(failed) = table::failure_line(self.window, &self.clock, w) {
            note!("ebql: warning: {failed}");
        }
        self.sink.write(w)
    }

    fn finish(&mut self, stats: &QueryStats) -> Result<(), SinkError> {
        self.sink.finish(stats)
    }

    fn progress(&mut self, stats: &QueryStats) -> Result<(), SinkError> {
        self.sink.progress(stats)
    }
}
