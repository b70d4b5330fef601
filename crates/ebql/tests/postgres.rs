//! USDT on a real binary: Debian's PostgreSQL 15 (`postgresql:query__start`
//! and `query__done` carry semaphores). The test starts its own server
//! (initdb in a temp dir as the `postgres` user, its own port and socket
//! dir), opens one psql session, and counts exactly the statements that
//! session's backend runs. The server is shut down and its directory
//! removed even when the test fails. Needs root and postgresql-15
//! (scripts/setup.sh); skipped with a message without the binary.

mod common;

use common::{kernel_lock, require_root, strings, u64s};
use ebql::arrow::record_batch::RecordBatch;
use ebql::Executor;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

const BIN: &str = "/usr/lib/postgresql/15/bin";

/// uid and gid of the `postgres` user.
fn postgres_ids() -> (u32, u32) {
    let id = |flag: &str| -> u32 {
        let out = Command::new("id").args([flag, "postgres"]).output().expect("run id");
        String::from_utf8_lossy(&out.stdout).trim().parse().expect("the postgres user exists")
    };
    (id("-u"), id("-g"))
}

/// A PostgreSQL server of this test: stopped (immediate shutdown) and its
/// directory removed on drop.
struct Server {
    dir: PathBuf,
    port: u16,
    postmaster: Child,
    ids: (u32, u32),
}

impl Server {
    fn start() -> Server {
        let ids = postgres_ids();
        let dir = std::env::temp_dir().join(format!("ebql-pg-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        std::os::unix::fs::chown(&dir, Some(ids.0), Some(ids.1)).unwrap();
        let data = dir.join("data");
        let st = Command::new(format!("{BIN}/initdb")).args(["-D"]).arg(&data).args(["-A", "trust", "-U", "postgres"]).uid(ids.0).gid(ids.1).stdout(Stdio::null()).status().unwrap();
        assert!(st.success(), "initdb failed");
        // A port of our own: 20000 + pid % 20000, unlikely to be taken.
        let port = 20000 + (std::process::id() % 20000) as u16;
        let postmaster = Command::new(format!("{BIN}/postgres"))
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
        let server = Server { dir, port, postmaster, ids };
        for _ in 0..100 {
            let ok = Command::new(format!("{BIN}/pg_isready")).arg("-h").arg(&server.dir).args(["-p", &port.to_string()]).stdout(Stdio::null()).status().unwrap();
            if ok.success() {
                return server;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        panic!("the test's PostgreSQL did not become ready");
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
            .args(["-p", &server.port.to_string(), "-U", "postgres", "-d", "postgres", "-X", "-q", "-A", "-t"])
            .uid(server.ids.0)
            .gid(server.ids.1)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        let mut s = Session { child, stdin, stdout, backend: 0 };
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
        eprintln!("skipped: {BIN}/postgres is not installed (scripts/setup.sh installs postgresql-15)");
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
    let mut q = ex.execute(&sql).unwrap_or_else(|e| panic!("{}", e.render()));
    let rx = q.take_receiver().unwrap();
    for i in 0..K {
        assert_eq!(mine.query(&format!("SELECT {i} + 1;")), (i + 1).to_string());
        // Another backend's statements are not counted.
        assert_eq!(other.query("SELECT 1;"), "1");
    }
    let stats = q.stop().unwrap();
    let batches: Vec<RecordBatch> = rx.try_iter().collect();
    let rows = ebql::arrow::compute::concat_batches(&batches[0].schema(), &batches).unwrap();
    let mut got: Vec<(String, u64)> = strings(&rows, "query").into_iter().zip(u64s(&rows, "n")).collect();
    got.sort();
    let mut want: Vec<(String, u64)> = (0..K).map(|i| (format!("SELECT {i} + 1;"), 1)).collect();
    want.sort();
    assert_eq!(got, want, "each statement's text, once: {}", stats.to_json());
    assert_eq!(stats.events_seen, K, "only the selected backend traps");
}
