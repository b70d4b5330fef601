//! The compiler on fixed tracepoint formats (pure: no tracefs, no BPF).

use ebql_catalog::samples::{SCHED_SWITCH, SYS_ENTER_PREAD64, SYS_EXIT_PREAD64};
use ebql_catalog::{parse_format, CatalogError, EventName, EventSchema};
use ebql_compiler::codegen::{MapKind, MAP_PAIR, MAP_PAIR_LIVE};
use ebql_compiler::split::KernelOutput;
use ebql_compiler::{
    compile_query, explain::explain, CodegenOptions, CompileError, CompiledQuery, EventSource,
};

/// Syscall arguments as Linux 6.18 declares them: all `size:8; signed:0`.
const SYSCALL_TYPES: &str = "name: sys_enter_typedefs
ID: 9
format:
\tfield:int __syscall_nr;\toffset:8;\tsize:4;\tsigned:1;
\tfield:const clockid_t which_clock;\toffset:16;\tsize:8;\tsigned:0;
\tfield:timer_t timer_id;\toffset:24;\tsize:8;\tsigned:0;
\tfield:loff_t pos;\toffset:32;\tsize:8;\tsigned:0;
\tfield:rwf_t flags;\toffset:40;\tsize:8;\tsigned:0;
\tfield:umode_t mode;\toffset:48;\tsize:8;\tsigned:0;
\tfield:qid_t id;\toffset:56;\tsize:8;\tsigned:0;
\tfield:long arg;\toffset:64;\tsize:8;\tsigned:0;
\tfield:const int dfd;\toffset:72;\tsize:8;\tsigned:0;
";

/// Known events; everything else is unknown.
struct Fixed;

impl EventSource for Fixed {
    fn event(&self, name: &EventName) -> Result<EventSchema, CatalogError> {
        match (name.category.as_str(), name.name.as_str()) {
            ("syscalls", "sys_enter_pread64") => parse_format(name.clone(), SYS_ENTER_PREAD64),
            ("syscalls", "sys_exit_pread64") => parse_format(name.clone(), SYS_EXIT_PREAD64),
            ("sched", "sched_switch") => parse_format(name.clone(), SCHED_SWITCH),
            ("syscalls", "sys_enter_typedefs") => parse_format(name.clone(), SYSCALL_TYPES),
            _ => Err(CatalogError::UnknownEvent {
                name: name.table_name(),
                suggestion: Some("tracepoint/syscalls/sys_enter_pread64".into()),
            }),
        }
    }
}

fn compile(q: &str) -> Result<CompiledQuery, CompileError> {
    compile_query(q, &Fixed, &CodegenOptions::default())
}

fn diag(q: &str) -> (String, String, Option<String>) {
    match compile(q) {
        Err(CompileError::Query(d)) => (
            d.message.clone(),
            q[d.span.clone().expect("positioned")].to_string(),
            d.hint.clone(),
        ),
        Err(other) => panic!("not a query error: {other}"),
        Ok(_) => panic!("compiled: {q}"),
    }
}

const FIG12: &str = "SELECT fd, cpu, COUNT(*), MAX(count), AVG(count)
                FROM tracepoint/syscalls/sys_enter_pread64
                GROUP BY fd, cpu WHERE pid == 1041370 WINDOW(time, 1000, 1000);";

#[test]
fn figure_12_runs_entirely_in_the_kernel() {
    let c = compile(FIG12).unwrap();
    let KernelOutput::Groups(g) = &c.split.kernel.output else {
        panic!("not aggregated in the kernel:\n{}", explain(&c))
    };
    assert_eq!(g.keys.len(), 2);
    assert!(
        g.keys[1].per_cpu,
        "cpu comes from the per-CPU map, not the key"
    );
    assert_eq!(
        g.slots.len(),
        2,
        "MAX and the SUM behind AVG; COUNT is the shared count"
    );
    assert!(c.split.user_ops.is_empty(), "{:?}", c.split.user_ops);
    // fd has no bound, but descriptors cluster low: an array of 1024 fds per window, the rest in an overflow hash.
    let (array, overflow) = (
        &c.code.maps[1],
        c.code
            .maps
            .iter()
            .find(|m| m.name == "ebql_groups_overflow")
            .expect("an overflow hash"),
    );
    assert_eq!(
        (array.kind, array.key_size, array.max_entries),
        (MapKind::PercpuArray, 4, 2 * 1024)
    );
    assert_eq!(overflow.key_size, 8, "u32 generation + u32 fd");
    let text = c.code.main().program.listing();
    let first_call = text.lines().find(|l| l.contains(": call ")).unwrap();
    assert!(first_call.contains("bpf_get_current_pid_tgid"), "{text}");
    let groups = text.split_once(";; Aggregate").unwrap().1;
    let (usual, outside) = groups
        .split_once(";; Window(time): key.generation")
        .expect("the overflow path builds a hash key");
    assert_eq!(
        usual.matches("call bpf_map_lookup_elem").count(),
        1,
        "one array lookup per event:\n{text}"
    );
    assert!(
        !usual.contains("bpf_map_update_elem"),
        "no insert into the array:\n{text}"
    );
    assert_eq!(
        outside.matches("call bpf_map_lookup_elem").count(),
        2,
        "outside the array: a hash lookup, one retry after -EEXIST:\n{text}"
    );
    assert!(
        !text.contains("bpf_get_smp_processor_id"),
        "cpu as a key costs no helper call:\n{text}"
    );
}

