//! `ebql`: the command-line front end. Thin: everything lives in the library.
//!
//! Exit codes: 0 ok, 1 runtime failure, 2 bad query.

use clap::{Parser, Subcommand};
use ebql::sink::{self, Format, QueryInfo, Sink, SinkError, WindowBatch};
use ebql::{Error, Executor, ExecutorOptions, QueryStats, RunningQuery};
use ebql_compiler::choose::AggregateChoice;
use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(Parser)]
#[command(
    name = "ebql",
    version,
    about = "Streaming SQL over Linux kernel events, compiled to eBPF"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run a query; prints each window's rows as it closes.
    Query {
        /// Output format.
        #[arg(long, value_enum, default_value = "table")]
        format: Format,
        /// Stop after this many seconds (default: until Ctrl-C).
        #[arg(long)]
        duration: Option<f64>,
        /// Write results to this file instead of stdout (parquet: a directory
        /// of rolled files, or one file if the path ends in `.parquet`;
        /// `kafka://HOST:PORT/TOPIC`: a Kafka topic, with --format arrow or json).
        #[arg(long)]
        output: Option<PathBuf>,
        /// Parquet directories: start a new file after this many rows (default: no limit).
        #[arg(long)]
        roll_rows: Option<u64>,
        /// Parquet directories: start a new file once one reaches this many bytes (0: no limit).
        #[arg(long, default_value_t = 128 << 20)]
        roll_bytes: u64,
        /// Parquet directories: start a new file after this many seconds (0: no limit).
        #[arg(long, default_value_t = 600)]
        roll_seconds: u64,
        #[command(flatten)]
        engine: EngineArgs,
        /// Attach the query's probes with programs that return at once: the
        /// same hooks (and pid scope, USDT semaphores), nothing recorded; the
        /// stats' events_seen counts the hits. What the hooks alone cost
        /// (README "Modes": active).
        #[arg(long)]
        attach_only: bool,
        /// The query, e.g. "SELECT fd, COUNT(*) FROM tracepoint/syscalls/sys_enter_pread64 GROUP BY fd WINDOW(time, 1000, 1000)".
        /// May start with a `-- comment`.
        #[arg(allow_hyphen_values = true)]
        sql: String,
    },
    /// Run a query under the differential oracle: each window is computed by
    /// the kernel plan and, from the same events, by DataFusion over the raw
    /// events; the two are compared. Exit code 3 if any window disagrees.
    Check {
        /// Stop after this many seconds (default: until Ctrl-C).
        #[arg(long)]
        duration: Option<f64>,
        /// Start the built-in 2-thread pread64 workload for the duration and
        /// put its pid where the query says `$pid`. It is paced to 20,000
        /// calls/s per thread so the reference (which sees every event) keeps up.
        #[arg(long)]
        workload: bool,
        #[command(flatten)]
        limits: LimitArgs,
        #[command(flatten)]
        plan: PlanArgs,
        #[command(flatten)]
        stats: BpfStatsArg,
        /// Relative tolerance for floating-point results.
        #[arg(long, default_value_t = 1e-9)]
        tolerance: f64,
        /// Instead of the oracle: run the query briefly (2 s unless --duration)
        /// with bpf_stats on for the run, and print the cost model's predicted
        /// ns per run next to the measured one, and ebql's CPU. Runs on the
        /// built-in workload (`$pid` is its pid) unless --machine.
        #[arg(long)]
        cost: bool,
        /// With --cost: measure on the machine's own events (no workload).
        #[arg(long, requires = "cost")]
        machine: bool,
        /// With --cost: exit 1 when the predicted run time is off by more
        /// than this many percent (default: report only).
        #[arg(long, requires = "cost", value_name = "PERCENT")]
        max_error: Option<f64>,
        /// The query.
        sql: String,
    },
    /// Measure the cost model's per-operation costs on this machine (≈ 15 s;
    /// turns bpf_stats on for a few seconds) and cache them for the planner,
    /// `explain` and `check --cost`.
    Calibrate {
        /// Print the cached model (or the built-in defaults) instead of measuring.
        #[arg(long)]
        show: bool,
        /// Interleaved rounds per measurement (medians over them).
        #[arg(long, default_value_t = 5)]
        rounds: usize,
    },
    /// Serve queries' latest windows as Prometheus metrics at http://ADDR/metrics
    /// (group keys as labels, COUNT/SUM totals as counters, other values as
    /// gauges, HIST/LHIST as histograms, plus eBQL's own counters).
    Serve(ServeArgs),
    /// Re-issue SQL statements captured to Parquet (`ebql query --format
    /// parquet`) against a PostgreSQL database: one connection per captured
    /// backend, capture order, optionally the capture's pace; reports errors
    /// and latency against the capture. Exit code 3 if a statement failed in
    /// the replay but not in the capture, or the other way round.
    Replay(ReplayArgs),
    /// Show the plan, the kernel/user split, the generated BPF and its predicted cost.
    Explain {
        /// Sample the query's event rates for 150 ms (runs the query and a
        /// counter at its hooks; needs root) to predict CPU per second and the
        /// cost put on untraced work.
        #[arg(long)]
        rates: bool,
        #[command(flatten)]
        plan: PlanArgs,
        /// The query (may start with a `-- comment`).
        #[arg(allow_hyphen_values = true)]
        sql: String,
    },
    /// List events (tracepoints), optionally filtered by a glob on category:name.
    Events { glob: Option<String> },
    /// Show an event's columns: tracepoint fields and system attributes.
    Describe { event: String },
    /// Run the thesis' Figure 12 query against a built-in pread64 workload.
    Demo {
        /// Seconds to run.
        #[arg(long, default_value_t = 5)]
        seconds: u64,
        #[command(flatten)]
        stats: BpfStatsArg,
    },
    /// Workload processes for tests and benchmarks.
    #[command(hide = true, trailing_var_arg = true)]
    Workload {
        #[arg(allow_hyphen_values = true)]
        args: Vec<String>,
    },
}

