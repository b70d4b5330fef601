//! The executor (thesis §3.1): compiles a query, loads and attaches its probe,
//! and runs a thread that closes windows, drains the kernel's state, runs the
//! user-space remainder of the plan on DataFusion and sends record batches.
//!
//! Window protocol (exact at boundaries): the probe tags every update with
//! the generation it read from the shared control map. To close a window,
//! user space stores generation g+1, waits for a grace period (membarrier(MEMBARRIER_CMD_GLOBAL), or a fallback)
//! (a synchronize_rcu(): every probe run that could have read g has
//! finished), then drains and deletes generation g. An event is therefore in
//! exactly one window, and a window closes on time even when no event comes.
//!
//! Time windows flip every *step*: each generation is a pane, and every step
//! emits the window of the last size/step panes ([`crate::panes`]); a
//! tumbling window is one pane. An event is then in exactly one pane, hence
//! in exactly size/step windows.

use crate::decode::{self, Cell};
use crate::error::{Error, Result};
use crate::panes::{Pane, PaneRows, Panes, WindowRows};
use crate::sink::{WindowBatch, WindowBounds};
use crate::symbolize::{symbolize_rows, Stacks};
use datafusion::arrow::array::{ArrayRef, UInt64Array};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::logical_expr::LogicalPlan;
use datafusion::prelude::SessionContext;
use ebql_compiler::choose::AggregateChoice;
use ebql_compiler::codegen::{
    counters, ctl, MapKind, OutputLayout, MAP_OUT, MAP_PAIR, MAP_PAIR_LIVE, MAP_TAP,
};
use ebql_compiler::planner::WindowInput;
use ebql_compiler::prepass::WindowSpec;
use ebql_compiler::split::{GroupSpec, KernelOutput};
use ebql_compiler::{compile_query, CodegenOptions, CompiledQuery};
use ebql_runtime::{
    wait_for_probes, AttachOptions, Link, LoadTarget, Map, MapType, MmapArray, Program, RingBuffer,
    StatsGuard,
};
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// Schema metadata key of every windowed batch: window start (same unit as the column).
pub const META_WINDOW_START: &str = "ebql.window_start";
/// Schema metadata key of every windowed batch: window end.
pub const META_WINDOW_END: &str = "ebql.window_end";
/// Schema metadata key of every windowed batch: events of this window the
/// kernel could not record because the group table was full (decimal).
pub const META_DROPPED_GROUPS_FULL: &str = "ebql.dropped_groups_full";
/// Schema metadata key of every windowed batch: events of this window the
/// kernel could not record because the ring buffer was full (decimal).
pub const META_DROPPED_RINGBUF_FULL: &str = "ebql.dropped_ringbuf_full";
/// Schema metadata key of every windowed batch: events of this window whose
/// value COUNT(DISTINCT) could not record because the distinct set was full (decimal).
pub const META_DROPPED_DISTINCT_FULL: &str = "ebql.dropped_distinct_full";

/// Schema metadata key of every time-windowed batch: `k/n`, the window holds
/// k of the n = size/step panes of a full window (`1/1` when tumbling). k < n
/// only for the partial windows emitted during the query's first `size`.
pub const META_WINDOW_PANES: &str = "ebql.window_panes";

/// A count window over event ordinals `start..end`.
fn count_window(start: u64, end: u64) -> WindowBounds {
    WindowBounds {
        start,
        end,
        panes: None,
    }
}

/// Events of one window (or one emission) the kernel could not record.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WindowDrops {
    /// Group table full (raise --max-groups).
    pub groups_full: u64,
    /// Ring buffer full (user space drained too slowly).
    pub ringbuf_full: u64,
    /// The differential oracle's tap ring buffer was full (`ebql check` only).
    pub tap_full: u64,
    /// COUNT(DISTINCT) set full: the event was counted, its value not (raise --max-distinct).
    pub distinct_full: u64,
}

impl WindowDrops {
    /// Events of the query itself lost in this window (the tap excluded).
    pub fn query_total(&self) -> u64 {
        self.groups_full + self.ringbuf_full + self.distinct_full
    }

    /// The drops of the window a batch carries (zero if it carries none).
    pub fn of_batch(batch: &RecordBatch) -> WindowDrops {
        let md = batch.schema_ref().metadata();
        let get = |k: &str| md.get(k).and_then(|v| v.parse().ok()).unwrap_or(0);
        WindowDrops {
            groups_full: get(META_DROPPED_GROUPS_FULL),
            ringbuf_full: get(META_DROPPED_RINGBUF_FULL),
            tap_full: 0,
            distinct_full: get(META_DROPPED_DISTINCT_FULL),
        }
    }
}

/// Counters of a running or finished query.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QueryStats {
    /// Events of the processes and threads the query selects at its hook:
    /// runs of the output program that passed its leading pid/tid tests
    /// (every run when the query has none), counted by the program itself
    /// (`ebql_compiler::contract::counters::SEEN`). Other processes' events
    /// run the hook too but are not counted, so that they pay nothing for
    /// the count; [`QueryStats::bpf_run_cnt`] (with bpf_stats) counts every
    /// run. For a pairing: the end event's (the start's are
    /// [`QueryStats::pair_starts_seen`]).
    pub events_seen: u64,
    /// Events that passed the kernel filter, counted by the program right
    /// after it (`counters::MATCHED`): recorded plus dropped. For a pairing:
    /// ends that found their start and passed the end's filters.
    pub events_matched: u64,
    /// Rows sent to the consumer.
    pub rows_emitted: u64,
    /// Windows closed and emitted.
    pub windows_emitted: u64,
    /// Events not recorded because the group table was full (raise --max-groups).
    pub dropped_groups_full: u64,
    /// Events not recorded because the ring buffer was full.
    pub dropped_ringbuf_full: u64,
    /// Events whose value COUNT(DISTINCT) could not record because the distinct set was full (raise --max-distinct).
    pub dropped_distinct_full: u64,
    /// Probe runs the kernel skipped because another BPF program was running
    /// on that CPU (the kernel counts these whether or not bpf_stats is on).
    pub bpf_recursion_misses: u64,
    /// The query held the kernel's bpf_stats on for its whole run
    /// ([`ExecutorOptions::bpf_stats`]): `bpf_run_cnt`/`bpf_run_time_ns` are valid.
    pub bpf_stats: bool,
    /// bpf_stats: runs of all the query's programs (0 unless the query asked
    /// for bpf_stats; another process's bpf_stats, on for part of the run
    /// only, is not reported).
    pub bpf_run_cnt: u64,
    /// bpf_stats: total ns spent in the query's programs (0 unless the query asked for bpf_stats).
    pub bpf_run_time_ns: u64,
    /// Pairing: start events of the selected processes and threads (as [`QueryStats::events_seen`]).
    pub pair_starts_seen: u64,
    /// Pairing: start events that passed the start's filters (stored, overwriting, or refused: full).
    pub pair_starts_matched: u64,
    /// Pairing: unmatched starts a newer start of the same key replaced.
    pub pair_starts_overwritten: u64,
    /// Pairing: ends (that passed the thread filters) which found no start of their key.
    pub pair_ends_without_start: u64,
    /// Pairing: starts not stored: the hash start map was full (raise
    /// `max_pending`), or a thread's task-storage slot could not be allocated.
    pub pair_start_map_full: u64,
    /// Pairing: unmatched starts still in the start map when the query stopped
    /// (known at stop; with task storage, the probes' per-CPU count of them).
    pub pair_starts_left: u64,
}

impl QueryStats {
    /// All events lost, for any reason.
    pub fn events_dropped(&self) -> u64 {
        self.dropped_groups_full
            + self.dropped_ringbuf_full
            + self.dropped_distinct_full
            + self.bpf_recursion_misses
            + self.pair_start_map_full
    }

    /// Mean ns per probe run, if bpf_stats was on.
    pub fn ns_per_event(&self) -> Option<f64> {
        (self.bpf_run_cnt > 0).then(|| self.bpf_run_time_ns as f64 / self.bpf_run_cnt as f64)
    }

    /// One JSON object (the CLI prints it as `ebql: stats {…}`).
    pub fn to_json(&self) -> String {
        format!(
            "{{\"events_seen\":{},\"events_matched\":{},\"rows_emitted\":{},\"windows_emitted\":{},\"events_dropped\":{},\"dropped_groups_full\":{},\"dropped_ringbuf_full\":{},\"dropped_distinct_full\":{},\"bpf_recursion_misses\":{},\"bpf_run_cnt\":{},\"bpf_run_time_ns\":{}{}}}",
            self.events_seen, self.events_matched, self.rows_emitted, self.windows_emitted, self.events_dropped(), self.dropped_groups_full, self.dropped_ringbuf_full, self.dropped_distinct_full, self.bpf_recursion_misses, self.bpf_run_cnt, self.bpf_run_time_ns,
            self.pair_json()
        )
    }

