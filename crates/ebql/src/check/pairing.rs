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

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::datatypes::{Field, Schema};
    use ebql_compiler::codegen::TapSides;

    /// Tap rows `(side, tid, time)`; the start's key and tid are `e.tid`, the end's `x.tid`.
    fn tap(rows: &[(u64, u64, u64)]) -> RecordBatch {
        let col = |f: &dyn Fn(&(u64, u64, u64)) -> u64| {
            Arc::new(UInt64Array::from(rows.iter().map(f).collect::<Vec<_>>())) as ArrayRef
        };
        let start = |r: &(u64, u64, u64), v: u64| if r.0 == 0 { v } else { 0 };
        let end = |r: &(u64, u64, u64), v: u64| if r.0 == 1 { v } else { 0 };
        let schema = Arc::new(Schema::new(
            ["__side", "e.tid", "e.time", "x.tid", "x.time"]
                .map(|n| Field::new(n, DataType::UInt64, false))
                .to_vec(),
        ));
        RecordBatch::try_new(
            schema,
            vec![
                col(&|r| r.0),
                col(&|r| start(r, r.1)),
                col(&|r| start(r, r.2)),
                col(&|r| end(r, r.1)),
                col(&|r| end(r, r.2)),
            ],
        )
        .unwrap()
    }

    fn pairer(outer: bool) -> Pairer {
        let check = PairCheck {
            sides: TapSides {
                start: 1..3,
                end: 3..5,
            },
            start_key: vec![1],
            end_key: vec![3],
            start_time: 2,
            end_time: 4,
            start_tid: 1,
            end_tid: 3,
            outer,
            start_filter: None,
        };
        let pairs = Arc::new(Schema::new(
            ["e.tid", "e.time", "x.tid", "x.time"]
                .map(|n| Field::new(n, DataType::UInt64, true))
                .to_vec(),
        ));
        Pairer::new(check, pairs)
    }

    /// (start time, end time or None) per pair row, in row order.
    fn pairs_of(p: &mut Pairer, t: &RecordBatch, last: bool) -> (Vec<(u64, Option<u64>)>, u64) {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let ctx = SessionContext::new();
        let input = WindowInput::new(p.pairs.clone());
        let (b, unordered) = p.pair(&rt, &ctx, &input, t, last).unwrap();
        let s = u64_column(&b, 1).unwrap();
        let e = b.column(3).as_any().downcast_ref::<UInt64Array>().unwrap();
        let rows = (0..b.num_rows())
            .map(|i| (s.value(i), e.is_valid(i).then(|| e.value(i))))
            .collect();
        (rows, unordered)
    }

    /// An end takes the latest unmatched start of its key, in time order
    /// whatever the tap's order; a replaced start is a row only under LEFT JOIN.
    #[test]
    fn an_end_takes_the_latest_unmatched_start() {
        // Thread 7: starts at 10 and 20, ends at 30 and 40; thread 8: a start at 15, ended at 16.
        let t = tap(&[
            (1, 7, 40),
            (0, 7, 20),
            (1, 8, 16),
            (0, 7, 10),
            (1, 7, 30),
            (0, 8, 15),
        ]);
        let (rows, unordered) = pairs_of(&mut pairer(false), &t, true);
        assert_eq!(rows, vec![(15, Some(16)), (20, Some(30))]);
        assert_eq!(unordered, 0, "one thread per key");
        let (rows, _) = pairs_of(&mut pairer(true), &t, true);
        assert_eq!(rows, vec![(15, Some(16)), (10, None), (20, Some(30))]);
    }

    /// Starts carry over to later windows; LEFT JOIN's starts left at stop
    /// are rows of the last window only.
    #[test]
    fn starts_carry_over_and_are_rows_at_stop() {
        let mut p = pairer(true);
        let (rows, _) = pairs_of(&mut p, &tap(&[(0, 7, 10), (0, 9, 11)]), false);
        assert_eq!(rows, vec![]);
        let (rows, _) = pairs_of(&mut p, &tap(&[(1, 7, 20)]), false);
        assert_eq!(rows, vec![(10, Some(20))]);
        let (rows, _) = pairs_of(&mut p, &tap(&[]), true);
        assert_eq!(rows, vec![(11, None)]);
    }

    /// Events of one key on two threads closer than RACE_NS are unordered.
    #[test]
    fn one_key_on_two_threads_close_in_time_is_unordered() {
        let mut p = pairer(false);
        p.check.start_tid = 2; // the start's "tid" column is its time: another thread than the end's
        let near = tap(&[(0, 7, 10), (1, 7, 10 + RACE_NS - 1)]);
        assert_eq!(pairs_of(&mut p, &near, false).1, 1);
        let far = tap(&[(0, 7, 10 * RACE_NS), (1, 7, 20 * RACE_NS)]);
        assert_eq!(pairs_of(&mut p, &far, false).1, 0);
    }
}
