//! The programs' own event counters (`QueryStats::events_seen`,
//! `events_matched`) on real pread64 events of a workload of ours, and
//! bpf_stats only when asked (`ExecutorOptions::bpf_stats`).
//!
//! Events seen are the runs at the hook that passed the query's leading
//! pid/tid tests (every run without them): with `pid = <workload>` they are
//! exactly the workload's calls, although other processes' pread64 calls run
//! the hook too; without a pid/tid test they are every run, which the
//! kernel's bpf_stats run count confirms.


use crate::common::*;
use ebql::arrow::record_batch::RecordBatch;
use ebql::{Executor, ExecutorOptions, QueryStats};
use std::path::Path;

const EV: &str = "tracepoint/syscalls/sys_enter_pread64";
const EXIT: &str = "tracepoint/syscalls/sys_exit_pread64";
/// Calls on the workload's file (they match `fd = X`) and on a closed fd (they do not).
const ON_FILE: u64 = 300;
const BAD_FD: u64 = 999;
const ON_BAD_FD: u64 = 40;

/// Runs `sql` (with `$pid` and `$fd` filled in) around the workload's
/// ON_FILE calls on its file and ON_BAD_FD calls on a closed fd; returns
/// every batch and the final stats.
fn run(sql: &str, opts: ExecutorOptions, during: impl FnOnce()) -> (Vec<RecordBatch>, QueryStats) {
    let mut w = Workload::start();
    let fd = w.file();
    let sql = sql
        .replace("$pid", &w.pid.to_string())
        .replace("$fd", &fd.to_string());
    let mut q = Executor::with_options(opts)
        .execute(&sql)
        .unwrap_or_else(|e| panic!("{}", e.render()));
    let rx = q.take_receiver().unwrap();
    w.pread(fd, 64, ON_FILE);
    w.pread_bad_fd(BAD_FD, 64, ON_BAD_FD);
    during();
    let stats = q.stop().unwrap();
    (rx.try_iter().collect(), stats)
}

/// Descriptors of this process that hold the kernel's bpf_stats on
/// (`BPF_ENABLE_STATS` returns an `anon_inode:bpf-stats` fd). Unlike a
/// program's `run_cnt`, this cannot be changed by other BPF users on the
/// machine (and `/proc/sys/kernel/bpf_stats_enabled` shows only its own
/// setting, not these holds).
fn stats_fds_held() -> usize {
    std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|e| std::fs::read_link(e.unwrap().path()).ok())
        .filter(|l| l == Path::new("anon_inode:bpf-stats"))
        .count()
}

#[test]
fn aggregate_seen_and_matched_are_exact() {
    require_root();
    let _k = kernel_lock();
    let (batches, s) = run(
        &format!("SELECT COUNT(*) AS n FROM {EV} WHERE fd = $fd AND pid = $pid"),
        ExecutorOptions::default(),
        || {},
    );
    assert_eq!(
        batches
            .iter()
            .flat_map(|b| u64s(b, "n"))
            .collect::<Vec<_>>(),
        vec![ON_FILE]
    );
    assert_eq!(
        s.events_seen,
        ON_FILE + ON_BAD_FD,
        "seen = the workload's calls (they passed the pid test): {}",
        s.to_json()
    );
    assert_eq!(
        s.events_matched,
        ON_FILE,
        "matched = the calls that passed pid and fd: {}",
        s.to_json()
    );
    assert_eq!(s.events_dropped(), 0);
}

#[test]
fn stream_seen_and_matched_are_exact() {
    require_root();
    let _k = kernel_lock();
    let (batches, s) = run(
        &format!("SELECT fd, count FROM {EV} WHERE pid = $pid AND fd != {BAD_FD}"),
        ExecutorOptions::default(),
        || {},
    );
    let rows: usize = batches.iter().map(|b| b.num_rows()).sum();
    assert_eq!(
        (rows as u64, s.events_matched),
        (ON_FILE, ON_FILE),
        "{}",
        s.to_json()
    );
    assert_eq!(s.events_seen, ON_FILE + ON_BAD_FD, "{}", s.to_json());
}