    /// The pairing counters as JSON members (empty when nothing was paired or counted).
    fn pair_json(&self) -> String {
        let any = self.pair_starts_seen
            + self.pair_starts_overwritten
            + self.pair_ends_without_start
            + self.pair_start_map_full
            + self.pair_starts_left
            > 0;
        if !any {
            return String::new();
        }
        format!(
            ",\"pair_starts_seen\":{},\"pair_starts_matched\":{},\"pair_starts_overwritten\":{},\"pair_ends_without_start\":{},\"pair_start_map_full\":{},\"pair_starts_left\":{}",
            self.pair_starts_seen, self.pair_starts_matched, self.pair_starts_overwritten, self.pair_ends_without_start, self.pair_start_map_full, self.pair_starts_left
        )
    }
}

/// Tunables.
#[derive(Debug, Clone)]
pub struct ExecutorOptions {
    /// Tunables of the generated code (group table and ring buffer sizes).
    pub codegen: CodegenOptions,
    /// How often ring buffers and count windows are polled.
    pub poll_interval: Duration,
    /// Turn the kernel's bpf_stats on while queries run, for
    /// [`QueryStats::bpf_run_cnt`]/[`QueryStats::bpf_run_time_ns`] (probe
    /// run time). Off by default: it is global (every BPF program on the
    /// host, not only ours, is timed while any process holds it on) and
    /// costs each of them about 70–120 ns per run (two clock reads; measured in
    /// BENCHMARKS.md, "Issue 11: bpf_stats"). Event counts do not need it:
    /// each program counts its own events. Enabling fails the query if the
    /// kernel refuses (`BPF_ENABLE_STATS` needs CAP_SYS_ADMIN).
    pub bpf_stats: bool,
    /// Before planning a query on syscall tracepoints whose hook is chosen
    /// automatically by total cost ([`ebql_compiler::choose::Optimize::Total`])
    /// without rates in `codegen.choices.rates`: count the machine's system
    /// calls for this long ([`crate::sampler`]) and plan with the rates.
    /// Before running a query whose aggregate the kernel can run, with
    /// [`ebql_compiler::choose::AggregateChoice::Auto`]: run it for this
    /// long to sample its rates and groups ([`crate::cost::rates`]), then
    /// keep the aggregate in the kernel or stream it to user space,
    /// whichever the cost model finds cheaper ([`crate::cost::placement`]);
    /// that one sample also gives the hook rule its rates.
    /// `None`: no sampling (the tracefs tracepoint, the kernel aggregate).
    pub sample_rates: Option<Duration>,
    /// Attach only: load, in place of each of the query's programs, one that
    /// returns at once (the same hooks, pid scope, USDT semaphores and maps;
    /// nothing is recorded or counted: the programs' own counters stay 0; with `bpf_stats` the run count still shows the hits). What the
    /// hooks alone cost: the "active" mode of README "Modes".
    pub attach_only: bool,
}

impl Default for ExecutorOptions {
    fn default() -> Self {
        ExecutorOptions {
            codegen: CodegenOptions::default(),
            poll_interval: Duration::from_millis(10),
            bpf_stats: false,
            sample_rates: None,
            attach_only: false,
        }
    }
}

/// Runs queries. `execute_query`/`get_query_stats`/`stop_query` key queries by
/// their text, as in the thesis API; [`Executor::execute`] returns a handle instead.
pub struct Executor {
    options: ExecutorOptions,
    catalog: Option<ebql_catalog::Catalog>,
    queries: HashMap<String, RunningQuery>,
}

impl Default for Executor {
    fn default() -> Self {
        Self::new()
    }
}

/// Current CLOCK_MONOTONIC time in ns (the clock of bpf_ktime_get_ns and the `time` column).
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: valid out-pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Whether the kernel offers task-local storage for pairings (probed once per
/// process; assumed when the probe itself is not permitted).
fn task_storage_supported() -> bool {
    static SUPPORTED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *SUPPORTED.get_or_init(|| ebql_runtime::task_storage_supported().unwrap_or(true))
}

/// When the automatic hook choice of a compiled query's syscall tracepoints
/// wants rates ([`ebql_compiler::syscall_hook::HookReport::wants_rates`]) and
/// sampling is on: samples them into `opts` and returns true (compile again).
/// A failed sample (no privilege, no raw hook) leaves the rule without rates.
fn with_sampled_rates(
    catalog: &dyn ebql_compiler::planner::EventSource,
    report: Option<&ebql_compiler::syscall_hook::HookReport>,
    sample: Option<Duration>,
    opts: &mut CodegenOptions,
) -> bool {
    let (Some(report), Some(duration)) = (report, sample) else {
        return false;
    };
    if !report.wants_rates(&opts.choices) {
        return false;
    }
    match crate::sampler::sample_syscall_rates(catalog, &report.traced_nrs(), duration) {
        Ok(rates) => {
            opts.choices.rates = Some(rates);
            true
        }
        Err(_) => false,
    }
}

/// The catalog as the compiler sees it on this machine: an event whose kind
/// needs a kernel feature this kernel lacks is refused up front, from the
/// runtime's feature probes, with the alternative to use.
/// `explain` (`features` false) compiles such events anyway: nothing is loaded.
struct KernelCatalog<'a>(&'a ebql_catalog::Catalog, bool);

impl ebql_compiler::planner::EventSource for KernelCatalog<'_> {
    fn event(
        &self,
        name: &ebql_catalog::EventName,
    ) -> std::result::Result<ebql_catalog::EventSchema, ebql_catalog::CatalogError> {
        if let Some((_, why)) = ebql_runtime::features::missing(name.kind).filter(|_| self.1) {
            return Err(ebql_catalog::CatalogError::Unavailable {
                kind: name.kind.prefix().to_string(),
                why,
                hint: name.kind.alternative().to_string(),
            });
        }
        self.0.event(name)
    }
}

impl Executor {
    /// An executor with default options. Nothing touches the kernel until a query runs.
    pub fn new() -> Executor {
        Self::with_options(ExecutorOptions::default())
    }

    /// An executor with these options. Nothing touches the kernel until a query runs.
    pub fn with_options(options: ExecutorOptions) -> Executor {
        Executor {
            options,
            catalog: None,
            queries: HashMap::new(),
        }
    }

    /// The event catalog (tracefs, mounted if needed).
    pub fn catalog(&mut self) -> Result<&ebql_catalog::Catalog> {
        if self.catalog.is_none() {
            self.catalog = Some(ebql_catalog::Catalog::open().map_err(Error::Catalog)?);
        }
        Ok(self.catalog.as_ref().unwrap())
    }

    /// Compiles without touching BPF; events of kinds this kernel lacks are
    /// refused (as [`Executor::execute`] would).
    pub fn compile(&mut self, sql: &str) -> Result<CompiledQuery> {
        self.compile_with(sql, true)
    }

    /// Compiles for `explain`: like [`Executor::compile`], but events of
    /// kinds this kernel lacks (kprobes, fentry here) compile too, since
    /// nothing is loaded; [`ebql_runtime::features::missing`] says what they lack.
    pub fn compile_for_explain(&mut self, sql: &str) -> Result<CompiledQuery> {
        self.compile_with(sql, false)
    }

    fn compile_with(&mut self, sql: &str, features: bool) -> Result<CompiledQuery> {
        let mut opts = self.options.codegen;
        let sample = self.options.sample_rates;
        let exec = self.options.clone();
        let catalog = KernelCatalog(self.catalog()?, features);
        let first = compile_query(sql, &catalog, &opts);
        // A query whose aggregate's place is weighed runs once for the
        // sampling time; that sample also counts the machine's system calls,
        // so it serves the hook rule too (one sample, not two).
        let mut sampled = None;
        let mut compiled = match (first, sample) {
            (Ok(c), Some(d)) => {
                if features && !exec.attach_only && weighs_placement(&c, &opts) {
                    sampled = Some(crate::cost::rates::sample(
                        sql,
                        &c,
                        &ExecutorOptions {
                            codegen: opts,
                            ..exec.clone()
                        },
                        d,
                    ));
                }
                let hook_rates = match (&sampled, &c.hook) {
                    (Some(Ok(r)), Some(report)) if report.wants_rates(&opts.choices) => {
                        syscall_rates_of(&c, r, d)
                    }
                    _ => None,
                };
                if let Some(r) = hook_rates {
                    opts.choices.rates = Some(r);
                    compile_query(sql, &catalog, &opts)
                } else if sampled.is_none()
                    && with_sampled_rates(&catalog, c.hook.as_ref(), sample, &mut opts)
                {
                    compile_query(sql, &catalog, &opts)
                } else {
                    Ok(c)
                }
            }
            (first, _) => first,
        };
        // Only a query that compiled to a task-storage pairing probes the
        // kernel for it (a bad query makes no bpf() call at all); without the
        // privilege to probe (e.g. an unprivileged `explain`), keep it.
        let uses_task_storage = |c: &CompiledQuery| {
            c.code
                .maps
                .get(MAP_PAIR)
                .is_some_and(|m| m.kind == MapKind::TaskStorage)
        };
        if compiled.as_ref().is_ok_and(uses_task_storage) && !task_storage_supported() {
            opts.task_storage = false;
            compiled = compile_query(sql, &catalog, &opts);
        }
        let compiled = compiled.map_err(|e| Error::compile(sql, e))?;
        Ok(match sampled {
            Some(rates) => weigh_placement(sql, compiled, &catalog, &opts, rates),
            None => compiled,
        })
    }

