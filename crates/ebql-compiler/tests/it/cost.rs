//! The cost model on generated programs (pure: fixed tracepoint formats, no BPF).
//!
//! Costs are chosen as distinct powers of ten so each breakdown item shows
//! exactly which operation was counted and how often an event runs it.

use ebql_catalog::samples::{SYS_ENTER_PREAD64, SYS_EXIT_PREAD64};
use ebql_catalog::{parse_format, CatalogError, EventName, EventSchema};
use ebql_compiler::contract::OutputLayout;
use ebql_compiler::cost::{
    is_filter_origin, predict, CostModel, Hook, Linear, MapClass, MapOp, MapOpCost, Prediction,
    ProgramCost, Rates,
};
use ebql_compiler::{compile_query, CodegenOptions, CompiledQuery, EventSource};

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

fn compile_with(q: &str, opts: &CodegenOptions) -> CompiledQuery {
    compile_query(q, &Fixed, opts).unwrap_or_else(|e| panic!("{e}"))
}

fn compile(q: &str) -> CompiledQuery {
    compile_with(q, &CodegenOptions::default())
}

const PID_TGID: f64 = 1e3;
const KTIME: f64 = 1e4;
const COMM: f64 = 1e5;
const LOOKUP: f64 = 1e6;
const UPDATE: f64 = 1e7;
const DELETE: f64 = 1e8;
const TASK_BTF: f64 = 3e3;
const HOOK: f64 = 5e2;

/// A model whose every operation has its own power of ten; instructions cost 0.001 ns.
fn model() -> CostModel {
    let mut m = CostModel::built_in();
    m.insn_ns = 0.001;
    m.helper_ns = [
        ("bpf_get_current_pid_tgid", PID_TGID),
        ("bpf_ktime_get_ns", KTIME),
        ("bpf_get_current_comm", COMM),
        ("bpf_get_current_task_btf", TASK_BTF),
    ]
    .into_iter()
    .map(|(n, v)| (n.to_string(), v))
    .collect();
    m.map_ops = [
        MapClass::PercpuHash,
        MapClass::Hash,
        MapClass::Array,
        MapClass::PercpuArray,
        MapClass::TaskStorage,
    ]
    .into_iter()
    .flat_map(|map| {
        [
            (MapOp::Lookup, LOOKUP),
            (MapOp::Update, UPDATE),
            (MapOp::Delete, DELETE),
        ]
        .map(|(op, ns)| MapOpCost { map, op, ns })
    })
    .collect();
    m.hook_entry_ns.insert(Hook::TracefsTracepoint, Some(HOOK));
    m.str_read = Linear {
        base_ns: 2e9,
        per_byte_ns: 1.0,
    };
    m.ringbuf_record = Linear {
        base_ns: 3e10,
        per_byte_ns: 10.0,
    };
    m
}

/// Breakdown items that are calls (not the instruction count), as (what, ns).
fn calls(items: &[ebql_compiler::cost::CostItem]) -> Vec<(String, f64)> {
    items
        .iter()
        .filter(|i| !i.what.contains("instructions"))
        .map(|i| (i.what.clone(), i.ns))
        .collect()
}

fn insns_ns(items: &[ebql_compiler::cost::CostItem]) -> f64 {
    items
        .iter()
        .filter(|i| i.what.contains("instructions"))
        .map(|i| i.ns)
        .sum()
}

const FIG12: &str =
    "SELECT fd, cpu, COUNT(*), MAX(count), AVG(count) FROM tracepoint/syscalls/sys_enter_pread64
                     GROUP BY fd, cpu WHERE pid == 1041370 WINDOW(time, 1000, 1000);";

fn only(p: &Prediction) -> &ProgramCost {
    assert_eq!(p.programs.len(), 1);
    &p.programs[0]
}

