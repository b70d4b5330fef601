//! Statements and their latency from Debian's MariaDB 10.11 through uprobes
//! on its C++ command dispatch, `dispatch_command(enum_server_command, THD*,
//! char*, unsigned int, bool)` (exported in `.dynsym`; found by its
//! demangled name). The test starts its own server (`mariadb-install-db`
//! in a temp dir, `mariadbd --user=root` on its own socket and port), runs
//! two `mariadb` client sessions at once with known statements (a long
//! one, one that fails, a `SLEEP(0.05)`), and checks exactly what each
//! session's server thread ran: text, latency, error, affected rows. Only
//! the test server's pid is traced. The server is killed and its directory
//! removed even when the test fails. Needs root and mariadb-server
//! (scripts/setup.sh); skipped with a message without the binary.

use crate::common::{i64s, kernel_lock, require_root, strings, u64s};
use ebql::arrow::record_batch::RecordBatch;
use ebql::{Executor, QueryStats, RunningQuery};
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::MutexGuard;

pub(crate) const MARIADBD: &str = "/usr/sbin/mariadbd";
/// `Diagnostics_area::set_error_status` with the error's number, message and
/// SQLSTATE: the statement's final error (the one-argument overload calls it).
const SET_ERROR: &str = "Diagnostics_area::set_error_status(unsigned int, char const*, char const*, Sql_user_condition_identity const&, Sql_condition const*)";
/// `str()` buffer of the statement text: the text keeps at most `TEXT - 1` bytes.
const TEXT: usize = 2048;
/// `enum_server_command`: COM_QUIT and COM_QUERY.
const COM_QUIT: u64 = 1;
const COM_QUERY: u64 = 3;

/// Whether mariadbd is installed; says the test is skipped when not.
pub(crate) fn installed() -> bool {
    let here = Path::new(MARIADBD).exists();
    if !here {
        eprintln!(
            "skipped: {MARIADBD} is not installed (scripts/setup.sh installs mariadb-server)"
        );
    }
    here
}

/// The kernel lock, held, and the test's MariaDB with the `ebqltest`
/// database (dropped first: the server stops before the lock is free);
/// `None` without mariadbd (the test is skipped).
pub(crate) fn server_with_database() -> Option<(MutexGuard<'static, ()>, Server)> {
    if !installed() {
        return None;
    }
    require_root();
    let lock = kernel_lock();
    let server = Server::start();
    server.create_database();
    Some((lock, server))
}

/// A MariaDB server of this test: killed and its directory removed on drop.
pub(crate) struct Server {
    dir: PathBuf,
    child: Child,
    pub(crate) pid: u32,
}

