//! The query-test file format (described in `tests/queries/README.md`):
//! parsing into [`Record`]s and rewriting expected blocks in fill mode.

use std::fmt;

/// What a record asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kind {
    /// Kernel tier: run the query around the workload, compare the rows.
    Query { order: RowOrder },
    /// Kernel tier: run the query under the differential oracle (`ebql check`).
    Check,
    /// Pure tier: the query must fail to compile with this rendered diagnostic.
    Error,
    /// Pure tier: snapshot of `ebql explain`; `split_only` stops before the BPF listing.
    Explain { split_only: bool },
}

/// How result rows are compared.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RowOrder {
    /// Rows of each window are sorted as text before comparing (the default).
    Sorted,
    /// Rows are compared in the order the engine produced them (default when the query has ORDER BY).
    AsProduced,
}

/// One test case of a file.
#[derive(Debug, Clone)]
pub struct Record {
    /// 1-based line of the record's header line.
    pub line: usize,
    /// Case name, unique in its file.
    pub name: String,
    pub kind: Kind,
    /// `bug:` reason: a known wrong answer; the expected block holds the right one.
    pub bug: Option<String>,
    /// Workload commands in order (`run:` lines split at `;`); `next` waits for a window to close.
    pub run: Vec<String>,
    /// `stats:` expectations, e.g. `matched=25`.
    pub stats: Vec<(String, u64)>,
    /// `plan:` choices, e.g. `hook=raw group_map=array aggregate=user` (docs/internals.md "Planning choices").
    pub plan: Vec<(String, String)>,
    /// The query text (lines joined with '\n').
    pub sql: String,
    /// Expected block lines, if the record has a `----` separator.
    pub expected: Option<Vec<String>>,
    /// Line range (0-based, end exclusive) of the expected block's lines, or
    /// the line index where a new block would be inserted.
    pub expected_lines: std::ops::Range<usize>,
}

/// A malformed file, with the 1-based line of the problem.
#[derive(Debug)]
pub struct ParseError {
    pub line: usize,
    pub message: String,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}: {}", self.line, self.message)
    }
}

const SEPARATOR: &str = "----";

