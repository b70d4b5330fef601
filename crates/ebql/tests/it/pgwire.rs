//! `postgres.statements` (issue 21): PostgreSQL statements decoded from
//! the wire at the server's socket system calls, on Debian's PostgreSQL 15
//! started by the test (`postgres.rs`'s server: Unix socket, own port).
//! Each session's statements are known exactly; rows are checked per
//! backend pid, so other servers' traffic cannot count.

use crate::common::{kernel_lock, python_client_killed_after_first_line, strings, u64s};
use crate::mariadb::nullable_strings;
use crate::postgres::{assert_wire_lost_nothing, bools, capture, opt_i64s, server};
use ebql::arrow::record_batch::RecordBatch;
use std::collections::BTreeMap;

/// One row per statement: (kind, query's first 40 bytes, tag, rows,
/// sqlstate, cut) → (count, user, database).
type Rows = BTreeMap<(String, String, String, Option<i64>, String, bool), u64>;

/// The rows of `backend`, counted by what they say.
fn of_backend(b: &RecordBatch, backend: u32) -> Rows {
    let pid = u64s(b, "pid");
    let kind = strings(b, "kind");
    let query = nullable_strings(b, "query");
    let tag = nullable_strings(b, "tag");
    let rows = opt_i64s(b, "rows");
    let state = nullable_strings(b, "sqlstate");
    let cut = bools(b, "query_truncated");
    let mut out = Rows::new();
    for i in 0..b.num_rows() {
        if pid[i] != backend as u64 {
            continue;
        }
        let q: String = query[i]
            .clone()
            .unwrap_or_default()
            .chars()
            .take(40)
            .collect();
        let key = (
            kind[i].clone(),
            q,
            tag[i].clone().unwrap_or_default(),
            rows[i],
            state[i].clone().unwrap_or_default(),
            cut[i],
        );
        *out.entry(key).or_default() += 1;
    }
    out
}

fn row(
    kind: &str,
    q: &str,
    tag: &str,
    rows: Option<i64>,
    state: &str,
    cut: bool,
) -> (String, String, String, Option<i64>, String, bool) {
    (kind.into(), q.into(), tag.into(), rows, state.into(), cut)
}

/// Simple queries (one, two in one message, a failing one, one of 100 KB),
/// prepared statements executed five times, a Parse that fails: each
/// statement execution exactly once, with its text, tag, rows and
/// SQLSTATE; the connection's user and database from its startup; every
/// latency positive; nothing left undecoded.
#[test]
fn every_statement_of_both_protocols_once_with_its_outcome() {
    let _k = kernel_lock();
    let Some(server) = server() else { return };
    let sql = "SELECT * FROM postgres.statements".to_string();
    let mut backend = 0;
    let big = format!("SELECT length('{}')", "x".repeat(100_000));
    let got = capture(&[sql], || {
        // Connected inside the capture: its startup (user, database) is seen.
        let (mut c, pid) = server.client();
        backend = pid;
        for _ in 0..3 {
            c.simple_query("SELECT 1").unwrap();
        }
        c.simple_query("SELECT 1; SELECT 2").unwrap();
        assert!(c.simple_query("SELECT * FROM nosuch_table").is_err());
        let st = c.prepare("SELECT $1::int8 * 2").unwrap();
        for i in 0..5i64 {
            let r: i64 = c.query_one(&st, &[&i]).unwrap().get(0);
            assert_eq!(r, 2 * i);
        }
        assert!(c.prepare("SELECT * FROM nosuch_prepared").is_err());
        c.simple_query(&big).unwrap();
    });
    let (b, stats) = &got[0];
    let rows = of_backend(b, backend);
    let mut want = Rows::new();
    want.insert(
        row(
            "prepared",
            "SELECT pg_backend_pid()",
            "SELECT 1",
            Some(1),
            "",
            false,
        ),
        1,
    );
    want.insert(row("simple", "SELECT 1", "SELECT 1", Some(1), "", false), 3);
    want.insert(
        row(
            "simple",
            "SELECT 1; SELECT 2",
            "SELECT 1",
            Some(2),
            "",
            false,
        ),
        1,
    );
    want.insert(
        row(
            "simple",
            "SELECT * FROM nosuch_table",
            "",
            None,
            "42P01",
            false,
        ),
        1,
    );
    want.insert(
        row(
            "prepared",
            "SELECT $1::int8 * 2",
            "SELECT 1",
            Some(1),
            "",
            false,
        ),
        5,
    );
    want.insert(
        row(
            "prepare_failed",
            "SELECT * FROM nosuch_prepared",
            "",
            None,
            "42P01",
            false,
        ),
        1,
    );
    want.insert(
        row(
            "simple",
            "SELECT length('xxxxxxxxxxxxxxxxxxxxxxxxx",
            "SELECT 1",
            Some(1),
            "",
            true,
        ),
        1,
    );
    assert_eq!(rows, want, "stats: {}", stats.to_json());
    let mine: Vec<usize> = (0..b.num_rows())
        .filter(|&i| u64s(b, "pid")[i] == backend as u64)
        .collect();
    let users = nullable_strings(b, "user");
    let dbs = nullable_strings(b, "database");
    let latency = u64s(b, "latency_ns");
    for &i in &mine {
        assert_eq!(users[i].as_deref(), Some("postgres"));
        assert_eq!(dbs[i].as_deref(), Some("postgres"));
        assert!(latency[i] > 0, "row {i}: latency 0");
    }
    let cut = nullable_strings(b, "query");
    let big_row = mine
        .iter()
        .find(|&&i| bools(b, "query_truncated")[i])
        .expect("the 100 KB statement");
    let text = cut[*big_row].as_deref().unwrap();
    // The capture keeps 2,048 bytes of the read: the Query's text after its 5-byte header.
    let kept = ebql_compiler::wire::CAPTURE_BYTES as usize - 5;
    assert!(
        big.starts_with(text) && text.len() == kept,
        "{}",
        text.len()
    );
    assert_wire_lost_nothing(stats, true);
}

