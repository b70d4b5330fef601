//! `ebql query`: a query run into a sink until --duration, Ctrl-C or
//! SIGTERM, with the losses and final counters on stderr.

use super::common::{interrupt_flag, Busy};
use ebql::sink::{self, QueryInfo, Sink, SinkError, WindowBatch};
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
    drive_to_end(sql, q, sink, || {
        duration.is_some_and(|d| started.elapsed() >= d) || interrupted.load(Ordering::Relaxed)
    })?;
    Ok(())
}

/// Runs a query into a sink until `done()` (or the query ends by itself),
/// warning about windows that lost events, then reports its stats on stderr.
/// A reader that closed our stdout (`| head`) ends the run quietly.
pub(super) fn drive_to_end(
    sql: &str,
    q: RunningQuery,
    sink: Box<dyn Sink>,
    done: impl FnMut() -> bool,
) -> Result<QueryStats, Error> {
    let info = QueryInfo::of(sql, &q);
    let stats = match sink::drive(q, &info, &mut DropWarnings(sink), done) {
        Err(Error::Sink(e)) if e.cause == sink::READER_GONE => return Ok(QueryStats::default()),
        r => r?,
    };
    note!("ebql: stats {}", stats.to_json());
    if stats.events_dropped() > 0 {
        note!(
            "ebql: warning: {} events were not recorded ({} group table full, {} ring buffer full, {} values not in the COUNT(DISTINCT) set: set full, {} skipped by the kernel while another BPF program ran)",
            stats.events_dropped(), stats.dropped_groups_full, stats.dropped_ringbuf_full, stats.dropped_distinct_full, stats.bpf_recursion_misses
        );
    }
    Ok(stats)
}

/// A sink that says on stderr, next to the rows, when a window did not record all its events.
struct DropWarnings(Box<dyn Sink>);

impl Sink for DropWarnings {
    fn open(&mut self, info: &QueryInfo) -> Result<(), SinkError> {
        self.0.open(info)
    }

    fn write(&mut self, w: &WindowBatch) -> Result<(), SinkError> {
        let d = w.drops;
        if d.query_total() > 0 {
            let start = w.bounds.map(|b| b.start.to_string()).unwrap_or_default();
            note!(
                "ebql: warning: the window starting at {start} is missing {} events ({} group table full: raise --max-groups; {} ring buffer full; {} COUNT(DISTINCT) set full: raise --max-distinct)",
                d.query_total(), d.groups_full, d.ringbuf_full, d.distinct_full
            );
        }
        self.0.write(w)
    }

    fn finish(&mut self, stats: &QueryStats) -> Result<(), SinkError> {
        self.0.finish(stats)
    }

    fn progress(&mut self, stats: &QueryStats) -> Result<(), SinkError> {
        self.0.progress(stats)
    }
}
