//! Generated queries (issue 6, item 2): random, well-typed queries from
//! `ebql-querygen`, compiled and loaded into the kernel (the verifier runs,
//! nothing attaches), and run end to end through the differential oracle
//! (`Executor::check`) against the scripted workload, filtered by its pid.
//!
//! The CI tests sample a fixed seed; `full_run` (ignored; `bench/generated.sh`)
//! takes its sizes from the environment and writes a summary file:
//!
//! | variable | default | meaning |
//! |---|---|---|
//! | `EBQL_GEN_SEED` | 1 | seed of the generator |
//! | `EBQL_GEN_LOAD` | 10000 | queries compiled and loaded |
//! | `EBQL_GEN_CHECK` | 1000 | queries run through the oracle |
//! | `EBQL_GEN_BATCH` | 12 | oracle checks attached at once, sharing one workload |
//! | `EBQL_GEN_SHRINK` | 5 | disagreements to minimize (each costs up to 100 oracle runs) |
//! | `EBQL_GEN_OUT` | (none) | file the summary is written to |

mod common;

use ebql_querygen::{minimize, script, Case, QueryConfig, Sampler, Tree};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::{BufRead, BufReader, Write};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::Instant;

/// Fixed seed of the CI samples.
const CI_SEED: u64 = 0x6562_716c;

/// How one generated query fared, by fault.
#[derive(Debug)]
enum Fault {
    /// `Error::Query`: allowed, counted by reason (a generator bug or an engine limitation).
    Query(String),
    /// `Error::Verifier`: our bug.
    Verifier(String),
    /// `Error::Internal`: our bug.
    Internal(String),
    /// A panic inside the library: our bug.
    Panic(String),
    /// Any other error (runtime, execution, catalog).
    Other(String),
}

impl Fault {
    fn of(e: ebql::Error) -> Fault {
        match e {
            ebql::Error::Query { diagnostic, .. } => Fault::Query(reason(&diagnostic.message)),
            ebql::Error::Verifier(v) => Fault::Verifier(v.to_string()),
            ebql::Error::Internal(m) => Fault::Internal(m),
            other => Fault::Other(other.to_string()),
        }
    }
}

/// A query error message with its specifics (numbers, quoted names and
/// values) blanked, so messages of one kind count together.
fn reason(message: &str) -> String {
    let mut out = String::new();
    let mut quote: Option<char> = None;
    for c in message.chars() {
        match quote {
            Some(q) if c == q => {
                out.push(c);
                quote = None;
            }
            Some(_) => {}
            None if c == '\'' || c == '`' || c == '"' => {
                out.push(c);
                out.push('…');
                quote = Some(c);
            }
            None if c.is_ascii_digit() => {
                if !out.ends_with('N') {
                    out.push('N');
                }
            }
            None => out.push(c),
        }
    }
    out
}

/// Runs `f`, turning a panic into `Err(message)`; the default hook's
/// backtrace print is silenced meanwhile.
fn guarded<T>(f: impl FnOnce() -> T) -> Result<T, String> {
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let r = catch_unwind(AssertUnwindSafe(f));
    std::panic::set_hook(hook);
    r.map_err(|p| {
        p.downcast_ref::<String>().cloned().or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string())).unwrap_or_else(|| "non-string panic".into())
    })
}

/// Failures worth a bug report: the case, and what happened.
#[derive(Default)]
struct Bugs(Vec<(String, String)>);

impl Bugs {
    fn push(&mut self, case: &Case, what: String) {
        self.0.push((case.to_string(), what));
    }
}

/// Counts of the compile-and-load run.
#[derive(Default)]
struct LoadTally {
    tried: usize,
    loaded: usize,
    query_errors: BTreeMap<String, (usize, String)>,
    verifier: Bugs,
    internal: Bugs,
    panics: Bugs,
    other: Bugs,
}

