//! The `ebql` command line: exit codes, positioned errors, output formats,
//! Ctrl-C flushing the last window, and nothing left attached.

use crate::common::*;
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

mod conventions;
mod discovery;

const EBQL: &str = env!("CARGO_BIN_EXE_ebql");
const EV: &str = "tracepoint/syscalls/sys_enter_pread64";

#[test]
fn bad_queries_exit_2_with_a_positioned_message_and_load_nothing() {
    let _k = kernel_lock();
    require_root();
    let since = newest_program_id();
    // (query, words expected in the message, text the underline must cover)
    let cases: &[(&str, &str, &str)] = &[
        ("SELEC fd FROM tracepoint/syscalls/sys_enter_pread64", "expected", "SELEC"),
        ("SELECT fd, MAX(cnt) FROM tracepoint/syscalls/sys_enter_pread64 GROUP BY fd", "did you mean 'count'?", "cnt"),
        ("SELECT * FROM tracepoint/syscalls/sys_enter_pread65", "did you mean", "tracepoint/syscalls/sys_enter_pread65"),
        ("SELECT fd FROM tracepoint/syscalls/sys_enter_pread64 WHERE comm > 5", "type error", "comm"),
        ("SELECT fd FROM tracepoint/syscalls/sys_enter_pread64 WHERE fd = 'x'", "type error", "'x'"),
        ("SELECT fd, COUNT(*) FROM tracepoint/syscalls/sys_enter_pread64 GROUP BY fd WINDOW(time, 1000, 300)", "not a multiple of its step", "1000, 300"),
        ("SELECT COUNT(*) FROM tracepoint/syscalls/sys_enter_pread64 WINDOW(hours, 1, 1)", "unknown window kind", "hours"),
        ("SELECT fd FROM kprobe:vfs_read", "not available on this kernel", "kprobe:vfs_read"),
        (
            "SELECT a.fd FROM tracepoint/syscalls/sys_enter_pread64 a JOIN tracepoint/syscalls/sys_exit_pread64 b ON a.pid < b.pid",
            "the kernel pairs events by equal keys",
            "ON a.pid < b.pid",
        ),
    ];
    for (sql, words, under) in cases {
        let out = Command::new(EBQL)
            .args(["query", "--duration", "1", sql])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{sql}\n{err}");
        assert!(err.contains(words), "{sql}: expected '{words}' in:\n{err}");
        let lines: Vec<&str> = err.lines().collect();
        let tilde = lines
            .iter()
            .position(|l| l.trim_start().starts_with('~'))
            .unwrap_or_else(|| panic!("no underline:\n{err}"));
        let col = lines[tilde].find('~').unwrap();
        let width = lines[tilde].trim().len();
        assert_eq!(
            &lines[tilde - 1][col..col + width],
            *under,
            "underline in:\n{err}"
        );
        assert!(lines[0].starts_with("query:1:"), "{err}");
        assert!(
            !err.contains("attached"),
            "nothing may be attached for a bad query:\n{err}"
        );
    }
    assert_eq!(
        ebql_programs_loaded_since(since),
        Vec::<String>::new(),
        "a bad query left a program loaded"
    );
}

#[test]
fn json_output_and_ctrl_c_flushes_the_last_window() {
    let _k = kernel_lock();
    require_root();
    let mut w = Workload::start();
    let (a, b) = (w.file(), w.file());
    let sql = format!(
        "SELECT fd, cpu, COUNT(*), MAX(count), AVG(count) FROM {EV} GROUP BY fd, cpu WHERE pid == {} WINDOW(time, 1000, 1000);",
        w.pid
    );
    let mut child = Command::new(EBQL)
        .args(["query", "--format", "json", &sql])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    stderr.read_line(&mut line).unwrap();
    assert!(line.starts_with("ebql: attached"), "{line}");
    w.pread(a, 128, 300);
    w.pread(b, 64, 200);
    // SAFETY: signalling our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut stderr, &mut rest).unwrap();
    assert!(rest.contains("ebql: stats {"), "{rest}");
    let mut per_fd: BTreeMap<u64, u64> = BTreeMap::new();
    for l in String::from_utf8(out.stdout).unwrap().lines() {
        let v: serde_json::Value = serde_json::from_str(l).unwrap();
        // Wall clock as RFC 3339 UTC text (same width: compares as text), and CLOCK_MONOTONIC ns.
        assert!(v["window_start"].as_str().unwrap() < v["window_end"].as_str().unwrap());
        assert!(
            v["window_start_mono_ns"].as_u64().unwrap() < v["window_end_mono_ns"].as_u64().unwrap()
        );
        assert_eq!(
            v["max(count)"].as_u64().unwrap(),
            if v["fd"] == a { 128 } else { 64 }
        );
        *per_fd.entry(v["fd"].as_u64().unwrap()).or_default() += v["count(*)"].as_u64().unwrap();
    }
    assert_eq!(per_fd, BTreeMap::from([(a, 300), (b, 200)]));
}

