//! The capture's calls read straight from its ring-buffer records: no
//! Arrow columns are built for bytes the decoder reads once (building
//! them was ~15% of a busy capture's CPU in a profile under sysbench's
//! read_write, most of it copying each call's bytes into a binary column).

use crate::executor::passthrough::PassThrough;
use ebql_compiler::contract::{bytes_value, uint_at, OutputLayout, Stored, BYTES_HEADER};

/// One captured system call, as the capture's columns name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Call<'a> {
    /// The call's exit (CLOCK_MONOTONIC ns).
    pub(super) time: u64,
    /// The process (tgid).
    pub(super) pid: u32,
    /// The socket's descriptor (the call's first argument).
    pub(super) fd: u64,
    /// The system call number.
    pub(super) id: u64,
    /// Bytes the call moved (its return value, above 0).
    pub(super) ret: u64,
    /// The call's first bytes (empty when the read failed).
    pub(super) data: &'a [u8],
    /// The call's last bytes, when it moved more than the prefix holds.
    pub(super) tail: &'a [u8],
}

/// Where each of the capture's columns lies in its records.
#[derive(Debug, Clone)]
pub(super) struct CallFields {
    /// Bytes from one record to the next.
    size: usize,
    /// (offset, bytes) of `time`, `pid`, `fd`, `id`, `ret`.
    ints: [(usize, usize); 5],
    /// (offset, bound) of `data` and `tail`.
    data: (usize, u32),
    tail: (usize, u32),
    /// Bytes of a record up to the end of its last integer and of its
    /// `bytes()` values' headers: a record's used bytes hold at least these.
    fixed: usize,
}

impl CallFields {
    /// The fields of `layout`'s records that the capture's columns
    /// (`direct`: its plain projection of the kernel columns) are; `None`
    /// when a column is missing or not stored as the capture stores it
    /// (integers; `bytes()` values).
    pub(super) fn of(layout: &OutputLayout, direct: &PassThrough) -> Option<CallFields> {
        let (record_size, columns) = layout.inner_stream()?;
        let field = |name: &str| {
            let (_, i) = direct.columns().find(|(n, _)| *n == name)?;
            columns.get(i).copied()
        };
        let int = |name: &str| match field(name)? {
            (off, Stored::Int { bytes, .. }) => Some((off as usize, bytes as usize)),
            _ => None,
        };
        let bytes = |name: &str| match field(name)? {
            (off, Stored::ReadBytes(n)) => Some((off as usize, n)),
            _ => None,
        };
        let ints = [
            int("time")?,
            int("pid")?,
            int("fd")?,
            int("id")?,
            int("ret")?,
        ];
        let (data, tail) = (bytes("data")?, bytes("tail")?);
        let header = BYTES_HEADER as usize;
        let fixed = ints
            .iter()
            .map(|&(off, n)| off + n)
            .chain([data.0 + header, tail.0 + header])
            .max()
            .unwrap_or(0);
        Some(CallFields {
            size: record_size as usize,
            ints,
            data,
            tail,
            fixed,
        })
    }

    /// Bytes from one record to the next in a buffer of drained records.
    pub(super) fn size(&self) -> usize {
        self.size
    }

    /// Records in `records` (whole records, back to back).
    pub(super) fn count(&self, records: &[u8]) -> usize {
        records.len() / self.size
    }

    /// The whole record of `call`, as the probe writes it (a test's input).
    #[cfg(test)]
    pub(super) fn record(&self, call: &Call) -> Vec<u8> {
        let mut rec = vec![0u8; self.size];
        let values = [call.time, u64::from(call.pid), call.fd, call.id, call.ret];
        for (&(off, n), v) in self.ints.iter().zip(values) {
            rec[off..off + n].copy_from_slice(&v.to_le_bytes()[..n]);
        }
        for ((off, bound), bytes) in [(self.data, call.data), (self.tail, call.tail)] {
            assert!(
                bytes.len() <= bound as usize,
                "more bytes than the record holds"
            );
            rec[off..off + 4].copy_from_slice(&(bytes.len() as u32).to_le_bytes());
            let at = off + BYTES_HEADER as usize;
            rec[at..at + bytes.len()].copy_from_slice(bytes);
        }
        rec
    }

    /// The call of record `r` (a whole record, or its used bytes as the
    /// ring buffer holds it); `None` when `r` is too short to hold the
    /// capture's fields, which the probe never writes.
    pub(super) fn call<'a>(&self, r: &'a [u8]) -> Option<Call<'a>> {
        if r.len() < self.fixed {
            return None;
        }
        let [time, pid, fd, id, ret] = self.ints.map(|(off, n)| uint_at(r, off, n));
        let bytes = |(off, n): (usize, u32)| bytes_value(&r[off..], n).unwrap_or(&[]);
        Some(Call {
            time,
            // The kernel's tgid and a positive return value: the casts keep them whole.
            pid: pid as u32,
            fd,
            id,
            ret,
            data: bytes(self.data),
            tail: bytes(self.tail),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::postgres_capture;
    use super::*;
    use ebql_compiler::choose::HookChoice;

    /// The capture's columns are fields of its records on every hook it
    /// can run on: the stage reads no capture any other way.
    #[test]
    fn every_capture_hook_has_its_columns_in_its_records() {
        for hook in [HookChoice::Auto, HookChoice::RawTp, HookChoice::Tracefs] {
            let (c, direct) = postgres_capture(hook);
            assert!(
                CallFields::of(&c.code.layout, &direct).is_some(),
                "{hook:?}"
            );
        }
    }

    /// The capture of `SELECT * FROM postgres.statements`: its fields and
    /// a record written where the layout says, read back whole.
    #[test]
    fn a_record_reads_back_as_the_call_it_holds() {
        let (c, direct) = postgres_capture(HookChoice::Auto);
        let fields = CallFields::of(&c.code.layout, &direct).expect("the capture's fields");
        let mut rec = vec![0u8; fields.size * 2];
        let put = |rec: &mut [u8], (off, n): (usize, usize), v: u64| {
            rec[off..off + n].copy_from_slice(&v.to_le_bytes()[..n]);
        };
        let second = &mut rec[fields.size..];
        for (field, v) in fields.ints.iter().zip([1_000, 42, 7, 45, 5]) {
            put(second, *field, v);
        }
        let (off, _) = fields.data;
        put(second, (off, 4), 5);
        second[off + BYTES_HEADER as usize..][..5].copy_from_slice(b"Q\0\0\0\x04");
        // The tail's read failed (its NULL flag): no bytes.
        second[fields.tail.0 + 4] = 1;
        assert_eq!(fields.count(&rec), 2);
        let calls: Vec<Call> = rec
            .chunks_exact(fields.size())
            .map(|r| fields.call(r).expect("a whole record"))
            .collect();
        assert_eq!(
            calls[1],
            Call {
                time: 1_000,
                pid: 42,
                fd: 7,
                id: 45,
                ret: 5,
                data: b"Q\0\0\0\x04",
                tail: b"",
            }
        );
        assert_eq!(calls[0].data, b"", "an all-zero record holds no bytes");
        // As the ring buffer holds it: the used bytes only.
        let used = &rec[fields.size..][..off + BYTES_HEADER as usize + 5];
        assert_eq!(fields.call(used), Some(calls[1]));
        assert_eq!(fields.call(&used[..fields.fixed - 1]), None);
    }
}