/// Writes a line to stderr; a closed stderr must not turn into a panic.
macro_rules! note {
    ($($arg:tt)*) => {{
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}

fn main() {
    let cli = Cli::parse();
    if matches!(
        cli.cmd,
        Cmd::Events { .. } | Cmd::Describe { .. } | Cmd::Explain { .. }
    ) {
        // Listings piped into `head` end quietly when the reader goes away, as
        // `ls | head` does. Only these: they hold nothing attached and write
        // nothing but stdout (queries and the Prometheus server must see EPIPE
        // as an error, not die of the signal).
        // SAFETY: resetting a signal's disposition before any thread exists.
        unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    }
    let code = match cli.cmd {
        Cmd::Replay(args) => replay(args),
        cmd => match run(cmd) {
            Ok(()) => 0,
            Err(e) => {
                let _ = write!(std::io::stderr(), "{}", e.render());
                e.exit_code()
            }
        },
    };
    std::process::exit(code);
}

fn run(cmd: Cmd) -> Result<(), Error> {
    match cmd {
        Cmd::Query {
            format,
            duration,
            output,
            roll_rows,
            roll_bytes,
            roll_seconds,
            engine,
            attach_only,
            sql,
        } => {
            let opts = ExecutorOptions {
                attach_only,
                ..engine.options()
            };
            let roll = sink::parquet::Roll {
                rows: roll_rows.filter(|&n| n > 0),
                bytes: Some(roll_bytes).filter(|&n| n > 0),
                age: Some(Duration::from_secs(roll_seconds)).filter(|d| !d.is_zero()),
            };
            let sink = sink::for_format(format, output, &sink::SinkOptions { roll })
                .map_err(Error::Sink)?;
            run_query(&sql, sink, duration.map(Duration::from_secs_f64), opts)
        }
        Cmd::Check {
            duration,
            limits,
            plan,
            cost: true,
            machine,
            max_error,
            sql,
            ..
        } => check_cost(&sql, duration, machine, limits, plan, max_error),
        Cmd::Check {
            duration,
            workload,
            limits,
            plan,
            stats,
            tolerance,
            sql,
            ..
        } => check(&sql, duration, workload, limits, plan, stats, tolerance),
        Cmd::Calibrate { show, rounds } => calibrate(show, rounds),
        Cmd::Serve(args) => serve(args),
        Cmd::Explain { rates, plan, sql } => {
            let mut opts = ExecutorOptions::default();
            plan.apply(&mut opts);
            let mut ex = Executor::with_options(opts.clone());
            let mut q = ex.compile_for_explain(&sql)?;
            let missing: Vec<String> = q
                .code
                .programs
                .iter()
                .filter_map(|p| {
                    ebql_runtime::features::missing(p.event.kind).map(|(_, why)| {
                        format!(
                            "note: {} cannot run on this kernel: {why}; {}",
                            p.event,
                            p.event.kind.alternative()
                        )
                    })
                })
                .collect();
            let loaded = ebql::cost::load();
            if let Some(why) = &loaded.ignored {
                note!("ebql: cost model: ignored {why}");
            }
            let cpus = ebql_runtime::num_possible_cpus().unwrap_or(1);
            let rates = if rates && missing.is_empty() {
                let _busy = Busy::start("sampling the query's event rates");
                let rates = ebql::cost::rates::sample(&sql, &q, &opts, Duration::from_millis(150))?;
                // With rates, the aggregate's place is weighed as a query run would.
                q = ex.place_aggregate(&sql, q, &rates)?;
                rates
            } else {
                ebql_compiler::cost::Rates::unknown(cpus)
            };
            print!("{}", ebql_compiler::explain::explain(&q));
            for m in &missing {
                println!("{m}");
            }
            let alternatives = q
                .placement
                .as_ref()
                .map(|d| d.alternatives())
                .unwrap_or_default();
            let prediction = match alternatives.iter().find(|a| a.chosen) {
                Some(a) => a.prediction.clone(),
                None => ebql_compiler::cost::predict(&loaded.model, &q, &rates),
            };
            print!(
                "\n{}",
                ebql_compiler::explain::cost_section(
                    &loaded.model,
                    &prediction,
                    &rates,
                    &alternatives
                )
            );
            Ok(())
        }
        Cmd::Events { glob } => {
            let mut ex = Executor::new();
            for e in ex
                .catalog()?
                .list(glob.as_deref())
                .map_err(Error::Catalog)?
            {
                println!("{e}");
            }
            Ok(())
        }
        Cmd::Describe { event } => describe(&event),
        Cmd::Demo { seconds, stats } => demo(seconds, stats),
        Cmd::Workload { args } => {
            let code = ebql_workload::cli::cli_main(&args);
            std::process::exit(code);
        }
        Cmd::Replay(_) => unreachable!("main runs replay"),
    }
}

/// `ebql replay`'s arguments.
#[derive(clap::Args)]
struct ReplayArgs {
    /// Parquet files, or directories of them (read in name order).
    #[arg(required = true)]
    files: Vec<PathBuf>,
    /// The database: postgresql://USER@HOST:PORT/DBNAME (a Unix socket
    /// directory percent-encoded as HOST) or "host=/dir port=5432 user=U dbname=D". No TLS.
    #[arg(long)]
    dsn: String,
    /// 1.0: the capture's pace (inter-arrival times kept); 2.0: twice as fast;
    /// 0: as fast as the order allows.
    #[arg(long, default_value_t = 1.0)]
    speed: f64,
    /// Write one row per statement (outcome, both latencies, error) to this
    /// file: Parquet if it ends in .parquet, else CSV.
    #[arg(long)]
    report: Option<PathBuf>,
    /// Longest wait, in seconds, for a statement of another backend that
    /// finished before this one started in the capture; then it is sent anyway (and counted).
    #[arg(long, default_value_t = 10.0)]
    order_timeout: f64,
    /// The statement text column (default: query, else statement).
    #[arg(long)]
    text_column: Option<String>,
    /// The start time column, ns (default: time).
    #[arg(long)]
    time_column: Option<String>,
    /// The backend column: one connection per distinct value (default: pid).
    #[arg(long)]
    backend_column: Option<String>,
    /// The captured latency column, ns; NULL: never finished (default: latency_ns, if present).
    #[arg(long)]
    latency_column: Option<String>,
    /// The captured failure flag (default: failed, if present).
    #[arg(long)]
    failed_column: Option<String>,
    /// The flag of texts cut at the capture's bound; such statements are skipped (default: truncated, if present).
    #[arg(long)]
    truncated_column: Option<String>,
}

/// Which columns a capture was read with, for the first line of a replay.
fn describe_columns(c: &ebql::replay::capture::ResolvedColumns) -> String {
    let opt =
        |role: &str, n: &Option<String>| format!("{role} {}", n.as_deref().unwrap_or("(none)"));
    format!(
        "text {}, start time {}, backend {}, {}, {}, {}",
        c.text,
        c.time,
        c.backend,
        opt("latency", &c.latency),
        opt("failed", &c.failed),
        opt("truncated", &c.truncated)
    )
}

/// `ebql replay`: reads the capture, replays it, prints the summary; the exit code.
fn replay(a: ReplayArgs) -> i32 {
    use ebql::replay::{capture, report, run};
    let names = capture::ColumnNames {
        text: a.text_column,
        time: a.time_column,
        backend: a.backend_column,
        latency: a.latency_column,
        failed: a.failed_column,
        truncated: a.truncated_column,
    };
    let go = || -> Result<i32, ebql::replay::ReplayError> {
        if !(a.order_timeout.is_finite() && a.order_timeout >= 0.0) {
            return Err(ebql::replay::ReplayError::Usage(format!(
                "--order-timeout {}: give a number of seconds",
                a.order_timeout
            )));
        }
        let cap = capture::Capture::read(&a.files, &names)?;
        let (n, b, f) = (cap.statements.len(), cap.backends().len(), cap.files.len());
        let s = |n: usize| if n == 1 { "" } else { "s" };
        note!(
            "ebql replay: {n} statement{} of {b} backend{} from {f} file{}; columns: {}",
            s(n),
            s(b),
            s(f),
            describe_columns(&cap.columns)
        );
        let opts = run::ReplayOptions {
            dsn: a.dsn.clone(),
            speed: a.speed,
            order_timeout: Duration::from_secs_f64(a.order_timeout),
        };
        let started = Instant::now();
        let outcomes = run::replay(&cap, &opts)?;
        print!(
            "{}",
            report::summary(&cap, &outcomes, a.speed, started.elapsed())
        );
        if let Some(path) = &a.report {
            report::write_report(path, &cap, &outcomes)?;
        }
        Ok(if report::Totals::of(&cap, &outcomes).differing() > 0 {
            3
        } else {
            0
        })
    };
    match go() {
        Ok(code) => code,
        Err(e) => {
            note!("ebql replay: {e}");
            1
        }
    }
}

/// Runs a query into a file sink until --duration, Ctrl-C or SIGTERM, then finishes the sink.
fn io_err(what: String, e: std::io::Error) -> Error {
    Error::Runtime(ebql_runtime::RuntimeError::Sys { what, source: e })
}

/// Set by Ctrl-C or SIGTERM.
fn interrupt_flag() -> Result<Arc<AtomicBool>, Error> {
    let flag = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, flag.clone())
            .map_err(|e| io_err("installing signal handlers".into(), e))?;
    }
    Ok(flag)
}

