//! [`RunningQuery`]: the handle of a query whose probe is attached. Starting
//! one loads and attaches the compiled query and spawns its query thread
//! ([`super::worker::Worker`]) with the main side and, under `ebql check`,
//! the tap's; the handle reads its counters, takes its windows and stops it.

use super::cutter::CountCutter;
use super::load::{Loaded, Probe};
use super::options::ExecutorOptions;
use super::reader::{Membership, Readers};
use super::recorder::Recorder;
use super::side::Side;
use super::userplan::UserPlan;
use super::worker::{Control, DropLedger, Progress, Shape, Worker};
use crate::decode;
use crate::error::{Error, Result};
use crate::panes::Panes;
use crate::symbolize::Stacks;
use crate::window::{bound_fields, QueryStats, WallClock, WindowBatch};
use datafusion::arrow::datatypes::{Field, Schema, SchemaRef};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::datasource::TableProvider;
use ebql_compiler::prepass::WindowSpec;
use ebql_compiler::split::KernelOutput;
use ebql_compiler::CompiledQuery;
use ebql_runtime::StatsGuard;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

/// The schema of `compiled`'s results, known before anything is loaded
/// (what [`RunningQuery::schema`] will be): the window's columns when
/// windowed ([`crate::window::bound_fields`]: time windows `window_start`,
/// `window_end` as `Timestamp(Nanosecond, "UTC")` then
/// `window_start_mono_ns`, `window_end_mono_ns` as UInt64 CLOCK_MONOTONIC
/// ns; count windows `window_start`, `window_end` as UInt64 ordinals), then
/// the query's columns. Output formats check it before the query attaches.
pub fn result_schema(compiled: &CompiledQuery) -> SchemaRef {
    schema_of(&compiled.split)
}

fn schema_of(split: &ebql_compiler::split::Split) -> SchemaRef {
    let mut fields: Vec<Field> = Vec::new();
    if let Some(w) = split.kernel.window {
        fields.extend(bound_fields(matches!(w, WindowSpec::Time { .. })));
    }
    fields.extend(
        split
            .remainder
            .schema()
            .fields()
            .iter()
            .map(|f| f.as_ref().clone()),
    );
    Arc::new(Schema::new(fields))
}

/// Under `ebql check`: the reference plan and where its checked windows go.
pub(super) type CheckReference = (
    ebql_compiler::check::Reference,
    Sender<crate::check::CheckedWindow>,
);

/// A query whose probe is attached; dropping it stops the query.
pub struct RunningQuery {
    schema: SchemaRef,
    receiver: Option<Receiver<WindowBatch>>,
    /// Forwards windows as plain batches for [`RunningQuery::take_receiver`].
    forwarder: Option<JoinHandle<()>>,
    stop: Arc<AtomicBool>,
    stats: Arc<Mutex<QueryStats>>,
    thread: Option<JoinHandle<Result<()>>>,
    prog_id: u32,
    prog_ids: Vec<u32>,
    shares: Vec<Option<ebql_runtime::HookShare>>,
    window: Option<WindowSpec>,
    placement: Option<ebql_compiler::cost::PlacementDecision>,
    /// Samples this run's rates for the next run of its text.
    recorder: Option<Recorder>,
    /// The run's wall clock, read once when it started.
    clock: WallClock,
    /// The host its rows are from ([`crate::partial::PartialOptions::host`]).
    host: String,
    /// Its place in a shared synopsis, when it reads one
    /// ([`super::ExecutorOptions::shared_synopses`]): then the query thread
    /// is the hub's, not this query's.
    membership: Option<Box<dyn Membership>>,
}

impl RunningQuery {
    /// Loads and attaches `compiled` and starts its query thread. With a
    /// reference (`ebql check`), the program carries the tap and every window
    /// is sent as a [`crate::check::CheckedWindow`] instead of a batch.
    pub(super) fn start(
        compiled: CompiledQuery,
        reference: Option<CheckReference>,
        options: &ExecutorOptions,
    ) -> Result<RunningQuery> {
        Self::start_alone(compiled, reference, options, None)
    }

    /// Starts `compiled` as a shared synopsis's hub: its query thread
    /// evaluates the plans of `readers` (and of those sent to them later)
    /// on its windows, not its own.
    pub(super) fn start_hub(
        compiled: CompiledQuery,
        options: &ExecutorOptions,
        readers: Readers,
    ) -> Result<RunningQuery> {
        Self::start_alone(compiled, None, options, Some(readers))
    }

