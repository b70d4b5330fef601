//! `ebql replay`: re-issues the SQL statements a capture recorded (Parquet
//! files of `ebql query --format parquet`, e.g. PostgreSQL's
//! `query__start`/`query__done` pairing) against a PostgreSQL database, and
//! compares what happened with the capture.
//!
//! * [`capture`]: reading the statements (columns found by name);
//! * [`run`]: sending them, one connection per captured backend, in capture order;
//! * [`report`]: the summary and the per-statement report file.
//!
//! ```no_run
//! use ebql::replay::{capture::{Capture, ColumnNames}, run::{replay, ReplayOptions}, report};
//! let cap = Capture::read(&["/var/tmp/pgcapture".into()], &ColumnNames::default())?;
//! let opts = ReplayOptions { dsn: "host=/var/run/postgresql dbname=copy".into(), speed: 0.0, order_timeout: std::time::Duration::from_secs(10) };
//! let started = std::time::Instant::now();
//! let outcomes = replay(&cap, &opts)?;
//! print!("{}", report::summary(&cap, &outcomes, opts.speed, started.elapsed()));
//! # Ok::<(), ebql::replay::ReplayError>(())
//! ```

use std::path::PathBuf;

pub mod capture;
pub mod report;
pub mod run;

/// Why a replay could not run (statement errors are outcomes, not these).
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    /// A capture file or directory that cannot be read as statements.
    #[error("reading {path}: {why}")]
    Input {
        /// The file or directory.
        path: PathBuf,
        /// What is wrong, with a hint where one helps.
        why: String,
    },
    /// The connection string does not parse.
    #[error("--dsn: {0}\n  hint: postgresql://USER@HOST:PORT/DBNAME (a Unix socket directory percent-encoded as HOST, e.g. %2Fvar%2Frun%2Fpostgresql) or \"host=/var/run/postgresql port=5432 user=postgres dbname=DBNAME\"")]
    Dsn(String),
    /// The server refused the first connection (checked before any statement is sent).
    #[error("connecting to the database: {0}")]
    Connect(String),
    /// A bad option value.
    #[error("{0}")]
    Usage(String),
    /// The report file cannot be written.
    #[error("writing the report {path}: {why}")]
    Report {
        /// The file.
        path: PathBuf,
        /// The cause.
        why: String,
    },
    /// A bug in eBQL.
    #[error("internal error (a bug in eBQL, please report it): {0}")]
    Internal(String),
}
