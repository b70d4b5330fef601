//! What a query traces (issue 20, item 1): `-p PID` (one process, every
//! event of the query, a pairing's both sides), `-c CMD` (started stopped
//! before its exec, so its exec is the first thing traced; the query ends
//! with it), `--follow` (the command's own cgroup: its descendants too, in
//! another pid namespace as well) and `--cgroup PATH`, on real processes
//! with exact counts.

use crate::cli::query_around;
use crate::common::{kernel_lock, require_root, Workload};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

const EBQL: &str = env!("CARGO_BIN_EXE_ebql");

/// The JSON rows (`-f json`) in `out`, skipping what the command printed.
fn rows(out: &[u8]) -> Vec<serde_json::Value> {
    String::from_utf8_lossy(out)
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l}: {e}")))
        .collect()
}

/// `ebql query ARGS`, which must end by itself within 60 s.
fn query_to_end(args: &[&str]) -> Output {
    let mut child = Command::new(EBQL)
        .arg("query")
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("ebql query {args:?} did not end with its command");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    child.wait_with_output().unwrap()
}

/// A file the commands open, and the query counting opens of it by command.
fn opened() -> (String, String) {
    let f = format!("/tmp/ebql-target-{}", std::process::id());
    std::fs::write(&f, "ebql target test\n").unwrap();
    let sql = format!(
        "SELECT comm, COUNT(*) AS n FROM tracepoint:syscalls:sys_enter_openat WHERE str(filename) = '{f}' GROUP BY comm"
    );
    (f, sql)
}

fn counts(out: &Output) -> Vec<(String, u64)> {
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    rows(&out.stdout)
        .iter()
        .map(|r| {
            (
                r["comm"].as_str().unwrap().to_string(),
                r["n"].as_u64().unwrap(),
            )
        })
        .collect()
}

#[test]
fn pid_scopes_every_event_of_the_query_to_one_process() {
    require_root();
    let _k = kernel_lock();
    let mut a = Workload::start();
    let mut b = Workload::start();
    let (fa, fb) = (a.file(), b.file());
    let pid = a.pid.to_string();
    let single = "SELECT COUNT(*) AS n FROM tracepoint:syscalls:sys_enter_pread64";
    let paired = "SELECT COUNT(*) AS n FROM tracepoint:syscalls:sys_enter_pread64 AS e \
                  JOIN tracepoint:syscalls:sys_exit_pread64 AS x ON e.tid = x.tid";
    for sql in [single, paired] {
        let (code, out, err) = query_around(
            &["-p", &pid, "-f", "json", "-d", "3", "-e", sql],
            Stdio::piped(),
            || {
                assert_eq!(a.cmd(&format!("pread {fa} 100 7")), "ok 7");
                assert_eq!(b.cmd(&format!("pread {fb} 100 5")), "ok 5");
            },
        );
        assert_eq!(code, Some(0), "{err}");
        let n: Vec<u64> = rows(&out)
            .iter()
            .map(|r| r["n"].as_u64().unwrap())
            .collect();
        assert_eq!(n, [7], "{sql}\n{err}");
    }
}

#[test]
fn a_command_is_traced_from_its_exec_and_ends_the_query() {
    require_root();
    let _k = kernel_lock();
    let (f, sql) = opened();
    let out = query_to_end(&[
        "-q",
        "-f",
        "json",
        "-c",
        &format!("cat {f} {f} {f}"),
        "-e",
        &sql,
    ]);
    assert_eq!(counts(&out), [("cat".to_string(), 3)]);
    // Attached before the exec: the one successful execve is the first event.
    let out = query_to_end(&[
        "-q",
        "-f",
        "json",
        "-c",
        &format!("cat {f}"),
        "-e",
        "SELECT comm, COUNT(*) AS n FROM tracepoint:syscalls:sys_exit_execve WHERE ret = 0 GROUP BY comm",
    ]);
    assert_eq!(counts(&out), [("cat".to_string(), 1)]);
    let _ = std::fs::remove_file(f);
}

#[test]
fn follow_traces_the_commands_descendants_in_any_pid_namespace() {
    require_root();
    let _k = kernel_lock();
    let (f, sql) = opened();
    // The shell forks each cat (`true` last: nothing is exec'd in its place).
    let sh = format!("sh -c 'cat {f}; cat {f}; cat {f}; true'");
    let alone = query_to_end(&["-q", "-f", "json", "-c", &sh, "-e", &sql]);
    assert_eq!(counts(&alone), [], "the shell itself opens nothing");
    let follow = query_to_end(&["-q", "-f", "json", "--follow", "-c", &sh, "-e", &sql]);
    assert_eq!(counts(&follow), [("cat".to_string(), 3)]);
    // A child in its own pid namespace: pid 1 there, its initial-namespace pid here.
    let unshared = query_to_end(&[
        "-q",
        "-f",
        "json",
        "--follow",
        "-c",
        &format!("unshare --pid --fork cat {f} {f}"),
        "-e",
        &format!(
            "SELECT pid, COUNT(*) AS n FROM tracepoint:syscalls:sys_enter_openat WHERE str(filename) = '{f}' GROUP BY pid"
        ),
    ]);
    assert_eq!(unshared.status.code(), Some(0));
    let r = rows(&unshared.stdout);
    assert_eq!(r.len(), 1, "{r:?}");
    assert_eq!(r[0]["n"].as_u64(), Some(2));
    assert!(
        r[0]["pid"].as_u64().unwrap() > 1,
        "the initial namespace's pid: {r:?}"
    );
    let left: Vec<_> = std::fs::read_dir(cgroup_root())
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with(&format!("ebql-{}-", std::process::id()))
        })
        .collect();
    assert!(left.is_empty(), "the command's cgroups are removed");
    let _ = std::fs::remove_file(f);
}

