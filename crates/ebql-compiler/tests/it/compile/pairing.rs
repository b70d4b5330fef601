//! Pairing two events: start maps, task storage, LEFT JOIN rows.

use super::*;

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
    let KernelOutput::Stream {
        columns: values, ..
    } = &c.split.kernel.output
    else {
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

/// A wire relation's capture pairs every system call's entry and exit:
/// on each hook it can take, an exit that is not a captured call's is
/// turned away by its number before the lookup of the start.
#[test]
fn the_wire_capture_tests_the_exit_number_before_the_lookup() {
    use ebql_compiler::wire::{capture_sql, CaptureHook, PeerColumns, RELATIONS};
    // This kernel's own events: the raw syscall hooks' BTF.
    let catalog = ebql_catalog::Catalog::open().unwrap();
    for hook in [CaptureHook::TpBtf, CaptureHook::Tracefs] {
        let text = capture_sql(&RELATIONS[0], None, hook, PeerColumns::Read);
        let c = compile_query(&text, &catalog, &CodegenOptions::default()).unwrap();
        let text = explain(&c);
        let number = match hook {
            CaptureHook::Tracefs => "sys_exit.id = Int64(45)",
            _ => "sys_exit.regs.orig_ax = UInt64(45)",
        };
        let pre = text
            .lines()
            .find(|l| l.starts_with("end program, before the lookup"))
            .unwrap_or_else(|| panic!("{hook:?}: no test before the lookup: {text}"));
        assert!(pre.contains(number), "{hook:?}: {pre}");
    }
}