#[test]
fn csv_to_a_file_with_duration() {
    let _k = kernel_lock();
    require_root();
    let w = Workload::start();
    let path = std::env::temp_dir().join(format!("ebql-test-{}.csv", std::process::id()));
    let sql = format!(
        "SELECT COUNT(*) AS n FROM {EV} WHERE pid = {} WINDOW(time, 200, 200)",
        w.pid
    );
    let out = Command::new(EBQL)
        .args(["query", "--format", "csv", "--duration", "0.5", "--output"])
        .arg(&path)
        .arg(&sql)
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::fs::read_to_string(&path).unwrap();
    let _ = std::fs::remove_file(&path);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines[0],
        "window_start,window_end,window_start_mono_ns,window_end_mono_ns,n"
    );
    assert!(
        lines.len() >= 3,
        "at least two windows closed on time without events:\n{text}"
    );
    assert!(lines[1..].iter().all(|l| l.ends_with(",0")), "{text}");
}

#[test]
fn explain_annotates_bytecode_and_tests_pid_first() {
    let out = Command::new(EBQL)
        .args(["explain", "SELECT fd, COUNT(*) FROM tracepoint/syscalls/sys_enter_pread64 WHERE count > 10 AND comm = 'x' AND pid = 42 GROUP BY fd"])
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let first_call = text.lines().find(|l| l.contains(": call ")).unwrap();
    assert!(first_call.contains("bpf_get_current_pid_tgid"), "{text}");
    let pid_test = text.find("0x2a").expect("pid 42 compared");
    let comm = text.find("bpf_get_current_comm").expect("comm read");
    assert!(pid_test < comm, "pid test precedes other helpers:\n{text}");
    assert!(text.contains(";; Filter: "), "{text}");
    assert!(text.contains(";; Aggregate: update"), "{text}");
}

#[test]
fn events_and_describe() {
    let out = Command::new(EBQL)
        .args(["events", "syscalls:sys_enter_pread*"])
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.lines()
            .any(|l| l == "tracepoint/syscalls/sys_enter_pread64"),
        "{text}"
    );
    let out = Command::new(EBQL)
        .args(["describe", "tracepoint:syscalls:sys_enter_pread64"])
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.lines()
            .any(|l| l.starts_with("count ") && l.contains("offset 32")),
        "{text}"
    );
    assert!(
        text.lines()
            .any(|l| l.starts_with("pid ") && l.contains("tgid")),
        "{text}"
    );
}

