//! `ebql demo`: the thesis' Figure 12 query on the built-in pread64 workload.

use super::args::BpfStatsArg;
use super::check::PreadWorkload;
use super::common::interrupt_flag;
use super::query::drive_to_end;
use ebql::sink::{self, Format};
use ebql::{Error, Executor, ExecutorOptions};
use std::io::Write;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// The Figure 12 query on a built-in 2-thread pread64 workload whose pid is filled in.
pub(super) fn demo(duration: Duration, bpf_stats: BpfStatsArg) -> Result<(), Error> {
    let w = PreadWorkload::start(duration.as_secs_f64(), None)?;
    let pid = w.pid;
    let sql = format!(
        "SELECT fd, cpu, COUNT(*), MAX(count), AVG(count)\n    FROM tracepoint/syscalls/sys_enter_pread64\n    GROUP BY fd, cpu WHERE pid == {pid} WINDOW(time, 1000, 1000);"
    );
    note!("ebql demo: workload pid {pid} (2 threads of 128-byte pread64), query:\n    {sql}\n");
    let interrupted = interrupt_flag()?;
    let q = Executor::with_options(ExecutorOptions {
        bpf_stats: bpf_stats.bpf_stats,
        ..Default::default()
    })
    .execute(&sql)?;
    // Open the gate: the probe is attached before the first pread64.
    w.open_gate()?;
    let started = Instant::now();
    let run_for = duration + Duration::from_millis(700);
    let stats = drive_to_end(
        &sql,
        q,
        sink::for_format(Format::Table, None, &sink::SinkOptions::default())
            .map_err(Error::Sink)?,
        false,
        || started.elapsed() >= run_for || interrupted.load(Ordering::Relaxed),
    )?;
    let report = w.finish(interrupted.load(Ordering::Relaxed));
    note!("workload's own count:\n  {}", report.join("\n  "));
    note!(
        "ebql: the probe counted {} pread64 calls of the workload, {} matched the filter",
        stats.events_seen,
        stats.events_matched
    );
    match stats.ns_per_event() {
        Some(ns) => note!("ebql: the probe ran {} times (every process's pread64 calls), {ns:.0} ns per run (bpf_stats)", stats.bpf_run_cnt),
        None => note!("ebql: the probe's runs for other processes and its cost are not measured: add --bpf-stats (it times every BPF program of the host while on)"),
    }
    Ok(())
}
