//! The planner's alternatives on real events (docs/internals.md "Planning choices"):
//! each alternative of a choice runs the same query on the same events of a
//! workload of ours, at the same time, and every one must give the exact
//! answer the workload implies.
//!
//! * syscall tracepoints on their tracefs tracepoint, on the raw syscall
//!   hook through tp_btf (direct loads) and through raw_tp (probe reads):
//!   aggregates, raw streams, the exit's `ret` and `__syscall_nr`, and an
//!   enter/exit pairing; 32-bit (`int 0x80`) system calls of the same
//!   number are not the traced call on any hook;
//! * group tables as per-CPU hashes and as per-CPU arrays (`GROUP BY fd`
//!   bounded by `fd < 64`, `GROUP BY cpu`, a bucket of a bounded value);
//! * the syscall-rate sampler (exact counts of a call of ours) and the
//!   automatic hook choice from rates;
//! * aggregates in the kernel and in user space, and the automatic
//!   placement from the query's sampled rates.

use crate::common::{i64s, kernel_lock, require_root, u64s, Workload};
use ebql::arrow::record_batch::RecordBatch;
use ebql::{Executor, ExecutorOptions};
use ebql_catalog::EventKind;
use ebql_compiler::choose::{
    AggregateChoice, GroupMapChoice, Hook, HookChoice, Optimize, Placement, PlanChoices,
    SyscallRates,
};
use ebql_compiler::contract::MAP_OUT;
use ebql_compiler::contract::{MapKind, OutputLayout};
use std::time::Duration;

fn options(hook: HookChoice, group_map: GroupMapChoice) -> ExecutorOptions {
    let mut opts = ExecutorOptions::default();
    opts.codegen.choices = PlanChoices {
        hook,
        group_map,
        ..PlanChoices::new()
    };
    opts
}

/// Runs every (options, query) at once around `work`; one result batch per query.
fn run_together(queries: &[(ExecutorOptions, String)], work: impl FnOnce()) -> Vec<RecordBatch> {
    let mut running: Vec<_> = queries
        .iter()
        .map(|(opts, sql)| {
            Executor::with_options(opts.clone())
                .execute(sql)
                .unwrap_or_else(|e| panic!("{sql}: {}", e.render()))
        })
        .collect();
    let rxs: Vec<_> = running
        .iter_mut()
        .map(|q| q.take_receiver().unwrap())
        .collect();
    work();
    for q in running {
        q.stop().unwrap_or_else(|e| panic!("{}", e.render()));
    }
    rxs.iter()
        .map(|rx| {
            let batches: Vec<RecordBatch> = rx.try_iter().collect();
            let schema = batches
                .first()
                .map(|b| b.schema())
                .expect("a result at stop");
            ebql::arrow::compute::concat_batches(&schema, &batches).unwrap()
        })
        .collect()
}

/// Rows of the named u64 columns, sorted.
fn rows(b: &RecordBatch, cols: &[&str]) -> Vec<Vec<i64>> {
    let cols: Vec<Vec<i64>> = cols.iter().map(|c| i64s(b, c)).collect();
    let mut out: Vec<Vec<i64>> = (0..b.num_rows())
        .map(|i| cols.iter().map(|c| c[i]).collect())
        .collect();
    out.sort();
    out
}

const HOOKS: [HookChoice; 3] = [HookChoice::Tracefs, HookChoice::Raw, HookChoice::RawTp];

