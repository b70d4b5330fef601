//! Argument groups several subcommands share: table sizes, planning
//! choices, bpf_stats and the engine options they make up.

use ebql::ExecutorOptions;
use ebql_compiler::choose::AggregateChoice;
use std::time::Duration;

/// Sizes of the in-kernel tables (query, check, serve).
#[derive(clap::Args, Debug, Clone, Copy)]
pub(super) struct LimitArgs {
    /// Groups per window the in-kernel group table holds.
    #[arg(long, default_value_t = 10240)]
    pub(super) max_groups: u32,
    /// (group, value) pairs per window the in-kernel COUNT(DISTINCT) set holds.
    #[arg(long, default_value_t = 256 << 10)]
    pub(super) max_distinct: u32,
}

impl LimitArgs {
    pub(super) fn apply(self, opts: &mut ExecutorOptions) {
        opts.codegen.max_groups = self.max_groups;
        opts.codegen.max_distinct = self.max_distinct;
    }
}

/// The planner's alternatives (query, check, serve, explain); docs/internals.md "Planning choices".
#[derive(clap::Args, Debug, Clone, Copy)]
pub(super) struct PlanArgs {
    /// Hook of syscall tracepoints (`syscalls:sys_enter_<name>`/`sys_exit_<name>`):
    /// `tracefs`, `raw` (`raw_syscalls:sys_enter`/`sys_exit`, which sees every
    /// system call, with the syscall-number test first; tp_btf where the kernel
    /// has it), `raw-tp` (the same as a raw_tp program), or `auto` (by --optimize).
    /// The capture of `postgres.statements`/`mysql.statements` takes the socket
    /// tracepoints under `auto` and the named system call hook otherwise.
    #[arg(long, value_enum, default_value = "auto")]
    pub(super) hook: HookArg,
    /// What `--hook auto` minimizes: `total` (CPU added per second, from
    /// the machine's sampled system-call rates), `traced` (the traced call's
    /// cost: the raw hook), `host` (the cost put on untraced system calls: tracefs).
    #[arg(long, value_enum, default_value = "total")]
    pub(super) optimize: OptimizeArg,
    /// Group table of in-kernel aggregates: `auto` (a per-CPU array indexed
    /// by the keys when every key is a small bounded integer, else the hash), `hash`, `array`.
    #[arg(long, value_enum, default_value = "auto")]
    pub(super) group_map: GroupMapArg,
    /// Where an aggregate the kernel can run goes: `kernel` (its group
    /// table), `user` (the kernel streams the rows, DataFusion aggregates
    /// each window), or `auto`: by the query's sampled event rate and groups
    /// (see --sample-ms), the cheaper by the cost model
    /// (`user` for rare events with many keys, or groups that would
    /// overflow --max-groups).
    #[arg(long, value_enum, default_value = "auto")]
    pub(super) aggregate: AggregateArg,
    /// Milliseconds of sampling for automatic choices (the machine's
    /// system calls for `--optimize total`'s hook, the query's rates for
    /// `--aggregate auto`). By default the query plans with the rates its
    /// last run (within an hour) recorded and attaches at once, then counts
    /// its hooks for this long beside its run to record them for the next
    /// (the first run of a text gets tracefs and the kernel). 0: no
    /// sampling and no recorded rates.
    #[arg(long, default_value_t = 100)]
    pub(super) sample_ms: u64,
    /// Sample for --sample-ms before attaching (the query's first event
    /// waits for it) instead of using and recording rates of earlier runs.
    #[arg(long)]
    pub(super) sample_first: bool,
    /// Do not load uprobe and USDT programs sleepable: their user strings
    /// are then read without faulting pages in (a string in a page not
    /// touched yet is NULL, counted in str_read_failed), one copy cheaper
    /// per string and event.
    #[arg(long)]
    pub(super) no_faulting_reads: bool,
}

#[derive(clap::ValueEnum, Debug, Clone, Copy)]
pub(super) enum AggregateArg {
    Auto,
    Kernel,
    User,
}

