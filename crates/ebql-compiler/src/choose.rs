//! The planner's alternatives and the rules that choose between them, in
//! one place: every choice has an `Auto` default decided by a rule that
//! reads only the numbers in [`PlanChoices`], and an explicit override.
//!
//! * **Hook of a syscall tracepoint** ([`HookChoice`], [`choose_hook`]): the
//!   tracefs tracepoint `syscalls:sys_enter_<name>`, or the raw syscall
//!   hook `raw_syscalls:sys_enter` (tp_btf, else raw_tp) with the syscall-id
//!   test first ([`crate::syscall_hook`]). The raw hook is cheaper for the
//!   traced call but runs for every other system call of the machine.
//! * **Group table** ([`GroupMapChoice`], [`crate::groupmap`]): a per-CPU
//!   array indexed by the group key when every key is a small bounded
//!   integer, else the per-CPU hash.
//! * **Filter order** ([`order_filters`]): pid/tid tests first, then the
//!   other conjuncts by cost class and estimated selectivity.
//! * **Where an aggregate runs** ([`AggregateChoice`],
//!   [`crate::cost::choose_placement`]): in the kernel's group table, or in
//!   user space over the streamed rows (a rare event with many keys costs
//!   less streamed than drained group by group every window).
//!
//! The numbers ([`HookCosts`], the selectivity estimates) are defaults from
//! measurements on the project's machine (issue 11); `ebql calibrate`
//! replaces them with this machine's.

use crate::kexpr::{CmpOp, KPred};

/// Which hook a syscall tracepoint's program runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Hook {
    /// The tracefs tracepoint `syscalls:sys_enter_<name>` / `sys_exit_<name>`.
    Tracefs,
    /// The raw syscall hook `raw_syscalls:sys_enter` / `sys_exit` (every
    /// system call), with the syscall-id test first.
    Raw,
}

impl Hook {
    /// Name for messages: `tracefs` or `raw`.
    pub fn name(self) -> &'static str {
        match self {
            Hook::Tracefs => "tracefs",
            Hook::Raw => "raw",
        }
    }
}

/// How the hook of a syscall tracepoint is chosen.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum HookChoice {
    /// By [`choose_hook`]'s rule, for [`PlanChoices::optimize`].
    #[default]
    Auto,
    /// Always the tracefs tracepoint.
    Tracefs,
    /// Always the raw syscall hook (a query error when a syscall tracepoint
    /// of the query cannot run there, e.g. a call missing from
    /// [`ebql_catalog::syscalls`]).
    Raw,
    /// The raw syscall hook as a `raw_tp` program (fields fetched with
    /// `bpf_probe_read_kernel`) even where `tp_btf` (direct loads) is
    /// available: what kernels without BTF-typed raw tracepoints get.
    RawTp,
}

/// What the automatic hook choice minimizes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Optimize {
    /// Total added CPU time per second: the traced calls' saving against
    /// the cost moved onto the machine's other system calls, from
    /// [`PlanChoices::rates`]; without rates, as [`Optimize::Host`].
    #[default]
    Total,
    /// The cheapest probe for the traced event (the raw hook).
    Traced,
    /// The least cost put on untraced work (the tracefs tracepoint).
    Host,
}

/// Nanoseconds a hook adds to system calls, with an empty program (the
/// query's own program costs the same on either hook). Defaults: issue 11,
/// measured on the project's 2-core VM (single-thread pread64 loop, release
/// build, medians of 3 rounds).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct HookCosts {
    /// Added to a traced call by its tracefs syscall tracepoint.
    pub tracefs_traced_ns: f64,
    /// Added to every other system call while a syscall tracepoint is on
    /// (the kernel's syscall-tracing slow path).
    pub tracefs_untraced_ns: f64,
    /// Added to a traced call by the raw hook.
    pub raw_traced_ns: f64,
    /// Added to every other system call by the raw hook (its program runs
    /// and exits at the syscall-id test).
    pub raw_untraced_ns: f64,
}

