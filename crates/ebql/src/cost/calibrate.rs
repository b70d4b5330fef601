//! `ebql calibrate`: measures the cost model's numbers on this machine with
//! our own programs on our own workload ([`super::spin::Spinner`]: one thread
//! of this process calling `pread64` or `getppid` flat out).
//!
//! Three phases, each in interleaved rounds with medians taken over rounds:
//!
//! 1. **Hook entry** (bpf_stats off): ns per call of the loop with no
//!    program, and with an empty program on each hook type this kernel has
//!    (tracefs `sys_enter_pread64`, raw_tp and tp_btf `raw_syscalls:sys_enter`,
//!    uprobe and uretprobe on libc's `pread64` of this process only); the
//!    difference is the hook's cost. `getppid` with and without the tracefs
//!    program gives the cost a syscall tracepoint puts on other system calls.
//! 2. **Operations** (bpf_stats on for this phase only): one program per
//!    operation on `sys_enter_pread64`, all attached at once so they see the
//!    same events; each starts with the test of this process' pid, so an
//!    operation costs its program's mean run time minus its base program's,
//!    scaled by runs ÷ this process' calls (other processes' events only
//!    run the pid test, in both programs).
//! 3. **User space** (bpf_stats off): eBQL's own CPU (this process minus the
//!    loop thread) per streamed row, per window and per group per CPU, from
//!    real queries on the loop's events.

use super::probes::{self, maps, OpProbe};
use super::spin::{Call, Spinner};
use super::CalibrationFile;
use crate::{Error, Executor, ExecutorOptions, Result};
use ebql_catalog::{EventKind, EventName};
use ebql_compiler::cost::{CostModel, Hook, Linear, MapClass, MapOp, MapOpCost};
use ebql_runtime::{
    attach, AttachOptions, LoadTarget, Map, MapType, Program, RingBuffer, StatsGuard,
};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// How long and how often to measure.
#[derive(Clone, Copy, Debug)]
pub struct CalibrateOptions {
    /// Interleaved rounds per phase (medians over them).
    pub rounds: usize,
    /// Measurement time per hook configuration per round.
    pub hook_time: Duration,
    /// Measurement time per round of the operations phase.
    pub op_time: Duration,
    /// Run time of each user-space query.
    pub user_time: Duration,
}

impl Default for CalibrateOptions {
    fn default() -> Self {
        CalibrateOptions {
            rounds: 5,
            hook_time: Duration::from_millis(150),
            op_time: Duration::from_millis(400),
            user_time: Duration::from_millis(1200),
        }
    }
}

fn median(v: &[f64]) -> f64 {
    let mut s: Vec<f64> = v.iter().copied().filter(|x| x.is_finite()).collect();
    if s.is_empty() {
        return f64::NAN;
    }
    s.sort_by(|a, b| a.total_cmp(b));
    let n = s.len();
    if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    }
}

/// Least-squares line through (x, y) points.
fn fit(points: &[(f64, f64)]) -> Linear {
    let n = points.len() as f64;
    let (sx, sy) = points
        .iter()
        .fold((0.0, 0.0), |(a, b), (x, y)| (a + x, b + y));
    let (mx, my) = (sx / n, sy / n);
    let sxx: f64 = points.iter().map(|(x, _)| (x - mx) * (x - mx)).sum();
    let sxy: f64 = points.iter().map(|(x, y)| (x - mx) * (y - my)).sum();
    let slope = if sxx > 0.0 { sxy / sxx } else { 0.0 };
    Linear {
        base_ns: (my - slope * mx).max(0.0),
        per_byte_ns: slope.max(0.0),
    }
}

/// Whether bpf_stats is on for the whole machine right now (another process may have turned it on).
fn bpf_stats_on() -> bool {
    std::fs::read_to_string("/proc/sys/kernel/bpf_stats_enabled").is_ok_and(|s| s.trim() == "1")
}

fn io(what: &str) -> impl FnOnce(std::io::Error) -> Error + '_ {
    move |e| {
        Error::Runtime(ebql_runtime::RuntimeError::Sys {
            what: what.to_string(),
            source: e,
        })
    }
}

/// An empty program attached to one hook, for phase 1.
struct HookProbe {
    name: &'static str,
    hook: Option<Hook>,
    call: Call,
    kind: EventKind,
    attach: ebql_catalog::Attach,
    prog: Program,
}