#[test]
fn figure_12_costs_the_pid_test_for_everyone_and_one_group_lookup_per_matched_event() {
    let m = model();
    let q = compile(FIG12);
    let p = predict(&m, &q, &Rates::unknown(2));
    let prog = only(&p);
    assert!(prog.filtered);
    assert_eq!(
        calls(&prog.unmatched_breakdown),
        vec![("bpf_get_current_pid_tgid".to_string(), PID_TGID)]
    );
    // The steady state: the group exists (no insert: that is the first event of a group only).
    // The program's own event counters (one per-CPU array lookup after the pid test), then the
    // group: its fd's slot in the array (a descriptor above the dense range, taking the overflow
    // hash, is not the steady state). The event's time, which decides its
    // window (ctl::CUT), although the query selects no time.
    assert_eq!(
        calls(&prog.matched_breakdown),
        vec![
            ("bpf_get_current_pid_tgid".to_string(), PID_TGID),
            ("bpf_ktime_get_ns".to_string(), KTIME),
            (
                "bpf_map_lookup_elem on per-CPU array".to_string(),
                2.0 * LOOKUP
            )
        ]
    );
    let (mi, ui) = (
        insns_ns(&prog.matched_breakdown),
        insns_ns(&prog.unmatched_breakdown),
    );
    assert!(
        ui > 0.0 && mi > ui,
        "the matched path runs more instructions ({mi} vs {ui})"
    );
    assert!(
        mi / m.insn_ns < q.code.main().program.insns.len() as f64,
        "never more instructions than the program has"
    );
    assert_eq!(prog.matched_ns, PID_TGID + KTIME + 2.0 * LOOKUP + mi);
    assert_eq!(p.ns_per_matched_event, Some(HOOK + prog.matched_ns));
    assert_eq!(p.ns_per_unmatched_event, Some(HOOK + prog.unmatched_ns));
    // Without rates every event counts as matched.
    assert_eq!(p.ns_per_event_at_hook, Some(HOOK + prog.matched_ns));
    assert_eq!(
        p.bpf_stats_ns_per_run,
        prog.matched_ns + m.stats_overhead_ns
    );
    assert!(p.ns_on_untraced_work_per_s.is_none() && p.kernel_cpu_per_s.is_none());
}

#[test]
fn every_kernel_filter_term_is_a_region_the_model_sees() {
    let q = compile("SELECT COUNT(*) FROM tracepoint/syscalls/sys_enter_pread64 WHERE pid = 7 AND fd > 2 AND count >= 64");
    let regions = q
        .code
        .main()
        .program
        .origins
        .iter()
        .filter(|(_, o)| is_filter_origin(o))
        .count();
    assert_eq!(regions, q.split.kernel.filters.len());
    assert_eq!(regions, 3);
}

#[test]
fn a_helper_in_a_later_filter_term_is_paid_only_by_events_the_first_term_passes() {
    let m = model();
    let q = compile("SELECT COUNT(*) FROM tracepoint/syscalls/sys_enter_pread64 WHERE pid = 7 AND comm = 'postgres'");
    let prog = only(&predict(&m, &q, &Rates::unknown(2))).clone();
    assert_eq!(
        calls(&prog.unmatched_breakdown),
        vec![("bpf_get_current_pid_tgid".to_string(), PID_TGID)]
    );
    let matched = calls(&prog.matched_breakdown);
    assert!(
        matched.contains(&("bpf_get_current_comm".to_string(), COMM)),
        "{matched:?}"
    );
}

#[test]
fn a_stream_pays_the_record_it_reserves_and_the_string_it_reads() {
    let m = model();
    let q = compile("SELECT time, fd, comm, str(buf, 64) FROM tracepoint/syscalls/sys_enter_pread64 WHERE pid = 5");
    let OutputLayout::Stream { record_size, .. } = q.code.layout else {
        panic!("not a stream")
    };
    let prog = only(&predict(&m, &q, &Rates::unknown(2))).clone();
    let matched = calls(&prog.matched_breakdown);
    assert!(
        matched.contains(&(
            format!("ring-buffer record of {record_size} B (reserve + submit)"),
            m.ringbuf_record.at(record_size)
        )),
        "{matched:?}"
    );
    // str(p, 64) reads one byte more than it keeps: the exact truncation flag.
    assert!(
        matched.contains(&(
            "bpf_probe_read_user_str of ≤ 65 B".to_string(),
            m.str_read.at(65)
        )),
        "{matched:?}"
    );
    assert!(
        matched.contains(&("bpf_ktime_get_ns".to_string(), KTIME))
            && matched.contains(&("bpf_get_current_comm".to_string(), COMM))
    );
    // The drop path (reservation failed) is not the steady state.
    assert!(!prog
        .matched_breakdown
        .iter()
        .any(|i| i.what.contains("update")));
}

/// `bytes(p, len, n)` copies `min(len, n)` bytes, known only at run time:
/// priced at its bound `n` (issue 21: the copy counted in the cost model).
#[test]
fn a_buffer_read_is_priced_at_its_bound() {
    let m = model();
    let q = compile("SELECT bytes(buf, count, 300) AS b FROM tracepoint/syscalls/sys_enter_pread64 WHERE pid = 5");
    let prog = only(&predict(&m, &q, &Rates::unknown(2))).clone();
    let matched = calls(&prog.matched_breakdown);
    assert!(
        matched.contains(&(
            "bpf_probe_read_user of 300 B".to_string(),
            m.probe_read.at(300)
        )),
        "{matched:?}"
    );
}