impl Default for HookCosts {
    fn default() -> Self {
        HookCosts {
            tracefs_traced_ns: 155.0,
            tracefs_untraced_ns: 30.0,
            raw_traced_ns: 87.0,
            raw_untraced_ns: 70.0,
        }
    }
}

/// Event rates sampled on the machine before planning (see the executor's
/// syscall sampler): system calls per second of the whole machine, and
/// calls per second of the query's traced system call (the mean over the
/// query's syscall events: an enter/exit pairing of one call has its rate).
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SyscallRates {
    /// All system calls of the machine, per second.
    pub all_per_sec: f64,
    /// The query's traced system call, per second (mean over its syscall events).
    pub traced_per_sec: f64,
    /// How long the sample ran, in ms (for `explain`).
    pub sampled_ms: u64,
}

/// How the group table of an in-kernel aggregate is built.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum GroupMapChoice {
    /// An array when [`crate::groupmap::plan_array`] finds every key bounded
    /// (and the table small enough), else the hash.
    #[default]
    Auto,
    /// Always the per-CPU hash.
    Hash,
    /// Always the per-CPU array (a query error when a key is not bounded).
    Array,
}

/// Where an aggregate that both the kernel and user space can run goes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum AggregateChoice {
    /// The kernel, unless the executor's cost rule
    /// ([`crate::cost::choose_placement`], on sampled rates) finds the
    /// stream to user space cheaper; without rates, the kernel.
    #[default]
    Auto,
    /// Always the kernel's group table (when every key and argument compiles).
    Kernel,
    /// Always user space: the kernel streams the rows the aggregate reads
    /// and DataFusion aggregates each window.
    User,
}

/// Where an aggregate runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Placement {
    /// In the kernel: one group-table update per event, drained per window.
    Kernel,
    /// In user space: one ring-buffer record per event, aggregated by DataFusion.
    User,
}

impl Placement {
    /// Name for messages: `kernel` or `user space`.
    pub fn name(self) -> &'static str {
        match self {
            Placement::Kernel => "kernel",
            Placement::User => "user space",
        }
    }
}

/// Every choice the planner makes, with its inputs. `Copy`: it travels in
/// [`crate::CodegenOptions::choices`].
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct PlanChoices {
    /// Hook of syscall tracepoints.
    pub hook: HookChoice,
    /// What [`HookChoice::Auto`] minimizes.
    pub optimize: Optimize,
    /// Hook costs the rule reads.
    pub hook_costs: HookCosts,
    /// Sampled rates, when known.
    pub rates: Option<SyscallRates>,
    /// Group table kind.
    pub group_map: GroupMapChoice,
    /// Largest array group table, in slots per window ([`GroupMapChoice::Auto`]
    /// keeps the hash above it; user space reads every slot of a closed window).
    pub array_max_slots: u32,
    /// Where the query's aggregate runs.
    pub aggregate: AggregateChoice,
    /// A fault for the oracle's own regression test, never set otherwise:
    /// plans without [`crate::intcast::NarrowingCasts`], so DataFusion
    /// unwraps `CAST(u64 AS BIGINT) < 0` into `u64 < 0` again, the wrong
    /// answer issue 19 found and DataFusion's reference shared.
    pub unchecked_casts: bool,
}

/// Default [`PlanChoices::array_max_slots`]: a closed window's drain reads
/// every slot (one batch read), ~0.4 ms of CPU more than an empty hash for
/// 1024 slots on 2 CPUs (release build, BENCHMARKS.md "Issue 11, run D").
pub const ARRAY_MAX_SLOTS: u32 = 1024;

impl PlanChoices {
    /// Automatic choices with the default numbers.
    pub fn new() -> PlanChoices {
        PlanChoices {
            array_max_slots: ARRAY_MAX_SLOTS,
            ..Default::default()
        }
    }
}

/// What one hook costs the machine, by [`HookCosts`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct HookCost {
    /// ns added to each traced call.
    pub traced_ns: f64,
    /// ns added to each other system call of the machine.
    pub untraced_ns: f64,
    /// ns of CPU added per second of the sampled rates, if known.
    pub per_sec_ns: Option<f64>,
}

