//! eBQL for Python: `import ebql`.
//!
//! ```python
//! import ebql
//! with ebql.query("SELECT fd, COUNT(*) AS n FROM tracepoint/syscalls/sys_enter_pread64 "
//!                 "GROUP BY fd WINDOW(time, 1000, 1000)", duration=5) as q:
//!     for batch in q:              # one pyarrow.RecordBatch per closed window
//!         print(batch.to_pandas())
//! print(q.stats()["events_seen"])
//! ```
//!
//! Batches reach pyarrow through the Arrow C stream interface
//! (`arrow-pyarrow`): pyarrow imports the buffers Rust allocated, without
//! copying them. Waiting for the next window releases the GIL; Ctrl-C while
//! waiting detaches the probe and raises `KeyboardInterrupt`.

use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use arrow_pyarrow::ToPyArrow;
use ebql::arrow::datatypes::SchemaRef;
use ebql::arrow::record_batch::RecordBatch;
use ebql::{Executor, QueryStats, RunningQuery};
use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use pyo3::types::PyDict;

create_exception!(ebql, Error, PyException, "Base class of eBQL's errors.");
create_exception!(
    ebql,
    QueryError,
    Error,
    "The query is wrong or unsupported (the CLI's exit code 2).\n\n\
     str() is the diagnostic as the CLI prints it: the offending line with `~~~`\n\
     under the culprit, then the hint. Attributes: `message` (str), `hint`\n\
     (str or None), `position` ((line, first_column, last_column), 1-based,\n\
     columns in characters, end inclusive; None when no position applies),\n\
     `span` ((start, end) byte offsets into `query`, or None), `query` (str)."
);
create_exception!(
    ebql,
    KernelError,
    Error,
    "The system or eBQL failed while running a valid query (the CLI's exit code 1):\n\
     a syscall refused (permissions, limits, a missing kernel feature), tracefs\n\
     missing, the verifier rejecting generated code, or a bug. Attribute `hint`\n\
     (str or None) says what to do when known."
);

create_exception!(
    ebql,
    WindowFailed,
    pyo3::exceptions::PyUserWarning,
    "A window's result could not be computed (an exact SUM beyond its result\n\
     type, a failing CAST, a division by zero): its batch has no rows and its\n\
     schema metadata holds the cause under b'ebql.window_error'. Issued as a\n\
     warning; the query goes on with the next window, and stats()\n\
     counts such windows in windows_failed."
);

/// How long one wait for a window lasts before signals and the duration are checked again.
const TICK: Duration = Duration::from_millis(100);

/// Converts an engine error to the Python exception for its fault.
fn to_py(py: Python<'_>, e: ebql::Error) -> PyErr {
    let text = e.render().trim_end().to_string();
    match &e {
        ebql::Error::Query { query, diagnostic } => {
            let err = QueryError::new_err(text);
            let v = err.value(py);
            let span = diagnostic
                .span
                .clone()
                .filter(|s| s.start <= query.len() && s.end <= query.len());
            let attrs = (|| -> PyResult<()> {
                v.setattr("message", &diagnostic.message)?;
                v.setattr("hint", diagnostic.hint.as_deref())?;
                v.setattr("query", query)?;
                v.setattr("span", span.as_ref().map(|s| (s.start, s.end)))?;
                v.setattr("position", span.map(|s| position(query, s)))?;
                Ok(())
            })();
            attrs.err().unwrap_or(err)
        }
        other => {
            let hint = match other {
                ebql::Error::Runtime(r) => r.hint(),
                _ => None,
            };
            let err = KernelError::new_err(text);
            match err.value(py).setattr("hint", hint) {
                Ok(()) => err,
                Err(e) => e,
            }
        }
    }
}

/// `(line, first_column, last_column)` of a byte span, 1-based, columns in
/// characters, end inclusive and clamped to the span's first line: the
/// numbers of the rendered diagnostic's `query:LINE:FIRST-LAST:` header.
fn position(query: &str, span: std::ops::Range<usize>) -> (usize, usize, usize) {
    let before = &query[..span.start];
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let line_end = query[span.start..]
        .find('\n')
        .map_or(query.len(), |i| span.start + i);
    let end = span.end.clamp(span.start, line_end);
    let first = before[line_start..].chars().count() + 1;
    let width = query[span.start..end].chars().count().max(1);
    (line, first, first + width - 1)
}

