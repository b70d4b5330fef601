//! Shared by the bad-query tests and the fuzzer: the fixed event source, the
//! corpus and seed files, mutations, and the checks every diagnostic must pass.
#![allow(dead_code)] // each test binary uses part of it

use ebql_catalog::samples::{SCHED_SWITCH, SYS_ENTER_PREAD64, SYS_EXIT_PREAD64};
use ebql_catalog::{parse_format, CatalogError, EventKind, EventName, EventSchema};
use ebql_compiler::{
    compile_query, CodegenOptions, CompileError, CompiledQuery, Diagnostic, EventSource,
};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;

/// Two known events (real tracefs formats); everything else is unknown.
pub struct Fixed;

impl EventSource for Fixed {
    fn event(&self, name: &EventName) -> Result<EventSchema, CatalogError> {
        match (name.kind, name.category.as_str(), name.name.as_str()) {
            (EventKind::Tracepoint, "syscalls", "sys_enter_pread64") => {
                parse_format(name.clone(), SYS_ENTER_PREAD64)
            }
            (EventKind::Tracepoint, "syscalls", "sys_exit_pread64") => {
                parse_format(name.clone(), SYS_EXIT_PREAD64)
            }
            (EventKind::Tracepoint, "sched", "sched_switch") => {
                parse_format(name.clone(), SCHED_SWITCH)
            }
            _ => Err(CatalogError::UnknownEvent {
                name: name.table_name(),
                suggestion: None,
            }),
        }
    }
}

/// Compiles against [`Fixed`] with default options.
pub fn compile(q: &str) -> Result<CompiledQuery, CompileError> {
    compile_query(q, &Fixed, &CodegenOptions::default())
}

/// What compiling one input gave.
pub enum Outcome {
    /// It compiled.
    Compiled,
    /// A query error, as it must be for bad input.
    Query(Diagnostic),
    /// Catalog or internal error (a bug for these inputs).
    Other(String),
    /// A panic (a bug), with its message.
    Panic(String),
}

/// Compiles `q`, catching panics.
pub fn outcome(q: &str) -> Outcome {
    match catch_unwind(AssertUnwindSafe(|| compile(q))) {
        Ok(Ok(_)) => Outcome::Compiled,
        Ok(Err(CompileError::Query(d))) => Outcome::Query(d),
        Ok(Err(other)) => Outcome::Other(other.to_string()),
        Err(p) => Outcome::Panic(
            p.downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default(),
        ),
    }
}

/// A diagnostic about `q` is positioned inside `q` (or right at its end) on
/// character boundaries, and renders as `query:LINE:COL-COL: error: …`, the
/// query line, and a `~` underline under exactly that position.
pub fn check_diagnostic(q: &str, d: &Diagnostic) -> Result<(), String> {
    let Some(span) = d.span.clone() else {
        return Err(format!("no position: {}", d.message));
    };
    if span.start > span.end
        || span.end > q.len()
        || !q.is_char_boundary(span.start)
        || !q.is_char_boundary(span.end)
    {
        return Err(format!(
            "span {span:?} is not inside the query ({} bytes)",
            q.len()
        ));
    }
    if d.message.trim().is_empty() {
        return Err("empty message".into());
    }
    let text = d.render(q);
    let lines: Vec<&str> = text.lines().collect();
    let line_no = q[..span.start].matches('\n').count() + 1;
    let line_start = q[..span.start].rfind('\n').map_or(0, |i| i + 1);
    let col = q[line_start..span.start].chars().count() + 1;
    let head = format!("query:{line_no}:{col}-");
    if !lines
        .first()
        .is_some_and(|l| l.starts_with(&head) && l.contains(": error: "))
    {
        return Err(format!("rendered without '{head}…: error:':\n{text}"));
    }
    let source_line =
        ebql_compiler::diag::shown_line(q[line_start..].split('\n').next().unwrap_or(""));
    if text.split('\n').nth(1) != Some(source_line.as_str()) {
        return Err(format!("second line is not the query line:\n{text}"));
    }
    let under = lines.get(2).copied().unwrap_or("");
    let tilde_col = under.chars().take_while(|&c| c == ' ').count() + 1;
    if tilde_col != col
        || !under.trim_start().starts_with('~')
        || under.trim().chars().any(|c| c != '~')
    {
        return Err(format!("underline not at column {col}:\n{text}"));
    }
    Ok(())
}

