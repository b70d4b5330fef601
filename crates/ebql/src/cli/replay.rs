//! `ebql replay`: captured SQL statements re-issued against PostgreSQL.

use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// `ebql replay`'s arguments.
#[derive(clap::Args)]
pub(super) struct ReplayArgs {
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
pub(super) fn replay(a: ReplayArgs) -> i32 {
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
