//! PostgreSQL workloads (issue 10): Debian's PostgreSQL 15, unmodified.
//! Each test starts its own server (initdb in a temp dir as the `postgres`
//! user, its own port and socket dir), runs a scripted set of statements
//! on sessions whose backend pids it knows, and checks exactly what the
//! queries capture: every statement once, with its text (cut and flagged
//! above the bound), backend, latency (a `pg_sleep(0.05)` lasts at least
//! 50 ms) and failures with their SQLSTATE. Queries filter on the test's
//! backends, so other servers running the same binary do not count. The
//! server is shut down and its directory removed even when a test fails.
//! Needs root and postgresql-15 (scripts/setup.sh); skipped with a message
//! without the binary.
//!
//! Protocols: `psql` and the `postgres` crate's `simple_query` use the
//! simple query protocol (one Query message per statement string); the
//! crate's `execute`/`prepare`/`query` use the extended one (Parse, Bind,
//! Execute, Sync; a prepared statement is parsed once).

use crate::common::{kernel_lock, require_root, strings, u64s};
use ebql::arrow::array::{Array, AsArray};
use ebql::arrow::record_batch::RecordBatch;
use ebql::{Executor, QueryStats};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::atomic::{AtomicU16, Ordering};

pub(crate) const BIN: &str = "/usr/lib/postgresql/15/bin";

/// uid and gid of the `postgres` user.
fn postgres_ids() -> (u32, u32) {
    let id = |flag: &str| -> u32 {
        let out = Command::new("id")
            .args([flag, "postgres"])
            .output()
            .expect("run id");
        String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse()
            .expect("the postgres user exists")
    };
    (id("-u"), id("-g"))
}

/// A PostgreSQL server of this test: stopped (immediate shutdown) and its
/// directory removed on drop.
pub(crate) struct Server {
    pub(crate) dir: PathBuf,
    pub(crate) port: u16,
    postmaster: Child,
    ids: (u32, u32),
}

/// Servers this test process started (each gets its own directory and port).
static SERVERS: AtomicU16 = AtomicU16::new(0);

