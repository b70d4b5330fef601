//! Shared synopses (`ExecutorOptions::shared_synopses`, `ebql serve`'s
//! default): queries whose kernel part compiles the same read one group
//! table, each through its own user-space plan, on real pread64 calls of
//! our workload; readers join and leave while events flow.

use crate::common::*;
use ebql::window::WindowBatch;
use ebql::{Executor, ExecutorOptions, RunningQuery, SharedSynopses};
use ebql_runtime::SharedHooks;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::Receiver;
use std::sync::Arc;
use std::time::{Duration, Instant};

const EV: &str = "tracepoint/syscalls/sys_enter_pread64";
const BAD_FD: u64 = 999;

fn shared_options() -> ExecutorOptions {
    ExecutorOptions {
        shared_hooks: Some(SharedHooks::new()),
        shared_synopses: Some(SharedSynopses::new()),
        ..Default::default()
    }
}

/// `q` started, and its windows.
fn start(opts: &ExecutorOptions, sql: &str) -> (RunningQuery, Receiver<WindowBatch>) {
    let mut q = Executor::with_options(opts.clone())
        .execute(sql)
        .unwrap_or_else(|e| panic!("{sql}: {}", e.render()));
    let rx = q.take_windows().unwrap();
    (q, rx)
}

/// Per window (its start, CLOCK_MONOTONIC ns): its end and `key → n`.
type Windows = BTreeMap<u64, (u64, BTreeMap<u64, u64>)>;

/// Stops `q` and gathers its windows (`key`, `n`: its columns).
fn stop(q: RunningQuery, rx: Receiver<WindowBatch>, key: &str) -> Windows {
    stop_after(q, rx, key, Vec::new())
}

/// [`stop`], with the windows `earlier` taken from `rx` before.
fn stop_after(
    q: RunningQuery,
    rx: Receiver<WindowBatch>,
    key: &str,
    earlier: Vec<WindowBatch>,
) -> Windows {
    q.stop().unwrap_or_else(|e| panic!("{}", e.render()));
    earlier
        .into_iter()
        .chain(rx.try_iter())
        .map(|w| {
            assert!(w.error.is_none(), "{:?}", w.error);
            let b = w.bounds.expect("windowed");
            let rows = u64s(&w.batch, key)
                .into_iter()
                .zip(u64s(&w.batch, "n"))
                .collect();
            (b.start, (b.end, rows))
        })
        .collect()
}

/// Waits for a reader's first window: once it is there, the reader's
/// windows have begun, and events from now on are in them (however late
/// the machine cuts).
fn first_window(rx: &Receiver<WindowBatch>) -> WindowBatch {
    rx.recv_timeout(Duration::from_secs(10))
        .expect("a reader's first window within 10 s")
}

/// `n` summed over every window, per key.
fn totals(w: &Windows) -> BTreeMap<u64, u64> {
    let mut out = BTreeMap::new();
    for (_, rows) in w.values() {
        for (k, n) in rows {
            *out.entry(*k).or_default() += n;
        }
    }
    out
}

/// Two queries of one kernel part (same event, filter, key, aggregate and
/// window; another name, HAVING and ORDER BY) read one synopsis: one
/// program, each window evaluated by both plans; a third with another
/// filter has its own. Every total is exact, and the reader that leaves
/// first ends with a whole window.
#[test]
fn queries_of_one_kernel_part_read_one_synopsis_exactly() {
    require_root();
    let _k = kernel_lock();
    let mut w = Workload::start();
    let fd = w.file();
    let pid = w.pid;
    let opts = shared_options();
    let from = format!("FROM {EV} WHERE pid = {pid}");
    let window = "WINDOW(time, 200, 200)";
    let (a, a_rx) = start(
        &opts,
        &format!("SELECT fd, COUNT(*) AS n {from} GROUP BY fd {window}"),
    );
    let joined = ebql::monotonic_ns();
    let (b, b_rx) = start(
        &opts,
        &format!(
            "SELECT fd AS file, COUNT(*) AS n {from} GROUP BY fd \
             HAVING COUNT(*) > 30 ORDER BY n DESC {window}"
        ),
    );
    let (c, c_rx) = start(
        &opts,
        &format!("SELECT fd, COUNT(*) AS n {from} AND count = 64 GROUP BY fd {window}"),
    );
    assert_eq!((a.synopsis_readers(), b.synopsis_readers()), (2, 2));
    assert_eq!(a.prog_ids(), b.prog_ids(), "one program for both");
    assert_eq!(c.synopsis_readers(), 1);
    assert_ne!(a.prog_ids(), c.prog_ids());
    // The same program in other windows (cut by user space): another synopsis.
    let (d, _) = start(
        &opts,
        &format!("SELECT fd, COUNT(*) AS n {from} GROUP BY fd WINDOW(time, 100, 100)"),
    );
    assert_eq!((d.synopsis_readers(), a.synopsis_readers()), (1, 2));
    d.stop().unwrap();
    // b reads the windows that start after it joined: the events come after its first.
    let b_first = first_window(&b_rx);
    w.pread(fd, 64, 100);
    w.pread_bad_fd(BAD_FD, 64, 20);
    w.pread(fd, 128, 10);
    std::thread::sleep(Duration::from_millis(250));
    let left = ebql::monotonic_ns();
    let b = stop_after(b, b_rx, "file", vec![b_first]);
    assert_eq!(a.synopsis_readers(), 1, "b has left");
    let a = stop(a, a_rx, "fd");
    let c = stop(c, c_rx, "fd");
    assert_eq!(totals(&a), BTreeMap::from([(fd, 110), (BAD_FD, 20)]));
    assert_eq!(totals(&c), BTreeMap::from([(fd, 100), (BAD_FD, 20)]));
    // b's windows are a's, through its own plan.
    assert!(
        *b.keys().next().unwrap() >= joined,
        "b's first window started before it joined"
    );
    for (start, (end, rows)) in &b {
        let (a_end, a_rows) = &a[start];
        assert_eq!(end, a_end, "the same window");
        let kept: BTreeMap<u64, u64> = a_rows
            .iter()
            .filter(|(_, n)| **n > 30)
            .map(|(k, n)| (*k, *n))
            .collect();
        assert_eq!(rows, &kept, "window at {start}");
    }
    // Whole windows: b's last is the window open when it left, as a has it
    // (checked above), not cut at the leave as a's own last one is.
    let (last_start, (last_end, _)) = b.iter().next_back().unwrap();
    assert!(*last_end >= left, "b's last window holds its leave");
    assert!(
        a.range(last_start + 1..).next().is_some(),
        "a went on after b's last window"
    );
    let seen: u64 = b.values().flat_map(|(_, r)| r.values()).sum();
    assert!(
        seen >= 100,
        "b saw the fd's calls in windows it read: {b:?}"
    );
}

