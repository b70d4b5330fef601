//! `mysql.statements` (issue 21): MariaDB statements decoded from the
//! wire at the server's socket system calls, on Debian's MariaDB started by
//! the test (`mariadb.rs`'s server: its own socket and port). The client
//! session connects after the query started, so its handshake is seen.

use crate::common::{python_client_killed_after_first_line, strings, u64s};
use crate::mariadb::{finish, server_with_database};
use crate::postgres::{assert_wire_lost_nothing, bools, capture, opt_i64s};
use std::collections::BTreeMap;

/// Every statement of a `mariadb` client session once, with its rows,
/// its failure (error number and SQLSTATE) and the session's user and
/// database; a 100 KB statement cut and flagged; nothing undecoded.
#[test]
fn every_statement_of_a_session_once_with_rows_and_errors() {
    let Some((_k, server)) = server_with_database() else {
        return;
    };
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
    assert_wire_lost_nothing(stats, false);
}

/// Server-side prepared statements from a real client (MySQL
/// Connector/Python, `cursor(prepared=True)`: COM_STMT_PREPARE once, then
/// COM_STMT_EXECUTE with binary parameters): each execution one row with
/// the statement's text and id; a prepare that fails one row with its
/// error; nothing undecoded.
#[test]
fn prepared_statements_of_a_real_client_are_one_row_per_execution() {
    let Some((_k, server)) = server_with_database() else {
        return;
    };
    const CLIENT: &str = r#"
import sys, mysql.connector
c = mysql.connector.connect(unix_socket=sys.argv[1], user="root", database="ebqltest")
cur = c.cursor(prepared=True)
for i in range(5):
    cur.execute("SELECT ? * 2 AS twice", (i,))
    assert cur.fetchall()[0][0] == 2 * i
try:
    cur.execute("SELECT x FROM nosuch WHERE x = ?", (1,))
    raise SystemExit("the prepare of a missing table succeeded")
except mysql.connector.Error as e:
    assert e.errno == 1146, e
c.close()
"#;
    let sql = format!(
        "SELECT kind, query, statement, rows, error_code, sqlstate FROM mysql.statements WHERE pid = {}",
        server.pid
    );
    let got = capture(&[sql], || {
        let out = std::process::Command::new("python3")
            .args(["-c", CLIENT, &server.socket()])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "the client failed (scripts/setup.sh installs mysql-connector-python): {}",
            String::from_utf8_lossy(&out.stderr)
        );
    });
    let (b, stats) = &got[0];
    let (kind, query) = (
        strings(b, "kind"),
        crate::mariadb::nullable_strings(b, "query"),
    );
    let (name, rows, code) = (
        crate::mariadb::nullable_strings(b, "statement"),
        opt_i64s(b, "rows"),
        opt_i64s(b, "error_code"),
    );
    // (kind, query) → (statement, rows, error_code) of each row.
    type Execution = (Option<String>, Option<i64>, Option<i64>);
    let mut seen: BTreeMap<(String, String), Vec<Execution>> = BTreeMap::new();
    for i in 0..b.num_rows() {
        let q = query[i].clone().unwrap_or_default();
        seen.entry((kind[i].clone(), q))
            .or_default()
            .push((name[i].clone(), rows[i], code[i]));
    }
    let executions = seen
        .get(&("prepared".into(), "SELECT ? * 2 AS twice".into()))
        .unwrap_or_else(|| panic!("no executions: {seen:?}; {}", stats.to_json()));
    assert_eq!(executions.len(), 5, "{seen:?}");
    let id = executions[0].0.clone();
    assert!(id.is_some(), "{executions:?}");
    assert!(
        executions.iter().all(|e| *e == (id.clone(), Some(1), None)),
        "{executions:?}"
    );
    assert_eq!(
        seen.get(&(
            "prepare_failed".into(),
            "SELECT x FROM nosuch WHERE x = ?".into()
        )),
        Some(&vec![(None, None, Some(1146))]),
        "{seen:?}"
    );
    // Whatever else the connector sends at connect is simple statements.
    let not_simple = seen.keys().filter(|(k, _)| k != "simple").count();
    assert_eq!(not_simple, 2, "{seen:?}");
    assert_wire_lost_nothing(stats, true);
}

/// A result set far longer than the capture's prefix (200 rows of 120
/// bytes in one write): one row, decoded from the write's end (the
/// capture's tail), its row count unknown (NULL: the rows were not
/// captured); the statements around it decode as usual.
#[test]
fn a_long_result_set_is_one_row_from_the_end_of_its_response() {
    let Some((_k, server)) = server_with_database() else {
        return;
    };
    let ours: Vec<String> = [
        "SELECT 1",
        "SELECT REPEAT('y', 120) FROM seq_1_to_200",
        "SELECT 2",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let sql = format!(
        "SELECT query, rows, error_code FROM mysql.statements WHERE pid = {}",
        server.pid
    );
    let got = capture(&[sql], || {
        let out = finish(server.session(&ours));
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    });
    let (b, stats) = &got[0];
    let (query, rows) = (strings(b, "query"), opt_i64s(b, "rows"));
    let of = |q: &str| -> Vec<Option<i64>> {
        (0..b.num_rows())
            .filter(|&i| query[i] == q)
            .map(|i| rows[i])
            .collect()
    };
    assert_eq!(
        of("SELECT REPEAT('y', 120) FROM seq_1_to_200"),
        vec![None],
        "{query:?}; {}",
        stats.to_json()
    );
    assert_eq!(of("SELECT 1"), vec![Some(1)]);
    assert_eq!(of("SELECT 2"), vec![Some(1)]);
    assert_wire_lost_nothing(stats, false);
}

/// A client killed while its statement runs: the server's response finds
/// no reader and the server closes the connection's socket (the process
/// lives on). The statement makes no row and counts as unfinished, not
/// lost without a trace (executor/wire/closed.rs); the statement before it
/// has its row.
#[test]
fn a_statement_whose_client_died_counts_as_unfinished() {
    let Some((_k, server)) = server_with_database() else {
        return;
    };
    const CLIENT: &str = r#"
import sys, mysql.connector
c = mysql.connector.connect(unix_socket=sys.argv[1], user="root", database="ebqltest")
cur = c.cursor()
cur.execute("SELECT 'before'")
cur.fetchall()
print("ready", flush=True)
cur.execute("SELECT SLEEP(1)")
"#;
    let sql = format!(
        "SELECT query FROM mysql.statements WHERE pid = {}",
        server.pid
    );
    let got = capture(&[sql], || {
        // Killed during its SLEEP(1): the server writes the response when
        // the sleep ends, and closes.
        let line = python_client_killed_after_first_line(CLIENT, &[server.socket()]);
        assert_eq!(
            line.trim(),
            "ready",
            "scripts/setup.sh installs mysql-connector-python"
        );
        std::thread::sleep(std::time::Duration::from_millis(2500));
    });
    let (b, stats) = &got[0];
    let queries: Vec<String> = crate::mariadb::nullable_strings(b, "query")
        .into_iter()
        .flatten()
        .collect();
    assert!(
        queries.iter().any(|q| q == "SELECT 'before'"),
        "{queries:?}; {}",
        stats.to_json()
    );
    assert!(
        !queries.iter().any(|q| q.contains("SLEEP")),
        "{queries:?}; {}",
        stats.to_json()
    );
    assert_eq!(stats.wire.unfinished, 1, "{}", stats.to_json());
}