#[test]
fn thesis_and_standard_clause_order_compile_identically() {
    let standard = "SELECT fd, cpu, COUNT(*), MAX(count), AVG(count) FROM tracepoint:syscalls:sys_enter_pread64
                    WHERE pid = 1041370 GROUP BY fd, cpu WINDOW(time, 1000, 1000)";
    assert_eq!(
        compile(FIG12).unwrap().code.main().program.insns,
        compile(standard).unwrap().code.main().program.insns
    );
}

#[test]
fn binder_errors_point_at_the_problem() {
    let (m, at, hint) =
        diag("SELECT fd, MAX(cnt) FROM tracepoint/syscalls/sys_enter_pread64 GROUP BY fd");
    assert_eq!(
        (m.as_str(), at.as_str()),
        ("unknown field 'cnt' in syscalls:sys_enter_pread64", "cnt")
    );
    assert_eq!(hint.as_deref(), Some("did you mean 'count'?"));

    let (m, at, _) = diag("SELECT fd FROM tracepoint/syscalls/sys_enter_pread65");
    assert!(m.contains("sys_enter_pread65"), "{m}");
    assert_eq!(at, "tracepoint/syscalls/sys_enter_pread65");

    let (m, at, _) = diag("SELECT fd FROM tracepoint/syscalls/sys_enter_pread64\n  WHERE comm > 5");
    assert!(m.starts_with("type error"), "{m}");
    assert_eq!(at, "comm");

    let (_, at, _) =
        diag("SELECT fd FROM tracepoint/syscalls/sys_enter_pread64 GROUP BY fd WHERE pid == 'x'");
    assert_eq!(at, "'x'");
}

#[test]
fn conjuncts_are_split_and_ordered_pid_first() {
    let c = compile("SELECT fd FROM tracepoint/syscalls/sys_enter_pread64 WHERE comm = 'db' AND count > 10 AND pid = 7").unwrap();
    let classes: Vec<u8> = c
        .split
        .kernel
        .filters
        .iter()
        .map(|(p, _)| p.cost_class())
        .collect();
    assert_eq!(classes, vec![0, 1, 3]);
}

#[test]
fn what_the_kernel_cannot_evaluate_stays_in_user_space() {
    let c = compile("SELECT fd, COUNT(*) FROM tracepoint/syscalls/sys_enter_pread64 WHERE pid = 7 AND CAST(count AS DOUBLE) > 1.5 GROUP BY fd").unwrap();
    assert_eq!(c.split.kernel.filters.len(), 1, "pid filter in the kernel");
    assert!(
        matches!(c.split.kernel.output, KernelOutput::Stream { .. }),
        "rows go to user space for the rest"
    );
    assert!(
        c.split.user_ops.iter().any(|o| o.contains("Filter")),
        "{:?}",
        c.split.user_ops
    );
    assert!(
        c.split.user_ops.iter().any(|o| o.contains("Aggregate")),
        "{:?}",
        c.split.user_ops
    );
}

#[test]
fn unsigned_arithmetic_stays_integer() {
    let c = compile("SELECT count / 100 AS bucket, COUNT(*) FROM tracepoint/syscalls/sys_enter_pread64 GROUP BY count / 100").unwrap();
    assert!(
        matches!(c.split.kernel.output, KernelOutput::Groups(_)),
        "{}",
        explain(&c)
    );
    assert_eq!(
        c.split.remainder.schema().field(0).data_type(),
        &ebql_compiler::kexpr::IntType::U64.data_type()
    );
}

#[test]
fn char_arrays_and_signed_fields() {
    let c = compile("SELECT prev_pid, next_comm FROM tracepoint/sched/sched_switch WHERE prev_comm = 'bash' AND prev_pid < 0").unwrap();
    assert_eq!(
        c.split.kernel.filters.len(),
        2,
        "both compiled: {:?}",
        c.split.user_ops
    );
    let text = c.code.main().program.listing();
    let insns: Vec<&str> = text
        .lines()
        .filter_map(|l| {
            l.trim_start()
                .split_once(": ")
                .filter(|(pc, _)| pc.parse::<u32>().is_ok())
                .map(|(_, i)| i)
        })
        .collect();
    assert!(
        insns
            .windows(3)
            .any(|w| w == ["r1 = *(u32 *)(r6 + 24)", "r1 <<= 32", "r1 s>>= 32"]),
        "pid_t is read as 4 bytes and sign-extended:\n{text}"
    );
    assert!(
        text.contains("if r1 s>= 0x0 goto"),
        "signed comparison:\n{text}"
    );
    assert!(
        text.contains("r1 = *(u64 *)(r6 + 40)"),
        "char arrays are copied in aligned words:\n{text}"
    );
}

#[test]
fn listing_ties_instructions_to_plan_nodes() {
    let c = compile(FIG12).unwrap();
    for pc in 0..c.code.main().program.insns.len() {
        assert!(
            c.code.main().program.origin_of(pc).is_some(),
            "instruction {pc} has no plan node"
        );
    }
    let text = explain(&c);
    for section in [
        ";; Filter: ",
        ";; Window(time)",
        ";; GroupBy key: ",
        ";; Aggregate: update",
        ";; Aggregate: new group",
    ] {
        assert!(text.contains(section), "missing {section}:\n{text}");
    }
}

