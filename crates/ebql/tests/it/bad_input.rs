//! The bad-query corpus (crates/ebql-compiler/tests/bad_queries) through the
//! `ebql` binary against this kernel's tracefs: every entry exits 2 from
//! `ebql query` with `query:LINE:COL…`, the query line, a `~~~` underline and
//! a hint on stderr, and nothing on stdout; a sample also through `ebql
//! explain`; and, traced with strace, a sample makes no bpf() or
//! perf_event_open() call at all, so nothing was loaded or attached by that
//! process (other tests load BPF at the same time, so global counts prove nothing).


use std::process::Command;

const EBQL: &str = env!("CARGO_BIN_EXE_ebql");

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// Runs `ebql ARGS… QUERY`; returns (exit code, stdout, stderr).
fn run(args: &[&str], query: &str) -> (Option<i32>, String, String) {
    let out = Command::new(EBQL)
        .args(args)
        .arg(query)
        .output()
        .expect("run ebql");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

/// The CLI's rendering of a rejected query: exit code 2, nothing on stdout,
/// `query:L:C-C: error: …`, the query line, an underline, a hint.
fn check_rejected(
    query: &str,
    (code, stdout, stderr): &(Option<i32>, String, String),
) -> Result<(), String> {
    if *code != Some(2) {
        return Err(format!("exit code {code:?}, not 2:\n{stderr}"));
    }
    if !stdout.is_empty() {
        return Err(format!("printed to stdout: {stdout}"));
    }
    let lines: Vec<&str> = stderr.lines().collect();
    let head_ok = lines.first().is_some_and(|l| {
        let mut parts = l.strip_prefix("query:").unwrap_or("").splitn(3, ':');
        let line = parts.next().unwrap_or("");
        let cols = parts.next().unwrap_or("");
        line.parse::<usize>().is_ok()
            && cols.split('-').all(|c| c.parse::<usize>().is_ok())
            && parts.next().is_some_and(|r| r.starts_with(" error: "))
    });
    if !head_ok {
        return Err(format!(
            "no 'query:LINE:COL-COL: error:' first line:\n{stderr}"
        ));
    }
    let shown = |l: &str| ebql_compiler::diag::shown_line(l);
    if !query
        .split('\n')
        .any(|l| stderr.split('\n').nth(1) == Some(shown(l).as_str()))
    {
        return Err(format!("second line is not a line of the query:\n{stderr}"));
    }
    if !lines
        .get(2)
        .is_some_and(|l| l.trim_start().starts_with('~') && l.trim().chars().all(|c| c == '~'))
    {
        return Err(format!("no ~~~ underline:\n{stderr}"));
    }
    if !lines.iter().any(|l| l.starts_with("hint: ")) {
        return Err(format!("no hint:\n{stderr}"));
    }
    if stderr.contains("attached") {
        return Err(format!("attached something:\n{stderr}"));
    }
    Ok(())
}

#[test]
fn every_corpus_query_exits_2_from_ebql_query_with_a_positioned_message() {
    if !is_root() {
        eprintln!("skipped: needs root (tracefs)");
        return;
    }
    let entries = crate::corpus::load();
    let mut failures = Vec::new();
    for e in &entries {
        let out = run(&["query", "--duration", "1"], &e.query);
        let mut result = check_rejected(&e.query, &out);
        if let (Ok(()), Some(want)) = (&result, &e.expect) {
            if !out.2.to_lowercase().contains(&want.to_lowercase()) {
                result = Err(format!("expected '{want}' in:\n{}", out.2));
            }
        }
        if let Err(why) = result {
            failures.push(format!("{}:{}: {why}", e.file, e.line));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} entries:\n{}",
        failures.len(),
        entries.len(),
        failures.join("\n")
    );
}

#[test]
fn a_sample_exits_2_from_ebql_explain() {
    if !is_root() {
        eprintln!("skipped: needs root (tracefs)");
        return;
    }
    let entries = crate::corpus::load();
    let mut failures = Vec::new();
    for e in entries.iter().step_by(5) {
        if let Err(why) = check_rejected(&e.query, &run(&["explain"], &e.query)) {
            failures.push(format!("{}:{}: {why}", e.file, e.line));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// strace shows the process never called bpf() or perf_event_open(): the
/// query was rejected before any kernel object could be created.
#[test]
fn a_rejected_query_makes_no_bpf_syscall() {
    if !is_root() {
        eprintln!("SKIPPED: tracing bpf() calls needs root (CI runs as root)");
        return;
    }
    // As root nothing skips: scripts/setup.sh installs strace.
    assert!(
        Command::new("strace").arg("-V").output().is_ok(),
        "strace is missing: run scripts/setup.sh"
    );
    let entries = crate::corpus::load();
    let dir = std::env::temp_dir().join(format!("ebql-bad-input-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for (i, e) in entries.iter().step_by(23).enumerate() {
        let trace = dir.join(format!("{i}.trace"));
        let out = Command::new("strace")
            .args(["-f", "-qq", "-e", "trace=bpf,perf_event_open", "-o"])
            .arg(&trace)
            .args([EBQL, "query", "--duration", "1"])
            .arg(&e.query)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            out.status.code(),
            Some(2),
            "{}:{}\n{stderr}",
            e.file,
            e.line
        );
        let calls = std::fs::read_to_string(&trace).unwrap();
        assert!(
            !calls.contains("bpf(") && !calls.contains("perf_event_open("),
            "{}:{} made kernel calls:\n{calls}",
            e.file,
            e.line
        );
    }
    // The check can fail: a valid query does call bpf().
    let trace = dir.join("valid.trace");
    let ok = Command::new("strace")
        .args(["-f", "-qq", "-e", "trace=bpf", "-o"])
        .arg(&trace)
        .args([
            EBQL,
            "query",
            "--duration",
            "0.1",
            "SELECT COUNT(*) FROM tracepoint/syscalls/sys_enter_pread64 WHERE pid == 1",
        ])
        .output()
        .unwrap();
    assert_eq!(
        ok.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    assert!(std::fs::read_to_string(&trace).unwrap().contains("bpf("));
    std::fs::remove_dir_all(&dir).ok();
}