/// `ebql describe` of a wire relation lists its columns with their
/// meaning and its capture; of a built-in view, its SELECT. `ebql events`
/// lists both.
#[test]
fn describe_a_wire_relation_and_a_view() {
    let text = |args: &[&str]| {
        let out = Command::new(EBQL).args(args).output().unwrap();
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    let rel = text(&["describe", "postgres.statements"]);
    for column in ["latency_ns", "query", "sqlstate", "user"] {
        assert!(
            rel.lines().any(|l| l.starts_with(&format!("{column} "))),
            "{rel}"
        );
    }
    // This kernel has the socket tracepoints: one query on each.
    assert!(
        rel.contains("captured by: SELECT")
            && rel.contains("FROM tp_btf:sock:sock_recv_length")
            && rel.contains("and the same query over tp_btf:sock:sock_send_length"),
        "{rel}"
    );
    let view = text(&["describe", "syscalls.socket_reads"]);
    assert!(view.contains("bytes(e.ubuf, x.ret, 512)"), "{view}");
    let events = text(&["events"]);
    for name in [
        "postgres.statements",
        "mysql.statements",
        "syscalls.socket_writes",
    ] {
        assert!(
            events.lines().any(|l| l.starts_with(name)),
            "{name}: {events}"
        );
    }
}

/// `ebql check` on the built-in workload: one verdict line per window, all
/// agreeing, the summary, exit 0 (a disagreement would exit 3; the comparison
/// itself is unit-tested in `ebql::check`).
#[test]
fn check_compares_every_window_and_exits_0_when_all_agree() {
    let _k = kernel_lock();
    require_root();
    let q = format!("SELECT fd, COUNT(*), SUM(count), AVG(count) FROM {EV} WHERE pid = $pid GROUP BY fd WINDOW(time, 300, 300)");
    let out = Command::new(EBQL)
        .args(["check", "--workload", "--duration", "2", &q])
        .output()
        .expect("run ebql check");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "stdout:\n{stdout}\nstderr:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let verdicts: Vec<&str> = stdout
        .lines()
        .filter(|l| l.starts_with("window "))
        .collect();
    // The workload is paced for the reference; should a loaded machine still
    // fall behind the tap's ring buffer, that window is reported inconclusive
    // with its drops, never judged. Every other window agrees, with a row per
    // fd that had calls in it: one of the two threads may start (or end) a
    // window late on a loaded machine (CI saw "window 1: agree (1 rows)").
    let agree: Vec<&&str> = verdicts
        .iter()
        .filter(|l| {
            ["0", "1", "2"]
                .iter()
                .any(|n| l.contains(&format!(": agree ({n} rows)")))
        })
        .collect();
    let overloaded = |l: &&&str| l.contains(": inconclusive: events were dropped in this window");
    assert!(
        verdicts
            .iter()
            .all(|l| agree.contains(&l) || overloaded(&l)),
        "{stdout}"
    );
    assert!(
        agree.len() >= 2,
        "at least two 300 ms windows compared: {stdout}"
    );
    assert!(
        agree.iter().any(|l| l.contains("(2 rows)")),
        "the workload's two fds were seen: {stdout}"
    );
    let summary = stdout.lines().last().unwrap_or_default();
    let expected = format!(
        "ok: {} window(s) compared, {} agree, 0 disagree, {} inconclusive",
        verdicts.len(),
        agree.len(),
        verdicts.len() - agree.len()
    );
    assert!(summary.starts_with(&expected), "{summary}");
    assert!(
        summary.contains("references: DataFusion and DuckDB ")
            && summary.contains(&format!(
                "({} of {} windows agree in DuckDB)",
                agree.len(),
                verdicts.len()
            )),
        "DuckDB, the second reference, took part and agreed: {summary}"
    );
}

/// An `--output` that cannot be created fails the run after attaching: a
/// message naming the path, exit 1, and the probe detached and unloaded.
#[test]
fn unwritable_output_exits_1_and_leaves_nothing_attached() {
    let _k = kernel_lock();
    require_root();
    let w = Workload::start();
    let path = std::env::temp_dir()
        .join(format!("ebql-no-such-dir-{}", std::process::id()))
        .join("out.csv");
    let sql = format!(
        "SELECT COUNT(*) FROM {EV} WHERE pid = {} WINDOW(time, 200, 200)",
        w.pid
    );
    let out = Command::new(EBQL)
        .args(["query", "--format", "csv", "--duration", "5", "--output"])
        .arg(&path)
        .arg(&sql)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains(&format!(
            "error: creating {}: No such file or directory",
            path.display()
        )),
        "{err}"
    );
    let id: u32 = err
        .lines()
        .find_map(|l| {
            l.strip_prefix("ebql: attached (program id ")?
                .strip_suffix(')')?
                .parse()
                .ok()
        })
        .unwrap_or_else(|| panic!("no program id in:\n{err}"));
    assert!(
        !ebql_runtime::bpf_object_exists(ebql_runtime::BpfObject::Program, id).unwrap(),
        "program {id} is still loaded"
    );
    assert!(
        !err.contains("ebql: stats"),
        "the query must not have run:\n{err}"
    );
}

/// `ebql check ARGS QUERY` around `work`: exit 0, every window agreeing
/// (in DuckDB too when `duckdb`; it evaluates standard SQL only, not `str()`),
/// at least one of them over rows.
pub(crate) fn check_agrees(args: &[&str], sql: &str, duckdb: bool, work: impl FnOnce()) {
    let argv: Vec<&str> = ["check", "--duration", "2"]
        .into_iter()
        .chain(args.iter().copied())
        .chain([sql])
        .collect();
    let (code, out, err) = run_around(&argv, Stdio::piped(), "attached", work);
    let stdout = String::from_utf8_lossy(&out);
    assert_eq!(code, Some(0), "{sql}\n{stdout}\n{err}");
    let summary = stdout.lines().last().unwrap_or_default();
    assert!(
        summary.starts_with("ok: ") && summary.contains(" 0 disagree, 0 inconclusive"),
        "{sql}\n{stdout}"
    );
    assert!(
        stdout
            .lines()
            .any(|l| l.contains(": agree (") && !l.contains("(0 rows)")),
        "a window with events was compared: {stdout}"
    );
    let windows = stdout.lines().filter(|l| l.starts_with("window ")).count();
    if duckdb {
        assert!(
            summary.contains(&format!("({windows} of {windows} windows agree in DuckDB)")),
            "DuckDB, the second reference, agreed: {sql}\n{summary}\n{err}"
        );
    } else {
        assert!(summary.contains("(DuckDB not used: "), "{summary}");
    }
}