#[test]
fn rates_weigh_matched_and_rejected_events_and_the_other_syscalls() {
    let m = model();
    let q = compile(FIG12);
    let (rate, share, syscalls) = (200_000.0, 0.25, 1_000_000.0);
    let rates = Rates {
        events_per_s: vec![Some(rate)],
        matched_fraction: vec![Some(share)],
        syscalls_per_s: Some(syscalls),
        groups_per_window: Some(10.0),
        cpus: 4,
        source: "test".into(),
        sampled_ms: 150,
    };
    let p = predict(&m, &q, &rates);
    let prog = only(&p);
    let mean = share * prog.matched_ns + (1.0 - share) * prog.unmatched_ns;
    assert_eq!(p.ns_per_event_at_hook, Some(HOOK + mean));
    assert_eq!(p.bpf_stats_ns_per_run, mean + m.stats_overhead_ns);
    let untraced = rate * (1.0 - share) * (HOOK + prog.unmatched_ns)
        + (syscalls - rate) * m.untraced_syscall_ns;
    assert!((p.ns_on_untraced_work_per_s.unwrap() - untraced).abs() < 1e-6 * untraced);
    assert!(
        (p.kernel_cpu_per_s.unwrap() - rate * (HOOK + mean)).abs() < 1e-6 * rate * (HOOK + mean)
    );
    // One 1-second window per second: its fixed cost and 10 groups × 4 CPUs merged, plus polling.
    let user = m.user_idle_ns_per_s + m.user_window_ns + 10.0 * 4.0 * m.user_merge_ns;
    assert!((p.user_cpu_per_s.unwrap() - user).abs() < 1e-6 * user);
}

#[test]
fn a_pairing_costs_its_start_and_its_end() {
    let m = model();
    let sql = "SELECT e.fd, COUNT(*) FROM tracepoint:syscalls:sys_enter_pread64 AS e JOIN tracepoint:syscalls:sys_exit_pread64 AS x
               ON e.tid = x.tid WHERE e.pid = 5 GROUP BY e.fd WINDOW(time, 1000, 1000)";
    // Task storage: one slot lookup per program, no hash insert or delete.
    let p = predict(&m, &compile(sql), &Rates::unknown(2));
    assert_eq!(p.programs.len(), 2);
    for prog in &p.programs {
        let c = calls(&prog.matched_breakdown);
        assert!(
            c.contains(&("bpf_task_storage_get".to_string(), LOOKUP)),
            "{c:?}"
        );
        assert!(
            !c.iter()
                .any(|(w, _)| w.contains("update") || w.contains("delete")),
            "{c:?}"
        );
    }
    // The end finds its start (no "end without a start" in the steady state) and updates its group.
    let end = calls(&p.programs[1].matched_breakdown);
    assert!(
        end.contains(&("bpf_map_lookup_elem on per-CPU hash".to_string(), LOOKUP)),
        "{end:?}"
    );
    assert_eq!(
        p.ns_per_matched_event,
        Some(p.programs.iter().map(|x| HOOK + x.matched_ns).sum())
    );
    // Without task storage: the start inserts into the hash, the end looks it up and deletes it.
    let hash = predict(
        &m,
        &compile_with(
            sql,
            &CodegenOptions {
                task_storage: false,
                ..Default::default()
            },
        ),
        &Rates::unknown(2),
    );
    let start = calls(&hash.programs[0].matched_breakdown);
    let end = calls(&hash.programs[1].matched_breakdown);
    assert!(
        start.contains(&("bpf_map_update_elem on hash".to_string(), UPDATE)),
        "{start:?}"
    );
    assert!(
        end.contains(&("bpf_map_lookup_elem on hash".to_string(), LOOKUP))
            && end.contains(&("bpf_map_delete_elem on hash".to_string(), DELETE)),
        "{end:?}"
    );
    assert!(
        hash.ns_per_matched_event > p.ns_per_matched_event,
        "the hash start map costs more than task storage at these prices"
    );
}

#[test]
fn the_syscall_hook_choice_reads_the_model() {
    let m = CostModel::built_in();
    assert!(
        m.hook_ns(Hook::Kprobe).is_none(),
        "unknown hooks stay unknown rather than invented"
    );
    let c = m.syscall_hook_costs();
    assert_eq!(
        c.tracefs_traced_ns,
        m.hook_ns(Hook::TracefsTracepoint).unwrap()
    );
    assert_eq!(c.tracefs_untraced_ns, m.untraced_syscall_ns);
}