    /// Starts `compiled` with its own query thread: for its own windows (and
    /// the reference's), or (with `readers`) as a hub, for theirs only.
    fn start_alone(
        compiled: CompiledQuery,
        reference: Option<CheckReference>,
        options: &ExecutorOptions,
        readers: Option<Readers>,
    ) -> Result<RunningQuery> {
        let CompiledQuery {
            planned,
            split,
            code,
            physical,
            wire,
        } = compiled;
        let query_text = planned.query.clone();
        let checked = reference.is_some();
        // One offset for the whole run: window bounds, `walltime()` and the
        // sinks all convert with it (never read again, see `WallClock`).
        let clock = WallClock::now();
        ebql_compiler::walltime::set_wall_offset(&planned.ctx, clock.offset_ns());
        if let Some((r, _)) = &reference {
            ebql_compiler::walltime::set_wall_offset(&r.planned.ctx, clock.offset_ns());
        }
        let stats_guard = if options.bpf_stats {
            Some(StatsGuard::enable()?)
        } else {
            None
        };
        let loaded = Loaded::load(&code, stats_guard, options.attach_only)?;
        let prog_id = loaded.main_prog().id()?;
        let prog_ids = loaded
            .progs
            .iter()
            .map(|(p, ..)| p.id())
            .collect::<std::result::Result<Vec<_>, _>>()?;
        let shared = options
            .shared_hooks
            .as_ref()
            .filter(|_| !options.attach_only);
        let probe = Probe::attach(loaded, &code, shared)?;
        let shares = probe.shares.clone();

        let schema = schema_of(&split);

        let (tx, rx) = channel();
        let stop = Arc::new(AtomicBool::new(false));
        let stats = Arc::new(Mutex::new(QueryStats::default()));
        let group_spec = match &split.kernel.output {
            KernelOutput::Groups(g) => Some(g.clone()),
            KernelOutput::Stream { .. } => None,
        };
        let checking = reference.is_some();
        let tap = match (reference, &code.tap) {
            (Some((r, check_tx)), Some(layout)) => Some(Side {
                layout: layout.clone(),
                pending: decode::StreamRecords::new(layout),
                kernel_schema: r.tap_schema.clone(),
                plan: UserPlan::new(r.input.clone(), r.remainder.clone(), r.planned.ctx.clone()),
                cutter: Some(CountCutter::new(r.count_filter.clone())),
                tx: check_tx,
                pairing: r
                    .pairing
                    .clone()
                    .map(|p| crate::check::Pairer::new(p, TableProvider::schema(r.input.as_ref()))),
                wire: None,
            }),
            (Some(_), None) => {
                return Err(Error::Internal(
                    "a checked query was compiled without its tap".into(),
                ))
            }
            _ => None,
        };
        // Count windows over streamed rows are cut after the user-space part of the WHERE.
        let main_cutter = match (split.kernel.window, &group_spec) {
            (Some(WindowSpec::Count { .. }), None) => Some(CountCutter::new(
                ebql_compiler::check::count_window_filter(&split)
                    .map_err(|e| Error::compile(&planned.query, e))?,
            )),
            _ => None,
        };
        // Checked raw streams are compared once at stop, with their LIMIT.
        let (streamable, stream_limit, remainder) = match (checking, split.stream_limit) {
            (true, Some(n)) => {
                let limited =
                    datafusion::logical_expr::LogicalPlanBuilder::from(split.remainder.clone())
                        .limit(0, Some(n))?
                        .build()?;
                (false, None, limited)
            }
            (true, None) => (false, None, split.remainder.clone()),
            (false, _) => (
                split.streamable,
                split.stream_limit,
                split.remainder.clone(),
            ),
        };
        let mut worker = Worker {
            probe,
            main: Side {
                layout: code.layout.clone(),
                pending: decode::StreamRecords::new(&code.layout),
                kernel_schema: split.kernel_schema.clone(),
                plan: UserPlan::new(split.input.clone(), remainder, planned.ctx.clone()),
                cutter: main_cutter,
                tx,
                pairing: None,
                wire: wire
                    .as_ref()
                    .map(|w| super::wire::WireStage::new(w, &code.layout))
                    .transpose()?,
            },
            tap,
            shape: Shape {
                group_spec,
                window: split.kernel.window,
                out_schema: schema.clone(),
                streamable,
                stream_limit,
                clock,
                align: options.align_windows || options.partial.is_some(),
            },
            progress: Progress {
                gen: 0,
                next_count_window: 0,
                last_stream_emit: std::time::Instant::now(),
                panes: match split.kernel.window {
                    Some(w @ WindowSpec::Time { .. }) => Some(Panes::new(w.panes() as usize)),
                    _ => None,
                },
            },
            drops: DropLedger::default(),
            control: Control {
                stop: stop.clone(),
                stats: stats.clone(),
                local: QueryStats {
                    bpf_stats: options.bpf_stats,
                    ..Default::default()
                },
                poll: options.poll_interval,
                cut_choice_delay: options.cut_choice_delay,
            },
            stacks: Stacks::default(),
            readers,
        };
        // The oracle's runs and explicit samples record nothing.
        let record = options
            .record_rates
            .filter(|_| options.sample_rates.is_none() && !options.attach_only)
            .filter(|_| !checked);
        let recorder = record.and_then(|d| {
            Recorder::start(
                &query_text,
                &code,
                &physical,
                d,
                stop.clone(),
                stats.clone(),
            )
        });
        let thread = std::thread::Builder::new()
            .name("ebql-query".into())
            .spawn(move || worker.run())
            .map_err(|e| Error::Internal(format!("spawning the query thread: {e}")))?;
        Ok(RunningQuery {
            schema,
            receiver: Some(rx),
            forwarder: None,
            stop,
            stats,
            thread: Some(thread),
            prog_id,
            prog_ids,
            shares,
            window: split.kernel.window,
            placement: physical.placement,
            recorder,
            clock,
            host: options
                .partial
                .as_ref()
                .map_or_else(crate::partial::hostname, |p| p.host()),
            membership: None,
        })
    }

