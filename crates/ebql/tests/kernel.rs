//! Queries on real kernel events: a workload process of ours makes a known
//! number of pread64 calls; queries filtered to its pid must give exact results.

mod common;

use common::*;
use ebql::arrow::record_batch::RecordBatch;
use ebql::Executor;
use std::collections::BTreeMap;
use std::sync::mpsc::Receiver;
use std::time::Duration;

const EV: &str = "tracepoint/syscalls/sys_enter_pread64";

/// Per-fd totals of a (fd, cpu)-grouped window: count, sum, min, max.
fn per_fd(b: &RecordBatch) -> BTreeMap<u64, (u64, u64, u64, u64)> {
    let (fd, n, sum, min, max) = (u64s(b, "fd"), u64s(b, "n"), u64s(b, "s"), u64s(b, "lo"), u64s(b, "hi"));
    let mut out: BTreeMap<u64, (u64, u64, u64, u64)> = BTreeMap::new();
    for i in 0..b.num_rows() {
        let e = out.entry(fd[i]).or_insert((0, 0, u64::MAX, 0));
        e.0 += n[i];
        e.1 += sum[i];
        e.2 = e.2.min(min[i]);
        e.3 = e.3.max(max[i]);
    }
    out
}

fn next_window(rx: &Receiver<RecordBatch>) -> RecordBatch {
    rx.recv_timeout(Duration::from_secs(5)).expect("a window closes on time")
}

/// Stops the query and returns every batch it emitted after the ones already read.
fn stop_and_collect(q: ebql::RunningQuery, rx: Receiver<RecordBatch>) -> (Vec<RecordBatch>, ebql::QueryStats) {
    let stats = q.stop().expect("stop");
    (rx.try_iter().collect(), stats)
}

#[test]
fn two_windows_exact_aggregates_per_group() {
    let _k = kernel_lock();
    require_root();
    let mut w = Workload::start();
    let (a, b) = (w.file(), w.file());
    let sql = format!(
        "SELECT fd, cpu, COUNT(*) AS n, SUM(count) AS s, MIN(count) AS lo, MAX(count) AS hi, AVG(count) AS mean
         FROM {EV} GROUP BY fd, cpu WHERE pid == {} WINDOW(time, 500, 500);",
        w.pid
    );
    let mut ex = Executor::new();
    let mut q = ex.execute(&sql).expect("attach");
    let rx = q.take_receiver().unwrap();
    // Sync on a boundary: a window just closed, the next one has ~500 ms left.
    let first = next_window(&rx);
    assert_eq!(first.num_rows(), 0, "nothing happened yet");
    assert_eq!(first.schema().field(0).name(), "window_start");

    w.pread(a, 100, 10);
    w.pread(a, 200, 5);
    w.pread(b, 50, 7);
    let w1 = next_window(&rx);
    w.pread(a, 300, 3);
    let w2 = next_window(&rx);
    let (rest, stats) = stop_and_collect(q, rx);

    let t1 = per_fd(&w1);
    assert_eq!(t1.get(&a), Some(&(15, 2000, 100, 200)), "window 1, fd a: {w1:?}");
    assert_eq!(t1.get(&b), Some(&(7, 350, 50, 50)));
    assert_eq!(t1.len(), 2);
    // AVG in the same row as the other aggregates: sum/count of that row.
    for ((n, s), mean) in u64s(&w1, "n").iter().zip(u64s(&w1, "s")).zip(f64s(&w1, "mean")) {
        assert!((mean - s as f64 / *n as f64).abs() < 1e-9);
    }
    let t2 = per_fd(&w2);
    assert_eq!(t2.get(&a), Some(&(3, 900, 300, 300)), "MIN/MAX restart in the second window: {w2:?}");
    assert_eq!(t2.get(&b), None, "a group absent from a window does not appear in it");
    assert!(rest.iter().all(|r| r.num_rows() == 0), "nothing after: {rest:?}");
    let ws = u64s(&w2, "window_start")[0];
    let we = u64s(&w1, "window_end")[0];
    assert_eq!(ws, we, "windows are contiguous");
    assert_eq!(stats.events_matched, 25);
    assert_eq!(stats.events_dropped(), 0);
    assert!(stats.events_seen >= 25);
}

/// Runs an unwindowed query around `work` and returns its single result batch.
fn run_once(sql: &str, work: impl FnOnce()) -> (RecordBatch, ebql::QueryStats) {
    let mut ex = Executor::new();
    let mut q = ex.execute(sql).unwrap_or_else(|e| panic!("{}", e.render()));
    let rx = q.take_receiver().unwrap();
    work();
    let (batches, stats) = stop_and_collect(q, rx);
    let schema = batches.first().map(|b| b.schema()).expect("a result at stop");
    (ebql::arrow::compute::concat_batches(&schema, &batches).unwrap(), stats)
}