/// The run's counters as a dict of ints (the CLI's `--stats` JSON members).
fn stats_dict<'py>(py: Python<'py>, s: &QueryStats) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    let fields: [(&str, u64); 19] = [
        ("events_seen", s.events_seen),
        ("events_matched", s.events_matched),
        ("rows_emitted", s.rows_emitted),
        ("windows_emitted", s.windows_emitted),
        ("windows_failed", s.windows_failed),
        ("events_dropped", s.events_dropped()),
        ("dropped_groups_full", s.dropped_groups_full),
        ("dropped_ringbuf_full", s.dropped_ringbuf_full),
        ("dropped_distinct_full", s.dropped_distinct_full),
        ("bpf_recursion_misses", s.bpf_recursion_misses),
        ("bpf_run_cnt", s.bpf_run_cnt),
        ("bpf_run_time_ns", s.bpf_run_time_ns),
        ("pair_starts_seen", s.pair_starts_seen),
        ("pair_starts_matched", s.pair_starts_matched),
        ("pair_starts_overwritten", s.pair_starts_overwritten),
        ("pair_ends_without_start", s.pair_ends_without_start),
        ("pair_start_map_full", s.pair_start_map_full),
        ("pair_starts_left", s.pair_starts_left),
        ("str_read_failed", s.str_read_failed),
    ];
    for (k, v) in fields {
        d.set_item(k, v)?;
    }
    Ok(d)
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A running query: iterate it for one `pyarrow.RecordBatch` per closed window.
///
/// The probe is attached from `ebql.query()` on; `stop()` (or leaving a
/// `with` block, or the `duration` running out) detaches it. The last,
/// partial window is emitted at stop and still yielded; iteration then ends.
#[pyclass(module = "ebql", name = "Query")]
struct Query {
    sql: String,
    schema: SchemaRef,
    prog_ids: Vec<u32>,
    /// `None` once stopped.
    running: Mutex<Option<RunningQuery>>,
    /// Closed windows; disconnects after the query thread has sent the last one.
    batches: Mutex<Receiver<RecordBatch>>,
    /// When `duration` runs out.
    deadline: Option<Instant>,
    /// Counters at stop.
    final_stats: Mutex<Option<QueryStats>>,
}

impl Query {
    /// Stops the query if it still runs (detaching its probe, without the
    /// GIL) and returns its final counters; the engine's error if it failed.
    fn stop_inner(&self, py: Python<'_>) -> PyResult<QueryStats> {
        let taken = lock(&self.running).take();
        if let Some(q) = taken {
            let stats = py.detach(|| q.stop()).map_err(|e| to_py(py, e))?;
            *lock(&self.final_stats) = Some(stats);
        }
        Ok(lock(&self.final_stats).unwrap_or_default())
    }

    /// True when the query thread ended by itself (LIMIT reached or a failure).
    fn ended(&self) -> bool {
        lock(&self.running)
            .as_ref()
            .is_some_and(|q| q.is_finished())
    }
}

#[pymethods]
impl Query {
    /// The query text.
    #[getter]
    fn sql(&self) -> &str {
        &self.sql
    }

    /// Schema of every batch (a `pyarrow.Schema`): the window's columns
    /// first when windowed (time windows: `window_start`, `window_end` as
    /// `timestamp[ns, tz=UTC]`, the run's wall clock, then
    /// `window_start_mono_ns`, `window_end_mono_ns` as uint64
    /// CLOCK_MONOTONIC ns; count windows: `window_start`, `window_end` as
    /// uint64 event ordinals), then the query's columns.
    #[getter]
    fn schema<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.schema.as_ref().to_pyarrow(py)
    }

    /// Kernel ids of the query's BPF programs (`bpftool prog show id N`).
    #[getter]
    fn prog_ids(&self) -> Vec<u32> {
        self.prog_ids.clone()
    }

    /// True until the query is stopped.
    #[getter]
    fn running(&self) -> bool {
        lock(&self.running).is_some()
    }

    /// Counters so far (final ones after stop), a dict of ints: events_seen
    /// and events_matched (counted by the query's own programs: the events of
    /// the processes it selects by pid/tid, and those that passed the whole
    /// kernel filter), rows_emitted,
    /// windows_emitted, events_dropped and the drops by cause,
    /// bpf_run_cnt/bpf_run_time_ns (0 unless bpf_stats is on: `query(...,
    /// bpf_stats=True)`, or another process turned it on), and the pairing
    /// counters of start/end queries.
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let s = match lock(&self.running).as_ref() {
            Some(q) => q.stats(),
            None => lock(&self.final_stats).unwrap_or_default(),
        };
        stats_dict(py, &s)
    }

    /// Detaches the probe and returns the final counters (see `stats()`).
    /// The last window is still yielded by iteration. Calling it again
    /// returns the same counters. Raises `KernelError` if the query failed.
    fn stop<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let s = self.stop_inner(py)?;
        stats_dict(py, &s)
    }

    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    /// The next closed window as a `pyarrow.RecordBatch`; waits without the GIL.
    fn __next__(&self, py: Python<'_>) -> PyResult<Option<Py<PyAny>>> {
        loop {
            let wait = match self.deadline {
                Some(d) if self.running() => d.saturating_duration_since(Instant::now()).min(TICK),
                _ => TICK,
            };
            let next = py.detach(|| lock(&self.batches).recv_timeout(wait));
            match next {
                Ok(batch) => {
                    if let Some(e) = ebql::window::WindowError::of_batch(&batch) {
                        // The batch has no rows; its schema metadata holds the cause too.
                        let category = py.get_type::<WindowFailed>();
                        PyErr::warn(
                            py,
                            &category,
                            &std::ffi::CString::new(format!("window failed: {e}"))
                                .unwrap_or_default(),
                            1,
                        )?;
                    }
                    return Ok(Some(batch.to_pyarrow(py)?.unbind()));
                }
                Err(RecvTimeoutError::Disconnected) => {
                    // Everything was sent: join the query thread for its error, if any.
                    self.stop_inner(py)?;
                    return Ok(None);
                }
                Err(RecvTimeoutError::Timeout) => {
                    if let Err(interrupt) = py.check_signals() {
                        self.stop_inner(py)?;
                        return Err(interrupt);
                    }
                    let expired = self.deadline.is_some_and(|d| Instant::now() >= d);
                    if expired || self.ended() {
                        self.stop_inner(py)?;
                    }
                }
            }
        }
    }

    fn __enter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    /// Leaving the `with` block stops the query (the probe is detached).
    /// An error of the query is raised unless an exception is already on its way.
    fn __exit__(
        &self,
        py: Python<'_>,
        exc_type: Option<Bound<'_, PyAny>>,
        _exc: Option<Bound<'_, PyAny>>,
        _tb: Option<Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        match self.stop_inner(py) {
            Err(e) if exc_type.is_none() => Err(e),
            _ => Ok(false),
        }
    }

    fn __repr__(&self) -> String {
        let state = if self.running() { "running" } else { "stopped" };
        format!("<ebql.Query {state} {:?}>", self.sql)
    }
}