#[test]
fn syscall_hook_alternatives_give_the_same_exact_answers() {
    require_root();
    let _g = kernel_lock();
    let mut w = Workload::start();
    let (pid, f, bad) = (w.pid, w.file() as i64, 900i64);
    let sqls = [
        format!("SELECT COUNT(*) AS n, SUM(count) AS s FROM tracepoint:syscalls:sys_enter_pread64 WHERE pid = {pid} AND fd = {f}"),
        format!("SELECT fd, count, pos FROM tracepoint:syscalls:sys_enter_pread64 WHERE pid = {pid}"),
        format!("SELECT __syscall_nr AS nr, ret FROM tracepoint:syscalls:sys_exit_pread64 WHERE pid = {pid}"),
        format!(
            "SELECT x.ret AS ret, e.fd AS fd, COUNT(*) AS n, SUM(e.count) AS s FROM tracepoint:syscalls:sys_enter_pread64 e \
             JOIN tracepoint:syscalls:sys_exit_pread64 x ON e.tid = x.tid WHERE e.pid = {pid} GROUP BY x.ret, e.fd"
        ),
    ];
    // The raw hooks attach where they should, and their programs say so.
    for (hook, kind) in [
        (HookChoice::Raw, EventKind::TpBtf),
        (HookChoice::RawTp, EventKind::RawTracepoint),
        (HookChoice::Tracefs, EventKind::Tracepoint),
    ] {
        let c = Executor::with_options(options(hook, GroupMapChoice::Auto))
            .compile(&sqls[3])
            .unwrap_or_else(|e| panic!("{}", e.render()));
        assert!(
            c.code.programs.iter().all(|p| p.event.kind == kind),
            "{hook:?}: {:?}",
            c.code.programs.iter().map(|p| &p.event).collect::<Vec<_>>()
        );
        let report = c.physical.hook.expect("a syscall query reports its hook");
        assert_eq!(
            report.decision.chosen,
            if hook == HookChoice::Tracefs {
                Hook::Tracefs
            } else {
                Hook::Raw
            }
        );
        assert_eq!(
            report.traced_nrs(),
            [17, 17],
            "pread64 is syscall 17 on x86-64, enter and exit"
        );
    }
    let queries: Vec<(ExecutorOptions, String)> = HOOKS
        .iter()
        .flat_map(|&h| {
            sqls.iter()
                .map(move |s| (options(h, GroupMapChoice::Auto), s.clone()))
        })
        .collect();
    let r = run_together(&queries, || {
        w.pread(f as u64, 100, 5);
        w.pread_bad_fd(bad as u64, 30, 3);
    });
    let preads: Vec<Vec<i64>> = (0..5)
        .map(|i| vec![f, 100, 100 * i])
        .chain((0..3).map(|_| vec![bad, 30, 0]))
        .collect();
    let exits: Vec<Vec<i64>> = std::iter::repeat_n(vec![17, -9], 3)
        .chain(std::iter::repeat_n(vec![17, 100], 5))
        .collect();
    for (i, hook) in HOOKS.iter().enumerate() {
        let b = &r[4 * i..4 * i + 4];
        assert_eq!(
            (u64s(&b[0], "n"), u64s(&b[0], "s")),
            (vec![5], vec![500]),
            "{hook:?} aggregate"
        );
        assert_eq!(
            rows(&b[1], &["fd", "count", "pos"]),
            preads,
            "{hook:?} stream"
        );
        assert_eq!(rows(&b[2], &["nr", "ret"]), exits, "{hook:?} exits");
        assert_eq!(
            rows(&b[3], &["ret", "fd", "n", "s"]),
            vec![vec![-9, bad, 3, 90], vec![100, f, 5, 500]],
            "{hook:?} pairing"
        );
    }
}

/// `int 0x80` with eax = 17 from a 64-bit thread: an ia32 system call
/// (number 17 there is the unimplemented `break`: -ENOSYS) that the raw
/// hooks see with id 17, the x86-64 pread64's number.
fn ia32_syscall_17() -> i32 {
    let ret: i32;
    // SAFETY: an ia32 system call without arguments that does nothing (sys_ni_syscall).
    unsafe { std::arch::asm!("int 0x80", inout("eax") 17 => ret) };
    ret
}

