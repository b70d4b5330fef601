//! What the kernel computes equals what DataFusion computes for the same SQL
//! on the same rows. A workload process of ours makes known pread64 calls;
//! every query is filtered to its pid and checked against exact values
//! derived here from the calls (with DataFusion's semantics: wrapping
//! integer arithmetic, shifts modulo the width, COUNT of non-NULL values).
//! Each test is named after what used to go wrong. Cases that only check
//! rows are in `tests/queries/semantics.ebqt`.

use crate::common::*;
use ebql::Executor;

const ENTER: &str = "tracepoint/syscalls/sys_enter_pread64";
const EXIT: &str = "tracepoint/syscalls/sys_exit_pread64";

/// An fd number the workload never has open: pread64 fails with EBADF.
const BAD_FD: u64 = 9999;

/// Like [`run_once`], for a query whose one result must fail: the run
/// ends normally, its result is a failed window (no rows, the cause in its
/// metadata) counted in the stats; the cause.
fn run_failing(sql: &str, work: impl FnOnce()) -> String {
    let mut ex = Executor::new();
    let mut q = ex.execute(sql).unwrap_or_else(|e| panic!("{}", e.render()));
    let rx = q.take_receiver().unwrap();
    work();
    let stats = q.stop().unwrap_or_else(|e| panic!("{sql}: {}", e.render()));
    let batches: Vec<_> = rx.try_iter().collect();
    assert_eq!(batches.len(), 1, "{sql}: one result");
    assert_eq!(
        batches[0].num_rows(),
        0,
        "{sql}: a failed result has no rows"
    );
    assert_eq!(stats.windows_failed, 1, "{sql}: {}", stats.to_json());
    ebql::window::WindowError::of_batch(&batches[0])
        .unwrap_or_else(|| panic!("{sql}: succeeded"))
        .cause
}

/// Whether `sql` runs its aggregate in the kernel (the fix must not just move everything to user space).
fn aggregated_in_kernel(sql: &str) -> bool {
    let c = Executor::new()
        .compile(sql)
        .unwrap_or_else(|e| panic!("{}", e.render()));
    matches!(
        c.split.kernel.output,
        ebql_compiler::split::KernelOutput::Groups(_)
    )
}

#[test]
fn count_of_case_when_counted_every_event() {
    let _k = kernel_lock();
    require_root();
    let mut w = Workload::start();
    let fd = w.file();
    let pid = w.pid;
    let sql = format!(
        "SELECT COUNT(CASE WHEN count > 150 THEN 1 END) AS n, COUNT(*) AS total, COUNT(count) AS c,
                COUNT(CASE WHEN count = 100 THEN fd WHEN comm = 'no such comm' THEN 1 END) AS m
         FROM {ENTER} WHERE pid = {pid}"
    );
    assert!(
        aggregated_in_kernel(&sql),
        "conditional counts stay in the kernel"
    );
    let r = run_once(&sql, || {
        w.pread(fd, 100, 4);
        w.pread(fd, 200, 3);
    });
    assert_eq!(
        (
            u64s(&r, "n"),
            u64s(&r, "total"),
            u64s(&r, "c"),
            u64s(&r, "m")
        ),
        (vec![3], vec![7], vec![7], vec![4])
    );
    // Grouped, and with a group whose conditional count is 0 (first event on a CPU fails the predicate).
    let sql = format!("SELECT count, COUNT(CASE WHEN count > 150 THEN 1 END) AS n FROM {ENTER} WHERE pid = {pid} GROUP BY count ORDER BY count");
    let r = run_once(&sql, || {
        w.pread(fd, 100, 4);
        w.pread(fd, 200, 3);
    });
    assert_eq!(
        (u64s(&r, "count"), u64s(&r, "n")),
        (vec![100, 200], vec![0, 3])
    );
    // A window without events: COUNT is 0, not NULL.
    let sql = format!("SELECT COUNT(CASE WHEN count > 150 THEN 1 END) AS n FROM {ENTER} WHERE pid = {pid} AND count = 12345");
    let r = run_once(&sql, || w.pread(fd, 100, 2));
    assert_eq!(u64s(&r, "n"), vec![0]);
}

#[test]
fn nullif_is_null_was_folded_to_false() {
    let _k = kernel_lock();
    require_root();
    let mut w = Workload::start();
    let fd = w.file();
    let pid = w.pid;
    let sql = format!(
        "SELECT COUNT(*) AS n FROM {ENTER} WHERE pid = {pid} AND NULLIF(count, 100) IS NULL"
    );
    let r = run_once(&sql, || {
        w.pread(fd, 100, 4);
        w.pread(fd, 200, 3);
    });
    assert_eq!(u64s(&r, "n"), vec![4]);
    let sql = format!(
        "SELECT COUNT(*) AS n FROM {ENTER} WHERE pid = {pid} AND NULLIF(count, 100) IS NOT NULL"
    );
    let r = run_once(&sql, || w.pread(fd, 100, 4));
    assert_eq!(u64s(&r, "n"), vec![0]);
}