/// Compiles `sql`, loads and attaches its BPF program(s) and returns the
/// running `Query`. `duration` (seconds, optional) stops it after that long;
/// otherwise it runs until `stop()`, the end of a `with` block, a LIMIT, or
/// Ctrl-C while iterating. `bpf_stats=True` turns the kernel's bpf_stats on
/// while the query runs, for probe run time in `stats()` (bpf_run_cnt,
/// bpf_run_time_ns): it is global, every BPF program of the host pays about
/// 70–120 ns per run while it is on. Raises `QueryError` for a bad query and
/// `KernelError` when the kernel refuses (eBQL needs root or CAP_BPF+CAP_PERFMON).
#[pyfunction]
#[pyo3(signature = (sql, duration=None, bpf_stats=false))]
fn query(py: Python<'_>, sql: String, duration: Option<f64>, bpf_stats: bool) -> PyResult<Query> {
    let deadline = match duration {
        Some(s) if !(s.is_finite() && s >= 0.0) => {
            return Err(pyo3::exceptions::PyValueError::new_err(format!(
                "duration must be a finite number of seconds >= 0, got {s}"
            )));
        }
        Some(s) => Some(Duration::from_secs_f64(s)),
        None => None,
    };
    let options = ebql::ExecutorOptions {
        bpf_stats,
        ..Default::default()
    };
    let started = py.detach(|| Executor::with_options(options).execute(&sql));
    let mut running = started.map_err(|e| to_py(py, e))?;
    let batches = running.take_receiver().expect("receiver of a fresh query");
    Ok(Query {
        schema: running.schema(),
        prog_ids: running.prog_ids().to_vec(),
        deadline: deadline.map(|d| Instant::now() + d),
        sql,
        running: Mutex::new(Some(running)),
        batches: Mutex::new(batches),
        final_stats: Mutex::new(None),
    })
}

/// The plan of `sql` as `ebql explain` prints it: what runs in the kernel
/// (program, maps, attach points) and what runs in user space. Nothing is
/// loaded. Raises `QueryError` for a bad query.
#[pyfunction]
fn explain(py: Python<'_>, sql: String) -> PyResult<String> {
    let compiled = py.detach(|| Executor::new().compile_for_explain(&sql));
    let q = compiled.map_err(|e| to_py(py, e))?;
    Ok(ebql_compiler::explain::explain(&q))
}

/// eBQL: streaming SQL over Linux kernel events, compiled to eBPF; results
/// as pyarrow record batches.
#[pymodule]
#[pyo3(name = "ebql")]
fn ebql_module(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add_function(wrap_pyfunction!(query, m)?)?;
    m.add_function(wrap_pyfunction!(explain, m)?)?;
    m.add_class::<Query>()?;
    m.add("Error", py.get_type::<Error>())?;
    m.add("QueryError", py.get_type::<QueryError>())?;
    m.add("KernelError", py.get_type::<KernelError>())?;
    m.add("WindowFailed", py.get_type::<WindowFailed>())?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
