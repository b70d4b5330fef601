//! `profile:hz:<N>`: CPU-clock sampling with stack columns, on a workload
//! thread of ours that spins in a known function (`ebql_workload_spin`, a
//! loop with no calls) and is filtered by its pid.

use crate::common::*;

/// The leaf (innermost) frame of a symbolized stack (frames are root first).
fn leaf(stack: &str) -> &str {
    stack.rsplit(';').next().unwrap_or("")
}

#[test]
fn user_stacks_of_a_spinning_thread_end_in_its_function() {
    let _k = kernel_lock();
    require_root();
    let mut w = Workload::start();
    let sql = format!("SELECT tid, ustack, kstack, COUNT(*) AS n FROM profile:hz:199 WHERE pid = {} GROUP BY tid, ustack, kstack", w.pid);
    let mut spin_tid = 0;
    let b = run_once(&sql, || spin_tid = w.spin(600_000_000));
    let (tids, ustacks, kstacks, ns) = (
        u64s(&b, "tid"),
        strings(&b, "ustack"),
        strings(&b, "kstack"),
        u64s(&b, "n"),
    );
    let rows: Vec<_> = (0..b.num_rows())
        .map(|i| (tids[i], ustacks[i].as_str(), kstacks[i].as_str(), ns[i]))
        .collect();
    let show = || {
        rows.iter()
            .map(|r| format!("{r:?}"))
            .collect::<Vec<_>>()
            .join("\n")
    };
    // Every sample of the spinning thread whose user stack was recorded and
    // whose innermost frame resolved to a symbol is in the function: the loop
    // calls nothing, so nothing else of that thread runs for long enough to
    // be sampled except its start and exit (microseconds).
    let spin: Vec<_> = rows.iter().filter(|r| r.0 == spin_tid as u64).collect();
    let resolved: Vec<_> = spin
        .iter()
        .filter(|r| !r.1.starts_with("[no stack") && !leaf(r.1).starts_with("0x"))
        .collect();
    let in_spin: u64 = resolved
        .iter()
        .filter(|r| leaf(r.1).starts_with("ebql_workload_spin+0x"))
        .map(|r| r.3)
        .sum();
    let resolved_n: u64 = resolved.iter().map(|r| r.3).sum();
    assert!(in_spin > 0, "no sample in ebql_workload_spin:\n{}", show());
    assert!(
        in_spin * 100 >= resolved_n * 99,
        "{in_spin} of {resolved_n} resolved samples of the spin thread are in the function:\n{}",
        show()
    );
    // The function dominates the process' profile.
    let all: u64 = rows.iter().map(|r| r.3).sum();
    assert!(
        in_spin * 2 > all,
        "{in_spin} of {all} samples of the process are in the function:\n{}",
        show()
    );
    // Kernel stacks: a sample that interrupted user mode has none, shown as
    // such in its own group; one taken in the kernel (e.g. work done on the
    // way back to user mode) is symbolized from kallsyms.
    assert!(
        spin.iter()
            .any(|r| r.2.starts_with("[no stack:") && r.2.contains("EFAULT")),
        "no user-mode sample:\n{}",
        show()
    );
    for r in &spin {
        assert!(
            r.2.starts_with("[no stack:") || r.2.split(';').all(|f| !f.starts_with("0x")),
            "unsymbolized kernel frame: {r:?}"
        );
    }
}