/// A pairing counts in both programs: the start program's events of the
/// workload and the starts that passed its filters, the end program's
/// events of the workload (its pid test runs before the lookup) and the ends
/// that found their start and passed the end's filters.
#[test]
fn pairing_counts_starts_and_ends() {
    require_root();
    let _k = kernel_lock();
    let sql = format!("SELECT COUNT(*) AS n FROM {EV} AS e JOIN {EXIT} AS x ON e.tid = x.tid WHERE e.pid = $pid AND e.fd = $fd");
    let (batches, s) = run(&sql, ExecutorOptions::default(), || {});
    assert_eq!(
        batches
            .iter()
            .flat_map(|b| u64s(b, "n"))
            .collect::<Vec<_>>(),
        vec![ON_FILE],
        "{}",
        s.to_json()
    );
    assert_eq!(
        s.pair_starts_matched,
        ON_FILE,
        "starts on the file: {}",
        s.to_json()
    );
    assert_eq!(
        s.events_matched,
        ON_FILE,
        "ends that found their start: {}",
        s.to_json()
    );
    assert_eq!(
        s.pair_ends_without_start,
        ON_BAD_FD,
        "the closed fd's calls stored no start: {}",
        s.to_json()
    );
    assert_eq!(
        (s.pair_starts_seen, s.events_seen),
        (ON_FILE + ON_BAD_FD, ON_FILE + ON_BAD_FD),
        "{}",
        s.to_json()
    );
}

/// By default nothing in this process turns bpf_stats on, and the probe
/// run counters stay ours to explain: what the kernel counted cannot exceed
/// what the program counted.
#[test]
fn bpf_stats_is_off_by_default() {
    require_root();
    let _k = kernel_lock();
    assert!(!ExecutorOptions::default().bpf_stats);
    let mut held = None;
    let (_, s) = run(
        &format!("SELECT COUNT(*) AS n FROM {EV} WHERE pid = $pid"),
        ExecutorOptions::default(),
        || held = Some(stats_fds_held()),
    );
    assert_eq!(held, Some(0), "the query does not turn bpf_stats on");
    assert_eq!(
        (s.events_seen, s.events_matched),
        (ON_FILE + ON_BAD_FD, ON_FILE + ON_BAD_FD)
    );
    // Another process may have bpf_stats on: the query does not report what it did not ask for.
    assert_eq!(
        (s.bpf_stats, s.bpf_run_cnt, s.bpf_run_time_ns),
        (false, 0, 0),
        "{}",
        s.to_json()
    );
}

/// `bpf_stats: true` holds bpf_stats on while the query runs, and the hold
/// ends with the query. The kernel's run count of the program counts every
/// run at the hook: with no pid/tid test it equals the program's own count
/// of events seen; with one, it is at least the selected process's events.
#[test]
fn bpf_stats_when_asked_counts_every_run_at_the_hook() {
    require_root();
    let _k = kernel_lock();
    let opts = ExecutorOptions {
        bpf_stats: true,
        ..Default::default()
    };
    let mut during = None;
    // (/proc/sys/kernel/bpf_stats_enabled shows only what was written to it, not these holds.)
    let (_, s) = run(
        &format!("SELECT COUNT(*) AS n FROM {EV} WHERE fd = $fd"),
        opts.clone(),
        || during = Some(stats_fds_held()),
    );
    assert_eq!(during, Some(1), "one bpf_stats hold while the query runs");
    assert_eq!(stats_fds_held(), 0, "released when the query stops");
    assert!(
        s.bpf_stats && s.bpf_run_time_ns > 0 && s.ns_per_event().is_some(),
        "{}",
        s.to_json()
    );
    assert_eq!(
        s.bpf_run_cnt,
        s.events_seen,
        "no pid/tid test: the program counts every run: {}",
        s.to_json()
    );
    assert!(
        s.events_seen >= ON_FILE + ON_BAD_FD && s.events_matched >= ON_FILE,
        "other processes may read an fd of the same number: {}",
        s.to_json()
    );

    let (_, s) = run(
        &format!("SELECT COUNT(*) AS n FROM {EV} WHERE pid = $pid"),
        opts,
        || {},
    );
    assert_eq!(s.events_seen, ON_FILE + ON_BAD_FD, "{}", s.to_json());
    assert!(
        s.bpf_run_cnt >= s.events_seen,
        "every run at the hook, other processes' too: {}",
        s.to_json()
    );
}