/// Clients over TCP, IPv4 and IPv6: their rows carry the address and port
/// PostgreSQL itself reports for the session, read by the capture with
/// each call (the socket tracepoints' `sk`), so a connection closed before
/// its rows are decoded keeps its client; a Unix-domain client's are NULL.
#[test]
fn a_tcp_clients_rows_carry_its_address_and_port() {
    let _k = kernel_lock();
    let Some(server) = server() else { return };
    let sql = "SELECT pid, client_addr, client_port, query FROM postgres.statements".to_string();
    let mut tcp = Vec::new();
    let mut unix_backend = 0;
    let got = capture(&[sql], || {
        for (host, addr) in [("127.0.0.1", "127.0.0.1"), ("::1", "::1")] {
            let (mut c, pid) = server.client_at(postgres::Config::new().host(host));
            let port: i32 = c
                .query_one(
                    "SELECT client_port FROM pg_stat_activity WHERE pid = pg_backend_pid()",
                    &[],
                )
                .unwrap()
                .get(0);
            for _ in 0..3 {
                c.simple_query("SELECT 1").unwrap();
            }
            // Closed at once: its backend exits long before the capture decodes its rows.
            drop(c);
            tcp.push((pid, Some(addr.to_string()), Some(i64::from(port))));
        }
        let (mut unix, pid) = server.client();
        unix_backend = pid;
        unix.simple_query("SELECT 2").unwrap();
    });
    let (b, stats) = &got[0];
    let (pid, addr, ports) = (
        u64s(b, "pid"),
        nullable_strings(b, "client_addr"),
        opt_i64s(b, "client_port"),
    );
    let of = |backend: u32| -> Vec<(Option<String>, Option<i64>)> {
        (0..b.num_rows())
            .filter(|&i| pid[i] == backend as u64)
            .map(|i| (addr[i].clone(), ports[i]))
            .collect()
    };
    for (backend, addr, port) in tcp {
        // pg_backend_pid(), the client_port query and three SELECT 1.
        assert_eq!(
            of(backend),
            vec![(addr, port); 5],
            "stats: {}",
            stats.to_json()
        );
    }
    assert_eq!(
        of(unix_backend),
        vec![(None, None); 2],
        "stats: {}",
        stats.to_json()
    );
}

/// A client in libpq's pipeline mode (psycopg): ten extended-protocol
/// queries sent before the first answer is read, then a failing one and
/// one after it in the same pipeline (skipped by the server after the
/// error, so not executed): each executed statement exactly once, in
/// order, the failure with its SQLSTATE, nothing undecoded.
#[test]
fn pipelined_queries_are_each_one_row() {
    let _k = kernel_lock();
    let Some(server) = server() else { return };
    const CLIENT: &str = r#"
import sys, psycopg
c = psycopg.connect(host=sys.argv[1], port=int(sys.argv[2]), user="postgres", dbname="postgres", autocommit=True)
print(c.info.backend_pid, flush=True)
with c.pipeline() as p:
    cur = [c.execute("SELECT %s::int * 3 AS x", (i,)) for i in range(10)]
    p.sync()
    assert [r.fetchone()[0] for r in cur] == [3 * i for i in range(10)]
try:
    with c.pipeline():
        c.execute("SELECT * FROM nosuch_pipelined")
        c.execute("SELECT 42")
    raise SystemExit("the pipeline did not fail")
except psycopg.errors.UndefinedTable:
    pass
"#;
    let sql = "SELECT * FROM postgres.statements".to_string();
    let mut backend = 0u32;
    let got = capture(&[sql], || {
        let out = std::process::Command::new("python3")
            .args(["-c", CLIENT])
            .arg(&server.dir)
            .arg(server.port.to_string())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "the client failed (scripts/setup.sh installs psycopg): {}",
            String::from_utf8_lossy(&out.stderr)
        );
        backend = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
    });
    let (b, stats) = &got[0];
    let rows = of_backend(b, backend);
    let executions: u64 = rows
        .iter()
        .filter(|(k, _)| k.1 == "SELECT $1::int * 3 AS x" && k.2 == "SELECT 1" && k.3 == Some(1))
        .map(|(_, n)| n)
        .sum();
    assert_eq!(executions, 10, "{rows:?}; stats {}", stats.to_json());
    let failed: Vec<_> = rows.keys().filter(|k| k.4 == "42P01").collect();
    assert_eq!(failed.len(), 1, "{rows:?}");
    assert_eq!(failed[0].1, "SELECT * FROM nosuch_pipelined", "{rows:?}");
    assert!(
        !rows.keys().any(|k| k.1 == "SELECT 42"),
        "the server skipped it after the error: {rows:?}"
    );
    assert_wire_lost_nothing(stats, false);
}