#[test]
fn kernel_groups_by_stack_id_and_folded_lines_merge_offsets() {
    let _k = kernel_lock();
    require_root();
    let mut w = Workload::start();
    let sql = format!(
        "SELECT ustack, COUNT(*) AS n FROM profile:hz:99 WHERE pid = {} GROUP BY ustack",
        w.pid
    );
    let c = ebql::Executor::new()
        .compile(&sql)
        .unwrap_or_else(|e| panic!("{}", e.render()));
    assert!(
        matches!(
            c.split.kernel.output,
            ebql_compiler::split::KernelOutput::Groups(_)
        ),
        "GROUP BY ustack runs in the kernel"
    );
    assert!(
        c.code
            .maps
            .iter()
            .any(|m| m.kind == ebql_compiler::contract::MapKind::StackTrace),
        "a stack-trace map is declared"
    );
    let b = run_once(&sql, || {
        w.spin(300_000_000);
    });
    let total: u64 = u64s(&b, "n").iter().sum();
    let lines = ebql::sink::folded::folded(&b).unwrap();
    assert_eq!(
        lines.iter().map(|l| l.1).sum::<u64>(),
        total,
        "folded lines keep every sample"
    );
    let distinct: std::collections::HashSet<_> = lines.iter().map(|l| &l.0).collect();
    assert_eq!(distinct.len(), lines.len(), "equal stacks are merged");
    assert!(
        lines
            .iter()
            .any(|(s, n)| s.ends_with(";ebql_workload_spin") && *n > 0),
        "{lines:?}"
    );
    // A frame without a symbol keeps its address and why (`0x… [libc.so.6 +0x…: …]`).
    assert!(
        lines.iter().all(|(s, _)| s
            .split(';')
            .all(|f| f.starts_with("0x") || !f.contains("+0x"))),
        "offsets dropped: {lines:?}"
    );
}

/// A sample without a user stack (the idle task, kernel threads) prints the
/// same whatever its process, so it is one group per reason, not one per
/// process with the count split among them (issue 19, bug 4). Every CPU is
/// sampled: the idle task and kernel threads are the processes without one.
#[test]
fn samples_without_a_user_stack_are_one_group_across_processes() {
    let _k = kernel_lock();
    require_root();
    let sql = "SELECT ustack, COUNT(*) AS n FROM profile:hz:199 GROUP BY ustack";
    let b = run_once(sql, || {
        std::thread::sleep(std::time::Duration::from_millis(700))
    });
    let ustacks = strings(&b, "ustack");
    let no_stack: Vec<&String> = ustacks
        .iter()
        .filter(|s| s.starts_with("[no stack"))
        .collect();
    assert!(
        no_stack.iter().any(|s| s.contains("EFAULT")),
        "an idle CPU has no user stack: {ustacks:?}"
    );
    let distinct: std::collections::BTreeSet<&&String> = no_stack.iter().collect();
    assert_eq!(
        distinct.len(),
        no_stack.len(),
        "each reason once: {no_stack:?}"
    );
}

/// `targets/shortlived.c`, built once per test run with cc at -O0.
fn shortlived_binary() -> &'static std::path::Path {
    use std::path::{Path, PathBuf};
    static BIN: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BIN.get_or_init(|| {
        let manifest = std::env::var_os("CARGO_MANIFEST_DIR")
            .map_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")), PathBuf::from);
        let src = manifest.join("tests/targets/shortlived.c");
        let out = Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("shortlived-{}", std::process::id()));
        let st = std::process::Command::new("cc")
            .args(["-O0", "-Wall", "-o"])
            .arg(&out)
            .arg(&src)
            .status()
            .expect("run cc");
        assert!(st.success(), "cc {} failed", src.display());
        out
    })
}

/// A frame is `function+0xoffset`, or an address followed by why it has no symbol.
fn frame_is_explained(f: &str) -> bool {
    let symbolized = f.rsplit_once("+0x").is_some_and(|(name, off)| {
        !name.is_empty() && !off.is_empty() && off.bytes().all(|b| b.is_ascii_hexdigit())
    });
    let explained = f.starts_with("0x")
        && f.split_once(" [")
            .is_some_and(|(_, why)| why.len() > 1 && why.ends_with(']'));
    symbolized || explained
}