impl Server {
    pub(crate) fn start() -> Server {
        let dir = std::env::temp_dir().join(format!("ebql-maria-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let data = dir.join("data");
        let out = Command::new("mariadb-install-db")
            .args([
                "--no-defaults",
                "--user=root",
                "--auth-root-authentication-method=normal",
                "--skip-test-db",
            ])
            .arg(format!("--datadir={}", data.display()))
            .output()
            .expect("run mariadb-install-db");
        assert!(
            out.status.success(),
            "mariadb-install-db failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        // A port of our own (40000 + pid % 20000: not PostgreSQL's test range), on loopback only.
        let port = 40000 + std::process::id() % 20000;
        let child = Command::new(MARIADBD)
            .args([
                "--no-defaults",
                "--user=root",
                "--bind-address=127.0.0.1",
                "--skip-name-resolve",
                "--innodb-buffer-pool-size=16M",
            ])
            .arg(format!("--datadir={}", data.display()))
            .arg(format!("--socket={}", dir.join("sock").display()))
            .arg(format!("--port={port}"))
            .arg(format!("--log-error={}", dir.join("error.log").display()))
            .arg(format!("--pid-file={}", dir.join("mariadbd.pid").display()))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start mariadbd");
        let pid = child.id();
        let server = Server { dir, child, pid };
        for _ in 0..200 {
            let ok = Command::new("mariadb-admin")
                .args(["--no-defaults", "-uroot"])
                .arg(format!("--socket={}", server.socket()))
                .arg("ping")
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .unwrap();
            if ok.success() {
                return server;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        panic!(
            "the test's mariadbd did not become ready: {}",
            std::fs::read_to_string(server.dir.join("error.log")).unwrap_or_default()
        );
    }

    /// Creates the database `ebqltest` the sessions use.
    pub(crate) fn create_database(&self) {
        let setup = finish(
            Command::new("mariadb")
                .args(["--no-defaults", "-uroot", "-e", "CREATE DATABASE ebqltest"])
                .arg(format!("--socket={}", self.socket()))
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap(),
        );
        assert!(
            setup.status.success(),
            "{}",
            String::from_utf8_lossy(&setup.stderr)
        );
    }

    pub(crate) fn socket(&self) -> String {
        self.dir.join("sock").display().to_string()
    }

    /// Starts a `mariadb` client session running `statements` (one per line, in
    /// batch mode: errors are reported and the session goes on).
    pub(crate) fn session(&self, statements: &[String]) -> Child {
        let mut child = Command::new("mariadb")
            .args([
                "--no-defaults",
                "-uroot",
                "--batch",
                "--skip-column-names",
                "--force",
                "--database=ebqltest",
            ])
            .arg(format!("--socket={}", self.socket()))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start the mariadb client");
        let mut stdin = child.stdin.take().unwrap();
        for s in statements {
            writeln!(stdin, "{s};").unwrap();
        }
        child
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Waits for a session and returns its output.
pub(crate) fn finish(session: Child) -> Output {
    session.wait_with_output().unwrap()
}

/// Stops `q` and returns all its rows and its counters.
fn collect(
    q: RunningQuery,
    rx: std::sync::mpsc::Receiver<RecordBatch>,
) -> (RecordBatch, QueryStats) {
    let stats = q.stop().unwrap_or_else(|e| panic!("{}", e.render()));
    let batches: Vec<RecordBatch> = rx.try_iter().collect();
    let schema = batches
        .first()
        .map(|b| b.schema())
        .expect("a result at stop");
    (
        ebql::arrow::compute::concat_batches(&schema, &batches).unwrap(),
        stats,
    )
}

fn start(ex: &mut Executor, sql: &str) -> (RunningQuery, std::sync::mpsc::Receiver<RecordBatch>) {
    let mut q = ex
        .execute(sql)
        .unwrap_or_else(|e| panic!("{sql}\n{}", e.render()));
    let rx = q.take_receiver().unwrap();
    (q, rx)
}

/// Column `name` as optional u64 values (NULL: `None`).
fn nullable_u64s(b: &RecordBatch, name: &str) -> Vec<Option<u64>> {
    use ebql::arrow::array::Array;
    let col = b
        .column_by_name(name)
        .unwrap_or_else(|| panic!("no column {name}"));
    let values = u64s(b, name);
    (0..col.len())
        .map(|i| col.is_valid(i).then_some(values[i]))
        .collect()
}

/// Column `name` as optional strings (NULL: `None`).
pub(crate) fn nullable_strings(b: &RecordBatch, name: &str) -> Vec<Option<String>> {
    use ebql::arrow::array::Array;
    let col = b
        .column_by_name(name)
        .unwrap_or_else(|| panic!("no column {name}"));
    let values = strings(b, name);
    (0..col.len())
        .map(|i| col.is_valid(i).then(|| values[i].clone()))
        .collect()
}

/// Index of the statement (by its capture time in `times`) a pairing's start
/// time belongs to: the two probes on `dispatch_command` fire on the same
/// call, nanoseconds apart, while statements are milliseconds apart.
fn statement_at(times: &[u64], start: u64) -> usize {
    (0..times.len())
        .min_by_key(|&i| times[i].abs_diff(start))
        .unwrap()
}

#[test]
fn mariadb_statements_latency_errors_and_rows_per_session() {
    let Some((_k, server)) = server_with_database() else {
        return;
    };
    let pid = server.pid;

    let long = format!("SELECT '{}' AS long_text", "x".repeat(3000));
    let a: Vec<String> = [
        "SELECT 1 + 1",
        &long,
        "SELECT * FROM nope",
        "SELECT SLEEP(0.05)",
        "SELECT 'a' AS done",
    ]
    .map(String::from)
    .to_vec();
    let b: Vec<String> = [
        "CREATE TABLE b (v INT)",
        "INSERT INTO b VALUES (1), (2), (3)",
        "UPDATE b SET v = v + 10 WHERE v >= 2",
        "SELECT COUNT(*) FROM b",
    ]
    .map(String::from)
    .to_vec();
    const FAILING: usize = 2; // a's "SELECT * FROM nope"
    const SLEEPING: usize = 3; // a's "SELECT SLEEP(0.05)"

    let m = MARIADBD;
    let mut ex = Executor::new();
    // The statements with their text: `packet` (arg2) is `packet_length` (arg3) bytes.
    let stream = start(
        &mut ex,
        &format!("SELECT time, tid, str(arg2, {TEXT}, arg3) AS query, arg3 AS len, arg3 > {} AS cut, truncated(str(arg2, {TEXT}, arg3)) AS flagged FROM uprobe:{m}:dispatch_command WHERE pid = {pid} AND arg0 = {COM_QUERY}", TEXT - 1),
    );
    // Text and latency in one row: the start program stores the text.
    let statements = start(
        &mut ex,
        &format!("SELECT e.tid AS tid, e.time AS start, str(e.arg2, {TEXT}, e.arg3) AS query, truncated(str(e.arg2, {TEXT}, e.arg3)) AS cut, x.time - e.time AS ns FROM uprobe:{m}:dispatch_command AS e JOIN uretprobe:{m}:dispatch_command AS x ON e.tid = x.tid WHERE e.pid = {pid} AND e.arg0 = {COM_QUERY}"),
    );
    // Every statement with the error it ended with, or NULL.
    let outcomes = start(
        &mut ex,
        &format!("SELECT e.tid AS tid, e.time AS start, str(e.arg2, {TEXT}, e.arg3) AS query, x.arg1 AS errno, str(x.arg3, 6) AS sqlstate FROM uprobe:{m}:dispatch_command AS e LEFT JOIN \"uprobe:{m}:{SET_ERROR}\" AS x ON e.tid = x.tid WHERE e.pid = {pid} AND e.arg0 = {COM_QUERY}"),
    );
    // Latency of every command (entry to return on the same thread).
    let latency = start(
        &mut ex,
        &format!("SELECT e.tid AS tid, e.time AS start, e.arg0 AS cmd, x.time - e.time AS ns, x.retval AS ret FROM uprobe:{m}:dispatch_command AS e JOIN uretprobe:{m}:dispatch_command AS x ON e.tid = x.tid WHERE e.pid = {pid}"),
    );
    // The error a statement ends with, on the statement's thread while it runs.
    let errors = start(&mut ex, &format!("SELECT time, tid, arg1 AS errno, str(arg2) AS message, str(arg3, 6) AS sqlstate FROM \"uprobe:{m}:{SET_ERROR}\" WHERE pid = {pid}"));
    // Rows an INSERT/UPDATE/DELETE affected: the OK packet's count.
    let rows = start(
        &mut ex,
        &format!("SELECT e.tid AS tid, e.time AS start, x.arg4 AS affected FROM uprobe:{m}:dispatch_command AS e JOIN uprobe:{m}:Protocol::net_send_ok AS x ON e.tid = x.tid WHERE e.pid = {pid} AND e.arg0 = {COM_QUERY}"),
    );

    // Two sessions at once.
    let (sa, sb) = (server.session(&a), server.session(&b));
    let (oa, ob) = (finish(sa), finish(sb));
    assert_eq!(
        String::from_utf8_lossy(&oa.stdout),
        format!("2\n{}\n0\na\n", "x".repeat(3000)),
        "session a's answers"
    );
    assert!(
        String::from_utf8_lossy(&oa.stderr)
            .contains("ERROR 1146 (42S02) at line 3: Table 'ebqltest.nope' doesn't exist"),
        "{}",
        String::from_utf8_lossy(&oa.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&ob.stdout),
        "3\n",
        "session b's answer"
    );

    let (srows, sstats) = collect(stream.0, stream.1);
    let (lrows, lstats) = collect(latency.0, latency.1);
    let (trows, tstats) = collect(statements.0, statements.1);
    let (orows, ostats) = collect(outcomes.0, outcomes.1);
    let (erows, estats) = collect(errors.0, errors.1);
    let (rrows, rstats) = collect(rows.0, rows.1);

    // Statements per server thread, in order: each session is one thread.
    let mut threads: BTreeMap<u64, Vec<(u64, String, u64, bool)>> = BTreeMap::new();
    let cut = strings(&srows, "cut");
    assert_eq!(
        strings(&srows, "flagged"),
        cut,
        "truncated() says what the length says"
    );
    for (i, (((t, tid), q), len)) in u64s(&srows, "time")
        .into_iter()
        .zip(u64s(&srows, "tid"))
        .zip(strings(&srows, "query"))
        .zip(u64s(&srows, "len"))
        .enumerate()
    {
        threads
            .entry(tid)
            .or_default()
            .push((t, q, len, cut[i] == "true"));
    }
    for v in threads.values_mut() {
        v.sort_by_key(|s| s.0);
    }
    assert_eq!(
        threads.len(),
        2,
        "two sessions, two server threads: {threads:?}"
    );
    let tid_of = |first: &str| {
        *threads
            .iter()
            .find(|(_, v)| v[0].1 == first)
            .unwrap_or_else(|| panic!("no thread ran {first:?}: {threads:?}"))
            .0
    };
    let (ta, tb) = (tid_of(&a[0]), tid_of(&b[0]));
    for (tid, want) in [(ta, &a), (tb, &b)] {
        let got = &threads[&tid];
        let texts: Vec<&str> = got.iter().map(|s| s.1.as_str()).collect();
        let expected: Vec<&str> = want.iter().map(|s| &s[..s.len().min(TEXT - 1)]).collect();
        assert_eq!(
            texts,
            expected,
            "thread {tid}'s statements, the long one cut to {} bytes",
            TEXT - 1
        );
        let lens: Vec<u64> = got.iter().map(|s| s.2).collect();
        assert_eq!(
            lens,
            want.iter().map(|s| s.len() as u64).collect::<Vec<_>>(),
            "packet_length is the whole text's length"
        );
        let cuts: Vec<bool> = got.iter().map(|s| s.3).collect();
        assert_eq!(
            cuts,
            want.iter().map(|s| s.len() > TEXT - 1).collect::<Vec<_>>(),
            "exactly the long statement is flagged as cut"
        );
    }
    assert_eq!(sstats.events_dropped(), 0, "{}", sstats.to_json());
    let times = |tid: u64| threads[&tid].iter().map(|s| s.0).collect::<Vec<u64>>();

    // Latency: every command pairs, COM_QUERY per statement then COM_QUIT.
    let mut lat: BTreeMap<u64, Vec<(u64, u64, u64, i64)>> = BTreeMap::new();
    for (((tid, s), cmd), (ns, ret)) in u64s(&lrows, "tid")
        .into_iter()
        .zip(u64s(&lrows, "start"))
        .zip(u64s(&lrows, "cmd"))
        .zip(u64s(&lrows, "ns").into_iter().zip(i64s(&lrows, "ret")))
    {
        lat.entry(tid).or_default().push((s, cmd, ns, ret));
    }
    for v in lat.values_mut() {
        v.sort();
    }
    assert_eq!(
        lat.keys().copied().collect::<Vec<_>>(),
        threads.keys().copied().collect::<Vec<_>>(),
        "the same two threads"
    );
    for (tid, want) in [(ta, &a), (tb, &b)] {
        let got = &lat[&tid];
        let cmds: Vec<u64> = got.iter().map(|p| p.1).collect();
        let mut expected = vec![COM_QUERY; want.len()];
        expected.push(COM_QUIT);
        assert_eq!(
            cmds, expected,
            "thread {tid}: one pair per statement, then the session's COM_QUIT"
        );
        // dispatch_command returns true only when the connection is to be closed.
        let rets: Vec<i64> = got.iter().map(|p| p.3).collect();
        assert_eq!(
            rets,
            expected
                .iter()
                .map(|&c| i64::from(c == COM_QUIT))
                .collect::<Vec<_>>()
        );
        assert!(got.iter().all(|p| p.2 > 0), "positive latencies: {got:?}");
        for (i, p) in got[..want.len()].iter().enumerate() {
            assert_eq!(
                statement_at(&times(tid), p.0),
                i,
                "the k-th pair is the k-th statement"
            );
        }
    }
    assert!(
        lat[&ta][SLEEPING].2 >= 50_000_000,
        "SELECT SLEEP(0.05) took {} ns",
        lat[&ta][SLEEPING].2
    );
    assert_eq!(
        (
            lstats.pair_starts_overwritten,
            lstats.pair_ends_without_start,
            lstats.pair_starts_left,
            lstats.events_dropped()
        ),
        (0, 0, 0, 0),
        "{}",
        lstats.to_json()
    );

    // Text and latency in one row, per thread in order.
    let mut combined: BTreeMap<u64, Vec<(u64, String, String, u64)>> = BTreeMap::new();
    let tcut = strings(&trows, "cut");
    for (i, ((tid, s), (q, ns))) in u64s(&trows, "tid")
        .into_iter()
        .zip(u64s(&trows, "start"))
        .zip(strings(&trows, "query").into_iter().zip(u64s(&trows, "ns")))
        .enumerate()
    {
        combined
            .entry(tid)
            .or_default()
            .push((s, q, tcut[i].clone(), ns));
    }
    for v in combined.values_mut() {
        v.sort();
    }
    for (tid, want) in [(ta, &a), (tb, &b)] {
        let got: Vec<(&str, bool)> = combined[&tid]
            .iter()
            .map(|r| (r.1.as_str(), r.2 == "true"))
            .collect();
        let expected: Vec<(&str, bool)> = want
            .iter()
            .map(|s| (&s[..s.len().min(TEXT - 1)], s.len() > TEXT - 1))
            .collect();
        assert_eq!(
            got, expected,
            "thread {tid}: each statement's text (and whether it was cut) with its latency"
        );
        assert!(combined[&tid].iter().all(|r| r.3 > 0), "positive latencies");
    }
    let sleep_ns = combined[&ta][SLEEPING].3;
    assert!(
        sleep_ns >= 50_000_000,
        "SELECT SLEEP(0.05) took {sleep_ns} ns (text and latency in one row)"
    );
    // Each session's COM_QUIT returns without a COM_QUERY start.
    assert_eq!(
        (
            tstats.pair_starts_overwritten,
            tstats.pair_ends_without_start,
            tstats.pair_starts_left,
            tstats.events_dropped()
        ),
        (0, 2, 0, 0),
        "{}",
        tstats.to_json()
    );

    // Every statement once, with its error or NULL.
    // Per connection: (statement id, text, errno, SQLSTATE) in order.
    type Outcome = (u64, String, Option<u64>, Option<String>);
    let mut outcome: BTreeMap<u64, Vec<Outcome>> = BTreeMap::new();
    let (errnos, states) = (
        nullable_u64s(&orows, "errno"),
        nullable_strings(&orows, "sqlstate"),
    );
    for (i, ((tid, s), q)) in u64s(&orows, "tid")
        .into_iter()
        .zip(u64s(&orows, "start"))
        .zip(strings(&orows, "query"))
        .enumerate()
    {
        outcome
            .entry(tid)
            .or_default()
            .push((s, q, errnos[i], states[i].clone()));
    }
    for v in outcome.values_mut() {
        v.sort();
    }
    for (tid, want) in [(ta, &a), (tb, &b)] {
        let got: Vec<(&str, Option<u64>, Option<&str>)> = outcome[&tid]
            .iter()
            .map(|r| (r.1.as_str(), r.2, r.3.as_deref()))
            .collect();
        let expected: Vec<(&str, Option<u64>, Option<&str>)> = want
            .iter()
            .enumerate()
            .map(|(i, s)| {
                (
                    &s[..s.len().min(TEXT - 1)],
                    (tid == ta && i == FAILING).then_some(1146),
                    (tid == ta && i == FAILING).then_some("42S02"),
                )
            })
            .collect();
        assert_eq!(
            got, expected,
            "thread {tid}: every statement once, the failing one with its error"
        );
    }
    assert_eq!(ostats.events_dropped(), 0, "{}", ostats.to_json());

    // The one error, on session a's thread while the failing statement ran.
    assert_eq!(erows.num_rows(), 1, "one failed statement");
    assert_eq!(u64s(&erows, "tid"), vec![ta]);
    let at = u64s(&erows, "time")[0];
    assert_eq!(
        times(ta).iter().filter(|&&t| t <= at).count(),
        FAILING + 1,
        "raised after the failing statement began, before the next"
    );
    assert_eq!(u64s(&erows, "errno"), vec![1146]);
    assert_eq!(
        strings(&erows, "message"),
        vec!["Table 'ebqltest.nope' doesn't exist".to_string()]
    );
    assert_eq!(strings(&erows, "sqlstate"), vec!["42S02".to_string()]);
    assert_eq!(estats.events_dropped(), 0, "{}", estats.to_json());
    let statements = (a.len() + b.len()) as u64;

    // Affected rows: session b's CREATE, INSERT and UPDATE answer with an OK
    // packet; SELECTs end their result set with EOF, errors with an error.
    let mut affected: Vec<(u64, usize, u64)> = u64s(&rrows, "tid")
        .into_iter()
        .zip(u64s(&rrows, "start"))
        .zip(u64s(&rrows, "affected"))
        .map(|((tid, s), n)| (tid, statement_at(&times(tid), s), n))
        .collect();
    affected.sort();
    assert_eq!(
        affected,
        vec![(tb, 0, 0), (tb, 1, 3), (tb, 2, 2)],
        "CREATE: 0 rows, INSERT: 3, UPDATE: 2"
    );
    // Each session's login is answered with an OK packet before any command.
    assert_eq!(
        (
            rstats.pair_ends_without_start,
            rstats.pair_starts_left,
            rstats.pair_starts_overwritten
        ),
        (2, 2, statements - 3 - 2),
        "{}",
        rstats.to_json()
    );
}

#[test]
fn dispatch_command_resolves_by_its_demangled_name() {
    if !installed() {
        return;
    }
    use ebql_catalog::elf::Elf;
    let elf = Elf::open(Path::new(MARIADBD)).unwrap();
    let spellings = [
        "dispatch_command",
        "dispatch_command(enum_server_command, THD*, char*, unsigned int, bool)",
        "_Z16dispatch_command19enum_server_commandP3THDPcjb",
    ];
    let found: Vec<u64> = spellings
        .iter()
        .map(|s| {
            elf.function(s)
                .unwrap_or_else(|e| panic!("{s}: {e}"))
                .address
        })
        .collect();
    assert_eq!(
        found,
        vec![found[0]; 3],
        "one function, however it is spelled"
    );
    // An overloaded name lists every candidate, by a name that selects it.
    let e = elf.function("mysql_lock_tables").unwrap_err().to_string();
    assert!(
        e.contains("2 overloads")
            && e.contains("`mysql_lock_tables(THD*, st_mysql_lock*, unsigned int)`")
            && e.contains("`mysql_lock_tables(THD*, TABLE**, unsigned int, unsigned int)`"),
        "{e}"
    );
    // Both destructor variants demangle alike: their stored names tell them apart.
    let e = elf.function("THD::~THD").unwrap_err().to_string();
    assert!(
        e.contains("`_ZN3THDD0Ev` (= THD::~THD())") && e.contains("`_ZN3THDD1Ev` (= THD::~THD())"),
        "{e}"
    );
    // The query's error is positioned at the event name.
    let mut ex = Executor::new();
    let e = ex
        .compile(&format!(
            "SELECT arg0 FROM uprobe:{MARIADBD}:dispatch_comand"
        ))
        .err()
        .unwrap()
        .render();
    assert!(
        e.contains("no function `dispatch_comand`")
            && e.contains("did you mean `dispatch_command`"),
        "{e}"
    );
}
