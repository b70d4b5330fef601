//! Views (issue 21, item 2): a query's own `CREATE VIEW` and the built-in
//! views, expanded before planning, so the user's conditions still run in
//! the kernel; exact counts of a workload's socket calls.

use crate::common::*;

/// A view defined before the query, over a built-in view: the workload's
/// 6 sends of 300 bytes pass `len > 100`, its 4 of 5 bytes do not. The
/// explained plan tests both conditions in the probe.
#[test]
fn a_view_of_a_builtin_view_counts_exactly_and_filters_in_the_kernel() {
    require_root();
    let _k = kernel_lock();
    let mut w = Workload::start();
    let sql = format!(
        "CREATE VIEW big_sends AS SELECT * FROM syscalls.socket_writes WHERE len > 100;\n\
         SELECT len, data_truncated, COUNT(*) AS n FROM big_sends WHERE pid = {} GROUP BY len, data_truncated",
        w.pid
    );
    let compiled = ebql::Executor::new()
        .compile_for_explain(&sql)
        .unwrap_or_else(|e| panic!("{}", e.render()));
    let explained = ebql_compiler::explain::explain(&compiled);
    assert!(
        explained.contains("filter (cost class 0): sys_enter_sendto.pid")
            && explained.contains("sys_enter_sendto.len > UInt64(100)"),
        "{explained}"
    );
    let b = run_once(&sql, || {
        assert_eq!(w.cmd("socket 300 6"), "ok 6");
        assert_eq!(w.cmd("socket 5 4"), "ok 4");
    });
    assert_eq!(u64s(&b, "len"), vec![300]);
    assert_eq!(u64s(&b, "n"), vec![6]);
}

/// The built-in `syscalls.socket_reads` reads each received buffer at the
/// exit: 3 messages of 20 bytes, whole (512 bytes kept).
#[test]
fn the_builtin_socket_reads_view_reads_what_was_received() {
    require_root();
    let _k = kernel_lock();
    let mut w = Workload::start();
    let sql = format!(
        "SELECT len, data, data_truncated FROM syscalls.socket_reads WHERE pid = {}",
        w.pid
    );
    let b = run_once(&sql, || assert_eq!(w.cmd("socket 20 3"), "ok 3"));
    assert_eq!(u64s(&b, "len"), vec![20; 3]);
    // Binary cast to text: the bytes themselves (0x00 … 0x13 are valid UTF-8).
    let sent: String = (0..20u8).map(char::from).collect();
    assert_eq!(strings(&b, "data"), vec![sent; 3]);
    assert_eq!(strings(&b, "data_truncated"), vec!["false"; 3]);
}
