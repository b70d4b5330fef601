//! `ebql.query()` and the `Query` it returns: a running query whose
//! windows Python reads by iterating it, through the Arrow PyCapsule stream
//! interface (`pa.table(q)`, `pl.DataFrame(q)`), or at once (`read_all()`,
//! `to_pandas()`, `to_polars()`).

use std::sync::Arc;
use std::time::Instant;

use arrow_pyarrow::ToPyArrow;
use ebql::arrow::datatypes::SchemaRef;
use ebql::arrow::record_batch::RecordBatch;
use ebql::{Executor, QueryStats};
use pyo3::exceptions::PyImportError;
use pyo3::prelude::*;
use pyo3::types::{PyCapsule, PyDict, PyList};

use crate::errors::{to_py, WindowFailed};
use crate::options::{self, Keywords};
use crate::run::{Poll, Run};
use crate::stream;

/// The run's counters as a dict of ints (the CLI's `--stats` JSON members).
fn stats_dict<'py>(py: Python<'py>, s: &QueryStats) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    let w = s.wire;
    let fields: [(&str, u64); 29] = [
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
        ("window_cut_races", s.window_cut_races),
        // A wire relation's decoding (0 for other queries).
        ("wire_statements", s.wire_statements),
        ("wire_calls", w.chunks),
        ("wire_bytes_not_captured", w.bytes_not_captured),
        ("wire_desyncs", w.desyncs),
        ("wire_calls_skipped", w.chunks_skipped),
        ("wire_responses_unmatched", w.responses_unmatched),
        ("wire_unknown_prepared", w.unknown_prepared),
        ("wire_unfinished", w.unfinished),
        ("wire_tls_connections", w.tls_connections),
    ];
    for (k, v) in fields {
        d.set_item(k, v)?;
    }
    Ok(d)
}

/// Issues `ebql.WindowFailed` for a window whose result could not be computed.
fn warn_if_failed(py: Python<'_>, batch: &RecordBatch) -> PyResult<()> {
    if let Some(e) = ebql::window::WindowError::of_batch(batch) {
        // The batch has no rows; its schema metadata holds the cause too.
        let category = py.get_type::<WindowFailed>();
        let text = std::ffi::CString::new(format!("window failed: {e}")).unwrap_or_default();
        PyErr::warn(py, &category, &text, 1)?;
    }
    Ok(())
}

/// A running query. Its windows, one `pyarrow.RecordBatch` each as it
/// closes, are read in one of these ways (each window is handed out once,
/// to whichever reads first):
///
/// * iterating it: `for batch in q`;
/// * as an Arrow stream (the Arrow PyCapsule interface,
///   `__arrow_c_stream__`): `pa.table(q)`, `pa.RecordBatchReader.from_stream(q)`,
///   `pl.DataFrame(q)` (`pl.from_arrow(q)` gives a struct Series), or any
///   consumer of Arrow C streams;
/// * at once: `read_all()` (a `pyarrow.Table`), `to_pandas()`, `to_polars()`.
///
/// Each waits for windows until the query ends: `duration` runs out, a
/// LIMIT is reached, the `command` exits, or `stop()` (or the end of a
/// `with` block) detaches it; the last, partial window is emitted at the
/// end, then the iteration or stream ends. A reader that stops early (an
/// Arrow stream released before its end, e.g. a `RecordBatchReader` closed
/// or dropped after a few batches) stops the query.
#[pyclass(module = "ebql", name = "Query")]
pub(crate) struct Query {
    sql: String,
    schema: SchemaRef,
    prog_ids: Vec<u32>,
    run: Arc<Run>,
}

impl Query {
    /// Stops the query if it still runs (detaching its probe, without the
    /// GIL) and returns its final counters; the engine's error if it failed.
    fn stop_inner(&self, py: Python<'_>) -> PyResult<QueryStats> {
        py.detach(|| self.run.stop()).map_err(|e| to_py(py, e))
    }