impl LoadTally {
    fn fault(&mut self, case: &Case, f: Fault) {
        match f {
            Fault::Query(r) => self.query_errors.entry(r).or_insert_with(|| (0, case.query.template())).0 += 1,
            Fault::Verifier(m) => self.verifier.push(case, m),
            Fault::Internal(m) => self.internal.push(case, m),
            Fault::Panic(m) => self.panics.push(case, m),
            Fault::Other(m) => self.other.push(case, m),
        }
    }

    fn bugs(&self) -> usize {
        self.verifier.0.len() + self.internal.0.len() + self.panics.0.len() + self.other.0.len()
    }
}

fn write_bugs(s: &mut String, title: &str, bugs: &Bugs) {
    let _ = writeln!(s, "{title}: {}", bugs.0.len());
    for (case, what) in bugs.0.iter().take(5) {
        let first = what.lines().next().unwrap_or("");
        let _ = writeln!(s, "  - {first}\n    {}", case.replace('\n', "\n    "));
    }
}

fn write_reasons(s: &mut String, reasons: &BTreeMap<String, (usize, String)>) {
    let mut v: Vec<_> = reasons.iter().collect();
    v.sort_by(|a, b| b.1 .0.cmp(&a.1 .0));
    for (r, (n, example)) in v.iter().take(10) {
        let _ = writeln!(s, "  {n:>6}  {r}\n          e.g. {example}");
    }
}

impl std::fmt::Display for LoadTally {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut s = String::new();
        let errors: usize = self.query_errors.values().map(|v| v.0).sum();
        let _ = writeln!(s, "compile and load: {} generated, {} loaded by the verifier, {} query errors", self.tried, self.loaded, errors);
        write_reasons(&mut s, &self.query_errors);
        write_bugs(&mut s, "verifier rejections", &self.verifier);
        write_bugs(&mut s, "internal errors", &self.internal);
        write_bugs(&mut s, "panics", &self.panics);
        write_bugs(&mut s, "other errors", &self.other);
        f.write_str(&s)
    }
}

/// Compiles `sql`, creates its maps and loads its program (the verifier
/// runs), attaches nothing, closes everything.
fn load(ex: &mut ebql::Executor, sql: &str) -> ebql::Result<()> {
    ex.compile(sql).map(|_| ())
}

/// Compiles and loads `n` generated queries (pid: ours; nothing attaches).
fn load_run(seed: u64, n: usize) -> LoadTally {
    let mut ex = ebql::Executor::new();
    let mut sampler = Sampler::new(seed, QueryConfig::default());
    let pid = std::process::id();
    let mut t = LoadTally::default();
    for _ in 0..n {
        let case = sampler.next_case();
        let sql = case.sql(pid);
        t.tried += 1;
        match guarded(|| load(&mut ex, &sql)) {
            Ok(Ok(())) => t.loaded += 1,
            Ok(Err(e)) => t.fault(&case, Fault::of(e)),
            Err(p) => {
                t.fault(&case, Fault::Panic(p));
                ex = ebql::Executor::new();
            }
        }
    }
    t
}

#[test]
fn generated_queries_compile_and_load() {
    common::require_root();
    let t = load_run(CI_SEED, 300);
    eprintln!("{t}");
    assert_eq!(t.bugs(), 0, "{t}");
    assert!(t.loaded >= 200, "most generated queries must be supported: {t}");
}

#[test]
#[ignore = "the full run: bench/generated.sh"]
fn full_run() {
    common::require_root();
    let env = |k: &str, d: u64| std::env::var(k).ok().and_then(|v| v.parse().ok()).unwrap_or(d);
    let seed = env("EBQL_GEN_SEED", 1);
    let start = Instant::now();
    let t = load_run(seed, env("EBQL_GEN_LOAD", 10_000) as usize);
    let mut summary = format!("seed {seed}\n{t}(compile and load took {:.0} s)\n", start.elapsed().as_secs_f64());
    eprintln!("{summary}");
    if let Ok(path) = std::env::var("EBQL_GEN_OUT") {
        std::fs::write(&path, &summary).expect("write the summary");
    }
    summary.clear();
}
