//! The oracle's pairing (issue 19, item 2): user space pairs a paired
//! query's tapped start and end events by the pairing rule, sharing no code
//! with the kernel's start map (`ebql_compiler::check::PairCheck` says
//! which tap columns are keys and times; README, "Pairing two events", the rule):
//!
//! - a start event that passes the WHERE's start-only conjuncts is stored
//!   under its key, replacing an unmatched one (under `LEFT JOIN`, the
//!   replaced start is a row of this window, its end columns NULL);
//! - an end event takes the stored start of its key, if any: a pair, in the
//!   end's window;
//! - under `LEFT JOIN`, the starts left at stop are rows of the last window.
//!
//! Events are paired in time order (each side's `time`, ns), window by
//! window; stored starts carry over from window to window. The kernel pairs
//! in the order of its map operations instead, which is time order on one
//! thread; events of one key on two threads closer than [`RACE_NS`] may
//! have run their map operations in either order, so they are counted
//! (*unordered*) and a window holding them is not judged.

use crate::error::{Error, Result};
use datafusion::arrow::array::{
    new_null_array, Array, ArrayRef, BooleanArray, RecordBatch, UInt32Array, UInt64Array,
};
use datafusion::arrow::compute::{cast, interleave, take};
use datafusion::arrow::datatypes::{DataType, SchemaRef};
use datafusion::common::ScalarValue;
use datafusion::prelude::SessionContext;
use ebql_compiler::check::PairCheck;
use ebql_compiler::planner::WindowInput;
use std::collections::HashMap;
use std::sync::Arc;

/// Events of one key on two threads closer in time than this (ns) may meet
/// the start map in either order: the time is read at the top of each
/// program, the map operation comes later (with preemption off, within
/// microseconds; the margin covers interrupts).
pub(crate) const RACE_NS: u64 = 100_000;

/// A start waiting for its end: its window's start columns and its row there.
type Stored = (Arc<RecordBatch>, usize);

/// The pairing state of a running check.
pub(crate) struct Pairer {
    check: PairCheck,
    /// The pairs' schema: the tap's columns without the side.
    pairs: SchemaRef,
    /// Unmatched starts by key.
    starts: HashMap<Vec<Key>, Stored>,
    /// The last event of each key that met the start map: (time, tid).
    last: HashMap<Vec<Key>, (u64, u64)>,
}

impl Pairer {
    /// A pairer for `check`, making rows of `pairs` (the reference's input schema).
    pub(crate) fn new(check: PairCheck, pairs: SchemaRef) -> Pairer {
        Pairer {
            check,
            pairs,
            starts: HashMap::new(),
            last: HashMap::new(),
        }
    }

    /// The pairs of one window (or pane): `tap`, its tapped events in any
    /// order, paired in time order. `last`: the query stopped and this is
    /// its last window (a LEFT JOIN's starts still stored are rows of it).
    /// `ctx`/`input`: where the start filter ([`PairCheck::start_filter`]) runs.
    /// Returns the pairs and the count of unordered events among them.
    pub(crate) fn pair(
        &mut self,
        rt: &tokio::runtime::Runtime,
        ctx: &SessionContext,
        input: &WindowInput,
        tap: &RecordBatch,
        last: bool,
    ) -> Result<(RecordBatch, u64)> {
        let c = &self.check;
        let side = u64_column(tap, 0)?;
        let starts = Arc::new(tap.project(&c.sides.start.clone().collect::<Vec<_>>())?);
        let keep = self.start_filter(rt, ctx, input, &starts)?;
        let (start_time, end_time) = (u64_column(tap, c.start_time)?, u64_column(tap, c.end_time)?);
        let (start_tid, end_tid) = (u64_column(tap, c.start_tid)?, u64_column(tap, c.end_tid)?);
        let at = |i: usize| {
            if side.value(i) == 0 {
                (start_time.value(i), start_tid.value(i))
            } else {
                (end_time.value(i), end_tid.value(i))
            }
        };
        let mut order: Vec<(u64, usize)> = (0..tap.num_rows()).map(|i| (at(i).0, i)).collect();
        order.sort_unstable();
        let mut unordered = 0;
        let mut met = |key: &Vec<Key>, i: usize, last: &mut HashMap<Vec<Key>, (u64, u64)>| {
            let (t, tid) = at(i);
            if let Some((t0, tid0)) = last.insert(key.clone(), (t, tid)) {
                unordered += u64::from(tid0 != tid && t.abs_diff(t0) < RACE_NS);
            }
        };
        // Each row: its start (batch, row) and its end row in `tap`, if any.
        let mut rows: Vec<(Stored, Option<usize>)> = Vec::new();
        for (_, i) in order {
            if side.value(i) == 0 {
                if !keep.as_ref().is_none_or(|k| k.is_valid(i) && k.value(i)) {
                    continue;
                }
                let key = key_of(tap, &c.start_key, i)?;
                met(&key, i, &mut self.last);
                if let Some(old) = self.starts.insert(key, (starts.clone(), i)) {
                    if c.outer {
                        rows.push((old, None));
                    }
                }
            } else {
                let key = key_of(tap, &c.end_key, i)?;
                met(&key, i, &mut self.last);
                if let Some(start) = self.starts.remove(&key) {
                    rows.push((start, Some(i)));
                }
            }
        }
        if last && c.outer {
            rows.extend(self.starts.drain().map(|(_, s)| (s, None)));
        }
        Ok((self.assemble(tap, &rows)?, unordered))
    }

