//! Faults and limits on the real kernel: a killed `ebql` leaves nothing
//! behind, missing privileges and an unmountable tracefs give clear errors,
//! tracefs is mounted when missing, the grace-period fallback keeps windows
//! exact, and two queries on one event do not disturb each other. Every test
//! filters by a workload process of ours and checks exact counts.

use crate::common::*;
use ebql::Executor;
use ebql_runtime::{bpf_object_exists, BpfObject};
use std::io::{BufRead, BufReader, Read};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Child, ChildStderr, Command, Output, Stdio};
use std::sync::mpsc::{channel, Receiver};
use std::time::{Duration, Instant};

const EBQL: &str = env!("CARGO_BIN_EXE_ebql");
const EV: &str = "tracepoint/syscalls/sys_enter_pread64";

/// Capability numbers (include/uapi/linux/capability.h).
const CAP_SYS_ADMIN: u32 = 21;
const CAP_PERFMON: u32 = 38;
const CAP_BPF: u32 = 39;

/// `ebql query --format json SQL` with stdout and stderr piped.
fn query_cmd(sql: &str) -> Command {
    let mut c = Command::new(EBQL);
    c.args(["query", "--format", "json", sql])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    c
}

/// Drops `caps` from the bounding set before exec: root's capabilities after
/// exec are then exactly the bounding set (capabilities(7)), so the child
/// runs as root without them, like `capsh --drop=…`.
fn drop_caps(cmd: &mut Command, caps: &'static [u32]) {
    // SAFETY: the closure only makes async-signal-safe syscalls.
    unsafe {
        cmd.pre_exec(move || {
            for &cap in caps {
                if libc::prctl(libc::PR_CAPBSET_DROP, cap as libc::c_ulong, 0, 0, 0) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
}

/// Runs the child in a private mount namespace without tracefs: both tracefs
/// locations (and debugfs, whose `tracing` directory would automount it) are
/// unmounted there; the spawn fails if /sys/kernel/tracing stays tracefs.
/// The rest of the machine keeps its mounts.
fn without_tracefs(cmd: &mut Command) {
    const TRACEFS_MAGIC: i64 = 0x7472_6163;
    // SAFETY: the closure only makes async-signal-safe syscalls on static strings.
    unsafe {
        cmd.pre_exec(|| {
            let check = |r: libc::c_int| {
                if r == 0 {
                    Ok(())
                } else {
                    Err(std::io::Error::last_os_error())
                }
            };
            check(libc::unshare(libc::CLONE_NEWNS))?;
            check(libc::mount(
                std::ptr::null(),
                c"/".as_ptr(),
                std::ptr::null(),
                libc::MS_REC | libc::MS_PRIVATE,
                std::ptr::null(),
            ))?;
            for path in [
                c"/sys/kernel/debug/tracing",
                c"/sys/kernel/debug",
                c"/sys/kernel/tracing",
            ] {
                // Stacked mounts: unmount until it is not a mount point any more.
                while libc::umount2(path.as_ptr(), libc::MNT_DETACH) == 0 {}
            }
            let mut st: libc::statfs = std::mem::zeroed();
            check(libc::statfs(c"/sys/kernel/tracing".as_ptr(), &mut st))?;
            #[allow(clippy::unnecessary_cast)]
            if st.f_type as i64 == TRACEFS_MAGIC {
                return Err(std::io::Error::other("tracefs still mounted"));
            }
            Ok(())
        });
    }
}

/// A spawned `ebql query` whose stderr lines are forwarded to a channel.
struct Cli {
    child: Child,
    stderr: Receiver<String>,
    seen: Vec<String>,
}

impl Cli {
    fn spawn(mut cmd: Command) -> Cli {
        let mut child = cmd.spawn().expect("spawn ebql");
        let (tx, rx) = channel();
        let err: ChildStderr = child.stderr.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(err).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        Cli {
            child,
            stderr: rx,
            seen: Vec::new(),
        }
    }

    /// Waits for `ebql: attached (program id N)` on stderr; returns N.
    fn attached(&mut self) -> u32 {
        loop {
            let line = self
                .stderr
                .recv_timeout(Duration::from_secs(60))
                .unwrap_or_else(|_| panic!("ebql did not attach; stderr: {:?}", self.seen));
            self.seen.push(line.clone());
            if let Some(rest) = line.strip_prefix("ebql: attached (program id ") {
                return rest.trim_end_matches(')').parse().expect("program id");
            }
        }
    }

    /// SIGTERM (ebql stops, prints its last window and stats), then waits.
    fn stop(self) -> (Output, String) {
        // SAFETY: signalling our own child.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        self.finish()
    }

    /// Waits for the exit; returns the output and the whole stderr.
    fn finish(mut self) -> (Output, String) {
        let mut stdout = Vec::new();
        self.child
            .stdout
            .take()
            .unwrap()
            .read_to_end(&mut stdout)
            .unwrap();
        let status = self.child.wait().unwrap();
        self.seen.extend(self.stderr.iter());
        let stderr = self.seen.join("\n");
        (
            Output {
                status,
                stdout,
                stderr: stderr.clone().into_bytes(),
            },
            stderr,
        )
    }
}

/// A test that fails before stopping its query must not leave it running
/// (a query without `-d` runs until killed, its probe attached): killed
/// here. Harmless after `finish`: the child was reaped, `kill` sends nothing.
impl Drop for Cli {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The JSON rows printed on stdout.
fn json_rows(out: &Output) -> Vec<serde_json::Value> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

/// BPF objects a process holds, from /proc/PID/fdinfo (`prog_id:`, `map_id:`,
/// `link_id:` lines; a link's fdinfo also names its program). Also returns
/// the `map_type:` of every map fd.
fn held_bpf_objects(pid: u32) -> (Vec<(BpfObject, u32)>, Vec<u32>) {
    let mut objects = Vec::new();
    let mut map_types = Vec::new();
    for entry in std::fs::read_dir(format!("/proc/{pid}/fdinfo")).unwrap() {
        let Ok(text) = std::fs::read_to_string(entry.unwrap().path()) else {
            continue;
        };
        for line in text.lines() {
            let Some((key, value)) = line.split_once(':') else {
                continue;
            };
            let kind = match key {
                "prog_id" => BpfObject::Program,
                "map_id" => BpfObject::Map,
                "link_id" => BpfObject::Link,
                "map_type" => {
                    map_types.push(value.trim().parse().unwrap());
                    continue;
                }
                _ => continue,
            };
            let id: u32 = value.trim().parse().unwrap();
            if !objects.contains(&(kind, id)) {
                objects.push((kind, id));
            }
        }
    }
    (objects, map_types)
}

/// `bpftool prog|map|link show id N` succeeds, or None without bpftool.
fn bpftool_shows(kind: BpfObject, id: u32) -> Option<bool> {
    let what = match kind {
        BpfObject::Program => "prog",
        BpfObject::Map => "map",
        BpfObject::Link => "link",
    };
    let out = Command::new("bpftool")
        .args([what, "show", "id", &id.to_string()])
        .output()
        .ok()?;
    Some(out.status.success())
}

/// A `pread-loop` workload on 2 threads, held at its gate until opened.
struct LoadWorkload {
    child: Child,
    lines: std::io::Lines<BufReader<std::process::ChildStdout>>,
    gate: ebql_workload::Gate,
    pid: u32,
}

impl LoadWorkload {
    fn start(seconds: f64) -> LoadWorkload {
        let gate = ebql_workload::Gate::create(
            std::env::temp_dir().join(format!("ebql-faults-gate-{}", std::process::id())),
        )
        .unwrap();
        let mut child = Command::new(EBQL)
            .args([
                "workload",
                "pread-loop",
                "--threads",
                "2",
                "--size",
                "64",
                "--seconds",
                &seconds.to_string(),
                "--gate",
            ])
            .arg(gate.path())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let ready = lines.next().unwrap().unwrap();
        let pid = ready.strip_prefix("ready ").unwrap().parse().unwrap();
        LoadWorkload {
            child,
            lines,
            gate,
            pid,
        }
    }

    /// Opens the gate, waits for the end and returns the workload's own pread64 count.
    fn run(mut self) -> u64 {
        self.gate.open().unwrap();
        let report: Vec<String> = self.lines.by_ref().map_while(Result::ok).collect();
        assert!(self.child.wait().unwrap().success());
        report
            .iter()
            .find_map(|l| {
                l.strip_prefix("total_ops ")
                    .and_then(|r| r.split_whitespace().next())
                    .and_then(|n| n.parse().ok())
            })
            .unwrap_or_else(|| panic!("no total in {report:?}"))
    }
}

#[test]
fn sigkill_mid_query_leaves_no_program_map_or_link() {
    let _k = kernel_lock();
    require_root();
    let mut w = Workload::start();
    let a = w.file();
    let sql = format!(
        "SELECT fd, COUNT(*) AS n FROM {EV} WHERE pid = {} GROUP BY fd WINDOW(time, 200, 200)",
        w.pid
    );
    let mut cli = Cli::spawn(query_cmd(&sql));
    let prog_id = cli.attached();
    w.pread(a, 10, 50); // the probe is live: events are being recorded when it dies
    let (held, _) = held_bpf_objects(cli.child.id());
    let count = |k: BpfObject| held.iter().filter(|(kind, _)| *kind == k).count();
    assert!(held.contains(&(BpfObject::Program, prog_id)), "{held:?}");
    assert!(
        count(BpfObject::Link) >= 1 && count(BpfObject::Map) >= 2,
        "a link and the control and group maps: {held:?}"
    );
    // A short-lived object (a sampler's program, a feature probe) may close
    // at any moment: an object the process holds both before and after its
    // existence check must be live; one dropped in between was transient.
    let mut held = held;
    for _ in 0..3 {
        let live: Vec<bool> = held
            .iter()
            .map(|&(kind, id)| bpf_object_exists(kind, id).unwrap())
            .collect();
        let (still, _) = held_bpf_objects(cli.child.id());
        let dead: Vec<(BpfObject, u32)> = held
            .iter()
            .zip(&live)
            .filter(|(o, &l)| !l && still.contains(o))
            .map(|(o, _)| *o)
            .collect();
        assert!(
            dead.is_empty(),
            "held yet not live before the kill: {dead:?}"
        );
        held.retain(|o| still.contains(o));
    }
    assert!(held.contains(&(BpfObject::Program, prog_id)), "{held:?}");
    for &(kind, id) in &held {
        // The same race: bpftool may list after a transient object closed.
        if bpftool_shows(kind, id) == Some(false) {
            let (still, _) = held_bpf_objects(cli.child.id());
            assert!(
                !still.contains(&(kind, id)),
                "bpftool does not see {kind:?} {id}, held before the kill"
            );
        }
    }

    cli.child.kill().unwrap(); // SIGKILL: no handler, no cleanup code runs
    let (out, stderr) = cli.finish();
    assert_eq!(out.status.signal(), Some(libc::SIGKILL), "{stderr}");
    // The kernel frees the last references from a work queue: allow it a moment.
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut left: Vec<(BpfObject, u32)> = held.clone();
    while !left.is_empty() && Instant::now() < deadline {
        left.retain(|&(kind, id)| bpf_object_exists(kind, id).unwrap());
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        left.is_empty(),
        "still in the kernel after SIGKILL: {left:?}"
    );
    for &(kind, id) in &held {
        assert_ne!(
            bpftool_shows(kind, id),
            Some(true),
            "bpftool still shows {kind:?} {id}"
        );
    }
}

/// Runs a query that must fail before attaching; returns its stderr.
fn failing_query(mut cmd: Command) -> String {
    let out = cmd.output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        !stderr.contains("panicked") && !stderr.contains("attached"),
        "{stderr}"
    );
    assert!(out.stdout.is_empty());
    stderr
}

#[test]
fn missing_capabilities_are_named_with_what_to_do() {
    let _k = kernel_lock();
    require_root();
    let sql = format!("SELECT COUNT(*) FROM {EV} WHERE pid = 1");
    // Without any of them, whichever call comes first is refused.
    let mut cmd = query_cmd(&sql);
    drop_caps(&mut cmd, &[CAP_BPF, CAP_PERFMON, CAP_SYS_ADMIN]);
    let err = failing_query(cmd);
    assert!(err.starts_with("error: "), "{err}");
    assert!(
        err.contains("permission denied (this process lacks CAP_BPF and CAP_PERFMON)"),
        "{err}"
    );
    assert!(
        err.contains(
            "\nhint: eBQL loads and attaches BPF programs, which needs CAP_BPF and CAP_PERFMON"
        ),
        "{err}"
    );
    assert!(!err.contains("os error"), "no raw errno: {err}");

    // With CAP_BPF the maps are created; loading a tracing program needs CAP_PERFMON.
    let mut cmd = query_cmd(&sql);
    drop_caps(&mut cmd, &[CAP_PERFMON, CAP_SYS_ADMIN]);
    let err = failing_query(cmd);
    assert!(err.starts_with("error: loading BPF program ebql_"), "{err}");
    assert!(
        err.contains("permission denied (this process lacks CAP_PERFMON)\n"),
        "{err}"
    );
}

#[test]
fn unmounted_tracefs_is_mounted_and_the_query_works() {
    let _k = kernel_lock();
    require_root();
    let mut w = Workload::start();
    let a = w.file();
    let sql = format!(
        "SELECT COUNT(*) AS n, SUM(count) AS s FROM {EV} WHERE pid = {}",
        w.pid
    );
    let mut cmd = query_cmd(&sql);
    without_tracefs(&mut cmd);
    let mut cli = Cli::spawn(cmd);
    cli.attached();
    w.pread(a, 33, 21);
    let (out, stderr) = cli.stop();
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let rows = json_rows(&out);
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(
        (rows[0]["n"].as_u64(), rows[0]["s"].as_u64()),
        (Some(21), Some(21 * 33)),
        "{rows:?}"
    );
}

#[test]
fn unmountable_tracefs_is_a_clear_error() {
    let _k = kernel_lock();
    require_root();
    // tracefs gone and no CAP_SYS_ADMIN to mount it (CAP_BPF/CAP_PERFMON kept).
    let mut cmd = query_cmd(&format!("SELECT COUNT(*) FROM {EV} WHERE pid = 1"));
    without_tracefs(&mut cmd);
    drop_caps(&mut cmd, &[CAP_SYS_ADMIN]);
    let err = failing_query(cmd);
    assert!(err.starts_with("error: tracefs is not mounted, and mounting it at /sys/kernel/tracing failed: Operation not permitted; "), "{err}");
    assert!(!err.contains("os error"), "no raw errno: {err}");
    assert!(
        err.contains("mounting needs CAP_SYS_ADMIN, which this process lacks"),
        "{err}"
    );
    assert!(
        err.contains("mount -t tracefs nodev /sys/kernel/tracing"),
        "{err}"
    );
}

/// A 200 ms windowed query under the 2-thread pread64 loop, with the grace
/// period forced to `method`: the sum over windows equals the workload's own
/// count. Returns the map types the ebql process held.
fn windows_exact_with_grace_period(method: &str) -> Vec<u32> {
    let load = LoadWorkload::start(1.5);
    let sql = format!("SELECT pid, COUNT(*) AS n, SUM(count) AS s FROM {EV} WHERE pid = {} GROUP BY pid WINDOW(time, 200, 200)", load.pid);
    let mut cmd = query_cmd(&sql);
    cmd.env(ebql_runtime::FORCE_GRACE_PERIOD_ENV, method);
    let mut cli = Cli::spawn(cmd);
    cli.attached();
    let total = load.run();
    std::thread::sleep(Duration::from_millis(300)); // at least one more flip after the load
    let (_, map_types) = held_bpf_objects(cli.child.id());
    let (out, stderr) = cli.stop();
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let rows = json_rows(&out);
    assert!(rows.len() >= 5, "the load spans several windows: {rows:?}");
    let counted: u64 = rows.iter().map(|r| r["n"].as_u64().unwrap()).sum();
    let bytes: u64 = rows.iter().map(|r| r["s"].as_u64().unwrap()).sum();
    assert_eq!(
        counted, total,
        "{method}: sum over windows = the workload's pread64 calls"
    );
    assert_eq!(bytes, total * 64);
    assert!(stderr.contains("\"events_dropped\":0"), "{stderr}");
    map_types
}

#[test]
fn grace_period_fallback_keeps_windows_exact() {
    let _k = kernel_lock();
    require_root();
    const ARRAY_OF_MAPS: u32 = 12; // BPF_MAP_TYPE_ARRAY_OF_MAPS
    let types = windows_exact_with_grace_period("map-in-map");
    assert!(
        types.contains(&ARRAY_OF_MAPS),
        "the fallback's array-of-maps is in use: {types:?}"
    );
    let types = windows_exact_with_grace_period("membarrier");
    assert!(
        !types.contains(&ARRAY_OF_MAPS),
        "membarrier needs no map: {types:?}"
    );
}

#[test]
fn two_queries_on_one_event_have_independent_exact_results() {
    let _k = kernel_lock();
    require_root();
    let mut w = Workload::start();
    let (a, b) = (w.file(), w.file());
    let pid = w.pid;
    let mut ex1 = Executor::new();
    let mut q1 = ex1
        .execute(&format!(
            "SELECT fd, COUNT(*) AS n, SUM(count) AS s FROM {EV} WHERE pid = {pid} GROUP BY fd"
        ))
        .unwrap();
    let mut ex2 = Executor::new();
    let mut q2 =
        ex2.execute(&format!("SELECT COUNT(*) AS n, MAX(count) AS hi FROM {EV} WHERE pid = {pid} AND count > 100 WINDOW(time, 100, 100)")).unwrap();
    assert_ne!(q1.prog_id(), q2.prog_id());
    let (rx1, rx2) = (q1.take_receiver().unwrap(), q2.take_receiver().unwrap());
    w.pread(a, 50, 10);
    w.sleep_ms(150); // q2 flips windows while q1 keeps counting
    w.pread(b, 200, 7);
    w.sleep_ms(150);
    w.pread(a, 300, 4);
    let s1 = q1.stop().unwrap();
    let s2 = q2.stop().unwrap();

    let r1: Vec<_> = rx1.try_iter().collect();
    let mut per_fd: Vec<(u64, u64, u64)> = r1
        .iter()
        .flat_map(|b| {
            u64s(b, "fd")
                .into_iter()
                .zip(u64s(b, "n"))
                .zip(u64s(b, "s"))
                .map(|((f, n), s)| (f, n, s))
        })
        .collect();
    per_fd.sort();
    let mut expected = vec![(a, 14, 10 * 50 + 4 * 300), (b, 7, 7 * 200)];
    expected.sort();
    assert_eq!(per_fd, expected);
    assert_eq!(s1.events_matched, 21);

    let r2: Vec<_> = rx2.try_iter().collect();
    assert!(
        r2.len() >= 3,
        "q2 closed windows while q1 ran: {}",
        r2.len()
    );
    let n: u64 = r2.iter().flat_map(|b| u64s(b, "n")).sum();
    let hi = r2
        .iter()
        .filter(|b| u64s(b, "n")[0] > 0)
        .flat_map(|b| u64s(b, "hi"))
        .max();
    assert_eq!((n, hi), (11, Some(300)));
    assert_eq!(s2.events_matched, 11);
    assert_eq!(s1.events_dropped() + s2.events_dropped(), 0);
}
