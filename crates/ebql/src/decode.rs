//! Turning what the probe wrote (group-table entries, ring-buffer records)
//! into Arrow record batches with the kernel part's output schema.

use datafusion::arrow::array::{ArrayRef, Float64Array, Int64Array, StringArray, UInt64Array};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, SchemaRef};
use datafusion::arrow::error::ArrowError;
use datafusion::arrow::record_batch::RecordBatch;
use ebql_compiler::codegen::{OutputLayout, Stored};
use ebql_compiler::kexpr::{wrap, IntType};
use ebql_compiler::split::{AggOut, GroupSpec, SlotKind};
use std::sync::Arc;

/// One cell before it becomes part of an Arrow column.
#[derive(Clone, Debug, PartialEq)]
pub enum Cell {
    /// An integer as 64-bit two's complement (wrapped to its type), and its type.
    Int(u64, IntType),
    /// A string: the bytes before the first NUL, lossy UTF-8.
    Str(String),
    /// A float (AVG).
    Float(f64),
    /// SQL NULL (SUM/MIN/MAX/AVG of a window without events).
    Null,
    /// A SUM whose exact value does not fit its output type: building the
    /// batch fails with this message (DataFusion would wrap silently).
    Overflow(String),
}

fn u64_at(b: &[u8], off: usize) -> u64 {
    uint_at(b, off, 8)
}

/// Little-endian unsigned integer of `bytes` bytes at `off`.
pub fn uint_at(b: &[u8], off: usize, bytes: usize) -> u64 {
    b[off..off + bytes].iter().rev().fold(0u64, |acc, &x| (acc << 8) | x as u64)
}

fn read_stored(b: &[u8], off: usize, stored: Stored) -> Cell {
    match stored {
        Stored::Int { ty, bytes } => Cell::Int(wrap(uint_at(b, off, bytes as usize), ty), ty),
        Stored::Str(len) => {
            let bytes = &b[off..off + len as usize];
            let end = bytes.iter().position(|&c| c == 0).unwrap_or(bytes.len());
            Cell::Str(String::from_utf8_lossy(&bytes[..end]).into_owned())
        }
    }
}

/// Builds a column of `dt` from cells.
fn column(cells: &[Cell], dt: &DataType) -> Result<ArrayRef, ArrowError> {
    if let Some(Cell::Overflow(msg)) = cells.iter().find(|c| matches!(c, Cell::Overflow(_))) {
        return Err(ArrowError::ComputeError(msg.clone()));
    }
    let signed = cells.iter().any(|c| matches!(c, Cell::Int(_, ty) if ty.signed));
    let arr: ArrayRef = if cells.iter().any(|c| matches!(c, Cell::Str(_))) {
        Arc::new(StringArray::from_iter(cells.iter().map(|c| match c {
            Cell::Str(s) => Some(s.as_str()),
            _ => None,
        })))
    } else if cells.iter().any(|c| matches!(c, Cell::Float(_))) {
        Arc::new(Float64Array::from_iter(cells.iter().map(|c| match c {
            Cell::Float(f) => Some(*f),
            _ => None,
        })))
    } else if signed {
        Arc::new(Int64Array::from_iter(cells.iter().map(|c| match c {
            Cell::Int(v, _) => Some(*v as i64),
            _ => None,
        })))
    } else {
        Arc::new(UInt64Array::from_iter(cells.iter().map(|c| match c {
            Cell::Int(v, _) => Some(*v),
            _ => None,
        })))
    };
    if arr.data_type() == dt {
        Ok(arr)
    } else {
        cast(&arr, dt)
    }
}

/// Assembles rows of cells into a batch of `schema`.
pub fn batch(schema: &SchemaRef, rows: &[Vec<Cell>]) -> Result<RecordBatch, ArrowError> {
    let mut cols = Vec::with_capacity(schema.fields().len());
    for (i, f) in schema.fields().iter().enumerate() {
        let cells: Vec<Cell> = rows.iter().map(|r| r[i].clone()).collect();
        cols.push(column(&cells, f.data_type())?);
    }
    RecordBatch::try_new_with_options(schema.clone(), cols, &datafusion::arrow::record_batch::RecordBatchOptions::new().with_row_count(Some(rows.len())))
}

/// Decodes ring-buffer records (`data` holds whole records back to back).
/// Returns (generation if recorded, row) per record.
pub fn stream_rows(layout: &OutputLayout, data: &[u8]) -> Vec<(Option<u64>, Vec<Cell>)> {
    let OutputLayout::Stream { record_size, gen_in_record, columns } = layout else {
        return Vec::new();
    };
    data.chunks_exact(*record_size as usize)
        .map(|rec| {
            let gen = gen_in_record.then(|| u64_at(rec, 0));
            (gen, columns.iter().map(|(off, st)| read_stored(rec, *off as usize, *st)).collect())
        })
        .collect()
}

/// Merged per-group accumulators.
#[derive(Clone, Debug)]
struct Acc {
    count: u64,
    /// Exact slot values: 128-bit sums, MIN/MAX with their signedness applied.
    slots: Vec<i128>,
}

