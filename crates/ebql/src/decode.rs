//! Turning what the probe wrote (group-table entries, ring-buffer records)
//! into Arrow record batches with the kernel part's output schema.

use datafusion::arrow::array::{ArrayRef, Float64Array, Int64Array, StringArray, UInt64Array};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, SchemaRef};
use datafusion::arrow::error::ArrowError;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::ScalarValue;
use ebql_compiler::codegen::{OutputLayout, Stored};
use ebql_compiler::kexpr::{wrap, IntType};
use ebql_compiler::split::GroupSpec;
use std::sync::Arc;

pub use ebql_compiler::contract::{uint_at, Cell};

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
    if matches!(dt, DataType::List(_) | DataType::Struct(_)) {
        return nested_column(cells, dt);
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

/// A column of nested values (histograms): [`Cell::Scalar`]s of type `dt`, NULL for anything else.
fn nested_column(cells: &[Cell], dt: &DataType) -> Result<ArrayRef, ArrowError> {
    if cells.is_empty() {
        return Ok(datafusion::arrow::array::new_empty_array(dt));
    }
    let to_arrow = |e: datafusion::error::DataFusionError| ArrowError::ComputeError(e.to_string());
    let null = ScalarValue::try_from(dt).map_err(to_arrow)?;
    ScalarValue::iter_to_array(cells.iter().map(|c| match c {
        Cell::Scalar(s) => s.clone(),
        _ => null.clone(),
    }))
    .map_err(to_arrow)
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
            let gen = gen_in_record.then(|| uint_at(rec, 0, 8));
            (gen, columns.iter().map(|(off, st)| read_stored(rec, *off as usize, *st)).collect())
        })
        .collect()
}

/// Merges group value `from` into `into` (count and every state; both saw
/// events). Values are one CPU's share of a group-table entry, or merges of
/// them: across CPUs, and across the panes of a hopping window.
pub fn merge_value(spec: &GroupSpec, into: &mut [u8], from: &[u8]) {
    let count = uint_at(into, 0, 8) + uint_at(from, 0, 8);
    into[0..8].copy_from_slice(&count.to_le_bytes());
    for (i, s) in spec.slots.iter().enumerate() {
        let (off, len) = (spec.slot_offset(i) as usize, s.state.bytes() as usize);
        s.state.synopsis().merge(&mut into[off..off + len], &from[off..off + len]);
    }
}

/// The values of one group-table entry that saw events: `values` holds one
/// value per possible CPU, each `stride` bytes. One (CPU, value) per CPU when
/// `cpu` is a group key, else one value merged over CPUs (or none).
pub fn group_values(layout: &OutputLayout, spec: &GroupSpec, values: &[u8], stride: usize) -> Vec<(usize, Vec<u8>)> {
    let OutputLayout::Groups { keys, value_size, .. } = layout else {
        return Vec::new();
    };
    let per_cpu_key = keys.iter().any(|k| k.is_none());
    let mut out: Vec<(usize, Vec<u8>)> = Vec::new();
    for (cpu, v) in values.chunks_exact(stride).enumerate() {
        let v = &v[..*value_size as usize];
        if uint_at(v, 0, 8) == 0 {
            continue;
        }
        match out.first_mut() {
            Some((_, merged)) if !per_cpu_key => merge_value(spec, merged, v),
            _ => out.push((cpu, v.to_vec())),
        }
    }
    out
}

/// The output row of a group: its keys (read from `key`; `cpu` for the
/// per-CPU key) and each aggregate evaluated on `value`.
pub fn group_row(layout: &OutputLayout, spec: &GroupSpec, key: &[u8], cpu: usize, value: &[u8]) -> Vec<Cell> {
    let OutputLayout::Groups { keys, .. } = layout else {
        return Vec::new();
    };
    let mut row: Vec<Cell> = keys
        .iter()
        .map(|k| match k {
            None => Cell::Int(cpu as u64, IntType { bits: 32, signed: false }),
            Some((off, st)) => read_stored(key, *off as usize, *st),
        })
        .collect();
    let count = uint_at(value, 0, 8);
    row.extend(spec.aggs.iter().map(|(f, dt, text)| {
        let state = match f.slot() {
            Some(i) => {
                let off = spec.slot_offset(i) as usize;
                &value[off..off + spec.slots[i].state.bytes() as usize]
            }
            None => &[][..],
        };
        f.evaluate(&spec.slots, count, state, dt, text)
    }));
    row
}

/// Decodes one group-table entry into rows ([`group_values`], then [`group_row`]).
pub fn group_rows(layout: &OutputLayout, spec: &GroupSpec, key: &[u8], values: &[u8], stride: usize) -> Vec<Vec<Cell>> {
    group_values(layout, spec, values, stride).into_iter().map(|(cpu, v)| group_row(layout, spec, key, cpu, &v)).collect()
}

/// The single row of a global aggregate over a window with no events.
pub fn empty_global_row(spec: &GroupSpec) -> Vec<Cell> {
    spec.aggs.iter().map(|(f, _, _)| f.evaluate_empty()).collect()
}