/// Runs `ebql query ARGS`, calls `work` once it has attached, and returns
/// its exit code, stdout and stderr once it has ended (by `--duration` or by itself).
pub(crate) fn query_around(
    args: &[&str],
    stdout: Stdio,
    work: impl FnOnce(),
) -> (Option<i32>, Vec<u8>, String) {
    let argv: Vec<&str> = ["query"].into_iter().chain(args.iter().copied()).collect();
    run_around(&argv, stdout, "ebql: attached", work)
}

/// Runs `ebql ARGV`, calls `work` once its stderr says `attached`, and
/// returns its exit code, stdout and stderr once it has ended.
fn run_around(
    argv: &[&str],
    stdout: Stdio,
    attached: &str,
    work: impl FnOnce(),
) -> (Option<i32>, Vec<u8>, String) {
    let mut child = Command::new(EBQL)
        .args(argv)
        .stdout(stdout)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let mut err = String::new();
    while !err.contains(attached) {
        assert_ne!(
            stderr.read_line(&mut err).unwrap(),
            0,
            "ended before attaching:\n{err}"
        );
    }
    work();
    let out = child.wait_with_output().unwrap();
    std::io::Read::read_to_string(&mut stderr, &mut err).unwrap();
    (out.status.code(), out.stdout, err)
}

/// A traced string with terminal controls (the workload's comm: ESC
/// sequences that clear the screen and home the cursor, a BEL) is shown as
/// visible escapes by `--format table`, and as JSON escapes, read back
/// unchanged, by `--format json`.
#[test]
fn control_characters_in_traced_strings_are_escaped() {
    let _k = kernel_lock();
    require_root();
    let mut w = Workload::start();
    let fd = w.file();
    let comm = "\x1b[2J\x1b[Hx\x07";
    assert_eq!(w.cmd(&format!("comm {comm}")), "ok comm");
    let sql = format!(
        "SELECT comm, COUNT(*) AS n FROM {EV} WHERE pid = {} GROUP BY comm",
        w.pid
    );
    let (code, out, err) = query_around(
        &["--format", "table", "--duration", "2", &sql],
        Stdio::piped(),
        || w.pread(fd, 8, 5),
    );
    let table = String::from_utf8(out).unwrap();
    assert_eq!(code, Some(0), "{err}");
    assert!(
        !table.contains(['\x1b', '\x07']),
        "raw control characters in:\n{table:?}"
    );
    let row = table
        .lines()
        .find(|l| l.contains("x1b"))
        .unwrap_or_else(|| panic!("no row in:\n{table}"));
    let cells: Vec<&str> = row.split('|').map(str::trim).collect();
    assert_eq!(cells[1..3], ["\\x1b[2J\\x1b[Hx\\x07", "5"], "{table}");

    let (code, out, err) = query_around(
        &["--format", "json", "--duration", "2", &sql],
        Stdio::piped(),
        || w.pread(fd, 8, 3),
    );
    assert_eq!(code, Some(0), "{err}");
    let json = String::from_utf8(out).unwrap();
    assert!(!json.contains(['\x1b', '\x07']), "{json:?}");
    let v: serde_json::Value = serde_json::from_str(json.trim()).unwrap();
    assert_eq!((v["comm"].as_str(), v["n"].as_u64()), (Some(comm), Some(3)));
}

/// A sink that fails (`--output /dev/full`: every write is ENOSPC; here the
/// one result of an unwindowed aggregate, written at stop, so that every
/// event is counted before it) ends the run with exit 1 and the error, after
/// the final stats line.
#[test]
fn a_failing_output_still_prints_the_stats() {
    let _k = kernel_lock();
    require_root();
    let mut w = Workload::start();
    let fd = w.file();
    let sql = format!("SELECT COUNT(*) AS n FROM {EV} WHERE pid = {}", w.pid);
    let (code, _, err) = query_around(
        &[
            "--format",
            "csv",
            "--duration",
            "2",
            "--output",
            "/dev/full",
            &sql,
        ],
        Stdio::null(),
        || w.pread(fd, 8, 4),
    );
    assert_eq!(code, Some(1), "{err}");
    let stats = err
        .lines()
        .position(|l| l.starts_with("ebql: stats {"))
        .unwrap_or_else(|| panic!("no stats in:\n{err}"));
    let failure = err
        .lines()
        .position(|l| l.contains("writing /dev/full: No space left on device"))
        .unwrap_or_else(|| panic!("no error in:\n{err}"));
    assert!(stats < failure, "{err}");
    let json: serde_json::Value = serde_json::from_str(
        err.lines()
            .nth(stats)
            .unwrap()
            .trim_start_matches("ebql: stats "),
    )
    .unwrap();
    assert_eq!(json["events_matched"].as_u64(), Some(4), "{err}");
}

