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

mod columns;
use columns::{ColumnBuilder, BLOCK_RECORDS};

use ebql_compiler::bytetext;
use ebql_compiler::contract::{
    bytes_truncated, bytes_value, key_str_null, str_null, str_text, str_truncated, BYTES_HEADER,
};
pub use ebql_compiler::contract::{uint_at, Cell};

fn read_stored(b: &[u8], off: usize, stored: Stored) -> Cell {
    match stored {
        Stored::Int { ty, bytes } => Cell::Int(wrap(uint_at(b, off, bytes as usize), ty), ty),
        Stored::Str(len) => {
            let bytes = &b[off..off + len as usize];
            let end = bytes.iter().position(|&c| c == 0).unwrap_or(bytes.len());
            Cell::Str(bytetext::encode(&bytes[..end]).into_owned())
        }
        Stored::ReadStr(n) if str_null(&b[off..off + n as usize + 2], n) => Cell::Null,
        Stored::ReadStr(n) => {
            Cell::Str(bytetext::encode(str_text(&b[off..off + n as usize + 1], n)).into_owned())
        }
        Stored::Truncated(n) if str_null(&b[off..off + n as usize + 2], n) => Cell::Null,
        Stored::Truncated(n) => Cell::Int(
            str_truncated(&b[off..off + n as usize + 1], n) as u64,
            IntType {
                bits: 8,
                signed: false,
            },
        ),
        Stored::ReadBytes(n) => match bytes_value(&b[off..off + (n + BYTES_HEADER) as usize], n) {
            Some(v) => Cell::Scalar(ScalarValue::Binary(Some(v.to_vec()))),
            None => Cell::Null,
        },
        Stored::BytesTruncated(_) => match bytes_truncated(&b[off..off + BYTES_HEADER as usize]) {
            Some(t) => Cell::Int(
                t as u64,
                IntType {
                    bits: 8,
                    signed: false,
                },
            ),
            None => Cell::Null,
        },
        Stored::ReadKey(n) if key_str_null(&b[off..off + n as usize], n) => Cell::Null,
        Stored::ReadKey(n) => read_stored(b, off, Stored::Str(n)),
    }
}