    /// Whether each tap row that is a start passes the start filter
    /// (`None`: every start does). Indexed like `starts`' rows.
    fn start_filter(
        &self,
        rt: &tokio::runtime::Runtime,
        ctx: &SessionContext,
        input: &WindowInput,
        starts: &RecordBatch,
    ) -> Result<Option<BooleanArray>> {
        let Some(plan) = &self.check.start_filter else {
            return Ok(None);
        };
        let mut columns: Vec<ArrayRef> = starts.columns().to_vec();
        let n = starts.num_rows();
        for f in self.pairs.fields().iter().skip(columns.len()) {
            columns.push(new_null_array(f.data_type(), n));
        }
        let batch = RecordBatch::try_new(self.pairs.clone(), columns)?;
        input.set(vec![batch]);
        let out = rt.block_on(async {
            ctx.execute_logical_plan(plan.clone())
                .await?
                .collect()
                .await
        })?;
        let arrays: Vec<ArrayRef> = out.iter().map(|b| b.column(0).clone()).collect();
        let refs: Vec<&dyn Array> = arrays.iter().map(|a| a.as_ref()).collect();
        let keep = if refs.is_empty() {
            BooleanArray::from(Vec::<bool>::new())
        } else {
            datafusion::arrow::compute::concat(&refs)?
                .as_any()
                .downcast_ref::<BooleanArray>()
                .cloned()
                .ok_or_else(|| Error::Internal("the start filter is not boolean".into()))?
        };
        if keep.len() != n {
            return Err(Error::Internal(format!(
                "the start filter gave {} values for {n} starts",
                keep.len()
            )));
        }
        Ok(Some(keep))
    }

    /// The pairs' batch: each row's start columns from its stored start,
    /// its end columns from `tap` (NULL for an unmatched start).
    fn assemble(&self, tap: &RecordBatch, rows: &[(Stored, Option<usize>)]) -> Result<RecordBatch> {
        let mut sources: Vec<Arc<RecordBatch>> = Vec::new();
        let mut at: Vec<(usize, usize)> = Vec::with_capacity(rows.len());
        for ((batch, row), _) in rows {
            let b = match sources.iter().position(|s| Arc::ptr_eq(s, batch)) {
                Some(b) => b,
                None => {
                    sources.push(batch.clone());
                    sources.len() - 1
                }
            };
            at.push((b, *row));
        }
        let mut columns: Vec<ArrayRef> = Vec::new();
        let width = self.check.sides.start.len();
        for c in 0..width {
            if rows.is_empty() {
                columns.push(new_null_array(self.pairs.field(c).data_type(), 0));
                continue;
            }
            let arrays: Vec<&dyn Array> = sources.iter().map(|s| s.column(c).as_ref()).collect();
            columns.push(interleave(&arrays, &at)?);
        }
        let ends = UInt32Array::from(
            rows.iter()
                .map(|(_, e)| e.map(|i| i as u32))
                .collect::<Vec<_>>(),
        );
        for c in self.check.sides.end.clone() {
            columns.push(take(tap.column(c).as_ref(), &ends, None)?);
        }
        Ok(RecordBatch::try_new_with_options(
            self.pairs.clone(),
            columns,
            &datafusion::arrow::record_batch::RecordBatchOptions::new()
                .with_row_count(Some(rows.len())),
        )?)
    }
}

/// Column `i` of `batch` as u64 values.
fn u64_column(batch: &RecordBatch, i: usize) -> Result<UInt64Array> {
    cast(batch.column(i), &DataType::UInt64)?
        .as_any()
        .downcast_ref::<UInt64Array>()
        .cloned()
        .ok_or_else(|| Error::Internal(format!("tap column {i} is not an integer")))
}

/// The key of row `row`: its values in `columns`, integers by value (the
/// two sides' key columns may differ in type: `u32` and `u64`).
fn key_of(batch: &RecordBatch, columns: &[usize], row: usize) -> Result<Vec<Key>> {
    columns
        .iter()
        .map(|&c| {
            let v = ScalarValue::try_from_array(batch.column(c), row)?;
            Ok(match v {
                ScalarValue::Int8(Some(x)) => Key::Int(x.into()),
                ScalarValue::Int16(Some(x)) => Key::Int(x.into()),
                ScalarValue::Int32(Some(x)) => Key::Int(x.into()),
                ScalarValue::Int64(Some(x)) => Key::Int(x.into()),
                ScalarValue::UInt8(Some(x)) => Key::Int(x.into()),
                ScalarValue::UInt16(Some(x)) => Key::Int(x.into()),
                ScalarValue::UInt32(Some(x)) => Key::Int(x.into()),
                ScalarValue::UInt64(Some(x)) => Key::Int(x.into()),
                other => Key::Other(other),
            })
        })
        .collect()
}

/// One key column's value.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Key {
    Int(i128),
    Other(ScalarValue),
}
