//! Shared hooks (`ExecutorOptions::shared_hooks`, `ebql serve`'s default):
//! many queries on one hook run as one combined program, and queries join
//! and leave it while events flow, on real pread64 calls of our workload.

use crate::common::*;
use ebql::{Executor, ExecutorOptions, RunningQuery};
use ebql_runtime::SharedHooks;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const EV: &str = "tracepoint/syscalls/sys_enter_pread64";

/// The workload's calls in `fifty_queries…`: on its file, 64 and 128 bytes,
/// and 64 bytes on a closed fd.
const SMALL: u64 = 100;
const LARGE: u64 = 50;
const BAD_FD: u64 = 999;
const ON_BAD_FD: u64 = 20;

/// Query form `i % 10` on the workload `pid` with its file `fd`: its text
/// and its exact result (one value, column `n`) for the calls above.
fn form(i: usize, pid: u32, fd: u64) -> (String, u64) {
    let all = format!("FROM {EV} WHERE pid = {pid}");
    let (sql, n) = match i % 10 {
        0 => (
            format!("SELECT COUNT(*) AS n {all}"),
            SMALL + LARGE + ON_BAD_FD,
        ),
        1 => (
            format!("SELECT COUNT(*) AS n {all} AND fd = {fd}"),
            SMALL + LARGE,
        ),
        2 => (
            format!("SELECT COUNT(*) AS n {all} AND count = 64"),
            SMALL + ON_BAD_FD,
        ),
        3 => (format!("SELECT COUNT(*) AS n {all} AND count = 128"), LARGE),
        4 => (
            format!("SELECT COUNT(*) AS n {all} AND fd = {BAD_FD}"),
            ON_BAD_FD,
        ),
        5 => (
            format!("SELECT COUNT(*) AS n {all} AND count > 100 AND fd = {fd}"),
            LARGE,
        ),
        6 => (
            format!("SELECT SUM(count) AS n {all} AND fd = {fd}"),
            64 * SMALL + 128 * LARGE,
        ),
        7 => (format!("SELECT MAX(count) AS n {all}"), 128),
        8 => (
            format!("SELECT COUNT(*) AS n {all} AND fd <> {BAD_FD}"),
            SMALL + LARGE,
        ),
        _ => (
            format!(
                "SELECT COUNT(*) AS n FROM {EV} WHERE pid = {}",
                pid + 1_000_000
            ),
            0,
        ),
    };
    (sql, n)
}

fn shared_options(hooks: &SharedHooks) -> ExecutorOptions {
    ExecutorOptions {
        shared_hooks: Some(hooks.clone()),
        ..Default::default()
    }
}

fn start(opts: &ExecutorOptions, sql: &str) -> RunningQuery {
    Executor::with_options(opts.clone())
        .execute(sql)
        .unwrap_or_else(|e| panic!("{sql}: {}", e.render()))
}

/// The single value of column `n` a stopped unwindowed query gave.
fn result(q: RunningQuery) -> u64 {
    result_and_stats(q).0
}

/// [`result`], and the query's final counters.
fn result_and_stats(mut q: RunningQuery) -> (u64, ebql::QueryStats) {
    let rx = q.take_receiver().unwrap();
    let stats = q.stop().unwrap_or_else(|e| panic!("{}", e.render()));
    let values: Vec<u64> = rx.try_iter().flat_map(|b| u64s(&b, "n")).collect();
    let value = match values.as_slice() {
        [] => 0,
        [v] => *v,
        more => panic!("one value expected: {more:?}"),
    };
    (value, stats)
}

/// The sum of column `n` over a stopped windowed query's windows.
fn total(mut q: RunningQuery) -> u64 {
    let rx = q.take_receiver().unwrap();
    q.stop().unwrap_or_else(|e| panic!("{}", e.render()));
    rx.try_iter().flat_map(|b| u64s(&b, "n")).sum()
}

