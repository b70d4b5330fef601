//! The differential oracle itself: DuckDB, the second reference, sees what
//! DataFusion's reference cannot (an optimizer rewrite both share), and
//! says when it cannot take part. Each query is filtered to a workload of
//! ours that makes an exact number of calls.

use crate::common::*;
use ebql::check::{CheckOptions, DuckDbUse, SecondReference, Verdict};
use ebql::{Executor, ExecutorOptions};

fn duckdb_required() -> CheckOptions {
    CheckOptions {
        duckdb: DuckDbUse::Require,
        ..Default::default()
    }
}

/// Issue 19, bug 2 as it was: with the old rewrite re-enabled
/// (`unchecked_casts`), DataFusion unwraps `CAST(args[1] AS BIGINT) < 0`
/// into `args[1] < 0`, the kernel counts 0 of 1,000 negative offsets, and
/// DataFusion's reference, planned by the same optimizer, agrees. DuckDB
/// evaluates the SQL as written: the cast of 2^64 - 5 fails, so the kernel's
/// answer is a disagreement.
#[test]
fn duckdb_catches_the_unwrapped_cast_that_datafusion_shared() {
    require_root();
    let _k = kernel_lock();
    let mut w = Workload::start();
    let fd = w.file();
    let mut opts = ExecutorOptions::default();
    opts.codegen.choices.unchecked_casts = true;
    let sql = format!(
        "SELECT COUNT(*) AS n FROM tracepoint/raw_syscalls/sys_enter \
         WHERE pid = {} AND id = 8 AND CAST(args[1] AS BIGINT) < 0",
        w.pid
    );
    let c = Executor::with_options(opts)
        .check(&sql, duckdb_required())
        .unwrap_or_else(|e| panic!("{}", e.render()));
    assert_eq!(w.cmd(&format!("lseek {fd} -5 1000")), "ok 1000");
    let report = c.stop().unwrap_or_else(|e| panic!("{}", e.render()));
    assert_eq!(report.windows.len(), 1);
    let window = &report.windows[0];
    assert_eq!(
        window.kernel_rows, 1,
        "the kernel's wrong answer: one row, n = 0"
    );
    assert!(!report.agrees(), "{report}");
    let Some(Verdict::Disagree { diff }) = &window.duckdb else {
        panic!("DuckDB must disagree: {report}");
    };
    assert!(diff.contains("Conversion Error"), "{diff}");
    match &window.verdict {
        Verdict::Disagree { diff } => assert!(
            diff.starts_with("DuckDB's reference"),
            "DataFusion's reference shares the rewrite and agrees, so the disagreement is DuckDB's: {diff}"
        ),
        other => panic!("{other:?}"),
    }
}

/// A standard-SQL query is evaluated by both references and both agree
/// with the kernel on every window (exact counts of the workload's calls).
#[test]
fn duckdb_agrees_with_the_kernel_on_standard_sql() {
    require_root();
    let _k = kernel_lock();
    let mut w = Workload::start();
    let (a, b) = (w.file(), w.file());
    let sql = format!(
        "SELECT fd, COUNT(*) AS n, SUM(count) AS bytes, AVG(count) AS avg, MAX(pos) AS top \
         FROM tracepoint/syscalls/sys_enter_pread64 WHERE pid = {} GROUP BY fd HAVING COUNT(*) > 3",
        w.pid
    );
    let c = Executor::new()
        .check(&sql, duckdb_required())
        .unwrap_or_else(|e| panic!("{}", e.render()));
    assert!(matches!(c.second_reference(), SecondReference::Used(_)));
    w.pread(a, 100, 7);
    w.pread(b, 10, 3);
    let report = c.stop().unwrap_or_else(|e| panic!("{}", e.render()));
    assert!(report.agrees(), "{report}");
    assert_eq!(report.windows.len(), 1);
    assert_eq!(
        report.windows[0].kernel_rows, 1,
        "fd {b} has 3 calls: HAVING drops it"
    );
    assert_eq!(report.duckdb_agreed(), 1, "{report}");
}

