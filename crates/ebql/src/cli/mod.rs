//! The command line: [`main`] parses it and runs one subcommand, each in
//! its own module; the argument groups they share are in `args`, the
//! query text and durations in `input`, how subcommands fail and the
//! terminal helpers in `common`, completions and the man page in `docs`.

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
mod ctl;
mod demo;
mod describe;
mod docs;
mod explain;
mod input;
mod query;
mod replay;
mod serve;

use args::{BpfStatsArg, LimitArgs, PlanArgs};
use clap::{Parser, Subcommand};
use common::Failure;
use ctl::CtlArgs;
use input::{parse_duration, QueryText};
use query::QueryArgs;
use replay::ReplayArgs;
use serve::ServeArgs;
use std::io::Write;
use std::time::Duration;

/// The exit codes, in `ebql --help` and the man page (README "Exit codes").
const EXIT_CODES: &str = "Exit codes: 0 ok; 1 runtime failure (permissions, kernel, output); \
2 bad query or usage (arguments, an unknown event, a format the results do not fit), \
before anything is attached; 3 disagreement (check, replay); 4 the run ended but some \
windows failed (query, check).";

#[derive(Parser)]
#[command(
    name = "ebql",
    version,
    about = "Streaming SQL over Linux kernel events, compiled to eBPF",
    after_help = EXIT_CODES
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
    /// `ebql q` is short for `ebql query`.
    #[command(visible_alias = "q")]
    Query(QueryArgs),
    /// Run a query under the differential oracle: each window is computed by
    /// the kernel plan and, from the same events, by DataFusion and DuckDB
    /// over the raw events; the results are compared. Exit code 3 if any
    /// window disagrees, else 4 if some windows failed.
    Check {
        /// Stop after this long: 5 or 5s, 500ms, 2m; a bare number is
        /// seconds (default: until Ctrl-C; 5s with --workload, 2s with --cost).
        #[arg(short, long, value_name = "DURATION", value_parser = parse_duration)]
        duration: Option<Duration>,
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
        #[command(flatten)]
        sql: QueryText,
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
    /// Add, remove and list a running service's standing queries
    /// (`ebql serve --flight-sql`): ebql ctl add NAME SQL -f parquet -o DIR,
    /// ebql ctl rm NAME, ebql ctl ls.
    Ctl(CtlArgs),
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
        #[command(flatten)]
        sql: QueryText,
    },
    /// List events: every tracepoint and the forms of the other kinds, or
    /// those matching a glob (by category:name, by name, or with a kind's
    /// prefix); exit 1 when nothing matches.
    Events {
        /// e.g. 'syscalls:sys_enter_*', 'sys_enter_open*', 'usdt:/usr/bin/x:*'.
        glob: Option<String>,
    },
    /// Show an event's columns: tracepoint fields and system attributes.
    /// Exit code 2 for an event that does not exist.
    Describe {
        /// e.g. tracepoint:syscalls:sys_enter_pread64, profile:hz:99.
        event: String,
    },
    /// Run the thesis' Figure 12 query against a built-in pread64 workload.
    Demo {
        /// How long to run: 5 or 5s, 500ms, 2m; a bare number is seconds.
        #[arg(short, long, alias = "seconds", value_name = "DURATION", value_parser = parse_duration, default_value = "5s")]
        duration: Duration,
        #[command(flatten)]
        stats: BpfStatsArg,
    },
    /// Print a shell completion script: `ebql completions bash >
    /// /etc/bash_completion.d/ebql` (bash, zsh, fish, elvish, powershell).
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
    /// Print the man page (roff): `ebql man | man -l -`; `ebql man query`
    /// for a subcommand's page.
    Man {
        /// A subcommand, for its own page.
        subcommand: Option<String>,
    },
    /// Workload processes for tests and benchmarks.
    #[command(hide = true, trailing_var_arg = true)]
    Workload {
        #[arg(allow_hyphen_values = true)]
        args: Vec<String>,
    },
}

/// Parses the command line and runs it; returns the process exit code
/// (0 ok, 1 runtime failure, 2 bad query or usage: bad arguments, an
/// unknown event, a format the results do not fit; 3 disagreement: check,
/// replay; 4 the run ended but some windows failed: query, check).
pub fn main() -> i32 {
    let cli = Cli::parse();
    if matches!(
        cli.cmd,
        Cmd::Events { .. }
            | Cmd::Describe { .. }
            | Cmd::Explain { .. }
            | Cmd::Completions { .. }
            | Cmd::Man { .. }
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

fn run(cmd: Cmd) -> Result<(), Failure> {
    match cmd {
        Cmd::Query(args) => query::run_query(args),
        Cmd::Check {
            duration,
            limits,
            plan,
            cost: true,
            machine,
            max_error,
            sql,
            ..
        } => {
            let secs = duration.map(|d| d.as_secs_f64());
            Ok(check::check_cost(
                &sql.read()?,
                secs,
                machine,
                limits,
                plan,
                max_error,
            )?)
        }
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
            let (sql, secs) = (sql.read()?, duration.map(|d| d.as_secs_f64()));
            Ok(check::check(
                &sql, secs, workload, limits, plan, stats, oracle,
            )?)
        }
        Cmd::Calibrate { show, rounds } => Ok(calibrate::calibrate(show, rounds)?),
        Cmd::Serve(args) => Ok(serve::serve(args)?),
        Cmd::Ctl(args) => Ok(ctl::ctl(args)?),
        Cmd::Explain { rates, plan, sql } => Ok(explain::explain(rates, plan, sql.read()?)?),
        Cmd::Events { glob } => Ok(describe::events(glob)?),
        Cmd::Describe { event } => describe::describe(&event),
        Cmd::Demo { duration, stats } => Ok(demo::demo(duration, stats)?),
        Cmd::Completions { shell } => docs::completions::<Cli>(shell),
        Cmd::Man { subcommand } => docs::man::<Cli>(subcommand.as_deref()),
        Cmd::Workload { args } => {
            let code = ebql_workload::cli::cli_main(&args);
            std::process::exit(code);
        }
        Cmd::Replay(_) => unreachable!("main runs replay"),
    }
}