/// Runs the calibration; `progress` gets one line per step (the CLI prints them on stderr).
pub fn calibrate(
    opts: CalibrateOptions,
    progress: &mut dyn FnMut(&str),
) -> Result<CalibrationFile> {
    let started = Instant::now();
    let mut model = CostModel::built_in();
    let mut raw: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    let mut notes = Vec::new();
    let mut measured = Vec::new();
    let pid = std::process::id();
    let mut ex = Executor::with_options(ExecutorOptions {
        bpf_stats: false,
        ..Default::default()
    });
    let catalog = ebql_catalog::Catalog::open().map_err(Error::Catalog)?;
    let spin = Spinner::start(Call::Pread).map_err(io("starting the calibration loop"))?;
    let ev = |s: &str| EventName::parse(s).map_err(Error::Catalog);

    // Phase 1: hook entry.
    let mut hooks = vec![];
    let candidates: [(&'static str, Option<Hook>, Call, &str); 7] = [
        ("none", None, Call::Pread, ""),
        (
            "tracefs_tracepoint",
            Some(Hook::TracefsTracepoint),
            Call::Pread,
            "tracepoint:syscalls:sys_enter_pread64",
        ),
        (
            "raw_tracepoint",
            Some(Hook::RawTracepoint),
            Call::Pread,
            "raw_tp:raw_syscalls:sys_enter",
        ),
        (
            "tp_btf",
            Some(Hook::TpBtf),
            Call::Pread,
            "tp_btf:raw_syscalls:sys_enter",
        ),
        (
            "uprobe",
            Some(Hook::Uprobe),
            Call::Pread,
            "uprobe:libc:pread64",
        ),
        (
            "uretprobe",
            Some(Hook::Uretprobe),
            Call::Pread,
            "uretprobe:libc:pread64",
        ),
        (
            "getppid_tracefs",
            None,
            Call::Getppid,
            "tracepoint:syscalls:sys_enter_pread64",
        ),
    ];
    for hook in Hook::ALL {
        if let Some((_, why)) = ebql_runtime::features::missing(hook.kind()) {
            model.hook_entry_ns.insert(hook, None);
            model.hooks_absent.push(hook);
            progress(&format!(
                "hook {}: absent on this kernel ({why})",
                hook.label()
            ));
        }
    }
    for (name, hook, call, event) in candidates {
        if event.is_empty() {
            continue;
        }
        let name_ev = ev(event)?;
        if hook.is_some_and(|h| model.hooks_absent.contains(&h)) {
            continue;
        }
        let schema = match catalog.event(&name_ev) {
            Ok(s) => s,
            Err(e) => {
                notes.push(format!("{name}: not measured ({e})"));
                progress(&format!("hook {name}: not measured ({e})"));
                continue;
            }
        };
        let prog = Program::load(
            &format!("ebql_cal_{}", &name[..name.len().min(6)]),
            LoadTarget::of(name_ev.kind, &schema.attach),
            &probes::empty().bytes(),
            &[],
        )?;
        hooks.push(HookProbe {
            name,
            hook,
            call,
            kind: name_ev.kind,
            attach: schema.attach,
            prog,
        });
    }
    if bpf_stats_on() {
        notes.push("bpf_stats was already on (another process) when hook costs were measured: they include its overhead".into());
    }
    progress(&format!(
        "hook entry: {} configurations × {} rounds of {} ms (bpf_stats off)…",
        hooks.len() + 2,
        opts.rounds,
        opts.hook_time.as_millis()
    ));
    // Round-robin: (config name, call, index of the probe).
    let mut configs: Vec<(&str, Call, Option<usize>)> = vec![
        ("none", Call::Pread, None),
        ("getppid_none", Call::Getppid, None),
    ];
    configs.extend(
        hooks
            .iter()
            .enumerate()
            .map(|(i, h)| (h.name, h.call, Some(i))),
    );
    let mut per_call: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
    for round in 0..opts.rounds {
        for k in 0..configs.len() {
            let (name, call, probe) = configs[(k + round) % configs.len()];
            spin.set_call(call);
            let link = match probe {
                Some(i) => {
                    let h = &hooks[i];
                    let scope = AttachOptions {
                        pid: matches!(h.kind, EventKind::Uprobe | EventKind::Uretprobe)
                            .then_some(pid),
                    };
                    Some(attach(&h.prog, h.kind, &h.attach, &scope)?)
                }
                None => None,
            };
            std::thread::sleep(Duration::from_millis(20));
            per_call
                .entry(name)
                .or_default()
                .push(spin.ns_per_call(opts.hook_time));
            drop(link);
        }
    }
    spin.set_call(Call::Pread);
    for (name, v) in &per_call {
        raw.insert(format!("hook:{name}:ns_per_call"), v.clone());
    }
    let diff = |a: &str, b: &str| -> f64 {
        let (x, y) = (&per_call[a], &per_call[b]);
        median(&x.iter().zip(y).map(|(p, q)| p - q).collect::<Vec<_>>())
    };
    for h in &hooks {
        if let Some(hook) = h.hook {
            let added = diff(h.name, "none");
            model.hook_entry_ns.insert(hook, Some(added));
            measured.push(format!("hook:{hook:?}"));
            progress(&format!("  {:<20} +{added:.0} ns per call", hook.label()));
        }
    }
    if per_call.contains_key("getppid_tracefs") {
        model.untraced_syscall_ns = diff("getppid_tracefs", "getppid_none");
        measured.push("untraced_syscall_ns".into());
        progress(&format!(
            "  other syscall (getppid) with a syscall tracepoint on: +{:.0} ns",
            model.untraced_syscall_ns
        ));
    }
    drop(hooks);

    // Phase 2: operations, bpf_stats on.
    let pread = catalog
        .event(&ev("tracepoint:syscalls:sys_enter_pread64")?)
        .map_err(Error::Catalog)?;
    let buf_off = pread
        .fields
        .iter()
        .find(|f| f.name == "buf")
        .map(|f| f.offset as i16)
        .ok_or_else(|| Error::Internal("sys_enter_pread64 has no buf field".into()))?;
    let cpus = ebql_runtime::num_possible_cpus()?;
    let cal_maps = vec![
        Map::create("ebql_cal_pch", MapType::PercpuHash, 8, 8, 16)?,
        Map::create("ebql_cal_hash", MapType::Hash, 8, 8, 1024)?,
        Map::create("ebql_cal_arr", MapType::Array, 4, 8, 1)?,
        Map::create("ebql_cal_pca", MapType::PercpuArray, 4, 8, 1)?,
        Map::create("ebql_cal_task", MapType::TaskStorage, 4, 8, 0)?,
        Map::create("ebql_cal_rb", MapType::RingBuf, 0, 0, probes::RINGBUF_BYTES)?,
        Map::create(
            "ebql_cal_stk",
            MapType::StackTrace,
            4,
            8 * ebql_compiler::contract::STACK_DEPTH,
            1024,
        )?,
        Map::create("ebql_cal_cyc", MapType::Hash, 8, 8, 1024)?,
        Map::create("ebql_cal_buf", MapType::PercpuArray, 4, 1024, 1)?,
    ];
    // The per-CPU hash's key 0 is created by the update program's first run (before the rounds start).
    cal_maps[maps::HASH as usize].update(&0u64.to_ne_bytes(), &0u64.to_ne_bytes())?;
    let fds: Vec<i32> = cal_maps.iter().map(Map::fd).collect();
    let mut ops: Vec<OpProbe> = probes::op_probes(pid, buf_off);
    ops.insert(
        0,
        OpProbe {
            key: "empty".into(),
            base: "empty",
            reps: 1,
            program: probes::empty(),
        },
    );
    let mut loaded = Vec::new();
    for (i, op) in ops.iter().enumerate() {
        loaded.push(Program::load(
            &format!("ebql_cal_op{i}"),
            LoadTarget::TRACEPOINT,
            &op.program.bytes(),
            &fds,
        )?);
    }
    let mut rb = RingBuffer::new(&cal_maps[maps::RINGBUF as usize], 8)?;
    let stats = StatsGuard::enable()?;
    progress(&format!("operations: {} programs on sys_enter_pread64 × {} rounds of {} ms (bpf_stats on for this phase only: every BPF program of the host pays its overhead meanwhile)…", ops.len(), opts.rounds, opts.op_time.as_millis()));
    let links = loaded
        .iter()
        .map(|p| {
            attach(
                p,
                EventKind::Tracepoint,
                &pread.attach,
                &AttachOptions::default(),
            )
        })
        .collect::<std::result::Result<Vec<_>, _>>()?;
    std::thread::sleep(Duration::from_millis(50));
    let mut per_run: Vec<Vec<f64>> = vec![Vec::new(); ops.len()];
    let mut runs: Vec<Vec<f64>> = vec![Vec::new(); ops.len()];
    let mut ours = Vec::new();
    let mut records = 0usize;
    for _ in 0..opts.rounds {
        let before = loaded
            .iter()
            .map(Program::stats)
            .collect::<std::result::Result<Vec<_>, _>>()?;
        let c0 = spin.calls();
        let t = Instant::now();
        rb.drain()?;
        let mut got = 0usize;
        while t.elapsed() < opts.op_time {
            std::thread::sleep(Duration::from_millis(15));
            got += rb.drain()?.len() / 8;
        }
        // The loop's count is read before the programs' and after it at the
        // start, so the window of runs holds every counted call (the loop
        // keeps calling while the programs' stats are read one by one), but
        // for up to 63 of the batch in flight at the start: the loop counts
        // 64 calls at a time.
        let c1 = spin.calls();
        let after = loaded
            .iter()
            .map(Program::stats)
            .collect::<std::result::Result<Vec<_>, _>>()?;
        records += got;
        ours.push((c1 - c0) as f64);
        for (i, (a, b)) in after.iter().zip(&before).enumerate() {
            let n = a.run_cnt.saturating_sub(b.run_cnt);
            per_run[i].push(a.run_time_ns.saturating_sub(b.run_time_ns) as f64 / n.max(1) as f64);
            runs[i].push(n as f64);
        }
    }
    drop(links);
    drop(stats);
    let expected_records = 2.0 * ours.iter().sum::<f64>();
    if (records as f64) < 0.99 * expected_records {
        notes.push(format!("ring-buffer records: {records} consumed of ~{expected_records:.0} written (failed reservations make the record cost look cheaper)"));
    }
    raw.insert("ops:our_calls".into(), ours.clone());
    for (i, op) in ops.iter().enumerate() {
        raw.insert(format!("op:{}:ns_per_run", op.key), per_run[i].clone());
        raw.insert(format!("op:{}:runs", op.key), runs[i].clone());
    }
    let index = |key: &str| ops.iter().position(|o| o.key == key).expect("probe exists");
    // Per round: (mean run time − the base's) × runs ÷ our calls = the cost on our events.
    let raw_op = |i: usize| -> Vec<f64> {
        let b = index(ops[i].base);
        (0..opts.rounds)
            .map(|r| (per_run[i][r] - per_run[b][r]) * runs[i][r] / ours[r].max(1.0))
            .collect()
    };
    model.stats_overhead_ns = median(&per_run[index("empty")]);
    measured.push("stats_overhead_ns".into());
    let pidtest = median(
        &(0..opts.rounds)
            .map(|r| per_run[index("pidtest")][r] - per_run[index("empty")][r])
            .collect::<Vec<_>>(),
    );
    raw.insert("pid_test_ns".into(), vec![pidtest]);
    let insns_probe = index("insns");
    let extra_insns = |i: usize| ops[i].insns() as f64 - ops[index(ops[i].base)].insns() as f64;
    model.insn_ns = (median(&raw_op(insns_probe)) / extra_insns(insns_probe)).max(0.0);
    measured.push("insn_ns".into());
    // An operation's cost: its raw cost minus the instructions around it, per repetition.
    let op_ns = |key: &str| -> f64 {
        let i = index(key);
        ((median(&raw_op(i)) - extra_insns(i) * model.insn_ns) / ops[i].reps as f64).max(0.0)
    };
    for (name, _) in probes::HELPERS {
        model
            .helper_ns
            .insert(name.to_string(), op_ns(&format!("helper:{name}")));
        measured.push(format!("helper:{name}"));
    }
    let task_btf = model.helper_by_name("bpf_get_current_task_btf");
    let mut map_ops = Vec::new();
    for (class, name) in [
        (MapClass::PercpuHash, "percpu_hash"),
        (MapClass::Hash, "hash"),
        (MapClass::Array, "array"),
        (MapClass::PercpuArray, "percpu_array"),
    ] {
        for (op, opname) in [(MapOp::Lookup, "lookup"), (MapOp::Update, "update")] {
            map_ops.push(MapOpCost {
                map: class,
                op,
                ns: op_ns(&format!("map:{name}:{opname}")),
            });
            measured.push(format!("map:{class:?}:{op:?}"));
        }
    }
    let hash_update = map_ops
        .iter()
        .find(|c| c.map == MapClass::Hash && c.op == MapOp::Update)
        .map_or(0.0, |c| c.ns);
    map_ops.push(MapOpCost {
        map: MapClass::Hash,
        op: MapOp::Delete,
        ns: (op_ns("map:hash:insert+delete") - hash_update).max(0.0),
    });
    map_ops.push(MapOpCost {
        map: MapClass::TaskStorage,
        op: MapOp::Lookup,
        ns: (op_ns("map:task_storage:lookup") - task_btf).max(0.0),
    });
    measured.extend([
        "map:Hash:Delete".to_string(),
        "map:TaskStorage:Lookup".to_string(),
    ]);
    // Classes and operations not measured keep their defaults.
    for d in &model.map_ops {
        if !map_ops.iter().any(|c| c.map == d.map && c.op == d.op) {
            map_ops.push(*d);
        }
    }
    model.map_ops = map_ops;
    model.str_read = fit(&probes::STR_SIZES
        .iter()
        .map(|&n| (n as f64, op_ns(&format!("str:{n}"))))
        .collect::<Vec<_>>());
    model.probe_read = fit(&probes::READ_SIZES
        .iter()
        .map(|&n| (n as f64, op_ns(&format!("read:{n}"))))
        .collect::<Vec<_>>());
    model.ringbuf_record = fit(&probes::RECORD_SIZES
        .iter()
        .map(|&n| (n as f64, op_ns(&format!("ringbuf:{n}"))))
        .collect::<Vec<_>>());
    model.stackid_user_ns = op_ns("stackid:user");
    model.stackid_kernel_ns = op_ns("stackid:kernel");
    measured.extend(
        [
            "str_read",
            "probe_read",
            "ringbuf_record",
            "stackid_user_ns",
            "stackid_kernel_ns",
        ]
        .map(String::from),
    );
    progress(&format!(
        "  bpf_stats overhead {:.0} ns/run, pid test {pidtest:.1} ns, {:.2} ns per instruction, per-CPU hash lookup {:.0} ns, ring-buffer record {:.0} ns + {:.2} ns/B, string read {:.0} ns + {:.2} ns/B",
        model.stats_overhead_ns,
        model.insn_ns,
        model.map_op_ns(MapClass::PercpuHash, MapOp::Lookup),
        model.ringbuf_record.base_ns,
        model.ringbuf_record.per_byte_ns,
        model.str_read.base_ns,
        model.str_read.per_byte_ns
    ));
    drop(rb);
    drop(loaded);
    drop(cal_maps);

    // Phase 3: user space.
    progress(&format!(
        "user space: 6 queries on the loop's events, {} ms each (bpf_stats off)…",
        opts.user_time.as_millis()
    ));
    let nothing = format!(
        "SELECT fd, count FROM tracepoint:syscalls:sys_enter_pread64 WHERE pid = {}",
        u32::MAX
    );
    let idle_short = user_run(&mut ex, &spin, &nothing, opts.user_time / 3)?;
    let idle_long = user_run(&mut ex, &spin, &nothing, opts.user_time)?;
    let stream = user_run(
        &mut ex,
        &spin,
        &format!(
            "SELECT fd, count, pos FROM tracepoint:syscalls:sys_enter_pread64 WHERE pid = {pid}"
        ),
        opts.user_time,
    )?;
    let one = user_run(&mut ex, &spin, &format!("SELECT COUNT(*) FROM tracepoint:syscalls:sys_enter_pread64 WHERE pid = {pid} WINDOW(time, 100, 100)"), opts.user_time)?;
    let grouped = format!("SELECT pos, COUNT(*) FROM tracepoint:syscalls:sys_enter_pread64 WHERE pid = {pid} GROUP BY pos WINDOW(time, 100, 100)");
    let many = user_run(&mut ex, &spin, &grouped, opts.user_time)?;
    // The same aggregate placed in user space: rows streamed, DataFusion groups them.
    let mut user_agg = ExecutorOptions {
        bpf_stats: false,
        ..Default::default()
    };
    user_agg.codegen.choices.aggregate = ebql_compiler::choose::AggregateChoice::User;
    let agg = user_run(
        &mut Executor::with_options(user_agg),
        &spin,
        &grouped,
        opts.user_time,
    )?;
    for (name, r) in [
        ("idle_short", &idle_short),
        ("idle_long", &idle_long),
        ("stream", &stream),
        ("groups_1", &one),
        ("groups_many", &many),
        ("user_agg", &agg),
    ] {
        raw.insert(
            format!("user:{name}:cpu_ns,rows,windows,seconds,events"),
            vec![
                r.cpu_ns,
                r.rows as f64,
                r.windows as f64,
                r.seconds,
                r.events as f64,
            ],
        );
    }
    // Idle: CPU = fixed + seconds × idle rate, from the two lengths.
    let idle_rate = ((idle_long.cpu_ns - idle_short.cpu_ns)
        / (idle_long.seconds - idle_short.seconds))
        .max(0.0);
    model.user_idle_ns_per_s = idle_rate;
    model.user_query_ns = (idle_long.cpu_ns - idle_rate * idle_long.seconds).max(0.0);
    let base = |r: &UserRun| model.user_query_ns + model.user_idle_ns_per_s * r.seconds;
    if stream.rows > 0 {
        model.user_row_ns = ((stream.cpu_ns - base(&stream)) / stream.rows as f64).max(0.0);
    }
    if one.windows > 0 && many.windows > 0 {
        model.user_window_ns = ((one.cpu_ns - base(&one)) / one.windows as f64).max(0.0);
        let groups = many.rows as f64 / many.windows as f64;
        let extra = (many.cpu_ns - base(&many)) / many.windows as f64 - model.user_window_ns;
        model.user_merge_ns = (extra / (groups.max(1.0) * cpus as f64)).max(0.0);
        progress(&format!(
            "  {:.1} ms per query, {:.1} ms/s polling, {:.0} ns per streamed row, {:.0} µs per window, {:.0} ns per group per CPU ({groups:.0} groups, {cpus} CPUs)",
            model.user_query_ns / 1e6,
            model.user_idle_ns_per_s / 1e6,
            model.user_row_ns,
            model.user_window_ns / 1e3,
            model.user_merge_ns
        ));
    }
    if agg.events > 0 {
        // Every event crosses as a row and is grouped; the window's fixed part is the kernel plan's.
        model.user_agg_row_ns =
            ((agg.cpu_ns - base(&agg) - agg.windows as f64 * model.user_window_ns)
                / agg.events as f64)
                .max(0.0);
        progress(&format!(
            "  {:.0} ns per row aggregated in user space",
            model.user_agg_row_ns
        ));
    }
    measured.extend(
        [
            "user_query_ns",
            "user_idle_ns_per_s",
            "user_row_ns",
            "user_window_ns",
            "user_merge_ns",
            "user_agg_row_ns",
        ]
        .map(String::from),
    );
    drop(spin);
    let host = super::machine_name();
    let kernel = super::kernel_release();
    let date = chrono::Utc::now().format("%Y-%m-%d %H:%M UTC").to_string();
    model.source = format!("calibrated on {host}, kernel {kernel}, {date}");
    model.measured = measured;
    Ok(CalibrationFile {
        format: super::FORMAT,
        date,
        kernel,
        machine: host,
        seconds: started.elapsed().as_secs_f64(),
        rounds: opts.rounds,
        model,
        raw,
        notes,
    })
}

/// What one user-space calibration query cost.
struct UserRun {
    /// ebql's CPU (this process minus the loop thread), ns.
    cpu_ns: f64,
    /// From the attach to the end of the stop, s.
    seconds: f64,
    rows: u64,
    windows: u64,
    /// Events that passed the filters and reached user space (ring-buffer drops excluded).
    events: u64,
}

fn process_cpu_ns() -> f64 {
    // SAFETY: zeroed rusage filled by the kernel.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let t = |tv: libc::timeval| tv.tv_sec as f64 * 1e9 + tv.tv_usec as f64 * 1e3;
    t(ru.ru_utime) + t(ru.ru_stime)
}

/// Runs `sql` for `d` and measures ebql's CPU from the attach to the last window.
fn user_run(ex: &mut Executor, spin: &Spinner, sql: &str, d: Duration) -> Result<UserRun> {
    let mut q = ex.execute(sql)?;
    let rx = q.take_receiver().expect("fresh query has its receiver");
    let (cpu0, loop0) = (process_cpu_ns(), spin.cpu_ns());
    let t = Instant::now();
    let mut rows = 0u64;
    while t.elapsed() < d {
        if let Ok(b) = rx.recv_timeout(Duration::from_millis(20)) {
            rows += b.num_rows() as u64;
        }
    }
    let stats = q.stop()?;
    while let Ok(b) = rx.try_recv() {
        rows += b.num_rows() as u64;
    }
    let cpu = (process_cpu_ns() - cpu0) - (spin.cpu_ns() as f64 - loop0 as f64);
    Ok(UserRun {
        cpu_ns: cpu.max(0.0),
        seconds: t.elapsed().as_secs_f64(),
        rows: rows.max(stats.rows_emitted),
        windows: stats.windows_emitted,
        events: stats
            .events_matched
            .saturating_sub(stats.dropped_ringbuf_full),
    })
}