// ---- Semantics: the kernel computes exactly what DataFusion would, or leaves it to DataFusion.

use ebql_compiler::kexpr::{CmpOp, KExpr, KPred};

const PREAD: &str = "tracepoint/syscalls/sys_enter_pread64";

fn kernel_groups(c: &CompiledQuery) -> &ebql_compiler::split::GroupSpec {
    match &c.split.kernel.output {
        KernelOutput::Groups(g) => g,
        _ => panic!("aggregate not in the kernel:\n{}", explain(c)),
    }
}

fn aggregated_in_user_space(c: &CompiledQuery) -> bool {
    matches!(c.split.kernel.output, KernelOutput::Stream { .. })
        && c.split.user_ops.iter().any(|o| o.contains("Aggregate"))
}

#[test]
fn count_of_a_nullable_expression_is_not_the_event_count() {
    let c = compile(&format!(
        "SELECT COUNT(NULLIF(count, 100)) AS n FROM {PREAD}"
    ))
    .unwrap();
    assert!(aggregated_in_user_space(&c), "{}", explain(&c));
    // A conditional count stays in the kernel: one slot counting where the predicate holds.
    let c = compile(&format!(
        "SELECT COUNT(CASE WHEN count > 150 THEN 1 END) AS n, COUNT(*) FROM {PREAD} WHERE pid = 7"
    ))
    .unwrap();
    let g = kernel_groups(&c);
    assert_eq!(g.slots.len(), 1);
    assert!(
        g.slots[0]
            .state
            .is::<ebql_compiler::agg::count::CountWhen>(),
        "{:?}",
        g.slots[0]
    );
    assert!(
        g.aggs[0]
            .0
            .is::<ebql_compiler::agg::count::CountWhenValue>()
            && g.aggs[0].0.slot() == Some(0),
        "{:?}",
        g.aggs[0]
    );
    // ...but not when a result may be NULL or the predicate does not compile.
    for e in [
        "CASE WHEN count > 150 THEN NULLIF(fd, 3) END",
        "CASE WHEN CAST(count AS DOUBLE) > 1.5 THEN 1 END",
    ] {
        let c = compile(&format!("SELECT COUNT({e}) AS n FROM {PREAD}")).unwrap();
        assert!(aggregated_in_user_space(&c), "{e}: {}", explain(&c));
    }
}

#[test]
fn count_star_and_count_of_columns_stay_in_the_kernel() {
    let c = compile(&format!(
        "SELECT COUNT(*), COUNT(fd), COUNT(comm), COUNT(count + 1) FROM {PREAD} WHERE pid = 7"
    ))
    .unwrap();
    let g = kernel_groups(&c);
    assert_eq!(g.aggs.len(), 4);
    assert!(g.slots.is_empty(), "all four are the shared event count");
}

#[test]
fn is_null_of_a_nullable_operand_is_not_folded() {
    let c = compile(&format!(
        "SELECT COUNT(*) FROM {PREAD} WHERE pid = 7 AND NULLIF(count, 100) IS NULL"
    ))
    .unwrap();
    assert_eq!(
        c.split.kernel.filters.len(),
        1,
        "only the pid test in the kernel: {:?}",
        c.split.kernel.filters
    );
    assert!(
        c.split.user_ops.iter().any(|o| o.contains("IS NULL")),
        "{:?}",
        c.split.user_ops
    );
    let c = compile(&format!(
        "SELECT COUNT(*) FROM {PREAD} WHERE pid = 7 AND (count + 1) IS NOT NULL"
    ))
    .unwrap();
    assert!(c.split.user_ops.is_empty(), "{:?}", c.split.user_ops);
}

#[test]
fn cast_to_boolean_is_a_test_for_non_zero() {
    let c = compile(&format!(
        "SELECT COUNT(*) FROM {PREAD} WHERE CAST(count AS BOOLEAN)"
    ))
    .unwrap();
    assert!(c.split.user_ops.is_empty(), "{:?}", c.split.user_ops);
    let (p, _) = &c.split.kernel.filters[0];
    assert!(
        matches!(
            p,
            KPred::Cmp {
                op: CmpOp::Ne,
                r: KExpr::Const(0, _),
                ..
            }
        ),
        "{p:?}"
    );
}

#[test]
fn narrowing_and_sign_changing_casts_run_in_user_space() {
    // (`CAST(count AS TINYINT) = 5` itself DataFusion rewrites to `count = 5`, in both plans.)
    for cast in [
        "CAST(count AS TINYINT)",
        "CAST(count AS INT)",
        "CAST(fd AS INT)",
        "CAST(pos AS BIGINT UNSIGNED)",
        "TRY_CAST(count AS SMALLINT)",
    ] {
        let c = compile(&format!(
            "SELECT COUNT(*) FROM {PREAD} WHERE pid = 7 AND {cast} * 2 = 10"
        ))
        .unwrap();
        assert_eq!(
            c.split.kernel.filters.len(),
            1,
            "{cast} must not be computed by the kernel: {:?}",
            c.split.kernel.filters
        );
        let c = compile(&format!("SELECT SUM({cast}) FROM {PREAD}")).unwrap();
        assert!(
            aggregated_in_user_space(&c),
            "SUM({cast}):\n{}",
            explain(&c)
        );
    }
    // Widening casts are exact and stay.
    let c = compile(&format!(
        "SELECT SUM(CAST(fd AS BIGINT)) FROM {PREAD} WHERE CAST(fd AS BIGINT) > 2"
    ))
    .unwrap();
    assert!(c.split.user_ops.is_empty(), "{:?}", c.split.user_ops);
}