    /// The handle of a query reading this hub's windows (its own schema,
    /// channel, counters and placement; the hub's programs and clock).
    pub(super) fn reader_handle(
        &self,
        schema: SchemaRef,
        receiver: Receiver<WindowBatch>,
        stats: Arc<Mutex<QueryStats>>,
        placement: Option<ebql_compiler::cost::PlacementDecision>,
    ) -> RunningQuery {
        RunningQuery {
            schema,
            receiver: Some(receiver),
            forwarder: None,
            stop: Arc::new(AtomicBool::new(false)),
            stats,
            thread: None,
            prog_id: self.prog_id,
            prog_ids: self.prog_ids.clone(),
            shares: self.shares.clone(),
            window: self.window,
            placement,
            recorder: None,
            clock: self.clock,
            host: self.host.clone(),
            membership: None,
        }
    }

    /// This handle, as a member of a shared synopsis.
    pub(super) fn with_membership(mut self, m: Box<dyn Membership>) -> RunningQuery {
        self.membership = Some(m);
        self
    }

    /// The host its rows are from: `--host-id` with `--partial`, else the hostname.
    pub fn host(&self) -> &str {
        &self.host
    }

    /// Queries reading this query's kernel synopsis (its programs' group
    /// table), itself included: more than 1 when it shares one
    /// ([`super::ExecutorOptions::shared_synopses`]).
    pub fn synopsis_readers(&self) -> usize {
        self.membership.as_ref().map_or(1, |m| m.counter()())
    }

    /// A reader of [`RunningQuery::synopsis_readers`] that outlives a move
    /// of the query (into [`crate::sink::drive`]), for `ctl ls`.
    pub fn synopsis_readers_source(&self) -> Box<dyn Fn() -> usize + Send + Sync> {
        match &self.membership {
            Some(m) => m.counter(),
            None => Box::new(|| 1),
        }
    }

    /// Output schema: the window's columns when windowed (time windows:
    /// `window_start`, `window_end` as `Timestamp(Nanosecond, "UTC")`, then
    /// `window_start_mono_ns`, `window_end_mono_ns` as UInt64
    /// CLOCK_MONOTONIC ns; count windows: `window_start`, `window_end` as
    /// UInt64 event ordinals), then the query's columns ([`result_schema`]).
    pub fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    /// The run's wall clock: CLOCK_REALTIME − CLOCK_MONOTONIC read once when
    /// the query started. The wall-clock window bounds and `walltime()` use
    /// it, and so should anything showing this run's CLOCK_MONOTONIC
    /// instants (the sinks get it in [`crate::sink::QueryInfo::clock`]).
    pub fn wall_clock(&self) -> WallClock {
        self.clock
    }

