//! Emitting a window: the user-space plan run on its rows, the window
//! bounds added as leading columns (time windows: wall-clock timestamps
//! from the run's [`crate::window::WallClock`], then CLOCK_MONOTONIC ns;
//! count windows: ordinals; [`crate::window::bound_fields`]), and the result sent (under `ebql
//! check`, with the reference's result on the same window). A window whose
//! evaluation fails (see [`evaluate`]) is sent without rows and with its
//! [`WindowError`]; the run goes on.

use super::side::{Rows, TapRows};
use super::userplan::{plan_has_limit, UserPlan};
use super::worker::Worker;
use crate::decode;
use crate::error::{Error, Result};
use crate::window::{
    bound_arrays, bound_fields, WallClock, WindowBatch, WindowBounds, WindowDrops, WindowError,
    WindowErrorKind,
};
use datafusion::arrow::array::ArrayRef;
use datafusion::arrow::datatypes::{Field, Schema, SchemaRef};
use datafusion::arrow::record_batch::RecordBatch;
use std::sync::atomic::Ordering;
use std::sync::Arc;

impl Worker {
    /// Runs the user-space plan on one window's kernel rows and sends the
    /// result; under `ebql check`, also evaluates the reference on the same
    /// window's tap rows and sends both.
    pub(super) fn emit(
        &mut self,
        rt: &tokio::runtime::Runtime,
        rows: Rows,
        window: Option<WindowBounds>,
        drops: WindowDrops,
        reference: Option<TapRows>,
    ) -> Result<()> {
        if self.readers.is_some() {
            return self.emit_to_readers(rt, rows, window, drops);
        }
        let global = self.global_row();
        let main = &self.main;
        let (out, error) = match evaluate(rt, &main.plan, &main.kernel_schema, global, rows)
            .and_then(|r| {
                with_window(&self.shape.out_schema, &r, window, self.shape.wall())
                    .map_err(Fault::Fatal)
            }) {
            Ok(out) => (out, None),
            Err(Fault::Window(e)) => (
                RecordBatch::new_empty(self.shape.out_schema.clone()),
                Some(e),
            ),
            Err(Fault::Fatal(e)) => return Err(e),
        };
        self.control.local.rows_emitted += out.num_rows() as u64;
        self.control.local.windows_emitted += window.is_some() as u64;
        self.control.local.windows_failed += error.is_some() as u64;
        let sent = match (self.tap.as_ref(), reference) {
            (Some(tap), Some(TapRows { rows, unordered })) => {
                let input = match rows {
                    Rows::Cells(cells) => vec![decode::batch(&tap.kernel_schema, &cells)?],
                    Rows::Batches(b) => b,
                };
                let (reference, reference_error) = match tap.plan.run_concat(rt, input.clone()) {
                    Ok(r) => (
                        with_window(&self.shape.out_schema, &r, window, self.shape.wall())?,
                        None,
                    ),
                    Err(Error::Execution(cause)) => (
                        RecordBatch::new_empty(self.shape.out_schema.clone()),
                        Some(WindowError {
                            cause,
                            kind: WindowErrorKind::Evaluation,
                        }),
                    ),
                    Err(e) => return Err(e),
                };
                let has_limit = plan_has_limit(&self.main.plan.remainder);
                tap.tx
                    .send(crate::check::CheckedWindow {
                        window: window.map(|w| (w.start, w.end)),
                        clock: self.shape.wall().copied(),
                        kernel: out,
                        kernel_error: error,
                        reference,
                        reference_error,
                        drops,
                        has_limit,
                        tap: input,
                        unordered,
                    })
                    .is_ok()
            }
            _ => self
                .main
                .tx
                .send(WindowBatch {
                    batch: out,
                    bounds: window,
                    drops,
                    error,
                })
                .is_ok(),
        };
        if !sent {
            // Nobody listens any more: stop.
            self.control.stop.store(true, Ordering::SeqCst);
        }
        Ok(())
    }

    /// The row of a global aggregate over no events, for a window in which
    /// the kernel has none (`None` for grouped queries and streams).
    fn global_row(&self) -> Option<Vec<decode::Cell>> {
        self.shape
            .group_spec
            .as_ref()
            .filter(|s| s.keys.is_empty())
            .map(decode::empty_global_row)
    }