/// Splits a file into records. Outside records, blank lines and `#` comment lines are skipped.
pub fn parse(text: &str) -> Result<Vec<Record>, ParseError> {
    let lines: Vec<&str> = text.lines().collect();
    let mut records: Vec<Record> = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i].trim_end();
        if line.trim().is_empty() || line.trim_start().starts_with('#') {
            i += 1;
            continue;
        }
        let header_line = i + 1;
        let err = |message: String| ParseError {
            line: header_line,
            message,
        };
        let words: Vec<&str> = line.split_whitespace().collect();
        let (kind, name) = match words.as_slice() {
            ["query", name, rest @ ..] => {
                let order = match rest {
                    [] => None,
                    ["rowsort"] => Some(RowOrder::Sorted),
                    ["ordered"] => Some(RowOrder::AsProduced),
                    _ => {
                        return Err(err(format!(
                            "`query <name> [rowsort|ordered]`, got `{line}`"
                        )))
                    }
                };
                (
                    Kind::Query {
                        order: order.unwrap_or(RowOrder::Sorted),
                    },
                    (*name, order.is_some()),
                )
            }
            ["check", name] => (Kind::Check, (*name, false)),
            ["error", name] => (Kind::Error, (*name, false)),
            ["explain", name] => (Kind::Explain { split_only: false }, (*name, false)),
            ["explain", name, "split"] => (Kind::Explain { split_only: true }, (*name, false)),
            _ => {
                return Err(err(format!(
                    "expected a record header (`query|check|error|explain <name>`), got `{line}`"
                )))
            }
        };
        let (name, explicit_order) = name;
        if records.iter().any(|r| r.name == name) {
            return Err(err(format!("duplicate case name `{name}`")));
        }
        i += 1;
        let mut rec = Record {
            line: header_line,
            name: name.to_string(),
            kind,
            bug: None,
            run: Vec::new(),
            stats: Vec::new(),
            plan: Vec::new(),
            sql: String::new(),
            expected: None,
            expected_lines: 0..0,
        };
        // Directives, then the query, then optionally `----` and the expected block.
        let mut sql: Vec<&str> = Vec::new();
        while i < lines.len() && !lines[i].trim().is_empty() && lines[i].trim_end() != SEPARATOR {
            let l = lines[i].trim_end();
            if sql.is_empty() {
                if let Some(b) = l.strip_prefix("bug:") {
                    rec.bug = Some(b.trim().to_string());
                    i += 1;
                    continue;
                }
                if let Some(r) = l.strip_prefix("run:") {
                    rec.run.extend(
                        r.split(';')
                            .map(str::trim)
                            .filter(|c| !c.is_empty())
                            .map(str::to_string),
                    );
                    i += 1;
                    continue;
                }
                if let Some(p) = l.strip_prefix("plan:") {
                    for kv in p.split_whitespace() {
                        let parsed = kv
                            .split_once('=')
                            .map(|(k, v)| (k.to_string(), v.to_string()));
                        rec.plan.push(parsed.ok_or_else(|| ParseError {
                            line: i + 1,
                            message: format!("`plan: key=value ...`, got `{kv}`"),
                        })?);
                    }
                    i += 1;
                    continue;
                }
                if let Some(s) = l.strip_prefix("stats:") {
                    for kv in s.split_whitespace() {
                        let parsed = kv
                            .split_once('=')
                            .and_then(|(k, v)| Some((k.to_string(), v.parse::<u64>().ok()?)));
                        rec.stats.push(parsed.ok_or_else(|| ParseError {
                            line: i + 1,
                            message: format!("`stats: key=number ...`, got `{kv}`"),
                        })?);
                    }
                    i += 1;
                    continue;
                }
            }
            sql.push(l);
            i += 1;
        }
        if sql.is_empty() {
            return Err(err(format!("case `{name}` has no query")));
        }
        rec.sql = sql.join("\n");
        if let Kind::Query { order } = &mut rec.kind {
            if !explicit_order && rec.sql.to_ascii_uppercase().contains("ORDER BY") {
                *order = RowOrder::AsProduced;
            }
        }
        if i < lines.len() && lines[i].trim_end() == SEPARATOR {
            i += 1;
            let start = i;
            while i < lines.len() && !lines[i].trim().is_empty() {
                i += 1;
            }
            rec.expected = Some(
                lines[start..i]
                    .iter()
                    .map(|l| l.trim_end().to_string())
                    .collect(),
            );
            rec.expected_lines = start..i;
        } else {
            rec.expected_lines = i..i;
        }
        if rec.kind == Kind::Check && rec.expected.is_some() {
            return Err(err(format!(
                "`check` case `{name}` takes no expected block: the oracle is the expectation"
            )));
        }
        records.push(rec);
    }
    Ok(records)
}

/// Rewrites `text` with new expected blocks: `(record, lines)` pairs, in any order.
pub fn fill(text: &str, updates: &[(&Record, Vec<String>)]) -> String {
    let lines: Vec<&str> = text.lines().collect();
    let mut sorted: Vec<&(&Record, Vec<String>)> = updates.iter().collect();
    sorted.sort_by_key(|(r, _)| r.expected_lines.start);
    let mut out: Vec<String> = Vec::new();
    let mut at = 0;
    for (rec, new) in sorted {
        let r = &rec.expected_lines;
        out.extend(lines[at..r.start].iter().map(|l| l.to_string()));
        if rec.expected.is_none() {
            out.push(SEPARATOR.to_string());
        }
        out.extend(new.iter().cloned());
        at = r.end;
    }
    out.extend(lines[at..].iter().map(|l| l.to_string()));
    let mut s = out.join("\n");
    s.push('\n');
    s
}