/// A standing query's synopsis read by 20 queries that join and leave,
/// one at a time, while the workload calls: the standing query counts every
/// call once, and every window a reader got is the standing query's window
/// with the same rows.
#[test]
fn readers_joining_and_leaving_leave_a_synopsis_exact() {
    require_root();
    let _k = kernel_lock();
    let mut w = Workload::start();
    let fd = w.file();
    let pid = w.pid;
    let opts = shared_options();
    let sql = format!(
        "SELECT fd, COUNT(*) AS n FROM {EV} WHERE pid = {pid} GROUP BY fd WINDOW(time, 50, 50)"
    );
    let (standing, standing_rx) = start(&opts, &sql);
    let done = Arc::new(AtomicBool::new(false));
    let calls = pread_until(w, fd, done.clone());
    let mut readers = Vec::new();
    let mut joins = Vec::new();
    let mut leaves = Vec::new();
    for i in 0..20u64 {
        let t = Instant::now();
        let (q, rx) = start(&opts, &sql);
        joins.push(t.elapsed());
        assert_eq!(q.synopsis_readers(), 2);
        std::thread::sleep(Duration::from_millis(60 + 10 * (i % 5)));
        let t = Instant::now();
        readers.push(stop(q, rx, "fd"));
        leaves.push(t.elapsed());
    }
    done.store(true, Ordering::Relaxed);
    let calls = calls.join().unwrap();
    let standing = stop(standing, standing_rx, "fd");
    assert_eq!(totals(&standing), BTreeMap::from([(fd, calls)]));
    let mut read = 0;
    for r in &readers {
        for (start, window) in r {
            assert_eq!(Some(window), standing.get(start), "window at {start}");
            read += 1;
        }
    }
    assert!(read >= 20, "readers got windows: {read}");
    joins.sort();
    leaves.sort();
    eprintln!(
        "reader join: median {:?}; leave (to the end of its last window): median {:?}",
        joins[10], leaves[10]
    );
}

/// `ebql serve` runs queries of one kernel part on one synopsis, so their
/// program is loaded once; with `--separate-probes`, once per query.
#[test]
fn serve_reads_one_synopsis_unless_told_to_separate_probes() {
    require_root();
    let _k = kernel_lock();
    let from = format!("FROM {EV} WHERE pid = 1 GROUP BY fd WINDOW(time, 1000, 1000)");
    let queries = [
        format!("SELECT fd, COUNT(*) AS n {from}"),
        format!("SELECT fd, COUNT(*) AS calls {from}"),
    ];
    for separate in [false, true] {
        let (loaded, notes) = serve_until_serving(&queries, separate);
        let own = loaded
            .iter()
            .filter(|n| n.starts_with("ebql_se_pread64"))
            .count();
        assert_eq!(own, if separate { 2 } else { 1 }, "{loaded:?}");
        assert_eq!(
            notes.contains("reading the synopsis of 2 queries"),
            !separate,
            "{notes}"
        );
    }
}

/// A reader whose plan fails on every window (a division by zero in user
/// space) gets each window with its error; the other reader of the same
/// synopsis counts exactly, unaffected.
#[test]
fn a_readers_failing_plan_leaves_the_others_exact() {
    require_root();
    let _k = kernel_lock();
    let mut w = Workload::start();
    let fd = w.file();
    let opts = shared_options();
    let from = format!(
        "FROM {EV} WHERE pid = {} GROUP BY fd WINDOW(time, 200, 200)",
        w.pid
    );
    let (good, good_rx) = start(&opts, &format!("SELECT fd, COUNT(*) AS n {from}"));
    let (bad, bad_rx) = start(
        &opts,
        &format!("SELECT fd, 100 / (COUNT(*) - COUNT(*)) AS n {from}"),
    );
    assert_eq!(bad.synopsis_readers(), 2);
    let bad_first = first_window(&bad_rx);
    w.pread(fd, 64, 100);
    std::thread::sleep(Duration::from_millis(250));
    bad.stop().unwrap_or_else(|e| panic!("{}", e.render()));
    let bad: Vec<WindowBatch> = std::iter::once(bad_first)
        .chain(bad_rx.try_iter())
        .collect();
    assert!(bad.iter().any(|w| w.error.is_some()), "the division failed");
    assert!(bad
        .iter()
        .all(|w| w.batch.num_rows() == 0 || w.error.is_none()));
    let good = stop(good, good_rx, "fd");
    assert_eq!(totals(&good), BTreeMap::from([(fd, 100)]));
}