    /// The next window, waiting without the GIL; `None` at the end. Ctrl-C
    /// while waiting stops the query and raises `KeyboardInterrupt`; a
    /// failed window issues `ebql.WindowFailed`.
    fn next_batch(&self, py: Python<'_>) -> PyResult<Option<RecordBatch>> {
        loop {
            match py.detach(|| self.run.poll()).map_err(|e| to_py(py, e))? {
                Poll::Batch(batch) => {
                    warn_if_failed(py, &batch)?;
                    return Ok(Some(batch));
                }
                Poll::End => return Ok(None),
                Poll::Waiting => {
                    if let Err(interrupt) = py.check_signals() {
                        self.stop_inner(py)?;
                        return Err(interrupt);
                    }
                }
            }
        }
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
        self.run.is_running()
    }

    /// The pid of the process `command=` started (None without `command`).
    #[getter]
    fn command_pid(&self) -> Option<u32> {
        self.run.command_pid()
    }

    /// The exit status of `command=`'s process once it has exited, as
    /// `subprocess` gives it (the exit code, or -N for signal N); None before.
    #[getter]
    fn returncode(&self) -> Option<i32> {
        use std::os::unix::process::ExitStatusExt;
        let s = self.run.command_status()?;
        s.code().or(s.signal().map(|n| -n))
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
        stats_dict(py, &self.run.stats())
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
        match self.next_batch(py)? {
            Some(batch) => Ok(Some(batch.to_pyarrow(py)?.unbind())),
            None => Ok(None),
        }
    }

    /// The Arrow PyCapsule stream interface: a capsule named
    /// "arrow_array_stream" holding an ArrowArrayStream of the windows not
    /// read yet, one batch per window as it closes (`get_next` blocks until
    /// then), ending when the query ends. `requested_schema` is accepted
    /// and ignored, as the interface allows: the schema is always
    /// `Query.schema`. Releasing the stream before its end stops the query.
    /// Ctrl-C while a consumer on the main thread waits stops the query and
    /// raises `KeyboardInterrupt` once the consumer returns. A failed window
    /// is an empty batch here (no `WindowFailed` warning; `stats()` counts it
    /// in windows_failed).
    #[pyo3(signature = (requested_schema=None))]
    fn __arrow_c_stream__<'py>(
        &self,
        py: Python<'py>,
        requested_schema: Option<Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyCapsule>> {
        let _ = requested_schema;
        stream::capsule(py, self.run.clone(), self.schema.clone())
    }

    /// Every window not read yet, until the query ends, as one
    /// `pyarrow.Table` (`Query.schema`; one record batch per window).
    /// Blocks until the end: give `duration`, a LIMIT or a `command`, or
    /// call `stop()` from another thread. Ctrl-C stops the query and raises
    /// `KeyboardInterrupt`; a failed window issues `ebql.WindowFailed`.
    fn read_all<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let batches = PyList::empty(py);
        while let Some(batch) = self.next_batch(py)? {
            batches.append(batch.to_pyarrow(py)?)?;
        }
        let kwargs = PyDict::new(py);
        kwargs.set_item("schema", self.schema(py)?)?;
        py.import("pyarrow")?.getattr("Table")?.call_method(
            "from_batches",
            (batches,),
            Some(&kwargs),
        )
    }

    /// `read_all().to_pandas(**kwargs)`: a `pandas.DataFrame` of every
    /// window's rows (needs pandas).
    #[pyo3(signature = (**kwargs))]
    fn to_pandas<'py>(
        &self,
        py: Python<'py>,
        kwargs: Option<&Bound<'py, PyDict>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        needs(py, "pandas", "to_pandas")?;
        self.read_all(py)?.call_method("to_pandas", (), kwargs)
    }

    /// `polars.from_arrow(read_all())`: a `polars.DataFrame` of every
    /// window's rows (needs polars).
    fn to_polars<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let polars = needs(py, "polars", "to_polars")?;
        polars.call_method1("from_arrow", (self.read_all(py)?,))
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
        let state = if self.run.is_running() {
            "running"
        } else {
            "stopped"
        };
        format!("<ebql.Query {state} {:?}>", self.sql)
    }
}

