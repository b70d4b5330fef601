//! `ebql check`: a query under the differential oracle (or, with --cost,
//! its predicted cost against the measured one), on the built-in pread64
//! workload or the machine's own events.

use super::args::{BpfStatsArg, LimitArgs, PlanArgs};
use super::common::{interrupt_flag, io_err, Busy};
use ebql::{Error, Executor, ExecutorOptions};
use std::io::Write;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// `ebql check`: prints each window's verdict as it closes, then the summary.
pub(super) fn check(
    sql: &str,
    duration: Option<f64>,
    workload: bool,
    limits: LimitArgs,
    plan: PlanArgs,
    stats: BpfStatsArg,
    oracle: ebql::check::CheckOptions,
) -> Result<(), Error> {
    let interrupted = interrupt_flag()?;
    let run_for = duration.map(Duration::from_secs_f64);
    let mut opts = ExecutorOptions {
        bpf_stats: stats.bpf_stats,
        ..Default::default()
    };
    limits.apply(&mut opts);
    plan.apply(&mut opts);
    let mut ex = Executor::with_options(opts);
    let (sql, mut load) = if workload {
        let secs = duration.unwrap_or(5.0);
        let w = PreadWorkload::start(secs, Some(CHECK_WORKLOAD_RATE))?;
        (
            sql.replace("$pid", &w.pid.to_string())
                .replace("$PID", &w.pid.to_string()),
            Some(w),
        )
    } else {
        (sql.to_string(), None)
    };
    let run_for = run_for.or(load.as_ref().map(|_| Duration::from_secs(5)));
    let mut c = {
        let _busy = Busy::start("compiling the query and its reference, loading and attaching");
        ex.check(&sql, oracle)?
    };
    match c.second_reference() {
        ebql::check::SecondReference::Used(v) => note!("ebql check: attached; the kernel plan, DataFusion and DuckDB {v} evaluate the same events, window by window"),
        ebql::check::SecondReference::NotUsed(why) => note!("ebql check: attached; the kernel plan and DataFusion evaluate the same events, window by window (DuckDB not used: {why})"),
    }
    if let Some(w) = load.as_mut() {
        w.open_gate()?;
    }
    let started = Instant::now();
    let mut shown = 0usize;
    let print = |i: usize, w: &ebql::check::WindowResult| match &w.verdict {
        ebql::check::Verdict::Agree => match &w.kernel_error {
            Some(e) => println!("window {}: agree (failed on both sides: {e})", i + 1),
            None => println!("window {}: agree ({} rows)", i + 1, w.kernel_rows),
        },
        ebql::check::Verdict::Disagree { diff } => println!(
            "window {}: DISAGREE (kernel {} rows, reference {} rows)\n{diff}",
            i + 1,
            w.kernel_rows,
            w.reference_rows
        ),
        ebql::check::Verdict::Inconclusive { reason } => {
            println!("window {}: inconclusive: {reason}", i + 1)
        }
    };
    while run_for.is_none_or(|d| started.elapsed() < d)
        && !interrupted.load(Ordering::Relaxed)
        && !c.is_finished()
    {
        if let Some(w) = c.next_window(Duration::from_millis(50)) {
            print(shown, &w);
            shown += 1;
        }
    }
    let report = c.stop()?;
    for (i, w) in report.windows.iter().enumerate().skip(shown) {
        print(i, w);
    }
    if let Some(w) = load {
        w.finish(interrupted.load(Ordering::Relaxed));
    }
    note!("ebql: stats {}", report.stats.to_json());
    let disagree = !report.agrees();
    println!("{}", report.to_string().lines().last().unwrap_or_default());
    if disagree {
        std::process::exit(3);
    }
    if let Some(e) =
        Error::windows_failed(report.stats.windows_failed, report.stats.windows_emitted)
    {
        return Err(e);
    }
    Ok(())
}

