//! The executor (thesis §3.1): compiles a query, loads and attaches its probe,
//! and runs a thread that closes windows, drains the kernel's state, runs the
//! user-space remainder of the plan on DataFusion and sends record batches.
//!
//! Window protocol (exact at boundaries): the probe tags every update with
//! the generation it read from the shared control map. To close a window,
//! user space stores generation g+1, calls membarrier(MEMBARRIER_CMD_GLOBAL)
//! (a synchronize_rcu(): every probe run that could have read g has
//! finished), then drains and deletes generation g. An event is therefore in
//! exactly one window, and a window closes on time even when no event comes.

use crate::decode::{self, Cell};
use crate::error::{Error, Result};
use datafusion::arrow::array::{ArrayRef, UInt64Array};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::logical_expr::LogicalPlan;
use datafusion::prelude::SessionContext;
use ebql_compiler::codegen::{ctl, MapKind, OutputLayout, MAP_OUT};
use ebql_compiler::planner::WindowInput;
use ebql_compiler::prepass::WindowSpec;
use ebql_compiler::split::{GroupSpec, KernelOutput};
use ebql_compiler::{compile_query, CodegenOptions, CompiledQuery};
use ebql_runtime::{membarrier_global, Map, MapType, MmapArray, Program, RingBuffer, StatsGuard, TracepointLink};
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

/// Counters of a running or finished query.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QueryStats {
    /// Times the probe ran: every event at the hook, from any process (bpf_stats run_cnt).
    pub events_seen: u64,
    /// Events that passed the kernel filter: recorded plus dropped.
    pub events_matched: u64,
    /// Rows sent to the consumer.
    pub rows_emitted: u64,
    /// Windows closed and emitted.
    pub windows_emitted: u64,
    /// Events not recorded because the group table was full (raise --max-groups).
    pub dropped_groups_full: u64,
    /// Events not recorded because the ring buffer was full.
    pub dropped_ringbuf_full: u64,
    /// Probe runs the kernel skipped because another BPF program was running on that CPU.
    pub bpf_recursion_misses: u64,
    /// bpf_stats: total probe runs and ns spent in them (0 when stats are off).
    pub bpf_run_cnt: u64,
    /// bpf_stats: total ns spent in probe runs (0 when stats are off).
    pub bpf_run_time_ns: u64,
}

impl QueryStats {
    /// All events lost, for any reason.
    pub fn events_dropped(&self) -> u64 {
        self.dropped_groups_full + self.dropped_ringbuf_full + self.bpf_recursion_misses
    }

    /// Mean ns per probe run, if bpf_stats were on.
    pub fn ns_per_event(&self) -> Option<f64> {
        (self.bpf_run_cnt > 0).then(|| self.bpf_run_time_ns as f64 / self.bpf_run_cnt as f64)
    }