#[test]
fn and_or_not_in_between_filters() {
    let _k = kernel_lock();
    require_root();
    let mut w = Workload::start();
    let (a, b) = (w.file(), w.file());
    let pid = w.pid;
    let sql = format!(
        "SELECT fd, COUNT(*) AS n FROM {EV}
         WHERE pid = {pid} AND (count = 100 OR count > 250) AND NOT fd IN ({b}) GROUP BY fd"
    );
    let (r, _) = run_once(&sql, || {
        w.pread(a, 100, 4);
        w.pread(a, 200, 3);
        w.pread(a, 300, 2);
        w.pread(b, 100, 5);
    });
    assert_eq!(u64s(&r, "fd"), vec![a]);
    assert_eq!(u64s(&r, "n"), vec![6]);

    let sql = format!("SELECT COUNT(*) AS n FROM {EV} WHERE pid = {pid} AND count BETWEEN 150 AND 250 AND fd IN ({a}, {b})");
    let (r, _) = run_once(&sql, || {
        w.pread(a, 100, 4);
        w.pread(a, 200, 3);
        w.pread(b, 250, 2);
        w.pread(b, 251, 9);
    });
    assert_eq!(u64s(&r, "n"), vec![5]);
}

#[test]
fn global_aggregate_without_window_emits_at_stop() {
    let _k = kernel_lock();
    require_root();
    let mut w = Workload::start();
    let a = w.file();
    let sql = format!("SELECT COUNT(*) AS n, SUM(count) AS s, MAX(count) AS hi FROM {EV} WHERE pid = {}", w.pid);
    let (r, stats) = run_once(&sql, || {
        w.pread(a, 64, 100);
        w.pread(a, 4096, 1);
    });
    assert_eq!(r.num_rows(), 1);
    assert_eq!(u64s(&r, "n"), vec![101]);
    assert_eq!(u64s(&r, "s"), vec![64 * 100 + 4096]);
    assert_eq!(u64s(&r, "hi"), vec![4096]);
    assert_eq!(stats.events_matched, 101);
}

#[test]
fn raw_stream_exact_rows_with_projection() {
    let _k = kernel_lock();
    require_root();
    let mut w = Workload::start();
    let a = w.file();
    let sql = format!("SELECT fd, count, count * 2 + 1 AS odd, comm FROM {EV} WHERE pid = {}", w.pid);
    let (r, stats) = run_once(&sql, || w.pread(a, 77, 1000));
    assert_eq!(r.num_rows(), 1000);
    assert!(u64s(&r, "fd").iter().all(|&f| f == a));
    assert!(u64s(&r, "count").iter().all(|&c| c == 77));
    assert!(u64s(&r, "odd").iter().all(|&c| c == 155));
    assert!(strings(&r, "comm").iter().all(|c| c == "ebql"), "{:?}", &strings(&r, "comm")[..3]);
    assert_eq!(stats.dropped_ringbuf_full, 0);
    assert_eq!(stats.rows_emitted, 1000);
}

#[test]
fn count_windows_are_exact() {
    let _k = kernel_lock();
    require_root();
    let mut w = Workload::start();
    let a = w.file();
    let sql = format!("SELECT COUNT(*) AS n, SUM(count) AS s FROM {EV} WHERE pid = {} WINDOW(count, 10, 10)", w.pid);
    let mut ex = Executor::new();
    let mut q = ex.execute(&sql).unwrap();
    let rx = q.take_receiver().unwrap();
    for size in 1..=25 {
        w.pread(a, size, 1);
    }
    let w1 = next_window(&rx);
    let w2 = next_window(&rx);
    let (rest, _) = stop_and_collect(q, rx);
    assert_eq!((u64s(&w1, "n"), u64s(&w1, "s")), (vec![10], vec![55]));
    assert_eq!((u64s(&w2, "n"), u64s(&w2, "s")), (vec![10], vec![155]));
    assert_eq!((u64s(&w2, "window_start"), u64s(&w2, "window_end")), (vec![10], vec![20]));
    assert_eq!(rest.len(), 1, "the partial last window is emitted at stop");
    assert_eq!((u64s(&rest[0], "n"), u64s(&rest[0], "s")), (vec![5], vec![115]));
}