#[test]
fn ia32_system_calls_are_not_the_traced_call_on_any_hook() {
    require_root();
    let _g = kernel_lock();
    if ia32_syscall_17() != -libc::ENOSYS {
        eprintln!(
            "this kernel runs no ia32 system calls (IA32 emulation off): nothing to tell apart"
        );
        return;
    }
    // A thread of ours: 4 pread64 calls and 6 ia32 calls numbered 17, on command.
    let (tid_tx, tid_rx) = std::sync::mpsc::channel();
    let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    let worker = std::thread::spawn(move || {
        // SAFETY: gettid has no preconditions.
        tid_tx.send(unsafe { libc::gettid() }).unwrap();
        go_rx.recv().unwrap();
        let file = std::fs::File::open("/proc/self/exe").unwrap();
        let mut buf = [0u8; 16];
        for i in 0..4 {
            // SAFETY: a valid fd and buffer.
            assert_eq!(
                unsafe {
                    libc::pread(
                        std::os::fd::AsRawFd::as_raw_fd(&file),
                        buf.as_mut_ptr().cast(),
                        16,
                        i * 16,
                    )
                },
                16
            );
        }
        let ia32: Vec<i32> = (0..6).map(|_| ia32_syscall_17()).collect();
        done_tx.send(ia32).unwrap();
    });
    let tid = tid_rx.recv().unwrap();
    let sqls = [
        format!("SELECT COUNT(*) AS n FROM tracepoint:syscalls:sys_enter_pread64 WHERE tid = {tid}"),
        format!("SELECT COUNT(*) AS n, SUM(ret) AS s FROM tracepoint:syscalls:sys_exit_pread64 WHERE tid = {tid}"),
    ];
    let queries: Vec<(ExecutorOptions, String)> = HOOKS
        .iter()
        .flat_map(|&h| {
            sqls.iter()
                .map(move |s| (options(h, GroupMapChoice::Auto), s.clone()))
        })
        .collect();
    let r = run_together(&queries, || {
        go_tx.send(()).unwrap();
        let ia32 = done_rx.recv().unwrap();
        assert_eq!(ia32, vec![-libc::ENOSYS; 6], "the ia32 calls ran");
    });
    worker.join().unwrap();
    for (i, hook) in HOOKS.iter().enumerate() {
        assert_eq!(
            u64s(&r[2 * i], "n"),
            vec![4],
            "{hook:?}: enters of the 64-bit pread64 only"
        );
        assert_eq!(
            (u64s(&r[2 * i + 1], "n"), i64s(&r[2 * i + 1], "s")),
            (vec![4], vec![64]),
            "{hook:?}: exits of the 64-bit pread64 only"
        );
    }
}

