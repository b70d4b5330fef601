//! uprobes, uretprobes and USDT on real processes of ours: the C target
//! `targets/probed.c` (built here with cc at -O0, so USDT operands are
//! stack memory, constants and registers) runs a known number of
//! iterations with known arguments. Exact counts and values, latency pairs,
//! pid-scoped attachment (another process running the same binary never
//! traps), semaphores incremented only while attached, nothing left behind
//! after stop or a failed attach. Needs root (and cc).

use crate::common::{i64s, kernel_lock, require_root, strings, u64s};
use ebql::arrow::record_batch::RecordBatch;
use ebql::Executor;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::OnceLock;

/// Iterations per round of the target.
const N: u64 = 50;

/// The target binary, compiled once per test run into this crate's temp dir.
fn target_binary() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        // The checkout cargo runs the test from (a binary built from another checkout that
        // shares the target dir would otherwise name that checkout's source).
        let manifest = std::env::var_os("CARGO_MANIFEST_DIR")
            .map_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")), PathBuf::from);
        let src = manifest.join("tests/targets/probed.c");
        let out =
            Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("probed-{}", std::process::id()));
        let st = Command::new("cc")
            .args(["-O0", "-Wall", "-o"])
            .arg(&out)
            .arg(&src)
            .status()
            .expect("run cc");
        assert!(
            st.success(),
            "cc {} failed (sys/sdt.h comes from systemtap-sdt-dev: scripts/setup.sh)",
            src.display()
        );
        out
    })
}

/// One running target process.
struct Target {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    pid: u32,
}