#[derive(clap::ValueEnum, Debug, Clone, Copy)]
pub(super) enum HookArg {
    Auto,
    Tracefs,
    Raw,
    RawTp,
}

#[derive(clap::ValueEnum, Debug, Clone, Copy)]
pub(super) enum OptimizeArg {
    Total,
    Traced,
    Host,
}

#[derive(clap::ValueEnum, Debug, Clone, Copy)]
pub(super) enum GroupMapArg {
    Auto,
    Hash,
    Array,
}

impl PlanArgs {
    pub(super) fn apply(self, opts: &mut ExecutorOptions) {
        use ebql_compiler::choose::{GroupMapChoice, HookChoice, Optimize};
        opts.codegen.faulting_user_strings = !self.no_faulting_reads;
        let c = &mut opts.codegen.choices;
        c.hook = match self.hook {
            HookArg::Auto => HookChoice::Auto,
            HookArg::Tracefs => HookChoice::Tracefs,
            HookArg::Raw => HookChoice::Raw,
            HookArg::RawTp => HookChoice::RawTp,
        };
        c.optimize = match self.optimize {
            OptimizeArg::Total => Optimize::Total,
            OptimizeArg::Traced => Optimize::Traced,
            OptimizeArg::Host => Optimize::Host,
        };
        c.group_map = match self.group_map {
            GroupMapArg::Auto => GroupMapChoice::Auto,
            GroupMapArg::Hash => GroupMapChoice::Hash,
            GroupMapArg::Array => GroupMapChoice::Array,
        };
        c.aggregate = match self.aggregate {
            AggregateArg::Auto => AggregateChoice::Auto,
            AggregateArg::Kernel => AggregateChoice::Kernel,
            AggregateArg::User => AggregateChoice::User,
        };
        // The hook rule reads the cost model: calibrated on this machine when
        // `ebql calibrate` has run, the built-in defaults otherwise.
        let h = ebql::cost::load().model.syscall_hook_costs();
        c.hook_costs = ebql_compiler::choose::HookCosts {
            tracefs_traced_ns: h.tracefs_traced_ns,
            tracefs_untraced_ns: h.tracefs_untraced_ns,
            raw_traced_ns: h.raw_traced_ns,
            raw_untraced_ns: h.raw_untraced_ns,
        };
        let sample = Some(Duration::from_millis(self.sample_ms)).filter(|d| !d.is_zero());
        (opts.sample_rates, opts.record_rates) = if self.sample_first {
            (sample, None)
        } else {
            (None, sample)
        };
    }
}

/// `--bpf-stats` (query, check, serve, demo).
#[derive(clap::Args, Debug, Clone, Copy)]
pub(super) struct BpfStatsArg {
    /// Turn the kernel's bpf_stats on while the query runs, to report probe
    /// run time (stats: bpf_run_cnt, bpf_run_time_ns; ns per event). It is
    /// global: while it is on, every BPF program of the host (not only
    /// ours) is timed, at about 70–120 ns per run (measured, BENCHMARKS.md).
    /// Without it, run counts and run time are 0; events seen and matched
    /// are always counted by the query's own programs.
    #[arg(long)]
    pub(super) bpf_stats: bool,
}

/// How queries run (query, serve): table sizes, planner choices and bpf_stats.
#[derive(clap::Args, Debug, Clone, Copy)]
pub(super) struct EngineArgs {
    #[command(flatten)]
    pub(super) limits: LimitArgs,
    #[command(flatten)]
    pub(super) plan: PlanArgs,
    #[command(flatten)]
    pub(super) stats: BpfStatsArg,
    /// End time windows on wall-clock multiples of their step, as every
    /// host with a synchronized clock does: WINDOW(time, 60000, 60000) gives
    /// [12:00:00, 12:01:00), … in UTC, so windows of several hosts or runs
    /// line up. The first window runs from the attach to the first boundary.
    #[arg(long)]
    pub(super) align_windows: bool,
}