    /// The window channel (once, or [`RunningQuery::take_receiver`]): one
    /// [`WindowBatch`] per closed window (per drain for raw streams), bounds
    /// and drops typed. It closes when the query has stopped and sent everything.
    pub fn take_windows(&mut self) -> Option<Receiver<WindowBatch>> {
        self.receiver.take()
    }

    /// The windows as plain record batches (once, or [`RunningQuery::take_windows`]):
    /// bounds and drops are in each batch's schema metadata (`META_*` keys,
    /// see [`WindowBatch::to_batch_with_metadata`]). Closes like `take_windows`'s;
    /// after [`RunningQuery::stop`] every batch is in the channel.
    pub fn take_receiver(&mut self) -> Option<Receiver<RecordBatch>> {
        let windows = self.receiver.take()?;
        let (tx, rx) = channel();
        // Ends when the query thread has sent its last window, or when the consumer is gone
        // (then the query thread's next send fails and it stops, as with take_windows).
        let forward = move || {
            for w in windows {
                if tx.send(w.to_batch_with_metadata()).is_err() {
                    break;
                }
            }
        };
        self.forwarder = Some(
            std::thread::Builder::new()
                .name("ebql-batches".into())
                .spawn(forward)
                .ok()?,
        );
        Some(rx)
    }

    /// Counters so far.
    pub fn stats(&self) -> QueryStats {
        *self.stats.lock().unwrap()
    }

    /// A reader of [`RunningQuery::stats`] that outlives a move of the query
    /// (into [`crate::sink::drive`]), for sinks that publish live counters.
    pub fn stats_source(&self) -> impl Fn() -> QueryStats + Send + Sync + 'static {
        let stats = self.stats.clone();
        move || *stats.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Kernel id of the probe program (`bpftool prog show id N`).
    pub fn prog_id(&self) -> u32 {
        self.prog_id
    }

    /// Kernel ids of all the query's programs (two for a paired query: start, then end).
    pub fn prog_ids(&self) -> &[u32] {
        &self.prog_ids
    }

    /// Per program (as [`RunningQuery::prog_ids`]): the shared hook it
    /// joined, as it was when it joined ([`crate::ExecutorOptions::shared_hooks`]),
    /// or `None` when it is attached alone. A shared program's own id is
    /// loaded but not attached: its code runs inside the hook's combined
    /// program, so its bpf_stats stay 0.
    pub fn hook_shares(&self) -> &[Option<ebql_runtime::HookShare>] {
        &self.shares
    }

    /// The query's WINDOW clause, if any.
    pub fn window(&self) -> Option<WindowSpec> {
        self.window
    }

    /// Where the aggregate runs and why, when the planner weighed the
    /// kernel against user space ([`ExecutorOptions::sample_rates`]).
    pub fn placement(&self) -> Option<&ebql_compiler::cost::PlacementDecision> {
        self.placement.as_ref()
    }

    /// True once the query thread has ended (LIMIT reached, consumer gone, or error).
    pub fn is_finished(&self) -> bool {
        match &self.membership {
            Some(m) => m.is_finished(),
            None => self.thread.as_ref().is_none_or(|t| t.is_finished()),
        }
    }

    /// Stops the query: detaches the probe, emits the last (partial) window,
    /// and returns the final counters.
    pub fn stop(mut self) -> Result<QueryStats> {
        self.finish()?;
        Ok(self.stats())
    }

    fn finish(&mut self) -> Result<()> {
        let left = self.membership.take().map_or(Ok(()), |m| m.leave());
        self.stop.store(true, Ordering::SeqCst);
        match self.thread.take() {
            Some(t) => t
                .join()
                .map_err(|_| Error::Internal("query thread panicked".into()))?,
            None => Ok(()),
        }?;
        if let Some(r) = self.recorder.take() {
            r.finish(&self.stats());
        }
        // The query thread is gone, so the forwarder has its last window: wait until it is passed on.
        if let Some(f) = self.forwarder.take() {
            let _ = f.join();
        }
        left
    }
}

impl Drop for RunningQuery {
    fn drop(&mut self) {
        let _ = self.finish();
    }
}