/// The aggregate's place: both plans compiled, priced by the built-in
/// model at given rates, and the rule's choice. A rare event with a key
/// per event costs less streamed than drained group by group every
/// window; a frequent one with few keys stays in the kernel; groups that
/// would overflow the table go to user space whatever the rate; no event
/// keeps the kernel; `--optimize traced` compares the probe's cost alone.
#[test]
fn the_aggregate_goes_where_the_model_finds_it_cheaper() {
    use ebql_compiler::choose::{AggregateChoice, Optimize, Placement};
    use ebql_compiler::cost::choose_placement;
    let sql = "SELECT pos, COUNT(*) AS n FROM tracepoint:syscalls:sys_enter_pread64 WHERE pid = 42 GROUP BY pos WINDOW(time, 1000, 1000)";
    let placed = |aggregate| {
        let mut opts = CodegenOptions::default();
        opts.choices.aggregate = aggregate;
        compile_with(sql, &opts)
    };
    let (kernel, user) = (
        placed(AggregateChoice::Kernel),
        placed(AggregateChoice::User),
    );
    assert!(matches!(kernel.code.layout, OutputLayout::Groups { .. }));
    assert!(
        matches!(user.code.layout, OutputLayout::Stream { .. }),
        "--aggregate user streams the rows"
    );
    assert!(
        user.split
            .user_ops
            .iter()
            .any(|o| o.starts_with("Aggregate in user space: placed there by the planner")),
        "{:?}",
        user.split.user_ops
    );
    let explained = ebql_compiler::explain::explain(&user);
    assert!(
        explained.contains("aggregate: user space (asked for (--aggregate user))"),
        "{explained}"
    );
    let explained = ebql_compiler::explain::explain(&kernel);
    assert!(
        explained.contains("aggregate: kernel (asked for (--aggregate kernel))"),
        "{explained}"
    );

    let m = CostModel::built_in();
    // `matched` events/s at the hook, all passing the filter, `groups` per 1-s window.
    let decide = |optimize, matched: f64, groups: Option<f64>| {
        let rates = Rates {
            events_per_s: vec![Some(matched)],
            matched_fraction: vec![Some(1.0)],
            groups_per_window: groups,
            cpus: 2,
            ..Default::default()
        };
        let k = predict(&m, &kernel, &rates);
        let u = predict(
            &m,
            &user,
            &Rates {
                groups_per_window: None,
                ..rates.clone()
            },
        );
        choose_placement(
            optimize,
            k,
            u,
            Some(matched),
            groups,
            CodegenOptions::default().max_groups,
        )
    };
    let rare = decide(Optimize::Total, 20.0, Some(20.0));
    assert_eq!(rare.chosen, Placement::User, "{}", rare.why);
    assert!(
        rare.why.starts_with(
            "least CPU in all at the sampled rates, ≈20 group(s) per window: user space"
        ),
        "{}",
        rare.why
    );
    let frequent = decide(Optimize::Total, 1e5, Some(20.0));
    assert_eq!(frequent.chosen, Placement::Kernel, "{}", frequent.why);
    let overflow = decide(Optimize::Total, 1e6, Some(50_000.0));
    assert_eq!(overflow.chosen, Placement::User, "{}", overflow.why);
    assert!(
        overflow
            .why
            .contains("would overflow the group table (--max-groups 10240)"),
        "{}",
        overflow.why
    );
    let none = decide(Optimize::Total, 0.0, None);
    assert_eq!(none.chosen, Placement::Kernel, "{}", none.why);
    // The probe alone: a hash lookup (38 ns) against a ring-buffer record (48 ns).
    let traced = decide(Optimize::Traced, 20.0, Some(20.0));
    assert_eq!(traced.chosen, Placement::Kernel, "{}", traced.why);
    assert!(
        traced
            .why
            .starts_with("--optimize traced: the group-table update costs the traced event"),
        "{}",
        traced.why
    );
    // What explain shows for the decision: both plans with their CPU per second.
    let alts = rare.alternatives();
    assert_eq!(
        alts.iter().map(|a| a.chosen).collect::<Vec<_>>(),
        vec![false, true]
    );
    assert!(alts.iter().all(|a| a
        .why
        .as_deref()
        .is_some_and(|w| w.ends_with("of CPU per second"))));
}