/// Says on stderr when the cost rule moved the query's aggregate to user
/// space (the kernel is what users expect; `explain --rates` has the numbers).
fn note_placement(q: &RunningQuery) {
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
fn run_query(
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
fn drive_to_end(
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

/// While a set-up step runs (BTF loading, big maps, `ebql check`'s reference
/// plan), a line on stderr says what is happening and for how long, when
/// stderr is a terminal and the step takes more than [`Busy::QUIET`]; the
/// line is erased when the step ends (on drop).
struct Busy {
    done: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Busy {
    /// Steps quicker than this show nothing.
    const QUIET: Duration = Duration::from_millis(300);

    fn start(what: &'static str) -> Busy {
        use std::io::IsTerminal;
        let done = Arc::new(AtomicBool::new(false));
        let thread = std::io::stderr().is_terminal().then(|| {
            let done = done.clone();
            std::thread::spawn(move || {
                let started = Instant::now();
                let mut shown = false;
                while !done.load(Ordering::Relaxed) {
                    if started.elapsed() >= Busy::QUIET {
                        let _ = write!(
                            std::io::stderr(),
                            "\r\x1b[Kebql: {what}… {:.1}s",
                            started.elapsed().as_secs_f64()
                        );
                        shown = true;
                    }
                    std::thread::sleep(Duration::from_millis(100));
                }
                if shown {
                    let _ = write!(std::io::stderr(), "\r\x1b[K");
                }
            })
        });
        Busy { done, thread }
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.done.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Sizes of the in-kernel tables (query, check, serve).
#[derive(clap::Args, Debug, Clone, Copy)]
struct LimitArgs {
    /// Groups per window the in-kernel group table holds.
    #[arg(long, default_value_t = 10240)]
    max_groups: u32,
    /// (group, value) pairs per window the in-kernel COUNT(DISTINCT) set holds.
    #[arg(long, default_value_t = 256 << 10)]
    max_distinct: u32,
}

impl LimitArgs {
    fn apply(self, opts: &mut ExecutorOptions) {
        opts.codegen.max_groups = self.max_groups;
        opts.codegen.max_distinct = self.max_distinct;
    }
}

/// The planner's alternatives (query, check, serve, explain); README "Planning choices".
#[derive(clap::Args, Debug, Clone, Copy)]
struct PlanArgs {
    /// Hook of syscall tracepoints (`syscalls:sys_enter_<name>`/`sys_exit_<name>`):
    /// `tracefs`, `raw` (`raw_syscalls:sys_enter`/`sys_exit`, which sees every
    /// system call, with the syscall-number test first; tp_btf where the kernel
    /// has it), `raw-tp` (the same as a raw_tp program), or `auto` (by --optimize).
    #[arg(long, value_enum, default_value = "auto")]
    hook: HookArg,
    /// What `--hook auto` minimizes: `total` (CPU added per second, from
    /// the machine's sampled system-call rates), `traced` (the traced call's
    /// cost: the raw hook), `host` (the cost put on untraced system calls: tracefs).
    #[arg(long, value_enum, default_value = "total")]
    optimize: OptimizeArg,
    /// Group table of in-kernel aggregates: `auto` (a per-CPU array indexed
    /// by the keys when every key is a small bounded integer, else the hash), `hash`, `array`.
    #[arg(long, value_enum, default_value = "auto")]
    group_map: GroupMapArg,
    /// Where an aggregate the kernel can run goes: `kernel` (its group
    /// table), `user` (the kernel streams the rows, DataFusion aggregates
    /// each window), or `auto`: the query first runs for --sample-ms to
    /// sample its event rate and groups, then the cheaper by the cost model
    /// (`user` for rare events with many keys, or groups that would
    /// overflow --max-groups).
    #[arg(long, value_enum, default_value = "auto")]
    aggregate: AggregateArg,
    /// Milliseconds of sampling before automatic choices: the machine's
    /// system calls before `--optimize total` picks a hook, the query's
    /// rates before `--aggregate auto` places its aggregate (0: none; then
    /// tracefs and the kernel).
    #[arg(long, default_value_t = 100)]
    sample_ms: u64,
}

#[derive(clap::ValueEnum, Debug, Clone, Copy)]
enum AggregateArg {
    Auto,
    Kernel,
    User,
}

#[derive(clap::ValueEnum, Debug, Clone, Copy)]
enum HookArg {
    Auto,
    Tracefs,
    Raw,
    RawTp,
}

#[derive(clap::ValueEnum, Debug, Clone, Copy)]
enum OptimizeArg {
    Total,
    Traced,
    Host,
}

#[derive(clap::ValueEnum, Debug, Clone, Copy)]
enum GroupMapArg {
    Auto,
    Hash,
    Array,
}

impl PlanArgs {
    fn apply(self, opts: &mut ExecutorOptions) {
        use ebql_compiler::choose::{GroupMapChoice, HookChoice, Optimize};
        let c = &mut opts.codegen.choices;
        c.hook = match self.hook {
            HookArg::Auto => HookChoice::Auto,
            HookArg::Tracefs => HookChoice::Tracefs,
            HookArg::Raw => HookChoice::Raw,
            HookArg::RawTp => HookChoice::RawTp,
        };
        c.optimize = match self.optimize {
            OptimizeArg::Total => Optimize::Total,
            OptimizeArg::Traced => Optimize::Traced,
            OptimizeArg::Host => Optimize::Host,
        };
        c.group_map = match self.group_map {
            GroupMapArg::Auto => GroupMapChoice::Auto,
            GroupMapArg::Hash => GroupMapChoice::Hash,
            GroupMapArg::Array => GroupMapChoice::Array,
        };
        c.aggregate = match self.aggregate {
            AggregateArg::Auto => AggregateChoice::Auto,
            AggregateArg::Kernel => AggregateChoice::Kernel,
            AggregateArg::User => AggregateChoice::User,
        };
        // The hook rule reads the cost model: calibrated on this machine when
        // `ebql calibrate` has run, the built-in defaults otherwise.
        let h = ebql::cost::load().model.syscall_hook_costs();
        c.hook_costs = ebql_compiler::choose::HookCosts {
            tracefs_traced_ns: h.tracefs_traced_ns,
            tracefs_untraced_ns: h.tracefs_untraced_ns,
            raw_traced_ns: h.raw_traced_ns,
            raw_untraced_ns: h.raw_untraced_ns,
        };
        opts.sample_rates = Some(Duration::from_millis(self.sample_ms)).filter(|d| !d.is_zero());
    }
}

/// `--bpf-stats` (query, check, serve, demo).
#[derive(clap::Args, Debug, Clone, Copy)]
struct BpfStatsArg {
    /// Turn the kernel's bpf_stats on while the query runs, to report probe
    /// run time (stats: bpf_run_cnt, bpf_run_time_ns; ns per event). It is
    /// global: while it is on, every BPF program of the host (not only
    /// ours) is timed, at about 70–120 ns per run (measured, BENCHMARKS.md).
    /// Without it, run counts and run time are 0; events seen and matched
    /// are always counted by the query's own programs.
    #[arg(long)]
    bpf_stats: bool,
}

/// How queries run (query, serve): table sizes, planner choices and bpf_stats.
#[derive(clap::Args, Debug, Clone, Copy)]
struct EngineArgs {
    #[command(flatten)]
    limits: LimitArgs,
    #[command(flatten)]
    plan: PlanArgs,
    #[command(flatten)]
    stats: BpfStatsArg,
}

impl EngineArgs {
    fn options(self) -> ExecutorOptions {
        let mut opts = ExecutorOptions {
            bpf_stats: self.stats.bpf_stats,
            ..Default::default()
        };
        self.limits.apply(&mut opts);
        self.plan.apply(&mut opts);
        opts
    }
}

/// `ebql check`: prints each window's verdict as it closes, then the summary.
fn check(
    sql: &str,
    duration: Option<f64>,
    workload: bool,
    limits: LimitArgs,
    plan: PlanArgs,
    stats: BpfStatsArg,
    tolerance: f64,
) -> Result<(), Error> {
    let interrupted = interrupt_flag()?;
    let run_for = duration.map(Duration::from_secs_f64);
    let mut opts = ExecutorOptions {
        bpf_stats: stats.bpf_stats,
        ..Default::default()
    };
    limits.apply(&mut opts);
    plan.apply(&mut opts);
    let mut ex = Executor::with_options(opts);
    let (sql, mut load) = if workload {
        let secs = duration.unwrap_or(5.0);
        let w = PreadWorkload::start(secs, Some(CHECK_WORKLOAD_RATE))?;
        (
            sql.replace("$pid", &w.pid.to_string())
                .replace("$PID", &w.pid.to_string()),
            Some(w),
        )
    } else {
        (sql.to_string(), None)
    };
    let run_for = run_for.or(load.as_ref().map(|_| Duration::from_secs(5)));
    let mut c = {
        let _busy = Busy::start("compiling the query and its reference, loading and attaching");
        ex.check(
            &sql,
            ebql::check::CheckOptions {
                float_tolerance: tolerance,
            },
        )?
    };
    note!("ebql check: attached; kernel plan and reference evaluated on the same events, window by window");
    if let Some(w) = load.as_mut() {
        w.open_gate()?;
    }
    let started = Instant::now();
    let mut shown = 0usize;
    let print = |i: usize, w: &ebql::check::WindowResult| match &w.verdict {
        ebql::check::Verdict::Agree => println!("window {}: agree ({} rows)", i + 1, w.kernel_rows),
        ebql::check::Verdict::Disagree { diff } => println!(
            "window {}: DISAGREE (kernel {} rows, reference {} rows)\n{diff}",
            i + 1,
            w.kernel_rows,
            w.reference_rows
        ),
        ebql::check::Verdict::Inconclusive { reason } => {
            println!("window {}: inconclusive: {reason}", i + 1)
        }
    };
    while run_for.is_none_or(|d| started.elapsed() < d)
        && !interrupted.load(Ordering::Relaxed)
        && !c.is_finished()
    {
        if let Some(w) = c.next_window(Duration::from_millis(50)) {
            print(shown, &w);
            shown += 1;
        }
    }
    let report = c.stop()?;
    for (i, w) in report.windows.iter().enumerate().skip(shown) {
        print(i, w);
    }
    if let Some(w) = load {
        w.finish(interrupted.load(Ordering::Relaxed));
    }
    note!("ebql: stats {}", report.stats.to_json());
    let disagree = !report.agrees();
    println!("{}", report.to_string().lines().last().unwrap_or_default());
    if disagree {
        std::process::exit(3);
    }
    Ok(())
}

/// `ebql check --cost`: runs the query on the built-in workload (or the
/// machine's events) with bpf_stats on, and prints predicted vs measured.
fn check_cost(
    sql: &str,
    duration: Option<f64>,
    machine: bool,
    limits: LimitArgs,
    plan: PlanArgs,
    max_error: Option<f64>,
) -> Result<(), Error> {
    let interrupted = interrupt_flag()?;
    let secs = duration.unwrap_or(2.0);
    let mut opts = ExecutorOptions::default();
    limits.apply(&mut opts);
    // The plan measured is the one the flags ask for (hook, group table, placement).
    plan.apply(&mut opts);
    let loaded = ebql::cost::load();
    if let Some(why) = &loaded.ignored {
        note!("ebql: cost model: ignored {why}");
    }
    let model = loaded.model;
    let load = if machine {
        None
    } else {
        Some(PreadWorkload::start(secs, None)?)
    };
    let sql = match &load {
        Some(w) => sql
            .replace("$pid", &w.pid.to_string())
            .replace("$PID", &w.pid.to_string()),
        None => sql.to_string(),
    };
    note!(
        "ebql check --cost: bpf_stats on for this measurement only (while it is on, every BPF program of the host pays ≈{:.0} ns more per run); {}",
        model.stats_overhead_ns,
        match &load {
            Some(w) => format!("built-in workload: pid {}, 2 threads of 128-byte pread64 for {secs} s", w.pid),
            None => format!("the machine's own events for {secs} s"),
        }
    );
    let started = std::cell::Cell::new(None);
    let load = std::cell::RefCell::new(load);
    let run = ebql::cost::measure::check_cost(
        &sql,
        &opts,
        &model,
        || {
            started.set(Some(Instant::now()));
            match &*load.borrow() {
                Some(w) => w.open_gate(),
                None => Ok(()),
            }
        },
        || {
            let elapsed = started.get().map_or(Duration::ZERO, |t| t.elapsed());
            let over = match load.borrow_mut().as_mut() {
                // Stop once the workload has exited, so every call it made is counted
                // (a busy machine can stretch its run well past `secs`).
                Some(w) => {
                    w.child.try_wait().ok().flatten().is_some()
                        || elapsed >= Duration::from_secs_f64(4.0 * secs + 30.0)
                }
                None => elapsed >= Duration::from_secs_f64(secs),
            };
            over || interrupted.load(Ordering::Relaxed)
        },
    );
    let workload_calls = load.into_inner().map(|w| {
        let lines = w.finish(interrupted.load(Ordering::Relaxed));
        lines
            .iter()
            .filter_map(|l| l.strip_prefix("fd "))
            .filter_map(|l| l.split_whitespace().nth(2)?.parse::<u64>().ok())
            .sum::<u64>()
    });
    let run = run?;
    print!("{}", run.report(&model));
    if let Some(n) = workload_calls {
        println!("workload: {n} pread64 calls");
    }
    note!("ebql: cost {}", run.to_json(&model, workload_calls));
    let Some(error) = run.error(&model) else {
        println!("no program ran: nothing to compare");
        return Ok(());
    };
    match max_error {
        Some(limit) if 100.0 * error.abs() > limit => {
            println!(
                "FAIL: predicted run time off by {:+.1}% (limit {limit}%)",
                100.0 * error
            );
            std::process::exit(1);
        }
        Some(limit) => println!(
            "ok: predicted run time off by {:+.1}% (limit {limit}%)",
            100.0 * error
        ),
        None => println!("predicted run time off by {:+.1}%", 100.0 * error),
    }
    Ok(())
}

/// `ebql calibrate [--show]`.
fn calibrate(show: bool, rounds: usize) -> Result<(), Error> {
    if !show {
        let opts = ebql::cost::CalibrateOptions {
            rounds: rounds.max(1),
            ..Default::default()
        };
        let f = ebql::cost::calibrate(opts, &mut |line| note!("ebql calibrate: {line}"))?;
        let path = ebql::cost::save(&f)
            .map_err(|e| io_err(format!("writing {}", ebql::cost::cache_path().display()), e))?;
        note!(
            "ebql calibrate: done in {:.1} s, saved to {}",
            f.seconds,
            path.display()
        );
    }
    print!("{}", ebql::cost::show(&ebql::cost::load()));
    Ok(())
}

/// Calls/s per thread of `ebql check --workload`: the reference evaluates
/// every event in user space, and a flat-out workload outruns a debug build.
const CHECK_WORKLOAD_RATE: u64 = 20_000;

/// The built-in 2-thread pread64 workload, held at a gate until the probe is attached.
struct PreadWorkload {
    child: std::process::Child,
    gate: ebql_workload::Gate,
    pid: u32,
    lines: std::io::Lines<std::io::BufReader<std::process::ChildStdout>>,
}

impl PreadWorkload {
    /// Starts it for `seconds` (plus 0.5 s of slack), flat out or paced to
    /// `rate` calls/s per thread.
    fn start(seconds: f64, rate: Option<u64>) -> Result<PreadWorkload, Error> {
        use std::io::BufRead;
        let exe =
            std::env::current_exe().map_err(|e| io_err("finding our executable".into(), e))?;
        let gate = ebql_workload::Gate::create(
            std::env::temp_dir().join(format!("ebql-demo-{}.gate", std::process::id())),
        )
        .map_err(|e| io_err("creating the workload gate FIFO".into(), e))?;
        let mut child = std::process::Command::new(&exe)
            .args([
                "workload",
                "pread-loop",
                "--threads",
                "2",
                "--size",
                "128",
                "--seconds",
            ])
            .arg((seconds + 0.5).to_string())
            .args(
                rate.map(|r| ["--rate".to_string(), r.to_string()])
                    .into_iter()
                    .flatten(),
            )
            .arg("--gate")
            .arg(gate.path())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .map_err(|e| io_err("starting the workload".into(), e))?;
        let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
        let pid: u32 = lines
            .next()
            .and_then(|l| l.ok())
            .and_then(|l| l.strip_prefix("ready ").and_then(|p| p.trim().parse().ok()))
            .ok_or_else(|| Error::Internal("the workload did not report its pid".into()))?;
        Ok(PreadWorkload {
            child,
            gate,
            pid,
            lines,
        })
    }

    /// Lets the workload start (the probe is attached by now).
    fn open_gate(&self) -> Result<(), Error> {
        self.gate
            .open()
            .map_err(|e| io_err("opening the gate".into(), e))
    }

    /// Waits for the workload (kills it if interrupted) and returns its own report lines.
    fn finish(mut self, kill: bool) -> Vec<String> {
        if kill {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
        self.lines.map_while(|l| l.ok()).collect()
    }
}

fn describe(event: &str) -> Result<(), Error> {
    let name = ebql_catalog::EventName::parse(event).map_err(Error::Catalog)?;
    let mut ex = Executor::new();
    let schema = ex.event(&name)?;
    let arrow = ebql_compiler::planner::event_arrow_schema(&schema);
    println!("{name} ({})", describe_attach(&schema.attach));
    println!("{:<24} {:<10} {}", "column", "type", "source");
    for f in arrow.fields() {
        let source = match schema.resolve(f.name()) {
            Some(ebql_catalog::Column::Field(t)) => {
                format!("field {} {}", t.c_type, describe_access(&t))
            }
            Some(ebql_catalog::Column::Attr(a)) => format!("system attribute: {}", a.description()),
            None => String::new(),
        };
        println!(
            "{:<24} {:<10} {}",
            f.name(),
            f.data_type().to_string(),
            source
        );
    }
    for t in &schema.fields {
        if let ebql_catalog::FieldKind::Unsupported { .. } = &t.kind {
            println!(
                "{:<24} {:<10} field {} (not queryable yet: {:?})",
                t.name, "-", t.c_type, t.kind
            );
        }
    }
    let structs: Vec<String> = schema
        .fields
        .iter()
        .filter_map(ebql_catalog::source::struct_fields_hint)
        .collect();
    if !structs.is_empty() {
        println!("\nstruct arguments (a dotted path reads a field, through pointers too):");
        for h in structs {
            println!("  {h}");
        }
    }
    Ok(())
}

/// Where a program for this event attaches, for `describe`.
fn describe_attach(a: &ebql_catalog::Attach) -> String {
    use ebql_catalog::Attach;
    match a {
        Attach::Tracepoint { id } => format!("tracefs tracepoint id {id}"),
        Attach::RawTracepoint { name } => format!("raw tracepoint {name}"),
        Attach::Btf { name, btf_id } => format!("{name}, vmlinux BTF id {btf_id}"),
        Attach::Kprobe { function, retprobe } => format!(
            "{} on {function}",
            if *retprobe { "kretprobe" } else { "kprobe" }
        ),
        Attach::Uprobe {
            binary,
            offsets,
            retprobe,
            semaphore,
        } => format!(
            "{} at {}+{}{}",
            if *retprobe { "uretprobe" } else { "uprobe" },
            binary.display(),
            offsets
                .iter()
                .map(|o| format!("{o:#x}"))
                .collect::<Vec<_>>()
                .join(","),
            semaphore
                .map(|s| format!(", semaphore at {s:#x}"))
                .unwrap_or_default()
        ),
        Attach::Profile { hz } => format!("perf CPU clock, {hz} Hz on every CPU"),
        Attach::Tc { ifname, egress } => format!(
            "TC {} of {ifname}",
            if *egress { "egress" } else { "ingress" }
        ),
    }
}

/// How the probe reads a field, for `describe`.
fn describe_access(t: &ebql_catalog::TraceField) -> String {
    use ebql_catalog::Access;
    match &t.access {
        Access::Ctx => format!("at offset {}, {} bytes", t.offset, t.size),
        Access::DataLoc => format!("__data_loc at offset {}", t.offset),
        Access::Btf { arg, steps, direct } => format!(
            "argument {arg}{}{}",
            steps
                .iter()
                .map(|s| format!("{}+{}", if s.deref { "->" } else { "." }, s.offset))
                .collect::<String>(),
            if *direct {
                " (direct loads)"
            } else {
                " (probe reads)"
            }
        ),
        Access::Usdt(a) => format!("USDT operand {a}, {} bytes", t.size),
        Access::Packet(f) => format!("parsed from the packet ({f:?})"),
        Access::StackId { user } => format!("{} stack id", if *user { "user" } else { "kernel" }),
    }
}

/// The Figure 12 query on a built-in 2-thread pread64 workload whose pid is filled in.
fn demo(seconds: u64, bpf_stats: BpfStatsArg) -> Result<(), Error> {
    let w = PreadWorkload::start(seconds as f64, None)?;
    let pid = w.pid;
    let sql = format!(
        "SELECT fd, cpu, COUNT(*), MAX(count), AVG(count)\n    FROM tracepoint/syscalls/sys_enter_pread64\n    GROUP BY fd, cpu WHERE pid == {pid} WINDOW(time, 1000, 1000);"
    );
    note!("ebql demo: workload pid {pid} (2 threads of 128-byte pread64), query:\n    {sql}\n");
    let interrupted = interrupt_flag()?;
    let q = Executor::with_options(ExecutorOptions {
        bpf_stats: bpf_stats.bpf_stats,
        ..Default::default()
    })
    .execute(&sql)?;
    // Open the gate: the probe is attached before the first pread64.
    w.open_gate()?;
    let started = Instant::now();
    let run_for = Duration::from_secs(seconds) + Duration::from_millis(700);
    let stats = drive_to_end(
        &sql,
        q,
        sink::for_format(Format::Table, None, &sink::SinkOptions::default())
            .map_err(Error::Sink)?,
        || started.elapsed() >= run_for || interrupted.load(Ordering::Relaxed),
    )?;
    let report = w.finish(interrupted.load(Ordering::Relaxed));
    note!("workload's own count:\n  {}", report.join("\n  "));
    note!(
        "ebql: the probe counted {} pread64 calls of the workload, {} matched the filter",
        stats.events_seen,
        stats.events_matched
    );
    match stats.ns_per_event() {
        Some(ns) => note!("ebql: the probe ran {} times (every process's pread64 calls), {ns:.0} ns per run (bpf_stats)", stats.bpf_run_cnt),
        None => note!("ebql: the probe's runs for other processes and its cost are not measured: add --bpf-stats (it times every BPF program of the host while on)"),
    }
    Ok(())
}

/// `ebql serve`'s arguments.
#[derive(clap::Args)]
struct ServeArgs {
    /// Address of the Prometheus endpoint (`/metrics`). Loopback unless
    /// --allow-non-loopback says otherwise: the metrics show what the host does.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:9464")]
    prometheus: std::net::SocketAddr,
    /// Allow --prometheus to listen on an address other hosts can reach.
    #[arg(long)]
    allow_non_loopback: bool,
    /// Metric prefix of each query, in order (default: `ebql_<event>`).
    #[arg(long = "name", value_name = "NAME")]
    names: Vec<String>,
    /// Read queries from this file: statements end with `;` at the end of a
    /// line or with a blank line; `--` comment lines are kept with their query.
    #[arg(long)]
    file: Option<PathBuf>,
    /// Stop after this many seconds (default: until Ctrl-C).
    #[arg(long)]
    duration: Option<f64>,
    #[command(flatten)]
    engine: EngineArgs,
    /// The queries, each a windowed aggregate.
    #[arg(allow_hyphen_values = true)]
    sql: Vec<String>,
}

/// Statements of a queries file: each ends with `;` at a line's end or a blank line.
fn split_statements(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let has_sql = |s: &str| {
        s.lines()
            .any(|l| !l.trim().is_empty() && !l.trim_start().starts_with("--"))
    };
    for line in text.lines() {
        if line.trim().is_empty() {
            if has_sql(&cur) {
                out.push(std::mem::take(&mut cur));
            }
            continue;
        }
        cur.push_str(line);
        cur.push('\n');
        if line.trim_end().ends_with(';') {
            out.push(std::mem::take(&mut cur));
        }
    }
    if has_sql(&cur) {
        out.push(cur);
    }
    out.into_iter()
        .map(|s| s.trim().trim_end_matches(';').trim().to_string())
        .collect()
}

/// `ebql serve --prometheus ADDR QUERY…`: one thread per query drives it into
/// a sink of one shared Prometheus server. The port is bound and every query
/// checked before anything is attached.
fn serve(a: ServeArgs) -> Result<(), Error> {
    use ebql::sink::prometheus::{MetricsPlan, PrometheusServer};
    use ebql::sink::{QueryInfo, WindowKind as SinkWindow};
    use ebql_compiler::prepass::WindowSpec;
    let usage = |m: String| Error::Sink(ebql::sink::SinkError::new("starting serve", m));
    let mut queries = a.sql.clone();
    if let Some(f) = &a.file {
        let text = std::fs::read_to_string(f)
            .map_err(|e| io_err(format!("reading {}", f.display()), e))?;
        queries.extend(split_statements(&text));
    }
    if queries.is_empty() {
        return Err(usage(
            "no query: give them as arguments or with --file".into(),
        ));
    }
    if a.names.len() > queries.len() {
        return Err(usage(format!(
            "{} --name for {} queries",
            a.names.len(),
            queries.len()
        )));
    }
    if !a.prometheus.ip().is_loopback() {
        if !a.allow_non_loopback {
            return Err(usage(format!(
                "--prometheus {} is reachable from other hosts, and the metrics show what this host does; add --allow-non-loopback to mean it",
                a.prometheus
            )));
        }
        note!(
            "ebql: warning: serving metrics on {}, reachable from other hosts (no authentication)",
            a.prometheus
        );
    }
    let plans = queries
        .iter()
        .enumerate()
        .map(|(i, q)| MetricsPlan::new(q, a.names.get(i).map(String::as_str)))
        .collect::<Result<Vec<_>, _>>()?;
    let server = PrometheusServer::bind(a.prometheus).map_err(Error::Sink)?;
    let interrupted = interrupt_flag()?;
    let opts = a.engine.options();
    // Attach every query before serving any: an error detaches those started (drop).
    let mut started = Vec::new();
    for plan in plans {
        let q = Executor::with_options(opts.clone()).execute(&plan.sql)?;
        let sink = server
            .sink(plan.clone(), Some(Box::new(q.stats_source())))
            .map_err(Error::Sink)?;
        note!(
            "ebql: attached {} (program id {})",
            sink.name(),
            q.prog_id()
        );
        note_placement(&q);
        let window = match q.window() {
            None => SinkWindow::None,
            Some(WindowSpec::Time { .. }) => SinkWindow::Time,
            Some(WindowSpec::Count { .. }) => SinkWindow::Count,
        };
        let info = QueryInfo {
            sql: plan.sql,
            schema: q.schema(),
            window,
            version: env!("CARGO_PKG_VERSION"),
        };
        started.push((q, info, sink));
    }
    note!("ebql: serving http://{}/metrics", server.addr());
    let stop = Arc::new(AtomicBool::new(false));
    let begun = Instant::now();
    let run_for = a.duration.map(Duration::from_secs_f64);
    let threads: Vec<_> = started
        .into_iter()
        .map(|(q, info, mut sink)| {
            let (stop, interrupted) = (stop.clone(), interrupted.clone());
            std::thread::spawn(move || {
                let r = ebql::sink::drive(q, &info, &mut sink, || {
                    stop.load(Ordering::Relaxed)
                        || interrupted.load(Ordering::Relaxed)
                        || run_for.is_some_and(|d| begun.elapsed() >= d)
                });
                // One query failing stops the others.
                if r.is_err() {
                    stop.store(true, Ordering::Relaxed);
                }
                r
            })
        })
        .collect();
    let mut first_err = None;
    for t in threads {
        match t.join() {
            Ok(Ok(stats)) => note!("ebql: stats {}", stats.to_json()),
            Ok(Err(e)) => first_err = first_err.or(Some(e)),
            Err(_) => {
                first_err = first_err.or(Some(Error::Internal("a serve thread panicked".into())))
            }
        }
    }
    drop(server);
    first_err.map_or(Ok(()), Err)
}