/// Builds a column of `dt` from cells.
fn column(cells: &[Cell], dt: &DataType) -> Result<ArrayRef, ArrowError> {
    if let Some(Cell::Overflow(msg)) = cells.iter().find(|c| matches!(c, Cell::Overflow(_))) {
        return Err(ArrowError::ComputeError(msg.clone()));
    }
    if matches!(
        dt,
        DataType::List(_) | DataType::Struct(_) | DataType::Binary
    ) {
        return nested_column(cells, dt);
    }
    let signed = cells
        .iter()
        .any(|c| matches!(c, Cell::Int(_, ty) if ty.signed));
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

/// A column of nested values (histograms) or of `bytes()`: [`Cell::Scalar`]s of type `dt`, NULL for anything else.
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

/// The first value of `rows` that does not fit its column ([`Cell::Overflow`]:
/// an exact SUM beyond its result type), as its message. [`batch`] fails on it.
pub fn overflow(rows: &[Vec<Cell>]) -> Option<&str> {
    rows.iter().flatten().find_map(|c| match c {
        Cell::Overflow(msg) => Some(msg.as_str()),
        _ => None,
    })
}

/// Assembles rows of cells into a batch of `schema`.
pub fn batch(schema: &SchemaRef, rows: &[Vec<Cell>]) -> Result<RecordBatch, ArrowError> {
    let mut cols = Vec::with_capacity(schema.fields().len());
    for (i, f) in schema.fields().iter().enumerate() {
        let cells: Vec<Cell> = rows.iter().map(|r| r[i].clone()).collect();
        cols.push(column(&cells, f.data_type())?);
    }
    RecordBatch::try_new_with_options(
        schema.clone(),
        cols,
        &datafusion::arrow::record_batch::RecordBatchOptions::new()
            .with_row_count(Some(rows.len())),
    )
}

/// Decodes ring-buffer records (`data` holds whole records back to back).
/// Returns (generation if recorded, row) per record.
pub fn stream_rows(layout: &OutputLayout, data: &[u8]) -> Vec<(Option<u64>, Vec<Cell>)> {
    let OutputLayout::Stream {
        record_size,
        gen_in_record,
        columns,
        outer,
        ..
    } = layout
    else {
        return Vec::new();
    };
    data.chunks_exact(*record_size as usize)
        .map(|rec| {
            let gen = gen_in_record.then(|| uint_at(rec, 0, 8));
            // An unmatched start's row (LEFT JOIN): the end's columns are NULL.
            let nulls = outer
                .as_ref()
                .filter(|o| !o.matched(rec))
                .map_or(&[][..], |o| o.end_columns.as_slice());
            let row = columns
                .iter()
                .enumerate()
                .map(|(i, (off, st))| {
                    if nulls.contains(&i) {
                        Cell::Null
                    } else {
                        read_stored(rec, *off as usize, *st)
                    }
                })
                .collect();
            (gen, row)
        })
        .collect()
}

/// Ring-buffer records drained but not yet decoded: whole records back to
/// back, as the probe wrote them (the fast path keeps bytes, not per-row
/// cells, until a window's batch is built by [`stream_batch`]). The buffers
/// handed out are given back ([`StreamRecords::recycle`]) and reused
/// without clearing: a busy capture moves megabytes a second, and fresh or
/// zeroed buffers would cost a page fault per 4 KiB or a memset per record.
#[derive(Debug, Default)]
pub struct StreamRecords {
    record_size: usize,
    gen_in_record: bool,
    /// The records are `data[..len]`; the bytes past it are stale (an
    /// earlier use's), kept so that the ring buffer overwrites them.
    data: Vec<u8>,
    len: usize,
    /// A buffer to take the place of one handed out (stale bytes).
    spare: Vec<u8>,
}

impl StreamRecords {
    /// An empty buffer for records of `layout` (a non-stream layout holds nothing).
    pub fn new(layout: &OutputLayout) -> StreamRecords {
        match layout {
            OutputLayout::Stream {
                record_size,
                gen_in_record,
                ..
            } => StreamRecords {
                record_size: *record_size as usize,
                gen_in_record: *gen_in_record,
                ..StreamRecords::default()
            },
            OutputLayout::Groups { .. } => StreamRecords::default(),
        }
    }

    /// The records waiting, back to back.
    fn records(&self) -> &[u8] {
        &self.data[..self.len]
    }

    /// Appends whole records (`data` as drained from the ring buffer); returns how many.
    pub fn push(&mut self, data: &[u8]) -> usize {
        if self.record_size == 0 {
            return 0;
        }
        let whole = data.len() / self.record_size * self.record_size;
        self.data.truncate(self.len);
        self.data.extend_from_slice(&data[..whole]);
        self.len += whole;
        whole / self.record_size
    }

    /// Appends what `rb` holds, straight into the buffer; returns the new
    /// records' bytes.
    pub fn drain(&mut self, rb: &mut ebql_runtime::RingBuffer) -> ebql_runtime::Result<&[u8]> {
        let before = self.len;
        self.len = rb.drain_into(&mut self.data, before)?;
        Ok(&self.data[before..self.len])
    }

    /// Records waiting.
    pub fn len(&self) -> usize {
        self.len.checked_div(self.record_size).unwrap_or(0)
    }

    /// True when no record waits.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Gives back a buffer [`StreamRecords::take_all`] and the others
    /// handed out, once read, to hold later records.
    pub fn recycle(&mut self, buf: Vec<u8>) {
        if buf.capacity() > self.spare.capacity() {
            self.spare = buf;
        }
    }

    /// Takes the first `n` records (all if fewer wait) and drops the rest.
    pub fn take_first(&mut self, n: usize) -> Vec<u8> {
        let mut all = self.take_all();
        all.truncate(n.saturating_mul(self.record_size));
        all
    }

    /// Takes every record.
    pub fn take_all(&mut self) -> Vec<u8> {
        let spare = std::mem::take(&mut self.spare);
        let mut all = std::mem::replace(&mut self.data, spare);
        all.truncate(std::mem::take(&mut self.len));
        all
    }

    /// Takes the records of time-window generation `gen`, in order; the
    /// others stay, in order.
    pub fn take_generation(&mut self, gen: u64) -> Vec<u8> {
        if !self.gen_in_record || self.record_size == 0 {
            return Vec::new();
        }
        let size = self.record_size;
        let of_gen = |rec: &[u8]| uint_at(rec, 0, 8) == gen;
        if self.records().chunks_exact(size).all(of_gen) {
            return self.take_all();
        }
        let mut now = std::mem::take(&mut self.spare);
        now.clear();
        // The others move up in place.
        let mut kept = 0;
        for at in (0..self.len / size).map(|i| i * size) {
            if of_gen(&self.data[at..at + size]) {
                now.extend_from_slice(&self.data[at..at + size]);
            } else {
                self.data.copy_within(at..at + size, kept);
                kept += size;
            }
        }
        self.len = kept;
        now
    }
}

/// Decodes ring-buffer records (`data`: whole records of `layout`) straight
/// into the Arrow columns of `schema`, one pass per column over each block
/// of records ([`columns`]), with no per-row [`Cell`]s (the ring-buffer path's hot loop: it must keep
/// up with millions of events a second). Same values as [`stream_rows`] then
/// [`batch`]: integers wrapped to their type, strings up to their first NUL
/// (as text: [`bytetext`]), then cast to the schema's type.
pub fn stream_batch(
    layout: &OutputLayout,
    schema: &SchemaRef,
    data: &[u8],
) -> Result<RecordBatch, ArrowError> {
    let OutputLayout::Stream {
        record_size,
        columns,
        outer,
        ..
    } = layout
    else {
        return Err(ArrowError::ComputeError(
            "stream_batch on a group-table layout".into(),
        ));
    };
    let size = *record_size as usize;
    let rows = data.len() / size;
    let records = || data.chunks_exact(size);
    // A LEFT JOIN pairing: true for an unmatched start's row, whose end columns are NULL.
    let unmatched = outer.as_ref().map(|o| {
        datafusion::arrow::array::BooleanArray::from_iter(records().map(|r| Some(!o.matched(r))))
    });
    let mut builders = columns
        .iter()
        .map(|(_, stored)| ColumnBuilder::new(*stored, rows))
        .collect::<Result<Vec<_>, _>>()?;
    for block in data[..rows * size].chunks(size * BLOCK_RECORDS) {
        for ((off, stored), b) in columns.iter().zip(&mut builders) {
            b.append(*stored, *off as usize, block.chunks_exact(size));
        }
    }
    let mut cols: Vec<ArrayRef> = Vec::with_capacity(columns.len());
    for (i, (b, field)) in builders.into_iter().zip(schema.fields()).enumerate() {
        let arr = b.finish();
        let arr = match (&unmatched, outer) {
            (Some(mask), Some(o)) if o.end_columns.contains(&i) => {
                datafusion::arrow::compute::nullif(&arr, mask)?
            }
            _ => arr,
        };
        cols.push(if arr.data_type() == field.data_type() {
            arr
        } else {
            cast(&arr, field.data_type())?
        });
    }
    RecordBatch::try_new_with_options(
        schema.clone(),
        cols,
        &datafusion::arrow::record_batch::RecordBatchOptions::new().with_row_count(Some(rows)),
    )
}

/// Merges group value `from` into `into` (count and every state; both saw
/// events). Values are one CPU's share of a group-table entry, or merges of
/// them: across CPUs, and across the panes of a hopping window.
pub fn merge_value(spec: &GroupSpec, into: &mut [u8], from: &[u8]) {
    let count = uint_at(into, 0, 8) + uint_at(from, 0, 8);
    into[0..8].copy_from_slice(&count.to_le_bytes());
    for (i, s) in spec.slots.iter().enumerate() {
        let (off, len) = (spec.slot_offset(i) as usize, s.state.bytes() as usize);
        s.state
            .synopsis()
            .merge(&mut into[off..off + len], &from[off..off + len]);
    }
}

/// The values of one group-table entry that saw events: `values` holds one
/// value per possible CPU, each `stride` bytes. One (CPU, value) per CPU when
/// `cpu` is a group key, else one value merged over CPUs (or none).
pub fn group_values(
    layout: &OutputLayout,
    spec: &GroupSpec,
    values: &[u8],
    stride: usize,
) -> Vec<(usize, Vec<u8>)> {
    let OutputLayout::Groups {
        keys, value_size, ..
    } = layout
    else {
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
pub fn group_row(
    layout: &OutputLayout,
    spec: &GroupSpec,
    key: &[u8],
    cpu: usize,
    value: &[u8],
) -> Vec<Cell> {
    let OutputLayout::Groups { keys, .. } = layout else {
        return Vec::new();
    };
    let mut row: Vec<Cell> = keys
        .iter()
        .map(|k| match k {
            None => Cell::Int(
                cpu as u64,
                IntType {
                    bits: 32,
                    signed: false,
                },
            ),
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
pub fn group_rows(
    layout: &OutputLayout,
    spec: &GroupSpec,
    key: &[u8],
    values: &[u8],
    stride: usize,
) -> Vec<Vec<Cell>> {
    group_values(layout, spec, values, stride)
        .into_iter()
        .map(|(cpu, v)| group_row(layout, spec, key, cpu, &v))
        .collect()
}

/// The single row of a global aggregate over a window with no events.
pub fn empty_global_row(spec: &GroupSpec) -> Vec<Cell> {
    spec.aggs
        .iter()
        .map(|(f, _, _)| f.evaluate_empty())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::datatypes::{Field, Schema};

    /// The fast path builds exactly what the cell path builds, on records
    /// with a negative narrow int, a u64, a string with NUL padding, an
    /// invalid UTF-8 string and a generation slot.
    #[test]
    fn stream_batch_equals_the_cell_path() {
        let i32t = IntType {
            bits: 32,
            signed: true,
        };
        let u64t = IntType {
            bits: 64,
            signed: false,
        };
        let layout = OutputLayout::Stream {
            record_size: 48,
            gen_in_record: true,
            columns: vec![
                (8, Stored::Int { ty: i32t, bytes: 8 }),
                (16, Stored::Int { ty: u64t, bytes: 8 }),
                (24, Stored::Str(16)),
                (40, Stored::ReadStr(4)),
                (40, Stored::Truncated(4)),
            ],
            outer: None,
            latest: None,
        };
        let schema: SchemaRef = Arc::new(Schema::new(vec![
            Field::new("a", DataType::Int32, true),
            Field::new("b", DataType::UInt64, true),
            Field::new("s", DataType::Utf8, true),
            Field::new("t", DataType::Utf8, true),
            Field::new("cut", DataType::Boolean, true),
        ]));
        // str(p, 4) reads 5 bytes: the helper copies min(length, 4) bytes and a NUL.
        let reads = [
            (&b"abc\0x"[..], "abc", false),
            (&b"abcd\0"[..], "abc", true),
            (&b"\0bcd\0"[..], "", false),
        ];
        let mut data = Vec::new();
        for ((gen, a, b, s), read) in [
            (3u64, -5i64, u64::MAX, &b"sshd\0\0junk"[..]),
            (4, 7, 0, &b"\xffbad"[..]),
            (3, i32::MIN as i64, 42, &b"sixteen-bytes-xx"[..]),
        ]
        .into_iter()
        .zip(reads)
        {
            let mut rec = [0u8; 48];
            rec[0..8].copy_from_slice(&gen.to_le_bytes());
            rec[8..16].copy_from_slice(&(a as u64).to_le_bytes());
            rec[16..24].copy_from_slice(&b.to_le_bytes());
            rec[24..24 + s.len()].copy_from_slice(s);
            rec[40..40 + read.0.len()].copy_from_slice(read.0);
            data.extend_from_slice(&rec);
        }
        let cells: Vec<Vec<Cell>> = stream_rows(&layout, &data)
            .into_iter()
            .map(|(_, r)| r)
            .collect();
        // The invalid byte is its escape, not U+FFFD (lossless: `bytetext`).
        assert_eq!(cells[1][2], Cell::Str("\\xffbad".into()));
        for (row, (_, text, cut)) in cells.iter().zip(reads) {
            assert_eq!(
                (&row[3], &row[4]),
                (
                    &Cell::Str(text.into()),
                    &Cell::Int(
                        cut as u64,
                        IntType {
                            bits: 8,
                            signed: false
                        }
                    )
                )
            );
        }
        assert_eq!(
            stream_batch(&layout, &schema, &data).unwrap(),
            batch(&schema, &cells).unwrap()
        );
        // Over several blocks of records (and a part of one), in order.
        let many = data.repeat(100);
        let many_cells: Vec<Vec<Cell>> = (0..100).flat_map(|_| cells.clone()).collect();
        assert_eq!(
            stream_batch(&layout, &schema, &many).unwrap(),
            batch(&schema, &many_cells).unwrap()
        );
        let mut pending = StreamRecords::new(&layout);
        assert_eq!(pending.push(&data), 3);
        let gen3 = pending.take_generation(3);
        assert_eq!((gen3.len() / 48, pending.len()), (2, 1));
        let fast = stream_batch(&layout, &schema, &gen3).unwrap();
        let slow: Vec<Vec<Cell>> = stream_rows(&layout, &gen3)
            .into_iter()
            .map(|(_, r)| r)
            .collect();
        assert_eq!(fast, batch(&schema, &slow).unwrap());
        assert_eq!(pending.take_first(0).len(), 0);
        assert!(pending.is_empty());
    }

    /// Taking a generation leaves the others' records in their order, and
    /// a recycled buffer holds the next records without losing any.
    #[test]
    fn a_generation_is_taken_in_order_and_buffers_are_reused() {
        let layout = OutputLayout::Stream {
            record_size: 16,
            gen_in_record: true,
            columns: vec![(
                8,
                Stored::Int {
                    ty: IntType::U64,
                    bytes: 8,
                },
            )],
            outer: None,
            latest: None,
        };
        let rec = |gen: u64, v: u64| [gen.to_le_bytes(), v.to_le_bytes()].concat();
        let values = |b: &[u8]| {
            b.chunks_exact(16)
                .map(|r| uint_at(r, 8, 8))
                .collect::<Vec<_>>()
        };
        let mut pending = StreamRecords::new(&layout);
        let data: Vec<u8> = [(1, 10), (2, 20), (1, 11), (3, 30), (2, 21)]
            .iter()
            .flat_map(|&(g, v)| rec(g, v))
            .collect();
        pending.push(&data);
        let one = pending.take_generation(1);
        assert_eq!(values(&one), [10, 11]);
        let capacity = one.capacity();
        pending.recycle(one);
        let two = pending.take_generation(2);
        assert_eq!(values(&two), [20, 21]);
        // The recycled buffer holds generation 2's records.
        assert_eq!(two.capacity(), capacity);
        pending.push(&rec(3, 31));
        assert_eq!(values(&pending.take_generation(3)), [30, 31]);
        assert!(pending.is_empty());

        // A recycled buffer keeps its old bytes (no zeroing): none of them
        // is a record once it holds the records.
        let mut stale = pending.take_all();
        stale.extend((0..4).flat_map(|v| rec(4, 40 + v)));
        pending.recycle(stale);
        assert!(pending.take_all().is_empty());
        assert!(pending.is_empty());
        pending.push(&rec(5, 51));
        assert_eq!(pending.len(), 1);
        assert_eq!(values(&pending.take_all()), [51]);
    }
    /// A string whose read failed (its flag byte set) is NULL, and so is
    /// its truncated(); the empty string read is itself; a group key's
    /// string is NULL when its last byte is set, on both decoding paths.
    #[test]
    fn a_failed_read_is_null_apart_from_the_empty_string() {
        let layout = OutputLayout::Stream {
            record_size: 8,
            gen_in_record: false,
            columns: vec![(0, Stored::ReadStr(4)), (0, Stored::Truncated(4))],
            outer: None,
            latest: None,
        };
        let schema: SchemaRef = Arc::new(Schema::new(vec![
            Field::new("s", DataType::Utf8, true),
            Field::new("cut", DataType::Boolean, true),
        ]));
        // str(p, 4): 5 bytes read, then the flag; the helper zeroes its buffer on a fault.
        let mut data = Vec::new();
        for rec in [b"\0\0\0\0\0\x01\0\0", b"\0junk\0\0\0", b"abcd\0\0\0\0"] {
            data.extend_from_slice(rec);
        }
        let cells: Vec<Vec<Cell>> = stream_rows(&layout, &data)
            .into_iter()
            .map(|(_, r)| r)
            .collect();
        let bool_cell = |b: bool| {
            Cell::Int(
                b as u64,
                IntType {
                    bits: 8,
                    signed: false,
                },
            )
        };
        assert_eq!(
            cells,
            [
                vec![Cell::Null, Cell::Null],
                vec![Cell::Str(String::new()), bool_cell(false)],
                vec![Cell::Str("abc".into()), bool_cell(true)],
            ]
        );
        let fast = stream_batch(&layout, &schema, &data).unwrap();
        assert_eq!(fast, batch(&schema, &cells).unwrap());
        assert_eq!(fast.column(0).null_count(), 1);
        // Keys: zeroed, read; the last byte is the flag.
        assert_eq!(
            read_stored(b"\0\0\0\x01", 0, Stored::ReadKey(4)),
            Cell::Null
        );
        assert_eq!(
            read_stored(b"\0\0\0\0", 0, Stored::ReadKey(4)),
            Cell::Str(String::new())
        );
        assert_eq!(
            read_stored(b"ab\0\0", 0, Stored::ReadKey(4)),
            Cell::Str("ab".into())
        );
    }

    /// A LEFT JOIN pairing's rows: a pair's as written, an unmatched start's
    /// (built from its start value as user space does at stop) with NULL end
    /// columns, the same on both decoding paths.
    #[test]
    fn unmatched_starts_have_null_end_columns() {
        let u64t = IntType {
            bits: 64,
            signed: false,
        };
        let outer = ebql_compiler::contract::Outer {
            matched_at: 24,
            end_columns: vec![1],
            from_start: vec![(0, 8, 8), (8, 16, 8)],
            value_size: 24,
        };
        let layout = OutputLayout::Stream {
            record_size: 32,
            gen_in_record: false,
            columns: vec![
                (0, Stored::Int { ty: u64t, bytes: 8 }),
                (16, Stored::Int { ty: u64t, bytes: 8 }),
                (8, Stored::ReadStr(6)),
            ],
            outer: Some(outer.clone()),
            latest: None,
        };
        let schema: SchemaRef = Arc::new(Schema::new(vec![
            Field::new("s", DataType::UInt64, false),
            Field::new("x", DataType::UInt64, true),
            Field::new("q", DataType::Utf8, false),
        ]));
        let mut paired = [0u8; 32];
        paired[0..8].copy_from_slice(&5u64.to_le_bytes());
        paired[8..12].copy_from_slice(b"abc\0");
        paired[16..24].copy_from_slice(&9u64.to_le_bytes());
        paired[24] = 1;
        let mut value = [0u8; 24];
        value[8..16].copy_from_slice(&6u64.to_le_bytes());
        value[16..20].copy_from_slice(b"xyz\0");
        let mut data = paired.to_vec();
        data.extend(outer.unmatched_row(32, None, &value));
        let cells: Vec<Vec<Cell>> = stream_rows(&layout, &data)
            .into_iter()
            .map(|(_, r)| r)
            .collect();
        let u = |v| Cell::Int(v, u64t);
        assert_eq!(
            cells,
            vec![
                vec![u(5), u(9), Cell::Str("abc".into())],
                vec![u(6), Cell::Null, Cell::Str("xyz".into())]
            ]
        );
        assert_eq!(
            stream_batch(&layout, &schema, &data).unwrap(),
            batch(&schema, &cells).unwrap()
        );
    }
}