#[test]
fn array_and_hash_group_tables_give_the_same_exact_answers() {
    require_root();
    let _g = kernel_lock();
    let mut w = Workload::start();
    let (pid, f) = (w.pid, w.file() as i64);
    let sqls = [
        format!("SELECT fd, COUNT(*) AS n, SUM(count) AS s, MIN(pos) AS lo, MAX(pos) AS hi FROM tracepoint:syscalls:sys_enter_pread64 WHERE pid = {pid} AND fd < 64 GROUP BY fd"),
        format!("SELECT cpu, COUNT(*) AS n, SUM(count) AS s FROM tracepoint:syscalls:sys_enter_pread64 WHERE pid = {pid} GROUP BY cpu"),
        format!("SELECT count / 100 AS bucket, COUNT(*) AS n FROM tracepoint:syscalls:sys_enter_pread64 WHERE pid = {pid} AND count < 1000 GROUP BY count / 100"),
    ];
    let maps = [GroupMapChoice::Hash, GroupMapChoice::Array];
    for m in maps {
        for sql in &sqls {
            let c = Executor::with_options(options(HookChoice::Tracefs, m))
                .compile(sql)
                .unwrap_or_else(|e| panic!("{}", e.render()));
            let kind = if m == GroupMapChoice::Array {
                MapKind::PercpuArray
            } else {
                MapKind::PercpuHash
            };
            assert_eq!(c.code.maps[MAP_OUT].kind, kind, "{m:?}: {sql}");
        }
    }
    let queries: Vec<(ExecutorOptions, String)> = maps
        .iter()
        .flat_map(|&m| {
            sqls.iter()
                .map(move |s| (options(HookChoice::Tracefs, m), s.clone()))
        })
        .collect();
    let r = run_together(&queries, || {
        assert_eq!(w.cmd("cpu 1"), "ok cpu");
        w.pread(f as u64, 100, 5);
        w.pread_bad_fd(40, 30, 3);
        w.pread_bad_fd(63, 250, 2);
        w.pread_bad_fd(64, 1, 7);
        assert_eq!(w.cmd("cpu 0"), "ok cpu");
        w.pread(f as u64, 900, 4);
    });
    for (i, m) in maps.iter().enumerate() {
        let b = &r[3 * i..3 * i + 3];
        let by_fd = vec![
            vec![f, 9, 500 + 3600, 0, 3200],
            vec![40, 3, 90, 0, 0],
            vec![63, 2, 500, 0, 0],
        ];
        let mut by_fd = by_fd;
        by_fd.sort();
        assert_eq!(
            rows(&b[0], &["fd", "n", "s", "lo", "hi"]),
            by_fd,
            "{m:?}: by fd (fd 64 is filtered out)"
        );
        assert_eq!(
            rows(&b[1], &["cpu", "n", "s"]),
            vec![vec![0, 4, 3600], vec![1, 17, 500 + 90 + 500 + 7]],
            "{m:?}: by cpu"
        );
        assert_eq!(
            rows(&b[2], &["bucket", "n"]),
            vec![vec![0, 3 + 7], vec![1, 5], vec![2, 2], vec![9, 4]],
            "{m:?}: by bucket"
        );
    }
}

/// The sampler counts the machine's system calls by number: a thread of
/// ours makes exactly 1000 calls of a number no program uses (236,
/// `vserver`, unimplemented on x86-64: -ENOSYS) while it is attached.
#[test]
fn sampler_counts_system_calls_by_number() {
    require_root();
    let _g = kernel_lock();
    let catalog = ebql_catalog::Catalog::open().unwrap();
    let counts = ebql::sampler::count_syscalls(&catalog, Duration::from_millis(50), || {
        std::thread::spawn(|| {
            for _ in 0..1000 {
                // SAFETY: an unimplemented system call without arguments.
                assert_eq!(unsafe { libc::syscall(236) }, -1);
            }
        })
        .join()
        .unwrap();
    })
    .unwrap_or_else(|e| panic!("{}", e.render()));
    assert_eq!(counts.per_nr[236], 1000);
    let r = counts.rates(&[236]);
    assert!(
        r.all_per_sec > r.traced_per_sec && r.traced_per_sec > 0.0,
        "{r:?}"
    );
}

/// `--optimize total` plans with the rates it is given (or samples):
/// a traced call that is most of the machine's system calls goes to the raw
/// hook, a rare one stays on tracefs; `traced` and `host` decide alone.
#[test]
fn automatic_hook_choice_follows_the_rates() {
    let sql = "SELECT COUNT(*) FROM tracepoint:syscalls:sys_enter_getppid WHERE pid = 1";
    let plan = |optimize, rates| {
        let mut opts = ExecutorOptions::default();
        opts.codegen.choices.optimize = optimize;
        opts.codegen.choices.rates = rates;
        Executor::with_options(opts)
            .compile_for_explain(sql)
            .unwrap_or_else(|e| panic!("{}", e.render()))
    };
    let rates = |traced| {
        Some(SyscallRates {
            all_per_sec: 1e6,
            traced_per_sec: traced,
            sampled_ms: 100,
        })
    };
    let kind = |c: &ebql_compiler::CompiledQuery| c.code.main().event.kind;
    assert_eq!(kind(&plan(Optimize::Total, rates(9e5))), EventKind::TpBtf);
    assert_eq!(
        kind(&plan(Optimize::Total, rates(1e4))),
        EventKind::Tracepoint
    );
    assert_eq!(
        kind(&plan(Optimize::Total, None)),
        EventKind::Tracepoint,
        "no rates: tracefs"
    );
    assert_eq!(kind(&plan(Optimize::Traced, rates(1e4))), EventKind::TpBtf);
    assert_eq!(
        kind(&plan(Optimize::Host, rates(9e5))),
        EventKind::Tracepoint
    );
    let text = ebql_compiler::explain::explain(&plan(Optimize::Total, rates(9e5)));
    assert!(
        text.contains(
            "hook: raw (least CPU in all: 900000 traced calls/s of 1000000 system calls/s"
        ),
        "{text}"
    );
    assert!(text.contains("predicted: +87 ns per traced call, +70 ns per other system call of the machine, 85.3 ms of CPU per second"), "{text}");
}