#[test]
fn shift_amounts_wrap_modulo_the_width() {
    // DataFusion uses wrapping_shl: a UInt32 shifted by 35 is shifted by 3.
    let c = compile(&format!(
        "SELECT SUM(fd << CAST(35 AS INT UNSIGNED)) FROM {PREAD}"
    ))
    .unwrap();
    let g = kernel_groups(&c);
    match &g.slots[0].expr {
        KExpr::Cast(x, _) if matches!(**x, KExpr::Arith(..)) => {
            let KExpr::Arith(_, _, r, _) = &**x else {
                unreachable!()
            };
            assert_eq!(
                **r,
                KExpr::Const(
                    3,
                    ebql_compiler::kexpr::IntType {
                        bits: 32,
                        signed: false
                    }
                )
            )
        }
        other => panic!("{other:?}"),
    }
    // A variable amount is masked to the width first.
    let c = compile(&format!("SELECT SUM(fd << fd) FROM {PREAD}")).unwrap();
    let text = c.code.main().program.listing();
    let masked = text.lines().find_map(|l| {
        l.trim()
            .strip_suffix(" &= 31")
            .and_then(|r| r.rsplit(' ').next())
            .map(str::to_string)
    });
    let masked = masked.unwrap_or_else(|| panic!("amount masked to 31:\n{text}"));
    assert!(
        text.contains(&format!("r1 <<= {masked}")),
        "the masked amount is the shift's:\n{text}"
    );
    // Signed right shifts are arithmetic.
    let c = compile(&format!(
        "SELECT COUNT(*) FROM {PREAD} WHERE (pos >> 1) < 0"
    ))
    .unwrap();
    assert!(c.split.user_ops.is_empty(), "{:?}", c.split.user_ops);
    assert!(
        c.code.main().program.listing().contains("s>>= 1"),
        "{}",
        c.code.main().program.listing()
    );
}

#[test]
fn signed_division_runs_in_user_space() {
    let c = compile(&format!(
        "SELECT COUNT(*) FROM {PREAD} WHERE pid = 7 AND pos / 2 = 1"
    ))
    .unwrap();
    assert_eq!(
        c.split.kernel.filters.len(),
        1,
        "{:?}",
        c.split.kernel.filters
    );
    let c = compile(&format!(
        "SELECT COUNT(*) FROM {PREAD} WHERE pid = 7 AND count % 0 = 1"
    ));
    if let Ok(c) = c {
        assert_eq!(
            c.split.kernel.filters.len(),
            1,
            "{:?}",
            c.split.kernel.filters
        );
    }
}

#[test]
fn sums_are_128_bit_in_the_map_value() {
    let c = compile(&format!(
        "SELECT SUM(count), MAX(count), SUM(pos) FROM {PREAD}"
    ))
    .unwrap();
    let g = kernel_groups(&c);
    assert_eq!(
        (
            g.slot_offset(0),
            g.slot_offset(1),
            g.slot_offset(2),
            g.value_size()
        ),
        (8, 24, 32, 48)
    );
    assert_eq!(c.code.maps[1].value_size, 48);
    let text = c.code.main().program.listing();
    assert!(
        text.contains("s>>= 63"),
        "the signed sum adds the sign extension to the high word:\n{text}"
    );
}

#[test]
fn huge_expressions_fall_back_to_user_space() {
    // DataFusion's planner recurses deeply on such expressions: give it the
    // main thread's 8 MiB instead of a test thread's 2 MiB.
    std::thread::Builder::new()
        .stack_size(8 << 20)
        .spawn(huge_expressions)
        .unwrap()
        .join()
        .unwrap();
}

fn huge_expressions() {
    // Right-nested: every level keeps one more register busy.
    let mut e = "fd".to_string();
    for _ in 0..8 {
        e = format!("(fd + {e} * fd)");
    }
    let c = compile(&format!(
        "SELECT SUM({e}) FROM {PREAD} WHERE pid = 7 AND {e} > 3 AND fd IN ({})",
        (0..60)
            .map(|i| i.to_string())
            .collect::<Vec<_>>()
            .join(", ")
    ))
    .unwrap_or_else(|e| panic!("{e}"));
    assert!(aggregated_in_user_space(&c), "{}", explain(&c));
    assert_eq!(
        c.split.kernel.filters.len(),
        2,
        "pid and IN in the kernel, the huge comparison not: {:?}",
        c.split.kernel.filters
    );
    // Many aggregates: 32 states (520-byte values, created from the all-zero
    // map value, not the stack) stay in the kernel; a 33rd sends all to user space.
    let many: Vec<String> = (0..32).map(|i| format!("SUM(count + {i})")).collect();
    let c = compile(&format!("SELECT {} FROM {PREAD}", many.join(", ")))
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(kernel_groups(&c).value_size(), 8 + 32 * 16);
    let c = compile(&format!(
        "SELECT {}, SUM(count + 99) FROM {PREAD}",
        many.join(", ")
    ))
    .unwrap_or_else(|e| panic!("{e}"));
    assert!(aggregated_in_user_space(&c), "{}", explain(&c));
    // Many OR-ed terms are fine.
    let terms: Vec<String> = (0..200).map(|i| format!("count = {i}")).collect();
    compile(&format!(
        "SELECT COUNT(*) FROM {PREAD} WHERE {}",
        terms.join(" OR ")
    ))
    .unwrap_or_else(|e| panic!("{e}"));
}