/// The hook chosen for a query's syscall tracepoints, with what was compared.
#[derive(Clone, Debug, PartialEq)]
pub struct HookDecision {
    /// The hook the query's syscall tracepoints run on.
    pub chosen: Hook,
    /// Why, for `explain`.
    pub why: String,
    /// The tracefs alternative's cost.
    pub tracefs: HookCost,
    /// The raw alternative's cost.
    pub raw: HookCost,
}

impl HookDecision {
    /// The cost of the chosen hook and of the alternative.
    pub fn costs(&self) -> (HookCost, HookCost) {
        match self.chosen {
            Hook::Tracefs => (self.tracefs, self.raw),
            Hook::Raw => (self.raw, self.tracefs),
        }
    }
}

/// Chooses the hook for a query's syscall tracepoints (the same for all:
/// each of its syscall events weighs the same in the rule).
///
/// Rule: an explicit [`HookChoice`] wins; else [`Optimize::Traced`] picks
/// the raw hook and [`Optimize::Host`] the tracefs tracepoint; else
/// ([`Optimize::Total`]) with sampled rates, the hook adding less CPU time
/// per second and syscall event, `T·traced + (R − T)·untraced` for `T`
/// traced calls/s and `R` system calls/s (ties keep tracefs); without rates, tracefs
/// (it adds the least to work the query does not trace).
pub fn choose_hook(choices: &PlanChoices) -> HookDecision {
    let c = choices.hook_costs;
    let per_sec = |traced: f64, untraced: f64| {
        choices.rates.map(|r| {
            r.traced_per_sec * traced + (r.all_per_sec - r.traced_per_sec).max(0.0) * untraced
        })
    };
    let tracefs = HookCost {
        traced_ns: c.tracefs_traced_ns,
        untraced_ns: c.tracefs_untraced_ns,
        per_sec_ns: per_sec(c.tracefs_traced_ns, c.tracefs_untraced_ns),
    };
    let raw = HookCost {
        traced_ns: c.raw_traced_ns,
        untraced_ns: c.raw_untraced_ns,
        per_sec_ns: per_sec(c.raw_traced_ns, c.raw_untraced_ns),
    };
    let (chosen, why) = match (choices.hook, choices.optimize) {
        (HookChoice::Tracefs, _) => (Hook::Tracefs, "asked for (--hook tracefs)".to_string()),
        (HookChoice::Raw, _) => (Hook::Raw, "asked for (--hook raw)".to_string()),
        (HookChoice::RawTp, _) => (Hook::Raw, "asked for (--hook raw-tp)".to_string()),
        (HookChoice::Auto, Optimize::Traced) => (Hook::Raw, "--optimize traced: the cheapest probe for the traced event".to_string()),
        (HookChoice::Auto, Optimize::Host) => (Hook::Tracefs, "--optimize host: the least cost on untraced system calls".to_string()),
        (HookChoice::Auto, Optimize::Total) => match (choices.rates, tracefs.per_sec_ns, raw.per_sec_ns) {
            (Some(r), Some(t), Some(w)) => {
                let rates = format!("{:.0} traced calls/s of {:.0} system calls/s (sampled {} ms)", r.traced_per_sec, r.all_per_sec, r.sampled_ms);
                if w < t {
                    (Hook::Raw, format!("least CPU in all: {rates}; raw adds {} µs/s, tracefs {} µs/s", us(w), us(t)))
                } else {
                    (Hook::Tracefs, format!("least CPU in all: {rates}; tracefs adds {} µs/s, raw {} µs/s", us(t), us(w)))
                }
            }
            _ => (Hook::Tracefs, "no sampled event rates: the tracefs tracepoint adds the least to system calls the query does not trace".to_string()),
        },
    };
    HookDecision {
        chosen,
        why,
        tracefs,
        raw,
    }
}