    /// Weighs where the aggregate of `compiled` (compiled from `sql` by this
    /// executor, e.g. for `explain`) runs at `rates`, as a query run does
    /// after its sample ([`crate::cost::placement`]); the other plan is
    /// compiled onto the same hook. `compiled` comes back unchanged when its
    /// aggregate is not weighed (not [`AggregateChoice::Auto`], or no
    /// aggregate in the kernel).
    pub fn place_aggregate(
        &mut self,
        sql: &str,
        compiled: CompiledQuery,
        rates: &ebql_compiler::cost::Rates,
    ) -> Result<CompiledQuery> {
        let mut opts = self.options.codegen;
        if !weighs_placement(&compiled, &opts) {
            return Ok(compiled);
        }
        if let Some(h) = &compiled.hook {
            opts.choices.hook = h.pinned(opts.choices.hook);
        }
        // The events compiled once already: no feature check again.
        let catalog = KernelCatalog(self.catalog()?, false);
        Ok(weigh_placement(
            sql,
            compiled,
            &catalog,
            &opts,
            Ok(rates.clone()),
        ))
    }

    /// The schema of one event, refused when this kernel lacks what its kind
    /// needs (as queries are).
    pub fn event(&mut self, name: &ebql_catalog::EventName) -> Result<ebql_catalog::EventSchema> {
        use ebql_compiler::planner::EventSource;
        KernelCatalog(self.catalog()?, true)
            .event(name)
            .map_err(Error::Catalog)
    }

    /// Compiles, loads and attaches `sql`; when this returns Ok the probe is attached.
    pub fn execute(&mut self, sql: &str) -> Result<RunningQuery> {
        let compiled = self.compile(sql)?;
        RunningQuery::start(compiled, None, &self.options)
    }

    /// Compiles `sql`, creates its maps and loads its program (the verifier
    /// runs), then closes everything without attaching. Cheap (a few ms):
    /// the query generator's compile-and-load run uses it.
    ///
    /// Errors: as [`Executor::execute`]; a verifier rejection is `Error::Verifier`.
    pub fn load_only(&mut self, sql: &str) -> Result<LoadReport> {
        let compiled = self.compile(sql)?;
        let loaded = Loaded::load(&compiled.code, None, false)?;
        let main = compiled.code.main();
        Ok(LoadReport {
            instructions: main.program.insns.len(),
            stack_bytes: main.stack_bytes,
            maps: loaded.map_count(),
        })
    }

    /// Runs `sql` under the differential oracle: the kernel plan and, in the
    /// same program and the same windows, a reference evaluation of the same
    /// SQL by DataFusion over the raw events (see [`crate::check`]).
    pub fn check(
        &mut self,
        sql: &str,
        opts: crate::check::CheckOptions,
    ) -> Result<crate::check::RunningCheck> {
        let mut codegen = self.options.codegen;
        let sample = self.options.sample_rates;
        let catalog = KernelCatalog(self.catalog()?, true);
        if let Ok(c) = compile_query(sql, &catalog, &codegen) {
            with_sampled_rates(&catalog, c.hook.as_ref(), sample, &mut codegen);
        }
        let checked = ebql_compiler::check::compile_check(sql, &catalog, &codegen)
            .map_err(|e| Error::compile(sql, e))?;
        let ebql_compiler::check::CheckedQuery { query, reference } = checked;
        let bounds = ebql_compiler::check::output_bounds(&query.split);
        let (tx, rx) = channel();
        let q = RunningQuery::start(query, Some((reference, tx)), &self.options)?;
        Ok(crate::check::RunningCheck::new(q, rx, opts, bounds))
    }

    /// Thesis API: runs a query and returns its output schema and a channel of
    /// record batches (one per window; per drain for raw streams).
    pub fn execute_query(&mut self, sql: String) -> Result<(SchemaRef, Receiver<RecordBatch>)> {
        if self.queries.contains_key(&sql) {
            return Err(Error::Internal(
                "this query is already running in this executor".into(),
            ));
        }
        let mut q = self.execute(&sql)?;
        let rx = q.take_receiver().expect("fresh query has its receiver");
        let schema = q.schema();
        self.queries.insert(sql, q);
        Ok((schema, rx))
    }

    /// Thesis API: stats of a query started with `execute_query`.
    pub fn get_query_stats(&self, sql: &str) -> Option<QueryStats> {
        self.queries.get(sql).map(|q| q.stats())
    }

    /// Stops a query started with `execute_query`: emits its last window and detaches it.
    pub fn stop_query(&mut self, sql: &str) -> Option<Result<QueryStats>> {
        self.queries.remove(sql).map(|q| q.stop())
    }
}

/// Whether the aggregate's place in `c` is weighed: [`AggregateChoice::Auto`]
/// and an aggregate the kernel runs (the alternative streams its rows).
fn weighs_placement(c: &CompiledQuery, opts: &CodegenOptions) -> bool {
    opts.choices.aggregate == AggregateChoice::Auto
        && matches!(
            c.code.layout,
            ebql_compiler::contract::OutputLayout::Groups { .. }
        )
}

/// The hook rule's rates from a sample of the query itself: the machine's
/// system calls per second and the mean rate of the query's syscall
/// tracepoints (an enter/exit pairing of one call has its rate).
fn syscall_rates_of(
    c: &CompiledQuery,
    r: &ebql_compiler::cost::Rates,
    d: Duration,
) -> Option<ebql_compiler::choose::SyscallRates> {
    let all = r.syscalls_per_s?;
    let traced: Vec<f64> = c
        .code
        .programs
        .iter()
        .zip(&r.events_per_s)
        .filter(|(p, _)| ebql_compiler::cost::is_syscall_tracepoint(p))
        .filter_map(|(_, e)| *e)
        .collect();
    if traced.is_empty() {
        return None;
    }
    let traced_per_sec = traced.iter().sum::<f64>() / traced.len() as f64;
    Some(ebql_compiler::choose::SyscallRates {
        all_per_sec: all,
        traced_per_sec,
        sampled_ms: d.as_millis() as u64,
    })
}

/// Keeps the kernel plan `compiled` or takes the one aggregating in user
/// space, whichever the cost model finds cheaper at the query's sampled
/// `rates` ([`crate::cost::placement`]). The decision travels in
/// [`CompiledQuery::placement`]; a failed sample keeps the kernel plan (and
/// says why there).
fn weigh_placement(
    sql: &str,
    compiled: CompiledQuery,
    catalog: &dyn ebql_compiler::EventSource,
    opts: &CodegenOptions,
    rates: Result<ebql_compiler::cost::Rates>,
) -> CompiledQuery {
    let mut user_opts = *opts;
    user_opts.choices.aggregate = AggregateChoice::User;
    let Ok(user) = compile_query(sql, catalog, &user_opts) else {
        return compiled;
    };
    let model = crate::cost::load().model;
    match rates {
        Ok(rates) => crate::cost::placement::weigh(
            &model,
            opts.choices.optimize,
            opts.max_groups,
            compiled,
            user,
            &rates,
        ),
        Err(e) => {
            // Unknown rates: the rule keeps the kernel.
            let unknown =
                ebql_compiler::cost::Rates::unknown(ebql_runtime::num_possible_cpus().unwrap_or(1));
            let mut kept = crate::cost::placement::weigh(
                &model,
                opts.choices.optimize,
                opts.max_groups,
                compiled,
                user,
                &unknown,
            );
            if let Some(p) = kept.placement.as_mut() {
                p.why = format!("sampling the rates failed ({}): the kernel", e.render());
            }
            kept
        }
    }
}

/// What [`Executor::load_only`] loaded.
#[derive(Debug, Clone, Copy)]
pub struct LoadReport {
    /// BPF instructions in the program (ld_imm64 counts as two).
    pub instructions: usize,
    /// Bytes of BPF stack the program uses.
    pub stack_bytes: usize,
    /// Maps created for it.
    pub maps: usize,
}