/// A result far longer than the capture's prefix (1,000 rows, ~110 KB in
/// several writes): its row is decoded from the end of the last write
/// (the capture's tail), with its tag and rows; the next statement
/// decodes as usual; nothing is counted as lost.
#[test]
fn a_long_result_is_one_row_from_the_end_of_its_response() {
    let _k = kernel_lock();
    let Some(server) = server() else { return };
    let sql = "SELECT * FROM postgres.statements".to_string();
    let mut backend = 0;
    let got = capture(&[sql], || {
        let (mut c, pid) = server.client();
        backend = pid;
        c.simple_query("SELECT repeat('x', 100) FROM generate_series(1, 1000)")
            .unwrap();
        c.simple_query("SELECT 1").unwrap();
    });
    let (b, stats) = &got[0];
    let rows = of_backend(b, backend);
    let long = row(
        "simple",
        "SELECT repeat('x', 100) FROM generate_se",
        "SELECT 1000",
        Some(1000),
        "",
        false,
    );
    assert_eq!(rows.get(&long), Some(&1), "{rows:?}; {}", stats.to_json());
    let next = row("simple", "SELECT 1", "SELECT 1", Some(1), "", false);
    assert_eq!(rows.get(&next), Some(&1), "{rows:?}");
    assert_wire_lost_nothing(stats, false);
}

/// `COUNT(*)` reads none of the relation's columns: its batches carry
/// only a row count. It counts what `SELECT *` of the same run has as
/// rows, the client's statements among them: its `pg_backend_pid()` at
/// connect, then three.
#[test]
fn count_star_counts_the_statements_without_reading_a_column() {
    let _k = kernel_lock();
    let Some(server) = server() else { return };
    let queries = [
        "SELECT count(*) AS n FROM postgres.statements".to_string(),
        "SELECT * FROM postgres.statements".to_string(),
    ];
    let mut backend = 0;
    let got = capture(&queries, || {
        let (mut c, pid) = server.client();
        backend = pid;
        for q in ["SELECT 1", "SELECT 2", "SELECT 3"] {
            c.simple_query(q).unwrap();
        }
    });
    let (counted, stats) = &got[0];
    let (all, _) = &got[1];
    let n = u64s(counted, "n");
    assert_eq!(n.len(), 1, "one row: {}", stats.to_json());
    assert_eq!(n[0], all.num_rows() as u64);
    let mine: u64 = of_backend(all, backend).values().sum();
    assert_eq!(mine, 1 + 3);
    assert_wire_lost_nothing(stats, false);
}

/// A client killed while its statement runs: the server's response finds
/// no reader, and its backend exits. The statement makes no row (its
/// outcome never reached the wire) and counts as unfinished, not lost
/// without a trace (executor/wire/closed.rs); the statement before it has
/// its row.
#[test]
fn a_statement_whose_client_died_counts_as_unfinished() {
    let _k = kernel_lock();
    let Some(server) = server() else { return };
    const CLIENT: &str = r#"
import sys, psycopg
c = psycopg.connect(host=sys.argv[1], port=int(sys.argv[2]), user="postgres", dbname="postgres", autocommit=True)
c.execute("SELECT 'before'")
print(c.info.backend_pid, flush=True)
c.execute("SELECT pg_sleep(1)")
"#;
    let sql = "SELECT pid, query FROM postgres.statements".to_string();
    let mut backend = 0u32;
    let got = capture(&[sql], || {
        // Killed during its pg_sleep.
        let line = python_client_killed_after_first_line(
            CLIENT,
            &[server.dir.display().to_string(), server.port.to_string()],
        );
        backend = line.trim().parse().expect("the client's backend pid");
        let gone = std::path::PathBuf::from(format!("/proc/{backend}"));
        for _ in 0..100 {
            if !gone.exists() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        assert!(!gone.exists(), "backend {backend} did not exit");
    });
    let (b, stats) = &got[0];
    let (pid, query) = (u64s(b, "pid"), strings(b, "query"));
    let queries: Vec<&str> = (0..b.num_rows())
        .filter(|&i| pid[i] == backend as u64)
        .map(|i| query[i].as_str())
        .collect();
    assert_eq!(queries, ["SELECT 'before'"], "{}", stats.to_json());
    assert_eq!(stats.wire.unfinished, 1, "{}", stats.to_json());
}