#[test]
fn char_array_keys_are_zeroed_after_the_nul() {
    let c =
        compile("SELECT prev_comm, COUNT(*) FROM tracepoint/sched/sched_switch GROUP BY prev_comm")
            .unwrap();
    let text = c.code.main().program.listing();
    assert!(text.contains("copy up to the NUL"), "{text}");
    assert_eq!(
        text.matches("= *(u8 *)(r6 +").count(),
        16,
        "byte-wise copy:\n{text}"
    );
}

#[test]
fn syscall_arguments_are_typed_by_their_c_type() {
    use ebql_catalog::EventName;
    use ebql_compiler::planner::event_arrow_schema;
    let ev = Fixed
        .event(&EventName::tracepoint("syscalls", "sys_enter_typedefs"))
        .unwrap();
    let schema = event_arrow_schema(&ev);
    let ty = |n: &str| schema.field_with_name(n).unwrap().data_type().to_string();
    let got: Vec<(&str, String)> = [
        "which_clock",
        "timer_id",
        "pos",
        "flags",
        "mode",
        "id",
        "arg",
        "dfd",
    ]
    .into_iter()
    .map(|n| (n, ty(n)))
    .collect();
    let want = [
        ("which_clock", "Int32"),
        ("timer_id", "Int32"),
        ("pos", "Int64"),
        ("flags", "Int32"),
        ("mode", "UInt16"),
        ("id", "UInt32"),
        ("arg", "Int64"),
        ("dfd", "Int32"),
    ];
    assert_eq!(got, want.map(|(n, t)| (n, t.to_string())));
}

