//! Bad input never hurts: every malformed, ill-typed or unsupported query of
//! the corpus (`tests/bad_queries/*.txt`) and every mutation of the valid seed
//! queries fails with a positioned `CompileError::Query` (never `Internal`,
//! never a panic), rendered as `query:LINE:COL…` with a `~~~` underline.
//! Compiling is pure (no syscalls), so a query rejected here loads nothing.
//!
//! Corpus format, one entry per line (see `tests/bad_queries/README`):
//! `QUERY [#=> fragment of message or hint] [#@ underlined text | <end>]`.

use crate::corpus::{check_diagnostic, compile, seeds, Entry, Outcome};
use ebql_compiler::CompileError;

/// Regression: a trailing `-- comment` after a thesis-order query (GROUP BY
/// before WHERE) commented out the GROUP BY the pre-pass had moved behind it.
#[test]
fn regression_comments_after_thesis_order_clauses() {
    let ev = "tracepoint/syscalls/sys_enter_pread64";
    let plain =
        format!("SELECT fd, COUNT(*) FROM {ev} WHERE pid = 1 GROUP BY fd WINDOW(time, 1000, 1000)");
    let want = compile(&plain)
        .unwrap_or_else(|e| panic!("{e}"))
        .code
        .main()
        .program
        .insns
        .clone();
    for q in [
        format!("SELECT fd, COUNT(*) FROM {ev} GROUP BY fd WHERE pid == 1 -- note\n"),
        format!("SELECT fd, COUNT(*) FROM {ev} GROUP BY fd WHERE pid == 1 -- note"),
        format!("SELECT fd, COUNT(*) FROM {ev} GROUP BY fd /* a */ WHERE pid == 1 /* b */"),
        format!("SELECT fd, COUNT(*) -- select\nFROM {ev} -- from\nGROUP BY fd -- group\nWHERE pid == 1 -- where"),
        format!("SELECT fd, COUNT(*) FROM {ev} GROUP BY fd WINDOW(time, 1000, 1000) -- w\nWHERE pid == 1"),
        format!("SELECT fd, COUNT(*) FROM {ev} GROUP BY fd WHERE pid == 1 WINDOW(time, 1000, 1000) -- w"),
        format!("SELECT fd, COUNT(*) FROM {ev} GROUP BY fd WHERE pid == 1 WINDOW(time, 1000, 1000)/* w */;"),
    ] {
        let q = if q.contains("WINDOW") { q } else { format!("{q}\nWINDOW(time, 1000, 1000)") };
        match compile(&q) {
            Ok(c) => assert_eq!(c.code.main().program.insns, want, "{q}"),
            Err(e) => panic!("{q}\n{e}"),
        }
    }
}

/// Regression: `… WHERE fd = ` (unexpected end of query) had no position.
#[test]
fn regression_unexpected_end_points_after_the_last_token() {
    let q = "SELECT fd FROM tracepoint/syscalls/sys_enter_pread64 WHERE fd = ";
    let Err(CompileError::Query(d)) = compile(q) else {
        panic!("not a query error")
    };
    assert_eq!(
        d.render(q),
        format!(
            "query:1:64-64: error: unexpected end of query\n{q}\n{}~\nhint: the query ends here; expected an expression\n",
            " ".repeat(63)
        )
    );
    // The same after a clause the pre-pass moved, and on a later line.
    let q = "SELECT fd, COUNT(*) FROM tracepoint/syscalls/sys_enter_pread64\nGROUP BY fd\nWHERE pid ==   \n";
    let Err(CompileError::Query(d)) = compile(q) else {
        panic!("not a query error")
    };
    assert!(
        d.render(q).starts_with(
            "query:3:13-13: error: unexpected end of query\nWHERE pid ==   \n            ~\n"
        ),
        "{}",
        d.render(q)
    );
    // Inside the query: WINDOW follows the incomplete WHERE.
    let q = "SELECT fd FROM tracepoint/syscalls/sys_enter_pread64 WHERE fd > WINDOW(count, 10, 10)";
    let Err(CompileError::Query(d)) = compile(q) else {
        panic!("not a query error")
    };
    assert_eq!(
        (d.span, d.hint.as_deref()),
        (
            Some(63..63),
            Some("the WHERE clause ends here; expected an expression")
        )
    );
}

