//! Capture, persist, replay: PostgreSQL 15 statements captured by `ebql
//! query --format parquet` (USDT `query__start`: start time, backend pid,
//! text), read back from the Parquet files, and re-issued by `ebql replay`
//! into fresh databases, whose contents must equal the original's; failing
//! statements are replayed and reported with their errors.
//!
//! The server runs from a byte-identical copy of Debian's `postgres` binary
//! in the test's temp dir: uprobes belong to a file, so only this server's
//! backends trap into the test's probes, whatever other PostgreSQL servers
//! (other tests) run on the host. Needs root and postgresql-15
//! (scripts/setup.sh); skipped with a message without the binary.


use crate::common::{kernel_lock, require_root};
use ebql::arrow::array::{Array, AsArray, RecordBatch};
use ebql::arrow::compute::{cast, concat_batches};
use ebql::arrow::datatypes::{DataType, UInt64Type};
use std::io::{BufRead, BufReader, Read};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStderr, Command, Stdio};

const EBQL: &str = env!("CARGO_BIN_EXE_ebql");
const BIN: &str = "/usr/lib/postgresql/15/bin";

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

/// A PostgreSQL server of this test, running from its own copy of the
/// binary: stopped (immediate shutdown) and its directory removed on drop.
struct Server {
    dir: PathBuf,
    port: u16,
    postmaster: Child,
}

