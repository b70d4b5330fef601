//! Semantics: the kernel computes exactly what DataFusion would, or leaves
//! the expression to DataFusion.

use super::*;

use ebql_compiler::kexpr::{CmpOp, KExpr, KPred};

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

/// A string literal is the text of a byte string (`bytetext`): the kernel
/// compares the bytes it spells. U+FFFD is its own three bytes (no longer
/// what any invalid byte decodes to), `\x80` the byte 0x80, `\\x80` four
/// characters; a literal that is no value's text (`\xc3\xa9` spells `é`)
/// and a prefix with a backslash stay in user space.
#[test]
fn string_literals_compile_to_the_bytes_they_spell() {
    let kernel_literal = |lit: &str| {
        let c = compile(&format!(
            "SELECT COUNT(*) FROM {PREAD} WHERE pid = 7 AND comm = '{lit}'"
        ))
        .unwrap();
        c.split.kernel.filters.iter().find_map(|(p, _)| match p {
            KPred::StrEq { lit, .. } => Some(lit.clone()),
            _ => None,
        })
    };
    assert_eq!(
        kernel_literal("a\u{FFFD}"),
        Some("a\u{FFFD}".as_bytes().to_vec())
    );
    assert_eq!(kernel_literal("a\\x80"), Some(b"a\x80".to_vec()));
    assert_eq!(kernel_literal("a\\\\x80"), Some(b"a\\x80".to_vec()));
    assert_eq!(kernel_literal("C:\\new"), Some(b"C:\\new".to_vec()));
    assert_eq!(kernel_literal("\\xc3\\xa9"), None);
    let c = compile(&format!(
        "SELECT COUNT(*) FROM {PREAD} WHERE pid = 7 AND starts_with(comm, 'a\\x8')"
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