    /// A shared synopsis's window, evaluated by each reader's plan and sent
    /// to it: a reader gets the windows that start after it joined, and
    /// leaves after the first that ends after it left.
    fn emit_to_readers(
        &mut self,
        rt: &tokio::runtime::Runtime,
        rows: Rows,
        window: Option<WindowBounds>,
        drops: WindowDrops,
    ) -> Result<()> {
        let global = self.global_row();
        let wall = self.shape.wall().copied();
        let kernel_schema = &self.main.kernel_schema;
        let readers = self.readers.as_mut().expect("called for a hub");
        readers.admit();
        let bounds = window.ok_or_else(|| Error::Internal("a synopsis without windows".into()))?;
        // Decoded once for every reader; a value that does not fit fails the window for all.
        let input = match window_input(kernel_schema, global, rows) {
            Ok(input) => Ok(input),
            Err(Fault::Window(e)) => Err(e),
            Err(Fault::Fatal(e)) => return Err(e),
        };
        let mut kept = Vec::with_capacity(readers.list.len());
        for mut r in readers.list.drain(..) {
            // A window that started before the reader joined is not its.
            let sent = !r.reads(bounds.start) || {
                let result = input
                    .clone()
                    .map_err(Fault::Window)
                    .and_then(|input| run_on(rt, &r.plan, input))
                    .and_then(|b| {
                        with_window(&r.out_schema, &b, window, wall.as_ref()).map_err(Fault::Fatal)
                    });
                let (out, error) = match result {
                    Ok(out) => (out, None),
                    Err(Fault::Window(e)) => {
                        (RecordBatch::new_empty(r.out_schema.clone()), Some(e))
                    }
                    // This reader's plan failed: it ends, the others go on.
                    Err(Fault::Fatal(e)) => {
                        *r.failed.lock().unwrap_or_else(|p| p.into_inner()) = Some(e);
                        r.publish(&self.control.local);
                        continue;
                    }
                };
                r.emitted.rows += out.num_rows() as u64;
                r.emitted.windows += 1;
                r.emitted.failed += error.is_some() as u64;
                r.tx.send(WindowBatch {
                    batch: out,
                    bounds: window,
                    drops,
                    error,
                })
                .is_ok()
            };
            if sent && !r.last_at(bounds.end) {
                kept.push(r);
            } else {
                // Its counters as they end; dropping it tells its handle it is done.
                r.publish(&self.control.local);
            }
        }
        readers.list = kept;
        Ok(())
    }
}

/// Why a window's evaluation stopped: the window fails and the run goes
/// on, or the run ends.
enum Fault {
    /// This window's result cannot be computed from its rows.
    Window(WindowError),
    /// Anything else (a bug, the system).
    Fatal(Error),
}

/// The main side's user-space plan on one window's rows (`global`: the row
/// of a global aggregate over no events, used when the kernel has none).
///
/// A value that does not fit (an exact SUM beyond its result type, decoded
/// here) and a DataFusion execution error of the remainder (CAST, division
/// by zero, …) are [`Fault::Window`]: they depend on this window's events
/// only. Anything else is fatal.
fn evaluate(
    rt: &tokio::runtime::Runtime,
    plan: &UserPlan,
    kernel_schema: &SchemaRef,
    global: Option<Vec<decode::Cell>>,
    rows: Rows,
) -> std::result::Result<RecordBatch, Fault> {
    run_on(rt, plan, window_input(kernel_schema, global, rows)?)
}

/// A window's rows as the user-space plans' input: decoded kernel rows (the
/// `global` row when there are none), or the batches as they are. A value
/// that does not fit is [`Fault::Window`].
fn window_input(
    kernel_schema: &SchemaRef,
    global: Option<Vec<decode::Cell>>,
    rows: Rows,
) -> std::result::Result<Vec<RecordBatch>, Fault> {
    match rows {
        Rows::Cells(mut rows) => {
            if rows.is_empty() {
                rows.extend(global);
            }
            if let Some(cause) = decode::overflow(&rows) {
                return Err(Fault::Window(WindowError {
                    cause: cause.to_string(),
                    kind: WindowErrorKind::Overflow,
                }));
            }
            Ok(vec![
                decode::batch(kernel_schema, &rows).map_err(|e| Fault::Fatal(e.into()))?
            ])
        }
        Rows::Batches(b) => Ok(b),
    }
}

/// `plan` on a window's `input`; a DataFusion execution error is the
/// window's ([`Fault::Window`]), anything else [`Fault::Fatal`].
fn run_on(
    rt: &tokio::runtime::Runtime,
    plan: &UserPlan,
    input: Vec<RecordBatch>,
) -> std::result::Result<RecordBatch, Fault> {
    plan.run_concat(rt, input).map_err(|e| match e {
        Error::Execution(cause) => Fault::Window(WindowError {
            cause,
            kind: WindowErrorKind::Evaluation,
        }),
        other => Fault::Fatal(other),
    })
}

/// `result` with the window bounds as leading columns
/// ([`crate::window::bound_fields`]): `clock` is the run's wall clock for
/// time windows, `None` for count windows.
fn with_window(
    out_schema: &SchemaRef,
    result: &RecordBatch,
    window: Option<WindowBounds>,
    clock: Option<&WallClock>,
) -> Result<RecordBatch> {
    let mut cols: Vec<ArrayRef> = Vec::new();
    if let Some(WindowBounds { start, end, .. }) = window {
        cols.extend(bound_arrays(start, end, clock, result.num_rows()));
    }
    cols.extend(result.columns().iter().cloned());
    // The reference's columns may be typed differently from the query's
    // (that is a disagreement the oracle reports, not a crash here).
    let schema = if out_schema
        .fields()
        .iter()
        .zip(&cols)
        .all(|(f, c)| f.data_type() == c.data_type())
        && out_schema.fields().len() == cols.len()
    {
        out_schema.clone()
    } else {
        let mut fields: Vec<Field> = Vec::new();
        if window.is_some() {
            fields.extend(bound_fields(clock.is_some()));
        }
        fields.extend(result.schema().fields().iter().map(|f| f.as_ref().clone()));
        Arc::new(Schema::new(fields))
    };
    Ok(RecordBatch::try_new_with_options(
        schema,
        cols,
        &datafusion::arrow::record_batch::RecordBatchOptions::new()
            .with_row_count(Some(result.num_rows())),
    )?)
}
