//! Emitting a window: the user-space plan run on its rows, the window
//! bounds added as leading columns, and the result sent (under `ebql
//! check`, with the reference's result on the same window).

use super::side::{Rows, TapRows};
use super::userplan::plan_has_limit;
use super::worker::Worker;
use crate::decode;
use crate::error::Result;
use crate::window::{WindowBatch, WindowBounds, WindowDrops};
use datafusion::arrow::array::{ArrayRef, UInt64Array};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
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
        let input = match rows {
            Rows::Cells(mut rows) => {
                if rows.is_empty() {
                    if let Some(spec) = self.shape.group_spec.as_ref().filter(|s| s.keys.is_empty())
                    {
                        rows.push(decode::empty_global_row(spec));
                    }
                }
                vec![decode::batch(&self.main.kernel_schema, &rows)?]
            }
            Rows::Batches(b) => b,
        };
        let result = self.main.plan.run_concat(rt, input)?;
        let out = with_window(&self.shape.out_schema, &result, window)?;
        self.control.local.rows_emitted += out.num_rows() as u64;
        self.control.local.windows_emitted += window.is_some() as u64;
        let sent = match (self.tap.as_ref(), reference) {
            (Some(tap), Some(TapRows { rows, unordered })) => {
                let input = match rows {
                    Rows::Cells(cells) => vec![decode::batch(&tap.kernel_schema, &cells)?],
                    Rows::Batches(b) => b,
                };
                let ref_result = tap.plan.run_concat(rt, input.clone())?;
                let reference = with_window(&self.shape.out_schema, &ref_result, window)?;
                let has_limit = plan_has_limit(&self.main.plan.remainder);
                tap.tx
                    .send(crate::check::CheckedWindow {
                        window: window.map(|w| (w.start, w.end)),
                        kernel: out,
                        reference,
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
                })
                .is_ok(),
        };
        if !sent {
            // Nobody listens any more: stop.
            self.control.stop.store(true, Ordering::SeqCst);
        }
        Ok(())
    }
}

/// `result` with the window bounds as leading columns.
fn with_window(
    out_schema: &SchemaRef,
    result: &RecordBatch,
    window: Option<WindowBounds>,
) -> Result<RecordBatch> {
    let mut cols: Vec<ArrayRef> = Vec::new();
    if let Some(WindowBounds { start, end, .. }) = window {
        let n = result.num_rows();
        cols.push(Arc::new(UInt64Array::from(vec![start; n])));
        cols.push(Arc::new(UInt64Array::from(vec![end; n])));
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
            fields.push(Field::new("window_start", DataType::UInt64, false));
            fields.push(Field::new("window_end", DataType::UInt64, false));
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
