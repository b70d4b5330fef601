//! Diagnostics for people: a message tied to a byte range of the query text,
//! rendered bpftrace-style (`query:1:43-47: error: …`, the line, a `~~~` underline, a hint).

use ebql_catalog::CatalogError;
use std::fmt;
use std::ops::Range;

/// An error or warning about the user's query, with the byte range (in the
/// original query text) it refers to and an optional hint on how to fix it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostic {
    /// What is wrong, one sentence, no trailing period.
    pub message: String,
    /// Byte range in the query as the user typed it; `None` when no position applies.
    pub span: Option<Range<usize>>,
    /// How to fix it, if we know.
    pub hint: Option<String>,
    /// What the rendered position names (`query` when `None`; `query 2`
    /// for the second query `ebql serve` was given).
    /// Boxed: errors carrying a diagnostic stay small.
    pub source: Option<Box<String>>,
}

impl Diagnostic {
    /// A diagnostic without a hint; `span` is a byte range of the original query.
    pub fn new(message: impl Into<String>, span: Option<Range<usize>>) -> Self {
        Diagnostic {
            message: message.into(),
            span,
            hint: None,
            source: None,
        }
    }

    /// Names the query the position is in (`query 2`), for several queries at once.
    pub fn in_source(mut self, source: impl Into<String>) -> Self {
        self.source = Some(Box::new(source.into()));
        self
    }

    /// Sets the hint.
    pub fn with_hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = Some(hint.into());
        self
    }

    /// Renders the diagnostic against the query text it refers to:
    ///
    /// ```text
    /// query:1:31-33: error: unknown field 'cnt' in syscalls/sys_enter_pread64
    /// SELECT fd, COUNT(*), MAX(cnt) FROM tracepoint/syscalls/sys_enter_pread64
    ///                          ~~~
    /// hint: did you mean 'count'?
    /// ```
    /// Columns are 1-based character positions, the end column is inclusive.
    /// Control characters (tabs, a `\r` before the newline) are shown as spaces
    /// so the underline stays under its column on any terminal.
    pub fn render(&self, query: &str) -> String {
        let mut out = String::new();
        let source = self.source.as_deref().map_or("query", String::as_str);
        match self.span.clone().filter(|s| s.start <= query.len()) {
            Some(span) => {
                let (line_no, line_start) = line_of(query, span.start);
                let line_end = query[line_start..]
                    .find('\n')
                    .map_or(query.len(), |i| line_start + i);
                let end = span.end.clamp(span.start, line_end.max(span.start));
                let col_start = query[line_start..span.start].chars().count() + 1;
                let width = query[span.start..end].chars().count().max(1);
                let col_end = col_start + width - 1;
                out.push_str(&format!(
                    "{source}:{line_no}:{col_start}-{col_end}: error: {}\n",
                    one_line(&self.message)
                ));
                out.push_str(&shown_line(&query[line_start..line_end]));
                out.push('\n');
                out.push_str(&" ".repeat(col_start - 1));
                out.push_str(&"~".repeat(width));
                out.push('\n');
            }
            None => out.push_str(&format!("{source}: error: {}\n", one_line(&self.message))),
        }
        if let Some(hint) = &self.hint {
            out.push_str(&format!("hint: {}\n", one_line(hint)));
        }
        out
    }
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.message)?;
        if let Some(h) = &self.hint {
            write!(f, " (hint: {h})")?;
        }
        Ok(())
    }
}

/// A message on one line: names quoted from the query may hold newlines or tabs.
fn one_line(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if c.is_control() => out.push(' '),
            c => out.push(c),
        }
    }
    out
}

/// A line of the query as shown above an underline: one column per character,
/// control characters as spaces.
pub fn shown_line(line: &str) -> String {
    line.chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect()
}

/// 1-based line number and byte offset of the start of the line containing `offset`.
fn line_of(text: &str, offset: usize) -> (usize, usize) {
    let before = &text[..offset];
    let line_no = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    (line_no, line_start)
}

/// Byte offset of a 1-based (line, column-in-chars) position, as sqlparser reports them.
pub fn offset_of(text: &str, line: u64, column: u64) -> Option<usize> {
    if line == 0 || column == 0 {
        return None;
    }
    let mut start = 0usize;
    for _ in 1..line {
        start += text[start..].find('\n')? + 1;
    }
    let rest = &text[start..];
    let col = (column - 1) as usize;
    match rest.char_indices().nth(col) {
        Some((i, _)) => Some(start + i),
        None if rest.chars().count() == col => Some(start + rest.len()),
        None => None,
    }
}

