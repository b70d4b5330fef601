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

const PREAD: &str = "tracepoint/syscalls/sys_enter_pread64";

/// The kernel's group table of `c`; panics (with the plan) when the
/// aggregate stayed in user space.
fn kernel_groups(c: &CompiledQuery) -> &ebql_compiler::split::GroupSpec {
    match &c.split.kernel.output {
        KernelOutput::Groups(g) => g,
        _ => panic!("aggregate not in the kernel:\n{}", explain(c)),
    }
}

/// The kernel streams rows and DataFusion aggregates them.
fn aggregated_in_user_space(c: &CompiledQuery) -> bool {
    matches!(c.split.kernel.output, KernelOutput::Stream { .. })
        && c.split.user_ops.iter().any(|o| o.contains("Aggregate"))
}

mod pairing;
mod semantics;
