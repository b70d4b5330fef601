//! One error type for the library, by fault: the query (exit code 2), the
//! system/eBQL itself (exit code 1), or a run that ended with failed
//! windows (exit code 4).

use ebql_catalog::CatalogError;
use ebql_compiler::{CompileError, Diagnostic};
use ebql_runtime::{RuntimeError, VerifierRejection};

/// Any failure of the library, by fault: [`Error::exit_code`] says which.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The query is wrong or unsupported; `diagnostic` points into `query`.
    #[error("{diagnostic}")]
    Query {
        /// The query as the user typed it.
        query: String,
        /// What is wrong, and where in `query`.
        diagnostic: Diagnostic,
    },
    /// tracefs could not be found or mounted.
    #[error(transparent)]
    Catalog(CatalogError),
    /// The verifier rejected generated code: a bug in eBQL.
    #[error("{0}")]
    Verifier(Box<VerifierRejection>),
    /// A syscall failed (permissions, limits, missing kernel feature).
    #[error(transparent)]
    Runtime(RuntimeError),
    /// The user-space part of the plan failed.
    #[error("user-space execution failed: {0}")]
    Execution(String),
    /// A result sink failed (file, port, broker); says what it was doing.
    #[error("{0}")]
    Sink(SinkError),
    /// Something the user asked for that this machine or query cannot give
    /// (e.g. `ebql check --duckdb require` where DuckDB cannot run the query):
    /// not a bug, not a bad query.
    #[error("{0}")]
    Unavailable(String),
    /// The command to trace (`-c`) or its cgroup could not be started,
    /// found or made: what and why.
    #[error("{0}")]
    Command(String),
    /// A bug in eBQL.
    #[error("internal error (a bug in eBQL, please report it): {0}")]
    Internal(String),
    /// The run went to its end, but some windows failed (each was reported
    /// in its place, with its cause): exit code 4.
    #[error("{failed} of {windows} window(s) failed (each is shown with its error where its rows would be; the run went on)")]
    WindowsFailed {
        /// Windows (emissions without a WINDOW clause) that failed.
        failed: u64,
        /// Windows emitted in all (without a WINDOW clause: the failed emissions).
        windows: u64,
    },
}

impl Error {
    pub(crate) fn compile(query: &str, e: CompileError) -> Error {
        match e {
            CompileError::Query(diagnostic) => Error::Query {
                query: query.to_string(),
                diagnostic,
            },
            CompileError::Catalog(c) => Error::Catalog(c),
            CompileError::Internal(m) => Error::Internal(m),
        }
    }

    /// Process exit code: 2 for a bad query, 4 when the run ended but some
    /// windows failed, 1 for everything else.
    pub fn exit_code(&self) -> i32 {
        match self {
            Error::Query { .. } => 2,
            Error::WindowsFailed { .. } => 4,
            _ => 1,
        }
    }

    /// [`Error::WindowsFailed`] when `failed` of the `windows` emitted failed
    /// (`QueryStats::windows_failed`, `windows_emitted`): how a run that
    /// ended reports them (the CLI's exit code 4).
    pub fn windows_failed(failed: u64, windows: u64) -> Option<Error> {
        (failed > 0).then(|| Error::WindowsFailed {
            failed,
            windows: windows.max(failed),
        })
    }

    /// The message for a terminal: a bad query is shown with its line, an
    /// underline under the offending part, and a hint.
    pub fn render(&self) -> String {
        match self {
            Error::Query { query, diagnostic } => diagnostic.render(query),
            Error::Runtime(e) => match e.hint() {
                Some(hint) => format!("error: {e}\nhint: {hint}\n"),
                None => format!("error: {e}\n"),
            },
            other => format!("error: {other}\n"),
        }
    }
}

impl From<RuntimeError> for Error {
    fn from(e: RuntimeError) -> Self {
        match e {
            RuntimeError::Verifier(v) => Error::Verifier(v),
            other => Error::Runtime(other),
        }
    }
}

impl From<datafusion::error::DataFusionError> for Error {
    fn from(e: datafusion::error::DataFusionError) -> Self {
        match e {
            // A sentence of its own (eBQL's exact SUM says what did not fit).
            datafusion::error::DataFusionError::Execution(m) => Error::Execution(m),
            e => Error::Execution(e.to_string()),
        }
    }
}

impl From<datafusion::arrow::error::ArrowError> for Error {
    fn from(e: datafusion::arrow::error::ArrowError) -> Self {
        Error::Execution(e.to_string())
    }
}

/// Why a sink ([`crate::sink::Sink`]) failed, for people: what it was doing
/// and the cause. Here, not in `sink`, so that this module stays a leaf.
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
        SinkError {
            what: what.into(),
            cause: cause.to_string(),
        }
    }
}

/// Result of a library operation.
pub type Result<T> = std::result::Result<T, Error>;