/// Imports `module` for `method`, before the query's windows are read (a
/// missing package must not cost them).
fn needs<'py>(py: Python<'py>, module: &str, method: &str) -> PyResult<Bound<'py, PyModule>> {
    py.import(module).map_err(|e| {
        PyImportError::new_err(format!(
            "Query.{method}() needs {module}: pip install {module} ({e})"
        ))
    })
}

/// Compiles `sql`, loads and attaches its BPF program(s), and returns the
/// running `Query` (see `help(ebql.Query)`). The keywords are `ebql query`'s
/// options, with the same names (`_` for `-`), defaults and meaning (None
/// for any of them: its default):
///
/// duration: seconds (int or float) after which the query stops; default
///     None: until `stop()`, the end of a `with` block, a LIMIT, the end of
///     `command`, or Ctrl-C while reading.
/// pid: trace only this process (and its threads), by its pid in the
///     initial pid namespace: every event is filtered to it in the kernel,
///     as if the WHERE said `pid = N`.
/// command: a command to start and trace (`-c`): a list of arguments, or
///     a string split as a POSIX shell would (not run by one). It is
///     started stopped before its exec, released once the query is
///     attached (so its exec is the first thing traced), and the query ends
///     when it exits. Its events only; with `follow`, its descendants' too.
///     `Query.command_pid` and `Query.returncode` tell its pid and status.
///     Stopping the query earlier does not end the command.
/// follow: with `command`: also trace every process it starts (it runs in
///     a new cgroup v2 directory, ebql-* at the hierarchy's root, removed
///     at the end). Default False.
/// cgroup: trace only the tasks of this cgroup v2 directory (absolute, or
///     relative to the hierarchy's root: "system.slice/nginx.service"), not
///     its sub-directories. pid, command and cgroup exclude each other.
/// max_groups: groups per window the in-kernel group table holds (default
///     10240).
/// max_distinct: (group, value) pairs per window the in-kernel
///     COUNT(DISTINCT) set holds (default 262144).
/// hook: hook of syscall tracepoints: "tracefs", "raw"
///     (raw_syscalls:sys_enter/sys_exit, tp_btf where the kernel has it),
///     "raw-tp" (the same as a raw_tp program), or "auto" (default: by
///     `optimize`).
/// optimize: what hook="auto" minimizes: "total" (default: CPU added per
///     second, from the machine's sampled system-call rates), "traced" (the
///     traced call's cost) or "host" (the cost put on untraced calls).
/// group_map: group table of in-kernel aggregates: "auto" (default),
///     "hash" or "array".
/// aggregate: where an aggregate the kernel can run goes: "kernel", "user"
///     (the kernel streams the rows, DataFusion aggregates each window), or
///     "auto" (default: the cheaper by the cost model, from sampled rates).
/// sample_ms: milliseconds of sampling for the automatic choices (default
///     100): the query plans with the rates its last run (within an hour)
///     recorded and attaches at once, then counts its hooks for this long
///     beside its run to record them for the next. 0: no sampling and no
///     recorded rates.
/// sample_first: sample for `sample_ms` before attaching (the first event
///     waits for it) instead of using and recording earlier runs' rates.
/// no_faulting_reads: do not load uprobe and USDT programs sleepable (user
///     strings in pages not touched yet are then NULL). Default False.
/// bpf_stats: turn the kernel's bpf_stats on while the query runs, for
///     probe run time in `stats()` (bpf_run_cnt, bpf_run_time_ns). It is
///     global: every BPF program of the host pays about 70–120 ns per run
///     while it is on. Default False.
/// attach_only: attach the query's hooks with programs that return at
///     once (nothing recorded; events_seen counts the hits with bpf_stats):
///     what the hooks alone cost. Default False.
/// align_windows: end time windows on wall-clock multiples of their step
///     (a tumbling window is [k*size, (k+1)*size) of UTC), so windows of
///     several hosts or runs cover the same time; the first runs from the
///     attach to the first boundary. Default False.
/// partial: yield each window's aggregate states, not their values (COUNT
///     and SUM as numbers, AVG as count and sum, histograms as counters,
///     approx_distinct as a DataSketches HLL sketch, quantiles as sketch
///     buckets) with one window row per window, for a merge across hosts
///     (`ebql.spark.merge`; `ebql.partial_layout` describes the rows).
///     Implies align_windows. Default False.
/// host_id: with partial=True, the rows' host_id (default: the hostname).
/// query_id: with partial=True, the rows' query_id (default: the query
///     text's hash).
///
/// Raises `QueryError` for a bad query; `KernelError` when the kernel
/// refuses (eBQL needs root or CAP_BPF+CAP_PERFMON) or `command` cannot be
/// started; `TypeError` for an unknown keyword or a value of the wrong
/// type, `ValueError` for a wrong value (an unknown hook, pid with command).
#[pyfunction]
#[pyo3(
    signature = (sql, duration=None, *, pid=None, command=None, follow=None, cgroup=None,
        max_groups=None, max_distinct=None, hook=None, optimize=None, group_map=None,
        aggregate=None, sample_ms=None, sample_first=None, no_faulting_reads=None,
        bpf_stats=None, attach_only=None, align_windows=None, partial=None, host_id=None,
        query_id=None, **unknown),
    text_signature = "(sql, duration=None, *, pid=None, command=None, follow=False, cgroup=None, \
        max_groups=10240, max_distinct=262144, hook='auto', optimize='total', group_map='auto', \
        aggregate='auto', sample_ms=100, sample_first=False, no_faulting_reads=False, \
        bpf_stats=False, attach_only=False, align_windows=False, partial=False, host_id=None, \
        query_id=None)"
)]
#[allow(clippy::too_many_arguments)]
pub(crate) fn query<'py>(
    py: Python<'py>,
    sql: String,
    duration: Option<Bound<'py, PyAny>>,
    pid: Option<Bound<'py, PyAny>>,
    command: Option<Bound<'py, PyAny>>,
    follow: Option<Bound<'py, PyAny>>,
    cgroup: Option<Bound<'py, PyAny>>,
    max_groups: Option<Bound<'py, PyAny>>,
    max_distinct: Option<Bound<'py, PyAny>>,
    hook: Option<Bound<'py, PyAny>>,
    optimize: Option<Bound<'py, PyAny>>,
    group_map: Option<Bound<'py, PyAny>>,
    aggregate: Option<Bound<'py, PyAny>>,
    sample_ms: Option<Bound<'py, PyAny>>,
    sample_first: Option<Bound<'py, PyAny>>,
    no_faulting_reads: Option<Bound<'py, PyAny>>,
    bpf_stats: Option<Bound<'py, PyAny>>,
    attach_only: Option<Bound<'py, PyAny>>,
    align_windows: Option<Bound<'py, PyAny>>,
    partial: Option<Bound<'py, PyAny>>,
    host_id: Option<Bound<'py, PyAny>>,
    query_id: Option<Bound<'py, PyAny>>,
    unknown: Option<Bound<'py, PyDict>>,
) -> PyResult<Query> {
    let mut checked = options::check(Keywords {
        duration,
        pid,
        command,
        follow,
        cgroup,
        max_groups,
        max_distinct,
        hook,
        optimize,
        group_map,
        aggregate,
        sample_ms,
        sample_first,
        no_faulting_reads,
        bpf_stats,
        attach_only,
        align_windows,
        partial,
        host_id,
        query_id,
        unknown,
    })?;
    // A command starts now, stopped before its exec; dropped unreleased
    // (the query failed), it ends without running.
    let mut command = py
        .detach(|| checked.start_target())
        .map_err(|e| to_py(py, e))?;
    let options = checked.options.clone();
    let started = py.detach(|| Executor::with_options(options).execute(&sql));
    let running = started.map_err(|e| to_py(py, e))?;
    if let Some(c) = command.as_mut() {
        py.detach(|| c.release()).map_err(|e| to_py(py, e))?;
    }
    let schema = running.schema();
    let prog_ids = running.prog_ids().to_vec();
    let deadline = checked.duration.map(|d| Instant::now() + d);
    Ok(Query {
        sql,
        schema,
        prog_ids,
        run: Arc::new(Run::new(running, deadline, command)),
    })
}
