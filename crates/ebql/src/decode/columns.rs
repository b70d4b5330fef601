//! The Arrow columns of ring-buffer records ([`super::stream_batch`]),
//! filled block by block: each column reads a block of records, then the
//! next column the same block, so a block (`BLOCK_RECORDS` records) stays
//! in the CPU's cache while every column reads it. One pass per column over
//! a whole batch of 2.4 KiB wire-capture records missed the cache once per
//! record and column (9% of a busy capture's CPU in a perf profile).

use datafusion::arrow::array::{
    ArrayRef, BinaryBuilder, BooleanBuilder, Int64Array, StringBuilder, UInt64Array,
};
use datafusion::arrow::error::ArrowError;
use ebql_compiler::bytetext;
use ebql_compiler::codegen::Stored;
use ebql_compiler::contract::uint_at;
use ebql_compiler::contract::{
    bytes_truncated, bytes_value, str_null, str_text, str_truncated, BYTES_HEADER,
};
use ebql_compiler::kexpr::wrap;
use std::sync::Arc;

/// Records per block: 64 records of the wire capture's 2,384 bytes are
/// 150 KiB, within a core's L2 cache.
pub(super) const BLOCK_RECORDS: usize = 64;

/// One column's values so far, as its stored form decodes.
pub(super) enum ColumnBuilder {
    Signed(Vec<i64>),
    Unsigned(Vec<u64>),
    Text(StringBuilder),
    Flags(BooleanBuilder),
    Binary(BinaryBuilder),
}

impl ColumnBuilder {
    /// An empty column of `stored` values for `rows` records; an error for
    /// a form that never is in a ring-buffer record (a group key's string).
    pub(super) fn new(stored: Stored, rows: usize) -> Result<ColumnBuilder, ArrowError> {
        Ok(match stored {
            Stored::Int { ty, .. } if ty.signed => ColumnBuilder::Signed(Vec::with_capacity(rows)),
            Stored::Int { .. } => ColumnBuilder::Unsigned(Vec::with_capacity(rows)),
            Stored::Str(_) | Stored::ReadStr(_) => {
                ColumnBuilder::Text(StringBuilder::with_capacity(rows, rows * 8))
            }
            Stored::Truncated(_) | Stored::BytesTruncated(_) => {
                ColumnBuilder::Flags(BooleanBuilder::with_capacity(rows))
            }
            Stored::ReadBytes(_) => {
                ColumnBuilder::Binary(BinaryBuilder::with_capacity(rows, rows * 8))
            }
            Stored::ReadKey(n) => {
                return Err(ArrowError::ComputeError(format!(
                    "a group key's string (ReadKey({n})) in a ring-buffer record"
                )))
            }
        })
    }

    /// Appends the value at `off` of each of `records` (stored as `stored`,
    /// the form this builder was made for).
    pub(super) fn append<'a>(
        &mut self,
        stored: Stored,
        off: usize,
        records: impl Iterator<Item = &'a [u8]>,
    ) {
        match (self, stored) {
            (ColumnBuilder::Signed(v), Stored::Int { ty, bytes }) => {
                v.extend(records.map(|r| wrap(le_at(r, off, bytes as usize), ty) as i64))
            }
            (ColumnBuilder::Unsigned(v), Stored::Int { ty, bytes }) => {
                v.extend(records.map(|r| wrap(le_at(r, off, bytes as usize), ty)))
            }
            (ColumnBuilder::Text(b), Stored::Str(len)) => {
                let len = len as usize;
                for r in records {
                    let s = &r[off..off + len];
                    let end = s.iter().position(|&c| c == 0).unwrap_or(len);
                    b.append_value(bytetext::encode(&s[..end]));
                }
            }
            (ColumnBuilder::Text(b), Stored::ReadStr(n)) => {
                for r in records {
                    let s = &r[off..off + n as usize + 2];
                    if str_null(s, n) {
                        b.append_null();
                    } else {
                        b.append_value(bytetext::encode(str_text(s, n)));
                    }
                }
            }
            (ColumnBuilder::Flags(b), Stored::Truncated(n)) => {
                for r in records {
                    let s = &r[off..off + n as usize + 2];
                    b.append_option((!str_null(s, n)).then(|| str_truncated(s, n)));
                }
            }
            (ColumnBuilder::Flags(b), Stored::BytesTruncated(_)) => {
                for r in records {
                    b.append_option(bytes_truncated(&r[off..off + BYTES_HEADER as usize]));
                }
            }
            (ColumnBuilder::Binary(b), Stored::ReadBytes(n)) => {
                for r in records {
                    b.append_option(bytes_value(&r[off..off + (n + BYTES_HEADER) as usize], n));
                }
            }
            _ => unreachable!("a column builder is made for its stored form"),
        }
    }

    /// The column.
    pub(super) fn finish(self) -> ArrayRef {
        match self {
            ColumnBuilder::Signed(v) => Arc::new(Int64Array::from(v)),
            ColumnBuilder::Unsigned(v) => Arc::new(UInt64Array::from(v)),
            ColumnBuilder::Text(mut b) => Arc::new(b.finish()),
            ColumnBuilder::Flags(mut b) => Arc::new(b.finish()),
            ColumnBuilder::Binary(mut b) => Arc::new(b.finish()),
        }
    }
}

/// [`uint_at`] with the ring buffer's 8-byte slots read in one load.
#[inline]
fn le_at(b: &[u8], off: usize, bytes: usize) -> u64 {
    match b.get(off..off + 8) {
        Some(w) if bytes == 8 => u64::from_le_bytes(w.try_into().expect("8 bytes")),
        _ => uint_at(b, off, bytes),
    }
}
