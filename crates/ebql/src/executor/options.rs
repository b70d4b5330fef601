//! [`ExecutorOptions`]: the executor's tunables.

use ebql_compiler::CodegenOptions;
use std::time::Duration;

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
    /// `None`: no sampling before the run (see `record_rates`).
    pub sample_rates: Option<Duration>,
    /// When `sample_rates` is `None`: plan with the rates an earlier run of
    /// the same query text recorded ([`crate::cost::recorded`], if fresh),
    /// and record this run's: for this long after attaching, counters at
    /// its hooks run beside it (its first event is not delayed), and its
    /// groups per window are added when it ends. `None` (and no record):
    /// the plan that needs no rates (the tracefs tracepoint, the kernel aggregate).
    pub record_rates: Option<Duration>,
    /// Attach only: load, in place of each of the query's programs, one that
    /// returns at once (the same hooks, pid scope, USDT semaphores and maps;
    /// nothing is recorded or counted: the programs' own counters stay 0; with `bpf_stats` the run count still shows the hits). What the
    /// hooks alone cost: the "active" mode of README "Modes".
    pub attach_only: bool,
    /// Fault injection for tests: the query thread sleeps this long
    /// between reading the clock and choosing each time-window cut, as a
    /// thread preempted there would (window bounds must stay exact).
    /// Zero otherwise.
    pub cut_choice_delay: Duration,
    /// Hooks shared with the other queries of this process (`ebql serve`):
    /// each program that can share its hook
    /// ([`ebql_runtime::SharedHooks::can_share`]) joins the hook's combined
    /// program instead of attaching its own; one the verifier refuses in
    /// combination attaches alone. `None`: every program attaches alone.
    pub shared_hooks: Option<ebql_runtime::SharedHooks>,
    /// Synopses shared with the other queries of this process (`ebql
    /// serve`): a query whose kernel part is a group table in time windows
    /// compiled the same as a running query's (same events, filter, keys,
    /// aggregates, window) reads that query's windows instead of loading
    /// its own ([`super::SharedSynopses`]). `None`: every query has its own.
    pub shared_synopses: Option<super::SharedSynopses>,
    /// Time windows end on wall-clock multiples of their step: a tumbling
    /// window is [k·size, (k+1)·size) of UTC (a hopping one starts on a
    /// multiple of its step), so the same window from different hosts, or
    /// runs, covers the same time. The first window runs from the attach
    /// to the first such boundary at least 2 ms away (its bounds say so).
    /// Off: windows follow one another from the attach.
    pub align_windows: bool,
    /// Write each window's aggregate states, not their values, for a merge
    /// across hosts ([`ebql_compiler::partial`]); implies `align_windows`
    /// and the kernel aggregate. `None`: values.
    pub partial: Option<crate::partial::PartialOptions>,
}

impl Default for ExecutorOptions {
    fn default() -> Self {
        ExecutorOptions {
            codegen: CodegenOptions::default(),
            poll_interval: Duration::from_millis(10),
            bpf_stats: false,
            sample_rates: None,
            record_rates: None,
            attach_only: false,
            cut_choice_delay: Duration::ZERO,
            shared_hooks: None,
            shared_synopses: None,
            align_windows: false,
            partial: None,
        }
    }
}
