//! The command line: [`main`] parses it and runs one subcommand, each in
//! its own module; the argument groups they share are in `args`, the
//! terminal helpers in `common`.

/// Writes a line to stderr; a closed stderr must not turn into a panic.
macro_rules! note {
    ($($arg:tt)*) => {{
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}

mod args;
mod calibrate;
mod check;
mod common;
mod demo;
mod describe;
mod explain;
mod query;
mod replay;
mod serve;

use args::{BpfStatsArg, EngineArgs, LimitArgs, PlanArgs};
use clap::{Parser, Subcommand};
use ebql::sink::{self, Format};
use ebql::{Error, ExecutorOptions};
use replay::ReplayArgs;
use serve::ServeArgs;
use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

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
    /// Run a query; prints each window's rows as it closes. A window that
    /// fails (a SUM beyond its type, a failing CAST) is shown as an error in
    /// place of its rows and the run goes on; exit code 4 at the end.
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
    /// the kernel plan and, from the same events, by DataFusion and DuckDB
    /// over the raw events; the results are compared. Exit code 3 if any
    /// window disagrees, else 4 if some windows failed.
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
        /// DuckDB as a second reference (it shares no code with the planner):
        /// `auto` when the query is standard SQL and python3 imports duckdb,
        /// `require` fails when it cannot take part, `off`.
        #[arg(long, default_value = "auto", value_parser = ["auto", "require", "off"])]
        duckdb: String,
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

/// Parses the command line and runs it; returns the process exit code
/// (0 ok, 1 runtime failure, 2 bad query, 3 disagreement: check, replay,
/// 4 the run ended but some windows failed: query, check).
pub fn main() -> i32 {
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
        Cmd::Replay(args) => replay::replay(args),
        cmd => match run(cmd) {
            Ok(()) => 0,
            Err(e) => {
                let _ = write!(std::io::stderr(), "{}", e.render());
                e.exit_code()
            }
        },
    };
    code
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
            query::run_query(&sql, sink, duration.map(Duration::from_secs_f64), opts)
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
        } => check::check_cost(&sql, duration, machine, limits, plan, max_error),
        Cmd::Check {
            duration,
            workload,
            limits,
            plan,
            stats,
            tolerance,
            duckdb,
            sql,
            ..
        } => {
            let oracle = ebql::check::CheckOptions {
                float_tolerance: tolerance,
                duckdb: match duckdb.as_str() {
                    "require" => ebql::check::DuckDbUse::Require,
                    "off" => ebql::check::DuckDbUse::Off,
                    _ => ebql::check::DuckDbUse::Auto,
                },
            };
            check::check(&sql, duration, workload, limits, plan, stats, oracle)
        }
        Cmd::Calibrate { show, rounds } => calibrate::calibrate(show, rounds),
        Cmd::Serve(args) => serve::serve(args),
        Cmd::Explain { rates, plan, sql } => explain::explain(rates, plan, sql),
        Cmd::Events { glob } => describe::events(glob),
        Cmd::Describe { event } => describe::describe(&event),
        Cmd::Demo { seconds, stats } => demo::demo(seconds, stats),
        Cmd::Workload { args } => {
            let code = ebql_workload::cli::cli_main(&args);
            std::process::exit(code);
        }
        Cmd::Replay(_) => unreachable!("main runs replay"),
    }
}
