//! eBQL for Python: `import ebql`.
//!
//! ```python
//! import ebql, pyarrow as pa
//! sql = ("SELECT fd, COUNT(*) AS n FROM tracepoint/syscalls/sys_enter_pread64 "
//!        "GROUP BY fd WINDOW(time, 1000, 1000)")
//! with ebql.query(sql, duration=5) as q:
//!     for batch in q:              # one pyarrow.RecordBatch per closed window
//!         print(batch.to_pandas())
//! print(q.stats()["events_seen"])
//! table = pa.table(ebql.query(sql, duration=5))  # the Arrow PyCapsule stream
//! ```
//!
//! Modules: `query` (`ebql.query()` and the `Query` class), `options` (its
//! keywords, the CLI's options), `run` (the running query its readers
//! share), `stream` (the Arrow C stream `__arrow_c_stream__` exports),
//! `errors` (the exceptions).
//!
//! Batches reach pyarrow through the Arrow C interfaces (`arrow-pyarrow`
//! for each batch, an `ArrowArrayStream` for streams): pyarrow imports the
//! buffers Rust allocated, without copying them. Waiting for the next
//! window releases the GIL; Ctrl-C while waiting detaches the probe and
//! raises `KeyboardInterrupt`.

mod errors;
mod options;
mod query;
mod run;
mod stream;

use ebql::Executor;
use pyo3::prelude::*;

/// The plan of `sql` as `ebql explain` prints it: what runs in the kernel
/// (program, maps, attach points) and what runs in user space. Nothing is
/// loaded. Raises `QueryError` for a bad query.
#[pyfunction]
fn explain(py: Python<'_>, sql: String) -> PyResult<String> {
    let compiled = py.detach(|| Executor::new().compile_for_explain(&sql));
    let q = compiled.map_err(|e| errors::to_py(py, e))?;
    Ok(ebql_compiler::explain::explain(&q))
}

/// The layout of `sql`'s partial rows (`ebql query --partial`), as JSON
/// text: the identity columns, keys and each aggregate's function,
/// parameters and state columns (`ebql::partial::layout_json`). `ebql.spark.merge`
/// reads it. Nothing is loaded. Raises `QueryError` for a bad query or one
/// without a partial form (why is in the message).
#[pyfunction]
#[pyo3(signature = (sql, host_id=None, query_id=None))]
fn partial_layout(
    py: Python<'_>,
    sql: String,
    host_id: Option<String>,
    query_id: Option<String>,
) -> PyResult<String> {
    let options = ebql::ExecutorOptions {
        partial: Some(ebql::partial::PartialOptions { host_id, query_id }),
        ..Default::default()
    };
    let layout = py.detach(|| Executor::with_options(options).partial_layout(&sql));
    let layout = layout.map_err(|e| errors::to_py(py, e))?;
    Ok(ebql::partial::layout_json(&layout).to_string())
}

/// eBQL: streaming SQL over Linux kernel events, compiled to eBPF; results
/// as pyarrow record batches. The native half of the `ebql` package.
#[pymodule]
#[pyo3(name = "_native")]
fn ebql_module(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add_function(wrap_pyfunction!(query::query, m)?)?;
    m.add_function(wrap_pyfunction!(explain, m)?)?;
    m.add_function(wrap_pyfunction!(partial_layout, m)?)?;
    m.add_class::<query::Query>()?;
    m.add("Error", py.get_type::<errors::Error>())?;
    m.add("QueryError", py.get_type::<errors::QueryError>())?;
    m.add("KernelError", py.get_type::<errors::KernelError>())?;
    m.add("WindowFailed", py.get_type::<errors::WindowFailed>())?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