/// The kernel objects of one query before it is attached. Field order is drop order.
struct Loaded {
    ringbuf: Option<RingBuffer>,
    tap: Option<RingBuffer>,
    /// Every program with its tracepoint id; the last one writes the output.
    progs: Vec<(Program, ebql_catalog::EventKind, ebql_catalog::Attach)>,
    out: Map,
    tap_map: Option<Map>,
    /// The start map of a paired query.
    pair_map: Option<Map>,
    /// With a task-storage start map: the per-CPU count of unmatched starts.
    pair_live: Option<Map>,
    /// Further maps the plan declares (e.g. the all-zero value new groups start from).
    plan_maps: Vec<Map>,
    /// Index in `Compiled::maps` of `plan_maps[0]`: after the control and
    /// output maps, the tap or the pairing's start map, and the pairing's
    /// live-start counts, whichever the query has.
    first_plan_map: usize,
    /// Index in `plan_maps` of the stack-trace map, when the query reads a stack column.
    stack_map: Option<usize>,
    /// Index in `plan_maps` of the programs' own event counters (`counters`).
    counters: usize,
    ctl: MmapArray,
    _stats: Option<StatsGuard>,
}

/// Unmatched starts in task storage: the per-CPU counts summed (a start and
/// its end may run on different CPUs, so one CPU's count can be negative).
fn starts_live(live: &Map) -> Result<u64> {
    let cpus = ebql_runtime::num_possible_cpus()?;
    let mut values = vec![0u8; 8 * cpus];
    if !live.lookup(&0u32.to_ne_bytes(), &mut values)? {
        return Ok(0);
    }
    let sum = values
        .chunks_exact(8)
        .map(|c| i64::from_ne_bytes(c.try_into().expect("8 bytes")))
        .fold(0i64, i64::wrapping_add);
    u64::try_from(sum).map_err(|_| Error::Internal(format!("the per-CPU counts of unmatched starts sum to {sum}: more ends paired than starts stored")))
}

impl Loaded {
    /// Creates the maps `code` declares and loads the program (not attached);
    /// `attach_only`: programs that return at once instead (see [`ExecutorOptions::attach_only`]).
    fn load(
        code: &ebql_compiler::Compiled,
        stats: Option<StatsGuard>,
        attach_only: bool,
    ) -> Result<Loaded> {
        let ctl = MmapArray::create("ebql_ctl", ctl::SIZE)?;
        let create = |spec: &ebql_compiler::codegen::MapSpec| {
            let ty = match spec.kind {
                MapKind::PercpuHash => MapType::PercpuHash,
                MapKind::PercpuHashPrealloc => MapType::PercpuHashPrealloc,
                MapKind::MmapArray => MapType::MmapArray,
                MapKind::Array => MapType::Array,
                MapKind::RingBuf => MapType::RingBuf,
                MapKind::Hash => MapType::Hash,
                MapKind::SharedHash => MapType::HashNoPrealloc,
                MapKind::TaskStorage => MapType::TaskStorage,
                MapKind::PercpuArray => MapType::PercpuArray,
                MapKind::StackTrace => MapType::StackTrace,
            };
            Map::create(
                &spec.name,
                ty,
                spec.key_size,
                spec.value_size,
                spec.max_entries,
            )
        };
        let out = create(&code.maps[MAP_OUT])?;
        let tap_map = code
            .tap
            .as_ref()
            .and(code.maps.get(MAP_TAP))
            .map(create)
            .transpose()?;
        let pair_map = code
            .maps
            .get(MAP_PAIR)
            .filter(|m| matches!(m.kind, MapKind::Hash | MapKind::TaskStorage))
            .map(create)
            .transpose()?;
        let task_storage = code
            .maps
            .get(MAP_PAIR)
            .is_some_and(|m| m.kind == MapKind::TaskStorage);
        let pair_live = code
            .maps
            .get(MAP_PAIR_LIVE)
            .filter(|_| task_storage)
            .map(create)
            .transpose()?;
        let mut fds = vec![ctl.map().fd(), out.fd()];
        fds.extend(tap_map.as_ref().or(pair_map.as_ref()).map(Map::fd));
        fds.extend(pair_live.as_ref().map(Map::fd));
        let first_plan_map = fds.len();
        let plan_maps = code
            .maps
            .get(first_plan_map..)
            .unwrap_or_default()
            .iter()
            .map(create)
            .collect::<std::result::Result<Vec<Map>, _>>()?;
        fds.extend(plan_maps.iter().map(Map::fd));
        let mut progs = Vec::new();
        for spec in &code.programs {
            let target = LoadTarget::of(spec.event.kind, &spec.attach);
            let insns = if attach_only {
                ebql_compiler::codegen::return_at_once(spec.event.kind).bytes()
            } else {
                spec.program.bytes()
            };
            let prog = Program::load(&spec.name, target, &insns, &fds).map_err(|e| match e {
                ebql_runtime::RuntimeError::Verifier(mut v) => {
                    v.origin =
                        v.pc.and_then(|pc| spec.program.origin_of(pc))
                            .map(str::to_string);
                    Error::Verifier(v)
                }
                other => other.into(),
            })?;
            progs.push((prog, spec.event.kind, spec.attach.clone()));
        }
        let ringbuf = match &code.layout {
            OutputLayout::Stream { record_size, .. } => {
                Some(RingBuffer::new(&out, *record_size as usize)?)
            }
            OutputLayout::Groups { .. } => None,
        };
        let tap = match (&code.tap, &tap_map) {
            (Some(OutputLayout::Stream { record_size, .. }), Some(m)) => {
                Some(RingBuffer::new(m, *record_size as usize)?)
            }
            _ => None,
        };
        let stack_map = code
            .maps
            .iter()
            .position(|m| m.kind == MapKind::StackTrace)
            .map(|i| i - first_plan_map);
        let counters = code
            .counters
            .checked_sub(first_plan_map)
            .ok_or_else(|| Error::Internal("the event counters map among the fixed maps".into()))?;
        Ok(Loaded {
            ringbuf,
            tap,
            progs,
            out,
            tap_map,
            pair_map,
            pair_live,
            plan_maps,
            first_plan_map,
            stack_map,
            counters,
            ctl,
            _stats: stats,
        })
    }

    /// Program `index`'s own (seen, matched) counts, summed over CPUs.
    fn event_counts(&self, index: usize) -> Result<(u64, u64)> {
        let cpus = ebql_runtime::num_possible_cpus()?;
        let stride = counters::SIZE as usize;
        let mut values = vec![0u8; stride * cpus];
        if !self.plan_maps[self.counters].lookup(&(index as u32).to_ne_bytes(), &mut values)? {
            return Err(Error::Internal(format!(
                "no event counters for program {index}"
            )));
        }
        let at = |v: &[u8], off: i16| {
            u64::from_ne_bytes(
                v[off as usize..off as usize + 8]
                    .try_into()
                    .expect("8 bytes"),
            )
        };
        Ok(values.chunks_exact(stride).fold((0, 0), |(s, m), v| {
            (s + at(v, counters::SEEN), m + at(v, counters::MATCHED))
        }))
    }

    /// The stack-trace map, when the query reads a stack column.
    fn stack_map(&self) -> Option<&Map> {
        self.stack_map.map(|i| &self.plan_maps[i])
    }

    /// The plan map at index `i` of `Compiled::maps` (the overflow hash,
    /// the COUNT(DISTINCT) set, …).
    fn plan_map(&self, i: usize) -> &Map {
        &self.plan_maps[i - self.first_plan_map]
    }

    fn map_count(&self) -> usize {
        2 + self.tap_map.is_some() as usize
            + self.pair_map.is_some() as usize
            + self.pair_live.is_some() as usize
            + self.plan_maps.len()
    }

    /// The program that writes the output.
    fn main_prog(&self) -> &Program {
        &self.progs.last().expect("a loaded query has a program").0
    }
}

/// The kernel objects of one running query. Field order is drop order: the
/// links (detach) go first.
struct Probe {
    links: Vec<Link>,
    k: Loaded,
}

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
    window: Option<WindowSpec>,
    placement: Option<ebql_compiler::cost::PlacementDecision>,
}

