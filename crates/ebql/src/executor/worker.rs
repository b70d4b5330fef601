//! The query thread: [`Worker`] loops until the query stops, closing
//! windows on time (time windows flip a generation every step), polling
//! count windows and raw streams, and publishing the counters. What it does
//! per window is in the sibling modules: draining the kernel's state
//! (`drain`), cutting windows (`windows`), emitting them (`emit`).

use super::cuts::Cuts;
use super::load::Probe;
use super::reader::Readers;
use super::side::Side;
use crate::check::CheckedWindow;
use crate::error::{Error, Result};
use crate::panes::Panes;
use crate::symbolize::Stacks;
use crate::window::{monotonic_ns, QueryStats, WallClock, WindowBatch, WindowDrops};
use datafusion::arrow::datatypes::SchemaRef;
use ebql_compiler::codegen::ctl;
use ebql_compiler::prepass::WindowSpec;
use ebql_compiler::split::GroupSpec;
use ebql_runtime::wait_for_probes;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// State of the query thread.
pub(super) struct Worker {
    /// The attached programs and their maps.
    pub(super) probe: Probe,
    /// The query's own plan.
    pub(super) main: Side<WindowBatch>,
    /// The differential oracle's reference side (`ebql check` only).
    pub(super) tap: Option<Side<CheckedWindow>>,
    /// What the query's output looks like (groups or rows, windows).
    pub(super) shape: Shape,
    /// Where the thread is in the query's windows.
    pub(super) progress: Progress,
    /// Drops already attributed to windows.
    pub(super) drops: DropLedger,
    /// Stop flag and counters, shared with the [`super::RunningQuery`].
    pub(super) control: Control,
    /// Symbolizer of the stack columns (`kstack`, `ustack`) and its cache.
    pub(super) stacks: Stacks,
    /// A shared synopsis's hub: the queries whose plans run on its windows
    /// (in place of the main side's, which is not evaluated).
    pub(super) readers: Option<Readers>,
}

/// What a query's output is: fixed when it starts.
pub(super) struct Shape {
    /// The kernel's group table (`None`: a stream of rows).
    pub(super) group_spec: Option<GroupSpec>,
    /// The WINDOW clause, if any.
    pub(super) window: Option<WindowSpec>,
    /// Schema of every batch sent (window bounds first when windowed).
    pub(super) out_schema: SchemaRef,
    /// An unwindowed raw stream is sent as it drains (not once at stop).
    pub(super) streamable: bool,
    /// A raw stream's LIMIT: the query stops once it sent this many rows.
    pub(super) stream_limit: Option<usize>,
    /// The run's wall clock, read once when the query started: time-window
    /// bounds and `walltime()` convert with it.
    pub(super) clock: WallClock,
    /// Time windows end on wall-clock multiples of their step
    /// ([`super::ExecutorOptions::align_windows`]).
    pub(super) align: bool,
}

impl Shape {
    /// The run's clock when windows are time windows (their bounds get
    /// wall-clock columns), else `None`.
    pub(super) fn wall(&self) -> Option<&WallClock> {
        matches!(self.window, Some(WindowSpec::Time { .. })).then_some(&self.clock)
    }
}

/// Where the query thread is in the query's windows.
pub(super) struct Progress {
    /// Current time-window generation.
    pub(super) gen: u64,
    /// Next count window to emit.
    pub(super) next_count_window: u64,
    /// When the last batch of an unwindowed raw stream was emitted.
    pub(super) last_stream_emit: Instant,
    /// Time windows: the closed panes the next window is made of.
    pub(super) panes: Option<Panes>,
}

/// The drops the kernel counted, as attributed to windows so far.
#[derive(Default)]
pub(super) struct DropLedger {
    /// Drops of time windows already closed (their counters were taken and zeroed).
    pub(super) closed: WindowDrops,
    /// Drops already attributed to emitted batches (count windows, unwindowed).
    pub(super) emitted: WindowDrops,
}

/// What the query thread shares with its [`super::RunningQuery`].
pub(super) struct Control {
    /// Set to stop the query (by the handle, or by the thread at a LIMIT or when nobody listens).
    pub(super) stop: Arc<AtomicBool>,
    /// The counters the handle reads.
    pub(super) stats: Arc<Mutex<QueryStats>>,
    /// The thread's own copy of the counters, published into `stats`.
    pub(super) local: QueryStats,
    /// How often ring buffers and count windows are polled.
    pub(super) poll: Duration,
    /// See [`super::ExecutorOptions::cut_choice_delay`].
    pub(super) cut_choice_delay: Duration,
}

