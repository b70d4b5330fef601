//! The physical pass ([`compile_planned`]) against a scripted
//! [`RateSampler`]: which samples it asks for, how often, and which plan
//! the answers pick. Pure: fixed tracepoint formats, no BPF.

use ebql_catalog::samples::{SYS_ENTER_PREAD64, SYS_EXIT_PREAD64};
use ebql_catalog::{parse_format, CatalogError, EventName, EventSchema};
use ebql_compiler::choose::{AggregateChoice, Placement, SyscallRates};
use ebql_compiler::contract::OutputLayout;
use ebql_compiler::cost::Rates;
use ebql_compiler::physical::{compile_planned, NoSampler, RateSampler, StartStore};
use ebql_compiler::{compile_query, CodegenOptions, CompiledQuery, EventSource};
use std::cell::RefCell;

struct Fixed;

impl EventSource for Fixed {
    fn event(&self, name: &EventName) -> Result<EventSchema, CatalogError> {
        match (name.category.as_str(), name.name.as_str()) {
            ("syscalls", "sys_enter_pread64") => parse_format(name.clone(), SYS_ENTER_PREAD64),
            ("syscalls", "sys_exit_pread64") => parse_format(name.clone(), SYS_EXIT_PREAD64),
            _ => Err(CatalogError::UnknownEvent {
                name: name.table_name(),
                suggestion: None,
            }),
        }
    }
}

/// Answers from a script and records every question.
#[derive(Default)]
struct Scripted {
    task_storage: bool,
    syscalls: Option<Result<SyscallRates, String>>,
    query: Option<Result<Rates, String>>,
    asked: RefCell<Vec<String>>,
}

impl RateSampler for Scripted {
    fn task_storage(&self) -> bool {
        self.asked.borrow_mut().push("task_storage".into());
        self.task_storage
    }

    fn syscall_rates(&self, nrs: &[u32]) -> Option<Result<SyscallRates, String>> {
        self.asked.borrow_mut().push(format!("syscalls {nrs:?}"));
        self.syscalls.clone()
    }

    fn query_rates(&self, q: &CompiledQuery) -> Option<Result<Rates, String>> {
        let layout = match q.code.layout {
            OutputLayout::Groups { .. } => "groups",
            _ => "stream",
        };
        self.asked.borrow_mut().push(format!("query ({layout})"));
        self.query.clone()
    }
}

const GROUPED: &str = "SELECT fd, COUNT(*) FROM tracepoint:syscalls:sys_enter_pread64
    WHERE pid = 4242 GROUP BY fd WINDOW(time, 1000, 1000)";

const PAIRED: &str = "SELECT COUNT(*) FROM tracepoint:syscalls:sys_enter_pread64 AS e
    JOIN tracepoint:syscalls:sys_exit_pread64 AS x ON e.tid = x.tid";

/// `matched` events per second of pread64, all matching; `groups` per window.
fn rates(matched: f64, groups: f64) -> Rates {
    Rates {
        events_per_s: vec![Some(matched)],
        matched_fraction: vec![Some(1.0)],
        syscalls_per_s: Some(matched * 2.0),
        groups_per_window: Some(groups),
        cpus: 2,
        source: "scripted".into(),
        sampled_ms: 100,
    }
}

fn planned(sql: &str, opts: &CodegenOptions, sampler: &Scripted) -> CompiledQuery {
    compile_planned(sql, &Fixed, opts, sampler).unwrap_or_else(|e| panic!("{e}"))
}

fn listing(c: &CompiledQuery) -> String {
    format!("{:?}", c.code.main().program.insns)
}

#[test]
fn without_a_sampler_the_pass_is_the_plan_that_needs_no_rates() {
    let opts = CodegenOptions::default();
    let plain = compile_query(GROUPED, &Fixed, &opts).unwrap();
    let c = compile_planned(GROUPED, &Fixed, &opts, &NoSampler).unwrap();
    assert_eq!(listing(&c), listing(&plain));
    assert!(c.physical.placement.is_none());
    assert!(c.physical.rates.is_none());
    let hook = c.physical.hook.as_ref().expect("a syscall tracepoint");
    assert!(
        hook.decision.why.contains("no sampled"),
        "{}",
        hook.decision.why
    );
}

