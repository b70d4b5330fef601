//! `ebql query`: a query run into a sink until --duration, Ctrl-C,
//! SIGTERM or the end of its command (`-c`), with the losses and final counters on stderr. The output
//! format is checked against the query's result schema after compiling,
//! before anything attaches.

use super::args::{EngineArgs, PartialArgs, TargetArgs};
use super::common::{interrupt_flag, Busy, Failure};
use super::input::{parse_duration, QueryText};
use ebql::sink::table::{self, WallClock};
use ebql::sink::{self, Format, QueryInfo, Sink, SinkError, WindowBatch, WindowKind};
use ebql::{Error, Executor, ExecutorOptions, QueryStats, RunningQuery};
use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// `ebql query`'s arguments.
#[derive(clap::Args)]
pub(super) struct QueryArgs {
    /// Output format.
    #[arg(short, long, value_enum, default_value = "table")]
    format: Format,
    /// Stop after this long: 5 or 5s, 500ms, 2m, 1m30s; a bare number is
    /// seconds (default: until Ctrl-C).
    #[arg(short, long, value_name = "DURATION", value_parser = parse_duration)]
    duration: Option<Duration>,
    /// Write results to FILE instead of stdout. Parquet: a directory of
    /// rolled files, or one file if FILE ends in .parquet. Arrow: the IPC
    /// file format for FILE.arrow, the stream format otherwise (FILE.arrows).
    /// kafka://HOST:PORT/TOPIC: a Kafka topic, with --format arrow or json.
    #[arg(short, long, value_name = "FILE")]
    output: Option<PathBuf>,
    /// Only results: no program id, planner note or stats line on stderr
    /// (warnings about lost events or failed windows, and errors, still are).
    #[arg(short, long)]
    quiet: bool,
    #[command(flatten)]
    sql: QueryText,
    #[command(flatten)]
    target: TargetArgs,
    /// Parquet directories: start a new file after this many rows (default: no limit).
    #[arg(long, value_name = "N")]
    roll_rows: Option<u64>,
    /// Parquet directories: start a new file once one reaches this many bytes (0: no limit).
    #[arg(long, value_name = "BYTES", default_value_t = 128 << 20)]
    roll_bytes: u64,
    /// Parquet directories: start a new file after this many seconds (0: no limit).
    #[arg(long, value_name = "SECONDS", default_value_t = 600)]
    roll_seconds: u64,
    #[command(flatten)]
    engine: EngineArgs,
    #[command(flatten)]
    partial: PartialArgs,
    /// Attach the query's probes with programs that return at once: the
    /// same hooks (and pid scope, USDT semaphores), nothing recorded; the
    /// stats' events_seen counts the hits. What the hooks alone cost
    /// (README "Modes": active).
    #[arg(long)]
    attach_only: bool,
}

/// Says on stderr when the cost rule moved the query's aggregate to user
/// space (the kernel is what users expect; `explain --rates` has the numbers).
/// With `--align-windows` and time windows: what the host's clock promises
/// about lining its windows up with other hosts' ([`ebql::clock_sync`]).
pub(super) fn note_clock_sync(q: &RunningQuery, align: bool) {
    let time = matches!(
        q.window(),
        Some(ebql_compiler::prepass::WindowSpec::Time { .. })
    );
    if align && time {
        match ebql::clock_sync::ClockSync::read() {
            Ok(sync) => note!("ebql: windows end on wall-clock multiples of their step; {sync}"),
            Err(e) => note!("ebql: windows end on wall-clock multiples of their step; the clock's error is unknown (adjtimex: {e})"),
        }
    }
}

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

/// Runs a query into its sink until --duration, Ctrl-C or SIGTERM. The
/// format and output are refused (exit 2) before anything attaches when
/// they cannot take the query's results.
pub(super) fn run_query(a: QueryArgs) -> Result<(), Failure> {
    let sql = a.sql.read()?;
    sink::check_output(
        a.format,
        a.output.as_deref(),
        std::io::stdout().is_terminal(),
    )?;
    let mut opts = ExecutorOptions {
        attach_only: a.attach_only,
        ..a.engine.options()
    };
    a.partial.apply(&mut opts);
    // A command is started now, stopped before its exec, and released once attached.
    let mut command = a.target.apply(&mut opts)?;
    let roll = sink::parquet::Roll {
        rows: a.roll_rows.filter(|&n| n > 0),
        bytes: Some(a.roll_bytes).filter(|&n| n > 0),
        age: Some(Duration::from_secs(a.roll_seconds)).filter(|d| !d.is_zero()),
    };
    let interrupted = interrupt_flag()?;
    let mut ex = Executor::with_options(opts);
    let busy = |what: &'static str| (!a.quiet).then(|| Busy::start(what));
    let compiled = {
        let _busy = busy("compiling");
        ex.compile(&sql)?
    };
    sink::check_format(a.format, &ebql::executor::result_schema(&compiled))?;
    let sink =
        sink::for_format(a.format, a.output, &sink::SinkOptions { roll }).map_err(Error::Sink)?;
    let q = {
        let _busy = busy("loading and attaching");
        ex.start(compiled)?
    };
    if !a.quiet {
        note!("ebql: attached (program id {})", q.prog_id());
        note_placement(&q);
        note_clock_sync(&q, a.engine.align_windows || a.partial.partial);
    }
    if let Some(c) = command.as_mut() {
        c.release()?;
    }
    let started = Instant::now();
    let duration = a.duration;
    let stats = drive_to_end(&sql, q, sink, a.quiet, || {
        duration.is_some_and(|d| started.elapsed() >= d)
            || interrupted.load(Ordering::Relaxed)
            || command.as_mut().is_some_and(|c| c.try_wait().is_some())
    })?;
    // Exit code 4: the run ended, but some windows failed.
    match Error::windows_failed(stats.windows_failed, stats.windows_emitted) {
        Some(e) => Err(e.into()),
        None => Ok(()),
    }
}

/// Runs a query into a sink until `done()` (or the query ends by itself),
/// warning about windows that lost events or failed, then reports its stats on stderr
/// (unless `quiet`): also when the run ends with an error (a sink that
/// failed, the query failing), not when the sink could not open (the query
/// did not run). A reader that closed our stdout (`| head`) ends the run
/// without an error.
pub(super) fn drive_to_end(
    sql: &str,
    q: RunningQuery,
    sink: Box<dyn Sink>,
    quiet: bool,
    done: impl FnMut() -> bool,
) -> Result<QueryStats, Error> {
    let info = QueryInfo::of(sql, &q);
    let (stats, ended) = match sink::drive(q, &info, &mut DropWarnings::new(sink), done) {
        Ok(stats) => (Some(stats), Ok(())),
        Err(e) => (e.stats.map(|s| *s), Err(e.error)),
    };
    if let Some(stats) = &stats {
        if !quiet {
            note!("ebql: stats {}", stats.to_json());
        }
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
        self.clock = info.clock;
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
