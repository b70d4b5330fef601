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
/// The kernel's exact SUM beyond UInt64 where DataFusion's reference wraps
/// is inconclusive, never a disagreement, and the window after it agrees.
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
    match &report.windows[0].verdict {
        Verdict::Inconclusive { reason } => assert!(
            reason.contains("wraps") && reason.contains("= 30000000000000000000 does not fit"),
            "{reason}"
        ),
        other => panic!("window 1: {other:?}\n{report}"),
    }
    assert_eq!(report.windows[1].verdict, Verdict::Agree, "{report}");
    assert_eq!(report.windows[1].kernel_error, None);
    assert_eq!(report.stats.windows_failed, 1);
}
