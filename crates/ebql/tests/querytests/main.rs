//! Declarative query tests: every `*.ebqt` file under `tests/queries/` (the
//! format is described in `tests/queries/README.md`).
//!
//! ```text
//! cargo test -p ebql --test querytests                 # all cases
//! cargo test -p ebql --test querytests -- filters      # cases whose `file:name` contains "filters"
//! EBQL_QT_COMPLETE=1 cargo test -p ebql --test querytests   # (re)write expected blocks from actual results
//! ```
//!
//! Pure-tier cases (`error`, `explain`) run for any user. Kernel-tier cases
//! (`query`, `check`) load BPF programs: as root they all run; otherwise they
//! are reported as skipped, with the reason, and do not fail the run.

mod format;
mod kernel_tier;
mod pure;
mod render;

use format::{Kind, Record, RowOrder};
use render::Vars;
use std::path::PathBuf;
use std::time::Instant;

/// Environment variable that turns on fill mode.
const COMPLETE_ENV: &str = "EBQL_QT_COMPLETE";

/// Values of `$pid` and `$fd<n>` in the pure tier (nothing runs there).
fn pure_vars() -> Vars {
    let mut v = vec![("pid".to_string(), "1041370".to_string())];
    v.extend((1..=20).map(|n| (format!("fd{n}"), (1000 + n).to_string())));
    Vars(v)
}

#[derive(Default)]
struct Tally {
    passed: usize,
    failed: Vec<String>,
    xfail: usize,
    skipped: usize,
    filled: usize,
}

/// Outcome of one case, before expected-vs-actual comparison.
struct Actual {
    lines: Vec<String>,
    problems: Vec<String>,
    sql: String,
    vars: Vars,
    /// `lines` is an error message: compared in order.
    is_error: bool,
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    // cargo/libtest flags (`--nocapture`, `--test-threads=1`, `-q`, …) have no meaning here.
    let filters: Vec<&String> = args.iter().filter(|a| !a.starts_with('-')).collect();
    let list_only = args.iter().any(|a| a == "--list");
    let complete = std::env::var_os(COMPLETE_ENV).is_some_and(|v| !v.is_empty() && v != "0");
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;