/// The cgroup v2 hierarchy's mount point.
fn cgroup_root() -> std::path::PathBuf {
    std::fs::read_to_string("/proc/self/mounts")
        .unwrap()
        .lines()
        .find_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.get(2) == Some(&"cgroup2")).then(|| f[1].into())
        })
        .expect("a cgroup2 mount")
}

#[test]
fn cgroup_scopes_the_query_to_the_tasks_of_one_directory() {
    require_root();
    let _k = kernel_lock();
    let dir = cgroup_root().join(format!("ebql-test-{}", std::process::id()));
    std::fs::create_dir(&dir).unwrap();
    let mut a = Workload::start();
    let mut b = Workload::start();
    std::fs::write(dir.join("cgroup.procs"), a.pid.to_string()).unwrap();
    let (fa, fb) = (a.file(), b.file());
    let (code, out, err) = query_around(
        &[
            "--cgroup",
            dir.to_str().unwrap(),
            "-f",
            "json",
            "-d",
            "3",
            "-e",
            "SELECT COUNT(*) AS n FROM tracepoint:syscalls:sys_enter_pread64",
        ],
        Stdio::piped(),
        || {
            assert_eq!(a.cmd(&format!("pread {fa} 100 6")), "ok 6");
            assert_eq!(b.cmd(&format!("pread {fb} 100 4")), "ok 4");
        },
    );
    drop(a);
    std::thread::sleep(Duration::from_millis(100));
    let _ = std::fs::remove_dir(&dir);
    assert_eq!(code, Some(0), "{err}");
    let n: Vec<u64> = rows(&out)
        .iter()
        .map(|r| r["n"].as_u64().unwrap())
        .collect();
    assert_eq!(n, [6], "{err}");
}

#[test]
fn targets_are_refused_where_they_cannot_apply() {
    let run = |args: &[&str]| {
        let out = Command::new(EBQL).arg("query").args(args).output().unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).to_string(),
        )
    };
    let (code, err) = run(&["-p", "1", "-e", "SELECT COUNT(*) FROM tc:lo:ingress"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("has no `pid`") && err.contains("hint:"),
        "{err}"
    );
    let (code, err) = run(&[
        "-c",
        "/no/such/command",
        "-e",
        "SELECT COUNT(*) FROM tracepoint:syscalls:sys_enter_openat",
    ]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("cannot run the command"), "{err}");
    let (code, err) = run(&[
        "--cgroup",
        "/no/such/cgroup",
        "-e",
        "SELECT COUNT(*) FROM tracepoint:syscalls:sys_enter_openat",
    ]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("--cgroup /no/such/cgroup"), "{err}");
    let (code, err) = run(&["-p", "1", "-c", "true", "-e", "SELECT 1"]);
    assert_eq!(code, Some(2), "clap refuses -p with -c: {err}");
}

/// A query refused after its command was started (stopped before its exec)
/// exits 2, and the command ends without running: no process is left
/// waiting at the gate. (The child held the gate's write end itself, so
/// closing eBQL's never ended it, and eBQL waited for it forever.)
#[test]
fn a_refused_query_leaves_no_command_behind() {
    let mark = std::env::temp_dir().join(format!("ebql-unrun-{}", std::process::id()));
    let _ = std::fs::remove_file(&mark);
    let touch = format!("touch {}", mark.display());
    // The processes whose command line names the command: eBQL, and the
    // child while it waits at the gate (it has not exec'd yet).
    let waiting = || -> Vec<i32> {
        std::fs::read_dir("/proc")
            .unwrap()
            .filter_map(|e| {
                let e = e.ok()?;
                let pid = e.file_name().to_str()?.parse().ok()?;
                let c = std::fs::read(e.path().join("cmdline")).ok()?;
                String::from_utf8_lossy(&c).contains(&touch).then_some(pid)
            })
            .collect()
    };
    let mut ebql = Command::new(EBQL)
        .args(["query", "-c", &touch, "-e"])
        .arg("SELECT no_such_column FROM tracepoint:syscalls:sys_enter_openat")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let code = loop {
        if let Some(st) = ebql.try_wait().unwrap() {
            break st.code();
        }
        if Instant::now() > deadline {
            for pid in waiting() {
                // SAFETY: kill(2) on processes this test started.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
            let _ = ebql.wait();
            panic!("ebql did not exit: it waited for its command at the gate");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(code, Some(2));
    let deadline = Instant::now() + Duration::from_secs(5);
    while !waiting().is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(
        waiting(),
        [] as [i32; 0],
        "the command still waits at its gate"
    );
    assert!(!mark.exists(), "the command ran although nothing attached");
}