impl Target {
    fn start() -> Target {
        let mut child = Command::new(target_binary())
            .arg(N.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start target");
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
        Target {
            child,
            stdin,
            stdout,
            pid,
        }
    }

    /// Runs one round of N iterations; returns how many saw the guarded probe enabled.
    fn run(&mut self) -> u64 {
        self.say("run")
    }

    /// N calls of `ebql_cold`, each with its string in a page not touched yet.
    fn cold(&mut self) -> u64 {
        self.say("cold")
    }

    fn say(&mut self, what: &str) -> u64 {
        writeln!(self.stdin, "{what}").unwrap();
        self.stdin.flush().unwrap();
        let mut line = String::new();
        self.stdout.read_line(&mut line).unwrap();
        line.trim()
            .strip_prefix("done ")
            .unwrap_or_else(|| panic!("target said {line:?}"))
            .parse()
            .unwrap()
    }
}

impl Drop for Target {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn bin() -> String {
    target_binary().display().to_string()
}

/// Runs `sql` around `work` and returns all rows and the final counters.
fn run_query(sql: &str, work: impl FnOnce()) -> (RecordBatch, ebql::QueryStats, Vec<u32>) {
    run_query_with(ebql::ExecutorOptions::default(), sql, work)
}

fn run_query_with(
    opts: ebql::ExecutorOptions,
    sql: &str,
    work: impl FnOnce(),
) -> (RecordBatch, ebql::QueryStats, Vec<u32>) {
    let mut ex = Executor::with_options(opts);
    let mut q = ex.execute(sql).unwrap_or_else(|e| panic!("{}", e.render()));
    let ids = q.prog_ids().to_vec();
    let rx = q.take_receiver().unwrap();
    work();
    let stats = q.stop().unwrap_or_else(|e| panic!("{}", e.render()));
    let batches: Vec<RecordBatch> = rx.try_iter().collect();
    let schema = batches
        .first()
        .map(|b| b.schema())
        .expect("a result at stop");
    (
        ebql::arrow::compute::concat_batches(&schema, &batches).unwrap(),
        stats,
        ids,
    )
}

fn assert_gone(ids: &[u32]) {
    use ebql_runtime::{bpf_object_exists, BpfObject};
    for &id in ids {
        assert!(
            !bpf_object_exists(BpfObject::Program, id).unwrap(),
            "program {id} (and so its links) is gone after stop"
        );
    }
}

fn uprobe_events() -> String {
    std::fs::read_to_string("/sys/kernel/tracing/uprobe_events").unwrap_or_default()
}

#[test]
fn uprobe_arguments_are_exact_for_the_selected_process() {
    require_root();
    let _k = kernel_lock();
    let mut t = Target::start();
    let sql = format!(
        "SELECT arg0, arg1 FROM uprobe:{}:ebql_add WHERE pid = {}",
        bin(),
        t.pid
    );
    let (rows, stats, ids) = run_query(&sql, || {
        assert_eq!(t.run(), 0, "no USDT semaphore is taken by a uprobe")
    });
    let mut got: Vec<(u64, u64)> = u64s(&rows, "arg0")
        .into_iter()
        .zip(u64s(&rows, "arg1"))
        .collect();
    got.sort();
    let want: Vec<(u64, u64)> = (1..=N).map(|i| (i, 1000 + i)).collect();
    assert_eq!(got, want);
    assert_eq!(stats.events_matched, N);
    assert_gone(&ids);
}

#[test]
fn uretprobe_return_values_and_in_kernel_aggregates() {
    require_root();
    let _k = kernel_lock();
    let mut t = Target::start();
    let sql = format!(
        "SELECT COUNT(*) AS n, SUM(retval) AS s, MIN(retval) AS lo FROM uretprobe:{}:ebql_neg WHERE pid = {}",
        bin(),
        t.pid
    );
    let (rows, _, ids) = run_query(&sql, || {
        t.run();
    });
    assert_eq!(u64s(&rows, "n"), vec![N]);
    assert_eq!(i64s(&rows, "s"), vec![-((N * (N + 1) / 2) as i64)]);
    assert_eq!(i64s(&rows, "lo"), vec![-(N as i64)]);
    assert_gone(&ids);
}

/// Function latency by pairing entry and return on the thread: every call pairs.
#[test]
fn uprobe_uretprobe_pairs_count_exactly() {
    require_root();
    let _k = kernel_lock();
    let mut t = Target::start();
    let b = bin();
    let sql = format!(
        "SELECT COUNT(*) AS n, SUM(CAST(r.retval AS BIGINT UNSIGNED) - s.arg0 - s.arg1) AS zero, MIN(r.time - s.time) AS lo \
         FROM uprobe:{b}:ebql_add AS s JOIN uretprobe:{b}:ebql_add AS r ON s.tid = r.tid WHERE s.pid = {p} AND r.pid = {p}",
        p = t.pid
    );
    let (rows, stats, ids) = run_query(&sql, || {
        t.run();
    });
    assert_eq!(u64s(&rows, "n"), vec![N], "{}", stats.to_json());
    assert_eq!(u64s(&rows, "zero"), vec![0], "ebql_add returns arg0 + arg1");
    assert!(u64s(&rows, "lo")[0] > 0);
    assert_eq!(
        (
            stats.pair_ends_without_start,
            stats.pair_starts_left,
            stats.pair_starts_overwritten
        ),
        (0, 0, 0),
        "{}",
        stats.to_json()
    );
    assert_eq!(ids.len(), 2);
    assert_gone(&ids);
}

/// `pid = A` attaches to A only: B, running the same binary at the same
/// time, never traps (the program runs exactly N times). A `tid` filter is
/// not used for scoping, so there the program runs for both.
#[test]
fn pid_filter_scopes_the_uprobe_to_one_process() {
    require_root();
    let _k = kernel_lock();
    let mut a = Target::start();
    let mut b = Target::start();
    // Every run at the hook, B's included: the kernel's count (bpf_stats);
    // the program itself counts only what passes its pid/tid test.
    let opts = ebql::executor::ExecutorOptions {
        bpf_stats: true,
        ..Default::default()
    };
    for (filter, runs) in [
        (format!("pid = {}", a.pid), N),
        (format!("tid = {}", a.pid), 2 * N),
    ] {
        let mut ex = Executor::with_options(opts.clone());
        let sql = format!(
            "SELECT COUNT(*) AS n FROM uprobe:{}:ebql_add WHERE {filter}",
            bin()
        );
        let mut q = ex
            .execute(&sql)
            .unwrap_or_else(|e| panic!("{}", e.render()));
        let rx = q.take_receiver().unwrap();
        let (ra, rb) = std::thread::scope(|s| {
            let hb = s.spawn(|| b.run());
            let ra = a.run();
            (ra, hb.join().unwrap())
        });
        assert_eq!((ra, rb), (0, 0));
        let stats = q.stop().unwrap();
        let rows: Vec<RecordBatch> = rx.try_iter().collect();
        assert_eq!(u64s(&rows[0], "n"), vec![N], "{filter}");
        assert_eq!(
            stats.bpf_run_cnt,
            runs,
            "{filter}: probe runs: {}",
            stats.to_json()
        );
        assert_eq!(
            stats.events_seen,
            N,
            "{filter}: A's events: {}",
            stats.to_json()
        );
    }
}

#[test]
fn usdt_memory_constant_and_multi_site_operands() {
    require_root();
    let _k = kernel_lock();
    let mut t = Target::start();
    let b = bin();
    let p = t.pid;
    let (rows, ..) = run_query(
        &format!("SELECT arg0, arg1 FROM usdt:{b}:ebql:tick WHERE pid = {p}"),
        || {
            t.run();
        },
    );
    let mut got: Vec<(i64, i64)> = i64s(&rows, "arg0")
        .into_iter()
        .zip(i64s(&rows, "arg1"))
        .collect();
    got.sort();
    assert_eq!(
        got,
        (1..=N as i64).map(|i| (i, -i)).collect::<Vec<_>>(),
        "-4@-12(%rbp), -4@-28(%rbp): signed 32-bit stack slots"
    );

    let (rows, ..) = run_query(&format!("SELECT arg0, SUM(arg1) AS s, COUNT(*) AS n FROM usdt:{b}:ebql:konst WHERE pid = {p} GROUP BY arg0"), || {
        t.run();
    });
    assert_eq!(
        (i64s(&rows, "arg0"), i64s(&rows, "s"), u64s(&rows, "n")),
        (vec![7], vec![(N * (N + 1) / 2) as i64], vec![N])
    );

    let (rows, ..) = run_query(
        &format!("SELECT COUNT(*) AS n, SUM(arg0) AS s FROM usdt:{b}:ebql:twice WHERE pid = {p}"),
        || {
            t.run();
        },
    );
    assert_eq!(
        (u64s(&rows, "n"), i64s(&rows, "s")),
        (vec![2 * N], vec![(N * (N + 1)) as i64]),
        "two sites, one uprobe each"
    );

    // 8@%rax: the string pointer is a register operand; str() reads user memory for USDT.
    let (rows, ..) = run_query(
        &format!("SELECT arg0, str(arg1) AS word FROM usdt:{b}:ebql:name WHERE pid = {p}"),
        || {
            t.run();
        },
    );
    let mut got: Vec<(i64, String)> = i64s(&rows, "arg0")
        .into_iter()
        .zip(strings(&rows, "word"))
        .collect();
    got.sort();
    let words = ["alpha", "beta", "gamma"];
    assert_eq!(
        got,
        (1..=N as i64)
            .map(|i| (i, words[(i % 3) as usize].to_string()))
            .collect::<Vec<_>>()
    );
    // Grouped in the kernel by the string: one group per word.
    let (rows, ..) = run_query(&format!("SELECT str(arg1, 16) AS word, COUNT(*) AS n FROM usdt:{b}:ebql:name WHERE pid = {p} GROUP BY word ORDER BY word"), || {
        t.run();
    });
    let per_word = |r: u64| (1..=N).filter(|i| i % 3 == r).count() as u64;
    assert_eq!(
        (strings(&rows, "word"), u64s(&rows, "n")),
        (
            words.map(String::from).to_vec(),
            vec![per_word(0), per_word(1), per_word(2)]
        )
    );
}

/// The semaphore is incremented while (and only while) the probe is attached.
#[test]
fn usdt_semaphore_is_taken_while_attached_and_released_after() {
    require_root();
    let _k = kernel_lock();
    let before = uprobe_events();
    let mut t = Target::start();
    assert_eq!(t.run(), 0, "nobody has the probe enabled yet");
    let sql = format!(
        "SELECT COUNT(*) AS n, SUM(arg0) AS s FROM usdt:{}:ebql:guarded WHERE pid = {}",
        bin(),
        t.pid
    );
    let mut guarded = 0;
    let (rows, _, ids) = run_query(&sql, || guarded = t.run());
    assert_eq!(
        guarded, N,
        "the target saw its semaphore set on every iteration"
    );
    assert_eq!(
        (u64s(&rows, "n"), u64s(&rows, "s")),
        (vec![N], vec![N * (N + 1) / 2])
    );
    assert_gone(&ids);
    assert_eq!(t.run(), 0, "the semaphore is back to 0 after stop");
    assert_eq!(
        uprobe_events(),
        before,
        "perf uprobes leave tracefs uprobe_events alone"
    );
}

/// A pairing whose start cannot attach (its pid is gone) fails to start,
/// and the end program it had already attached (a USDT probe with a
/// semaphore) is detached again.
#[test]
fn failed_attach_leaves_nothing_behind() {
    require_root();
    let _k = kernel_lock();
    let before = uprobe_events();
    let mut t = Target::start();
    let mut gone = Command::new("true").spawn().unwrap();
    let dead = gone.id();
    gone.wait().unwrap();
    let b = bin();
    let sql = format!(
        "SELECT COUNT(*) FROM usdt:{b}:ebql:tick AS s JOIN usdt:{b}:ebql:guarded AS e ON s.tid = e.tid WHERE s.pid = {dead} AND e.pid = {}",
        t.pid
    );
    let err = Executor::new()
        .execute(&sql)
        .err()
        .expect("attaching to a dead pid fails");
    assert!(
        err.render().contains(&format!("pid {dead}")),
        "{}",
        err.render()
    );
    assert_eq!(t.run(), 0, "the end program's semaphore was released");
    assert_eq!(uprobe_events(), before);
}

#[test]
fn unknown_symbol_and_probe_are_positioned_errors() {
    let b = bin();
    let mut ex = Executor::new();
    let e = ex
        .compile(&format!("SELECT * FROM uprobe:{b}:ebql_ad"))
        .err()
        .unwrap()
        .render();
    assert!(
        e.contains("no function `ebql_ad`") && e.contains("did you mean `ebql_add`"),
        "{e}"
    );
    let e = ex
        .compile(&format!("SELECT * FROM usdt:{b}:ebql:tik"))
        .err()
        .unwrap()
        .render();
    assert!(
        e.contains("no USDT probe `ebql:tik`") && e.contains("ebql:tick"),
        "{e}"
    );
    let e = ex
        .compile("SELECT * FROM uprobe:/no/such/file:main")
        .err()
        .unwrap()
        .render();
    assert!(e.contains("cannot probe `/no/such/file`"), "{e}");
}

/// Rows of `str` column `name`, NULL as None.
fn opt_strings(b: &RecordBatch, name: &str) -> Vec<Option<String>> {
    use ebql::arrow::array::{Array, AsArray};
    let c = ebql::arrow::compute::cast(
        b.column_by_name(name).expect("the column"),
        &ebql::arrow::datatypes::DataType::Utf8,
    )
    .unwrap();
    let s = c.as_string::<i32>();
    (0..s.len())
        .map(|i| s.is_valid(i).then(|| s.value(i).to_string()))
        .collect()
}

/// Issue 19, item 6: a uprobe's string argument in a page the process has
/// not touched yet. The program is loaded sleepable and faults the page in
/// before its body, so every call's string is read exactly (a group key, a
/// streamed row, a pairing's stored start string), with no failed read;
/// with faulting reads off, the same calls read NULL, each counted.
#[test]
fn a_string_in_a_page_not_touched_yet_is_faulted_in() {
    require_root();
    let _k = kernel_lock();
    ebql_runtime::faulting_reads().expect("Linux 6.18 loads sleepable uprobe programs");
    let b = bin();
    let mut t = Target::start();
    let p = t.pid;
    let grouped = format!(
        "SELECT str(arg0) AS s, COUNT(*) AS n FROM uprobe:{b}:ebql_cold WHERE pid = {p} GROUP BY str(arg0)"
    );
    let streamed = format!("SELECT str(arg0) AS s FROM uprobe:{b}:ebql_cold WHERE pid = {p}");
    let paired = format!(
        "SELECT str(s.arg0) AS s, COUNT(*) AS n FROM uprobe:{b}:ebql_cold AS s \
         JOIN uretprobe:{b}:ebql_cold AS r ON s.tid = r.tid WHERE s.pid = {p} AND r.pid = {p} GROUP BY str(s.arg0)"
    );
    let on = ebql::ExecutorOptions::default();
    let mut off = ebql::ExecutorOptions::default();
    off.codegen.faulting_user_strings = false;
    let cold = Some("cold-path".to_string());
    for (opts, want, failed) in [(on, cold.clone(), 0), (off, None, N)] {
        for sql in [&grouped, &paired] {
            let (rows, stats, _) = run_query_with(opts.clone(), sql, || {
                assert_eq!(t.cold(), N);
            });
            assert_eq!(opt_strings(&rows, "s"), vec![want.clone()], "{sql}");
            assert_eq!(u64s(&rows, "n"), vec![N], "{sql}");
            assert_eq!(stats.str_read_failed, failed, "{sql}");
        }
        let (rows, stats, _) = run_query_with(opts.clone(), &streamed, || {
            assert_eq!(t.cold(), N);
        });
        assert_eq!(opt_strings(&rows, "s"), vec![want.clone(); N as usize]);
        assert_eq!(stats.str_read_failed, failed);
    }
}

/// The program that faults strings in is the sleepable one, laid out as
/// `codegen/fault_in.rs` says; a program reading no user string, or a
/// tracepoint's, is not.
#[test]
fn only_uprobe_programs_reading_user_strings_are_sleepable() {
    let b = bin();
    let compile = |sql: &str| {
        Executor::new()
            .compile(sql)
            .unwrap_or_else(|e| panic!("{}", e.render()))
    };
    let sleepable = |sql: &str| -> Vec<bool> {
        compile(sql)
            .code
            .programs
            .iter()
            .map(|p| p.sleepable)
            .collect()
    };
    let streamed = format!("SELECT str(arg0) AS s FROM uprobe:{b}:ebql_cold WHERE pid = 1");
    assert_eq!(sleepable(&streamed), [true]);
    let listing = compile(&streamed).code.programs[0].program.listing();
    let at = |what: &str| {
        listing
            .find(what)
            .unwrap_or_else(|| panic!("no {what} in\n{listing}"))
    };
    // The body reads without faulting, the prologue (after the exit) faults in, then locks.
    assert!(at("call bpf_probe_read_user_str") < at("call bpf_rcu_read_unlock"));
    assert!(at("call bpf_rcu_read_unlock") < at("call bpf_copy_from_user_str"));
    assert!(at("call bpf_copy_from_user_str") < at("call bpf_rcu_read_lock"));
    assert_eq!(
        sleepable(&format!(
            "SELECT arg0 FROM uprobe:{b}:ebql_cold WHERE pid = 1"
        )),
        [false]
    );
    assert_eq!(
        sleepable(&format!(
            "SELECT str(s.arg0) AS s, r.retval FROM uprobe:{b}:ebql_cold AS s \
             JOIN uretprobe:{b}:ebql_cold AS r ON s.tid = r.tid"
        )),
        [true, false]
    );
    assert_eq!(
        sleepable("SELECT str(filename) AS f FROM tracepoint:syscalls:sys_enter_openat"),
        [false]
    );
}