    /// One JSON object (the CLI prints it as `ebql: stats {…}`).
    pub fn to_json(&self) -> String {
        format!(
            "{{\"events_seen\":{},\"events_matched\":{},\"rows_emitted\":{},\"windows_emitted\":{},\"events_dropped\":{},\"dropped_groups_full\":{},\"dropped_ringbuf_full\":{},\"bpf_recursion_misses\":{},\"bpf_run_cnt\":{},\"bpf_run_time_ns\":{}}}",
            self.events_seen, self.events_matched, self.rows_emitted, self.windows_emitted, self.events_dropped(), self.dropped_groups_full, self.dropped_ringbuf_full, self.bpf_recursion_misses, self.bpf_run_cnt, self.bpf_run_time_ns
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
    /// Keep bpf_stats on while queries run (run count and time per probe; costs ~10-20 ns per event).
    pub bpf_stats: bool,
}

impl Default for ExecutorOptions {
    fn default() -> Self {
        ExecutorOptions { codegen: CodegenOptions::default(), poll_interval: Duration::from_millis(10), bpf_stats: true }
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
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: valid out-pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// What this kernel offers for an event kind eBQL does not support yet, so the
/// user knows whether a later eBQL would work here.
fn kernel_support_note(message: &str, tracefs: &std::path::Path) -> Option<String> {
    let kind = message.split("event kind `").nth(1)?.split('`').next()?;
    let f = ebql_runtime::probe_features(tracefs);
    Some(match kind {
        "kprobe" | "kretprobe" | "k" | "kr" if !f.kprobes => {
            "note: this kernel has no kprobes either (no kprobe_events in tracefs: CONFIG_KPROBE_EVENTS is off)".into()
        }
        "uprobe" | "uretprobe" | "u" | "usdt" if !f.uprobes => "note: this kernel has no uprobes (no uprobe_events in tracefs)".into(),
        "fentry" | "fexit" if !f.btf => "note: fentry/fexit need kernel BTF (/sys/kernel/btf/vmlinux), which this kernel lacks".into(),
        "fentry" | "fexit" => "note: fentry/fexit also need BPF trampolines; check `bpftool feature probe` on this kernel".into(),
        _ => return None,
    })
}

impl Executor {
    /// An executor with default options. Nothing touches the kernel until a query runs.
    pub fn new() -> Executor {
        Self::with_options(ExecutorOptions::default())
    }

    /// An executor with these options. Nothing touches the kernel until a query runs.
    pub fn with_options(options: ExecutorOptions) -> Executor {
        Executor { options, catalog: None, queries: HashMap::new() }
    }

    /// The event catalog (tracefs, mounted if needed).
    pub fn catalog(&mut self) -> Result<&ebql_catalog::Catalog> {
        if self.catalog.is_none() {
            self.catalog = Some(ebql_catalog::Catalog::open().map_err(Error::Catalog)?);
        }
        Ok(self.catalog.as_ref().unwrap())
    }

    /// Compiles without touching BPF (for `explain`).
    pub fn compile(&mut self, sql: &str) -> Result<CompiledQuery> {
        let opts = self.options.codegen;
        let catalog = self.catalog()?;
        let root = catalog.root().to_path_buf();
        compile_query(sql, catalog, &opts).map_err(|e| match Error::compile(sql, e) {
            Error::Query { query, mut diagnostic } => {
                if let Some(note) = kernel_support_note(&diagnostic.message, &root) {
                    let hint = diagnostic.hint.take().map(|h| format!("{h}; ")).unwrap_or_default();
                    diagnostic.hint = Some(format!("{hint}{note}"));
                }
                Error::Query { query, diagnostic }
            }
            other => other,
        })
    }

    /// Compiles, loads and attaches `sql`; when this returns Ok the probe is attached.
    pub fn execute(&mut self, sql: &str) -> Result<RunningQuery> {
        let compiled = self.compile(sql)?;
        RunningQuery::start(compiled, &self.options)
    }

    /// Thesis API: runs a query and returns its output schema and a channel of
    /// record batches (one per window; per drain for raw streams).
    pub fn execute_query(&mut self, sql: String) -> Result<(SchemaRef, Receiver<RecordBatch>)> {
        if self.queries.contains_key(&sql) {
            return Err(Error::Internal("this query is already running in this executor".into()));
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

/// The kernel objects of one query. Field order is drop order: the link
/// (detach) goes first.
struct Probe {
    link: Option<TracepointLink>,
    ringbuf: Option<RingBuffer>,
    prog: Program,
    out: Map,
    ctl: MmapArray,
    _stats: Option<StatsGuard>,
}

/// A query whose probe is attached; dropping it stops the query.
pub struct RunningQuery {
    schema: SchemaRef,
    receiver: Option<Receiver<RecordBatch>>,
    stop: Arc<AtomicBool>,
    stats: Arc<Mutex<QueryStats>>,
    thread: Option<JoinHandle<Result<()>>>,
    prog_id: u32,
    window: Option<WindowSpec>,
}

impl RunningQuery {
    fn start(compiled: CompiledQuery, options: &ExecutorOptions) -> Result<RunningQuery> {
        let CompiledQuery { planned, split, code } = compiled;
        let stats_guard = if options.bpf_stats { StatsGuard::enable().ok() } else { None };
        let ctl = MmapArray::create("ebql_ctl", ctl::SIZE)?;
        let spec = &code.maps[MAP_OUT];
        let ty = match spec.kind {
            MapKind::PercpuHash => MapType::PercpuHash,
            MapKind::MmapArray => MapType::MmapArray,
            MapKind::RingBuf => MapType::RingBuf,
        };
        let out = Map::create(&spec.name, ty, spec.key_size, spec.value_size, spec.max_entries)?;
        let prog = Program::load_tracepoint(&code.prog_name, &code.program.bytes(), &[ctl.map().fd(), out.fd()]).map_err(|e| match e {
            ebql_runtime::RuntimeError::Verifier(mut v) => {
                v.origin = v.pc.and_then(|pc| code.program.origin_of(pc)).map(str::to_string);
                Error::Verifier(v)
            }
            other => other.into(),
        })?;
        let ringbuf = match &code.layout {
            OutputLayout::Stream { record_size, .. } => Some(RingBuffer::new(&out, *record_size as usize)?),
            OutputLayout::Groups { .. } => None,
        };
        let prog_id = prog.id()?;
        let link = TracepointLink::attach(&prog, split.kernel.event.id)?;
        let probe = Probe { link: Some(link), ringbuf, prog, out, ctl, _stats: stats_guard };

        let windowed = split.kernel.window.is_some();
        let mut fields: Vec<Field> = Vec::new();
        if windowed {
            fields.push(Field::new("window_start", DataType::UInt64, false));
            fields.push(Field::new("window_end", DataType::UInt64, false));
        }
        fields.extend(split.remainder.schema().fields().iter().map(|f| f.as_ref().clone()));
        let schema = Arc::new(Schema::new(fields));

        let (tx, rx) = channel();
        let stop = Arc::new(AtomicBool::new(false));
        let stats = Arc::new(Mutex::new(QueryStats::default()));
        let group_spec = match &split.kernel.output {
            KernelOutput::Groups(g) => Some(g.clone()),
            KernelOutput::Stream { .. } => None,
        };
        let mut worker = Worker {
            probe,
            layout: code.layout.clone(),
            group_spec,
            window: split.kernel.window,
            kernel_schema: split.kernel_schema.clone(),
            input: split.input.clone(),
            remainder: split.remainder.clone(),
            ctx: planned.ctx.clone(),
            out_schema: schema.clone(),
            streamable: split.streamable,
            stream_limit: split.stream_limit,
            tx,
            stop: stop.clone(),
            stats: stats.clone(),
            local: QueryStats::default(),
            poll: options.poll_interval,
            pending: Vec::new(),
            gen: 0,
            next_count_window: 0,
            last_stream_emit: std::time::Instant::now(),
        };
        let thread = std::thread::Builder::new()
            .name("ebql-query".into())
            .spawn(move || worker.run())
            .map_err(|e| Error::Internal(format!("spawning the query thread: {e}")))?;
        Ok(RunningQuery { schema, receiver: Some(rx), stop, stats, thread: Some(thread), prog_id, window: split.kernel.window })
    }

    /// Output schema: `window_start`, `window_end` (CLOCK_MONOTONIC ns for time
    /// windows, event ordinals for count windows) when windowed, then the query's columns.
    pub fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    /// The batch channel (once). It closes when the query has stopped and sent everything.
    pub fn take_receiver(&mut self) -> Option<Receiver<RecordBatch>> {
        self.receiver.take()
    }

    /// Counters so far.
    pub fn stats(&self) -> QueryStats {
        *self.stats.lock().unwrap()
    }

    /// Kernel id of the probe program (`bpftool prog show id N`).
    pub fn prog_id(&self) -> u32 {
        self.prog_id
    }

    /// The query's WINDOW clause, if any.
    pub fn window(&self) -> Option<WindowSpec> {
        self.window
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
            Some(t) => t.join().map_err(|_| Error::Internal("query thread panicked".into()))?,
            None => Ok(()),
        }
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
    tx: Sender<RecordBatch>,
    stop: Arc<AtomicBool>,
    stats: Arc<Mutex<QueryStats>>,
    local: QueryStats,
    poll: Duration,
    /// Ring-buffer rows not yet emitted, with their generation.
    pending: Vec<(Option<u64>, Vec<Cell>)>,
    /// Current time-window generation.
    gen: u64,
    /// Next count window to emit.
    next_count_window: u64,
    /// When the last batch of an unwindowed raw stream was emitted.
    last_stream_emit: std::time::Instant,
}

/// An unwindowed raw stream is emitted at least this often…
const STREAM_BATCH_INTERVAL: Duration = Duration::from_millis(200);
/// …or as soon as this many rows are waiting.
const STREAM_BATCH_ROWS: usize = 65536;

impl Worker {
    fn run(&mut self) -> Result<()> {
        let rt = tokio::runtime::Builder::new_current_thread().build().map_err(|e| Error::Internal(e.to_string()))?;
        let result = self.run_loop(&rt);
        // Whatever happened, the probe is detached when we return.
        self.probe.link = None;
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
                Some(WindowSpec::Time { size_ns, .. }) => {
                    let now = monotonic_ns();
                    if stopping || now >= due + size_ns {
                        let end = monotonic_ns();
                        if !stopping {
                            // New events go to the next generation from here on.
                            self.probe.ctl.u64_at(ctl::GEN).store(self.gen + 1, Ordering::SeqCst);
                            membarrier_global()?;
                        }
                        self.close_time_window(rt, window_start, end)?;
                        self.gen += 1;
                        window_start = end;
                        due += size_ns;
                        if due + size_ns < now {
                            // We fell behind (machine stalled): realign instead of bursting.
                            due = now;
                        }
                    } else {
                        self.drain_ringbuf()?;
                    }
                }
                Some(WindowSpec::Count { size, .. }) => self.poll_count_windows(rt, size, stopping)?,
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
                Some(WindowSpec::Time { size_ns, .. }) => {
                    let until = (due + size_ns).saturating_sub(monotonic_ns());
                    Duration::from_nanos(until).min(if self.probe.ringbuf.is_some() { self.poll } else { Duration::from_millis(50) })
                }
                _ => self.poll,
            };
            std::thread::sleep(sleep);
        }
    }

    fn stream_limit_reached(&self) -> bool {
        self.stream_limit.is_some_and(|n| self.local.rows_emitted >= n as u64)
    }

    /// Detaches the probe and waits for runs in flight: nothing changes after this.
    fn detach(&mut self) -> Result<()> {
        if self.probe.link.take().is_some() {
            membarrier_global()?;
        }
        Ok(())
    }

    fn drain_ringbuf(&mut self) -> Result<()> {
        if let Some(rb) = self.probe.ringbuf.as_mut() {
            let data = rb.drain()?;
            let rows = decode::stream_rows(&self.layout, &data);
            self.local.events_matched += rows.len() as u64;
            self.pending.extend(rows);
        }
        Ok(())
    }

    /// Rows of the group table whose window tag satisfies `select`; deletes them.
    fn drain_groups(&mut self, select: impl Fn(Option<u64>) -> bool) -> Result<BTreeMap<Option<u64>, Vec<Vec<Cell>>>> {
        let OutputLayout::Groups { window_tag, value_size, .. } = self.layout else {
            return Ok(BTreeMap::new());
        };
        let spec = self.group_spec.as_ref().expect("group spec with group layout");
        let ncpu = ebql_runtime::num_possible_cpus()?;
        let stride = (value_size as usize).div_ceil(8) * 8;
        let mut values = vec![0u8; stride * ncpu];
        let mut out: BTreeMap<Option<u64>, Vec<Vec<Cell>>> = BTreeMap::new();
        for key in self.probe.out.keys()? {
            let tag = window_tag.map(|(off, bytes)| decode::uint_at(&key, off as usize, bytes as usize));
            if !select(tag) {
                continue;
            }
            if !self.probe.out.lookup(&key, &mut values)? {
                continue;
            }
            self.probe.out.delete(&key)?;
            for v in values.chunks_exact(stride) {
                self.local.events_matched += u64::from_le_bytes(v[0..8].try_into().unwrap());
            }
            out.entry(tag).or_default().extend(decode::group_rows(&self.layout, spec, &key, &values, stride));
        }
        Ok(out)
    }

    fn close_time_window(&mut self, rt: &tokio::runtime::Runtime, start: u64, end: u64) -> Result<()> {
        let gen = self.gen;
        let rows = if self.group_spec.is_some() {
            // The key holds the generation's low 32 bits.
            let tag = gen & 0xffff_ffff;
            self.drain_groups(|t| t == Some(tag))?.remove(&Some(tag)).unwrap_or_default()
        } else {
            self.drain_ringbuf()?;
            let (now, later): (Vec<_>, Vec<_>) = std::mem::take(&mut self.pending).into_iter().partition(|(g, _)| *g == Some(gen));
            self.pending = later;
            now.into_iter().map(|(_, r)| r).collect()
        };
        self.emit(rt, rows, Some((start, end)))
    }

    fn poll_count_windows(&mut self, rt: &tokio::runtime::Runtime, size: u64, stopping: bool) -> Result<()> {
        if self.group_spec.is_some() {
            let seq = self.probe.ctl.u64_at(ctl::SEQ).load(Ordering::SeqCst);
            let full = seq / size;
            if full <= self.next_count_window && !stopping {
                return Ok(());
            }
            membarrier_global()?;
            let from = self.next_count_window;
            let mut by_window = self.drain_groups(|tag| tag.is_some_and(|w| w >= from && (stopping || w < full)))?;
            let last = if stopping { seq.div_ceil(size) } else { full };
            for w in from..last {
                let rows = by_window.remove(&Some(w)).unwrap_or_default();
                self.emit(rt, rows, Some((w * size, (w + 1) * size)))?;
            }
            self.next_count_window = last;
        } else {
            self.drain_ringbuf()?;
            while self.pending.len() as u64 >= size || (stopping && !self.pending.is_empty()) {
                let n = (size as usize).min(self.pending.len());
                let rows: Vec<Vec<Cell>> = self.pending.drain(..n).map(|(_, r)| r).collect();
                let w = self.next_count_window;
                self.emit(rt, rows, Some((w * size, (w + 1) * size)))?;
                self.next_count_window += 1;
            }
        }
        Ok(())
    }

    fn poll_unwindowed(&mut self, rt: &tokio::runtime::Runtime, stopping: bool) -> Result<()> {
        if self.group_spec.is_some() {
            if stopping {
                let rows = self.drain_groups(|_| true)?.into_values().flatten().collect();
                self.emit(rt, rows, None)?;
            }
            return Ok(());
        }
        self.drain_ringbuf()?;
        // Raw streams are emitted in batches of up to STREAM_BATCH_INTERVAL, not per drain.
        let due = self.last_stream_emit.elapsed() >= STREAM_BATCH_INTERVAL || self.pending.len() >= STREAM_BATCH_ROWS;
        if (self.streamable && !self.pending.is_empty() && due) || stopping {
            self.last_stream_emit = std::time::Instant::now();
            let mut rows: Vec<Vec<Cell>> = std::mem::take(&mut self.pending).into_iter().map(|(_, r)| r).collect();
            if let Some(limit) = self.stream_limit {
                rows.truncate(limit.saturating_sub(self.local.rows_emitted as usize));
            }
            if !rows.is_empty() || !self.streamable {
                self.emit(rt, rows, None)?;
            }
        }
        Ok(())
    }

    /// Runs the user-space plan on one window's kernel rows and sends the result.
    fn emit(&mut self, rt: &tokio::runtime::Runtime, mut rows: Vec<Vec<Cell>>, window: Option<(u64, u64)>) -> Result<()> {
        if rows.is_empty() {
            if let Some(spec) = self.group_spec.as_ref().filter(|s| s.keys.is_empty()) {
                rows.push(decode::empty_global_row(&self.layout, spec));
            }
        }
        let input = decode::batch(&self.kernel_schema, &rows)?;
        self.input.set(vec![input]);
        let batches = rt.block_on(async { self.ctx.execute_logical_plan(self.remainder.clone()).await?.collect().await })?;
        let result_schema = Arc::new(self.remainder.schema().as_arrow().clone());
        let result = datafusion::arrow::compute::concat_batches(&result_schema, &batches)?;
        let mut cols: Vec<ArrayRef> = Vec::new();
        if let Some((start, end)) = window {
            let n = result.num_rows();
            cols.push(Arc::new(UInt64Array::from(vec![start; n])));
            cols.push(Arc::new(UInt64Array::from(vec![end; n])));
        }
        cols.extend(result.columns().iter().cloned());
        let schema = match window {
            Some((start, end)) => {
                let md = HashMap::from([(META_WINDOW_START.to_string(), start.to_string()), (META_WINDOW_END.to_string(), end.to_string())]);
                Arc::new(self.out_schema.as_ref().clone().with_metadata(md))
            }
            None => self.out_schema.clone(),
        };
        let out = RecordBatch::try_new_with_options(schema, cols, &datafusion::arrow::record_batch::RecordBatchOptions::new().with_row_count(Some(result.num_rows())))?;
        self.local.rows_emitted += out.num_rows() as u64;
        self.local.windows_emitted += window.is_some() as u64;
        if self.tx.send(out).is_err() {
            // Nobody listens any more: stop.
            self.stop.store(true, Ordering::SeqCst);
        }
        Ok(())
    }

    fn publish_stats(&mut self) {
        let c = &self.probe.ctl;
        self.local.dropped_groups_full = c.u64_at(ctl::DROP_GROUPS_FULL).load(Ordering::Relaxed);
        self.local.dropped_ringbuf_full = c.u64_at(ctl::DROP_RINGBUF_FULL).load(Ordering::Relaxed);
        if let Ok(s) = self.probe.prog.stats() {
            self.local.bpf_run_cnt = s.run_cnt;
            self.local.bpf_run_time_ns = s.run_time_ns;
            self.local.bpf_recursion_misses = s.recursion_misses;
            self.local.events_seen = s.run_cnt;
        }
        let mut shown = self.local;
        shown.events_matched += shown.dropped_groups_full + shown.dropped_ringbuf_full;
        *self.stats.lock().unwrap() = shown;
    }
}