fn us(ns_per_sec: f64) -> String {
    format!("{:.1}", ns_per_sec / 1000.0)
}

/// A filter conjunct's place in the order: its cost class and estimated selectivity.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FilterEstimate {
    /// 0: pid/tid tests (always first); 1: values loaded directly (record
    /// fields, BTF loads, constants); 2: other helper calls (time, uid,
    /// cgroup, probe reads); 3: strings and `comm`.
    pub class: u8,
    /// Estimated fraction of events that pass (0..=1).
    pub selectivity: f64,
}

/// Selectivity guesses when nothing is known about the values (System R's
/// defaults, Selinger et al. 1979): equality 1/10, a range 1/3, inequality
/// 9/10; a string equality 1/10, a prefix 1/4.
pub mod selectivity {
    /// `a = b`.
    pub const EQ: f64 = 0.1;
    /// `a < b`, `a <= b`, `a > b`, `a >= b`.
    pub const RANGE: f64 = 1.0 / 3.0;
    /// `a <> b`.
    pub const NE: f64 = 0.9;
    /// A string equal to a literal.
    pub const STR_EQ: f64 = 0.1;
    /// A string starting with a literal.
    pub const STR_PREFIX: f64 = 0.25;
    /// Upper bound of an `IN` list's estimate.
    pub const IN_MAX: f64 = 0.5;
}

/// The estimate of one conjunct.
pub fn estimate(p: &KPred) -> FilterEstimate {
    FilterEstimate {
        class: p.cost_class(),
        selectivity: selectivity_of(p),
    }
}

fn selectivity_of(p: &KPred) -> f64 {
    use selectivity::*;
    match p {
        KPred::Const(b) => f64::from(u8::from(*b)),
        KPred::Cmp { op, .. } => match op {
            CmpOp::Eq => EQ,
            CmpOp::Ne => NE,
            CmpOp::Lt | CmpOp::Le | CmpOp::Gt | CmpOp::Ge => RANGE,
        },
        KPred::And(v) => v.iter().map(selectivity_of).product(),
        KPred::Or(v) => 1.0 - v.iter().map(|q| 1.0 - selectivity_of(q)).product::<f64>(),
        KPred::Not(q) => 1.0 - selectivity_of(q),
        KPred::In { list, negated, .. } => {
            let s = (EQ * list.len() as f64).min(IN_MAX);
            if *negated {
                1.0 - s
            } else {
                s
            }
        }
        KPred::StrEq {
            negated, prefix, ..
        } => {
            let s = if *prefix { STR_PREFIX } else { STR_EQ };
            if *negated {
                1.0 - s
            } else {
                s
            }
        }
    }
}

