//! Fuzzer of the pre-pass, planner, split and codegen (proptest): arbitrary
//! strings, token soups from eBQL's vocabulary, and random edits of the valid
//! seed queries. Every input must compile or fail with a `Query` error
//! positioned inside the input (or right at its end) that renders as
//! `query:LINE:COL…` with an underline; never a panic, never `Internal`.
//!
//! In the test suite it runs for 3 s from a fixed seed. `bench/fuzz.sh
//! --seconds N` runs it longer (`EBQL_FUZZ_SECONDS`, `EBQL_FUZZ_SEED`) and
//! prints the cases tried and the failures, each shrunk to a minimal input.

use crate::corpus::{check_diagnostic, outcome, seeds, Outcome};
use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::{Config, RngAlgorithm, TestCaseError, TestError, TestRng, TestRunner};
use std::time::{Duration, Instant};

/// Words, operators and fragments eBQL queries are made of, plus some that
/// are not (DDL, odd punctuation, unicode, unclosed quotes and comments).
const VOCABULARY: &[&str] = &[
    "SELECT",
    "FROM",
    "WHERE",
    "GROUP",
    "BY",
    "HAVING",
    "ORDER",
    "LIMIT",
    "OFFSET",
    "WINDOW",
    "AS",
    "AND",
    "OR",
    "NOT",
    "IN",
    "IS",
    "NULL",
    "LIKE",
    "BETWEEN",
    "CASE",
    "WHEN",
    "THEN",
    "ELSE",
    "END",
    "DISTINCT",
    "ASC",
    "DESC",
    "JOIN",
    "ON",
    "UNION",
    "ALL",
    "EXISTS",
    "CAST",
    "INT",
    "BIGINT",
    "VARCHAR",
    "true",
    "false",
    "OVER",
    "PARTITION",
    "WITH",
    "VALUES",
    "CREATE",
    "DROP",
    "INSERT",
    "EXPLAIN",
    "SET",
    "tracepoint/syscalls/sys_enter_pread64",
    "tracepoint:sched:sched_switch",
    "\"tracepoint/syscalls/sys_enter_pread64\"",
    "tracepoint/x/y",
    "kprobe:vfs_read",
    "tracepoint",
    "/",
    ":",
    "syscalls",
    "sys_enter_pread64",
    "fd",
    "count",
    "pos",
    "buf",
    "pid",
    "tid",
    "cpu",
    "comm",
    "time",
    "uid",
    "gid",
    "cgroup",
    "prev_comm",
    "next_pid",
    "cnt",
    "x",
    "COUNT(*)",
    "COUNT",
    "SUM",
    "MAX",
    "MIN",
    "AVG",
    "abs",
    "upper",
    "length",
    "(",
    ")",
    ",",
    ";",
    "*",
    "+",
    "-",
    "%",
    "=",
    "==",
    "<>",
    "!=",
    "<",
    ">",
    "<=",
    ">=",
    "&",
    "|",
    "<<",
    ">>",
    "||",
    "::",
    ".",
    "0",
    "1",
    "7",
    "1000",
    "-1",
    "1.5",
    "18446744073709551615",
    "'db'",
    "'a%'",
    "''",
    "'",
    "\"",
    "time,",
    "count,",
    "WINDOW(time, 1000, 1000)",
    "WINDOW(count, 10, 10)",
    "WINDOW(time, 1000, 500)",
    "WINDOW(",
    "-- c\n",
    "--",
    "/* c */",
    "/*",
    "\n",
    "\t",
    "é",
    "👍",
    "$1",
    "?",
    "@",
    "#",
    "[",
    "]",
    "{",
    "}",
];

fn vocabulary_soup() -> impl Strategy<Value = String> {
    (
        prop::collection::vec(prop::sample::select(VOCABULARY), 0..40),
        prop::bool::ANY,
    )
        .prop_map(|(words, spaced)| words.join(if spaced { " " } else { "" }))
}

fn arbitrary_text() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::collection::vec(any::<char>(), 0..120).prop_map(String::from_iter),
        prop::collection::vec(prop::char::range(' ', '~'), 0..200).prop_map(String::from_iter),
    ]
}

