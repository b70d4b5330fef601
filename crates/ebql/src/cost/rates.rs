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
use ebql_compiler::choose::{AggregateChoice, SyscallRates};
use ebql_compiler::codegen::ProgramSpec;
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

/// Where one program of a query attaches, for its counter.
#[derive(Clone, Debug)]
pub struct HookSpec {
    /// The program's event kind.
    pub kind: EventKind,
    /// Where it attaches.
    pub attach: Attach,
    /// The process uprobes and USDT probes are attached to, if pinned.
    pub pid: Option<u32>,
    /// A syscall tracepoint (its rate feeds the hook rule).
    pub syscall: bool,
}

impl HookSpec {
    /// The hooks of `programs`, in order.
    pub fn of(programs: &[ProgramSpec]) -> Vec<HookSpec> {
        programs
            .iter()
            .map(|p| HookSpec {
                kind: p.event.kind,
                attach: p.attach.clone(),
                pid: p.pid,
                syscall: ebql_compiler::cost::is_syscall_tracepoint(p),
            })
            .collect()
    }
}

/// The hook rule's rates from `rates` sampled at `hooks`
/// ([`ebql_compiler::physical::pass::syscall_rates_of`]).
pub fn syscall_rates(hooks: &[HookSpec], rates: &Rates) -> Option<SyscallRates> {
    let syscall: Vec<bool> = hooks.iter().map(|h| h.syscall).collect();
    ebql_compiler::physical::pass::syscall_rates_of(&syscall, rates)
}

/// Counters at each hook of a query (and on `raw_syscalls:sys_enter` when
/// it traces a system call), started at one instant: what they count from
/// then on, with the query's own matched events, gives its [`Rates`].
pub struct HookCounters {
    counters: Vec<Counter>,
    all: Option<Counter>,
    before: Vec<u64>,
    all_before: Option<u64>,
    started: Instant,
}

impl HookCounters {
    /// Attaches a counter to each of `hooks` (a query's programs', in order).
    ///
    /// Errors: as loading and attaching a program (privileges, missing hooks).
    pub fn start(hooks: &[HookSpec]) -> Result<HookCounters> {
        let counters = hooks
            .iter()
            .map(|h| Counter::start(h.kind, &h.attach, h.pid))
            .collect::<Result<Vec<_>>>()?;
        let syscalls = hooks.iter().any(|h| h.syscall);
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
        let mut counters = HookCounters {
            counters,
            all,
            before: Vec::new(),
            all_before: None,
            started: Instant::now(),
        };
        counters.restart()?;
        Ok(counters)
    }

    /// Counts from now on (what was counted so far is forgotten).
    ///
    /// Errors: reading a counter map.
    pub fn restart(&mut self) -> Result<()> {
        self.before = self
            .counters
            .iter()
            .map(Counter::total)
            .collect::<Result<Vec<_>>>()?;
        self.all_before = self.all.as_ref().map(Counter::total).transpose()?;
        self.started = Instant::now();
        Ok(())
    }

    /// The rates since [`HookCounters::start`], given the events the query's
    /// output program matched meanwhile (`matched`); the counters keep
    /// running. `groups_per_window` is filled in by the caller when known.
    ///
    /// Errors: reading a counter map.
    pub fn rates(&self, matched: u64, what: &str) -> Result<Rates> {
        let secs = self.started.elapsed().as_secs_f64();
        let seen: Vec<u64> = self
            .counters
            .iter()
            .zip(&self.before)
            .map(|(c, b)| Ok(c.total()? - b))
            .collect::<Result<_>>()?;
        let all_after = self.all.as_ref().map(Counter::total).transpose()?;
        let main_seen = *seen.last().unwrap_or(&0);
        // The pairing's start program: its share is taken as the end's (starts and ends come in pairs).
        let fraction = (main_seen > 0).then(|| (matched as f64 / main_seen as f64).min(1.0));
        Ok(Rates {
            events_per_s: seen.iter().map(|&n| Some(n as f64 / secs)).collect(),
            matched_fraction: seen.iter().map(|_| fraction).collect(),
            syscalls_per_s: self
                .all_before
                .zip(all_after)
                .map(|(a, b)| (b - a) as f64 / secs),
            groups_per_window: None,
            cpus: ebql_runtime::num_possible_cpus()?,
            source: format!(
                "sampled for {:.0} ms (a counter at each hook; {what})",
                secs * 1e3
            ),
            sampled_ms: (secs * 1e3) as u64,
        })
    }
}

/// Samples the events of `q` (compiled from `sql`) for `d`; see the module doc.
/// The query runs with `opts` but bpf_stats off.
///
/// Errors: as running the query would (privileges, missing hooks).
pub fn sample(sql: &str, q: &CompiledQuery, opts: &ExecutorOptions, d: Duration) -> Result<Rates> {
    let mut counters = HookCounters::start(&HookSpec::of(&q.code.programs))?;
    // The sample runs the plan it prices: its aggregate in the kernel (what
    // the rows per window count), no sampling of its own.
    let mut sample_opts = ExecutorOptions {
        bpf_stats: false,
        sample_rates: None,
        record_rates: None,
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
    // Counted from when the query is attached, as its own counters are.
    counters.restart()?;
    let t = Instant::now();
    while t.elapsed() < d {
        let _ = rx.recv_timeout(Duration::from_millis(10));
    }
    let stats = running.stop()?;
    let secs = t.elapsed().as_secs_f64();
    let (groups, scaled) = match groups_per_window(q, &stats, secs) {
        Some((g, note)) => (Some(g), note),
        None => (None, String::new()),
    };
    let mut rates = counters.rates(
        stats.events_matched,
        &format!("the query itself for the share it matches{scaled}"),
    )?;
    rates.groups_per_window = groups.filter(|g| *g > 0.0);
    rates.sampled_ms = d.as_millis() as u64;
    Ok(rates)
}

/// Groups per window of a grouped query from its sample run, with a note
/// for `explain` when scaled. A sample shorter than the window's step saw
/// part of one window: its groups are scaled to the step as if new keys
/// kept arriving at the sampled pace (an upper bound: keys that repeat,
/// such as pids, grow slower), and capped at the window's matched events.
pub fn groups_per_window(
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
