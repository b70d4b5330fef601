//! `ebql check --cost`: run a query briefly, measure what it cost, and set
//! the measurement next to the model's prediction.
//!
//! Measured: each program's mean run time from bpf_stats (turned on for
//! this run only: while it is on, every BPF program of the host pays
//! [`CostModel::stats_overhead_ns`] more per run), its runs, the events the
//! query matched, and ebql's own CPU (user + system, getrusage, from the
//! attach to the stop). The prediction is made for the rates the run
//! itself saw (runs and matched share), so the comparison checks the
//! per-event model, not a rate estimate.

use crate::{Error, Executor, ExecutorOptions, QueryStats, Result};
use ebql_compiler::contract::OutputLayout;
use ebql_compiler::cost::{predict, CostModel, Prediction, Rates};
use ebql_compiler::CompiledQuery;
use std::fmt::Write;
use std::time::{Duration, Instant};

/// One program's bpf_stats over the run.
#[derive(Clone, Debug, PartialEq)]
pub struct ProgramRun {
    /// Program name.
    pub name: String,
    /// Runs (every event at its hook).
    pub runs: u64,
    /// Total run time, ns.
    pub run_time_ns: u64,
}

impl ProgramRun {
    /// Mean ns per run.
    pub fn ns_per_run(&self) -> f64 {
        self.run_time_ns as f64 / self.runs.max(1) as f64
    }
}

/// What a run of the query cost, measured.
#[derive(Clone, Debug)]
pub struct Measured {
    /// Run time from the attach to the stop, s.
    pub seconds: f64,
    /// Per program (start, then end for a pairing).
    pub programs: Vec<ProgramRun>,
    /// The query's stats at the stop (events matched, rows, windows, drops).
    pub stats: QueryStats,
    /// ebql's CPU (user + system) from the attach to the stop, ns.
    pub cpu_ns: f64,
}

/// A prediction next to a measurement.
#[derive(Clone, Debug)]
pub struct CostCheck {
    /// What was measured.
    pub measured: Measured,
    /// The model's prediction at the rates the run saw.
    pub prediction: Prediction,
    /// The rates the run saw.
    pub rates: Rates,
}

fn process_cpu_ns() -> f64 {
    // SAFETY: zeroed rusage filled by the kernel.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let t = |tv: libc::timeval| tv.tv_sec as f64 * 1e9 + tv.tv_usec as f64 * 1e3;
    t(ru.ru_utime) + t(ru.ru_stime)
}

/// Runs `sql` with bpf_stats on until `done()` says stop (checked every
/// 20 ms; `attached` runs once the probes are attached, e.g. to open a
/// workload's gate), then predicts its cost with `model` at the rates it saw.
///
/// Errors: as running the query (bad query: exit 2; kernel refusals).
pub fn check_cost(
    sql: &str,
    opts: &ExecutorOptions,
    model: &CostModel,
    attached: impl FnOnce() -> Result<()>,
    mut done: impl FnMut() -> bool,
) -> Result<CostCheck> {
    let mut ex = Executor::with_options(ExecutorOptions {
        bpf_stats: true,
        ..opts.clone()
    });
    let q: CompiledQuery = ex.compile(sql)?;
    let mut running = ex.execute(sql)?;
    let rx = running
        .take_receiver()
        .ok_or_else(|| Error::Internal("a fresh query has its receiver".into()))?;
    let ids = running.prog_ids().to_vec();
    let before = ids
        .iter()
        .map(|&id| ebql_runtime::prog_stats_by_id(id))
        .collect::<std::result::Result<Vec<_>, _>>()?;
    let cpu0 = process_cpu_ns();
    let t = Instant::now();
    attached()?;
    while !done() && !running.is_finished() {
        let _ = rx.recv_timeout(Duration::from_millis(20));
    }
    let after = ids
        .iter()
        .map(|&id| ebql_runtime::prog_stats_by_id(id))
        .collect::<std::result::Result<Vec<_>, _>>()?;
    let stats = running.stop()?;
    while rx.try_recv().is_ok() {}
    let cpu_ns = process_cpu_ns() - cpu0;
    let seconds = t.elapsed().as_secs_f64();
    let programs: Vec<ProgramRun> = q
        .code
        .programs
        .iter()
        .zip(after.iter().zip(&before))
        .map(|(p, (a, b))| ProgramRun {
            name: p.name.clone(),
            runs: a.run_cnt - b.run_cnt,
            run_time_ns: a.run_time_ns - b.run_time_ns,
        })
        .collect();
    let main_runs = programs.last().map_or(0, |p| p.runs);
    let fraction =
        (main_runs > 0).then(|| (stats.events_matched as f64 / main_runs as f64).min(1.0));
    let rates = Rates {
        events_per_s: programs
            .iter()
            .map(|p| Some(p.runs as f64 / seconds))
            .collect(),
        matched_fraction: programs.iter().map(|_| fraction).collect(),
        syscalls_per_s: None,
        groups_per_window: matches!(q.code.layout, OutputLayout::Groups { .. })
            .then(|| stats.rows_emitted as f64 / stats.windows_emitted.max(1) as f64)
            .filter(|g| *g > 0.0),
        cpus: ebql_runtime::num_possible_cpus()?,
        source: format!("measured over the {seconds:.1} s run"),
        sampled_ms: (seconds * 1e3) as u64,
    };
    let prediction = predict(model, &q, &rates);
    Ok(CostCheck {
        measured: Measured {
            seconds,
            programs,
            stats,
            cpu_ns,
        },
        prediction,
        rates,
    })
}