/// A query over several events is evaluated by DuckDB too, each event's
/// table made from its program's branch of the tap. The HAVING keeps a
/// group only with its exact counts, so a branch read as another event's
/// leaves DuckDB without rows. A union's aggregate (one kernel group
/// table) and a join of two aggregated relations.
#[test]
fn several_events_are_checked_by_both_references() {
    require_root();
    let _k = kernel_lock();
    let mut w = Workload::start();
    let (a, b) = (w.file(), w.file());
    let p = w.pid;
    let union = format!(
        "SELECT side, COUNT(*) AS n, SUM(v) AS s FROM ( \
           SELECT 'enter' AS side, count AS v FROM tracepoint/syscalls/sys_enter_pread64 WHERE pid = {p} \
           UNION ALL SELECT 'exit' AS side, ret AS v FROM tracepoint/syscalls/sys_exit_pread64 WHERE pid = {p} AND ret > 50) \
         GROUP BY side HAVING (side = 'enter' AND COUNT(*) = 10 AND SUM(v) = 730) \
           OR (side = 'exit' AND COUNT(*) = 7 AND SUM(v) = 700)"
    );
    let join = format!(
        "SELECT e.n, x.bytes FROM (SELECT tid, COUNT(*) AS n FROM tracepoint/syscalls/sys_enter_pread64 \
           WHERE pid = {p} GROUP BY tid) AS e \
         JOIN (SELECT tid, SUM(ret) AS bytes FROM tracepoint/syscalls/sys_exit_pread64 WHERE pid = {p} GROUP BY tid) AS x \
           ON e.tid = x.tid WHERE e.n = 10 AND x.bytes = 730"
    );
    for (sql, rows) in [(union, 2), (join, 1)] {
        let c = Executor::new()
            .check(&sql, duckdb_required())
            .unwrap_or_else(|e| panic!("{}", e.render()));
        assert!(matches!(c.second_reference(), SecondReference::Used(_)));
        w.pread(a, 100, 7);
        w.pread(b, 10, 3);
        let report = c.stop().unwrap_or_else(|e| panic!("{}", e.render()));
        assert!(report.agrees(), "{report}");
        assert_eq!(report.windows.len(), 1, "{report}");
        assert_eq!(report.windows[0].kernel_rows, rows, "{report}");
        assert_eq!(report.duckdb_agreed(), 1, "{report}");
    }
}

/// A query DuckDB cannot run (eBQL's own aggregate) is checked by
/// DataFusion alone, and the report says why; `Require` refuses to start.
#[test]
fn duckdb_says_why_it_cannot_take_part() {
    require_root();
    let _k = kernel_lock();
    let sql = "SELECT hist(count) FROM tracepoint/syscalls/sys_enter_pread64 WHERE pid = 1";
    let c = Executor::new()
        .check(sql, CheckOptions::default())
        .unwrap_or_else(|e| panic!("{}", e.render()));
    assert_eq!(
        c.second_reference(),
        &SecondReference::NotUsed("hist() is not standard SQL".into())
    );
    let report = c.stop().unwrap();
    assert!(
        report.to_string().contains("DuckDB not used: hist()"),
        "{report}"
    );
    let refused = Executor::new().check(sql, duckdb_required());
    assert!(
        refused.is_err_and(|e| e.render().contains("hist() is not standard SQL")),
        "Require fails when DuckDB cannot run the query"
    );
}

/// Issue 19, item 7: a failed window is judged consistently. Count windows
/// of 3 events (exact on one thread). A division by zero of the remainder
/// (`COUNT(*) - 3` is 0 in every full window) fails both sides: they
/// agree, and the kernel's error is kept with the verdict.
/// The kernel's exact SUM beyond UInt64 fails the window, and so does the
/// reference's (eBQL's exact SUM, not DataFusion's wrapping one): they
/// agree, and the window after it agrees.
#[test]
fn a_failed_window_agrees_or_is_inconclusive_never_a_false_disagreement() {
    require_root();
    let _k = kernel_lock();
    let mut w = Workload::start();
    let fd = w.file();
    let pid = w.pid;
    let ev = "tracepoint/syscalls/sys_enter_pread64";
    let sql = format!(
        "SELECT COUNT(*) AS n, SUM(count) / (COUNT(*) - 3) AS q FROM {ev} WHERE pid = {pid} WINDOW(count, 3, 3)"
    );
    let c = Executor::new()
        .check(&sql, CheckOptions::default())
        .unwrap_or_else(|e| panic!("{}", e.render()));
    w.pread(fd, 100, 6);
    let report = c.stop().unwrap_or_else(|e| panic!("{}", e.render()));
    assert_eq!(report.windows.len(), 2, "{report}");
    assert!(report.agrees(), "{report}");
    for window in &report.windows {
        assert_eq!(window.verdict, Verdict::Agree, "{report}");
        let e = window.kernel_error.as_deref().unwrap_or_default();
        assert!(e.contains("Divide by zero"), "{report}");
    }
    assert_eq!(report.stats.windows_failed, 2);

    let sql = format!(
        "SELECT SUM(count * 100000000000000000) AS s, COUNT(*) AS n FROM {ev} WHERE pid = {pid} WINDOW(count, 3, 3)"
    );
    let c = Executor::new()
        .check(&sql, CheckOptions::default())
        .unwrap_or_else(|e| panic!("{}", e.render()));
    w.pread(fd, 100, 3);
    w.pread(fd, 1, 3);
    let report = c.stop().unwrap_or_else(|e| panic!("{}", e.render()));
    assert_eq!(report.windows.len(), 2, "{report}");
    assert!(report.agrees(), "{report}");
    // Both sides fail the window: the reference's SUM is exact too.
    assert_eq!(report.windows[0].verdict, Verdict::Agree, "{report}");
    let e = report.windows[0]
        .kernel_error
        .as_deref()
        .unwrap_or_default();
    assert!(
        e.contains("= 30000000000000000000 does not fit"),
        "{report}"
    );
    assert_eq!(report.windows[1].verdict, Verdict::Agree, "{report}");
    assert_eq!(report.windows[1].kernel_error, None);
    assert_eq!(report.stats.windows_failed, 1);
}