impl RunningQuery {
    /// Loads and attaches `compiled` and starts its query thread. With a
    /// reference (`ebql check`), the program carries the tap and every window
    /// is sent as a [`crate::check::CheckedWindow`] instead of a batch.
    fn start(
        compiled: CompiledQuery,
        reference: Option<(
            ebql_compiler::check::Reference,
            Sender<crate::check::CheckedWindow>,
        )>,
        options: &ExecutorOptions,
    ) -> Result<RunningQuery> {
        let CompiledQuery {
            planned,
            split,
            code,
            placement,
            ..
        } = compiled;
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
        // The end program first: every start stored from then on can be matched.
        let mut links = Vec::new();
        for ((prog, kind, at), spec) in loaded.progs.iter().zip(&code.programs).rev() {
            links.push(ebql_runtime::attach(
                prog,
                *kind,
                at,
                &AttachOptions { pid: spec.pid },
            )?);
        }
        let probe = Probe { links, k: loaded };

        let windowed = split.kernel.window.is_some();
        let mut fields: Vec<Field> = Vec::new();
        if windowed {
            fields.push(Field::new("window_start", DataType::UInt64, false));
            fields.push(Field::new("window_end", DataType::UInt64, false));
        }
        fields.extend(
            split
                .remainder
                .schema()
                .fields()
                .iter()
                .map(|f| f.as_ref().clone()),
        );
        let schema = Arc::new(Schema::new(fields));

        let (tx, rx) = channel();
        let stop = Arc::new(AtomicBool::new(false));
        let stats = Arc::new(Mutex::new(QueryStats::default()));
        let group_spec = match &split.kernel.output {
            KernelOutput::Groups(g) => Some(g.clone()),
            KernelOutput::Stream { .. } => None,
        };
        let checking = reference.is_some();
        let tap = match (reference, &code.tap) {
            (Some((r, check_tx)), Some(layout)) => Some(TapSide {
                layout: layout.clone(),
                pending: decode::StreamRecords::new(layout),
                kernel_schema: r.split.kernel_schema.clone(),
                input: r.split.input.clone(),
                remainder: r.split.remainder.clone(),
                ctx: r.planned.ctx.clone(),
                cutter: CountCutter::new(r.count_filter.clone()),
                tx: check_tx,
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
            layout: code.layout.clone(),
            group_spec,
            window: split.kernel.window,
            kernel_schema: split.kernel_schema.clone(),
            input: split.input.clone(),
            remainder,
            ctx: planned.ctx.clone(),
            out_schema: schema.clone(),
            streamable,
            stream_limit,
            tx,
            tap,
            main_cutter,
            drops_closed: WindowDrops::default(),
            drops_emitted: WindowDrops::default(),
            panes: match split.kernel.window {
                Some(w @ WindowSpec::Time { .. }) => Some(Panes::new(w.panes() as usize)),
                _ => None,
            },
            stacks: Stacks::default(),
            stop: stop.clone(),
            stats: stats.clone(),
            local: QueryStats {
                bpf_stats: options.bpf_stats,
                ..Default::default()
            },
            poll: options.poll_interval,
            pending: decode::StreamRecords::new(&code.layout),
            gen: 0,
            next_count_window: 0,
            last_stream_emit: std::time::Instant::now(),
        };
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
            window: split.kernel.window,
            placement,
        })
    }

    /// Output schema: `window_start`, `window_end` (CLOCK_MONOTONIC ns for time
    /// windows, event ordinals for count windows) when windowed, then the query's columns.
    pub fn schema(&self) -> SchemaRef {
        self.schema.clone()
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
        self.thread.as_ref().is_none_or(|t| t.is_finished())
    }

    /// Stops the query: detaches the probe, emits the last (partial) window,
    /// and returns the final counters.
    pub fn stop(mut self) -> Result<QueryStats> {
        self.finish()?;
        Ok(self.stats())
    }

    fn finish(&mut self) -> Result<()> {
        self.stop.store(true, Ordering::SeqCst);
        match self.thread.take() {
            Some(t) => t
                .join()
                .map_err(|_| Error::Internal("query thread panicked".into()))?,
            None => Ok(()),
        }?;
        // The query thread is gone, so the forwarder has its last window: wait until it is passed on.
        if let Some(f) = self.forwarder.take() {
            let _ = f.join();
        }
        Ok(())
    }
}

impl Drop for RunningQuery {
    fn drop(&mut self) {
        let _ = self.finish();
    }
}

/// State of the query thread.
struct Worker {
    probe: Probe,
    layout: OutputLayout,
    group_spec: Option<GroupSpec>,
    window: Option<WindowSpec>,
    kernel_schema: SchemaRef,
    input: Arc<WindowInput>,
    remainder: LogicalPlan,
    ctx: SessionContext,
    out_schema: SchemaRef,
    streamable: bool,
    stream_limit: Option<usize>,
    tx: Sender<WindowBatch>,
    stop: Arc<AtomicBool>,
    stats: Arc<Mutex<QueryStats>>,
    local: QueryStats,
    poll: Duration,
    /// Ring-buffer rows not yet emitted, with their generation.
    pending: decode::StreamRecords,
    /// Current time-window generation.
    gen: u64,
    /// Next count window to emit.
    next_count_window: u64,
    /// When the last batch of an unwindowed raw stream was emitted.
    last_stream_emit: std::time::Instant,
    /// The differential oracle's reference side (`ebql check` only).
    tap: Option<TapSide>,
    /// Count windows over streamed rows: the rows that passed the WHERE, in order.
    main_cutter: Option<CountCutter>,
    /// Drops of time windows already closed (their counters were taken and zeroed).
    drops_closed: WindowDrops,
    /// Drops already attributed to emitted batches (count windows, unwindowed).
    drops_emitted: WindowDrops,
    /// Time windows: the closed panes the next window is made of.
    panes: Option<Panes>,
    /// Symbolizer of the stack columns (`kstack`, `ustack`) and its cache.
    stacks: Stacks,
}

/// The reference side of a checked query: the tap's raw rows and the plan
/// DataFusion evaluates on them, window by window.
struct TapSide {
    layout: OutputLayout,
    /// Tap rows not yet evaluated, with their generation.
    pending: decode::StreamRecords,
    kernel_schema: SchemaRef,
    input: Arc<WindowInput>,
    remainder: LogicalPlan,
    ctx: SessionContext,
    /// Count windows: the reference rows that passed the WHERE, in order.
    cutter: CountCutter,
    tx: Sender<crate::check::CheckedWindow>,
}

/// Rows of one window for a user-space plan: decoded kernel records, or
/// (count windows over streams) batches that already passed the WHERE.
enum Rows {
    Cells(Vec<Vec<Cell>>),
    Batches(Vec<RecordBatch>),
}

/// Count windows over streamed rows (thesis: a window of n events that passed
/// the filter): runs the user-space part of the WHERE, if any, on rows as they
/// arrive and keeps those that pass, in arrival order, to be cut n at a time.
struct CountCutter {
    filter: Option<LogicalPlan>,
    passed: std::collections::VecDeque<RecordBatch>,
    rows: usize,
}

impl CountCutter {
    fn new(filter: Option<LogicalPlan>) -> CountCutter {
        CountCutter {
            filter,
            passed: Default::default(),
            rows: 0,
        }
    }

    /// Filters `batch` (read through `input` by the filter plan) and keeps what passes.
    fn push(
        &mut self,
        rt: &tokio::runtime::Runtime,
        ctx: &SessionContext,
        input: &WindowInput,
        batch: RecordBatch,
    ) -> Result<()> {
        let passed = match &self.filter {
            Some(filter) => run_plan(rt, ctx, input, vec![batch], filter)?,
            None => vec![batch],
        };
        for b in passed.into_iter().filter(|b| b.num_rows() > 0) {
            self.rows += b.num_rows();
            self.passed.push_back(b);
        }
        Ok(())
    }

    /// Rows waiting.
    fn len(&self) -> usize {
        self.rows
    }

    /// The next `n` rows (fewer if fewer wait).
    fn take(&mut self, n: usize) -> Vec<RecordBatch> {
        let mut out = Vec::new();
        let mut need = n;
        while need > 0 {
            let Some(b) = self.passed.pop_front() else {
                break;
            };
            if b.num_rows() <= need {
                need -= b.num_rows();
                self.rows -= b.num_rows();
                out.push(b);
            } else {
                out.push(b.slice(0, need));
                self.passed.push_front(b.slice(need, b.num_rows() - need));
                self.rows -= need;
                need = 0;
            }
        }
        out
    }
}

/// Tap or ring-buffer rows of generation `gen`, removed from `pending` (other generations stay, in order).
/// Drained group-table entries per window tag: (key, CPU, value) as
/// [`decode::group_values`] gives them.
type GroupValuesByTag = BTreeMap<Option<u64>, Vec<(Vec<u8>, usize, Vec<u8>)>>;

/// Streamed records decoded into a batch of `schema`: straight into Arrow
/// ([`decode::stream_batch`]), or through cells when a column holds stack
/// ids to symbolize.
fn records_batch(
    stacks: &mut Stacks,
    map: Option<&Map>,
    layout: &OutputLayout,
    schema: &SchemaRef,
    records: &[u8],
) -> Result<RecordBatch> {
    if map.is_none() || crate::symbolize::stack_columns(schema).is_empty() {
        return Ok(decode::stream_batch(layout, schema, records)?);
    }
    let rows = decode::stream_rows(layout, records)
        .into_iter()
        .map(|(_, r)| r)
        .collect();
    Ok(decode::batch(
        schema,
        &symbolize_rows(stacks, map, schema, rows),
    )?)
}

/// Runs a user-space `plan` that reads `input` on `rows`.
fn run_plan(
    rt: &tokio::runtime::Runtime,
    ctx: &SessionContext,
    input: &WindowInput,
    rows: Vec<RecordBatch>,
    plan: &LogicalPlan,
) -> Result<Vec<RecordBatch>> {
    input.set(rows);
    Ok(rt.block_on(async {
        ctx.execute_logical_plan(plan.clone())
            .await?
            .collect()
            .await
    })?)
}