/// One edit of a query, by token index or byte position (taken modulo the length).
#[derive(Clone, Debug)]
enum Edit {
    Delete(usize),
    Duplicate(usize),
    Swap(usize),
    Insert(usize, &'static str),
    Replace(usize, &'static str),
    TruncateChars(usize),
}

fn edit() -> impl Strategy<Value = Edit> {
    prop_oneof![
        any::<usize>().prop_map(Edit::Delete),
        any::<usize>().prop_map(Edit::Duplicate),
        any::<usize>().prop_map(Edit::Swap),
        (any::<usize>(), prop::sample::select(VOCABULARY)).prop_map(|(i, w)| Edit::Insert(i, w)),
        (any::<usize>(), prop::sample::select(VOCABULARY)).prop_map(|(i, w)| Edit::Replace(i, w)),
        any::<usize>().prop_map(Edit::TruncateChars),
    ]
}

fn apply(seed: &str, edits: &[Edit]) -> String {
    let mut t = crate::corpus::tokens(seed);
    let mut truncate = None;
    for e in edits {
        let n = t.len().max(1);
        match *e {
            Edit::Delete(i) if !t.is_empty() => drop(t.remove(i % n)),
            Edit::Duplicate(i) if !t.is_empty() => t.insert(i % n, t[i % n].clone()),
            Edit::Swap(i) if t.len() > 1 => t.swap(i % (n - 1), i % (n - 1) + 1),
            Edit::Insert(i, w) => t.insert(i % (t.len() + 1), w.to_string()),
            Edit::Replace(i, w) if !t.is_empty() => t[i % n] = w.to_string(),
            Edit::TruncateChars(i) => truncate = Some(i),
            _ => {}
        }
    }
    let q = t.join(" ");
    match truncate {
        Some(i) => q.chars().take(i % (q.chars().count() + 1)).collect(),
        None => q,
    }
}

fn mutated_seed(seeds: Vec<String>) -> impl Strategy<Value = String> {
    (
        prop::sample::select(seeds),
        prop::collection::vec(edit(), 1..4),
    )
        .prop_map(|(s, e)| apply(&s, &e))
}

/// Longer than any compile takes (a debug build compiles in milliseconds).
const HANG: Duration = Duration::from_secs(30);

/// The property: compiles, or a positioned query error. Ok(true) when rejected.
fn check(q: &str) -> Result<bool, String> {
    match outcome(q) {
        Outcome::Compiled => Ok(false),
        Outcome::Query(d) => check_diagnostic(q, &d).map(|()| true),
        Outcome::Other(m) => Err(format!("not a query error: {m}")),
        Outcome::Panic(m) => Err(format!("panicked: {m}")),
    }
}

#[test]
fn fuzz_prepass_and_planner() {
    let seconds: f64 = std::env::var("EBQL_FUZZ_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3.0);
    let seed: u64 = std::env::var("EBQL_FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(6);
    let mut seed_bytes = [0u8; 32];
    seed_bytes[..8].copy_from_slice(&seed.to_le_bytes());
    let rng = TestRng::from_seed(RngAlgorithm::ChaCha, &seed_bytes);
    let mut runner = TestRunner::new_with_rng(
        Config {
            failure_persistence: None,
            ..Config::default()
        },
        rng,
    );
    let strategy =
        prop_oneof![2 => mutated_seed(seeds()), 1 => vocabulary_soup(), 1 => arbitrary_text()];

    // Panics are caught and reported as failures; keep their messages off the terminal.
    std::panic::set_hook(Box::new(|_| {}));
    let deadline = Instant::now() + Duration::from_secs_f64(seconds);
    let (mut tried, mut rejected) = (0u64, 0u64);
    let mut failures: Vec<(String, String)> = Vec::new();
    while Instant::now() < deadline {
        let tree = strategy.new_tree(&mut runner).expect("strategy");
        let q = tree.current();
        tried += 1;
        // A hang is a failure too; it cannot be shrunk (the thread spins on), so it ends the run.
        let (tx, rx) = std::sync::mpsc::channel();
        let input = q.clone();
        std::thread::spawn(move || tx.send(check(&input)));
        let Ok(result) = rx.recv_timeout(HANG) else {
            failures.push((q, format!("no answer after {HANG:?}: a hang")));
            break;
        };
        match result {
            Ok(was_rejected) => rejected += was_rejected as u64,
            Err(_) => {
                // Shrink to a minimal failing input.
                let minimal = match runner
                    .run_one(tree, |q| check(&q).map(drop).map_err(TestCaseError::fail))
                {
                    Err(TestError::Fail(_, min)) => min,
                    _ => q,
                };
                let why = check(&minimal).err().unwrap_or_default();
                if !failures.iter().any(|(_, w)| *w == why) {
                    failures.push((minimal, why));
                }
            }
        }
    }
    let _ = std::panic::take_hook();
    println!("fuzz: {tried} cases in {seconds} s (seed {seed}), {rejected} rejected as bad queries, {} distinct failures", failures.len());
    for (q, why) in &failures {
        println!("FAIL {q:?}\n     {why}");
    }
    assert!(
        failures.is_empty(),
        "{} distinct failures (minimal inputs above)",
        failures.len()
    );
}