#[test]
fn negative_return_values_read_as_signed() {
    let _k = kernel_lock();
    require_root();
    let mut w = Workload::start();
    let fd = w.file();
    let pid = w.pid;
    let sql = format!("SELECT MIN(ret) AS lo, MAX(ret) AS hi, SUM(ret) AS s, AVG(ret) AS mean, COUNT(*) AS n FROM {EXIT} WHERE pid = {pid}");
    assert!(aggregated_in_kernel(&sql));
    let r = run_once(&sql, || {
        w.pread_bad_fd(BAD_FD, 100, 5);
        w.pread(fd, 100, 2);
    });
    assert_eq!(
        (i64s(&r, "lo"), i64s(&r, "hi"), i64s(&r, "s"), u64s(&r, "n")),
        (vec![-9], vec![100], vec![155], vec![7])
    );
    assert_eq!(f64s(&r, "mean"), vec![155.0 / 7.0]);
    // ret (long) against fd (unsigned int): both widened to Int64 by DataFusion.
    let sql =
        format!("SELECT COUNT(*) AS n FROM {EXIT} WHERE pid = {pid} AND ret < 0 AND ret > -10");
    let r = run_once(&sql, || {
        w.pread_bad_fd(BAD_FD, 100, 5);
        w.pread(fd, 100, 2);
    });
    assert_eq!(u64s(&r, "n"), vec![5]);
}

#[test]
fn sum_wrapped_silently_at_64_bits() {
    let _k = kernel_lock();
    require_root();
    let mut w = Workload::start();
    let fd = w.file();
    let pid = w.pid;
    // 200 events of 100 · 10^17 = 10^19 each: every value fits UInt64, the sum (2 · 10^21) does not.
    let big = "count * 100000000000000000";
    let sql = format!("SELECT AVG({big}) AS mean, COUNT(*) AS n FROM {ENTER} WHERE pid = {pid}");
    assert!(aggregated_in_kernel(&sql));
    let r = run_once(&sql, || w.pread(fd, 100, 200));
    assert_eq!(
        (f64s(&r, "mean"), u64s(&r, "n")),
        (vec![1e19], vec![200]),
        "AVG from the exact sum"
    );

    let sql = format!("SELECT SUM({big}) AS s FROM {ENTER} WHERE pid = {pid}");
    let err = run_failing(&sql, || w.pread(fd, 100, 200));
    assert!(
        err.contains("= 2000000000000000000000 does not fit its result type UInt64"),
        "{err}"
    );
    assert!(
        err.contains("sum(") && err.contains("SUM(x / 1024)"),
        "names the aggregate and a remedy: {err}"
    );

    // Signed: 2 · (-9 · 10^18) is below i64::MIN; -9 · 10^18 + 100 · 10^16 is not.
    let sql = format!("SELECT SUM(ret * 1000000000000000000) AS s FROM {EXIT} WHERE pid = {pid}");
    let err = run_failing(&sql, || w.pread_bad_fd(BAD_FD, 100, 2));
    assert!(
        err.contains("= -18000000000000000000 does not fit its result type Int64"),
        "{err}"
    );
    let sql = format!("SELECT SUM(ret * 10000000000000000) AS s FROM {EXIT} WHERE pid = {pid}");
    let r = run_once(&sql, || {
        w.pread_bad_fd(BAD_FD, 100, 1);
        w.pread(fd, 100, 1);
    });
    assert_eq!(
        i64s(&r, "s"),
        vec![-9 * 10_000_000_000_000_000 + 100 * 10_000_000_000_000_000]
    );
}

#[test]
fn expressions_beyond_the_registers_were_an_internal_error() {
    let _k = kernel_lock();
    require_root();
    // DataFusion's planner recurses deeply on this expression: a main-thread-sized stack.
    std::thread::Builder::new()
        .stack_size(8 << 20)
        .spawn(huge_expression)
        .unwrap()
        .join()
        .unwrap();
}