impl Server {
    fn start() -> Server {
        let ids = postgres_ids();
        let dir = std::env::temp_dir().join(format!("ebql-replay-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        // Not a directory named `bin`: postgres finds its share and lib
        // directories relative to its own path only when that path ends like
        // the installed one, else it uses the installed absolute paths.
        std::fs::create_dir_all(dir.join("server")).unwrap();
        std::fs::copy(format!("{BIN}/postgres"), dir.join("server/postgres")).unwrap();
        for p in [dir.clone(), dir.join("server"), dir.join("server/postgres")] {
            std::os::unix::fs::chown(&p, Some(ids.0), Some(ids.1)).unwrap();
        }
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
        // A port of our own (postgres.rs takes 20000 + pid % 20000).
        let port = 40000 + (std::process::id() % 20000) as u16;
        let postmaster = Command::new(dir.join("server/postgres"))
            .arg("-D")
            .arg(&data)
            .args(["-p", &port.to_string(), "-k"])
            .arg(&dir)
            .args(["-c", "listen_addresses=", "-c", "fsync=off"])
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
        };
        for _ in 0..100 {
            if postgres::Client::connect(&server.dsn("postgres"), postgres::NoTls).is_ok() {
                return server;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        panic!("the test's PostgreSQL did not become ready");
    }

    /// The binary its backends run (the USDT probes' path).
    fn binary(&self) -> PathBuf {
        self.dir.join("server/postgres")
    }

    fn dsn(&self, db: &str) -> String {
        format!(
            "host={} port={} user=postgres dbname={db}",
            self.dir.display(),
            self.port
        )
    }

    /// A session on `db` (one backend) and its backend pid. Connecting sends no statement.
    fn session(&self, db: &str) -> (postgres::Client, u64) {
        let mut c = postgres::Client::connect(&self.dsn(db), postgres::NoTls).unwrap();
        let pid: i32 = c.query_one("SELECT pg_backend_pid()", &[]).unwrap().get(0);
        (c, pid as u64)
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

/// Starts `ebql query ARGS` and returns once its probes are attached.
fn attached(args: &[&str]) -> (Child, BufReader<ChildStderr>) {
    let mut child = Command::new(EBQL)
        .arg("query")
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    stderr.read_line(&mut line).unwrap();
    assert!(line.starts_with("ebql: attached"), "{args:?}: {line}");
    (child, stderr)
}

/// SIGINT, then the exit status (must be 0) and the stats line.
fn stop(mut child: Child, mut stderr: BufReader<ChildStderr>) -> String {
    // SAFETY: signalling our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let status = child.wait().unwrap();
    let mut rest = String::new();
    stderr.read_to_string(&mut rest).unwrap();
    assert_eq!(status.code(), Some(0), "{rest}");
    rest.lines()
        .find(|l| l.starts_with("ebql: stats"))
        .unwrap_or_else(|| panic!("no stats: {rest}"))
        .to_string()
}

/// Every row of the Parquet files in `dir`, in file order.
fn read_parquet_dir(dir: &Path) -> RecordBatch {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "parquet"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no Parquet file in {}", dir.display());
    let mut batches = Vec::new();
    for f in files {
        let r = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(
            std::fs::File::open(&f).unwrap(),
        )
        .unwrap()
        .build()
        .unwrap();
        batches.extend(r.map(|b| b.unwrap()));
    }
    concat_batches(&batches[0].schema(), &batches).unwrap()
}

fn u64_col(b: &RecordBatch, name: &str) -> Vec<u64> {
    let c = cast(
        b.column_by_name(name)
            .unwrap_or_else(|| panic!("no column {name}: {:?}", b.schema())),
        &DataType::UInt64,
    )
    .unwrap();
    let c = c.as_primitive::<UInt64Type>();
    assert_eq!(c.null_count(), 0, "{name} has NULLs");
    c.values().to_vec()
}

fn str_col(b: &RecordBatch, name: &str) -> Vec<String> {
    b.column_by_name(name)
        .unwrap()
        .as_string::<i32>()
        .iter()
        .map(|s| s.unwrap().to_string())
        .collect()
}

/// A database's contents as text, table by table, in a fixed order.
fn contents(server: &Server, db: &str) -> Vec<String> {
    let (mut c, _) = server.session(db);
    let mut out = Vec::new();
    for q in [
        "SELECT name, balance FROM accounts ORDER BY name",
        "SELECT id, who, step, seen FROM log ORDER BY id",
    ] {
        for row in c.simple_query(q).unwrap() {
            if let postgres::SimpleQueryMessage::Row(r) = row {
                out.push(
                    (0..r.len())
                        .map(|i| r.get(i).unwrap_or("NULL").to_string())
                        .collect::<Vec<_>>()
                        .join("|"),
                );
            }
        }
    }
    out
}

/// The statements the test runs, in this order, as (session, text): a
/// setup session creates two tables; sessions `a` (1) and `b` (2) then
/// interleave updates whose result depends on their order within the session
/// (`x * 3 + step`), and inserts into a `serial` log which read the other
/// session's latest value: the log's ids and values depend on the order
/// across sessions too. `a` wraps its inserts in explicit transactions.
///
/// The capture has start times only (no latency), so the replay knows a
/// statement had finished when its session's next statement started: each
/// statement another session depends on is followed by one more statement of
/// its own session before the dependent one (the `SELECT count(*)`s, `BEGIN`).
fn script() -> Vec<(usize, String)> {
    let mut s = vec![
        (0, "CREATE TABLE accounts (name text PRIMARY KEY, balance bigint NOT NULL)".to_string()),
        (0, "CREATE TABLE log (id serial PRIMARY KEY, who text NOT NULL, step int NOT NULL, seen bigint NOT NULL)".to_string()),
        (0, "INSERT INTO accounts VALUES ('a', 1), ('b', 1)".to_string()),
        (0, "SELECT count(*) FROM accounts".to_string()),
    ];
    for step in 1..=12 {
        s.push((
            1,
            format!("UPDATE accounts SET balance = balance * 3 + {step} WHERE name = 'a'"),
        ));
        s.push((
            2,
            format!("UPDATE accounts SET balance = balance * 2 + {step} WHERE name = 'b'"),
        ));
        s.push((1, "BEGIN".to_string()));
        s.push((2, format!("INSERT INTO log (who, step, seen) SELECT 'b', {step}, balance FROM accounts WHERE name = 'a'")));
        s.push((2, "SELECT count(*) FROM log".to_string()));
        s.push((1, format!("INSERT INTO log (who, step, seen) SELECT 'a', {step}, balance FROM accounts WHERE name = 'b'")));
        s.push((1, "COMMIT".to_string()));
    }
    s.push((2, "SELECT pg_sleep(0.05)".to_string()));
    s
}

/// The capture query: every statement's start time, backend and text, at
/// `query__start` (the whole server: no pid filter).
fn capture_query(binary: &Path) -> String {
    format!(
        "SELECT time, pid, str(arg0, 1024) AS query FROM usdt:{}:postgresql:query__start",
        binary.display()
    )
}

/// Runs `ebql replay ARGS`; returns its exit code, stdout and stderr.
fn replay(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(EBQL)
        .arg("replay")
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn captured_statements_replay_into_a_fresh_database_with_the_same_results() {
    if !Path::new(BIN).join("postgres").exists() {
        eprintln!(
            "skipped: {BIN}/postgres is not installed (scripts/setup.sh installs postgresql-15)"
        );
        return;
    }
    require_root();
    let _k = kernel_lock();
    let server = Server::start();
    {
        let (mut admin, _) = server.session("postgres");
        for db in ["original", "replay0", "replay1"] {
            admin
                .simple_query(&format!("CREATE DATABASE {db}"))
                .unwrap();
        }
    }
    // Sessions open before the capture attaches (their pid query is not a statement of the script).
    let mut sessions: Vec<(postgres::Client, u64)> =
        (0..3).map(|_| server.session("original")).collect();
    let backends: Vec<u64> = sessions.iter().map(|s| s.1).collect();
    let out = server.dir.join("capture");
    let (ebql, stderr) = attached(&[
        "--format",
        "parquet",
        "--output",
        out.to_str().unwrap(),
        &capture_query(&server.binary()),
    ]);
    let script = script();
    for (who, sql) in &script {
        sessions[*who]
            .0
            .simple_query(sql)
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }
    drop(sessions);
    let stats = stop(ebql, stderr);

    // The files read back to exactly the statements run, each once, in
    // each backend's order, from the right backend.
    let rows = read_parquet_dir(&out);
    let (time, pid, query) = (
        u64_col(&rows, "time"),
        u64_col(&rows, "pid"),
        str_col(&rows, "query"),
    );
    let mut order: Vec<usize> = (0..rows.num_rows()).collect();
    order.sort_by_key(|&i| time[i]);
    for (i, b) in backends.iter().enumerate() {
        let got: Vec<&str> = order
            .iter()
            .filter(|&&r| pid[r] == *b)
            .map(|&r| query[r].as_str())
            .collect();
        let want: Vec<&str> = script
            .iter()
            .filter(|(w, _)| *w == i)
            .map(|(_, s)| s.as_str())
            .collect();
        assert_eq!(got, want, "session {i} (backend {b}); {stats}");
    }
    assert_eq!(
        rows.num_rows(),
        script.len(),
        "no statement of another backend; {stats}"
    );
    assert!(stats.contains("\"events_dropped\":0"), "{stats}");

    // Replayed as fast as the order allows, and at the capture's pace: the
    // same tables, row for row (the log's serial ids included).
    let want = contents(&server, "original");
    assert_eq!(want.len(), 2 + 24, "the original has its rows");
    for (db, speed) in [("replay0", "0"), ("replay1", "1.0")] {
        let report = server.dir.join(format!("{db}.parquet"));
        let (code, stdout, stderr) = replay(&[
            out.to_str().unwrap(),
            "--dsn",
            &server.dsn(db),
            "--speed",
            speed,
            "--report",
            report.to_str().unwrap(),
        ]);
        assert_eq!(code, 0, "{stdout}{stderr}");
        let n = script.len();
        assert!(
            stdout.contains(&format!(
                "replayed {n} of {n} statements from 3 backends in "
            )),
            "{stdout}"
        );
        assert!(
            stdout.contains(&format!(
                "outcomes: {n} ok, 0 failed as in the capture, 0 failed in the replay only"
            )),
            "{stdout}"
        );
        assert!(
            !stdout.contains("order:"),
            "no order wait timed out: {stdout}"
        );
        assert_eq!(contents(&server, db), want, "{db} (speed {speed})");
        // The report: one row per statement, all replayed, with both latencies.
        let r = read_parquet_file(&report);
        assert_eq!(r.num_rows(), n);
        assert!(str_col(&r, "verdict").iter().all(|v| v == "ok"));
        assert!(u64_col(&r, "replay_latency_ns").iter().all(|&l| l > 0));
        let sleep = str_col(&r, "statement")
            .iter()
            .position(|q| q == "SELECT pg_sleep(0.05)")
            .unwrap();
        assert!(u64_col(&r, "replay_latency_ns")[sleep] >= 50_000_000);
    }
}

fn read_parquet_file(f: &Path) -> RecordBatch {
    let r = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(
        std::fs::File::open(f).unwrap(),
    )
    .unwrap()
    .build()
    .unwrap();
    let batches: Vec<RecordBatch> = r.map(|b| b.unwrap()).collect();
    concat_batches(&batches[0].schema(), &batches).unwrap()
}

/// A capture without latency or failure columns (the raw `query__start`
/// stream of one backend, pid-scoped) holds the statements that failed too:
/// the replay sends them, reports each error with its statement, and exits
/// 3 (the capture did not say they failed). Column names are found or given.
#[test]
fn failing_statements_are_replayed_and_reported_with_their_errors() {
    if !Path::new(BIN).join("postgres").exists() {
        eprintln!(
            "skipped: {BIN}/postgres is not installed (scripts/setup.sh installs postgresql-15)"
        );
        return;
    }
    require_root();
    let _k = kernel_lock();
    let server = Server::start();
    {
        let (mut admin, _) = server.session("postgres");
        for db in ["original", "replay0"] {
            admin
                .simple_query(&format!("CREATE DATABASE {db}"))
                .unwrap();
        }
    }
    let (mut session, backend) = server.session("original");
    let file = server.dir.join("start.parquet");
    let b = server.binary();
    let sql = format!("SELECT time, pid, str(arg0, 1024) AS sql_text FROM usdt:{}:postgresql:query__start WHERE pid = {backend}", b.display());
    let (ebql, stderr) = attached(&[
        "--format",
        "parquet",
        "--output",
        file.to_str().unwrap(),
        &sql,
    ]);
    let script = [
        "CREATE TABLE t (k int PRIMARY KEY)",
        "INSERT INTO t VALUES (1)",
        "INSERT INTO t VALUES (1)",
        "SELECT 1/0",
        "INSERT INTO t VALUES (2)",
    ];
    let failing = [2, 3];
    for (i, q) in script.iter().enumerate() {
        assert_eq!(
            session.simple_query(q).is_err(),
            failing.contains(&i),
            "{q}"
        );
    }
    drop(session);
    stop(ebql, stderr);
    let rows = read_parquet_file(&file);
    assert_eq!(
        str_col(&rows, "sql_text"),
        script,
        "every statement, the failing ones too"
    );

    // The text column has no default name: the error lists the columns.
    let dsn = server.dsn("replay0");
    let (code, _, err) = replay(&[file.to_str().unwrap(), "--dsn", &dsn]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("no statement text column (looked for query, statement; columns: time, pid, sql_text); name it with --text-column"), "{err}");
    // A server that is not there: exit 1 before anything is sent.
    let (code, _, err) = replay(&[
        file.to_str().unwrap(),
        "--dsn",
        "host=/nonexistent port=1 user=postgres",
        "--text-column",
        "sql_text",
    ]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("connecting to the database"), "{err}");

    let (code, out, err) = replay(&[
        file.to_str().unwrap(),
        "--dsn",
        &dsn,
        "--text-column",
        "sql_text",
        "--speed",
        "0",
    ]);
    assert_eq!(
        code, 3,
        "statements failed that the capture did not say failed: {out}{err}"
    );
    assert!(
        out.contains("replayed 5 of 5 statements from 1 backend in "),
        "{out}"
    );
    assert!(
        out.contains("outcomes: 3 ok, 0 failed as in the capture, 2 failed in the replay only"),
        "{out}"
    );
    assert!(
        out.contains("the capture has no failure flag or latency column"),
        "{out}"
    );
    assert!(out.contains("#2 backend") && out.contains("ERROR 23505: duplicate key value violates unique constraint \"t_pkey\" (failed in replay only)\n      INSERT INTO t VALUES (1)\n"), "{out}");
    assert!(
        out.contains("#3 backend")
            && out.contains(
                "ERROR 22012: division by zero (failed in replay only)\n      SELECT 1/0\n"
            ),
        "{out}"
    );
    let (mut check, _) = server.session("replay0");
    let keys: Vec<i32> = check
        .query("SELECT k FROM t ORDER BY k", &[])
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(keys, [1, 2], "the statements after the failures ran");
}

/// The cost modes on one backend's statements (pid-scoped USDT attach, so
/// only that backend traps): `--attach-only` traps on every statement and
/// records nothing; `--format null` records every statement and writes nothing.
#[test]
fn attach_only_traps_without_recording_and_null_format_records_without_writing() {
    if !Path::new(BIN).join("postgres").exists() {
        eprintln!(
            "skipped: {BIN}/postgres is not installed (scripts/setup.sh installs postgresql-15)"
        );
        return;
    }
    require_root();
    let _k = kernel_lock();
    let server = Server::start();
    let (mut session, backend) = server.session("postgres");
    let sql = format!("SELECT time, pid, str(arg0, 1024) AS query FROM usdt:{}:postgresql:query__start WHERE pid = {backend}", server.binary().display());
    const K: u64 = 17;
    let json = |stats: &str| -> serde_json::Value {
        serde_json::from_str(stats.trim_start_matches("ebql: stats ")).unwrap()
    };
    for mode in [
        &["--attach-only", "--bpf-stats", "--format", "json"][..],
        &["--format", "null"][..],
    ] {
        let mut child = Command::new(EBQL)
            .arg("query")
            .args(mode)
            .arg(&sql)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stderr = BufReader::new(child.stderr.take().unwrap());
        let mut line = String::new();
        stderr.read_line(&mut line).unwrap();
        assert!(line.starts_with("ebql: attached"), "{mode:?}: {line}");
        for i in 0..K {
            session.simple_query(&format!("SELECT {i}")).unwrap();
        }
        let mut stdout = child.stdout.take().unwrap();
        let stats = json(&stop(child, stderr));
        let mut out = String::new();
        stdout.read_to_string(&mut out).unwrap();
        assert_eq!(out, "", "{mode:?} writes nothing");
        if mode[0] == "--attach-only" {
            assert_eq!(
                (
                    stats["events_matched"].as_u64(),
                    stats["rows_emitted"].as_u64()
                ),
                (Some(0), Some(0)),
                "nothing recorded: {stats}"
            );
            // The return-at-once program counts nothing itself: bpf_stats counts its runs.
            assert_eq!(
                stats["bpf_run_cnt"].as_u64(),
                Some(K),
                "the probe ran once per statement: {stats}"
            );
        } else {
            assert_eq!(
                (
                    stats["events_matched"].as_u64(),
                    stats["rows_emitted"].as_u64()
                ),
                (Some(K), Some(K)),
                "every statement decoded: {stats}"
            );
        }
    }
}
