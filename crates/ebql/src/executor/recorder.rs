//! [`Recorder`]: counts a running query's hooks for a moment after it
//! attached and, when it ends, records its rates for the next run of the
//! same text ([`crate::cost::recorded`]), so that run plans with rates
//! without sampling first.

use crate::cost::rates::{syscall_rates, HookCounters, HookSpec};
use crate::cost::recorded;
use crate::window::QueryStats;
use ebql_compiler::choose::SyscallRates;
use ebql_compiler::cost::Rates;
use ebql_compiler::physical::PhysicalPlan;
use ebql_compiler::Compiled;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// What the background sample counted: the query's rates and, when it
/// traces a system call, the hook rule's.
type Sampled = (Rates, Option<SyscallRates>);

/// A query's background rate sample, recorded when the query ends.
pub(super) struct Recorder {
    sql: String,
    grouped: bool,
    thread: Option<JoinHandle<Option<Sampled>>>,
}

impl Recorder {
    /// Counts for `d` at the hooks of `code`'s programs beside the attached
    /// query (on a thread of its own: the query is not delayed). `None`
    /// when a program runs on a raw syscall hook: recorded rates are those
    /// of the plan that needs none, at the tracefs tracepoints.
    pub(super) fn start(
        sql: &str,
        code: &Compiled,
        physical: &PhysicalPlan,
        d: Duration,
        stop: Arc<AtomicBool>,
        stats: Arc<Mutex<QueryStats>>,
    ) -> Option<Recorder> {
        let raw = physical
            .hook
            .as_ref()
            .is_some_and(|h| h.events.iter().any(|e| e.raw.is_some()));
        if raw {
            return None;
        }
        let hooks = HookSpec::of(&code.programs);
        let matched = move || stats.lock().map_or(0, |s| s.events_matched);
        let thread = std::thread::Builder::new()
            .name("ebql-rates".into())
            .spawn(move || {
                let counters = HookCounters::start(&hooks).ok()?;
                let before = matched();
                let t = Instant::now();
                while t.elapsed() < d {
                    if stop.load(Ordering::SeqCst) {
                        return None;
                    }
                    std::thread::sleep(Duration::from_millis(10));
                }
                let what = "the query's own run for the share it matches";
                let rates = counters
                    .rates(matched().saturating_sub(before), what)
                    .ok()?;
                let syscalls = syscall_rates(&hooks, &rates);
                Some((rates, syscalls))
            })
            .ok()?;
        Some(Recorder {
            sql: sql.to_string(),
            grouped: matches!(
                code.layout,
                ebql_compiler::contract::OutputLayout::Groups { .. }
            ) || physical.placement.is_some(),
            thread: Some(thread),
        })
    }

    /// Records the sample (if it ran to its end) with the groups per window
    /// the query emitted (`stats`: its final counters).
    pub(super) fn finish(mut self, stats: &QueryStats) {
        let Some(Ok(Some((mut rates, syscalls)))) = self.thread.take().map(JoinHandle::join) else {
            return;
        };
        if self.grouped {
            let groups = stats.rows_emitted as f64 / stats.windows_emitted.max(1) as f64;
            rates.groups_per_window = Some(groups).filter(|g| *g > 0.0);
        }
        // A cache: failing to write it only costs the next run its rates.
        let _ = recorded::save(&self.sql, rates, syscalls);
    }
}
