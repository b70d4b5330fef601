//! [`Side`]: one plan the query thread evaluates window by window, from
//! the kernel's output to the channel its results go to. A query has one
//! (the main side); under `ebql check` the oracle's tap is a second side
//! over the tap's raw rows, evaluated on the same windows.

use super::cutter::CountCutter;
use super::userplan::UserPlan;
use crate::decode::{self, Cell};
use crate::error::Result;
use crate::symbolize::{symbolize_rows, Stacks};
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;
use ebql_compiler::codegen::OutputLayout;
use ebql_runtime::Map;
use std::sync::mpsc::Sender;

/// One side of a query: its kernel output's records, the user-space plan
/// run on them and where the results go (`T`: a [`crate::window::WindowBatch`]
/// for the main side, a [`crate::check::CheckedWindow`] for the tap).
pub(super) struct Side<T> {
    /// The layout of the records this side reads (ring buffer, tap or group table).
    pub(super) layout: OutputLayout,
    /// Ring-buffer (or tap) rows not yet emitted, with their generation.
    pub(super) pending: decode::StreamRecords,
    /// Schema of the kernel's rows, the user-space plan's input.
    pub(super) kernel_schema: SchemaRef,
    /// What runs in user space on every window's rows.
    pub(super) plan: UserPlan,
    /// Count windows over streamed rows: the rows that passed the WHERE, in order.
    pub(super) cutter: Option<CountCutter>,
    /// Where this side's windows go.
    pub(super) tx: Sender<T>,
    /// A paired query's tap: its events are paired in user space
    /// ([`crate::check::Pairer`]) before the plan runs on the pairs.
    pub(super) pairing: Option<crate::check::Pairer>,
    /// A query over a wire relation: the captured calls are decoded into
    /// the relation's rows (`kernel_schema`) before the plan runs.
    pub(super) wire: Option<super::wire::WireStage>,
}

/// Rows of one window for a user-space plan: decoded kernel records, or
/// (count windows over streams) batches that already passed the WHERE.
pub(super) enum Rows {
    /// Decoded kernel records (group rows).
    Cells(Vec<Vec<Cell>>),
    /// Batches of the kernel schema (streams, or rows that passed a count window's WHERE).
    Batches(Vec<RecordBatch>),
}

/// A window's reference input under `ebql check`: the tap's rows (a paired
/// query's pairs), and how many of its events the pairing could not order
/// ([`crate::check::Pairer`]).
pub(super) struct TapRows {
    /// The reference plan's input.
    pub(super) rows: Rows,
    /// Events of one key on two threads too close in time to order.
    pub(super) unordered: u64,
}

/// Streamed records decoded into a batch of `schema`: straight into Arrow
/// ([`decode::stream_batch`]), or through cells when a column holds stack
/// ids to symbolize.
pub(super) fn records_batch(
    stacks: &mut Stacks,
    map: Option<&Map>,
    layout: &OutputLayout,
    schema: &SchemaRef,
    records: &[u8],
) -> Result<RecordBatch> {
    if map.is_none() || crate::symbolize::stack_columns(schema).is_empty() {
        return Ok(decode::stream_batch(layout, schema, records)?);
    }
    let rows = decode::stream_rows(layout, records)
        .into_iter()
        .map(|(_, r)| r)
        .collect();
    Ok(decode::batch(
        schema,
        &symbolize_rows(stacks, map, schema, rows),
    )?)
}