/// Slot `i` of one CPU's value: a 128-bit sum (low word, high word) or a
/// 64-bit MIN/MAX read with its signedness.
fn slot_value(spec: &GroupSpec, slot_signed: &[bool], v: &[u8], i: usize) -> i128 {
    let off = spec.slot_offset(i) as usize;
    let low = u64_at(v, off);
    match spec.slots[i].kind {
        SlotKind::Sum => ((u64_at(v, off + 8) as i64 as i128) << 64) | low as i128,
        SlotKind::Min | SlotKind::Max if slot_signed[i] => low as i64 as i128,
        SlotKind::Min | SlotKind::Max | SlotKind::CountWhen => low as i128,
    }
}

/// Decodes one group-table entry: `values` holds one value per possible CPU,
/// each `stride` bytes. Returns one row per CPU when `cpu` is a group key
/// (skipping CPUs that saw no event), else one merged row (or none).
pub fn group_rows(layout: &OutputLayout, spec: &GroupSpec, key: &[u8], values: &[u8], stride: usize) -> Vec<Vec<Cell>> {
    let OutputLayout::Groups { keys, slot_signed, .. } = layout else {
        return Vec::new();
    };
    let per_cpu_key = keys.iter().any(|k| k.is_none());
    let mut accs: Vec<(usize, Acc)> = Vec::new();
    for (cpu, v) in values.chunks_exact(stride).enumerate() {
        let count = u64_at(v, 0);
        if count == 0 {
            continue;
        }
        let slots: Vec<i128> = (0..spec.slots.len()).map(|i| slot_value(spec, slot_signed, v, i)).collect();
        let acc = Acc { count, slots };
        if per_cpu_key || accs.is_empty() {
            accs.push((cpu, acc));
        } else {
            let m = &mut accs[0].1;
            m.count += acc.count;
            for (i, s) in spec.slots.iter().enumerate() {
                let (a, b) = (m.slots[i], acc.slots[i]);
                m.slots[i] = match s.kind {
                    // Per-CPU sums are below 2^64 · 2^64 in magnitude; their sum fits i128.
                    SlotKind::Sum | SlotKind::CountWhen => a + b,
                    SlotKind::Min => a.min(b),
                    SlotKind::Max => a.max(b),
                };
            }
        }
    }
    accs.into_iter()
        .map(|(cpu, acc)| {
            let mut row: Vec<Cell> = keys
                .iter()
                .map(|k| match k {
                    None => Cell::Int(cpu as u64, IntType { bits: 32, signed: false }),
                    Some((off, st)) => read_stored(key, *off as usize, *st),
                })
                .collect();
            row.extend(agg_cells(spec, slot_signed, Some(&acc)));
            row
        })
        .collect()
}

/// Aggregate cells for a group; `None` is the empty input of a global aggregate
/// (SQL: COUNT is 0, the others NULL).
fn agg_cells(spec: &GroupSpec, slot_signed: &[bool], acc: Option<&Acc>) -> Vec<Cell> {
    spec.aggs
        .iter()
        .map(|(out, dt, text)| {
            let Some(acc) = acc else {
                return if matches!(out, AggOut::Count | AggOut::CountWhen(_)) { Cell::Int(0, IntType::I64) } else { Cell::Null };
            };
            match *out {
                AggOut::Count => Cell::Int(acc.count, IntType::I64),
                AggOut::CountWhen(i) => Cell::Int(acc.slots[i] as u64, IntType::I64),
                AggOut::Sum(i) => sum_cell(acc.slots[i], dt, text),
                AggOut::Min(i) | AggOut::Max(i) => Cell::Int(acc.slots[i] as u64, IntType { bits: 64, signed: slot_signed[i] }),
                // The exact sum divided once: no accumulated float rounding.
                AggOut::Avg(i) => Cell::Float(acc.slots[i] as f64 / acc.count as f64),
            }
        })
        .collect()
}

/// The exact sum as a cell of the output type, or the overflow error.
fn sum_cell(exact: i128, dt: &DataType, text: &str) -> Cell {
    // The plan text of an aliased aggregate ends in ` AS <output name>`.
    let text = text.rsplit(" AS ").next().unwrap_or(text);
    match IntType::of(dt) {
        Some(ty) if ty.min() <= exact && exact <= ty.max() => Cell::Int(exact as u64, ty),
        _ => Cell::Overflow(format!(
            "{text} = {exact} does not fit its result type {dt} in this window (SQL engines that wrap would report a wrong sum); \
             sum a scaled-down value instead, e.g. SUM(x / 1024), or use AVG(x) and COUNT(*)"
        )),
    }
}

/// The single row of a global aggregate over a window with no events.
pub fn empty_global_row(layout: &OutputLayout, spec: &GroupSpec) -> Vec<Cell> {
    let OutputLayout::Groups { slot_signed, .. } = layout else {
        return Vec::new();
    };
    agg_cells(spec, slot_signed, None)
}
