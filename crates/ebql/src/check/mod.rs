//! The differential oracle (`ebql check`): every window of a query is
//! computed twice from the same events — by the kernel plan under test, and by
//! DataFusion evaluating the same SQL over the raw events the program's tap
//! streamed (see `ebql_compiler::check`) — and the two results are compared.
//!
//! Exact aggregates must be equal; floating-point results (AVG, user-space
//! float math) within a relative tolerance, because the kernel sums integers
//! exactly while DataFusion's AVG sums them as f64. Rows are compared as
//! multisets (DataFusion orders both sides with the same ORDER BY; ties may
//! come out in either order). A window is *inconclusive*, not a
//! disagreement, when either side lost events (a full group table or ring
//! buffer is counted, so the difference is explained), or when a LIMIT
//! without a total order may legitimately pick different rows.
//!
//! DataFusion shares eBQL's planner, so each window is also evaluated by a
//! second engine that shares none of it, DuckDB ([`duckdb`]), when the
//! query is standard SQL and DuckDB is installed.

mod compare;
mod compare_topk;
pub(crate) mod duckdb;
mod pairing;

pub use compare::{
    compare, compare_within, CheckOptions, CheckedWindow, DuckDbUse, Verdict, WindowResult,
};
pub use duckdb::{duckdb_query, DuckDbQuery, SecondReference};
pub(crate) use pairing::Pairer;

use crate::error::Result;
use crate::executor::RunningQuery;
use crate::window::QueryStats;
use std::fmt;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::Duration;

/// A query running under the oracle. Dropping it stops the query.
pub struct RunningCheck {
    query: RunningQuery,
    receiver: Receiver<CheckedWindow>,
    judge: Judge,
}

/// What compares windows, and what it found so far.
struct Judge {
    opts: CheckOptions,
    /// Per output column: the relative difference accepted (approximate aggregates).
    bounds: Vec<Option<f64>>,
    /// DuckDB, when it takes part.
    second: Option<duckdb::Second>,
    second_status: SecondReference,
    results: Vec<WindowResult>,
}

/// What the executor hands the oracle to start DuckDB with.
pub(crate) struct SecondInput {
    /// The pre-pass's standard SQL of the query.
    pub sql: String,
    /// The tap's schema and its columns' names in the query.
    pub tap: datafusion::arrow::datatypes::SchemaRef,
    pub columns: Vec<String>,
    /// The query pairs two events: DuckDB reads the pairs (`tap`, `columns`).
    pub paired: bool,
    /// The query reads several events without pairing them
    /// (`ebql_compiler::multi`): the tap's rows are every program's,
    /// tagged, and each event's table is its branch. Empty otherwise.
    pub branches: Vec<duckdb::TapBranch>,
}

impl RunningCheck {
    /// Errors: `opts.duckdb` is [`DuckDbUse::Require`] and DuckDB cannot
    /// evaluate the query (the reason says why).
    pub(crate) fn new(
        query: RunningQuery,
        receiver: Receiver<CheckedWindow>,
        opts: CheckOptions,
        bounds: Vec<Option<f64>>,
        second: SecondInput,
    ) -> Result<RunningCheck> {
        let started = match opts.duckdb {
            DuckDbUse::Off => Err("--duckdb off".to_string()),
            _ if !second.branches.is_empty() => {
                duckdb::Second::start_several(&second.sql, &second.tap, &second.branches)
            }
            _ => duckdb::Second::start(&second.sql, &second.tap, &second.columns, second.paired),
        };
        let (second, second_status) = match started {
            Ok(s) => {
                let v = SecondReference::Used(s.version().to_string());
                (Some(s), v)
            }
            Err(why) if opts.duckdb == DuckDbUse::Require => {
                return Err(crate::error::Error::Unavailable(format!(
                    "DuckDB was required as the second reference but cannot run this query: {why}"
                )))
            }
            Err(why) => (None, SecondReference::NotUsed(why)),
        };
        Ok(RunningCheck {
            query,
            receiver,
            judge: Judge {
                opts,
                bounds,
                second,
                second_status,
                results: Vec::new(),
            },
        })
    }

    /// How DuckDB takes part in this check.
    pub fn second_reference(&self) -> &SecondReference {
        &self.judge.second_status
    }

    /// The next compared window, waiting up to `timeout`; `None` on timeout or when the query has ended.
    pub fn next_window(&mut self, timeout: Duration) -> Option<WindowResult> {
        match self.receiver.recv_timeout(timeout) {
            Ok(w) => Some(self.judge.judge(&w)),
            Err(RecvTimeoutError::Timeout) | Err(RecvTimeoutError::Disconnected) => None,
        }
    }

    /// The query's WINDOW clause, if any.
    pub fn window(&self) -> Option<ebql_compiler::prepass::WindowSpec> {
        self.query.window()
    }