#[test]
fn having_order_by_limit_apply_per_window() {
    let _k = kernel_lock();
    require_root();
    let mut w = Workload::start();
    let fds: Vec<u64> = (0..4).map(|_| w.file()).collect();
    let sql = format!(
        "SELECT fd, COUNT(*) AS n FROM {EV} WHERE pid = {} GROUP BY fd HAVING COUNT(*) > 2 ORDER BY n DESC LIMIT 2",
        w.pid
    );
    let (r, _) = run_once(&sql, || {
        for (fd, n) in fds.iter().zip([5, 3, 1, 4]) {
            w.pread(*fd, 10, n);
        }
    });
    assert_eq!(u64s(&r, "fd"), vec![fds[0], fds[3]]);
    assert_eq!(u64s(&r, "n"), vec![5, 4]);
}

#[test]
fn string_equality_on_comm_in_kernel() {
    let _k = kernel_lock();
    require_root();
    let mut w = Workload::start();
    let a = w.file();
    let pid = w.pid;
    let sql = format!("SELECT COUNT(*) AS n FROM {EV} WHERE pid = {pid} AND comm = 'ebql'");
    let (r, _) = run_once(&sql, || w.pread(a, 8, 12));
    assert_eq!(u64s(&r, "n"), vec![12]);
    let sql = format!("SELECT COUNT(*) AS n FROM {EV} WHERE pid = {pid} AND comm <> 'ebql'");
    let (r, _) = run_once(&sql, || w.pread(a, 8, 12));
    assert_eq!(u64s(&r, "n"), vec![0]);
}

#[test]
fn what_the_kernel_cannot_do_runs_in_user_space() {
    let _k = kernel_lock();
    require_root();
    let mut w = Workload::start();
    let a = w.file();
    // A float comparison is not compiled to BPF: the kernel filters by pid and
    // streams rows; the filter and the aggregate run in DataFusion.
    let sql = format!(
        "SELECT fd, COUNT(*) AS n, MAX(count) AS hi FROM {EV} WHERE pid = {} AND CAST(count AS DOUBLE) > 150.5 GROUP BY fd WINDOW(time, 500, 500)",
        w.pid
    );
    let mut ex = Executor::new();
    let explained = ebql_compiler::explain::explain(&ex.compile(&sql).unwrap());
    assert!(explained.contains("in user space"), "{explained}");
    assert!(explained.contains("ring-buffer record"), "{explained}");
    let mut q = ex.execute(&sql).unwrap();
    let rx = q.take_receiver().unwrap();
    let _sync = next_window(&rx);
    w.pread(a, 100, 4);
    w.pread(a, 200, 3);
    let w1 = next_window(&rx);
    let (_, stats) = stop_and_collect(q, rx);
    assert_eq!(u64s(&w1, "n"), vec![3]);
    assert_eq!(u64s(&w1, "hi"), vec![200]);
    assert_eq!(stats.events_matched, 7, "the kernel shipped every event of the pid");
}

#[test]
fn probes_detach_when_queries_stop() {
    let _k = kernel_lock();
    require_root();
    let before = loaded_ebql_programs();
    let mut ex = Executor::new();
    let q = ex.execute(&format!("SELECT COUNT(*) FROM {EV} WHERE pid = 1")).unwrap();
    assert_eq!(loaded_ebql_programs(), before + 1);
    q.stop().unwrap();
    assert_eq!(loaded_ebql_programs(), before);
}

#[test]
fn group_by_string_and_expression_keys_in_kernel() {
    let _k = kernel_lock();
    require_root();
    let mut w = Workload::start();
    let a = w.file();
    let pid = w.pid;
    let sql = format!("SELECT comm, count / 100 AS bucket, COUNT(*) AS n FROM {EV} WHERE pid = {pid} GROUP BY comm, count / 100 ORDER BY bucket");
    let mut ex = Executor::new();
    let explained = ebql_compiler::explain::explain(&ex.compile(&sql).unwrap());
    assert!(explained.contains("per-CPU group table"), "{explained}");
    let (r, _) = run_once(&sql, || {
        w.pread(a, 50, 3);
        w.pread(a, 150, 2);
        w.pread(a, 250, 1);
    });
    assert_eq!(strings(&r, "comm"), vec!["ebql"; 3]);
    assert_eq!(u64s(&r, "bucket"), vec![0, 1, 2]);
    assert_eq!(u64s(&r, "n"), vec![3, 2, 1]);
}

#[test]
fn full_group_table_drops_are_counted() {
    let _k = kernel_lock();
    require_root();
    let mut w = Workload::start();
    let fds: Vec<u64> = (0..4).map(|_| w.file()).collect();
    let mut opts = ebql::ExecutorOptions::default();
    opts.codegen.max_groups = 2;
    let mut ex = Executor::with_options(opts);
    let mut q = ex.execute(&format!("SELECT fd, COUNT(*) AS n FROM {EV} WHERE pid = {} GROUP BY fd", w.pid)).unwrap();
    let rx = q.take_receiver().unwrap();
    for fd in &fds {
        w.pread(*fd, 10, 5);
    }
    let (batches, stats) = stop_and_collect(q, rx);
    let recorded: u64 = batches.iter().flat_map(|b| u64s(b, "n")).sum();
    assert_eq!(batches.iter().map(|b| b.num_rows()).sum::<usize>(), 2, "two groups fit");
    assert_eq!(recorded, 10);
    assert_eq!(stats.dropped_groups_full, 10, "every event of the other groups is counted as dropped");
    assert_eq!(stats.events_matched, 20);
}

