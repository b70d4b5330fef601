//! Distinct counts on the real kernel, beyond what a query file can say:
//! approx_distinct's error on large sets, COUNT(DISTINCT)'s full-set drops,
//! and the deletion of closed windows' set entries.


use crate::common::*;
use ebql::arrow::record_batch::RecordBatch;
use ebql::{Executor, ExecutorOptions};

const ENTER: &str = "tracepoint/syscalls/sys_enter_pread64";

/// Runs `sql` around `work`; every batch it emitted and its stats.
fn run(
    opts: ExecutorOptions,
    sql: &str,
    work: impl FnOnce(),
) -> (Vec<RecordBatch>, ebql::QueryStats) {
    let mut ex = Executor::with_options(opts);
    let c = ex.compile(sql).unwrap_or_else(|e| panic!("{}", e.render()));
    assert!(
        matches!(
            c.split.kernel.output,
            ebql_compiler::split::KernelOutput::Groups(_)
        ),
        "{sql}: aggregated in the kernel"
    );
    let mut q = ex.execute(sql).unwrap_or_else(|e| panic!("{}", e.render()));
    let rx = q.take_receiver().unwrap();
    work();
    let stats = q.stop().unwrap_or_else(|e| panic!("{}", e.render()));
    (rx.try_iter().collect(), stats)
}

#[test]
fn approx_distinct_within_three_standard_errors_on_10k_and_1m_values() {
    let _k = kernel_lock();
    require_root();
    let mut w = Workload::start();
    let fd = w.file();
    let sql = format!("SELECT approx_distinct(pos) AS a, COUNT(DISTINCT pos) AS d, COUNT(*) AS n FROM {ENTER} WHERE pid = {}", w.pid);
    let bound = 3.0 * ebql_compiler::agg::hll::standard_error();
    for (first, n, reps) in [(7u64, 10_000u64, 2u64), (1 << 20, 1_000_000, 1)] {
        let mut opts = ExecutorOptions::default();
        opts.codegen.max_distinct = 1 << 21;
        let (batches, stats) = run(opts, &sql, || w.preadpos(fd, first, n, reps));
        let b = &batches[0];
        assert_eq!(
            (u64s(b, "d"), u64s(b, "n"), stats.events_dropped()),
            (vec![n], vec![n * reps], 0),
            "exact distinct count of {n}"
        );
        let a = u64s(b, "a")[0] as f64;
        let rel = (a - n as f64).abs() / n as f64;
        assert!(rel <= bound, "approx_distinct of {n} distinct values = {a}: relative error {rel:.4} > 3 standard errors {bound:.4}");
    }
}

#[test]
fn full_distinct_set_counts_drops_and_keeps_counting_events() {
    let _k = kernel_lock();
    require_root();
    let mut w = Workload::start();
    let fd = w.file();
    let mut opts = ExecutorOptions::default();
    opts.codegen.max_distinct = 8;
    let sql = format!(
        "SELECT COUNT(DISTINCT pos) AS d, COUNT(*) AS n FROM {ENTER} WHERE pid = {}",
        w.pid
    );
    // 20 distinct values, twice: 8 enter the set; the other 12 are dropped each time.
    let (batches, stats) = run(opts, &sql, || w.preadpos(fd, 0, 20, 2));
    assert_eq!(
        (u64s(&batches[0], "d"), u64s(&batches[0], "n")),
        (vec![8], vec![40])
    );
    assert_eq!(
        (stats.dropped_distinct_full, stats.events_dropped()),
        (24, 24)
    );
}

#[test]
fn closed_windows_free_their_set_entries() {
    let _k = kernel_lock();
    require_root();
    let mut w = Workload::start();
    let fd = w.file();
    let mut opts = ExecutorOptions::default();
    // Room for 2 × 8 values: four rounds of 8 new values fit only if closed windows' entries are deleted.
    opts.codegen.max_distinct = 8;
    let sql = format!("SELECT COUNT(DISTINCT pos) AS d, COUNT(*) AS n FROM {ENTER} WHERE pid = {} WINDOW(time, 200, 200)", w.pid);
    let (batches, stats) = run(opts, &sql, || {
        for round in 0..4 {
            w.preadpos(fd, round * 8, 8, 1);
            w.sleep_ms(450);
        }
    });
    // A round may straddle a window boundary; every value is still counted once, in its window.
    let total = |name: &str| {
        batches
            .iter()
            .map(|b| u64s(b, name).iter().sum::<u64>())
            .sum::<u64>()
    };
    assert_eq!(
        (total("d"), total("n"), stats.dropped_distinct_full),
        (32, 32, 0)
    );
    for b in &batches {
        assert!(ebql::WindowDrops::of_batch(b).query_total() == 0);
    }
}