/// The same aggregates with their aggregate in the kernel and in user space
/// (`--aggregate kernel|user`), at the same time on the same events, give
/// the same exact rows.
#[test]
fn kernel_and_user_space_aggregates_give_the_same_exact_answers() {
    require_root();
    let _g = kernel_lock();
    let mut w = Workload::start();
    let (pid, f) = (w.pid, w.file() as i64);
    let sqls = [
        format!("SELECT fd, COUNT(*) AS n, SUM(count) AS s, MIN(pos) AS lo, MAX(pos) AS hi FROM tracepoint:syscalls:sys_enter_pread64 WHERE pid = {pid} GROUP BY fd"),
        format!("SELECT COUNT(*) AS n, SUM(count) AS s FROM tracepoint:syscalls:sys_enter_pread64 WHERE pid = {pid}"),
    ];
    let placed = |aggregate| {
        let mut opts = options(HookChoice::Tracefs, GroupMapChoice::Auto);
        opts.codegen.choices.aggregate = aggregate;
        opts
    };
    let placements = [AggregateChoice::Kernel, AggregateChoice::User];
    for sql in &sqls {
        let k = Executor::with_options(placed(AggregateChoice::Kernel))
            .compile(sql)
            .unwrap();
        let u = Executor::with_options(placed(AggregateChoice::User))
            .compile(sql)
            .unwrap();
        assert!(
            matches!(k.code.layout, OutputLayout::Groups { .. }),
            "{sql}"
        );
        assert!(
            matches!(u.code.layout, OutputLayout::Stream { .. }),
            "{sql}"
        );
    }
    let queries: Vec<(ExecutorOptions, String)> = placements
        .iter()
        .flat_map(|&a| sqls.iter().map(move |s| (placed(a), s.clone())))
        .collect();
    let r = run_together(&queries, || {
        w.pread(f as u64, 100, 5);
        w.pread_bad_fd(40, 30, 3);
    });
    for (i, a) in placements.iter().enumerate() {
        let b = &r[2 * i..2 * i + 2];
        let mut by_fd = vec![vec![f, 5, 500, 0, 400], vec![40, 3, 90, 0, 0]];
        by_fd.sort();
        assert_eq!(
            rows(&b[0], &["fd", "n", "s", "lo", "hi"]),
            by_fd,
            "{a:?}: by fd"
        );
        assert_eq!(
            rows(&b[1], &["n", "s"]),
            vec![vec![8, 590]],
            "{a:?}: one group"
        );
    }
}

