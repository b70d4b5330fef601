//! `ebql serve --flight-sql` (issue 22) with a real Flight SQL client:
//! ADBC's driver from PyPI (`adbc-driver-flightsql`, pyarrow), against the
//! service binary. A workload with a known number of `pread64` calls,
//! filtered by its pid; the windows a client receives sum to it exactly.

use crate::common::{
    ebql_programs_loaded_since, free_port, http_get, kernel_lock, newest_program_id, require_root,
    Workload,
};
use std::io::{BufRead, BufReader};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const EBQL: &str = env!("CARGO_BIN_EXE_ebql");

/// The Python client: runs `sql` (argv 2) on the service at `uri` (argv 1),
/// bounded by the `x-ebql-duration` header (argv 3, empty: none); prints
/// `first` once the first window arrived, then one JSON line: the sum of
/// column `n` (if any), the windows, the rows, the stream schema's metadata. A query the
/// service refuses prints `error` and the message.
const CLIENT: &str = r#"
import json, sys
import adbc_driver_flightsql.dbapi as flight
uri, sql, duration = sys.argv[1:4]
kw = {"adbc.flight.sql.rpc.call_header.x-ebql-duration": duration} if duration else {}
try:
    conn = flight.connect(uri, db_kwargs=kw, autocommit=True)
    cur = conn.cursor()
    cur.execute(sql)
    reader = cur.fetch_record_batch()
    total, windows, rows = 0, 0, 0
    for batch in reader:
        if windows == 0:
            print("first", flush=True)
        windows += 1
        rows += batch.num_rows
        if "n" in batch.schema.names:
            total += sum(v or 0 for v in batch.column("n").to_pylist())
except Exception as e:
    print("error", json.dumps(str(e)), flush=True)
    sys.exit(0)
md = {k.decode(): v.decode() for k, v in (reader.schema.metadata or {}).items()}
print(json.dumps({"total": total, "windows": windows, "rows": rows, "metadata": md}), flush=True)
"#;

/// The service, on a free loopback port, until dropped (SIGINT, then wait).
struct Service {
    child: Child,
    uri: String,
    /// The service's stderr lines after its address, as they come.
    stderr: Arc<Mutex<Vec<String>>>,
}

impl Service {
    fn start() -> Service {
        Service::start_with(&[])
    }

    /// The service with `extra` arguments to `ebql serve`.
    fn start_with(extra: &[&str]) -> Service {
        let mut child = Command::new(EBQL)
            .args(["serve", "--flight-sql", "127.0.0.1:0"])
            .args(extra)
            .stderr(Stdio::piped())
            .spawn()
            .expect("start ebql serve");
        let mut err = BufReader::new(child.stderr.take().expect("stderr"));
        let mut line = String::new();
        let uri = loop {
            line.clear();
            assert!(
                err.read_line(&mut line).expect("read stderr") > 0,
                "serve exited"
            );
            if let Some(addr) = line
                .trim()
                .strip_prefix("ebql: serving Flight SQL on grpc://")
            {
                break format!("grpc://{addr}");
            }
        };
        // Keep draining stderr so that the service never blocks on it.
        let stderr = Arc::new(Mutex::new(Vec::new()));
        let lines = stderr.clone();
        std::thread::spawn(move || {
            for l in err.lines().map_while(Result::ok) {
                eprintln!("[serve] {l}");
                lines.lock().unwrap().push(l);
            }
        });
        Service { child, uri, stderr }
    }

    fn stderr_lines(&self) -> Vec<String> {
        self.stderr.lock().unwrap().clone()
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        // SAFETY: signalling our own child.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGINT) };
        let _ = self.child.wait();
    }
}

/// A running client and its stdout.
fn client(uri: &str, sql: &str, duration: &str) -> (Child, BufReader<ChildStdout>) {
    // `timeout`: a client that never hears back fails the test instead of hanging it.
    let mut c = Command::new("timeout")
        .args(["60", "python3", "-c", CLIENT, uri, sql, duration])
        .stdout(Stdio::piped())
        .spawn()
        .expect("python3 with adbc-driver-flightsql (scripts/setup.sh installs it)");
    let out = BufReader::new(c.stdout.take().expect("stdout"));
    (c, out)
}