/// [`run_plan`], its output as one batch of the plan's schema.
fn run_plan_concat(
    rt: &tokio::runtime::Runtime,
    ctx: &SessionContext,
    input: &WindowInput,
    rows: Vec<RecordBatch>,
    plan: &LogicalPlan,
) -> Result<RecordBatch> {
    let batches = run_plan(rt, ctx, input, rows, plan)?;
    let schema = Arc::new(plan.schema().as_arrow().clone());
    Ok(datafusion::arrow::compute::concat_batches(
        &schema, &batches,
    )?)
}

/// True if `plan` has a LIMIT (its rows may legitimately differ between two evaluations).
fn plan_has_limit(plan: &LogicalPlan) -> bool {
    use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
    let mut found = false;
    let _ = plan.apply(|n| {
        found |= matches!(n, LogicalPlan::Limit(_));
        Ok(if found {
            TreeNodeRecursion::Stop
        } else {
            TreeNodeRecursion::Continue
        })
    });
    found
}

/// An unwindowed raw stream is emitted at least this often…
const STREAM_BATCH_INTERVAL: Duration = Duration::from_millis(200);
/// …or as soon as this many rows are waiting.
const STREAM_BATCH_ROWS: usize = 65536;

impl Worker {
    fn run(&mut self) -> Result<()> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .map_err(|e| Error::Internal(e.to_string()))?;
        let result = self.run_loop(&rt);
        // Whatever happened, the probes are detached when we return.
        self.probe.links.clear();
        self.publish_stats();
        result
    }

    fn run_loop(&mut self, rt: &tokio::runtime::Runtime) -> Result<()> {
        let mut window_start = monotonic_ns();
        let mut due = window_start;
        loop {
            let stopping = self.stop.load(Ordering::SeqCst);
            if stopping {
                self.detach()?;
            }
            match self.window {
                Some(WindowSpec::Time { step_ns, .. }) => {
                    // One generation per pane: flip every step (see crate::panes).
                    let now = monotonic_ns();
                    if stopping || now >= due + step_ns {
                        let end = monotonic_ns();
                        if !stopping {
                            // New events go to the next generation from here on.
                            self.probe
                                .k
                                .ctl
                                .u64_at(ctl::GEN)
                                .store(self.gen + 1, Ordering::SeqCst);
                            wait_for_probes()?;
                        }
                        self.close_time_window(rt, window_start, end)?;
                        self.gen += 1;
                        window_start = end;
                        due += step_ns;
                        if due + step_ns < now {
                            // We fell behind (machine stalled): realign instead of bursting.
                            due = now;
                        }
                    } else {
                        self.drain_ringbuf()?;
                    }
                }
                Some(WindowSpec::Count { size, .. }) => {
                    self.poll_count_windows(rt, size, stopping)?
                }
                None => self.poll_unwindowed(rt, stopping)?,
            }
            self.publish_stats();
            if stopping {
                return Ok(());
            }
            if self.stream_limit_reached() {
                self.stop.store(true, Ordering::SeqCst);
                continue;
            }
            let sleep = match self.window {
                Some(WindowSpec::Time { step_ns, .. }) => {
                    let until = (due + step_ns).saturating_sub(monotonic_ns());
                    Duration::from_nanos(until).min(
                        if self.probe.k.ringbuf.is_some() || self.probe.k.tap.is_some() {
                            self.poll
                        } else {
                            Duration::from_millis(50)
                        },
                    )
                }
                _ => self.poll,
            };
            std::thread::sleep(sleep);
        }
    }

    fn stream_limit_reached(&self) -> bool {
        self.stream_limit
            .is_some_and(|n| self.local.rows_emitted >= n as u64)
    }

    /// Detaches the probe and waits for runs in flight: nothing changes after this.
    fn detach(&mut self) -> Result<()> {
        if !self.probe.links.is_empty() {
            self.probe.links.clear();
            wait_for_probes()?;
            self.local.pair_starts_left = match (&self.probe.k.pair_live, &self.probe.k.pair_map) {
                // Task storage cannot be listed: the probes counted the valid slots.
                (Some(live), _) => starts_live(live)?,
                // Nothing writes the start map any more: what is left never met its end.
                (None, Some(starts)) => {
                    let keys = starts.keys()?;
                    // A LEFT JOIN pairing: each is an unmatched start's row of the last window.
                    if let OutputLayout::Stream {
                        record_size,
                        gen_in_record,
                        outer: Some(outer),
                        ..
                    } = &self.layout
                    {
                        let mut value = vec![0u8; outer.value_size as usize];
                        for key in &keys {
                            if starts.lookup(key, &mut value)? {
                                self.local.events_matched +=
                                    self.pending.push(&outer.unmatched_row(
                                        *record_size,
                                        gen_in_record.then_some(self.gen),
                                        &value,
                                    )) as u64;
                            }
                        }
                    }
                    keys.len() as u64
                }
                (None, None) => 0,
            };
        }
        Ok(())
    }

    fn drain_ringbuf(&mut self) -> Result<()> {
        if let Some(rb) = self.probe.k.ringbuf.as_mut() {
            // Records stay bytes until their window's batch is built.
            let data = rb.drain()?;
            self.pending.push(&data);
        }
        if let (Some(rb), Some(tap)) = (self.probe.k.tap.as_mut(), self.tap.as_mut()) {
            tap.pending.push(&rb.drain()?);
        }
        Ok(())
    }

    /// Rows of the group table whose window tag satisfies `select`; deletes them.
    fn drain_groups(
        &mut self,
        select: impl Fn(Option<u64>) -> bool,
    ) -> Result<BTreeMap<Option<u64>, Vec<Vec<Cell>>>> {
        let entries = self.drain_group_values(select)?;
        let spec = self
            .group_spec
            .as_ref()
            .expect("group spec with group layout");
        let layout = &self.layout;
        let (stacks, map, schema) = (
            &mut self.stacks,
            self.probe.k.stack_map(),
            &self.kernel_schema,
        );
        Ok(entries
            .into_iter()
            .map(|(tag, groups)| {
                (
                    tag,
                    symbolize_rows(
                        stacks,
                        map,
                        schema,
                        groups
                            .into_iter()
                            .map(|(key, cpu, v)| decode::group_row(layout, spec, &key, cpu, &v))
                            .collect(),
                    ),
                )
            })
            .collect())
    }

    /// Entries of the group table whose window tag satisfies `select`,
    /// deleted from it: per tag, (key, CPU, value) as [`decode::group_values`]
    /// gives them (merged over CPUs unless `cpu` is a group key).
    fn drain_group_values(
        &mut self,
        select: impl Fn(Option<u64>) -> bool,
    ) -> Result<GroupValuesByTag> {
        let OutputLayout::Groups {
            window_tag,
            value_size,
            distinct_set,
            key_size,
            ..
        } = self.layout
        else {
            return Ok(BTreeMap::new());
        };
        let spec = self
            .group_spec
            .as_ref()
            .expect("group spec with group layout");
        let ncpu = ebql_runtime::num_possible_cpus()?;
        let stride = (value_size as usize).div_ceil(8) * 8;
        let per_group = stride * ncpu;
        let mut out: GroupValuesByTag = BTreeMap::new();
        let plan_map = |i: usize| self.probe.k.plan_map(i);
        // The window tag a group key (or a COUNT(DISTINCT) set key, which starts with one) carries.
        let window_of = |key: &[u8]| {
            window_tag.map(|(off, bytes)| decode::uint_at(key, off as usize, bytes as usize))
        };
        // An array's slots, a window's at a time in one batch read; each
        // slot's group key is rebuilt in the hash layout (ebql_compiler::groupmap).
        if let OutputLayout::Groups {
            array: Some(ix),
            keys,
            ..
        } = &self.layout
        {
            // Slots of parity gen & 1 hold generation `gen`, the others gen − 1 (tags are its low 32 bits).
            let gen = self.gen;
            let tag_of = |parity: u32| if u64::from(parity) == gen & 1 { gen } else { gen.wrapping_sub(1) } & 0xffff_ffff;
            let array = &self.probe.k.out;
            for parity in 0..ix.windows {
                let first = parity * ix.slots;
                let tag = window_of(&ix.slot_key(first, key_size, keys, window_tag, tag_of));
                if !select(tag) {
                    continue;
                }
                let mut all = vec![0u8; per_group * ix.slots as usize];
                array.lookup_array_range(first, per_group, &mut all)?;
                let zeroes = vec![0u8; per_group];
                for (slot, values) in (first..).zip(all.chunks_exact(per_group)) {
                    // An untouched slot is no group; a touched one is zeroed for the generation that reuses it.
                    if values.chunks_exact(stride).all(|v| v[0..8] == [0; 8]) {
                        continue;
                    }
                    array.update_percpu(&slot.to_ne_bytes(), &zeroes)?;
                    let key = ix.slot_key(slot, key_size, keys, window_tag, tag_of);
                    let groups = decode::group_values(&self.layout, spec, values, stride);
                    out.entry(tag)
                        .or_default()
                        .extend(groups.into_iter().map(|(cpu, v)| (key.clone(), cpu, v)));
                }
            }
        }
        // A hash group table, or the overflow hash of an array with a dense-range key: keys are group keys.
        let hash = match &self.layout {
            OutputLayout::Groups { array: None, .. } => Some(&self.probe.k.out),
            OutputLayout::Groups { overflow, .. } => overflow.map(plan_map),
            OutputLayout::Stream { .. } => None,
        };
        if let Some(map) = hash {
            let mut values = vec![0u8; per_group];
            for key in map.keys()? {
                let tag = window_of(&key);
                if !select(tag) || !map.lookup(&key, &mut values)? {
                    continue;
                }
                map.delete(&key)?;
                let groups = decode::group_values(&self.layout, spec, &values, stride);
                out.entry(tag)
                    .or_default()
                    .extend(groups.into_iter().map(|(cpu, v)| (key.clone(), cpu, v)));
            }
        }
        // The COUNT(DISTINCT) set entries of the drained windows go with their groups.
        if let Some(set) = distinct_set.map(plan_map) {
            for key in set.keys()? {
                if select(window_of(&key)) {
                    set.delete(&key)?;
                }
            }
        }
        Ok(out)
    }

    /// Closes pane `gen` (its generation was flipped and the grace period
    /// passed, or the probe is detached), adds it to the open panes and
    /// emits the window of the last `size / step` panes.
    fn close_time_window(
        &mut self,
        rt: &tokio::runtime::Runtime,
        start: u64,
        end: u64,
    ) -> Result<()> {
        let gen = self.gen;
        // Every probe run that read `gen` has finished: its drop counters are final.
        let drops = self.take_window_drops(gen);
        self.drain_ringbuf()?;
        let rows = match &self.layout {
            OutputLayout::Groups {
                window_tag, keys, ..
            } => {
                // The key holds the generation's low 32 bits; zeroed in the pane so a group has one id in every pane.
                let tag = gen & 0xffff_ffff;
                let (tag_off, tag_len) =
                    window_tag.map_or((0, 0), |(o, l)| (o as usize, l as usize));
                let per_cpu_key = keys.iter().any(Option::is_none);
                let entries = self
                    .drain_group_values(|t| t == Some(tag))?
                    .remove(&Some(tag))
                    .unwrap_or_default();
                PaneRows::Groups(
                    entries
                        .into_iter()
                        .map(|(mut key, cpu, v)| {
                            key[tag_off..tag_off + tag_len].fill(0);
                            ((key, if per_cpu_key { cpu } else { 0 }), v)
                        })
                        .collect(),
                )
            }
            OutputLayout::Stream { .. } => {
                let records = self.pending.take_generation(gen);
                PaneRows::Rows(records_batch(
                    &mut self.stacks,
                    self.probe.k.stack_map(),
                    &self.layout,
                    &self.kernel_schema,
                    &records,
                )?)
            }
        };
        let reference = match self.tap.as_mut() {
            Some(tap) => Some(records_batch(
                &mut self.stacks,
                self.probe.k.stack_map(),
                &tap.layout,
                &tap.kernel_schema,
                &tap.pending.take_generation(gen),
            )?),
            None => None,
        };
        let panes = self
            .panes
            .as_mut()
            .ok_or_else(|| Error::Internal("a time window without its panes".into()))?;
        panes.push(Pane {
            start,
            end,
            rows,
            reference,
            drops,
        });
        let spec = self.group_spec.as_ref();
        let window = panes
            .window(|into, from| {
                decode::merge_value(spec.expect("groups only with a group spec"), into, from)
            })
            .expect("a pane was just added");
        let rows = match window.rows {
            WindowRows::Groups(groups) => {
                let spec = spec.expect("groups only with a group spec");
                let rows = groups
                    .iter()
                    .map(|((key, cpu), v)| decode::group_row(&self.layout, spec, key, *cpu, v))
                    .collect();
                Rows::Cells(symbolize_rows(
                    &mut self.stacks,
                    self.probe.k.stack_map(),
                    &self.kernel_schema,
                    rows,
                ))
            }
            WindowRows::Rows(batches) => Rows::Batches(batches),
        };
        let bounds = WindowBounds {
            start: window.start,
            end: window.end,
            panes: Some((window.panes as u32, window.panes_full as u32)),
        };
        self.emit(
            rt,
            rows,
            Some(bounds),
            window.drops,
            window.reference.map(Rows::Batches),
        )
    }

    /// Takes and zeroes the drop counters of time-window generation `gen`
    /// (call after the grace period that closed it).
    fn take_window_drops(&mut self, gen: u64) -> WindowDrops {
        let ctl = &self.probe.k.ctl;
        let take = |pair: u32| {
            ctl.u64_at(ctl::drop_slot(pair, gen))
                .swap(0, Ordering::SeqCst)
        };
        let d = WindowDrops {
            groups_full: take(ctl::DROP_GROUPS_FULL),
            ringbuf_full: take(ctl::DROP_RINGBUF_FULL),
            tap_full: take(ctl::DROP_TAP_FULL),
            distinct_full: take(ctl::DROP_DISTINCT_FULL),
        };
        self.drops_closed.groups_full += d.groups_full;
        self.drops_closed.ringbuf_full += d.ringbuf_full;
        self.drops_closed.tap_full += d.tap_full;
        self.drops_closed.distinct_full += d.distinct_full;
        self.drops_emitted = self.drops_closed;
        d
    }

    /// Drops counted since the last emission (count windows and unwindowed queries).
    fn drops_since_last_emit(&mut self) -> WindowDrops {
        let now = self.drop_totals();
        let d = WindowDrops {
            groups_full: now.groups_full - self.drops_emitted.groups_full,
            ringbuf_full: now.ringbuf_full - self.drops_emitted.ringbuf_full,
            tap_full: now.tap_full - self.drops_emitted.tap_full,
            distinct_full: now.distinct_full - self.drops_emitted.distinct_full,
        };
        self.drops_emitted = now;
        d
    }

    /// All drops so far: closed windows plus what the open counters hold.
    fn drop_totals(&self) -> WindowDrops {
        let ctl = &self.probe.k.ctl;
        let open = |pair: u32| {
            ctl.u64_at(pair).load(Ordering::SeqCst) + ctl.u64_at(pair + 8).load(Ordering::SeqCst)
        };
        WindowDrops {
            groups_full: self.drops_closed.groups_full + open(ctl::DROP_GROUPS_FULL),
            ringbuf_full: self.drops_closed.ringbuf_full + open(ctl::DROP_RINGBUF_FULL),
            tap_full: self.drops_closed.tap_full + open(ctl::DROP_TAP_FULL),
            distinct_full: self.drops_closed.distinct_full + open(ctl::DROP_DISTINCT_FULL),
        }
    }

    fn poll_count_windows(
        &mut self,
        rt: &tokio::runtime::Runtime,
        size: u64,
        stopping: bool,
    ) -> Result<()> {
        if self.group_spec.is_some() {
            let seq = self.probe.k.ctl.u64_at(ctl::SEQ).load(Ordering::SeqCst);
            let full = seq / size;
            if full <= self.next_count_window && !stopping {
                if self.tap.is_some() {
                    self.drain_ringbuf()?;
                    self.filter_tap_rows(rt)?;
                }
                return Ok(());
            }
            wait_for_probes()?;
            self.drain_ringbuf()?;
            self.filter_tap_rows(rt)?;
            let from = self.next_count_window;
            let mut by_window =
                self.drain_groups(|tag| tag.is_some_and(|w| w >= from && (stopping || w < full)))?;
            let last = if stopping { seq.div_ceil(size) } else { full };
            for w in from..last {
                let rows = by_window.remove(&Some(w)).unwrap_or_default();
                let drops = self.drops_since_last_emit();
                let reference = self.take_filtered(size as usize, stopping && w + 1 == last);
                self.emit(
                    rt,
                    Rows::Cells(rows),
                    Some(count_window(w * size, (w + 1) * size)),
                    drops,
                    reference,
                )?;
            }
            self.next_count_window = last;
        } else {
            self.drain_ringbuf()?;
            self.filter_tap_rows(rt)?;
            if !self.pending.is_empty() {
                let records = self.pending.take_all();
                let batch = records_batch(
                    &mut self.stacks,
                    self.probe.k.stack_map(),
                    &self.layout,
                    &self.kernel_schema,
                    &records,
                )?;
                let cutter = self.main_cutter.as_mut().ok_or_else(|| {
                    Error::Internal("count window over a stream without its cutter".into())
                })?;
                cutter.push(rt, &self.ctx, &self.input, batch)?;
            }
            let size_rows = size as usize;
            while let Some(waiting) = self
                .main_cutter
                .as_ref()
                .map(CountCutter::len)
                .filter(|&n| n >= size_rows || (stopping && n > 0))
            {
                let last = stopping && waiting <= size_rows;
                let rows = self
                    .main_cutter
                    .as_mut()
                    .expect("checked above")
                    .take(size_rows);
                let w = self.next_count_window;
                let drops = self.drops_since_last_emit();
                let reference = self.take_filtered(size_rows, last);
                self.emit(
                    rt,
                    Rows::Batches(rows),
                    Some(count_window(w * size, (w + 1) * size)),
                    drops,
                    reference,
                )?;
                self.next_count_window += 1;
            }
        }
        Ok(())
    }

    /// Count windows under `ebql check`: runs the reference's WHERE over the
    /// tap rows drained so far and keeps the rows that pass, in order.
    fn filter_tap_rows(&mut self, rt: &tokio::runtime::Runtime) -> Result<()> {
        let Some(tap) = self.tap.as_mut() else {
            return Ok(());
        };
        if tap.pending.is_empty() {
            return Ok(());
        }
        let batch = records_batch(
            &mut self.stacks,
            self.probe.k.stack_map(),
            &tap.layout,
            &tap.kernel_schema,
            &tap.pending.take_all(),
        )?;
        tap.cutter.push(rt, &tap.ctx, &tap.input, batch)
    }

    /// Count windows under `ebql check`: the next `n` filtered reference rows (all of them if `all`).
    fn take_filtered(&mut self, n: usize, all: bool) -> Option<Rows> {
        let tap = self.tap.as_mut()?;
        let n = if all { tap.cutter.len() } else { n };
        Some(Rows::Batches(tap.cutter.take(n)))
    }

    fn poll_unwindowed(&mut self, rt: &tokio::runtime::Runtime, stopping: bool) -> Result<()> {
        if self.group_spec.is_some() {
            if stopping {
                self.drain_ringbuf()?;
                let rows = self
                    .drain_groups(|_| true)?
                    .into_values()
                    .flatten()
                    .collect();
                let drops = self.drops_since_last_emit();
                let reference = self.take_all_tap_rows()?;
                self.emit(rt, Rows::Cells(rows), None, drops, reference)?;
            } else if self.tap.is_some() {
                self.drain_ringbuf()?;
            }
            return Ok(());
        }
        self.drain_ringbuf()?;
        // Raw streams are emitted in batches of up to STREAM_BATCH_INTERVAL, not per drain.
        let due = self.last_stream_emit.elapsed() >= STREAM_BATCH_INTERVAL
            || self.pending.len() >= STREAM_BATCH_ROWS;
        if (self.streamable && !self.pending.is_empty() && due) || stopping {
            self.last_stream_emit = std::time::Instant::now();
            let room = self.stream_limit.map_or(usize::MAX, |limit| {
                limit.saturating_sub(self.local.rows_emitted as usize)
            });
            let records = self.pending.take_first(room);
            if !records.is_empty() || !self.streamable {
                let batch = records_batch(
                    &mut self.stacks,
                    self.probe.k.stack_map(),
                    &self.layout,
                    &self.kernel_schema,
                    &records,
                )?;
                let drops = self.drops_since_last_emit();
                let reference = self.take_all_tap_rows()?;
                self.emit(rt, Rows::Batches(vec![batch]), None, drops, reference)?;
            }
        }
        Ok(())
    }

    fn take_all_tap_rows(&mut self) -> Result<Option<Rows>> {
        let Some(tap) = self.tap.as_mut() else {
            return Ok(None);
        };
        let batch = records_batch(
            &mut self.stacks,
            self.probe.k.stack_map(),
            &tap.layout,
            &tap.kernel_schema,
            &tap.pending.take_all(),
        )?;
        Ok(Some(Rows::Batches(vec![batch])))
    }

    /// Runs the user-space plan on one window's kernel rows and sends the
    /// result; under `ebql check`, also evaluates the reference on the same
    /// window's tap rows and sends both.
    fn emit(
        &mut self,
        rt: &tokio::runtime::Runtime,
        rows: Rows,
        window: Option<WindowBounds>,
        drops: WindowDrops,
        reference: Option<Rows>,
    ) -> Result<()> {
        let input = match rows {
            Rows::Cells(mut rows) => {
                if rows.is_empty() {
                    if let Some(spec) = self.group_spec.as_ref().filter(|s| s.keys.is_empty()) {
                        rows.push(decode::empty_global_row(spec));
                    }
                }
                vec![decode::batch(&self.kernel_schema, &rows)?]
            }
            Rows::Batches(b) => b,
        };
        let result = run_plan_concat(rt, &self.ctx, &self.input, input, &self.remainder)?;
        let out = self.with_window(&result, window)?;
        self.local.rows_emitted += out.num_rows() as u64;
        self.local.windows_emitted += window.is_some() as u64;
        let sent = match (self.tap.as_ref(), reference) {
            (Some(tap), Some(reference)) => {
                let input = match reference {
                    Rows::Cells(cells) => vec![decode::batch(&tap.kernel_schema, &cells)?],
                    Rows::Batches(b) => b,
                };
                let ref_result = run_plan_concat(rt, &tap.ctx, &tap.input, input, &tap.remainder)?;
                let reference = self.with_window(&ref_result, window)?;
                let has_limit = plan_has_limit(&self.remainder);
                tap.tx
                    .send(crate::check::CheckedWindow {
                        window: window.map(|w| (w.start, w.end)),
                        kernel: out,
                        reference,
                        drops,
                        has_limit,
                    })
                    .is_ok()
            }
            _ => self
                .tx
                .send(WindowBatch {
                    batch: out,
                    bounds: window,
                    drops,
                })
                .is_ok(),
        };
        if !sent {
            // Nobody listens any more: stop.
            self.stop.store(true, Ordering::SeqCst);
        }
        Ok(())
    }

    /// `result` with the window bounds as leading columns.
    fn with_window(
        &self,
        result: &RecordBatch,
        window: Option<WindowBounds>,
    ) -> Result<RecordBatch> {
        let mut cols: Vec<ArrayRef> = Vec::new();
        if let Some(WindowBounds { start, end, .. }) = window {
            let n = result.num_rows();
            cols.push(Arc::new(UInt64Array::from(vec![start; n])));
            cols.push(Arc::new(UInt64Array::from(vec![end; n])));
        }
        cols.extend(result.columns().iter().cloned());
        // The reference's columns may be typed differently from the query's
        // (that is a disagreement the oracle reports, not a crash here).
        let schema = if self
            .out_schema
            .fields()
            .iter()
            .zip(&cols)
            .all(|(f, c)| f.data_type() == c.data_type())
            && self.out_schema.fields().len() == cols.len()
        {
            self.out_schema.clone()
        } else {
            let mut fields: Vec<Field> = Vec::new();
            if window.is_some() {
                fields.push(Field::new("window_start", DataType::UInt64, false));
                fields.push(Field::new("window_end", DataType::UInt64, false));
            }
            fields.extend(result.schema().fields().iter().map(|f| f.as_ref().clone()));
            Arc::new(Schema::new(fields))
        };
        Ok(RecordBatch::try_new_with_options(
            schema,
            cols,
            &datafusion::arrow::record_batch::RecordBatchOptions::new()
                .with_row_count(Some(result.num_rows())),
        )?)
    }

    fn publish_stats(&mut self) {
        let drops = self.drop_totals();
        self.local.dropped_groups_full = drops.groups_full;
        self.local.dropped_ringbuf_full = drops.ringbuf_full;
        self.local.dropped_distinct_full = drops.distinct_full;
        let all: std::result::Result<Vec<_>, _> =
            self.probe.k.progs.iter().map(|(p, ..)| p.stats()).collect();
        if let Ok(all) = all {
            // The kernel counts misses with or without bpf_stats.
            self.local.bpf_recursion_misses = all.iter().map(|s| s.recursion_misses).sum();
            if self.local.bpf_stats {
                self.local.bpf_run_cnt = all.iter().map(|s| s.run_cnt).sum();
                self.local.bpf_run_time_ns = all.iter().map(|s| s.run_time_ns).sum();
            }
        }
        // The output program is the last; a pairing's start program is the first.
        let k = &self.probe.k;
        if let Ok((seen, matched)) = k.event_counts(k.progs.len() - 1) {
            (self.local.events_seen, self.local.events_matched) = (seen, matched);
        }
        if k.progs.len() > 1 {
            if let Ok((seen, matched)) = k.event_counts(0) {
                (self.local.pair_starts_seen, self.local.pair_starts_matched) = (seen, matched);
            }
        }
        if self.probe.k.pair_map.is_some() {
            let ctl = &self.probe.k.ctl;
            let at = |slot: u32| ctl.u64_at(slot).load(Ordering::SeqCst);
            self.local.pair_starts_overwritten = at(ctl::PAIR_OVERWRITTEN);
            self.local.pair_ends_without_start = at(ctl::PAIR_NO_START);
            self.local.pair_start_map_full = at(ctl::PAIR_START_FULL);
        }
        *self.stats.lock().unwrap() = self.local;
    }
}
