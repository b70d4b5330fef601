//! Event rates for a prediction: a short sampling of the query's events.
//!
//! For the sampling time (≈ 150 ms), a counter program of ours (an inlined
//! per-CPU array increment, no helper, no bpf_stats) runs on each hook of
//! the query, and on `raw_syscalls:sys_enter` when the query traces a system
//! call (the machine's syscall rate: the cost a syscall tracepoint puts on
//! the other system calls depends on it). The query itself runs at the
//! same time (bpf_stats off, output discarded): what it matched over what
//! the counter saw is the fraction that passes its filters.

use super::probes;
use crate::{Error, Executor, ExecutorOptions, Result};
use ebql_catalog::{Attach, EventKind};
use ebql_compiler::choose::AggregateChoice;
use ebql_compiler::contract::OutputLayout;
use ebql_compiler::cost::Rates;
use ebql_compiler::prepass::WindowSpec;
use ebql_compiler::CompiledQuery;
use ebql_runtime::{attach, AttachOptions, Link, LoadTarget, Map, MapType, Program};
use std::time::{Duration, Instant};

/// A counter program attached to one hook.
struct Counter {
    map: Map,
    _link: Link,
    _prog: Program,
}

impl Counter {
    fn start(kind: EventKind, at: &Attach, pid: Option<u32>) -> Result<Counter> {
        let map = Map::create("ebql_rate", MapType::PercpuArray, 4, 8, 1)?;
        let prog = Program::load(
            "ebql_rate",
            LoadTarget::of(kind, at),
            &probes::counter(0).bytes(),
            &[map.fd()],
        )?;
        let scope = AttachOptions {
            pid: matches!(
                kind,
                EventKind::Uprobe | EventKind::Uretprobe | EventKind::Usdt
            )
            .then_some(pid)
            .flatten(),
        };
        let link = attach(&prog, kind, at, &scope)?;
        Ok(Counter {
            map,
            _link: link,
            _prog: prog,
        })
    }

    /// Events counted so far, all CPUs.
    fn total(&self) -> Result<u64> {
        let cpus = ebql_runtime::num_possible_cpus()?;
        let mut v = vec![0u8; 8 * cpus];
        self.map.lookup(&0u32.to_ne_bytes(), &mut v)?;
        Ok(v.chunks_exact(8)
            .map(|c| u64::from_ne_bytes(c.try_into().expect("8 bytes")))
            .sum())
    }
}

/// Samples the events of `q` (compiled from `sql`) for `d`; see the module doc.
/// The query runs with `opts` but bpf_stats off.
///
/// Errors: as running the query would (privileges, missing hooks).
pub fn sample(sql: &str, q: &CompiledQuery, opts: &ExecutorOptions, d: Duration) -> Result<Rates> {
    let counters = q
        .code
        .programs
        .iter()
        .map(|p| Counter::start(p.event.kind, &p.attach, p.pid))
        .collect::<Result<Vec<_>>>()?;
    let syscalls = q
        .code
        .programs
        .iter()
        .any(ebql_compiler::cost::is_syscall_tracepoint);
    let all = if syscalls {
        Some(Counter::start(
            EventKind::RawTracepoint,
            &Attach::RawTracepoint {
                name: "sys_enter".into(),
            },
            None,
        )?)
    } else {
        None
    };
    // The sample runs the plan it prices: its aggregate in the kernel (what
    // the rows per window count), no sampling of its own.
    let mut sample_opts = ExecutorOptions {
        bpf_stats: false,
        sample_rates: None,
        ..opts.clone()
    };
    sample_opts.codegen.choices.aggregate = match opts.codegen.choices.aggregate {
        AggregateChoice::Auto => AggregateChoice::Kernel,
        forced => forced,
    };
    if let Some(h) = &q.physical.hook {
        sample_opts.codegen.choices.hook = h.pinned(opts.codegen.choices.hook);
    }
    let mut ex = Executor::with_options(sample_opts);
    let mut running = ex.execute(sql)?;
    let rx = running
        .take_receiver()
        .ok_or_else(|| Error::Internal("a fresh query has its receiver".into()))?;
    let before = counters
        .iter()
        .map(Counter::total)
        .collect::<Result<Vec<_>>>()?;
    let all0 = all.as_ref().map(Counter::total).transpose()?;
    let t = Instant::now();
    while t.elapsed() < d {
        let _ = rx.recv_timeout(Duration::from_millis(10));
    }
    let stats = running.stop()?;
    let secs = t.elapsed().as_secs_f64();
    let after = counters
        .iter()
        .map(Counter::total)
        .collect::<Result<Vec<_>>>()?;
    let all1 = all.as_ref().map(Counter::total).transpose()?;
    let seen: Vec<u64> = after.iter().zip(&before).map(|(a, b)| a - b).collect();
    let main_seen = *seen.last().unwrap_or(&0);
    // The pairing's start program: its share is taken as the end's (starts and ends come in pairs).
    let fraction =
        (main_seen > 0).then(|| (stats.events_matched as f64 / main_seen as f64).min(1.0));
    let (groups, scaled) = match groups_per_window(q, &stats, secs) {
        Some((g, note)) => (Some(g), note),
        None => (None, String::new()),
    };
    Ok(Rates {
        events_per_s: seen.iter().map(|&n| Some(n as f64 / secs)).collect(),
        matched_fraction: seen.iter().map(|_| fraction).collect(),
        syscalls_per_s: all0.zip(all1).map(|(a, b)| (b - a) as f64 / secs),
        groups_per_window: groups.filter(|g| *g > 0.0),
        cpus: ebql_runtime::num_possible_cpus()?,
        source: format!("sampled for {:.0} ms (a counter at each hook; the query itself for the share it matches{scaled})", secs * 1e3),
        sampled_ms: d.as_millis() as u64,
    })
}

/// Groups per window of a grouped query from its sample run, with a note
/// for `explain` when scaled. A sample shorter than the window's step saw
/// part of one window: its groups are scaled to the step as if new keys
/// kept arriving at the sampled pace (an upper bound: keys that repeat,
/// such as pids, grow slower), and capped at the window's matched events.
fn groups_per_window(
    q: &CompiledQuery,
    stats: &crate::QueryStats,
    secs: f64,
) -> Option<(f64, String)> {
    if !matches!(q.code.layout, OutputLayout::Groups { .. }) {
        return None;
    }
    let seen = stats.rows_emitted as f64 / stats.windows_emitted.max(1) as f64;
    if seen == 0.0 {
        return None;
    }
    match q.split.kernel.window {
        Some(WindowSpec::Time { step_ns, .. })
            if stats.windows_emitted <= 1 && step_ns as f64 / 1e9 > secs =>
        {
            let step = step_ns as f64 / 1e9;
            let events = stats.events_matched as f64 / secs * step;
            let g = (seen * step / secs).min(events).max(seen);
            Some((g, format!("; {seen:.0} group(s) seen, ≈{g:.0} per {step}-s window when new keys keep coming at that pace")))
        }
        _ => Some((seen, String::new())),
    }
}