/// The shared hooks' programs (`ebql_dispatch`, `ebql_shared*`) gone once
/// every member left: waits up to 5 s for the kernel to free them.
fn assert_no_shared_program_since(since: u32) {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let left: Vec<String> = ebql_programs_loaded_since(since)
            .into_iter()
            .filter(|n| n == "ebql_dispatch" || n.starts_with("ebql_shared"))
            .collect();
        if left.is_empty() {
            return;
        }
        assert!(Instant::now() < deadline, "still loaded: {left:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn fifty_queries_on_one_hook_share_one_program_and_count_exactly() {
    require_root();
    let _k = kernel_lock();
    let since = newest_program_id();
    let mut w = Workload::start();
    let fd = w.file();
    let hooks = SharedHooks::new();
    let opts = shared_options(&hooks);
    let mut queries = Vec::new();
    for i in 0..50 {
        let (sql, want) = form(i, w.pid, fd);
        let q = start(&opts, &sql);
        let share = q.hook_shares()[0].expect("a tracefs tracepoint program shares its hook");
        assert_eq!(share.members, i + 1, "{sql}");
        queries.push((sql, want, q));
    }
    let shares = hooks.shares();
    assert_eq!(shares.len(), 1, "one hook: {shares:?}");
    assert_eq!(shares[0].1.members, 50);
    // 64 maps per program: 50 queries of three or more maps need a chain.
    assert!(shares[0].1.chunks >= 3, "{shares:?}");
    let running = ebql_programs_loaded_since(since);
    assert_eq!(
        running.iter().filter(|n| *n == "ebql_dispatch").count(),
        1,
        "one dispatcher on the hook: {running:?}"
    );
    w.pread(fd, 64, SMALL);
    w.pread(fd, 128, LARGE);
    w.pread_bad_fd(BAD_FD, 64, ON_BAD_FD);
    // The events of each query's process at the hook, whatever its other
    // tests (the rate its plan is costed with): a chunk that skipped a
    // member on a test it had not counted from would lose them.
    let calls = SMALL + LARGE + ON_BAD_FD;
    for (i, (sql, want, q)) in queries.into_iter().enumerate() {
        let (value, stats) = result_and_stats(q);
        assert_eq!(value, want, "{sql}");
        let seen = if i % 10 == 9 { 0 } else { calls };
        assert_eq!(stats.events_seen, seen, "{sql}");
    }
    assert!(
        hooks.shares().is_empty(),
        "the last query out removes the hook"
    );
    assert_no_shared_program_since(since);
}

#[test]
fn queries_joining_and_leaving_leave_a_standing_querys_count_exact() {
    require_root();
    let _k = kernel_lock();
    let since = newest_program_id();
    let mut w = Workload::start();
    let fd = w.file();
    let pid = w.pid;
    let hooks = SharedHooks::new();
    let opts = shared_options(&hooks);
    // Windowed, as the churning queries are (with other sizes): every
    // member reads the time, from the hook's per-event cache but the first.
    let (standing_sql, _) = form(0, pid, fd);
    let standing = start(&opts, &format!("{standing_sql} WINDOW(time, 100, 100)"));
    // The workload calls in batches until the churn is over: each batch
    // runs while queries join and leave the hook.
    let done = Arc::new(AtomicBool::new(false));
    let calls = pread_until(w, fd, done.clone());
    let mut swaps = Vec::new();
    for i in 1..=100 {
        let (sql, _) = form(i, pid, fd);
        let q = start(&opts, &format!("{sql} WINDOW(time, {}, {0})", 20 + i));
        assert_eq!(q.hook_shares()[0].map(|s| s.members), Some(2), "{sql}");
        let t = Instant::now();
        q.stop().unwrap_or_else(|e| panic!("{}", e.render()));
        swaps.push(t.elapsed());
    }
    done.store(true, Ordering::Relaxed);
    let calls = calls.join().unwrap();
    assert!(calls >= 100, "the workload ran during the churn: {calls}");
    assert_eq!(
        total(standing),
        calls,
        "every call counted once across 200 swaps"
    );
    swaps.sort();
    eprintln!("leave (swap + grace + last drain): median {:?}", swaps[50]);
    assert_no_shared_program_since(since);
}

/// A query whose hook the rule chooses joins the hook the process's other
/// queries on its event already use: with one query on the raw syscall
/// hook, a second (which alone would get the tracefs tracepoint, having no
/// rates) joins it there, and both count exactly.
#[test]
fn a_query_joins_the_hook_its_events_are_already_shared_on() {
    require_root();
    let _k = kernel_lock();
    let mut w = Workload::start();
    let fd = w.file();
    let hooks = SharedHooks::new();
    let opts = shared_options(&hooks);
    let mut raw = opts.clone();
    raw.codegen.choices.hook = ebql_compiler::choose::HookChoice::Raw;
    let (first_sql, want_first) = form(1, w.pid, fd);
    let first = start(&raw, &first_sql);
    let (second_sql, want_second) = form(2, w.pid, fd);
    let second = start(&opts, &second_sql);
    let shares = hooks.shares();
    assert_eq!(shares.len(), 1, "one hook: {shares:?}");
    assert!(
        matches!(
            &shares[0].0,
            ebql_catalog::Attach::Btf { .. } | ebql_catalog::Attach::RawTracepoint { .. }
        ),
        "the raw syscall hook: {shares:?}"
    );
    assert_eq!(second.hook_shares()[0].map(|s| s.members), Some(2));
    w.pread(fd, 64, SMALL);
    w.pread(fd, 128, LARGE);
    w.pread_bad_fd(BAD_FD, 64, ON_BAD_FD);
    assert_eq!(result(first), want_first, "{first_sql}");
    assert_eq!(result(second), want_second, "{second_sql}");
}

/// `ebql serve` shares hooks by default and `--separate-probes` does not:
/// with two queries on one tracepoint, one dispatcher and one chunk are
/// loaded, or none; each query's own program is loaded either way.
#[test]
fn serve_shares_hooks_unless_told_to_separate_probes() {
    require_root();
    let _k = kernel_lock();
    let sql = |pid: u32| {
        format!("SELECT COUNT(*) AS n FROM {EV} WHERE pid = {pid} WINDOW(time, 1000, 1000)")
    };
    for separate in [false, true] {
        let (loaded, _) = serve_until_serving(&[sql(1), sql(2)], separate);
        let count = |name: &str| loaded.iter().filter(|n| n.starts_with(name)).count();
        let want = if separate { 0 } else { 1 };
        assert_eq!(count("ebql_dispatch"), want, "{loaded:?}");
        assert_eq!(count("ebql_shared"), want, "{loaded:?}");
        assert_eq!(count("ebql_se_pread64"), 2, "{loaded:?}");
    }
}