/// Issue 19, item 2: a pairing under the oracle. Both programs tap their
/// events; user space pairs them by the pairing rule and both references
/// run the SQL over the pairs. The WHERE's start-only conjunct
/// (`e.count > 50`) decides which starts are stored. Exact: fd `a` has 7
/// reads of 100 bytes (and 4 of 10, not stored), fd `b` 5 of 100.
#[test]
fn a_pairing_is_checked_by_both_references() {
    require_root();
    let _k = kernel_lock();
    let mut w = Workload::start();
    let (a, b) = (w.file(), w.file());
    // The HAVING keeps a group only with its exact count and bytes.
    let sql = format!(
        "SELECT e.fd, COUNT(*) AS n, SUM(x.ret) AS bytes, MIN(x.time - e.time) > 0 AS later \
         FROM tracepoint:syscalls:sys_enter_pread64 AS e \
         JOIN tracepoint:syscalls:sys_exit_pread64 AS x ON e.tid = x.tid \
         WHERE e.pid = {} AND e.count > 50 GROUP BY e.fd \
         HAVING (e.fd = {a} AND COUNT(*) = 7 AND SUM(x.ret) = 700) \
             OR (e.fd = {b} AND COUNT(*) = 5 AND SUM(x.ret) = 500) \
         ORDER BY e.fd",
        w.pid
    );
    let c = Executor::new()
        .check(&sql, duckdb_required())
        .unwrap_or_else(|e| panic!("{}", e.render()));
    w.pread(a, 100, 7);
    w.pread(a, 10, 4);
    w.pread(b, 100, 5);
    let report = c.stop().unwrap_or_else(|e| panic!("{}", e.render()));
    assert!(report.agrees(), "{report}");
    assert_eq!(report.windows.len(), 1);
    assert_eq!(report.windows[0].verdict, Verdict::Agree, "{report}");
    assert_eq!(report.windows[0].kernel_rows, 2, "{report}");
    assert_eq!(report.duckdb_agreed(), 1, "{report}");
}

/// A LEFT JOIN pairing under the oracle: every start is a row. Starts are
/// pread64 entries, ends clock_nanosleep exits of the same thread: of 5
/// reads, the first 4 are replaced (4 unmatched rows), the 5th is taken by
/// the sleep (a pair); of the next 2, the first is replaced and the second
/// is left at stop (2 unmatched rows). 7 rows, 1 paired, in both the
/// kernel and the references.
#[test]
fn a_left_pairing_counts_its_unmatched_starts_like_the_kernel() {
    require_root();
    let _k = kernel_lock();
    let mut w = Workload::start();
    let fd = w.file();
    // One row only with the exact counts.
    let sql = format!(
        "SELECT COUNT(*) AS n, COUNT(x.tid) AS paired \
         FROM tracepoint:syscalls:sys_enter_pread64 AS e \
         LEFT JOIN tracepoint:syscalls:sys_exit_clock_nanosleep AS x ON e.tid = x.tid \
         WHERE e.pid = {} HAVING COUNT(*) = 7 AND COUNT(x.tid) = 1",
        w.pid
    );
    let c = Executor::new()
        .check(&sql, duckdb_required())
        .unwrap_or_else(|e| panic!("{}", e.render()));
    w.pread(fd, 100, 5);
    w.nanosleep(1000, 1);
    w.pread(fd, 100, 2);
    let report = c.stop().unwrap_or_else(|e| panic!("{}", e.render()));
    assert!(report.agrees(), "{report}");
    assert_eq!(report.windows[0].verdict, Verdict::Agree, "{report}");
    assert_eq!(report.duckdb_agreed(), 1, "{report}");
    assert_eq!(report.windows[0].kernel_rows, 1, "{report}");
    assert_eq!(report.stats.pair_starts_left, 1, "{report}");
    assert_eq!(report.stats.pair_starts_overwritten, 5, "{report}");
}