impl Worker {
    pub(super) fn run(&mut self) -> Result<()> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .map_err(|e| Error::Internal(e.to_string()))?;
        let result = self.run_loop(&rt);
        if let (Err(e), Some(readers)) = (&result, self.readers.as_mut()) {
            readers.fail(e);
        }
        // Whatever happened, the probes are detached when we return.
        self.probe.links.clear();
        self.publish_stats();
        result
    }

    fn run_loop(&mut self, rt: &tokio::runtime::Runtime) -> Result<()> {
        let mut cuts = match self.shape.window {
            Some(WindowSpec::Time { step_ns, .. }) => Some(Cuts::open(
                &self.probe.k.ctl,
                self.probe.attached_ns,
                step_ns,
                self.shape.align.then(|| self.shape.clock.offset_ns()),
                self.control.cut_choice_delay,
            )),
            _ => None,
        };
        loop {
            let stopping = self.control.stop.load(Ordering::SeqCst);
            if stopping {
                self.detach()?;
            }
            match (cuts.as_mut(), self.shape.window) {
                (Some(cuts), _) => self.cut_time_windows(rt, cuts, stopping)?,
                (None, Some(WindowSpec::Count { size, .. })) => {
                    self.poll_count_windows(rt, size, stopping)?
                }
                (None, _) => self.poll_unwindowed(rt, stopping)?,
            }
            if !stopping {
                // Before the process may exit: see crate::symbolize.
                self.note_group_stack_processes()?;
            } else if let Some(w) = self.main.wire.as_mut() {
                // Every call fed by the last poll.
                w.at_end();
            }
            self.publish_stats();
            if stopping {
                return Ok(());
            }
            if self.stream_limit_reached() {
                self.control.stop.store(true, Ordering::SeqCst);
                continue;
            }
            let sleep = match &cuts {
                Some(cuts) => {
                    let until = cuts.end.saturating_sub(monotonic_ns());
                    Duration::from_nanos(until).min(
                        if self.probe.k.ringbuf.is_some() || self.probe.k.tap.is_some() {
                            self.control.poll
                        } else {
                            Duration::from_millis(50)
                        },
                    )
                }
                _ => self.control.poll,
            };
            std::thread::sleep(sleep);
        }
    }

    /// Time windows (one generation per pane, see crate::panes): closes the
    /// open window once its end has passed, or at stop, once detached.
    fn cut_time_windows(
        &mut self,
        rt: &tokio::runtime::Runtime,
        cuts: &mut Cuts,
        stopping: bool,
    ) -> Result<()> {
        let now = monotonic_ns();
        if now >= cuts.end {
            if !stopping {
                // The probes time new events past the cut: the next
                // generation's, also those that still read this one.
                self.probe
                    .k
                    .ctl
                    .u64_at(ctl::GEN)
                    .store(self.progress.gen + 1, Ordering::SeqCst);
                wait_for_probes()?;
            }
            self.close_time_window(rt, cuts.start, cuts.end)?;
            self.progress.gen += 1;
            cuts.advance(&self.probe.k.ctl, self.progress.gen);
        } else if !stopping {
            self.drain_ringbuf()?;
        }
        if stopping {
            // Detached: nothing is timed after now.
            self.close_time_window(rt, cuts.start, now.max(cuts.start))?;
        }
        Ok(())
    }

    fn stream_limit_reached(&self) -> bool {
        self.shape
            .stream_limit
            .is_some_and(|n| self.control.local.rows_emitted >= n as u64)
    }

    fn publish_stats(&mut self) {
        let drops = self.drop_totals();
        self.control.local.dropped_groups_full = drops.groups_full;
        self.control.local.dropped_ringbuf_full = drops.ringbuf_full;
        self.control.local.dropped_distinct_full = drops.distinct_full;
        self.control.local.str_read_failed = drops.str_read_failed;
        if let Some(w) = &self.main.wire {
            (self.control.local.wire, self.control.local.wire_statements) = w.counters();
        }
        let all: std::result::Result<Vec<_>, _> =
            self.probe.k.progs.iter().map(|(p, ..)| p.stats()).collect();
        if let Ok(all) = all {
            // The kernel counts misses with or without bpf_stats.
            self.control.local.bpf_recursion_misses = all.iter().map(|s| s.recursion_misses).sum();
            if self.control.local.bpf_stats {
                self.control.local.bpf_run_cnt = all.iter().map(|s| s.run_cnt).sum();
                self.control.local.bpf_run_time_ns = all.iter().map(|s| s.run_time_ns).sum();
            }
        }
        // The output program is the last; a pairing's start program is the
        // first. A query over several events counts every program's events.
        let k = &self.probe.k;
        let paired = k.pair_map.is_some() || k.pair_live.is_some();
        let outputs = if paired {
            k.progs.len() - 1..k.progs.len()
        } else {
            0..k.progs.len()
        };
        let counts: std::result::Result<Vec<_>, _> = outputs.map(|i| k.event_counts(i)).collect();
        if let Ok(counts) = counts {
            self.control.local.events_seen = counts.iter().map(|c| c.seen).sum();
            self.control.local.events_matched = counts.iter().map(|c| c.matched).sum();
            self.control.local.pair_ends_without_start =
                counts.iter().map(|c| c.ends_without_start).sum();
        }
        if paired {
            if let Ok(c) = k.event_counts(0) {
                self.control.local.pair_starts_seen = c.seen;
                self.control.local.pair_starts_matched = c.matched;
            }
        }
        if matches!(self.shape.window, Some(WindowSpec::Time { .. })) {
            let races = self.probe.k.ctl.u64_at(ctl::CUT_RACES);
            self.control.local.window_cut_races = races.load(Ordering::SeqCst);
        }
        if self.probe.k.pair_map.is_some() {
            let ctl = &self.probe.k.ctl;
            let at = |slot: u32| ctl.u64_at(slot).load(Ordering::SeqCst);
            self.control.local.pair_starts_overwritten = at(ctl::PAIR_OVERWRITTEN);
            self.control.local.pair_start_map_full = at(ctl::PAIR_START_FULL);
        }
        *self.control.stats.lock().unwrap() = self.control.local;
        if let Some(readers) = self.readers.as_mut() {
            readers.admit();
            for r in &readers.list {
                r.publish(&self.control.local);
            }
        }
    }
}