#[test]
fn predicates_beyond_the_jump_range_run_in_user_space() {
    std::thread::Builder::new()
        .stack_size(64 << 20)
        .spawn(|| {
            // 200 pairs of 64-constant IN lists: ~50 000 instructions, beyond a
            // conditional jump's reach, in fewer operators than the pre-pass allows
            // (the AND keeps DataFusion from merging the lists into one).
            let list = |base: usize| {
                (0..64)
                    .map(|k| (base * 64 + k).to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            let terms: Vec<String> = (0..200)
                .map(|i| format!("(count IN ({}) AND fd IN ({}))", list(i), list(i + 1000)))
                .collect();
            let c = compile(&format!(
                "SELECT COUNT(*) FROM {PREAD} WHERE pid = 7 AND ({})",
                terms.join(" OR ")
            ))
            .unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(
                c.split.kernel.filters.len(),
                1,
                "only the pid test in the kernel"
            );
            let op = c
                .split
                .user_ops
                .iter()
                .find(|o| o.contains("Filter"))
                .expect("the OR in user space");
            assert!(
                op.contains(" OR "),
                "still the OR chain DataFusion planned: {}",
                &op[..200]
            );
        })
        .unwrap()
        .join()
        .unwrap();
}

#[test]
fn string_literals_user_space_would_match_differently_stay_there() {
    let c = compile(&format!(
        "SELECT COUNT(*) FROM {PREAD} WHERE pid = 7 AND comm = 'a\u{FFFD}'"
    ))
    .unwrap();
    assert_eq!(
        c.split.kernel.filters.len(),
        1,
        "{:?}",
        c.split.kernel.filters
    );
}

#[test]
fn boolean_tests_of_kernel_predicates_stay_in_the_kernel() {
    for (cond, want) in [
        ("(count > 5) IS TRUE", "Cmp"),
        ("(count > 5) IS NOT FALSE", "Cmp"),
        ("(count > 5) IS FALSE", "Not"),
        ("(count > 5) IS NOT TRUE", "Not"),
    ] {
        let c = compile(&format!("SELECT COUNT(*) FROM {PREAD} WHERE {cond}")).unwrap();
        assert!(
            c.split.user_ops.is_empty(),
            "{cond}: {:?}",
            c.split.user_ops
        );
        let got = format!(
            "{:?}",
            c.split
                .kernel
                .filters
                .iter()
                .map(|f| &f.0)
                .collect::<Vec<_>>()
        );
        assert!(got.contains(want), "{cond}: {got}");
    }
    // ...but not when the operand may be NULL (NULLIF(...) = 3 IS FALSE is false for NULL).
    let c = compile(&format!(
        "SELECT COUNT(*) FROM {PREAD} WHERE pid = 7 AND (NULLIF(count, 100) = 3) IS FALSE"
    ))
    .unwrap();
    assert_eq!(
        c.split.kernel.filters.len(),
        1,
        "{:?}",
        c.split.kernel.filters
    );
}

const PAIRED: &str =
    "SELECT e.fd, COUNT(*), SUM(x.time - e.time) AS total_ns, MAX(x.time - e.time) AS max_ns
    FROM tracepoint:syscalls:sys_enter_pread64 AS e
    JOIN tracepoint:syscalls:sys_exit_pread64 AS x ON e.tid = x.tid
    WHERE e.pid = 4242 AND x.ret >= 0
    GROUP BY e.fd WINDOW(time, 1000, 1000)";

/// Keyed by the thread alone, the start lives in the thread's task storage.
#[test]
fn enter_exit_join_compiles_to_two_programs_sharing_a_start_map() {
    let c = paired(&CodegenOptions::default());
    let text = explain(&c);
    assert_eq!(c.code.maps[MAP_PAIR].kind, MapKind::TaskStorage, "{text}");
    assert_eq!(c.code.maps[MAP_PAIR].value_size, 24, "valid, e.fd, e.time");
    assert_eq!(
        c.code.maps[MAP_PAIR_LIVE].kind,
        MapKind::PercpuArray,
        "{text}"
    );
    assert_eq!(c.code.counters, 5, "the event counters come last");
    assert_eq!(
        c.code.programs[0].maps,
        [0, 2, 3, 5],
        "the start program uses ctl, the start storage, the live count and the event counters"
    );
    assert_eq!(
        c.code.programs[1].maps,
        [0, 1, 2, 3, 4, 5],
        "the end program also uses the groups and the zero value new groups start from"
    );
    for listing in [
        c.code.programs[0].program.listing(),
        c.code.main().program.listing(),
    ] {
        for helper in ["bpf_get_current_task_btf", "bpf_task_storage_get"] {
            assert!(listing.contains(helper), "{listing}");
        }
        assert!(
            !listing.contains("bpf_map_delete_elem"),
            "task storage is cleared, not deleted: {listing}"
        );
    }
    assert!(text.contains("task-local storage of the thread"), "{text}");
}

/// Without task storage (the feature probe's answer on older kernels), or
/// with a key that is not the thread alone, the start map is the hash.
#[test]
fn the_hash_start_map_is_the_fallback() {
    let c = paired(&CodegenOptions {
        task_storage: false,
        ..Default::default()
    });
    let text = explain(&c);
    assert_eq!(c.code.maps[MAP_PAIR].kind, MapKind::Hash, "{text}");
    assert!(text.contains("the hash is the fallback"), "{text}");
    assert_eq!(
        c.code.programs[0].maps,
        [0, 2, 4],
        "the start program uses ctl, the start map and the event counters"
    );
    assert_eq!(c.code.programs[1].maps, [0, 1, 2, 3, 4], "the end program uses ctl, groups, the start map, the zero value new groups start from and the event counters");
    let start_listing = c.code.programs[0].program.listing();
    assert!(
        start_listing.contains("bpf_map_update_elem"),
        "{start_listing}"
    );
    let end_listing = c.code.main().program.listing();
    for helper in ["bpf_map_lookup_elem", "bpf_map_delete_elem"] {
        assert!(end_listing.contains(helper), "{end_listing}");
    }
    let two_keys = PAIRED.replace("ON e.tid = x.tid", "ON e.tid = x.tid AND e.fd = x.ret");
    let c = compile(&two_keys).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        c.code.maps[MAP_PAIR].kind,
        MapKind::Hash,
        "a key beyond the thread: {}",
        explain(&c)
    );
    assert_eq!(c.code.maps[MAP_PAIR].key_size, 16);
}

/// The paired query, checked for what both start stores share.
fn paired(opts: &CodegenOptions) -> CompiledQuery {
    let c = compile_query(PAIRED, &Fixed, opts).unwrap_or_else(|e| panic!("{e}"));
    let text = explain(&c);
    let pair = c
        .split
        .kernel
        .pair
        .as_ref()
        .unwrap_or_else(|| panic!("not paired:\n{text}"));
    assert_eq!(pair.start.event.name, "sys_enter_pread64");
    assert_eq!(c.split.kernel.event.event.name, "sys_exit_pread64");
    // The start stores exactly what the rest reads: fd (group key) and time.
    let mut stored: Vec<&str> = pair.stored.iter().map(|(_, n)| n.as_str()).collect();
    stored.sort();
    assert_eq!(stored, ["e.fd", "e.time"], "{text}");
    assert!(
        matches!(c.split.kernel.output, KernelOutput::Groups(_)),
        "{text}"
    );
    assert!(c.split.user_ops.is_empty(), "{:?}", c.split.user_ops);
    assert_eq!(c.code.programs.len(), 2);
    // e.pid runs in the start program, and (the key being the thread) before the end's lookup.
    assert_eq!(pair.start_filters.len(), 1, "{text}");
    assert_eq!(pair.end_pre.len(), 1, "{text}");
    for p in &c.code.programs {
        for pc in 0..p.program.insns.len() {
            assert!(
                p.program.origin_of(pc).is_some(),
                "instruction {pc} of {} has no plan node",
                p.name
            );
        }
    }
    c
}

#[test]
fn joins_the_kernel_cannot_pair_are_positioned_errors() {
    for (q, underlined) in [
        (
            "SELECT COUNT(*) FROM tracepoint:syscalls:sys_enter_pread64 AS e JOIN tracepoint:syscalls:sys_exit_pread64 AS x ON e.tid < x.tid",
            "ON e.tid < x.tid",
        ),
        (
            "SELECT COUNT(*) FROM tracepoint:syscalls:sys_enter_pread64 AS e RIGHT JOIN tracepoint:syscalls:sys_exit_pread64 AS x ON e.tid = x.tid WHERE x.pid = 1",
            "ON e.tid = x.tid",
        ),
    ] {
        let (message, at, hint) = diag(q);
        assert_eq!(at, underlined, "{message}");
        assert!(hint.unwrap_or_default().contains("JOIN end AS e ON"), "{message}");
    }
}

#[test]
fn count_distinct_over_hopping_windows_runs_in_user_space() {
    // Per-pane distinct counts cannot be added (a value seen in two panes
    // would count twice): the kernel keeps them only for tumbling windows.
    // (With COUNT(*) beside it: a lone COUNT(DISTINCT) is rewritten by
    // DataFusion into a GROUP BY of the value, which merges across panes.)
    let q = |w: &str| {
        compile(&format!("SELECT fd, COUNT(DISTINCT pos) AS d, COUNT(*) AS n FROM {PREAD} WHERE pid = 7 GROUP BY fd {w}")).unwrap()
    };
    assert!(matches!(
        q("WINDOW(time, 1000, 1000)").split.kernel.output,
        KernelOutput::Groups(_)
    ));
    let c = q("WINDOW(time, 1000, 500)");
    assert!(aggregated_in_user_space(&c), "{}", explain(&c));
    assert!(
        c.split
            .user_ops
            .iter()
            .any(|o| o.contains("panes of a hopping window")),
        "{:?}",
        c.split.user_ops
    );
}

/// Origins (`;; …` headers) of a program's listing, in order.
fn origins(listing: &str) -> Vec<&str> {
    listing
        .lines()
        .filter_map(|l| l.strip_prefix(";; "))
        .collect()
}

/// Every program counts its own events: *seen* right after its leading
/// pid/tid tests (other processes pay nothing for it; first thing when
/// there are none), *matched* right after the last filter and before the
/// group lookup or ring-buffer reservation; each program its own entry of
/// one per-CPU array.
#[test]
fn every_program_counts_its_own_events() {
    use ebql_compiler::codegen::counters;
    let seen = "event counters: seen (an event of the query's threads at the hook)";
    let matched = "event counters: matched (passed the filters)";
    let pid = "Filter: sys_enter_pread64.pid = UInt32(7)";
    let fd = "Filter: sys_enter_pread64.fd = UInt32(3)";
    for (q, want) in [
        (
            format!("SELECT COUNT(*) FROM {PREAD} WHERE pid = 7"),
            vec!["prologue", pid, seen, matched],
        ),
        (
            format!("SELECT fd, count FROM {PREAD} WHERE fd = 3 AND pid = 7"),
            vec!["prologue", pid, seen, fd, matched],
        ),
        (
            format!("SELECT fd, count FROM {PREAD} WHERE fd = 3"),
            vec!["prologue", seen, fd, matched],
        ),
        (
            format!("SELECT COUNT(*) FROM {PREAD}"),
            vec!["prologue", seen, matched],
        ),
    ] {
        let c = compile(&q).unwrap();
        let spec = &c.code.maps[c.code.counters];
        assert_eq!(
            (
                spec.name.as_str(),
                spec.kind,
                spec.key_size,
                spec.value_size,
                spec.max_entries
            ),
            (
                counters::MAP_NAME,
                MapKind::PercpuArray,
                4,
                counters::SIZE,
                1
            )
        );
        let listing = c.code.main().program.listing();
        let o = origins(&listing);
        assert_eq!(o[..want.len()], want[..], "{q}:\n{listing}");
        assert!(
            !o[want.len()..]
                .iter()
                .any(|x| x.starts_with("Filter: ") || x.starts_with("event counters")),
            "{q}: {o:?}"
        );
    }
    // A filter codegen folds to false (a literal longer than comm can be): the
    // probe still counts what reaches the hook, and nothing matches.
    let c = compile(&format!(
        "SELECT COUNT(*) FROM {PREAD} WHERE comm = 'longer than sixteen bytes'"
    ))
    .unwrap();
    let listing = c.code.main().program.listing();
    assert!(
        origins(&listing).contains(&seen) && !origins(&listing).contains(&matched),
        "{listing}"
    );
    // A pairing: the start program is entry 0, the end program entry 1; the
    // end counts *seen* after its thread filter and its time (a latency does
    // not include the count), before the lookup of the start.
    let c = paired(&CodegenOptions::default());
    assert_eq!(c.code.maps[c.code.counters].max_entries, 2);
    let start = c.code.programs[0].program.listing();
    assert_eq!(
        origins(&start)[..4],
        [
            "prologue",
            "Filter: sys_enter_pread64.pid = UInt32(4242)",
            seen,
            matched
        ],
        "{start}"
    );
    let end = c.code.main().program.listing();
    let o = origins(&end);
    assert_eq!(
        o[..4],
        [
            "prologue",
            "Pair end: thread filter sys_enter_pread64.pid = UInt32(4242)",
            "Pair end: the end's time, before the lookup",
            seen
        ],
        "{end}"
    );
    assert!(
        o.iter().position(|x| *x == matched)
            > o.iter().position(|x| x.starts_with("Pair end: copy")),
        "{end}"
    );
    for (i, listing) in [start, end].iter().enumerate() {
        assert!(
            listing.contains(&format!("*(u32 *)(r10 - 8) = {i}")),
            "program {i} counts in entry {i}: {listing}"
        );
    }
}

/// A start string is stored after the start's integer columns, with its
/// truncation byte (65 bytes for str(e.buf, 64), 72 with padding): in the
/// thread's slot after its `valid` word, or in the hash value.
#[test]
fn start_strings_are_stored_after_the_integer_columns() {
    let q = "SELECT str(e.buf, 64) AS b, e.count, x.ret FROM tracepoint:syscalls:sys_enter_pread64 AS e JOIN tracepoint:syscalls:sys_exit_pread64 AS x ON e.tid = x.tid WHERE e.pid = 7";
    let c = compile(q).unwrap_or_else(|e| panic!("{e}"));
    let pair = c.split.kernel.pair.as_ref().expect("paired");
    let ints = pair.stored.len() as u32;
    assert_eq!(pair.stored_strs.len(), 1, "{}", explain(&c));
    assert_eq!(
        (pair.str_offset(0), pair.value_size()),
        (8 * ints, 8 * ints + 72)
    );
    assert_eq!(
        (c.code.maps[MAP_PAIR].kind, c.code.maps[MAP_PAIR].value_size),
        (MapKind::TaskStorage, 8 + 8 * ints + 72)
    );
    let c = compile_query(
        q,
        &Fixed,
        &CodegenOptions {
            task_storage: false,
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(
        (c.code.maps[MAP_PAIR].kind, c.code.maps[MAP_PAIR].value_size),
        (MapKind::Hash, 8 * ints + 72)
    );
    // The hash value is built in (and the end copies the string to) a per-CPU scratch value.
    let scratch = c
        .code
        .maps
        .iter()
        .position(|m| m.name == "ebql_scratch")
        .expect("scratch map");
    assert_eq!(
        (c.code.maps[scratch].kind, c.code.maps[scratch].value_size),
        (MapKind::PercpuArray, 8 * ints + 72)
    );
    assert!(c.code.programs.iter().all(|p| p.maps.contains(&scratch)));
}

/// LEFT JOIN: the hash start map even when the key is the thread, the
/// rows' layout says which columns are the end's and how a start's value
/// becomes a row, and the start program writes rows (the ring buffer).
#[test]
fn left_join_pairing_writes_unmatched_starts_as_rows() {
    let q = "SELECT str(e.buf, 64) AS b, e.count, x.ret FROM tracepoint:syscalls:sys_enter_pread64 AS e LEFT JOIN tracepoint:syscalls:sys_exit_pread64 AS x ON e.tid = x.tid WHERE e.pid = 7";
    let c = compile(q).unwrap_or_else(|e| panic!("{e}"));
    let text = explain(&c);
    let pair = c.split.kernel.pair.as_ref().expect("paired");
    assert!(pair.outer && !pair.keyed_by_thread_only(), "{text}");
    assert_eq!(c.code.maps[MAP_PAIR].kind, MapKind::Hash, "{text}");
    let ebql_compiler::contract::OutputLayout::Stream {
        columns,
        outer: Some(o),
        record_size,
        ..
    } = &c.code.layout
    else {
        panic!("{text}")
    };
    let KernelOutput::Stream { columns: values } = &c.split.kernel.output else {
        panic!("{text}")
    };
    let end: Vec<&str> = o
        .end_columns
        .iter()
        .map(|&i| values[i].0.as_str())
        .collect();
    assert_eq!(end, ["x.ret", "x.tid"], "{text}");
    // Each start column or string of the row is copied from the value; the matched word is last.
    assert_eq!(o.from_start.len(), columns.len() - end.len(), "{text}");
    assert_eq!(
        (o.matched_at + 8, o.value_size),
        (*record_size, pair.value_size())
    );
    assert!(
        c.code.programs[0]
            .maps
            .contains(&ebql_compiler::codegen::MAP_OUT),
        "the start program writes rows"
    );
    let start = c.code.programs[0].program.listing();
    for helper in [
        "bpf_ringbuf_reserve",
        "bpf_map_delete_elem",
        "bpf_probe_read_kernel",
    ] {
        assert!(start.contains(helper), "{helper}: {start}");
    }
    assert!(text.contains("pairing (LEFT JOIN)"), "{text}");
    // An aggregate over it runs in user space.
    let c = compile(&q.replace(
        "SELECT str(e.buf, 64) AS b, e.count, x.ret",
        "SELECT COUNT(*) AS n, COUNT(x.ret) AS ended",
    ))
    .unwrap();
    assert!(matches!(c.split.kernel.output, KernelOutput::Stream { .. }));
    assert!(
        c.split.user_ops.iter().any(|o| o.contains("LEFT JOIN")),
        "{:?}",
        c.split.user_ops
    );
}