fn huge_expression() {
    let mut w = Workload::start();
    let fd = w.file();
    let mut e = "fd".to_string();
    let mut want = fd as u32;
    for _ in 0..8 {
        e = format!("(fd + {e} * fd)");
        want = (fd as u32).wrapping_add(want.wrapping_mul(fd as u32));
    }
    let sql = format!(
        "SELECT SUM({e}) AS s, COUNT(*) AS n FROM {ENTER} WHERE pid = {} AND {e} > 0",
        w.pid
    );
    let r = run_once(&sql, || w.pread(fd, 100, 3));
    let rows = if want > 0 { 3 } else { 0 };
    assert_eq!(u64s(&r, "n"), vec![rows]);
    if rows > 0 {
        assert_eq!(u64s(&r, "s"), vec![3 * want as u64]);
    }
}

/// Sets the calling thread's comm (prctl PR_SET_NAME, at most 15 bytes).
fn set_thread_name(name: &str) {
    let c = std::ffi::CString::new(name).unwrap();
    // SAFETY: PR_SET_NAME reads a NUL-terminated string of at most 16 bytes.
    let rc = unsafe { libc::prctl(libc::PR_SET_NAME, c.as_ptr() as libc::c_ulong, 0, 0, 0) };
    assert_eq!(rc, 0, "prctl(PR_SET_NAME)");
}

#[test]
fn char_array_keys_with_stale_bytes_after_the_nul_split_groups() {
    let _k = kernel_lock();
    require_root();
    // task:task_rename copies the new name with strscpy into a reused trace
    // buffer: after a long name, a short one is followed by the long one's bytes.
    // SAFETY: gettid has no preconditions.
    let tid = unsafe { libc::gettid() };
    let sql = format!("SELECT newcomm, COUNT(*) AS n FROM tracepoint/task/task_rename WHERE pid = {tid} GROUP BY newcomm ORDER BY newcomm");
    assert!(aggregated_in_kernel(&sql));
    let r = run_once(&sql, || {
        for i in 0..5 {
            set_thread_name(&format!("semantics-long{i}"));
            set_thread_name("a");
        }
        set_thread_name("semantics");
    });
    let mut want: Vec<String> = vec!["a".into(), "semantics".into()];
    want.extend((0..5).map(|i| format!("semantics-long{i}")));
    assert_eq!(strings(&r, "newcomm"), want);
    assert_eq!(u64s(&r, "n"), vec![5, 1, 1, 1, 1, 1, 1]);
}

#[test]
fn narrow_signed_values_aggregate_with_their_sign() {
    let _k = kernel_lock();
    require_root();
    // task_rename records `short oom_score_adj` (Int16) of the renamed task's
    // process; 3 - oom_score_adj is Int16 arithmetic in DataFusion (raising
    // the adjustment and restoring 0 needs no privilege).
    // SAFETY: gettid has no preconditions.
    let tid = unsafe { libc::gettid() };
    let set_adj = |v: i32| {
        std::fs::write("/proc/self/oom_score_adj", v.to_string()).expect("write oom_score_adj")
    };
    let v = "CAST(3 AS SMALLINT) - oom_score_adj";
    let sql = format!(
        "SELECT MIN({v}) AS lo, MAX({v}) AS hi, SUM({v}) AS s, AVG({v}) AS mean, COUNT(*) AS n
         FROM tracepoint/task/task_rename WHERE pid = {tid} AND {v} < CAST(100 AS SMALLINT)"
    );
    assert!(aggregated_in_kernel(&sql));
    let r = run_once(&sql, || {
        set_adj(7);
        for _ in 0..3 {
            set_thread_name("semantics-adj");
        }
        set_adj(0);
        for _ in 0..2 {
            set_thread_name("semantics");
        }
    });
    assert_eq!(
        r.schema().field_with_name("lo").unwrap().data_type(),
        &ebql::arrow::datatypes::DataType::Int16
    );
    assert_eq!(
        (i64s(&r, "lo"), i64s(&r, "hi"), i64s(&r, "s"), u64s(&r, "n")),
        (vec![-4], vec![3], vec![-6], vec![5])
    );
    assert_eq!(f64s(&r, "mean"), vec![-6.0 / 5.0]);
}

#[test]
fn between_with_reversed_bounds_and_in_lists_match_sql() {
    let _k = kernel_lock();
    require_root();
    let mut w = Workload::start();
    let fd = w.file();
    let pid = w.pid;
    let sql = format!(
        "SELECT COUNT(CASE WHEN count BETWEEN 200 AND 100 THEN 1 END) AS reversed, COUNT(*) AS n FROM {ENTER}
         WHERE pid = {pid} AND count IN (100, 200, 18446744073709551615) AND NOT count IN (300)"
    );
    let r = run_once(&sql, || {
        w.pread(fd, 100, 2);
        w.pread(fd, 200, 3);
        w.pread(fd, 300, 4);
    });
    assert_eq!((u64s(&r, "reversed"), u64s(&r, "n")), (vec![0], vec![5]));
}