impl Server {
    fn start() -> Server {
        let ids = postgres_ids();
        let n = SERVERS.fetch_add(1, Ordering::SeqCst);
        let dir = std::env::temp_dir().join(format!("ebql-pg-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        std::os::unix::fs::chown(&dir, Some(ids.0), Some(ids.1)).unwrap();
        let data = dir.join("data");
        let st = Command::new(format!("{BIN}/initdb"))
            .args(["-D"])
            .arg(&data)
            .args(["-A", "trust", "-U", "postgres"])
            .uid(ids.0)
            .gid(ids.1)
            .stdout(Stdio::null())
            .status()
            .unwrap();
        assert!(st.success(), "initdb failed");
        // A port of our own, unlikely to be taken: from the pid and the server's number.
        let port = 20000 + ((std::process::id() % 4000) * 4) as u16 + n % 4;
        let postmaster = Command::new(format!("{BIN}/postgres"))
            .arg("-D")
            .arg(&data)
            .args(["-p", &port.to_string(), "-k"])
            .arg(&dir)
            .args(["-c", "listen_addresses=127.0.0.1,::1", "-c", "fsync=off"])
            .uid(ids.0)
            .gid(ids.1)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let server = Server {
            dir,
            port,
            postmaster,
            ids,
        };
        for _ in 0..100 {
            let ok = Command::new(format!("{BIN}/pg_isready"))
                .arg("-h")
                .arg(&server.dir)
                .args(["-p", &port.to_string()])
                .stdout(Stdio::null())
                .status()
                .unwrap();
            if ok.success() {
                return server;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        panic!("the test's PostgreSQL did not become ready");
    }
}

impl Server {
    /// A session of the `postgres` crate over the server's Unix socket, and its backend's pid.
    pub(crate) fn client(&self) -> (postgres::Client, u32) {
        self.client_at(postgres::Config::new().host_path(&self.dir))
    }

    /// A session as `config` says (a TCP host: `127.0.0.1`, `::1`, which
    /// the server listens on), and its backend's pid.
    pub(crate) fn client_at(&self, config: &mut postgres::Config) -> (postgres::Client, u32) {
        let mut c = config
            .port(self.port)
            .user("postgres")
            .dbname("postgres")
            .connect(postgres::NoTls)
            .expect("connect");
        let pid: i32 = c
            .query_one("SELECT pg_backend_pid()", &[])
            .expect("backend pid")
            .get(0);
        (c, pid as u32)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        // SIGQUIT: immediate shutdown (backends exit too).
        unsafe { libc::kill(self.postmaster.id() as i32, libc::SIGQUIT) };
        let _ = self.postmaster.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// One psql session (one backend).
struct Session {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    backend: u32,
}

impl Session {
    fn open(server: &Server) -> Session {
        let mut child = Command::new("/usr/bin/psql")
            .arg("-h")
            .arg(&server.dir)
            .args([
                "-p",
                &server.port.to_string(),
                "-U",
                "postgres",
                "-d",
                "postgres",
                "-X",
                "-q",
                "-A",
                "-t",
            ])
            .uid(server.ids.0)
            .gid(server.ids.1)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        let mut s = Session {
            child,
            stdin,
            stdout,
            backend: 0,
        };
        s.backend = s.query("SELECT pg_backend_pid();").parse().unwrap();
        s
    }

    /// Sends `sql` (one statement) and returns its one output line.
    fn query(&mut self, sql: &str) -> String {
        writeln!(self.stdin, "{sql}").unwrap();
        self.stdin.flush().unwrap();
        let mut line = String::new();
        self.stdout.read_line(&mut line).unwrap();
        line.trim().to_string()
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn postgres_query_start_counts_one_backends_statements() {
    if !Path::new(BIN).join("postgres").exists() {
        eprintln!(
            "skipped: {BIN}/postgres is not installed (scripts/setup.sh installs postgresql-15)"
        );
        return;
    }
    require_root();
    let _k = kernel_lock();
    let server = Server::start();
    let mut mine = Session::open(&server);
    let mut other = Session::open(&server);
    const K: u64 = 25;
    let sql = format!("SELECT str(arg0, 64) AS query, COUNT(*) AS n FROM usdt:{BIN}/postgres:postgresql:query__start WHERE pid = {} GROUP BY query", mine.backend);
    let mut ex = Executor::new();
    let mut q = ex
        .execute(&sql)
        .unwrap_or_else(|e| panic!("{}", e.render()));
    let rx = q.take_receiver().unwrap();
    for i in 0..K {
        assert_eq!(mine.query(&format!("SELECT {i} + 1;")), (i + 1).to_string());
        // Another backend's statements are not counted.
        assert_eq!(other.query("SELECT 1;"), "1");
    }
    let stats = q.stop().unwrap();
    let batches: Vec<RecordBatch> = rx.try_iter().collect();
    let rows = ebql::arrow::compute::concat_batches(&batches[0].schema(), &batches).unwrap();
    let mut got: Vec<(String, u64)> = strings(&rows, "query")
        .into_iter()
        .zip(u64s(&rows, "n"))
        .collect();
    got.sort();
    let mut want: Vec<(String, u64)> = (0..K).map(|i| (format!("SELECT {i} + 1;"), 1)).collect();
    want.sort();
    assert_eq!(
        got,
        want,
        "each statement's text, once: {}",
        stats.to_json()
    );
    assert_eq!(stats.events_seen, K, "only the selected backend traps");
}

/// The test's server, or `None` (with a message) when PostgreSQL 15 is not installed.
pub(crate) fn server() -> Option<Server> {
    if !Path::new(BIN).join("postgres").exists() {
        eprintln!(
            "skipped: {BIN}/postgres is not installed (scripts/setup.sh installs postgresql-15)"
        );
        return None;
    }
    require_root();
    Some(Server::start())
}

/// Asserts that a wire capture's decoder lost nothing: no desynchronized
/// framing, no skipped call, no response without its request and, with
/// `every_parse_seen`, no execution of a statement whose Parse (or
/// COM_STMT_PREPARE) it never saw.
pub(crate) fn assert_wire_lost_nothing(stats: &QueryStats, every_parse_seen: bool) {
    let w = stats.wire;
    let unknown = if every_parse_seen {
        w.unknown_prepared
    } else {
        0
    };
    assert_eq!(
        (w.desyncs, w.chunks_skipped, w.responses_unmatched, unknown),
        (0, 0, 0, 0),
        "{}",
        stats.to_json()
    );
}

/// Runs the queries at once around `work`; per query, its rows (one batch)
/// and its stats after stop.
pub(crate) fn capture(sqls: &[String], work: impl FnOnce()) -> Vec<(RecordBatch, QueryStats)> {
    let mut ex = Executor::new();
    let mut running = Vec::new();
    for sql in sqls {
        let mut q = ex.execute(sql).unwrap_or_else(|e| panic!("{}", e.render()));
        let rx = q.take_receiver().unwrap();
        running.push((q, rx));
    }
    work();
    running
        .into_iter()
        .map(|(q, rx)| {
            let schema = q.schema();
            let stats = q.stop().unwrap_or_else(|e| panic!("{}", e.render()));
            let batches: Vec<RecordBatch> = rx.try_iter().collect();
            (
                ebql::arrow::compute::concat_batches(&schema, &batches).unwrap(),
                stats,
            )
        })
        .collect()
}

/// Column `name` as optional i64s (NULL: `None`).
pub(crate) fn opt_i64s(b: &RecordBatch, name: &str) -> Vec<Option<i64>> {
    let col = ebql::arrow::compute::cast(
        b.column_by_name(name)
            .unwrap_or_else(|| panic!("no column {name}")),
        &ebql::arrow::datatypes::DataType::Int64,
    )
    .unwrap();
    let a = col.as_primitive::<ebql::arrow::datatypes::Int64Type>();
    (0..a.len())
        .map(|i| a.is_valid(i).then(|| a.value(i)))
        .collect()
}

/// Column `name` as booleans (no NULLs).
pub(crate) fn bools(b: &RecordBatch, name: &str) -> Vec<bool> {
    b.column_by_name(name)
        .unwrap_or_else(|| panic!("no column {name}"))
        .as_boolean()
        .iter()
        .map(|v| v.expect("not NULL"))
        .collect()
}

/// The SQLSTATE of `errcode(int sqlerrcode)`'s argument: five characters
/// packed six bits each, first in the lowest bits (PostgreSQL's
/// MAKE_SQLSTATE: `PGSIXBIT(ch) = (ch - '0') & 0x3F`).
fn sqlstate_sql(code: &str) -> String {
    (0..5)
        .map(|i| format!("chr(CAST(48 + (({code} >> {}) & 63) AS BIGINT))", 6 * i))
        .collect::<Vec<_>>()
        .join(" || ")
}

/// Every statement of two sessions, each once, with its full text up to
/// 4,096 bytes (a longer one cut to 4,095 and flagged, one of exactly 4,095
/// bytes whole), its backend, and its latency; a statement that fails never
/// reaches `query__done`: the LEFT JOIN makes it a row with a NULL latency,
/// emitted when its session's next statement starts (session 1) or at stop
/// (session 2 ends with it). A second query pairs each statement with the
/// `errcode()` call of its error: the SQLSTATE. USDT probes, simple protocol.
#[test]
fn every_statement_once_with_text_latency_and_failures() {
    let _k = kernel_lock();
    let Some(server) = server() else { return };
    let ((mut c1, b1), (mut c2, b2)) = (server.client(), server.client());
    let usdt = |probe: &str| format!("usdt:{BIN}/postgres:postgresql:{probe}");
    let statements = format!(
        "SELECT s.pid AS backend, s.time AS start_ns, str(s.arg0, 4096) AS query, truncated(str(s.arg0, 4096)) AS cut, x.time - s.time AS latency_ns \
         FROM {} AS s LEFT JOIN {} AS x ON s.tid = x.tid WHERE s.pid IN ({b1}, {b2})",
        usdt("query__start"),
        usdt("query__done")
    );
    let errors = format!(
        "SELECT s.pid AS backend, str(s.arg0, 4096) AS query, {} AS sqlstate \
         FROM {} AS s JOIN uprobe:{BIN}/postgres:errcode AS e ON s.tid = e.tid \
         WHERE s.pid IN ({b1}, {b2}) AND ((e.arg0 & 63) <> 0 OR ((e.arg0 >> 6) & 63) >= 3)",
        sqlstate_sql("e.arg0"),
        usdt("query__start")
    );
    let padded = |len: usize| {
        let head = "SELECT '";
        format!(
            "{head}{}' AS padded",
            "x".repeat(len - head.len() - "' AS padded".len())
        )
    };
    let (long, exact) = (padded(5000), padded(4095));
    // (session, statement, fails)
    let script: Vec<(u32, String, bool)> = vec![
        (b1, "SELECT 1 AS one".into(), false),
        (b2, "SELECT 'second session' AS who".into(), false),
        (b1, long.clone(), false),
        (b1, exact.clone(), false),
        (b1, "SELECT 1/0".into(), true),
        (b1, "SELECT pg_sleep(0.05)".into(), false),
        (b2, "SELECT * FROM no_such_table".into(), true),
        (b1, "SELECT 2 AS two".into(), false),
    ];
    let got = capture(&[statements, errors], || {
        for (backend, sql, fails) in &script {
            let c = if *backend == b1 { &mut c1 } else { &mut c2 };
            assert_eq!(c.simple_query(sql).is_err(), *fails, "{sql}");
        }
    });
    let (rows, stats) = &got[0];
    let (backends, texts, cut, latency) = (
        u64s(rows, "backend"),
        strings(rows, "query"),
        bools(rows, "cut"),
        opt_i64s(rows, "latency_ns"),
    );
    let starts = u64s(rows, "start_ns");
    let mut order: Vec<usize> = (0..rows.num_rows()).collect();
    order.sort_by_key(|&i| starts[i]);
    // Each backend's statements, in the order it started them: exactly the script.
    for b in [b1, b2] {
        let captured: Vec<(String, bool, bool)> = order
            .iter()
            .filter(|&&i| backends[i] == b as u64)
            .map(|&i| (texts[i].clone(), cut[i], latency[i].is_none()))
            .collect();
        let want: Vec<(String, bool, bool)> = script
            .iter()
            .filter(|(s, ..)| *s == b)
            .map(|(_, sql, fails)| (sql.chars().take(4095).collect(), sql.len() > 4095, *fails))
            .collect();
        assert_eq!(
            captured,
            want,
            "backend {b}: (text, cut, failed) of each statement, once, in order; {}",
            stats.to_json()
        );
    }
    for (i, t) in texts.iter().enumerate() {
        match latency[i] {
            Some(ns) if t == "SELECT pg_sleep(0.05)" => {
                assert!(ns >= 50_000_000, "pg_sleep(0.05) took {ns} ns")
            }
            Some(ns) => assert!(ns > 0, "{t}: {ns}"),
            None => {}
        }
    }
    assert_eq!(
        long[..4095],
        texts[order
            .iter()
            .position(|&i| cut[i])
            .map(|p| order[p])
            .unwrap()]
    );
    // Session 1's failed statement was replaced by its next start; session 2's was left at stop.
    assert_eq!(
        (
            stats.pair_starts_overwritten,
            stats.pair_starts_left,
            stats.pair_ends_without_start
        ),
        (1, 1, 0),
        "{}",
        stats.to_json()
    );
    assert_eq!(stats.events_dropped(), 0);

    let (rows, stats) = &got[1];
    let mut failures: Vec<(u64, String, String)> = u64s(rows, "backend")
        .into_iter()
        .zip(strings(rows, "query"))
        .zip(strings(rows, "sqlstate"))
        .map(|((b, q), s)| (b, q, s))
        .collect();
    failures.sort();
    let mut want = vec![
        (b1 as u64, "SELECT 1/0".to_string(), "22012".to_string()),
        (
            b2 as u64,
            "SELECT * FROM no_such_table".to_string(),
            "42P01".to_string(),
        ),
    ];
    want.sort();
    assert_eq!(
        failures,
        want,
        "division_by_zero and undefined_table, with their statements; {}",
        stats.to_json()
    );
}

/// Latency per statement text per second (p50, p99: the quantile sketch,
/// in the kernel, keyed by the start's string) and the slowest statements
/// (streamed, ordered in user space at stop), on one session's known mix.
#[test]
fn latency_percentiles_per_statement_and_the_slowest_statements() {
    let _k = kernel_lock();
    let Some(server) = server() else { return };
    let (mut c, b) = server.client();
    let pair = format!("FROM usdt:{BIN}/postgres:postgresql:query__start AS s JOIN usdt:{BIN}/postgres:postgresql:query__done AS x ON s.tid = x.tid WHERE s.pid = {b}");
    let per_text = format!(
        "SELECT str(s.arg0, 128) AS query, COUNT(*) AS n, QUANTILE(x.time - s.time, 0.5) AS p50, QUANTILE(x.time - s.time, 0.99) AS p99 {pair} \
         GROUP BY str(s.arg0, 128) WINDOW(time, 1000, 1000)"
    );
    let compiled = Executor::new()
        .compile(&per_text)
        .unwrap_or_else(|e| panic!("{}", e.render()));
    assert!(
        matches!(
            compiled.split.kernel.output,
            ebql_compiler::split::KernelOutput::Groups(_)
        ),
        "grouped in the kernel by the statement text"
    );
    let slowest = format!("SELECT str(s.arg0, 2048) AS query, x.time - s.time AS latency_ns {pair} ORDER BY latency_ns DESC LIMIT 3");
    let got = capture(&[per_text, slowest], || {
        for i in 0..20 {
            if i % 2 == 0 {
                c.simple_query("SELECT pg_sleep(0.01)").unwrap();
            }
            c.simple_query("SELECT 1").unwrap();
        }
        c.simple_query("SELECT pg_sleep(0.03)").unwrap();
        c.simple_query("SELECT pg_sleep(0.02)").unwrap();
    });
    let (rows, stats) = &got[0];
    let (texts, n, p50, p99) = (
        strings(rows, "query"),
        u64s(rows, "n"),
        u64s(rows, "p50"),
        u64s(rows, "p99"),
    );
    let mut per: std::collections::BTreeMap<&str, u64> = Default::default();
    for i in 0..rows.num_rows() {
        *per.entry(texts[i].as_str()).or_default() += n[i];
        // Nearest-rank quantiles within 2^-7 of the true value; a sleep of d lasts at least d.
        let floor = match texts[i].as_str() {
            "SELECT pg_sleep(0.01)" => 10_000_000,
            "SELECT pg_sleep(0.02)" => 20_000_000,
            "SELECT pg_sleep(0.03)" => 30_000_000,
            _ => 0,
        } * 127
            / 128;
        assert!(
            p50[i] >= floor && p99[i] >= p50[i],
            "{}: p50 {} p99 {}",
            texts[i],
            p50[i],
            p99[i]
        );
    }
    let want: std::collections::BTreeMap<&str, u64> = [
        ("SELECT 1", 20),
        ("SELECT pg_sleep(0.01)", 10),
        ("SELECT pg_sleep(0.02)", 1),
        ("SELECT pg_sleep(0.03)", 1),
    ]
    .into_iter()
    .collect();
    assert_eq!(
        per,
        want,
        "every statement once, over the windows; {}",
        stats.to_json()
    );

    let (rows, _) = &got[1];
    assert_eq!(
        strings(rows, "query"),
        [
            "SELECT pg_sleep(0.03)",
            "SELECT pg_sleep(0.02)",
            "SELECT pg_sleep(0.01)"
        ]
    );
    let ns = u64s(rows, "latency_ns");
    assert!(
        ns[0] >= 30_000_000
            && ns[1] >= 20_000_000
            && ns[2] >= 10_000_000
            && ns[0] >= ns[1]
            && ns[1] >= ns[2],
        "{ns:?}"
    );
}

/// Without USDT: the statement text at `pg_parse_query(const char *)` and
/// the end at `ReadyForQuery`, paired on the thread. Measured semantics:
/// a simple Query message is one parse and one ReadyForQuery (a failing
/// statement too: ReadyForQuery follows the error); in the extended
/// protocol a Parse message is one parse, and every Sync one
/// ReadyForQuery, so the pair spans from the Parse to the next Sync (the
/// `postgres` crate syncs after Parse+Describe, then after Bind+Execute,
/// then after Close: one pair and two ends without a start per
/// `execute`), and a prepared statement is parsed once however often it is
/// executed. USDT `query__start` fires only for simple Query messages
/// (`exec_simple_query`; PostgreSQL 15 has no probe on the extended path).
#[test]
fn parse_to_ready_for_query_without_usdt_simple_and_extended_protocols() {
    let _k = kernel_lock();
    let Some(server) = server() else { return };
    let (mut c, b) = server.client();
    let up = |f: &str| format!("uprobe:{BIN}/postgres:{f}");
    let paired = format!(
        "SELECT str(s.arg0, 256) AS query, COUNT(*) AS n, MIN(x.time - s.time) > 0 AS positive FROM {} AS s JOIN {} AS x ON s.tid = x.tid WHERE s.pid = {b} GROUP BY str(s.arg0, 256)",
        up("pg_parse_query"),
        up("ReadyForQuery")
    );
    let count = |event: String| format!("SELECT COUNT(*) AS n FROM {event} WHERE pid = {b}");
    let usdt = format!("SELECT str(arg0, 256) AS query, COUNT(*) AS n FROM usdt:{BIN}/postgres:postgresql:query__start WHERE pid = {b} GROUP BY str(arg0, 256)");
    let got = capture(
        &[
            paired,
            count(up("pg_parse_query")),
            count(up("ReadyForQuery")),
            usdt,
        ],
        || {
            for _ in 0..3 {
                c.simple_query("SELECT 1 AS one").unwrap();
            }
            assert!(c.simple_query("SELECT 1/0").is_err());
            for i in 0..4 {
                c.execute("SELECT $1::int4 + 1", &[&i]).unwrap();
            }
            let st = c.prepare("SELECT $1::int4 * 2").unwrap();
            for i in 0..5 {
                assert_eq!(c.query_one(&st, &[&i]).unwrap().get::<_, i32>(0), 2 * i);
            }
        },
    );
    let per = |rows: &RecordBatch| -> std::collections::BTreeMap<String, u64> {
        strings(rows, "query")
            .into_iter()
            .zip(u64s(rows, "n"))
            .collect()
    };
    let (rows, stats) = &got[0];
    assert!(bools(rows, "positive").iter().all(|&p| p));
    let want: std::collections::BTreeMap<String, u64> = [
        ("SELECT 1 AS one", 3),
        ("SELECT 1/0", 1),
        ("SELECT $1::int4 + 1", 4),
        ("SELECT $1::int4 * 2", 1),
    ]
    .into_iter()
    .map(|(q, n)| (q.to_string(), n))
    .collect();
    assert_eq!(per(rows), want, "{}", stats.to_json());
    let (parses, readies) = (u64s(&got[1].0, "n")[0], u64s(&got[2].0, "n")[0]);
    assert_eq!(
        parses, 9,
        "one parse per simple Query and per Parse message"
    );
    // Every parse is paired; the other ReadyForQuery calls (extended syncs without a Parse) are counted.
    assert_eq!(
        (
            stats.pair_starts_overwritten,
            stats.pair_starts_left,
            stats.pair_ends_without_start
        ),
        (0, 0, readies - parses),
        "{}",
        stats.to_json()
    );
    assert!(readies > parses);
    let want: std::collections::BTreeMap<String, u64> = [("SELECT 1 AS one", 3), ("SELECT 1/0", 1)]
        .into_iter()
        .map(|(q, n)| (q.to_string(), n))
        .collect();
    assert_eq!(
        per(&got[3].0),
        want,
        "query__start sees the simple protocol only"
    );
}

/// Behind pointers (PostgreSQL 15, x86-64 layouts; `u64_at(p)` reads the
/// backend's memory): the rows a statement processed are
/// `QueryCompletion.nprocessed` (byte 8) of `EndCommand(const
/// QueryCompletion *qc, …)`; every execution of the extended protocol runs
/// `PortalRun(Portal portal, …)`, whose `portal->sourceText` (byte 56 of
/// `PortalData`) is the statement text: entry to return is its execution
/// (not its parse), also for a prepared statement executed again, and a
/// statement that fails while executing never returns (LEFT JOIN: a row
/// with NULL latency; one that fails at Parse or Bind never runs it).
#[test]
fn rows_processed_and_every_execution_of_the_extended_protocol() {
    let _k = kernel_lock();
    let Some(server) = server() else { return };
    let (mut c, b) = server.client();
    let up = |f: &str| format!("uprobe:{BIN}/postgres:{f}");
    let rows = format!(
        "SELECT str(s.arg0, 256) AS query, u64_at(e.arg0 + 8) AS nrows FROM usdt:{BIN}/postgres:postgresql:query__start AS s JOIN {} AS e ON s.tid = e.tid WHERE s.pid = {b}",
        up("EndCommand")
    );
    let executions = format!(
        "SELECT str(u64_at(s.arg0 + 56), 256) AS query, x.time - s.time AS latency_ns FROM {} AS s LEFT JOIN uretprobe:{BIN}/postgres:PortalRun AS x ON s.tid = x.tid WHERE s.pid = {b}",
        up("PortalRun")
    );
    let got = capture(&[rows, executions], || {
        for sql in [
            "CREATE TABLE t (a int)",
            "INSERT INTO t SELECT generate_series(1, 3)",
            "UPDATE t SET a = a + 10 WHERE a < 3",
            "SELECT * FROM t",
            "DELETE FROM t",
        ] {
            c.simple_query(sql).unwrap();
        }
        for i in 0..2 {
            c.execute("SELECT $1::int4 + 1", &[&i]).unwrap();
        }
        let st = c.prepare("SELECT $1::int4 * 2").unwrap();
        for i in 0..3 {
            c.query_one(&st, &[&i]).unwrap();
        }
        // Fails while executing (a constant 1 / $1 would fail at Bind, when a custom plan folds it: before PortalRun).
        assert!(c
            .execute(
                "SELECT 1 / (g - $1::int4) FROM generate_series(1, 1) g",
                &[&1i32]
            )
            .is_err());
        c.simple_query("SELECT pg_sleep(0.05)").unwrap();
    });
    let (r, stats) = &got[0];
    let got_rows: Vec<(String, u64)> = strings(r, "query")
        .into_iter()
        .zip(u64s(r, "nrows"))
        .collect();
    let want: Vec<(String, u64)> = [
        ("CREATE TABLE t (a int)", 0),
        ("INSERT INTO t SELECT generate_series(1, 3)", 3),
        ("UPDATE t SET a = a + 10 WHERE a < 3", 2),
        ("SELECT * FROM t", 3),
        ("DELETE FROM t", 3),
        ("SELECT pg_sleep(0.05)", 1),
    ]
    .into_iter()
    .map(|(q, n)| (q.to_string(), n))
    .collect();
    assert_eq!(got_rows, want, "{}", stats.to_json());

    let (r, stats) = &got[1];
    let (texts, latency) = (strings(r, "query"), opt_i64s(r, "latency_ns"));
    let mut per: std::collections::BTreeMap<(String, bool), u64> = Default::default();
    for (t, l) in texts.iter().zip(&latency) {
        *per.entry((t.clone(), l.is_some())).or_default() += 1;
        if t == "SELECT pg_sleep(0.05)" {
            assert!(l.is_some_and(|ns| ns >= 50_000_000), "{l:?}");
        }
    }
    let want: std::collections::BTreeMap<(String, bool), u64> = [
        ("CREATE TABLE t (a int)", 1),
        ("INSERT INTO t SELECT generate_series(1, 3)", 1),
        ("UPDATE t SET a = a + 10 WHERE a < 3", 1),
        ("SELECT * FROM t", 1),
        ("DELETE FROM t", 1),
        ("SELECT $1::int4 + 1", 2),
        ("SELECT $1::int4 * 2", 3),
        ("SELECT pg_sleep(0.05)", 1),
    ]
    .into_iter()
    .map(|(q, n)| ((q.to_string(), true), n))
    .chain([(
        (
            "SELECT 1 / (g - $1::int4) FROM generate_series(1, 1) g".to_string(),
            false,
        ),
        1,
    )])
    .collect();
    assert_eq!(
        per,
        want,
        "(text, returned) of every execution; {}",
        stats.to_json()
    );
    assert_eq!(
        (
            stats.pair_starts_overwritten,
            stats.pair_starts_left,
            stats.pair_ends_without_start
        ),
        (1, 0, 0),
        "{}",
        stats.to_json()
    );
}