/// The closest candidate to `name`, if one is close enough to be a likely typo
/// or abbreviation. Ranks abbreviations (`cnt` → `count`) first, then edit
/// distance, then Jaro-Winkler similarity.
pub fn suggest<'a>(name: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<String> {
    let name = name.to_ascii_lowercase();
    let is_subsequence = |short: &str, long: &str| {
        let mut it = long.chars();
        short.len() >= 2 && short.chars().all(|c| it.any(|d| d == c))
    };
    candidates
        .into_iter()
        .filter_map(|c| {
            let lc = c.to_ascii_lowercase();
            if lc == name {
                return None;
            }
            let abbrev = is_subsequence(&name, &lc) && lc.starts_with(&name[..1]);
            let dist = strsim::osa_distance(&name, &lc);
            let jw = strsim::jaro_winkler(&name, &lc);
            let close = abbrev || dist <= 2.min(name.len().saturating_sub(1)).max(1) || jw >= 0.85;
            close.then_some((
                std::cmp::Reverse(abbrev),
                dist,
                std::cmp::Reverse((jw * 1000.0) as i64),
                c,
            ))
        })
        .min()
        .map(|(_, _, _, c)| c.to_string())
}

/// A catalog error about an event name, as a diagnostic underlining that name.
pub fn catalog_diag(e: &CatalogError, span: std::ops::Range<usize>) -> Diagnostic {
    let d = |m: String| Diagnostic::new(m, Some(span.clone()));
    match e {
        CatalogError::BadBinary { path, reason } => d(format!("cannot probe `{}`: {reason}", path.display()))
            .with_hint("name an ELF executable or shared library by path, or a library by name (`libc`, `libc.so.6`), or a program on $PATH"),
        CatalogError::NotInBinary { binary, what, hint } => d(format!("no {what} in {}", binary.display())).with_hint(hint.clone()),
        CatalogError::Unavailable { kind, why, hint } => d(format!("{kind} events are not available on this kernel: {why}")).with_hint(hint.clone()),
        CatalogError::BadEventName { input, hint } => d(format!("bad event name `{input}`")).with_hint(hint.clone()),
        CatalogError::BadParameter { input, why, hint } => d(format!("`{input}`: {why}")).with_hint(hint.clone()),
        CatalogError::UnknownEvent { name, suggestion } => d(format!("unknown event `{name}`")).with_hint(match suggestion {
            Some(s) => format!("did you mean `{s}`?"),
            None => "`ebql events [GLOB]` lists the tracepoints of this kernel".into(),
        }),
        CatalogError::UnknownField { event, field, hint } => d(format!("`{event}` has no field `{field}`")).with_hint(hint.clone()),
        other => d(other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_underline_on_the_right_line() {
        let q = "SELECT fd\nFROM t WHERE cnt > 1";
        let start = q.find("cnt").unwrap();
        let d = Diagnostic::new("unknown field 'cnt'", Some(start..start + 3))
            .with_hint("did you mean 'count'?");
        assert_eq!(
            d.render(q),
            "query:2:14-16: error: unknown field 'cnt'\nFROM t WHERE cnt > 1\n             ~~~\nhint: did you mean 'count'?\n"
        );
    }

    #[test]
    fn offsets_from_line_and_column() {
        let q = "ab\ncdé f";
        assert_eq!(offset_of(q, 1, 1), Some(0));
        assert_eq!(offset_of(q, 2, 1), Some(3));
        assert_eq!(offset_of(q, 2, 5), Some(q.find('f').unwrap()));
        assert_eq!(offset_of(q, 3, 1), None);
    }

    #[test]
    fn suggests_close_names_only() {
        assert_eq!(suggest("cnt", ["count", "fd", "pos"]), Some("count".into()));
        assert_eq!(suggest("zzz", ["count", "fd", "pos"]), None);
        assert_eq!(
            suggest("cnt", ["cpu", "count", "pid"]),
            Some("count".into())
        );
        assert_eq!(
            suggest("coutn", ["cpu", "count", "comm"]),
            Some("count".into())
        );
    }
}
