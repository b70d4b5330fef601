//! Shared test harness: a scripted workload process of ours and helpers to
//! read record batches. Kernel tests hold [`kernel_lock`] so that only one
//! probe of this test binary is attached at a time.

#![allow(dead_code)]

use ebql::arrow::array::{Array, AsArray};
use ebql::arrow::compute::cast;
use ebql::arrow::datatypes::{DataType, Float64Type, Int64Type, UInt64Type};
use ebql::arrow::record_batch::RecordBatch;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::{Mutex, MutexGuard};

static KERNEL: Mutex<()> = Mutex::new(());

/// Serializes tests that load BPF programs.
pub fn kernel_lock() -> MutexGuard<'static, ()> {
    KERNEL.lock().unwrap_or_else(|e| e.into_inner())
}

/// Fails loudly, with the reason, when the kernel tests cannot run here.
pub fn require_root() {
    // SAFETY: geteuid has no preconditions.
    let euid = unsafe { libc::geteuid() };
    assert_eq!(
        euid, 0,
        "kernel tests load BPF programs and must run as root (CI runs them as root)"
    );
}

/// `ebql workload script`: executes exactly the pread64 calls we ask for.
pub struct Workload {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    pub pid: u32,
}

impl Workload {
    pub fn start() -> Workload {
        let mut child = Command::new(env!("CARGO_BIN_EXE_ebql"))
            .args(["workload", "script"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start workload");
        let stdin = child.stdin.take().unwrap();
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        stdout.read_line(&mut line).unwrap();
        let pid = line
            .trim()
            .strip_prefix("ready ")
            .expect("ready line")
            .parse()
            .unwrap();
        Workload {
            child,
            stdin,
            stdout,
            pid,
        }
    }

    /// Sends one script command and returns its answer line.
    pub fn cmd(&mut self, line: &str) -> String {
        writeln!(self.stdin, "{line}").unwrap();
        self.stdin.flush().unwrap();
        let mut answer = String::new();
        self.stdout.read_line(&mut answer).unwrap();
        answer.trim().to_string()
    }

    /// A fresh page-cached file; returns its fd in the workload.
    pub fn file(&mut self) -> u64 {
        let a = self.cmd("tmpfile 65536");
        a.strip_prefix("fd ")
            .unwrap_or_else(|| panic!("tmpfile: {a}"))
            .parse()
            .unwrap()
    }

    /// A fresh page-cached file at descriptor `fd` (e.g. above the 1024 an
    /// array group table's dense range holds).
    #[allow(dead_code)]
    pub fn file_at(&mut self, fd: u64) -> u64 {
        let a = self.cmd(&format!("tmpfile 65536 {fd}"));
        assert_eq!(a, format!("fd {fd}"), "tmpfile at {fd}");
        fd
    }

    /// Sleeps in the workload (at least one context switch away from it).
    pub fn sleep_ms(&mut self, ms: u64) {
        assert_eq!(self.cmd(&format!("pause {ms}")), "ok pause");
    }

    /// Exactly `count` pread64 calls on an fd that is not open: each fails
    /// with EBADF (sys_exit_pread64 sees ret = -9).
    pub fn pread_bad_fd(&mut self, fd: u64, size: u64, count: u64) {
        let a = self.cmd(&format!("pread {fd} {size} {count}"));
        assert!(
            a.starts_with("err pread") && a.contains(&format!("({count} of {count} calls failed)")),
            "{a}"
        );
    }

    /// Exactly `count` clock_nanosleep calls of `ns` nanoseconds each.
    pub fn nanosleep(&mut self, ns: u64, count: u64) {
        assert_eq!(
            self.cmd(&format!("nanosleep {ns} {count}")),
            format!("ok {count}")
        );
    }

    /// A thread of the workload that is inside one clock_nanosleep of `ms` when this returns.
    pub fn sleeper(&mut self, ms: u64) {
        let a = self.cmd(&format!("sleeper {ms}"));
        assert!(a.starts_with("ok sleeper "), "{a}");
    }

    /// Waits until every sleeper thread has returned from its sleep.
    pub fn join_sleepers(&mut self) {
        let a = self.cmd("join");
        assert!(a.starts_with("ok join "), "{a}");
    }

    /// `reps` rounds of 1-byte pread64 calls at offsets `first..first + n`: `n` distinct `pos` values.
    pub fn preadpos(&mut self, fd: u64, first: u64, n: u64, reps: u64) {
        let a = self.cmd(&format!("preadpos {fd} {first} {n} {reps}"));
        assert_eq!(a, format!("ok {}", n * reps));
    }

    /// Runs `ebql_workload_spin(iterations)` in a thread named `ebql_spin`; returns its tid.
    pub fn spin(&mut self, iterations: u64) -> u32 {
        let a = self.cmd(&format!("spin {iterations}"));
        a.strip_prefix("ok spin ")
            .unwrap_or_else(|| panic!("spin: {a}"))
            .parse()
            .unwrap()
    }

    /// Exactly `count` pread64 calls of `size` bytes on `fd`.
    pub fn pread(&mut self, fd: u64, size: u64, count: u64) {
        let a = self.cmd(&format!("pread {fd} {size} {count}"));
        assert_eq!(a, format!("ok {count}"));
    }
}

impl Drop for Workload {
    fn drop(&mut self) {
        let _ = writeln!(self.stdin, "exit");
        let _ = self.child.wait();
    }
}

/// Column `name` as u64 values (cast from any integer type).
/// Runs an unwindowed query around `work` and returns its single result batch.
pub fn run_once(sql: &str, work: impl FnOnce()) -> RecordBatch {
    let mut ex = ebql::Executor::new();
    let mut q = ex.execute(sql).unwrap_or_else(|e| panic!("{}", e.render()));
    let rx = q.take_receiver().unwrap();
    work();
    q.stop().unwrap_or_else(|e| panic!("{}", e.render()));
    let batches: Vec<RecordBatch> = rx.try_iter().collect();
    let schema = batches
        .first()
        .map(|b| b.schema())
        .expect("a result at stop");
    ebql::arrow::compute::concat_batches(&schema, &batches).unwrap()
}

pub fn u64s(b: &RecordBatch, name: &str) -> Vec<u64> {
    let col = b
        .column_by_name(name)
        .unwrap_or_else(|| panic!("no column {name} in {:?}", b.schema()));
    let c = cast(col, &DataType::UInt64).unwrap();
    c.as_primitive::<UInt64Type>().values().to_vec()
}

/// Column `name` as i64 values (cast from any integer type).
pub fn i64s(b: &RecordBatch, name: &str) -> Vec<i64> {
    let col = b
        .column_by_name(name)
        .unwrap_or_else(|| panic!("no column {name} in {:?}", b.schema()));
    let c = cast(col, &DataType::Int64).unwrap();
    c.as_primitive::<Int64Type>().values().to_vec()
}

pub fn f64s(b: &RecordBatch, name: &str) -> Vec<f64> {
    let col = b
        .column_by_name(name)
        .unwrap_or_else(|| panic!("no column {name}"));
    let c = cast(col, &DataType::Float64).unwrap();
    c.as_primitive::<Float64Type>().values().to_vec()
}

pub fn strings(b: &RecordBatch, name: &str) -> Vec<String> {
    let col = b
        .column_by_name(name)
        .unwrap_or_else(|| panic!("no column {name}"));
    let c = cast(col, &DataType::Utf8).unwrap();
    let s = c.as_string::<i32>();
    (0..s.len()).map(|i| s.value(i).to_string()).collect()
}

/// The newest BPF program id on the machine now (0 if none): programs
/// loaded later have greater ids (ids are never reused).
pub fn newest_program_id() -> u32 {
    ebql_runtime::loaded_programs()
        .expect("list BPF programs")
        .last()
        .map_or(0, |(id, _)| *id)
}

/// Names of `ebql_` programs loaded after `newest_program_id()` returned
/// `since`: what this test created and left, unlike a count of all `ebql_`
/// programs, which an earlier test's exiting process may still hold for a moment.
pub fn ebql_programs_loaded_since(since: u32) -> Vec<String> {
    ebql_runtime::loaded_programs()
        .expect("list BPF programs")
        .into_iter()
        .filter(|(id, n)| *id > since && n.starts_with("ebql_"))
        .map(|(_, n)| n)
        .collect()
}

/// A free loopback port (bound then released).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// `GET path` on 127.0.0.1:port; (status, body).
pub fn http_get(port: u16, path: &str) -> std::io::Result<(u16, String)> {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port))?;
    s.set_read_timeout(Some(std::time::Duration::from_secs(10)))?;
    use std::io::Read;
    write!(s, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\n\r\n")?;
    let mut resp = String::new();
    s.read_to_string(&mut resp)?;
    let status = resp
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = resp
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    Ok((status, body))
}

/// `w` calling 64-byte preads on `fd` in batches of 50 on its own thread
/// until `done` is set: the handle gives how many calls it made.
pub fn pread_until(
    mut w: Workload,
    fd: u64,
    done: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> std::thread::JoinHandle<u64> {
    std::thread::spawn(move || {
        let mut calls = 0;
        while !done.load(std::sync::atomic::Ordering::Relaxed) {
            w.pread(fd, 64, 50);
            calls += 50;
        }
        calls
    })
}

/// `ebql serve` (with `--separate-probes` when `separate`) of `queries`,
/// run until it serves its Prometheus endpoint, then stopped with SIGINT
/// (it must exit 0): the `ebql_` programs loaded meanwhile, and its
/// stderr up to then.
pub fn serve_until_serving(queries: &[String], separate: bool) -> (Vec<String>, String) {
    let since = newest_program_id();
    let port = free_port().to_string();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_ebql"));
    cmd.args(["serve", "--prometheus", &format!("127.0.0.1:{port}")]);
    if separate {
        cmd.arg("--separate-probes");
    }
    let mut child = cmd.args(queries).stderr(Stdio::piped()).spawn().unwrap();
    let mut err = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    let mut notes = String::new();
    while !line.contains("serving http") {
        line.clear();
        assert!(
            err.read_line(&mut line).unwrap() > 0,
            "serve exited: {notes}"
        );
        notes.push_str(&line);
    }
    let loaded = ebql_programs_loaded_since(since);
    // SAFETY: signalling our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    assert!(child.wait().unwrap().success());
    (loaded, notes)
}

/// A Python client killed mid-statement: `python3 -c script args…` runs
/// until it prints its first line (returned), is given 300 ms to send the
/// statement that follows (one the server then runs for longer), and is
/// killed and reaped. The wire tests' client that dies while the server
/// runs its statement.
pub fn python_client_killed_after_first_line(script: &str, args: &[String]) -> String {
    let mut client = Command::new("python3")
        .args(["-c", script])
        .args(args)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(client.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(300));
    client.kill().unwrap();
    client.wait().unwrap();
    line
}
