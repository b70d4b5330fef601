//! `mysql.statements` (issue 21): MariaDB statements decoded from the
//! wire at the server's socket system calls, on Debian's MariaDB started by
//! the test (`mariadb.rs`'s server: its own socket and port). The client
//! session connects after the query started, so its handshake is seen.

use crate::common::{kernel_lock, require_root, strings, u64s};
use crate::mariadb::{finish, Server, MARIADBD};
use crate::postgres::{bools, capture, opt_i64s};
use std::collections::BTreeMap;
use std::path::Path;

/// Every statement of a `mariadb` client session once, with its rows,
/// its failure (error number and SQLSTATE) and the session's user and
/// database; a 100 KB statement cut and flagged; nothing undecoded.
#[test]
fn every_statement_of_a_session_once_with_rows_and_errors() {
    if !Path::new(MARIADBD).exists() {
        eprintln!(
            "skipped: {MARIADBD} is not installed (scripts/setup.sh installs mariadb-server)"
        );
        return;
    }
    require_root();
    let _k = kernel_lock();
    let server = Server::start();
    server.create_database();
    let big = format!("SELECT LENGTH('{}') AS n", "y".repeat(100_000));
    let ours: Vec<String> = [
        "SELECT 1",
        "SELECT 1",
        "CREATE TABLE t (x INT)",
        "INSERT INTO t VALUES (1), (2), (3)",
        "SELECT x FROM t",
        "SELECT * FROM nosuch",
        &big,
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let sql = format!("SELECT * FROM mysql.statements WHERE pid = {}", server.pid);
    let got = capture(&[sql], || {
        let out = finish(server.session(&ours));
        assert!(out.status.success() || !out.stderr.is_empty());
    });
    let (b, stats) = &got[0];
    let query = strings(b, "query");
    let rows = opt_i64s(b, "rows");
    let kind = strings(b, "kind");
    let code = opt_i64s(b, "error_code");
    let cut = bools(b, "query_truncated");
    let mut seen: BTreeMap<String, (u64, Option<i64>, Option<i64>, bool)> = BTreeMap::new();
    for i in 0..b.num_rows() {
        let q: String = query[i].chars().take(30).collect();
        assert_eq!(kind[i], "simple", "{q}");
        let e = seen.entry(q).or_insert((0, rows[i], code[i], cut[i]));
        e.0 += 1;
    }
    let want = |q: &str, n: u64, r: Option<i64>, c: Option<i64>, t: bool| {
        (q.chars().take(30).collect::<String>(), (n, r, c, t))
    };
    for (q, v) in [
        want("SELECT 1", 2, Some(1), None, false),
        want("CREATE TABLE t (x INT)", 1, Some(0), None, false),
        want(
            "INSERT INTO t VALUES (1), (2), (3)",
            1,
            Some(3),
            None,
            false,
        ),
        want("SELECT x FROM t", 1, Some(3), None, false),
        want("SELECT * FROM nosuch", 1, None, Some(1146), false),
        want(&big, 1, Some(1), None, true),
    ] {
        assert_eq!(
            seen.get(&q),
            Some(&v),
            "{q}: all rows {seen:?}; stats {}",
            stats.to_json()
        );
    }
    // The client's own statements at connect (`select @@version_comment …`) are rows too; nothing else.
    let others: Vec<&String> = seen
        .keys()
        .filter(|q| !q.to_ascii_lowercase().starts_with("select @@"))
        .collect();
    assert_eq!(others.len(), 6, "{seen:?}");
    let user = strings(b, "user");
    assert!(user.iter().all(|u| u == "root"), "{user:?}");
    let states = strings(b, "sqlstate");
    let failed = (0..b.num_rows()).find(|&i| code[i].is_some()).unwrap();
    assert_eq!(states[failed], "42S02");
    assert!(u64s(b, "latency_ns").iter().all(|&l| l > 0));
    let w = stats.wire;
    assert_eq!(
        (w.desyncs, w.chunks_skipped, w.responses_unmatched),
        (0, 0, 0),
        "{}",
        stats.to_json()
    );
}