/// `ebql check --cost`: runs the query on the built-in workload (or the
/// machine's events) with bpf_stats on, and prints predicted vs measured.
pub(super) fn check_cost(
    sql: &str,
    duration: Option<f64>,
    machine: bool,
    limits: LimitArgs,
    plan: PlanArgs,
    max_error: Option<f64>,
) -> Result<(), Error> {
    let interrupted = interrupt_flag()?;
    let secs = duration.unwrap_or(2.0);
    let mut opts = ExecutorOptions::default();
    limits.apply(&mut opts);
    // The plan measured is the one the flags ask for (hook, group table, placement).
    plan.apply(&mut opts);
    let loaded = ebql::cost::load();
    if let Some(why) = &loaded.ignored {
        note!("ebql: cost model: ignored {why}");
    }
    let model = loaded.model;
    let load = if machine {
        None
    } else {
        Some(PreadWorkload::start(secs, None)?)
    };
    let sql = match &load {
        Some(w) => sql
            .replace("$pid", &w.pid.to_string())
            .replace("$PID", &w.pid.to_string()),
        None => sql.to_string(),
    };
    note!(
        "ebql check --cost: bpf_stats on for this measurement only (while it is on, every BPF program of the host pays ≈{:.0} ns more per run); {}",
        model.stats_overhead_ns,
        match &load {
            Some(w) => format!("built-in workload: pid {}, 2 threads of 128-byte pread64 for {secs} s", w.pid),
            None => format!("the machine's own events for {secs} s"),
        }
    );
    let started = std::cell::Cell::new(None);
    let load = std::cell::RefCell::new(load);
    let run = ebql::cost::measure::check_cost(
        &sql,
        &opts,
        &model,
        || {
            started.set(Some(Instant::now()));
            match &*load.borrow() {
                Some(w) => w.open_gate(),
                None => Ok(()),
            }
        },
        || {
            let elapsed = started.get().map_or(Duration::ZERO, |t| t.elapsed());
            let over = match load.borrow_mut().as_mut() {
                // Stop once the workload has exited, so every call it made is counted
                // (a busy machine can stretch its run well past `secs`).
                Some(w) => {
                    w.child.try_wait().ok().flatten().is_some()
                        || elapsed >= Duration::from_secs_f64(4.0 * secs + 30.0)
                }
                None => elapsed >= Duration::from_secs_f64(secs),
            };
            over || interrupted.load(Ordering::Relaxed)
        },
    );
    let workload_calls = load.into_inner().map(|w| {
        let lines = w.finish(interrupted.load(Ordering::Relaxed));
        lines
            .iter()
            .filter_map(|l| l.strip_prefix("fd "))
            .filter_map(|l| l.split_whitespace().nth(2)?.parse::<u64>().ok())
            .sum::<u64>()
    });
    let run = run?;
    print!("{}", run.report(&model));
    if let Some(n) = workload_calls {
        println!("workload: {n} pread64 calls");
    }
    note!("ebql: cost {}", run.to_json(&model, workload_calls));
    let Some(error) = run.error(&model) else {
        println!("no program ran: nothing to compare");
        return Ok(());
    };
    match max_error {
        Some(limit) if 100.0 * error.abs() > limit => {
            println!(
                "FAIL: predicted run time off by {:+.1}% (limit {limit}%)",
                100.0 * error
            );
            std::process::exit(1);
        }
        Some(limit) => println!(
            "ok: predicted run time off by {:+.1}% (limit {limit}%)",
            100.0 * error
        ),
        None => println!("predicted run time off by {:+.1}%", 100.0 * error),
    }
    Ok(())
}

/// Calls/s per thread of `ebql check --workload`: the reference evaluates
/// every event in user space, and a flat-out workload outruns a debug build.
const CHECK_WORKLOAD_RATE: u64 = 20_000;

/// The built-in 2-thread pread64 workload, held at a gate until the probe is attached.
pub(super) struct PreadWorkload {
    child: std::process::Child,
    gate: ebql_workload::Gate,
    pub(super) pid: u32,
    pub(super) lines: std::io::Lines<std::io::BufReader<std::process::ChildStdout>>,
}

impl PreadWorkload {
    /// Starts it for `seconds` (plus 0.5 s of slack), flat out or paced to
    /// `rate` calls/s per thread.
    pub(super) fn start(seconds: f64, rate: Option<u64>) -> Result<PreadWorkload, Error> {
        use std::io::BufRead;
        let exe =
            std::env::current_exe().map_err(|e| io_err("finding our executable".into(), e))?;
        let gate = ebql_workload::Gate::create(
            std::env::temp_dir().join(format!("ebql-demo-{}.gate", std::process::id())),
        )
        .map_err(|e| io_err("creating the workload gate FIFO".into(), e))?;
        let mut child = std::process::Command::new(&exe)
            .args([
                "workload",
                "pread-loop",
                "--threads",
                "2",
                "--size",
                "128",
                "--seconds",
            ])
            .arg((seconds + 0.5).to_string())
            .args(
                rate.map(|r| ["--rate".to_string(), r.to_string()])
                    .into_iter()
                    .flatten(),
            )
            .arg("--gate")
            .arg(gate.path())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .map_err(|e| io_err("starting the workload".into(), e))?;
        let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
        let pid: u32 = lines
            .next()
            .and_then(|l| l.ok())
            .and_then(|l| l.strip_prefix("ready ").and_then(|p| p.trim().parse().ok()))
            .ok_or_else(|| Error::Internal("the workload did not report its pid".into()))?;
        Ok(PreadWorkload {
            child,
            gate,
            pid,
            lines,
        })
    }

    /// Lets the workload start (the probe is attached by now).
    pub(super) fn open_gate(&self) -> Result<(), Error> {
        self.gate
            .open()
            .map_err(|e| io_err("opening the gate".into(), e))
    }

    /// Waits for the workload (kills it if interrupted) and returns its own report lines.
    pub(super) fn finish(mut self, kill: bool) -> Vec<String> {
        if kill {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
        self.lines.by_ref().map_while(|l| l.ok()).collect()
    }
}

impl Drop for PreadWorkload {
    /// A check that fails before the gate opens (a bad query) must not
    /// leave the workload waiting at it, holding our stdout open.
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}