    /// Counters of the query under test so far.
    pub fn stats(&self) -> QueryStats {
        self.query.stats()
    }

    /// True once the query thread has ended.
    pub fn is_finished(&self) -> bool {
        self.query.is_finished()
    }

    /// Stops the query (its last, partial window is compared too) and returns the report.
    ///
    /// Errors: a runtime failure of the query thread.
    pub fn stop(self) -> Result<CheckReport> {
        let RunningCheck {
            query,
            receiver,
            mut judge,
        } = self;
        let stats = query.stop()?;
        for w in receiver.try_iter() {
            judge.judge(&w);
        }
        Ok(CheckReport {
            windows: judge.results,
            stats,
            second: judge.second_status,
        })
    }
}

impl Judge {
    /// Compares one window with DataFusion's reference and, if it takes part, DuckDB's.
    fn judge(&mut self, w: &CheckedWindow) -> WindowResult {
        let mut r = compare_within(w, &self.opts, &self.bounds);
        if let Some(second) = self.second.as_mut() {
            let (rows, duck) = second.verdict(w, &self.opts, &self.bounds);
            r.verdict = match (r.verdict, &duck) {
                (Verdict::Disagree { diff }, _) => Verdict::Disagree {
                    diff: format!("DataFusion's reference:\n{diff}"),
                },
                (_, Verdict::Disagree { diff }) => Verdict::Disagree {
                    diff: format!("DuckDB's reference ({rows} rows):\n{diff}"),
                },
                // DuckDB inconclusive (semantics eBQL does not share) takes nothing away.
                (v, _) => v,
            };
            r.duckdb = Some(duck);
        }
        self.results.push(r.clone());
        r
    }
}

/// The result of a check: every compared window and the query's counters.
#[derive(Debug, Clone)]
pub struct CheckReport {
    /// Compared windows, in order.
    pub windows: Vec<WindowResult>,
    /// Counters of the query under test.
    pub stats: QueryStats,
    /// How DuckDB took part.
    pub second: SecondReference,
}

impl CheckReport {
    /// No window disagrees (inconclusive windows do not count against it).
    pub fn agrees(&self) -> bool {
        !self
            .windows
            .iter()
            .any(|w| matches!(w.verdict, Verdict::Disagree { .. }))
    }

    /// Windows DuckDB agreed on too.
    pub fn duckdb_agreed(&self) -> usize {
        self.windows
            .iter()
            .filter(|w| w.duckdb == Some(Verdict::Agree))
            .count()
    }

    /// Number of windows compared.
    pub fn windows(&self) -> usize {
        self.windows.len()
    }

    /// Why some windows could not be decided, if any could not.
    pub fn inconclusive(&self) -> Option<String> {
        let reasons: Vec<&str> = self
            .windows
            .iter()
            .filter_map(|w| match &w.verdict {
                Verdict::Inconclusive { reason } => Some(reason.as_str()),
                _ => None,
            })
            .collect();
        (!reasons.is_empty())
            .then(|| format!("{} window(s) inconclusive: {}", reasons.len(), reasons[0]))
    }
}

fn window_label(w: &WindowResult, i: usize) -> String {
    match w.window {
        Some((a, b)) => format!("window {} [{a}, {b})", i + 1),
        None => "result".into(),
    }
}

impl fmt::Display for CheckReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let agree = self
            .windows
            .iter()
            .filter(|w| w.verdict == Verdict::Agree)
            .count();
        let disagree = self
            .windows
            .iter()
            .filter(|w| matches!(w.verdict, Verdict::Disagree { .. }))
            .count();
        for (i, w) in self.windows.iter().enumerate() {
            match &w.verdict {
                Verdict::Agree => {}
                Verdict::Disagree { diff } => writeln!(
                    f,
                    "{}: DISAGREE (kernel {} rows, reference {} rows)\n{diff}",
                    window_label(w, i),
                    w.kernel_rows,
                    w.reference_rows
                )?,
                Verdict::Inconclusive { reason } => {
                    writeln!(f, "{}: inconclusive: {reason}", window_label(w, i))?
                }
            }
        }
        write!(
            f,
            "{}: {} window(s) compared, {agree} agree, {disagree} disagree, {} inconclusive",
            if disagree == 0 { "ok" } else { "MISMATCH" },
            self.windows.len(),
            self.windows.len() - agree - disagree
        )?;
        match &self.second {
            SecondReference::Used(v) => write!(
                f,
                "; references: DataFusion and DuckDB {v} ({} of {} windows agree in DuckDB)",
                self.duckdb_agreed(),
                self.windows.len()
            ),
            SecondReference::NotUsed(why) => {
                write!(f, "; reference: DataFusion (DuckDB not used: {why})")
            }
        }
    }
}
