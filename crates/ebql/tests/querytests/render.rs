//! Canonical text of results: one line per row, cells joined by ` | `,
//! windows as `w<k> | ` prefixes, runs of identical lines as `<line> [x<n>]`,
//! and `$pid`/`$fd<n>` variables.

use crate::format::RowOrder;
use ebql::arrow::record_batch::RecordBatch;
use ebql::arrow::util::display::{ArrayFormatter, FormatOptions};

/// Text of the rows of `batches`, skipping the window's columns
/// (`ebql::window::bound_fields`); a failed window (or result) is the line `error: <cause>`.
pub fn rows(batches: &[RecordBatch]) -> Vec<String> {
    let opts = FormatOptions::default().with_null("NULL");
    let mut out = Vec::new();
    for b in batches {
        if let Some(e) = ebql::window::WindowError::of_batch(b) {
            out.push(format!("error: {e}"));
            continue;
        }
        let cols: Vec<ArrayFormatter> = b
            .schema()
            .fields()
            .iter()
            .zip(b.columns())
            .skip(ebql::window::bound_columns(b.schema_ref()))
            .map(|(_, c)| {
                ArrayFormatter::try_new(c.as_ref(), &opts)
                    .expect("every Arrow type has a text form")
            })
            .collect();
        for i in 0..b.num_rows() {
            let cells: Vec<String> = cols.iter().map(|c| c.value(i).to_string()).collect();
            out.push(cells.join(" | "));
        }
    }
    out
}

/// Puts rows in comparison order.
pub fn order(mut rows: Vec<String>, order: RowOrder) -> Vec<String> {
    if order == RowOrder::Sorted {
        rows.sort();
    }
    rows
}

/// Prefixes every row of window `k` (1-based) with `w<k> | `.
pub fn windowed(k: usize, rows: Vec<String>) -> Vec<String> {
    rows.into_iter()
        .map(|r| {
            if r.is_empty() {
                format!("w{k}")
            } else {
                format!("w{k} | {r}")
            }
        })
        .collect()
}

/// Collapses runs of identical lines into `<line> [x<n>]`.
pub fn compact(lines: &[String]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let n = lines[i..].iter().take_while(|l| **l == lines[i]).count();
        out.push(if n > 1 {
            format!("{} [x{n}]", lines[i])
        } else {
            lines[i].clone()
        });
        i += n;
    }
    out
}

/// Expands `<line> [x<n>]` back into `n` lines (inverse of [`compact`]).
pub fn expand(lines: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    for l in lines {
        let repeated = l
            .strip_suffix(']')
            .and_then(|s| s.rsplit_once(" [x"))
            .and_then(|(line, n)| Some((line, n.parse::<usize>().ok()?)));
        match repeated {
            Some((line, n)) => out.extend(std::iter::repeat_n(line.to_string(), n)),
            None => out.push(l.clone()),
        }
    }
    out
}

/// Test variables: name (without `$`) and value.
#[derive(Debug, Clone, Default)]
pub struct Vars(pub Vec<(String, String)>);

impl Vars {
    /// Replaces every `$name` by its value; longest names first so `$fd12` is not read as `$fd1`.
    pub fn substitute(&self, text: &str) -> String {
        let mut vars: Vec<&(String, String)> = self.0.iter().collect();
        vars.sort_by_key(|(n, _)| std::cmp::Reverse(n.len()));
        let mut s = text.to_string();
        for (name, value) in vars {
            s = s.replace(&format!("${name}"), value);
        }
        s
    }

    /// Fill mode: cells whose whole text is a variable's value are written as the variable.
    pub fn abstract_cells(&self, line: &str) -> String {
        line.split(" | ")
            .map(|cell| {
                let (cell, rep) = match cell.rsplit_once(" [x") {
                    Some((c, r)) if r.ends_with(']') => (c, format!(" [x{r}")),
                    _ => (cell, String::new()),
                };
                let named = self
                    .0
                    .iter()
                    .find(|(_, v)| v == cell)
                    .map(|(n, _)| format!("${n}"));
                format!("{}{rep}", named.unwrap_or_else(|| cell.to_string()))
            })
            .collect::<Vec<_>>()
            .join(" | ")
    }
}

/// Variables referenced in `text`: `$fd<n>` indexes, ascending, deduplicated.
pub fn fd_refs(text: &str) -> Vec<usize> {
    let mut out: Vec<usize> = text
        .match_indices("$fd")
        .filter_map(|(i, _)| {
            let digits: String = text[i + 3..]
                .chars()
                .take_while(|c| c.is_ascii_digit())
                .collect();
            digits.parse().ok()
        })
        .collect();
    out.sort();
    out.dedup();
    out
}