/// Orders filter conjuncts for emission: by cost class (pid/tid tests
/// first: every instruction before them is paid by untraced processes),
/// then by estimated selectivity, most selective first (it skips the most
/// work after it); ties keep the query's order. Returns the estimates in
/// the new order.
pub fn order_filters(filters: &mut [(KPred, String)]) -> Vec<FilterEstimate> {
    filters.sort_by(|(a, _), (b, _)| {
        let (ea, eb) = (estimate(a), estimate(b));
        ea.class
            .cmp(&eb.class)
            .then(ea.selectivity.total_cmp(&eb.selectivity))
    });
    filters.iter().map(|(p, _)| estimate(p)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kexpr::{IntType, KExpr};
    use ebql_catalog::{Access, SystemAttr};

    fn rates(traced: f64, all: f64) -> Option<SyscallRates> {
        Some(SyscallRates {
            all_per_sec: all,
            traced_per_sec: traced,
            sampled_ms: 100,
        })
    }

    #[test]
    fn explicit_and_preference_choices_win() {
        let mut c = PlanChoices::new();
        c.hook = HookChoice::Raw;
        c.optimize = Optimize::Host;
        assert_eq!(choose_hook(&c).chosen, Hook::Raw);
        c.hook = HookChoice::Auto;
        assert_eq!(choose_hook(&c).chosen, Hook::Tracefs);
        c.optimize = Optimize::Traced;
        assert_eq!(choose_hook(&c).chosen, Hook::Raw);
    }

    /// With the default costs the raw hook saves 68 ns per traced call and
    /// costs 40 ns per other call: it wins when the traced calls are more
    /// than 40/108 = 37% of the machine's system calls.
    #[test]
    fn total_rule_compares_saving_with_cost_on_other_calls() {
        let mut c = PlanChoices::new();
        assert_eq!(choose_hook(&c).chosen, Hook::Tracefs, "unknown rates");
        c.rates = rates(900_000.0, 1_000_000.0);
        let d = choose_hook(&c);
        assert_eq!(d.chosen, Hook::Raw, "{}", d.why);
        // 0.9M·87 + 0.1M·70 = 85.3 ms/s against 0.9M·155 + 0.1M·30 = 142.5 ms/s.
        assert_eq!(
            (d.raw.per_sec_ns.unwrap(), d.tracefs.per_sec_ns.unwrap()),
            (85_300_000.0, 142_500_000.0)
        );
        c.rates = rates(300_000.0, 1_000_000.0);
        assert_eq!(choose_hook(&c).chosen, Hook::Tracefs);
        c.rates = rates(380_000.0, 1_000_000.0);
        assert_eq!(choose_hook(&c).chosen, Hook::Raw);
        c.rates = rates(360_000.0, 1_000_000.0);
        assert_eq!(choose_hook(&c).chosen, Hook::Tracefs);
    }

    fn field(name: &str) -> KExpr {
        KExpr::Field {
            name: name.into(),
            access: Access::Ctx,
            offset: 16,
            size: 8,
            ty: IntType::U64,
        }
    }

    fn cmp(op: CmpOp, l: KExpr, v: u64) -> KPred {
        KPred::Cmp {
            op,
            l,
            r: KExpr::Const(v, IntType::U64),
            signed: false,
        }
    }

    #[test]
    fn pid_first_then_class_then_selectivity() {
        let pid = cmp(
            CmpOp::Eq,
            KExpr::Attr(
                SystemAttr::Pid,
                IntType {
                    bits: 32,
                    signed: false,
                },
            ),
            7,
        );
        let time = cmp(CmpOp::Gt, KExpr::Attr(SystemAttr::Time, IntType::U64), 7);
        let mut filters = vec![
            (cmp(CmpOp::Ne, field("fd"), 3), "fd <> 3".to_string()),
            (time, "time > 7".into()),
            (cmp(CmpOp::Lt, field("count"), 100), "count < 100".into()),
            (pid, "pid = 7".into()),
            (cmp(CmpOp::Eq, field("pos"), 0), "pos = 0".into()),
        ];
        let est = order_filters(&mut filters);
        let order: Vec<&str> = filters.iter().map(|(_, t)| t.as_str()).collect();
        assert_eq!(
            order,
            ["pid = 7", "pos = 0", "count < 100", "fd <> 3", "time > 7"]
        );
        assert_eq!(
            est.iter().map(|e| e.class).collect::<Vec<_>>(),
            [0, 1, 1, 1, 2]
        );
        assert_eq!(est[1].selectivity, selectivity::EQ);
    }

    #[test]
    fn selectivity_of_combinations() {
        let eq = cmp(CmpOp::Eq, field("fd"), 1);
        let ne = cmp(CmpOp::Ne, field("fd"), 1);
        assert!((selectivity_of(&KPred::And(vec![eq.clone(), ne.clone()])) - 0.09).abs() < 1e-12);
        assert!((selectivity_of(&KPred::Or(vec![eq.clone(), eq.clone()])) - 0.19).abs() < 1e-12);
        assert!((selectivity_of(&KPred::Not(Box::new(eq))) - 0.9).abs() < 1e-12);
        assert_eq!(
            selectivity_of(&KPred::In {
                e: field("fd"),
                list: (0..20).collect(),
                negated: false
            }),
            selectivity::IN_MAX
        );
    }
}