/// One corpus entry: a query that must be rejected.
pub struct Entry {
    /// Corpus file name.
    pub file: String,
    /// Line in that file (1-based).
    pub line: usize,
    /// The query (escapes resolved).
    pub query: String,
    /// Text the message or hint must contain (case-insensitive).
    pub expect: Option<String>,
    /// Text the underline must cover exactly; `<end>` for an empty span.
    pub under: Option<String>,
}

fn dir() -> PathBuf {
    // Also included by crates/ebql/tests: both crates are siblings. The
    // run-time variable first: cargo reuses test binaries across checkouts
    // that share a target directory, so the compile-time path can be another
    // checkout's.
    let manifest = std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")));
    manifest.join("../ebql-compiler/tests/bad_queries")
}

/// `\n`, `\r`, `\t`, `\\` and `\e` (nothing: marks an empty query) in corpus lines.
pub fn unescape(s: &str) -> String {
    let mut out = String::new();
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('n') => out.push('\n'),
            Some('t') => out.push('\t'),
            Some('r') => out.push('\r'),
            Some('e') => {}
            Some('\\') => out.push('\\'),
            Some(o) => {
                out.push('\\');
                out.push(o);
            }
            None => out.push('\\'),
        }
    }
    out
}

/// All entries of `tests/bad_queries/*.txt`, in file and line order.
pub fn load() -> Vec<Entry> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir())
        .expect("tests/bad_queries")
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "txt"))
        .collect();
    files.sort();
    let mut entries = Vec::new();
    for path in files {
        let file = path.file_name().unwrap().to_string_lossy().to_string();
        for (i, raw) in std::fs::read_to_string(&path).unwrap().lines().enumerate() {
            if raw.trim().is_empty() || raw.starts_with('#') {
                continue;
            }
            let (rest, under) = match raw.split_once(" #@") {
                Some((a, b)) => (a, Some(unescape(b.trim()))),
                None => (raw, None),
            };
            let (query, expect) = match rest.split_once(" #=>") {
                Some((a, b)) => (a, Some(b.trim().to_string()).filter(|b| !b.is_empty())),
                None => (rest, None),
            };
            entries.push(Entry {
                file: file.clone(),
                line: i + 1,
                query: unescape(query.trim_end()),
                expect,
                under,
            });
        }
    }
    entries
}

/// The valid queries in `tests/bad_queries/seeds.sql`, one per line.
pub fn seeds() -> Vec<String> {
    std::fs::read_to_string(dir().join("seeds.sql"))
        .unwrap()
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with("--"))
        .map(unescape)
        .collect()
}

/// The significant tokens of `q` as text (sqlparser's tokenizer; whitespace dropped).
pub fn tokens(q: &str) -> Vec<String> {
    use datafusion::sql::sqlparser::dialect::GenericDialect;
    use datafusion::sql::sqlparser::tokenizer::{Token, Tokenizer};
    Tokenizer::new(&GenericDialect {}, q)
        .tokenize()
        .unwrap()
        .into_iter()
        .filter(|t| !matches!(t, Token::Whitespace(_) | Token::EOF))
        .map(|t| t.to_string())
        .collect()
}

/// Every token deletion, duplication, adjacent swap and truncation of `q`.
pub fn mutants(q: &str) -> Vec<String> {
    let t = tokens(q);
    let join = |v: &[String]| v.join(" ");
    let mut out = Vec::new();
    for i in 0..t.len() {
        let mut v = t.clone();
        v.remove(i);
        out.push(join(&v));
        let mut v = t.clone();
        v.insert(i, t[i].clone());
        out.push(join(&v));
        if i + 1 < t.len() {
            let mut v = t.clone();
            v.swap(i, i + 1);
            out.push(join(&v));
        }
        out.push(join(&t[..i]));
    }
    out
}