impl CostCheck {
    /// Program `i`'s share of runs that pass its filters (1 without filters
    /// or a sampled share) and its predicted ns per run as bpf_stats counts
    /// it (the program at that share plus bpf_stats' own overhead).
    fn predicted_per_run(
        &self,
        i: usize,
        p: &ebql_compiler::cost::ProgramCost,
        model: &CostModel,
    ) -> (f64, f64) {
        let f = if p.filtered {
            self.rates
                .matched_fraction
                .get(i)
                .copied()
                .flatten()
                .unwrap_or(1.0)
        } else {
            1.0
        };
        (f, p.body_at(f) + model.stats_overhead_ns)
    }

    /// Predicted total run time of the programs over the run, ns (per-run prediction × runs).
    pub fn predicted_kernel_ns(&self, model: &CostModel) -> f64 {
        self.measured
            .programs
            .iter()
            .zip(&self.prediction.programs)
            .enumerate()
            .map(|(i, (m, p))| m.runs as f64 * self.predicted_per_run(i, p, model).1)
            .sum()
    }

    /// Relative error of the predicted program run time against bpf_stats'
    /// ((predicted − measured) ÷ measured; `None` when nothing ran).
    pub fn error(&self, model: &CostModel) -> Option<f64> {
        let measured: f64 = self
            .measured
            .programs
            .iter()
            .map(|p| p.run_time_ns as f64)
            .sum();
        (measured > 0.0).then(|| (self.predicted_kernel_ns(model) - measured) / measured)
    }

    /// ebql's predicted CPU over the run (per query + per second × seconds), ns.
    pub fn predicted_cpu_ns(&self) -> Option<f64> {
        self.prediction
            .user_cpu_per_s
            .map(|c| self.prediction.user_fixed_ns + c * self.measured.seconds)
    }

    /// The table `ebql check --cost` prints.
    pub fn report(&self, model: &CostModel) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "model: {}", model.source);
        let _ = writeln!(
            out,
            "{:<18} {:>12} {:>8} {:>16} {:>15} {:>8}",
            "program", "runs", "matched", "predicted ns/run", "measured ns/run", "error"
        );
        for (i, (m, p)) in self
            .measured
            .programs
            .iter()
            .zip(&self.prediction.programs)
            .enumerate()
        {
            let (f, pred) = self.predicted_per_run(i, p, model);
            let meas = m.ns_per_run();
            let _ = writeln!(
                out,
                "{:<18} {:>12} {:>7.1}% {:>16.1} {:>15.1} {:>+7.1}%",
                m.name,
                m.runs,
                100.0 * f,
                pred,
                meas,
                100.0 * (pred - meas) / meas.max(1e-9)
            );
        }
        let _ = writeln!(out, "(ns/run as bpf_stats counts it: the program plus bpf_stats' own {:.0} ns; the hook's entry cost, {} ns, is outside it)", model.stats_overhead_ns, self.prediction.programs.last().and_then(|p| p.hook_ns).map_or("unknown".into(), |h| format!("{h:.0}")));
        let cpu_pred = self
            .predicted_cpu_ns()
            .map_or("unknown".into(), |c| format!("{:.1} ms", c / 1e6));
        let _ = writeln!(out, "ebql CPU over {:.1} s: predicted {cpu_pred}, measured {:.1} ms (user + system of this process)", self.measured.seconds, self.measured.cpu_ns / 1e6);
        let s = &self.measured.stats;
        let _ = writeln!(
            out,
            "events matched {}, rows {}, windows {}, dropped {}",
            s.events_matched,
            s.rows_emitted,
            s.windows_emitted,
            s.events_dropped()
        );
        out
    }

    /// One JSON object with both sides (for scripts: `bench/cost.py`).
    pub fn to_json(&self, model: &CostModel, workload_calls: Option<u64>) -> String {
        let programs: Vec<String> = self
            .measured
            .programs
            .iter()
            .zip(&self.prediction.programs)
            .enumerate()
            .map(|(i, (m, p))| {
                let (f, pred) = self.predicted_per_run(i, p, model);
                format!(
                    "{{\"name\":\"{}\",\"runs\":{},\"matched_fraction\":{f:.6},\"predicted_ns_per_run\":{:.2},\"measured_ns_per_run\":{:.2},\"hook_ns\":{}}}",
                    m.name,
                    m.runs,
                    pred,
                    m.ns_per_run(),
                    p.hook_ns.map_or("null".into(), |h| format!("{h:.1}"))
                )
            })
            .collect();
        let opt = |v: Option<f64>| v.map_or("null".into(), |v| format!("{v:.1}"));
        format!(
            "{{\"seconds\":{:.3},\"programs\":[{}],\"error\":{},\"events_matched\":{},\"rows\":{},\"windows\":{},\"dropped\":{},\"workload_calls\":{},\"cpu_measured_ns\":{:.0},\"cpu_predicted_ns\":{},\"ns_per_matched_event\":{},\"ns_per_event_at_hook\":{}}}",
            self.measured.seconds,
            programs.join(","),
            // Shortest round-trip form: scripts re-derive the printed percentage exactly.
            self.error(model).map_or("null".into(), |e| format!("{e}")),
            self.measured.stats.events_matched,
            self.measured.stats.rows_emitted,
            self.measured.stats.windows_emitted,
            self.measured.stats.events_dropped(),
            workload_calls.map_or("null".into(), |n| n.to_string()),
            self.measured.cpu_ns,
            opt(self.predicted_cpu_ns()),
            opt(self.prediction.ns_per_matched_event),
            opt(self.prediction.ns_per_event_at_hook),
        )
    }
}
