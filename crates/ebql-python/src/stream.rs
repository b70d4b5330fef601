//! The Arrow C stream a `Query` exports (`__arrow_c_stream__`, the Arrow
//! PyCapsule interface): pyarrow, polars and other consumers pull one
//! window's batch per `get_next`, which blocks until the window closes and
//! returns the end of the stream once the query has ended. The consumer
//! releasing the stream (done, or stopping early) stops the query.

use std::sync::Arc;

use ebql::arrow::datatypes::SchemaRef;
use ebql::arrow::error::ArrowError;
use ebql::arrow::ffi_stream::FFI_ArrowArrayStream;
use ebql::arrow::record_batch::{RecordBatch, RecordBatchReader};
use pyo3::prelude::*;
use pyo3::types::PyCapsule;

use crate::run::{Poll, Run};

/// A query's windows as a [`RecordBatchReader`].
struct Windows {
    run: Arc<Run>,
    schema: SchemaRef,
    /// Ctrl-C was seen: the query is stopped, and Python will raise
    /// `KeyboardInterrupt` once the consumer returns.
    interrupted: bool,
}

/// True on the process's main thread: the only one where Python runs
/// signal handlers.
fn on_main_thread() -> bool {
    // SAFETY: plain syscalls without arguments.
    unsafe { libc::gettid() == libc::getpid() }
}

impl Windows {
    /// Runs Python's signal handlers when the consumer reads on the main
    /// thread (another thread would never see them, and taking the GIL
    /// there could wait on a thread that waits for us). On Ctrl-C: stops
    /// the query and raises SIGINT's handler again for when the consumer
    /// returns to Python, as the handler's exception cannot cross the stream.
    fn check_signals(&mut self) {
        if self.interrupted || !on_main_thread() {
            return;
        }
        let raised = Python::try_attach(|py| match py.check_signals() {
            Ok(()) => false,
            Err(_) => {
                // SAFETY: attached to the interpreter.
                unsafe { pyo3::ffi::PyErr_SetInterrupt() };
                true
            }
        });
        if raised == Some(true) {
            self.interrupted = true;
            let _ = self.run.stop();
        }
    }
}

impl Iterator for Windows {
    type Item = Result<RecordBatch, ArrowError>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            match self.run.poll() {
                Ok(Poll::Batch(batch)) => return Some(Ok(batch)),
                Ok(Poll::End) => return None,
                Ok(Poll::Waiting) => self.check_signals(),
                Err(e) => {
                    return Some(Err(ArrowError::ExternalError(
                        e.render().trim_end().to_string().into(),
                    )))
                }
            }
        }
    }
}

impl RecordBatchReader for Windows {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }
}

impl Drop for Windows {
    /// Released by its consumer: the query stops (a no-op when it has ended).
    fn drop(&mut self) {
        let _ = self.run.stop();
    }
}

/// A PyCapsule "arrow_array_stream" holding an `ArrowArrayStream` over the
/// query's windows. A capsule dropped unconsumed releases its stream.
pub(crate) fn capsule<'py>(
    py: Python<'py>,
    run: Arc<Run>,
    schema: SchemaRef,
) -> PyResult<Bound<'py, PyCapsule>> {
    let reader = Windows {
        run,
        schema,
        interrupted: false,
    };
    let stream = FFI_ArrowArrayStream::new(Box::new(reader));
    PyCapsule::new_with_value(py, stream, c"arrow_array_stream")
}
