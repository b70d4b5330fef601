//! Protocol tests on real kernel events: detach, drop accounting (full group
//! table, ring-buffer overflow), window flips under load. A workload process
//! of ours makes a known number of pread64 calls, filtered by its pid.
//!
//! Query results (aggregates, filters, keys, clauses, windows, user-space
//! fallback) are tested declaratively in `tests/queries/*.ebqt` (runner:
//! `tests/querytests/`).

use crate::common::*;
use ebql::arrow::record_batch::RecordBatch;
use ebql::{Executor, ExecutorOptions};
use std::sync::mpsc::Receiver;
use std::time::Duration;

const EV: &str = "tracepoint/syscalls/sys_enter_pread64";

/// True as root; otherwise prints why the test is skipped (libtest has no
/// runtime skip: the test then passes without running; CI runs as root).
fn root_or_skip() -> bool {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    if !root {
        eprintln!("SKIPPED: kernel tests load BPF programs and need root (CI runs them as root)");
    }
    root
}

/// Stops the query and returns every batch it emitted after the ones already read.
fn stop_and_collect(
    q: ebql::RunningQuery,
    rx: Receiver<RecordBatch>,
) -> (Vec<RecordBatch>, ebql::QueryStats) {
    let stats = q.stop().expect("stop");
    (rx.try_iter().collect(), stats)
}

/// The 2-thread pread-loop workload (64-byte calls), held at a FIFO gate
/// until the query under test is attached.
struct GatedLoad {
    /// The workload's pid, known before its first event.
    pid: u32,
    gate: ebql_workload::Gate,
    child: std::process::Child,
    out: std::io::Lines<std::io::BufReader<std::process::ChildStdout>>,
}

impl GatedLoad {
    /// Starts it for `seconds` once the gate opens.
    fn start(seconds: &str) -> GatedLoad {
        use std::io::BufRead;
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let gate = ebql_workload::Gate::create(
            std::env::temp_dir().join(format!("ebql-test-gate-{}-{n}", std::process::id())),
        )
        .unwrap();
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_ebql"))
            .args([
                "workload",
                "pread-loop",
                "--threads",
                "2",
                "--seconds",
                seconds,
                "--size",
                "64",
                "--gate",
            ])
            .arg(gate.path())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut out = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
        let ready = out.next().unwrap().unwrap();
        let pid: u32 = ready.strip_prefix("ready ").unwrap().parse().unwrap();
        GatedLoad {
            pid,
            gate,
            child,
            out,
        }
    }

    /// Opens the gate, waits for the workload and returns its own count of pread64 calls.
    fn run(mut self) -> u64 {
        self.gate.open().unwrap();
        let report: Vec<String> = self.out.by_ref().map_while(|l| l.ok()).collect();
        assert!(self.child.wait().unwrap().success());
        report
            .iter()
            .find_map(|l| {
                l.strip_prefix("total_ops ")
                    .and_then(|r| r.split_whitespace().next())
                    .and_then(|n| n.parse().ok())
            })
            .unwrap_or_else(|| panic!("no total in {report:?}"))
    }
}