#[test]
fn every_corpus_query_fails_with_a_positioned_query_error() {
    let entries = crate::corpus::load();
    assert!(
        entries.len() >= 300,
        "the corpus has {} entries",
        entries.len()
    );
    let mut failures = Vec::new();
    for e in &entries {
        if let Err(why) = check_entry(e) {
            failures.push(format!(
                "{}:{}: {why}\n  query: {:?}",
                e.file, e.line, e.query
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} corpus entries fail:\n{}",
        failures.len(),
        entries.len(),
        failures.join("\n")
    );
}

fn check_entry(e: &Entry) -> Result<(), String> {
    let d = match crate::corpus::outcome(&e.query) {
        Outcome::Query(d) => d,
        Outcome::Compiled => return Err("compiled".into()),
        Outcome::Other(m) => return Err(format!("not a query error: {m}")),
        Outcome::Panic(m) => return Err(format!("panicked: {m}")),
    };
    check_diagnostic(&e.query, &d)?;
    let text = format!("{} {}", d.message, d.hint.as_deref().unwrap_or(""));
    if let Some(want) = &e.expect {
        if !text.to_lowercase().contains(&want.to_lowercase()) {
            return Err(format!("expected '{want}' in: {}", d.render(&e.query)));
        }
    }
    if d.hint.is_none() {
        return Err(format!("no hint: {}", d.render(&e.query)));
    }
    if let Some(under) = &e.under {
        let span = d.span.clone().unwrap();
        let got = if span.is_empty() {
            "<end>".to_string()
        } else {
            e.query[span].to_string()
        };
        if &got != under {
            return Err(format!(
                "underlines '{got}', expected '{under}': {}",
                d.render(&e.query)
            ));
        }
    }
    Ok(())
}

/// Token deletion, duplication, swap and truncation at every position of
/// every seed: each mutant compiles or fails with a positioned query error.
#[test]
fn mutations_of_valid_queries_fail_cleanly() {
    let seeds = seeds();
    assert!(seeds.len() >= 10);
    let (mut tried, mut rejected) = (0, 0);
    let mut failures = Vec::new();
    for seed in &seeds {
        match crate::corpus::outcome(seed) {
            Outcome::Compiled => {}
            Outcome::Query(d) => panic!("seed does not compile: {}", d.render(seed)),
            Outcome::Other(m) | Outcome::Panic(m) => panic!("seed does not compile: {seed}\n{m}"),
        }
        for m in crate::corpus::mutants(seed) {
            tried += 1;
            match crate::corpus::outcome(&m) {
                Outcome::Compiled => {}
                Outcome::Query(d) => {
                    rejected += 1;
                    if let Err(why) = check_diagnostic(&m, &d) {
                        failures.push(format!("{why}\n  query: {m:?}"));
                    }
                }
                Outcome::Other(x) => {
                    failures.push(format!("not a query error: {x}\n  query: {m:?}"))
                }
                Outcome::Panic(x) => failures.push(format!("panicked: {x}\n  query: {m:?}")),
            }
        }
    }
    eprintln!("{tried} mutants, {rejected} rejected");
    assert!(
        rejected >= 300,
        "only {rejected} of {tried} mutants are rejected"
    );
    assert!(
        failures.is_empty(),
        "{} of {tried} mutants fail:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// Inputs far beyond anything a person writes are rejected, positioned, and
/// do not overflow the stack (a 2 MiB test thread runs this).
#[test]
fn huge_inputs_are_rejected_with_positions() {
    let ev = "tracepoint/syscalls/sys_enter_pread64";
    let cases = [
        (
            format!(
                "SELECT fd FROM {ev} WHERE fd = {}",
                vec!["fd"; 5000].join(" + ")
            ),
            "more than 500 operators",
        ),
        (
            format!(
                "SELECT fd FROM {ev} WHERE {}",
                (0..2000)
                    .map(|i| format!("fd <> {i}"))
                    .collect::<Vec<_>>()
                    .join(" AND ")
            ),
            "more than 500 operators",
        ),
        (
            format!(
                "SELECT fd FROM {ev} WHERE fd = {}1{}",
                "(".repeat(1000),
                ")".repeat(1000)
            ),
            "nest more than 32",
        ),
        (
            format!("SELECT fd FROM {ev} WHERE {}fd = 1", "NOT ".repeat(60)),
            "",
        ),
        (
            format!("SELECT fd FROM {ev} WHERE fd = {}1", "- ".repeat(60)),
            "nests too deeply",
        ),
        (
            format!(
                "SELECT {} FROM {ev}",
                "abs(".repeat(40) + "fd" + &")".repeat(40)
            ),
            "nest more than 32",
        ),
        (
            format!("SELECT fd FROM {ev} WHERE comm = '{}", "x".repeat(200_000)),
            "unterminated",
        ),
        (
            format!(
                "SELECT fd FROM {ev} WHERE fd IN ({}) AND",
                (0..2_000)
                    .map(|i| i.to_string())
                    .collect::<Vec<_>>()
                    .join(",")
            ),
            "end of query",
        ),
        (
            format!(
                "SELECT {} FROM {ev} WHERE fd = 'x'",
                (0..300)
                    .map(|i| format!("fd AS c{i}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            "type error",
        ),
        (
            format!(
                "SELECT fd FROM {ev} {}",
                "WINDOW(time, 1000, 1000) ".repeat(100)
            ),
            "at most one WINDOW",
        ),
    ];
    for (q, want) in cases {
        let short: String = q.chars().take(120).collect();
        let started = std::time::Instant::now();
        match crate::corpus::outcome(&q) {
            Outcome::Query(d) => {
                check_diagnostic(&q, &d).unwrap_or_else(|why| panic!("{short}…: {why}"));
                assert!(
                    d.message.to_lowercase().contains(&want.to_lowercase())
                        || d.hint.as_deref().unwrap_or("").contains(want),
                    "{short}…: {}",
                    d.message
                );
            }
            Outcome::Compiled => panic!("{short}…: compiled"),
            Outcome::Other(m) | Outcome::Panic(m) => panic!("{short}…: {m}"),
        }
        eprintln!("{:?} for {short}", started.elapsed());
    }
}