    // The run-time variable first: cargo reuses test binaries across
    // checkouts that share a target directory.
    let manifest = std::env::var_os("CARGO_MANIFEST_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| env!("CARGO_MANIFEST_DIR").into());
    let dir = manifest.join("tests/queries");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "ebqt"))
        .collect();
    files.sort();

    let started = Instant::now();
    let mut t = Tally::default();
    let mut skipped_names = Vec::new();
    for path in &files {
        let file = path.file_name().unwrap().to_string_lossy().to_string();
        let text =
            std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let records = match format::parse(&text) {
            Ok(r) => r,
            Err(e) => {
                println!("FAIL  {file}:{}: malformed file: {}", e.line, e.message);
                t.failed.push(format!("{file}:{}", e.line));
                continue;
            }
        };
        let selected: Vec<&Record> = records
            .iter()
            .filter(|r| {
                filters.is_empty()
                    || filters
                        .iter()
                        .any(|f| format!("{file}:{}", r.name).contains(f.as_str()))
            })
            .collect();
        // The fill writer must reproduce a file from its own expected blocks byte for byte.
        let same: Vec<(&Record, Vec<String>)> = records
            .iter()
            .filter_map(|r| Some((r, r.expected.clone()?)))
            .collect();
        if format::fill(&text, &same) != text {
            println!("FAIL  {file}: fill mode would not reproduce this file from its own expected blocks (trailing blank lines or whitespace?)");
            t.failed.push(file.clone());
        }
        if list_only {
            for r in &selected {
                println!("{file}:{}: test", r.name);
            }
            continue;
        }
        let mut workload: Option<kernel_tier::Workload> = None;
        let mut updates: Vec<(&Record, Vec<String>)> = Vec::new();
        for rec in selected {
            let at = format!("{file}:{} {}", rec.line, rec.name);
            let kernel = matches!(rec.kind, Kind::Query { .. } | Kind::Check);
            if kernel && !root {
                t.skipped += 1;
                skipped_names.push(at);
                continue;
            }
            let case_started = Instant::now();
            let actual = if kernel {
                if workload.is_none() {
                    workload =
                        Some(kernel_tier::Workload::start().unwrap_or_else(|e| panic!("{e}")));
                }
                let w = workload.as_mut().unwrap();
                kernel_tier::run(w, rec).map(|r| Actual {
                    lines: r.lines,
                    problems: r.problems,
                    sql: r.sql,
                    vars: w.vars(),
                    is_error: r.is_error,
                })
            } else {
                let vars = pure_vars();
                let sql = vars.substitute(&rec.sql);
                let lines = match rec.kind {
                    Kind::Error => pure::error_lines(&sql),
                    Kind::Explain { split_only } => pure::explain_lines(&sql, split_only),
                    _ => unreachable!("kernel kinds handled above"),
                };
                lines.map(|lines| Actual {
                    lines,
                    problems: Vec::new(),
                    sql,
                    vars,
                    is_error: false,
                })
            };
            let ms = case_started.elapsed().as_millis();
            let actual = match actual {
                Ok(a) => a,
                Err(e) if rec.bug.is_some() && !kernel => {
                    t.xfail += 1;
                    println!(
                        "XFAIL {at} ({ms} ms): known bug: {}\n      actual: {e}",
                        rec.bug.as_deref().unwrap_or_default()
                    );
                    continue;
                }
                Err(e) => {
                    println!(
                        "FAIL  {at} ({ms} ms)\n{}\n",
                        indent(&format!("query:\n{}\nerror:\n{e}", rec.sql))
                    );
                    t.failed.push(at);
                    continue;
                }
            };
            if rec.kind == Kind::Check {
                match (&rec.bug, actual.problems.is_empty()) {
                    (None, true) => {
                        t.passed += 1;
                        println!("ok    {at} ({ms} ms)");
                    }
                    (Some(bug), false) => {
                        t.xfail += 1;
                        println!("XFAIL {at} ({ms} ms): known bug: {bug}");
                    }
                    (Some(bug), true) => {
                        println!("XPASS {at}: the kernel agrees with the reference now; remove its `bug: {bug}` line\n");
                        t.failed.push(at);
                    }
                    (None, false) => {
                        println!(
                            "FAIL  {at} ({ms} ms)\n{}\n",
                            indent(&format!(
                                "query:\n{}\noracle:\n{}",
                                actual.sql,
                                actual.problems.join("\n")
                            ))
                        );
                        t.failed.push(at);
                    }
                }
                continue;
            }
            let order = match rec.kind {
                Kind::Query { order } if !actual.is_error => order,
                _ => RowOrder::AsProduced,
            };
            let got = normalize(actual.lines.clone(), order);
            let want = rec.expected.as_ref().map(|e| {
                normalize(
                    render::expand(
                        &e.iter()
                            .map(|l| actual.vars.substitute(l))
                            .collect::<Vec<_>>(),
                    ),
                    order,
                )
            });
            let same = want.as_ref() == Some(&got) && actual.problems.is_empty();
            match (&rec.bug, same) {
                (Some(bug), false) => {
                    t.xfail += 1;
                    let shown: Vec<String> = render::compact(&got).into_iter().take(4).collect();
                    println!(
                        "XFAIL {at} ({ms} ms): known bug: {bug}\n      actual: {}",
                        if shown.is_empty() {
                            "(no rows)".into()
                        } else {
                            shown.join("; ")
                        }
                    );
                }
                (Some(bug), true) => {
                    println!("XPASS {at}: the answer is right now; remove its `bug: {bug}` line\n");
                    t.failed.push(at);
                }
                (None, true) => {
                    t.passed += 1;
                    println!("ok    {at} ({ms} ms)");
                }
                (None, false) if complete && actual.problems.is_empty() => {
                    let filled: Vec<String> = render::compact(&actual.lines)
                        .iter()
                        .map(|l| actual.vars.abstract_cells(l))
                        .collect();
                    updates.push((rec, filled));
                    t.filled += 1;
                    println!("fill  {at}");
                }
                (None, false) => {
                    let want_text = want.map(|w| text_block(&w)).unwrap_or_default();
                    let got_text = text_block(&got);
                    let diff = similar::TextDiff::from_lines(&want_text, &got_text);
                    let mut msg = format!("query:\n{}\n", actual.sql);
                    if rec.expected.is_none() {
                        msg.push_str(&format!(
                            "no expected block (fill it with {COMPLETE_ENV}=1)\n"
                        ));
                    }
                    if want_text != got_text {
                        msg.push_str(&format!(
                            "{}",
                            diff.unified_diff()
                                .context_radius(3)
                                .header("expected", "actual")
                        ));
                    }
                    for p in &actual.problems {
                        msg.push_str(&format!("{p}\n"));
                    }
                    println!("FAIL  {at} ({ms} ms)\n{}", indent(&msg));
                    t.failed.push(at);
                }
            }
        }
        if !updates.is_empty() {
            std::fs::write(path, format::fill(&text, &updates))
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        }
    }
    if list_only {
        return;
    }
    if t.skipped > 0 {
        println!(
            "\nSKIPPED kernel tier: {} cases not run because this process is not root (euid {}); they load BPF programs and attach tracepoints.\n        Run as root to include them (CI runs as root): sudo -E cargo test -p ebql --test querytests",
            t.skipped,
            // SAFETY: geteuid has no preconditions.
            unsafe { libc::geteuid() }
        );
        if !filters.is_empty() {
            for s in &skipped_names {
                println!("        skipped {s}");
            }
        }
    }
    println!(
        "\nquerytests: {} passed, {} failed, {} xfail (known bugs), {} skipped, {} filled; {} files in {:.1} s",
        t.passed,
        t.failed.len(),
        t.xfail,
        t.skipped,
        t.filled,
        files.len(),
        started.elapsed().as_secs_f64()
    );
    if !t.failed.is_empty() {
        println!("failed:");
        for f in &t.failed {
            println!("  {f}");
        }
        std::process::exit(1);
    }
}

/// Comparison form: one line per row (runs expanded), sorted when row order does not matter.
fn normalize(mut lines: Vec<String>, order: RowOrder) -> Vec<String> {
    if order == RowOrder::Sorted {
        lines.sort();
    }
    lines
}

/// Lines as diffable text, runs compacted; `(no rows)` for none.
fn text_block(lines: &[String]) -> String {
    if lines.is_empty() {
        return "(no rows)\n".into();
    }
    render::compact(lines).join("\n") + "\n"
}

fn indent(s: &str) -> String {
    s.lines()
        .map(|l| format!("    {l}"))
        .collect::<Vec<_>>()
        .join("\n")
}