#[test]
fn char_array_fields_of_a_scheduler_tracepoint() {
    let _k = kernel_lock();
    require_root();
    let mut w = Workload::start();
    // The workload is single-threaded: its tid is its pid.
    let sql = format!("SELECT prev_comm, prev_pid, COUNT(*) AS n FROM tracepoint/sched/sched_switch WHERE prev_pid = {} AND prev_comm = 'ebql' GROUP BY prev_comm, prev_pid", w.pid);
    let (r, _) = run_once(&sql, || {
        for _ in 0..3 {
            w.sleep_ms(20);
        }
    });
    assert_eq!(strings(&r, "prev_comm"), vec!["ebql"]);
    assert_eq!(u64s(&r, "prev_pid"), vec![w.pid as u64]);
    assert!(u64s(&r, "n")[0] >= 3, "each sleep switches the workload out: {r:?}");
}

#[test]
fn ring_buffer_overflow_is_counted_exactly() {
    let _k = kernel_lock();
    require_root();
    let mut w = Workload::start();
    let a = w.file();
    // A one-page ring buffer holds ~170 records; 20000 events in a tight loop
    // outrun a consumer that drains every 10 ms.
    let mut opts = ebql::ExecutorOptions::default();
    opts.codegen.ringbuf_bytes = 4096;
    let mut ex = Executor::with_options(opts);
    let mut q = ex.execute(&format!("SELECT fd, count FROM {EV} WHERE pid = {}", w.pid)).unwrap();
    let rx = q.take_receiver().unwrap();
    w.pread(a, 8, 20_000);
    let (batches, stats) = stop_and_collect(q, rx);
    let received: usize = batches.iter().map(|b| b.num_rows()).sum();
    assert_eq!(received as u64 + stats.dropped_ringbuf_full, 20_000, "every event is either delivered or counted as dropped");
    assert_eq!(stats.rows_emitted, received as u64);
    assert_eq!(stats.events_matched, 20_000);
}

/// Two threads hammer pread64 while 200 ms windows flip under them: the sum
/// over all windows equals the workload's own count, exactly.
#[test]
fn window_flips_under_load_lose_and_double_count_nothing() {
    use std::io::{BufRead, BufReader};
    let _k = kernel_lock();
    require_root();
    let gate = ebql_workload::Gate::create(std::env::temp_dir().join(format!("ebql-test-gate-{}", std::process::id()))).unwrap();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_ebql"))
        .args(["workload", "pread-loop", "--threads", "2", "--seconds", "1.5", "--size", "64", "--gate"])
        .arg(gate.path())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap()).lines();
    let ready = out.next().unwrap().unwrap();
    let pid: u32 = ready.strip_prefix("ready ").unwrap().parse().unwrap();
    // Keyed by pid: both threads, on both CPUs, update the same group.
    let sql = format!("SELECT pid, COUNT(*) AS n, SUM(count) AS s FROM {EV} WHERE pid = {pid} GROUP BY pid WINDOW(time, 200, 200)");
    let mut ex = Executor::new();
    let mut q = ex.execute(&sql).unwrap();
    let rx = q.take_receiver().unwrap();
    gate.open().unwrap();
    let report: Vec<String> = out.map_while(|l| l.ok()).collect();
    assert!(child.wait().unwrap().success());
    let (batches, stats) = stop_and_collect(q, rx);
    let total: u64 = report
        .iter()
        .find_map(|l| l.strip_prefix("total_ops ").and_then(|r| r.split_whitespace().next()).and_then(|n| n.parse().ok()))
        .unwrap_or_else(|| panic!("no total in {report:?}"));
    let windows_with_data = batches.iter().filter(|b| b.num_rows() > 0).count();
    assert!(windows_with_data >= 5, "the load spans several windows: {windows_with_data}");
    let counted: u64 = batches.iter().flat_map(|b| u64s(b, "n")).sum();
    let bytes: u64 = batches.iter().flat_map(|b| u64s(b, "s")).sum();
    assert_eq!(counted, total, "sum over windows = the workload's pread64 calls");
    assert_eq!(bytes, total * 64);
    assert_eq!(stats.events_dropped(), 0);
}