impl EngineArgs {
    pub(super) fn options(self) -> ExecutorOptions {
        let mut opts = ExecutorOptions {
            bpf_stats: self.stats.bpf_stats,
            align_windows: self.align_windows,
            ..Default::default()
        };
        self.limits.apply(&mut opts);
        self.plan.apply(&mut opts);
        opts
    }
}

/// `--partial` and the identity of its rows (query).
#[derive(clap::Args, Debug, Clone, Default)]
pub(super) struct PartialArgs {
    /// Write each window's aggregate states (COUNT and SUM as numbers, AVG
    /// as count and sum, histograms as bucket counters, approx_distinct as a
    /// DataSketches HLL sketch, quantiles as sketch buckets), not their
    /// values, with this host's id and one row per window: rows that a
    /// merge across hosts (Spark: ebql.spark.merge, DataFusion's Final
    /// aggregate) turns into fleet-wide values. Implies --align-windows.
    /// Schema: README.md, "Fleet-wide: --partial, merged by Spark".
    #[arg(long)]
    pub(super) partial: bool,
    /// With --partial: the rows' host_id (default: the hostname).
    #[arg(long, value_name = "NAME", requires = "partial")]
    pub(super) host_id: Option<String>,
    /// With --partial: the rows' query_id (default: the query text's hash).
    #[arg(long, value_name = "NAME", requires = "partial")]
    pub(super) query_id: Option<String>,
}

impl PartialArgs {
    /// Sets `opts.partial` when asked.
    pub(super) fn apply(&self, opts: &mut ExecutorOptions) {
        if self.partial {
            opts.partial = Some(ebql::partial::PartialOptions {
                host_id: self.host_id.clone(),
                query_id: self.query_id.clone(),
            });
        }
    }
}

/// What the query traces (query): one process, a command eBQL starts, or a
/// cgroup. Every event the query reads is filtered to it in the kernel, as
/// if the WHERE said `pid = N` (or `cgroup = N`) for each event.
#[derive(clap::Args, Debug, Clone, Default)]
pub(super) struct TargetArgs {
    /// Trace only this process (and its threads): its pid as the kernel
    /// sees it (the initial pid namespace).
    #[arg(short, long, value_name = "PID", conflicts_with_all = ["command", "cgroup"])]
    pub(super) pid: Option<u32>,
    /// Start this command (split as a shell would, not run by one), attach,
    /// then let it run; the query ends when it exits. Its events only, or
    /// with --follow its descendants' too.
    #[arg(short, long, value_name = "CMD", conflicts_with = "cgroup")]
    pub(super) command: Option<String>,
    /// With -c: also trace every process the command starts (it runs in a
    /// new cgroup v2 directory, ebql-* at the hierarchy's root, removed at the end).
    #[arg(long, requires = "command")]
    pub(super) follow: bool,
    /// Trace only the tasks of this cgroup v2 directory (absolute, or
    /// relative to the hierarchy's root: system.slice/nginx.service), not
    /// its sub-directories.
    #[arg(long, value_name = "PATH")]
    pub(super) cgroup: Option<String>,
}

impl TargetArgs {
    /// Starts the command (stopped before its exec) if there is one, and
    /// sets the query's scope in `opts`.
    pub(super) fn apply(
        &self,
        opts: &mut ExecutorOptions,
    ) -> Result<Option<ebql::command::GatedCommand>, ebql::Error> {
        use ebql_compiler::scope::ProcessScope;
        let command = match &self.command {
            Some(line) => {
                let argv = shlex::split(line).ok_or_else(|| {
                    ebql::Error::Command(format!("-c: cannot split `{line}` (an unclosed quote?)"))
                })?;
                Some(ebql::command::GatedCommand::spawn(&argv, self.follow)?)
            }
            None => None,
        };
        opts.codegen.scope = match (&command, self.pid, &self.cgroup) {
            (Some(c), ..) => Some(c.scope()),
            (None, Some(pid), _) => Some(ProcessScope::Pid(pid)),
            (None, None, Some(path)) => Some(ProcessScope::Cgroup(ebql::command::cgroup_id(path)?)),
            (None, None, None) => None,
        };
        Ok(command)
    }
}