/// Issue 19, item 6: a process that exits (and whose binary is deleted)
/// long before its window closes has its stacks symbolized all the same,
/// from the mappings kept when its first stack was seen. For a group table
/// (keys scanned while the query runs) and for a stream aggregated in user
/// space (records seen at every drain), in a time window that closes ~2 s
/// after the process exited, and unwindowed.
#[test]
fn stacks_of_a_process_that_exited_before_its_window_closed_are_symbolized() {
    use std::io::{BufRead, BufReader, Write};
    let _k = kernel_lock();
    require_root();
    let built = shortlived_binary();
    // Where ebql_short_spin is and where the next function starts: its offsets are below that.
    let elf = ebql_catalog::elf::Elf::open(built).unwrap();
    let fns = elf.functions().unwrap();
    let spin = fns
        .iter()
        .find(|s| s.name == "ebql_short_spin")
        .expect("ebql_short_spin in the target")
        .address;
    let spin_size = fns
        .iter()
        .map(|s| s.address)
        .filter(|&a| a > spin)
        .min()
        .expect("a function after ebql_short_spin")
        - spin;
    use ebql_compiler::choose::AggregateChoice::{Kernel, User};
    let queries = [
        ("GROUP BY ustack WINDOW(time, 2500, 2500)", Kernel),
        ("GROUP BY ustack WINDOW(time, 2500, 2500)", User),
        ("GROUP BY ustack", Kernel),
    ];
    for (i, (tail, placed)) in queries.into_iter().enumerate() {
        // A copy of its own, deleted once the process is gone.
        let bin = built.with_file_name(format!("shortlived-{}-{i}", std::process::id()));
        std::fs::copy(built, &bin).unwrap();
        let mut child = std::process::Command::new(&bin)
            .arg("300")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let pid = child.id();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert_eq!(line, "ready\n");
        let sql =
            format!("SELECT ustack, COUNT(*) AS n FROM profile:hz:99 WHERE pid = {pid} {tail}");
        let mut opts = ebql::ExecutorOptions::default();
        opts.codegen.choices.aggregate = placed;
        let mut q = ebql::Executor::with_options(opts)
            .execute(&sql)
            .unwrap_or_else(|e| panic!("{}", e.render()));
        let rx = q.take_receiver().unwrap();
        writeln!(child.stdin.take().unwrap(), "go").unwrap();
        assert!(child.wait().unwrap().success());
        std::fs::remove_file(&bin).unwrap();
        assert!(!std::path::Path::new(&format!("/proc/{pid}")).exists());
        std::thread::sleep(std::time::Duration::from_millis(2000));
        q.stop().unwrap_or_else(|e| panic!("{}", e.render()));
        let batches: Vec<_> = rx.try_iter().collect();
        let schema = batches.first().expect("a result").schema();
        let b = ebql::arrow::compute::concat_batches(&schema, &batches).unwrap();
        let rows: Vec<(String, u64)> = strings(&b, "ustack")
            .into_iter()
            .zip(u64s(&b, "n"))
            .collect();
        let show = format!("{sql} (aggregate {placed:?})\n{rows:#?}");
        assert!(!rows.is_empty(), "no sample: {show}");
        for (stack, _) in &rows {
            assert!(
                stack.starts_with("[no stack") || stack.split(';').all(frame_is_explained),
                "a frame neither symbolized nor explained: {show}"
            );
        }
        // The spin's samples end in it, with main its caller, at an offset inside it.
        let in_spin: u64 = rows
            .iter()
            .filter(|(s, _)| {
                let mut frames = s.rsplit(';');
                let (leaf, caller) = (frames.next().unwrap(), frames.next().unwrap_or(""));
                leaf.strip_prefix("ebql_short_spin+0x")
                    .and_then(|off| u64::from_str_radix(off, 16).ok())
                    .is_some_and(|off| off < spin_size)
                    && caller.starts_with("main+0x")
            })
            .map(|r| r.1)
            .sum();
        // Of the samples with a stack: one whose stack map bucket holds
        // another stack (EEXIST, 7 stacks in 8,192 buckets: rare) has none.
        let all: u64 = rows
            .iter()
            .filter(|r| !r.0.starts_with("[no stack"))
            .map(|r| r.1)
            .sum();
        assert!(
            in_spin * 10 >= all * 9,
            "{in_spin} of {all} samples with a stack in the spin: {show}"
        );
        assert!(
            in_spin >= 10,
            "{in_spin} samples of 300 ms at 99 Hz: {show}"
        );
    }
}
