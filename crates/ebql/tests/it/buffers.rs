//! Buffers read with `bytes(p, len, n)` (issue 21, item 1): the workload
//! sends messages of known bytes (NULs included) over a Unix socket pair
//! and receives each with one `recv` into a 4,096-byte buffer. The data is
//! in that buffer only when `recvfrom` returns, so the end program reads it
//! at the pointer the start stored, for the length the end returned.

use crate::common::*;
use ebql::arrow::array::{Array, AsArray};
use ebql::arrow::record_batch::RecordBatch;

/// (bytes, truncated, rows) of a result with columns `b`, `t` and `n`.
fn groups(b: &RecordBatch) -> Vec<(Vec<u8>, bool, u64)> {
    let bytes = b.column_by_name("b").expect("column b").as_binary::<i32>();
    let cut = b.column_by_name("t").expect("column t").as_boolean();
    let n = u64s(b, "n");
    let mut out: Vec<_> = (0..b.num_rows())
        .map(|i| {
            assert!(!bytes.is_null(i) && !cut.is_null(i), "row {i} is NULL");
            (bytes.value(i).to_vec(), cut.value(i), n[i])
        })
        .collect();
    out.sort();
    out
}

fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|j| (j % 256) as u8).collect()
}

/// 40-byte messages received into a 4,096-byte buffer: read at the exit
/// for the 40 bytes `recvfrom` returned, cut to 16 (and flagged) or kept
/// whole with `n = 64`; grouped in user space, where Binary keys go.
#[test]
fn a_buffer_is_read_at_the_exit_for_the_length_returned() {
    require_root();
    let _k = kernel_lock();
    let mut w = Workload::start();
    for (n, want) in [(16, (pattern(16), true)), (64, (pattern(40), false))] {
        let sql = format!(
            "SELECT bytes(e.ubuf, x.ret, {n}) AS b, truncated(bytes(e.ubuf, x.ret, {n})) AS t, \
             COUNT(*) AS n \
             FROM tracepoint:syscalls:sys_enter_recvfrom e \
             JOIN tracepoint:syscalls:sys_exit_recvfrom x ON e.tid = x.tid \
             WHERE x.pid = {} GROUP BY b, t",
            w.pid
        );
        let b = run_once(&sql, || assert_eq!(w.cmd("socket 40 25"), "ok 25"));
        assert_eq!(groups(&b), vec![(want.0, want.1, 25)], "n = {n}");
    }
}

/// The send side needs no pairing: `sendto`'s buffer holds the data when
/// the call begins. A length of 0 reads nothing: the empty value, not NULL.
#[test]
fn a_single_event_reads_its_buffer_and_an_empty_length_is_empty() {
    require_root();
    let _k = kernel_lock();
    let mut w = Workload::start();
    let sql = format!(
        "SELECT bytes(buff, len, 8) AS b, truncated(bytes(buff, len, 8)) AS t, COUNT(*) AS n \
         FROM tracepoint:syscalls:sys_enter_sendto WHERE pid = {} GROUP BY b, t",
        w.pid
    );
    let b = run_once(&sql, || {
        assert_eq!(w.cmd("socket 300 7"), "ok 7");
        assert_eq!(w.cmd("socket 5 3"), "ok 3");
        assert_eq!(w.cmd("socket 0 2"), "ok 2");
    });
    assert_eq!(
        groups(&b),
        vec![
            (vec![], false, 2),
            (pattern(5), false, 3),
            (pattern(8), true, 7)
        ]
    );
}