/// The differential oracle still agrees (its tap records every event at
/// the hook, before the filters), and the tapped program's counters are exact.
#[test]
fn oracle_agrees_with_counters_in_the_program() {
    require_root();
    let _k = kernel_lock();
    let mut w = Workload::start();
    let fd = w.file();
    let sql = format!("SELECT fd, COUNT(*) AS n, SUM(count) AS bytes FROM {EV} WHERE pid = {} AND fd = {fd} GROUP BY fd WINDOW(time, 300, 300)", w.pid);
    let c = Executor::new()
        .check(&sql, Default::default())
        .unwrap_or_else(|e| panic!("{}", e.render()));
    w.pread(fd, 64, ON_FILE);
    w.pread_bad_fd(BAD_FD, 64, ON_BAD_FD);
    let report = c.stop().unwrap();
    assert!(report.agrees(), "{report}");
    assert!(report.windows() > 0);
    assert_eq!(
        (report.stats.events_seen, report.stats.events_matched),
        (ON_FILE + ON_BAD_FD, ON_FILE),
        "{}",
        report.stats.to_json()
    );
}

/// The CLI: `--bpf-stats` on query, check, serve and demo, documented with
/// its cost; the old `--no-bpf-stats` is gone (a usage error).
#[test]
fn cli_bpf_stats_flag() {
    let ebql = |args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_ebql"))
            .args(args)
            .output()
            .unwrap()
    };
    for cmd in ["query", "check", "serve", "demo"] {
        let help = String::from_utf8(ebql(&[cmd, "--help"]).stdout).unwrap();
        assert!(
            help.contains("--bpf-stats")
                && help.contains("70–120 ns")
                && help.contains("every BPF program"),
            "{cmd} --help:\n{help}"
        );
    }
    let old = ebql(&[
        "query",
        "--no-bpf-stats",
        "SELECT COUNT(*) FROM tracepoint/syscalls/sys_enter_pread64",
    ]);
    assert_eq!(
        old.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&old.stderr)
    );
}

/// `ebql query --bpf-stats` reports the kernel's run count and run time
/// next to the program's own counts.
#[test]
fn cli_stats_line_with_bpf_stats() {
    require_root();
    let _k = kernel_lock();
    let mut w = Workload::start();
    let fd = w.file();
    use std::io::BufRead;
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_ebql"))
        .args([
            "query",
            "--bpf-stats",
            "--duration",
            "3",
            "--format",
            "json",
        ])
        .arg(format!(
            "SELECT COUNT(*) AS n FROM {EV} WHERE pid = {} AND fd = {fd}",
            w.pid
        ))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = std::io::BufReader::new(child.stderr.take().unwrap())
        .lines()
        .map(Result::unwrap);
    let mut err: Vec<String> = stderr
        .by_ref()
        .take_while(|l| !l.starts_with("ebql: attached"))
        .collect();
    w.pread(fd, 64, ON_FILE);
    err.extend(stderr);
    let out = child.wait_with_output().unwrap();
    let err = err.join("\n");
    assert!(out.status.success(), "{err}");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        format!("{{\"n\":{ON_FILE}}}")
    );
    let line = err
        .lines()
        .find_map(|l| l.strip_prefix("ebql: stats "))
        .unwrap_or_else(|| panic!("{err}"));
    let num = |k: &str| -> u64 {
        line.split(&format!("\"{k}\":"))
            .nth(1)
            .and_then(|r| r.split([',', '}']).next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("{k} in {line}"))
    };
    assert_eq!(
        (num("events_seen"), num("events_matched")),
        (ON_FILE, ON_FILE),
        "{line}"
    );
    assert!(
        num("bpf_run_cnt") >= ON_FILE,
        "every run at the hook: {line}"
    );
    assert!(num("bpf_run_time_ns") > 0, "{line}");
}