/// One run of the query answers both rules: no separate syscall count.
#[test]
fn the_query_sample_serves_the_hook_rule_and_the_placement() {
    let sampler = Scripted {
        query: Some(Ok(rates(100_000.0, 3.0))),
        ..Default::default()
    };
    let c = planned(GROUPED, &CodegenOptions::default(), &sampler);
    assert_eq!(*sampler.asked.borrow(), ["query (groups)"]);
    let hook = c.physical.hook.as_ref().unwrap();
    assert!(
        hook.decision.why.contains("sampled 100 ms"),
        "{}",
        hook.decision.why
    );
    let placement = c.physical.placement.as_ref().expect("weighed");
    assert_eq!(placement.chosen, Placement::Kernel, "{}", placement.why);
    assert_eq!(c.physical.rates.as_ref().unwrap().source, "scripted");
}

/// Groups beyond the table's bound move the aggregate to user space: the
/// chosen plan streams rows and records why.
#[test]
fn overflowing_groups_move_the_aggregate_to_user_space() {
    let sampler = Scripted {
        query: Some(Ok(rates(1_000.0, 1e9))),
        ..Default::default()
    };
    let c = planned(GROUPED, &CodegenOptions::default(), &sampler);
    let placement = c.physical.placement.as_ref().unwrap();
    assert_eq!(placement.chosen, Placement::User);
    assert!(placement.why.contains("overflow"), "{}", placement.why);
    assert!(matches!(c.code.layout, OutputLayout::Stream { .. }));
}

#[test]
fn a_failed_query_sample_keeps_the_kernel_and_says_why() {
    let sampler = Scripted {
        query: Some(Err("no privilege".into())),
        syscalls: Some(Err("not asked".into())),
        ..Default::default()
    };
    let c = planned(GROUPED, &CodegenOptions::default(), &sampler);
    assert_eq!(*sampler.asked.borrow(), ["query (groups)"]);
    let placement = c.physical.placement.as_ref().unwrap();
    assert_eq!(placement.chosen, Placement::Kernel);
    assert!(placement.why.contains("no privilege"), "{}", placement.why);
    assert!(c.physical.rates.is_none());
}

/// An aggregate the user pinned to the kernel is not weighed: only the
/// hook rule asks, for the machine's system calls (pread64 is number 17).
#[test]
fn a_pinned_aggregate_asks_only_for_syscall_rates() {
    let mut opts = CodegenOptions::default();
    opts.choices.aggregate = AggregateChoice::Kernel;
    let sampler = Scripted {
        syscalls: Some(Ok(SyscallRates {
            all_per_sec: 1_000.0,
            traced_per_sec: 10.0,
            sampled_ms: 100,
        })),
        ..Default::default()
    };
    let c = planned(GROUPED, &opts, &sampler);
    assert_eq!(*sampler.asked.borrow(), ["syscalls [17]"]);
    assert!(c.physical.placement.is_none());
    let why = &c.physical.hook.as_ref().unwrap().decision.why;
    assert!(why.contains("10 traced calls/s of 1000"), "{why}");
}

#[test]
fn a_kernel_without_task_storage_keeps_starts_in_the_hash() {
    let opts = CodegenOptions::default();
    let with = Scripted {
        task_storage: true,
        ..Default::default()
    };
    let without = Scripted::default();
    let c = planned(PAIRED, &opts, &with);
    assert_eq!(c.physical.start_store, Some(StartStore::Task));
    let c = planned(PAIRED, &opts, &without);
    assert_eq!(c.physical.start_store, Some(StartStore::Hash));
    let asked = without.asked.borrow();
    assert_eq!(asked[0], "task_storage", "{asked:?}");
    assert_eq!(asked.iter().filter(|a| *a == "task_storage").count(), 1);
}