/// Waits until no `ebql_` program loaded after `since` is left: the kernel
/// frees a closed program a moment after its last fd (RCU). Fails after 5 s.
fn assert_all_unloaded(since: u32, what: &str) {
    let begun = Instant::now();
    while !ebql_programs_loaded_since(since).is_empty() {
        assert!(
            begun.elapsed() < Duration::from_secs(5),
            "{what} stays attached: {:?}",
            ebql_programs_loaded_since(since)
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The workload's preads (`pid`), counted per 300 ms window as `n`.
fn preads_per_window(pid: u32) -> String {
    format!(
        "SELECT COUNT(*) AS n FROM tracepoint:syscalls:sys_enter_pread64 \
         WHERE pid = {pid} WINDOW(time, 300, 300)"
    )
}

/// The sum of `n` over the rows a standing query wrote to its JSON file.
fn sum_of_n(file: &std::path::Path) -> u64 {
    let text = std::fs::read_to_string(file).expect("the standing query's file");
    text.lines()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["n"]
                .as_u64()
                .unwrap_or_else(|| panic!("no n in {l}"))
        })
        .sum()
}

fn next_line(out: &mut BufReader<ChildStdout>) -> String {
    let mut line = String::new();
    out.read_line(&mut line).expect("client output");
    line.trim().to_string()
}

/// A client's windows, bounded by its duration header, hold every pread
/// of the workload once: the windows closed while it read, and the last
/// (partial) one at the end. The stream's schema carries the query.
#[test]
fn a_client_query_streams_its_windows_and_ends_with_its_duration() {
    require_root();
    let _k = kernel_lock();
    let svc = Service::start();
    let mut w = Workload::start();
    let fd = w.file();
    let sql = preads_per_window(w.pid);
    let (mut c, mut out) = client(&svc.uri, &sql, "3s");
    assert_eq!(next_line(&mut out), "first", "the first window arrived");
    w.pread(fd, 16, 1000);
    let done: serde_json::Value =
        serde_json::from_str(&next_line(&mut out)).expect("the client's totals");
    assert!(c.wait().expect("client exit").success());
    assert_eq!(done["total"], 1000, "{done}");
    assert!(done["windows"].as_u64().unwrap() >= 3, "{done}");
    assert_eq!(done["metadata"]["ebql.query"], sql.as_str(), "{done}");
    assert_eq!(done["metadata"]["ebql.window"], "time", "{done}");
}

/// A bad query is refused at once with its diagnostic (position and
/// underline); a client killed mid-stream has its query stopped and its
/// programs detached; the service serves the next client all the same.
#[test]
fn a_bad_query_is_refused_and_a_killed_client_detaches_its_query() {
    require_root();
    let _k = kernel_lock();
    let svc = Service::start();
    let (mut c, mut out) = client(
        &svc.uri,
        "SELECT nope FROM tracepoint:syscalls:sys_enter_pread64",
        "",
    );
    let refused = next_line(&mut out);
    assert!(refused.starts_with("error"), "{refused}");
    // The diagnostic as the terminal shows it: position, the query, its underline, a hint.
    for part in ["query:1:8-11", "unknown field 'nope'", "~~~~", "hint:"] {
        assert!(refused.contains(part), "{part}: {refused}");
    }
    assert!(c.wait().unwrap().success());

    // Minute-long windows: the client is gone long before its first window,
    // and the service notices between windows.
    let since = newest_program_id();
    let sql =
        "SELECT COUNT(*) AS n FROM tracepoint:syscalls:sys_enter_getppid WINDOW(time, 60000, 60000)";
    let (mut c, _out) = client(&svc.uri, sql, "");
    let begun = Instant::now();
    while !ebql_programs_loaded_since(since)
        .iter()
        .any(|p| p.contains("getppid"))
    {
        assert!(begun.elapsed() < Duration::from_secs(20), "never attached");
        std::thread::sleep(Duration::from_millis(50));
    }
    // SIGTERM, which `timeout` passes on to the client (SIGKILL would kill `timeout` alone).
    // SAFETY: signalling our own child.
    unsafe { libc::kill(c.id() as i32, libc::SIGTERM) };
    c.wait().unwrap();
    assert_all_unloaded(since, "the query of a client gone");

    let mut w = Workload::start();
    let fd = w.file();
    let sql = preads_per_window(w.pid);
    let (mut c, mut out) = client(&svc.uri, &sql, "2s");
    assert_eq!(next_line(&mut out), "first");
    w.pread(fd, 16, 250);
    let done: serde_json::Value = serde_json::from_str(&next_line(&mut out)).unwrap();
    assert!(c.wait().unwrap().success());
    assert_eq!(done["total"], 250, "{done}");
}

/// `ebql ctl` against the service: `ebql.ctl` output as JSON.
fn ctl(svc: &Service, args: &[&str]) -> serde_json::Value {
    let out = Command::new(EBQL)
        .args(["ctl", "--connect", &svc.uri])
        .args(args)
        .output()
        .expect("ebql ctl");
    assert!(
        out.status.success(),
        "ebql ctl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("ctl's JSON")
}

/// Standing queries added and removed through `ebql ctl` while another
/// runs: the one that stays counts every pread of the workload once in its
/// file, across the other's add and removal; each removal detaches its
/// programs and returns its final counters; a name is refused twice.
#[test]
fn standing_queries_are_added_and_removed_while_another_runs() {
    require_root();
    let _k = kernel_lock();
    let svc = Service::start();
    let mut w = Workload::start();
    let fd = w.file();
    let file = std::env::temp_dir().join(format!("ebql-standing-{}.json", std::process::id()));
    let _ = std::fs::remove_file(&file);
    let sql = preads_per_window(w.pid);
    let added = ctl(
        &svc,
        &[
            "add",
            "preads",
            &sql,
            "-f",
            "json",
            "-o",
            file.to_str().unwrap(),
        ],
    );
    assert_eq!(added["name"], "preads", "{added}");
    w.pread(fd, 16, 700);

    let since = newest_program_id();
    let other =
        "SELECT COUNT(*) AS n FROM tracepoint:syscalls:sys_enter_getppid WINDOW(time, 300, 300)";
    ctl(&svc, &["add", "other", other, "-f", "null"]);
    assert!(!ebql_programs_loaded_since(since).is_empty());
    let twice = Command::new(EBQL)
        .args([
            "ctl",
            "--connect",
            &svc.uri,
            "add",
            "other",
            other,
            "-f",
            "null",
        ])
        .output()
        .unwrap();
    assert!(!twice.status.success());
    assert!(String::from_utf8_lossy(&twice.stderr).contains("taken"));
    let listed = ctl(&svc, &["ls"]);
    let names: Vec<&str> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|q| q["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["other", "preads"], "{listed}");
    w.pread(fd, 16, 200);
    let other_stats = ctl(&svc, &["rm", "other"]);
    assert!(other_stats["events_seen"].is_u64(), "{other_stats}");
    assert_all_unloaded(since, "`other`, removed");
    w.pread(fd, 16, 100);

    let stats = ctl(&svc, &["rm", "preads"]);
    assert_eq!(stats["events_matched"], 1000, "{stats}");
    assert_eq!(ctl(&svc, &["ls"]), serde_json::json!([]));
    assert_eq!(sum_of_n(&file), 1000);
    let _ = std::fs::remove_file(&file);
}

/// `/metrics` of the endpoint on `port`.
fn scrape(port: u16) -> String {
    http_get(port, "/metrics").expect("the endpoint").1
}

/// A standing query of format prometheus is exposed on the service's
/// endpoint beside the command line's query, both counters exact; `ebql
/// ctl` lists and removes both, and a removed query's series are gone.
#[test]
fn standing_queries_on_prometheus_are_listed_exact_and_removed() {
    require_root();
    let _k = kernel_lock();
    let port = free_port();
    let mut w = Workload::start();
    let fd = w.file();
    let sql = preads_per_window(w.pid);
    let addr = format!("127.0.0.1:{port}");
    let svc = Service::start_with(&["--prometheus", &addr, "--name", "cmdline", &sql]);
    ctl(&svc, &["add", "preads", &sql, "-f", "prometheus"]);
    let listed = ctl(&svc, &["ls"]);
    let names: Vec<&str> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|q| q["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["cmdline", "preads"], "{listed}");
    // One kernel part: `preads` reads the synopsis of `cmdline`, from the
    // first window that starts after it was added: once that one closed,
    // events are in its windows.
    let readers: Vec<_> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|q| q["synopsis_readers"].clone())
        .collect();
    assert_eq!(readers, [2, 2], "{listed}");
    let begun = Instant::now();
    while ctl(&svc, &["ls"])[1]["stats"]["windows_emitted"] == 0 {
        assert!(
            begun.elapsed() < Duration::from_secs(10),
            "preads' first window"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    w.pread(fd, 16, 500);
    let begun = Instant::now();
    loop {
        let text = scrape(port);
        if text.contains("preads_n_total 500\n") && text.contains("cmdline_n_total 500\n") {
            break;
        }
        assert!(
            begun.elapsed() < Duration::from_secs(5),
            "the counters after their windows closed: {text}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let stats = ctl(&svc, &["rm", "preads"]);
    assert_eq!(stats["events_matched"], 500, "{stats}");
    let after = scrape(port);
    assert!(!after.contains("preads"), "{after}");
    assert!(after.contains("cmdline_n_total 500\n"), "{after}");
    let stats = ctl(&svc, &["rm", "cmdline"]);
    assert_eq!(stats["events_matched"], 500, "{stats}");
    assert_eq!(ctl(&svc, &["ls"]), serde_json::json!([]));
}

/// A query with LIMIT ends its stream by itself, without a duration: the
/// client gets exactly 5 rows of the workload's preads, however many more
/// it makes, and the query's programs detach.
#[test]
fn a_limit_ends_the_clients_stream() {
    require_root();
    let _k = kernel_lock();
    let svc = Service::start();
    let mut w = Workload::start();
    let fd = w.file();
    let pid = w.pid;
    let since = newest_program_id();
    let sql = format!(
        "SELECT fd, count FROM tracepoint:syscalls:sys_enter_pread64 WHERE pid = {pid} LIMIT 5"
    );
    let (mut c, mut out) = client(&svc.uri, &sql, "");
    // Whenever the query attaches, preads follow: until the client is done.
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let reads = {
        let done = done.clone();
        std::thread::spawn(move || {
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                w.pread(fd, 16, 10);
                std::thread::sleep(Duration::from_millis(50));
            }
        })
    };
    assert_eq!(next_line(&mut out), "first");
    let result: serde_json::Value = serde_json::from_str(&next_line(&mut out)).unwrap();
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    reads.join().unwrap();
    assert!(c.wait().unwrap().success());
    assert_eq!(result["rows"], 5, "{result}");
    assert_all_unloaded(since, "a query past its LIMIT");
}

/// With `--token-file`, a call without the token is refused
/// (`Unauthenticated`, saying what to send) and one with it is served.
#[test]
fn a_service_with_a_token_refuses_calls_without_it() {
    let dir = std::env::temp_dir().join(format!("ebql-token-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let token = dir.join("token");
    std::fs::write(&token, "s3cret\n").unwrap();
    let svc = Service::start_with(&["--token-file", token.to_str().unwrap()]);
    let without = Command::new(EBQL)
        .args(["ctl", "--connect", &svc.uri, "ls"])
        .output()
        .unwrap();
    assert!(!without.status.success());
    let err = String::from_utf8_lossy(&without.stderr);
    assert!(err.contains("authorization: Bearer TOKEN"), "{err}");
    let with = ctl(&svc, &["--token-file", token.to_str().unwrap(), "ls"]);
    assert_eq!(with, serde_json::json!([]));
    let _ = std::fs::remove_dir_all(&dir);
}

/// A client that reads its first window, then stops reading
/// (argv 4 seconds) before draining the rest; prints `first`, then the JSON line
/// of [`CLIENT`].
const SLOW_CLIENT: &str = r#"
import json, sys, time
import adbc_driver_flightsql.dbapi as flight
uri, sql, duration, stall = sys.argv[1:5]
conn = flight.connect(uri, db_kwargs={"adbc.flight.sql.rpc.call_header.x-ebql-duration": duration}, autocommit=True)
cur = conn.cursor()
cur.execute(sql)
total, windows = 0, 0
for batch in cur.fetch_record_batch():
    if windows == 0:
        print("first", flush=True)
        time.sleep(float(stall))
    windows += 1
    total += sum(v or 0 for v in batch.column("n").to_pylist())
print(json.dumps({"total": total, "windows": windows}), flush=True)
"#;

/// A client that stops reading never holds up the service: while it
/// stalls, a standing query on the same events counts exactly and `ebql
/// ctl` answers; the slow client's stream still ends with its duration,
/// having lost whole windows (counted on the service's stderr), never
/// received more than happened.
#[test]
fn a_slow_reader_loses_windows_and_holds_up_no_one() {
    require_root();
    let _k = kernel_lock();
    let svc = Service::start();
    let mut w = Workload::start();
    let fd = w.file();
    let file = std::env::temp_dir().join(format!("ebql-slow-{}.json", std::process::id()));
    let _ = std::fs::remove_file(&file);
    ctl(
        &svc,
        &[
            "add",
            "steady",
            &preads_per_window(w.pid),
            "-f",
            "json",
            "-o",
            file.to_str().unwrap(),
        ],
    );
    // 20 ms windows (the shortest step) and a 10 s stall: ~500 windows
    // unread, beyond what the client's buffer of 64 and gRPC's flow-control
    // window hold (~3 s of them here); the workload runs 5–7 s into the
    // stall, so its windows are among those lost.
    let sql = format!(
        "SELECT COUNT(*) AS n FROM tracepoint:syscalls:sys_enter_pread64 \
         WHERE pid = {} WINDOW(time, 20, 20)",
        w.pid
    );
    let mut c = Command::new("timeout")
        .args([
            "60",
            "python3",
            "-c",
            SLOW_CLIENT,
            &svc.uri,
            &sql,
            "14s",
            "10",
        ])
        .stdout(Stdio::piped())
        .spawn()
        .expect("python3 with adbc-driver-flightsql");
    let mut out = BufReader::new(c.stdout.take().unwrap());
    assert_eq!(next_line(&mut out), "first");
    let stalled = Instant::now();
    std::thread::sleep(Duration::from_secs(5));
    for _ in 0..10 {
        w.pread(fd, 16, 100);
        let t = Instant::now();
        let listed = ctl(&svc, &["ls"]);
        assert!(
            t.elapsed() < Duration::from_secs(2),
            "ctl ls took {:?}",
            t.elapsed()
        );
        assert_eq!(listed.as_array().map(Vec::len), Some(1), "{listed}");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        stalled.elapsed() < Duration::from_secs(10),
        "the workload ran during the stall"
    );
    let stats = ctl(&svc, &["rm", "steady"]);
    assert_eq!(stats["events_matched"], 1000, "{stats}");
    assert_eq!(sum_of_n(&file), 1000);
    let got: serde_json::Value = serde_json::from_str(&next_line(&mut out)).unwrap();
    assert!(c.wait().unwrap().success());
    let total = got["total"].as_u64().unwrap();
    assert!(total <= 1000, "{got}");
    let dropped = svc
        .stderr_lines()
        .iter()
        .any(|l| l.contains("windows dropped for a slow reader"));
    assert!(
        dropped && total < 1000,
        "whole windows lost and said: {got}, {:?}",
        svc.stderr_lines()
    );
    let _ = std::fs::remove_file(&file);
}