/// A reader that closes the pipe (`| head`) ends the run without an error,
/// and the stats are still printed.
#[test]
fn a_closed_pipe_ends_the_run_with_its_stats() {
    let _k = kernel_lock();
    require_root();
    let mut w = Workload::start();
    let fd = w.file();
    let sql = format!("SELECT fd FROM {EV} WHERE pid = {}", w.pid);
    let started = std::time::Instant::now();
    let mut child = Command::new(EBQL)
        .args(["query", "--format", "json", "--duration", "20", &sql])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let mut err = String::new();
    stderr.read_line(&mut err).unwrap();
    assert!(err.starts_with("ebql: attached"), "{err}");
    drop(child.stdout.take());
    // Rows until ebql writes one into the closed pipe (a raw stream is sent at least every 200 ms).
    while child.try_wait().unwrap().is_none() && started.elapsed().as_secs() < 15 {
        w.pread(fd, 8, 10);
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let status = child.wait().unwrap();
    std::io::Read::read_to_string(&mut stderr, &mut err).unwrap();
    assert!(started.elapsed().as_secs() < 15, "ran on:\n{err}");
    assert_eq!(status.code(), Some(0), "{err}");
    assert!(err.contains("ebql: stats {"), "{err}");
    assert!(!err.contains("error"), "{err}");
}

/// Issue 19, item 7: a window whose SUM does not fit its result type fails
/// alone. Count windows of 100 events make the windows exact: window 1 sums
/// 100 · 10^19 (an error line in place of its row), windows 2 and 3 are
/// exact; the stats line is printed, counts the failed window, and the exit
/// code is 4 (the run ended, some windows failed).
#[test]
fn an_overflowing_window_fails_alone_and_the_run_exits_4() {
    let _k = kernel_lock();
    require_root();
    let mut w = Workload::start();
    let fd = w.file();
    let sql = format!(
        "SELECT SUM(count * 100000000000000000) AS s, COUNT(*) AS n FROM {EV} WHERE pid = {} WINDOW(count, 100, 100)",
        w.pid
    );
    let (code, out, err) = query_around(
        &["--format", "json", "--duration", "2", &sql],
        Stdio::piped(),
        || {
            w.pread(fd, 100, 100);
            w.pread(fd, 1, 100);
            w.pread(fd, 2, 50);
            w.pread(fd, 1, 50);
        },
    );
    assert_eq!(code, Some(4), "{err}");
    let lines: Vec<serde_json::Value> = String::from_utf8(out)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 3, "{lines:?}");
    assert_eq!(
        (&lines[0]["window_start"], &lines[0]["window_end"]),
        (&serde_json::json!(0), &serde_json::json!(100))
    );
    let cause = lines[0]["error"].as_str().unwrap_or_default();
    assert!(
        cause.contains("= 1000000000000000000000 does not fit its result type UInt64"),
        "{lines:?}"
    );
    assert_eq!(
        lines[1..],
        [
            serde_json::json!({"window_start": 100, "window_end": 200, "s": 10_000_000_000_000_000_000u64, "n": 100}),
            serde_json::json!({"window_start": 200, "window_end": 300, "s": 15_000_000_000_000_000_000u64, "n": 100}),
        ]
    );
    // On stderr, in order: the window's warning, the stats, the summary and the error.
    let at = |what: &str| {
        err.lines()
            .position(|l| l.contains(what))
            .unwrap_or_else(|| panic!("no `{what}` in:\n{err}"))
    };
    let warning = at("ebql: warning: window events 0..100 [0, 100) failed: sum(");
    let stats = at("ebql: stats {");
    let summary = at("ebql: warning: 1 window(s) failed");
    let error = at("error: 1 of 3 window(s) failed");
    assert!(
        warning < stats && stats < summary && summary < error,
        "{err}"
    );
    let json: serde_json::Value = serde_json::from_str(
        err.lines()
            .nth(stats)
            .unwrap()
            .trim_start_matches("ebql: stats "),
    )
    .unwrap();
    assert_eq!(
        (
            json["events_matched"].as_u64(),
            json["windows_emitted"].as_u64(),
            json["windows_failed"].as_u64(),
            json["rows_emitted"].as_u64()
        ),
        (Some(300), Some(3), Some(1), Some(2)),
        "{err}"
    );
}