impl Drop for GatedLoad {
    /// A test that failed before `run` leaves no workload waiting at its gate.
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn probes_detach_when_queries_stop() {
    let _k = kernel_lock();
    if !root_or_skip() {
        return;
    }
    use ebql_runtime::{bpf_object_exists, BpfObject};
    let mut ex = Executor::new();
    let q = ex
        .execute(&format!("SELECT COUNT(*) FROM {EV} WHERE pid = 1"))
        .unwrap();
    // Only our own program's id: other BPF users may load and unload at the same time.
    let id = q.prog_id();
    assert!(
        bpf_object_exists(BpfObject::Program, id).unwrap(),
        "program {id} is loaded while the query runs"
    );
    q.stop().unwrap();
    assert!(
        !bpf_object_exists(BpfObject::Program, id).unwrap(),
        "program {id} is gone once the query stopped"
    );
}

/// A full group table in a time-windowed query: the drops are counted in the
/// window they happened in and travel with that window's batch.
#[test]
fn group_table_drops_are_counted_per_window() {
    let _k = kernel_lock();
    if !root_or_skip() {
        return;
    }
    let mut w = Workload::start();
    let fds: Vec<u64> = (0..6).map(|_| w.file()).collect();
    let mut opts = ebql::ExecutorOptions::default();
    // Two windows coexist while one drains: the table holds 2 × 2 groups.
    opts.codegen.max_groups = 2;
    // The hash (an fd key would otherwise index an array with room for 1024 fds).
    opts.codegen.choices.group_map = ebql_compiler::choose::GroupMapChoice::Hash;
    let mut ex = Executor::with_options(opts);
    let sql = format!(
        "SELECT fd, COUNT(*) AS n FROM {EV} WHERE pid = {} GROUP BY fd WINDOW(time, 400, 400)",
        w.pid
    );
    let mut q = ex.execute(&sql).unwrap();
    let rx = q.take_receiver().unwrap();
    let next = || {
        rx.recv_timeout(std::time::Duration::from_secs(5))
            .expect("a window closes on time")
    };
    sync_on_boundary(&rx);
    for fd in &fds {
        w.pread(*fd, 10, 5);
    }
    let w1 = next();
    w.pread(fds[0], 10, 3);
    let w2 = next();
    let stats = q.stop().unwrap();
    let d1 = ebql::WindowDrops::of_batch(&w1);
    assert_eq!(
        (w1.num_rows(), u64s(&w1, "n").iter().sum::<u64>()),
        (4, 20),
        "four groups fit: {w1:?}"
    );
    assert_eq!(
        d1.groups_full, 10,
        "the two groups that did not fit, 5 events each, are this window's drops"
    );
    assert_eq!(
        ebql::WindowDrops::of_batch(&w2).groups_full,
        0,
        "the next window starts with a clean count"
    );
    assert_eq!(u64s(&w2, "n"), vec![3]);
    assert_eq!(
        stats.dropped_groups_full, 10,
        "the query total is the sum over windows"
    );
}

#[test]
fn full_group_table_drops_are_counted() {
    let _k = kernel_lock();
    if !root_or_skip() {
        return;
    }
    let mut w = Workload::start();
    // Descriptors above the array's dense range: their groups fill the overflow hash.
    let fds: Vec<u64> = (0..4).map(|i| w.file_at(2000 + i)).collect();
    let mut opts = ebql::ExecutorOptions::default();
    opts.codegen.max_groups = 2;
    let mut ex = Executor::with_options(opts);
    let mut q = ex
        .execute(&format!(
            "SELECT fd, COUNT(*) AS n FROM {EV} WHERE pid = {} GROUP BY fd",
            w.pid
        ))
        .unwrap();
    let rx = q.take_receiver().unwrap();
    for fd in &fds {
        w.pread(*fd, 10, 5);
    }
    let (batches, stats) = stop_and_collect(q, rx);
    let recorded: u64 = batches.iter().flat_map(|b| u64s(b, "n")).sum();
    assert_eq!(
        batches.iter().map(|b| b.num_rows()).sum::<usize>(),
        2,
        "two groups fit"
    );
    assert_eq!(recorded, 10);
    assert_eq!(
        stats.dropped_groups_full, 10,
        "every event of the other groups is counted as dropped"
    );
    assert_eq!(stats.events_matched, 20);
}

#[test]
fn ring_buffer_overflow_is_counted_exactly() {
    let _k = kernel_lock();
    if !root_or_skip() {
        return;
    }
    let mut w = Workload::start();
    let a = w.file();
    // A one-page ring buffer holds ~170 records; 20000 events in a tight loop
    // outrun a consumer that drains every 10 ms.
    let mut opts = ebql::ExecutorOptions::default();
    opts.codegen.ringbuf_bytes = 4096;
    let mut ex = Executor::with_options(opts);
    let mut q = ex
        .execute(&format!("SELECT fd, count FROM {EV} WHERE pid = {}", w.pid))
        .unwrap();
    let rx = q.take_receiver().unwrap();
    w.pread(a, 8, 20_000);
    let (batches, stats) = stop_and_collect(q, rx);
    let received: usize = batches.iter().map(|b| b.num_rows()).sum();
    assert_eq!(
        received as u64 + stats.dropped_ringbuf_full,
        20_000,
        "every event is either delivered or counted as dropped"
    );
    assert_eq!(stats.rows_emitted, received as u64);
    assert_eq!(stats.events_matched, 20_000);
}

/// Two threads hammer pread64 while 200 ms windows flip under them: the sum
/// over all windows equals the workload's own count, exactly.
#[test]
fn window_flips_under_load_lose_and_double_count_nothing() {
    let _k = kernel_lock();
    if !root_or_skip() {
        return;
    }
    let load = GatedLoad::start("1.5");
    let pid = load.pid;
    // Keyed by pid: both threads, on both CPUs, update the same group.
    let sql = format!("SELECT pid, COUNT(*) AS n, SUM(count) AS s FROM {EV} WHERE pid = {pid} GROUP BY pid WINDOW(time, 200, 200)");
    let mut ex = Executor::new();
    let mut q = ex.execute(&sql).unwrap();
    let rx = q.take_receiver().unwrap();
    let total = load.run();
    let (batches, stats) = stop_and_collect(q, rx);
    let windows_with_data = batches.iter().filter(|b| b.num_rows() > 0).count();
    assert!(
        windows_with_data >= 5,
        "the load spans several windows: {windows_with_data}"
    );
    let counted: u64 = batches.iter().flat_map(|b| u64s(b, "n")).sum();
    let bytes: u64 = batches.iter().flat_map(|b| u64s(b, "s")).sum();
    assert_eq!(
        counted, total,
        "sum over windows = the workload's pread64 calls"
    );
    assert_eq!(bytes, total * 64);
    assert_eq!(stats.events_dropped(), 0);
}

/// An event's `time` lies in its window's `[window_start, window_end)`,
/// also for the events in flight while a window is cut (timed before the
/// cut, generation read after it, or the reverse): two threads hammer
/// pread64 across 20 ms windows, about 70 cuts, and every window's earliest
/// and latest event lie within its bounds, with none lost or counted twice.
#[test]
fn every_event_lies_within_its_windows_bounds_across_cuts() {
    events_lie_within_bounds(Duration::ZERO, 40);
}

/// The same when the query thread stalls between reading the clock and
/// choosing each cut (25 ms, longer than a step, as a preempted thread
/// would): the probes that found the cut not chosen yet raised its floor,
/// so every cut is chosen later than their events and the bounds hold.
#[test]
fn every_event_lies_within_its_windows_bounds_when_cuts_are_chosen_late() {
    events_lie_within_bounds(Duration::from_millis(25), 20);
}

fn events_lie_within_bounds(cut_choice_delay: Duration, min_windows: usize) {
    let _k = kernel_lock();
    if !root_or_skip() {
        return;
    }
    let load = GatedLoad::start("1.5");
    let sql = format!(
        "SELECT COUNT(*) AS n, MIN(time) AS first, MAX(time) AS last FROM {EV} \
         WHERE pid = {} WINDOW(time, 20, 20)",
        load.pid
    );
    let mut ex = Executor::with_options(ExecutorOptions {
        cut_choice_delay,
        ..Default::default()
    });
    let mut q = ex.execute(&sql).unwrap();
    let rx = q.take_receiver().unwrap();
    let total = load.run();
    let (batches, stats) = stop_and_collect(q, rx);
    let (mut windows, mut stretched) = (0, 0);
    for b in &batches {
        let columns = [
            "n",
            "first",
            "last",
            "window_start_mono_ns",
            "window_end_mono_ns",
        ];
        let [n, first, last, start, end] = columns.map(|c| u64s(b, c));
        for i in 0..b.num_rows() {
            if n[i] > 0 {
                windows += 1;
                assert!(
                    start[i] <= first[i] && last[i] < end[i],
                    "window [{}, {}) holds events timed {}..={}",
                    start[i],
                    end[i],
                    first[i],
                    last[i]
                );
            }
            stretched += usize::from(end[i] - start[i] > 20_000_000);
        }
    }
    assert!(
        windows >= min_windows,
        "the load spans many cuts: {windows} windows"
    );
    if !cut_choice_delay.is_zero() {
        // The stall made the thread choose cuts late, so windows stretched.
        assert!(stretched > 0, "no window outlasted its step");
    }
    let counted: u64 = batches.iter().flat_map(|b| u64s(b, "n")).sum();
    assert_eq!(counted, total, "sum over windows = the workload's calls");
    assert_eq!(stats.events_dropped(), 0);
    assert_eq!(stats.window_cut_races, 0);
}

/// Enter/exit pairing's unmatched counts are exact: a thread already asleep
/// when the query attaches gives one end without a start; a thread asleep
/// when it stops leaves one start in the map; the calls in between pair.
/// Both programs are unloaded at stop. Keyed by the thread, the start map is
/// task storage where the kernel has it (as here).
#[test]
fn pairing_counts_unmatched_starts_and_ends() {
    pairing_unmatched(true);
}

/// The same with task storage turned off: the hash start map (the fallback
/// of kernels without task storage) counts the same.
#[test]
fn pairing_counts_unmatched_starts_and_ends_in_the_hash_fallback() {
    pairing_unmatched(false);
}

fn pairing_unmatched(task_storage: bool) {
    let _k = kernel_lock();
    if !root_or_skip() {
        return;
    }
    use ebql_compiler::codegen::{MapKind, MAP_PAIR};
    use ebql_runtime::{bpf_object_exists, BpfObject};
    let mut w = Workload::start();
    // Asleep before the probes attach: its exit has no start.
    w.sleeper(3000);
    let mut opts = ebql::executor::ExecutorOptions::default();
    opts.codegen.task_storage = task_storage;
    let mut ex = Executor::with_options(opts);
    let sql = format!(
        "SELECT COUNT(*) AS n, MIN(x.time - e.time) AS lo FROM tracepoint:syscalls:sys_enter_clock_nanosleep AS e \
         JOIN tracepoint:syscalls:sys_exit_clock_nanosleep AS x ON e.tid = x.tid WHERE e.pid = {}",
        w.pid
    );
    let expected = if task_storage {
        MapKind::TaskStorage
    } else {
        MapKind::Hash
    };
    assert_eq!(
        ex.compile(&sql).unwrap().code.maps[MAP_PAIR].kind,
        expected,
        "the start map this test runs with"
    );
    let mut q = ex.execute(&sql).unwrap();
    let rx = q.take_receiver().unwrap();
    let ids = q.prog_ids().to_vec();
    assert_eq!(ids.len(), 2, "a start and an end program");
    w.nanosleep(1_000_000, 5);
    w.join_sleepers();
    // Asleep when the query stops: its start is left in the map.
    w.sleeper(3000);
    let (batches, stats) = stop_and_collect(q, rx);
    let rows: Vec<(u64, u64)> = batches
        .iter()
        .flat_map(|b| u64s(b, "n").into_iter().zip(u64s(b, "lo")))
        .collect();
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(
        rows[0].0,
        5,
        "the five 1 ms sleeps pair: {}",
        stats.to_json()
    );
    assert!(
        rows[0].1 >= 1_000_000,
        "a 1 ms sleep lasts at least 1 ms: {rows:?}"
    );
    assert_eq!(stats.pair_ends_without_start, 1, "{}", stats.to_json());
    assert_eq!(stats.pair_starts_left, 1, "{}", stats.to_json());
    assert_eq!(stats.pair_starts_overwritten, 0, "{}", stats.to_json());
    assert_eq!(stats.pair_start_map_full, 0, "{}", stats.to_json());
    for id in ids {
        assert!(
            !bpf_object_exists(BpfObject::Program, id).unwrap(),
            "program {id} is gone once the query stopped"
        );
    }
}

/// Two threads hammer pread64 under hopping windows (600 ms, a window every
/// 200 ms: 3 panes per window): every event is in exactly 3 windows, so the
/// sum over all windows is 3 × the workload's own count, exactly. The first
/// two windows are partial (1/3, 2/3) and say so; the query runs two more
/// steps after the load so the last events slide through all their windows.
#[test]
fn hopping_windows_count_every_event_in_size_over_step_windows() {
    let _k = kernel_lock();
    if !root_or_skip() {
        return;
    }
    let load = GatedLoad::start("1.2");
    let pid = load.pid;
    let sql = format!("SELECT pid, COUNT(*) AS n, SUM(count) AS s, MIN(count) AS lo FROM {EV} WHERE pid = {pid} GROUP BY pid WINDOW(time, 600, 200)");
    let mut ex = Executor::new();
    let mut q = ex.execute(&sql).unwrap();
    let rx = q.take_receiver().unwrap();
    let total = load.run();
    // Two more steps (and a margin): the last pane with events is in two more windows.
    std::thread::sleep(std::time::Duration::from_millis(1000));
    let (batches, stats) = stop_and_collect(q, rx);
    let panes: Vec<String> = batches
        .iter()
        .map(|b| b.schema_ref().metadata()[ebql::executor::META_WINDOW_PANES].clone())
        .collect();
    assert_eq!(
        panes[..2],
        ["1/3".to_string(), "2/3".to_string()],
        "the first two windows are partial"
    );
    assert!(panes[2..].iter().all(|p| p == "3/3"), "{panes:?}");
    let windows_with_data = batches.iter().filter(|b| b.num_rows() > 0).count();
    assert!(
        windows_with_data >= 7,
        "the load spans several windows: {windows_with_data}"
    );
    let counted: u64 = batches.iter().flat_map(|b| u64s(b, "n")).sum();
    let bytes: u64 = batches.iter().flat_map(|b| u64s(b, "s")).sum();
    assert_eq!(
        counted,
        3 * total,
        "sum over windows = 3 × the workload's pread64 calls"
    );
    assert_eq!(bytes, 3 * total * 64);
    assert!(batches
        .iter()
        .flat_map(|b| u64s(b, "lo"))
        .all(|lo| lo == 64));
    // The last window (at stop) holds no events: they all slid out.
    assert_eq!(batches.last().map(|b| b.num_rows()), Some(0));
    assert_eq!(stats.events_matched, total);
    assert_eq!(stats.events_dropped(), 0);
}

/// Receives windows until one closed less than 100 ms ago, so that what the
/// test does next lands in the window (or pane) that just opened. A window
/// emitted late (a stalled machine: one CI run saw a 400 ms step take
/// 670 ms) would otherwise leave the test's events in the next one.
fn sync_on_boundary(rx: &Receiver<RecordBatch>) {
    for _ in 0..20 {
        let b = rx
            .recv_timeout(std::time::Duration::from_secs(5))
            .expect("a window closes on time");
        let end: u64 = b.schema_ref().metadata()[ebql::executor::META_WINDOW_END]
            .parse()
            .expect("window end in ns");
        if ebql::monotonic_ns().saturating_sub(end) < 100_000_000 {
            return;
        }
    }
    panic!("no window was emitted within 100 ms of its end in 20 windows (machine too busy?)");
}

/// Hopping windows (2 panes of 400 ms): a window's drops are the sum of its
/// panes' exact drop counts, and they leave with the pane that had them.
#[test]
fn hopping_window_drops_are_the_sum_of_their_panes() {
    let _k = kernel_lock();
    if !root_or_skip() {
        return;
    }
    let mut w = Workload::start();
    // Descriptors above the array's dense range: their groups fill the overflow hash.
    let fds: Vec<u64> = (0..6).map(|i| w.file_at(2000 + i)).collect();
    let mut opts = ebql::ExecutorOptions::default();
    // Two generations coexist while one drains: the table holds 2 × 2 groups.
    opts.codegen.max_groups = 2;
    let mut ex = Executor::with_options(opts);
    let sql = format!(
        "SELECT fd, COUNT(*) AS n FROM {EV} WHERE pid = {} GROUP BY fd WINDOW(time, 800, 400)",
        w.pid
    );
    let mut q = ex.execute(&sql).unwrap();
    let rx = q.take_receiver().unwrap();
    let next = || {
        rx.recv_timeout(std::time::Duration::from_secs(5))
            .expect("a window is emitted every step")
    };
    sync_on_boundary(&rx);
    for fd in &fds {
        w.pread(*fd, 10, 5);
    }
    let w1 = next();
    w.pread(fds[0], 10, 3);
    let w2 = next();
    let w3 = next();
    let stats = q.stop().unwrap();
    let drops = |b: &RecordBatch| ebql::WindowDrops::of_batch(b).groups_full;
    assert_eq!(
        (
            w1.num_rows(),
            u64s(&w1, "n").iter().sum::<u64>(),
            drops(&w1)
        ),
        (4, 20, 10),
        "four groups fit, two groups of 5 dropped: {w1:?}"
    );
    assert_eq!(
        (
            w2.num_rows(),
            u64s(&w2, "n").iter().sum::<u64>(),
            drops(&w2)
        ),
        (4, 23, 10),
        "the first pane's groups and drops, plus 3 events: {w2:?}"
    );
    assert_eq!(
        (u64s(&w3, "n"), drops(&w3)),
        (vec![3], 0),
        "the first pane slid out with its drops: {w3:?}"
    );
    assert_eq!(
        stats.dropped_groups_full, 10,
        "the query total counts each pane's drops once"
    );
}