/// A thread of ours calling pread64 on a file of its own: `rare` ≈ 100
/// calls/s, each at a new offset (a new group per event), else as fast as
/// it can at one offset; on `exact`, it stops that and makes 3 calls at
/// each offset 0..10, then reports.
struct Caller {
    tid: i32,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Caller {
    fn start(rare: bool) -> Caller {
        use std::sync::atomic::{AtomicBool, Ordering};
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let (tx, rx) = std::sync::mpsc::channel();
        let s = stop.clone();
        let thread = std::thread::spawn(move || {
            use std::os::fd::AsRawFd;
            let file = tempfile_with(4096);
            let fd = file.as_raw_fd();
            tx.send(unsafe { libc::gettid() }).unwrap();
            let mut buf = [0u8; 1];
            let mut i = 0i64;
            while !s.load(Ordering::Relaxed) {
                let pos = if rare { 1_000_000 + i } else { 7 };
                // SAFETY: a 1-byte buffer of ours.
                unsafe { libc::pread(fd, buf.as_mut_ptr().cast(), 1, pos) };
                i += 1;
                if rare {
                    std::thread::sleep(Duration::from_millis(10));
                }
            }
            for _ in 0..3 {
                for pos in 0..10 {
                    // SAFETY: as above.
                    unsafe { libc::pread(fd, buf.as_mut_ptr().cast(), 1, pos) };
                }
            }
        });
        Caller {
            tid: rx.recv().unwrap(),
            stop,
            thread: Some(thread),
        }
    }

    /// Ends the loop, makes the exact calls and waits for them.
    fn exact(mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        self.thread.take().unwrap().join().unwrap();
    }
}

impl Drop for Caller {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn tempfile_with(bytes: usize) -> std::fs::File {
    use std::io::Write;
    let path = std::env::temp_dir().join(format!(
        "ebql-choices-{}-{:?}",
        std::process::id(),
        std::thread::current().id()
    ));
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(true)
        .read(true)
        .write(true)
        .open(&path)
        .unwrap();
    f.write_all(&vec![b'x'; bytes]).unwrap();
    std::fs::remove_file(&path).unwrap();
    f
}

/// `--aggregate auto` on real events: before running, the query runs for
/// the sampling time and the model weighs both plans at what it saw. A
/// thread making ~100 calls/s, each a new group, gets its aggregate in user
/// space (draining a group per event every window costs more than the
/// rows), and that plan then counts the thread's calls exactly; the same
/// query on a thread calling as fast as it can at one offset keeps the
/// kernel's group table, and its hook is chosen from the same sample.
#[test]
fn automatic_aggregate_placement_follows_the_sampled_rates() {
    require_root();
    let _g = kernel_lock();
    let auto = || {
        let mut opts = options(HookChoice::Tracefs, GroupMapChoice::Auto);
        opts.sample_rates = Some(Duration::from_millis(200));
        opts
    };
    let sql = |tid: i32| {
        format!("SELECT pos, COUNT(*) AS n FROM tracepoint:syscalls:sys_enter_pread64 WHERE tid = {tid} GROUP BY pos WINDOW(time, 1000, 1000)")
    };

    // With the hook chosen automatically too, the one sample of the query
    // gives the hook rule its rates (the busy thread's calls are most of the
    // machine's system calls).
    let busy = Caller::start(false);
    let mut both = auto();
    both.codegen.choices.hook = HookChoice::Auto;
    let c = Executor::with_options(both)
        .compile(&sql(busy.tid))
        .unwrap_or_else(|e| panic!("{}", e.render()));
    drop(busy);
    let d = c
        .physical
        .placement
        .as_ref()
        .expect("an aggregate query is weighed");
    assert_eq!(d.chosen, Placement::Kernel, "{}", d.why);
    assert!(matches!(c.code.layout, OutputLayout::Groups { .. }));
    let hook = &c
        .physical
        .hook
        .as_ref()
        .expect("a syscall query reports its hook")
        .decision;
    assert!(
        hook.why.starts_with("least CPU in all") && hook.why.contains("(sampled 200 ms)"),
        "{}",
        hook.why
    );

    let rare = Caller::start(true);
    let mut q = Executor::with_options(auto())
        .execute(&sql(rare.tid))
        .unwrap_or_else(|e| panic!("{}", e.render()));
    let d = q.placement().expect("an aggregate query is weighed");
    assert_eq!(d.chosen, Placement::User, "{}", d.why);
    assert!(
        d.why.starts_with("least CPU in all at the sampled rates"),
        "{}",
        d.why
    );
    let rx = q.take_receiver().unwrap();
    rare.exact();
    q.stop().unwrap_or_else(|e| panic!("{}", e.render()));
    let batches: Vec<RecordBatch> = rx.try_iter().collect();
    // Summed over windows (a window may close between the calls).
    let mut exact = std::collections::BTreeMap::new();
    for r in batches
        .iter()
        .flat_map(|b| rows(b, &["pos", "n"]))
        .filter(|r| r[0] < 1_000_000)
    {
        *exact.entry(r[0]).or_insert(0) += r[1];
    }
    assert_eq!(
        exact.into_iter().collect::<Vec<_>>(),
        (0..10).map(|p| (p, 3)).collect::<Vec<_>>(),
        "3 calls at each offset 0..10"
    );
}

/// Rates recorded by a run, used by the next: the first run of a text
/// attaches at once on the plan that needs no rates (the kernel's group
/// table, nothing weighed) and counts its hooks beside itself; when it ends
/// it records them with the groups per window it emitted. The next run of
/// the same text plans with them before attaching (no sample of its own):
/// ≈100 calls/s each a new group weigh the aggregate as the up-front sample
/// does, and that plan counts the thread's calls exactly.
#[test]
fn recorded_rates_plan_the_next_run_of_the_same_query() {
    require_root();
    let _g = kernel_lock();
    let mut opts = options(HookChoice::Tracefs, GroupMapChoice::Auto);
    opts.record_rates = Some(Duration::from_millis(200));
    let rare = Caller::start(true);
    let sql = format!("SELECT pos, COUNT(*) AS n FROM tracepoint:syscalls:sys_enter_pread64 WHERE tid = {} GROUP BY pos WINDOW(time, 1000, 1000)", rare.tid);
    let _ = std::fs::remove_file(ebql::cost::recorded::path(&sql));

    let first = Executor::with_options(opts.clone())
        .execute(&sql)
        .unwrap_or_else(|e| panic!("{}", e.render()));
    assert!(
        first.placement().is_none(),
        "nothing recorded yet: not weighed"
    );
    std::thread::sleep(Duration::from_millis(600));
    let stats = first.stop().unwrap();
    let recorded = ebql::cost::recorded::load(&sql, Duration::from_secs(60))
        .expect("the first run recorded its rates");
    let r = &recorded.rates;
    let rate = r.events_per_s[0].expect("counted at the hook");
    assert!(rate >= 50.0, "the thread's ≈100 calls/s at least: {r:?}");
    let matched = r.matched_fraction[0].expect("a share");
    assert!(matched > 0.0 && matched <= 1.0, "{r:?}");
    assert_eq!(
        r.groups_per_window,
        Some(stats.rows_emitted as f64 / stats.windows_emitted.max(1) as f64),
        "groups per window as the run emitted them"
    );
    assert!(
        recorded.syscalls.is_some(),
        "a syscall tracepoint feeds the hook rule"
    );

    let mut ex = Executor::with_options(opts);
    let c = ex.compile(&sql).unwrap();
    let rates = c.physical.rates.as_ref().expect("planned with rates");
    assert!(
        rates.source.starts_with("recorded by a run"),
        "{}",
        rates.source
    );
    let d = c.physical.placement.as_ref().expect("weighed with them");
    assert_eq!(d.chosen, Placement::User, "{}", d.why);

    let mut q = ex.execute(&sql).unwrap();
    let rx = q.take_receiver().unwrap();
    rare.exact();
    q.stop().unwrap();
    let mut exact = std::collections::BTreeMap::new();
    for r in rx
        .try_iter()
        .flat_map(|b| rows(&b, &["pos", "n"]))
        .filter(|r| r[0] < 1_000_000)
    {
        *exact.entry(r[0]).or_insert(0) += r[1];
    }
    assert_eq!(
        exact.into_iter().collect::<Vec<_>>(),
        (0..10).map(|p| (p, 3)).collect::<Vec<_>>(),
        "3 calls at each offset 0..10"
    );
    let _ = std::fs::remove_file(ebql::cost::recorded::path(&sql));
}
