//! Pre-pass from eBQL's extended syntax (thesis §3.2, Figure 12) to standard SQL.
//!
//! Works on sqlparser's tokens, never on raw characters, so strings, quoted
//! identifiers and comments are never touched. It
//! - turns event names (`tracepoint/syscalls/sys_enter_pread64`,
//!   `tracepoint:syscalls:sys_enter_pread64`, or the same in double quotes)
//!   into quoted table identifiers and records which event each one is;
//! - rewrites `==` to `=`;
//! - cuts the trailing `WINDOW(time, size_ms, step_ms)` / `WINDOW(count, n, n)`;
//! - puts top-level clauses in standard order (the thesis writes GROUP BY before WHERE);
//! - drops one trailing `;`;
//! - turns comments into spaces (a moved clause must not land behind a `-- comment`).
//!
//! Every byte of the rewritten text maps back to the user's text ([`SpanMap`]),
//! so DataFusion's errors point at what the user typed.

use crate::diag::{offset_of, Diagnostic};
use datafusion::sql::sqlparser::dialect::GenericDialect;
use datafusion::sql::sqlparser::keywords::Keyword;
use datafusion::sql::sqlparser::tokenizer::{Token, Tokenizer, Whitespace, Word};
use ebql_catalog::EventName;
use std::ops::Range;

/// How events are grouped into windows (thesis Table 1, `Window`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WindowSpec {
    /// Time window of `size_ns`, a new one every `step_ns`: tumbling when
    /// they are equal, hopping (sliding) when the step is smaller; then
    /// `size_ns` is a whole number of steps (the pre-pass checks it), and
    /// each window is made of `size_ns / step_ns` panes of one step.
    Time {
        /// Window length in ns (the query gives ms).
        size_ns: u64,
        /// Distance between window starts in ns.
        step_ns: u64,
    },
    /// Tumbling count window of `size` events that passed the filter.
    Count {
        /// Events per window.
        size: u64,
        /// Events between window starts (equal to `size`).
        step: u64,
    },
}

impl WindowSpec {
    /// Panes per window: `size_ns / step_ns` for time windows (1 when
    /// tumbling), 1 for count windows. The kernel closes one generation per
    /// pane (every step); user space merges the last `panes()` of them.
    pub fn panes(&self) -> u64 {
        match *self {
            WindowSpec::Time { size_ns, step_ns } => size_ns / step_ns.max(1),
            WindowSpec::Count { .. } => 1,
        }
    }
}

/// An event named in FROM/JOIN, and the table identifier the rewritten SQL uses for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventRef {
    /// Table identifier in the rewritten SQL: the event name, or
    /// `category_name` when two events share a name.
    pub table: String,
    /// The parsed event name.
    pub event: EventName,
    /// Byte range of the name in the original query.
    pub span: Range<usize>,
}

/// Maps byte offsets of the rewritten SQL back to the original query.
#[derive(Debug, Clone, Default)]
pub struct SpanMap {
    /// (start in rewritten text, start in original text, length in original text)
    segments: Vec<(usize, usize, usize)>,
}

impl SpanMap {
    /// The segment a rewritten offset falls in.
    fn segment(&self, offset: usize) -> Option<(usize, usize, usize)> {
        self.segments
            .iter()
            .rev()
            .find(|(new, _, _)| *new <= offset)
            .copied()
    }

    /// Original offset of a rewritten offset (clamped into its segment).
    pub fn to_original(&self, offset: usize) -> usize {
        match self.segment(offset) {
            Some((new, orig, len)) => orig + (offset - new).min(len),
            None => 0,
        }
    }

    /// Original range of a rewritten range. Its end is taken in the segment
    /// of its last byte, and ends there at most: a replacement longer than
    /// what it replaced (`"args[6]"` for `args[6]`) maps to the original text.
    pub fn range_to_original(&self, r: Range<usize>) -> Range<usize> {
        let start = self.to_original(r.start);
        if r.end <= r.start {
            return start..start;
        }
        let end = match self.segment(r.end - 1) {
            Some((new, orig, len)) => orig + (r.end - new).min(len.max(1)),
            None => start,
        };
        start..end.max(start)
    }
}

/// Result of the pre-pass.
#[derive(Debug, Clone)]
pub struct Prepared {
    /// Standard SQL for sqlparser/DataFusion.
    pub sql: String,
    /// Maps byte offsets of `sql` back to the original query.
    pub map: SpanMap,
    /// Events named in FROM/JOIN, in order of appearance.
    pub events: Vec<EventRef>,
    /// The WINDOW clause, if any (cut from `sql`).
    pub window: Option<WindowSpec>,
    /// Byte range of the WINDOW clause in the original query.
    pub window_span: Option<Range<usize>>,
    /// Offset in the original query right after the last token `sql` keeps:
    /// where the parser's "unexpected end" is. Not always the end of the
    /// query: clauses may have been moved, the WINDOW clause cut.
    pub sql_end: usize,
}

struct Tok {
    token: Token,
    range: Range<usize>,
}

fn tokenize(query: &str) -> Result<Vec<Tok>, Diagnostic> {
    let dialect = GenericDialect {};
    let tokens = Tokenizer::new(&dialect, query)
        .tokenize_with_location()
        .map_err(|e| {
            let at = offset_of(query, e.location.line, e.location.column);
            let at = at.unwrap_or(query.len());
            let message = if e.message.contains("close delimiter '\"'") {
                "unterminated quoted name: a \" is not closed".to_string()
            } else if e.message.contains("multi-line comment") {
                "unterminated comment: a /* is not closed".to_string()
            } else {
                e.message.to_lowercase()
            };
            let span = at..(at + query[at..].chars().next().map_or(0, char::len_utf8));
            Diagnostic::new(format!("cannot read the query: {message}"), Some(span))
                .with_hint("check quotes and parentheses")
        })?;
    // Token positions come in order: walk the text once (offset_of per token
    // would be quadratic in the query length).
    let mut cursor = (1u64, 1u64, 0usize); // line, column, byte offset
    let mut chars = query.char_indices().peekable();
    let starts: Vec<usize> = tokens
        .iter()
        .map(|t| {
            let want = (t.span.start.line, t.span.start.column);
            while (cursor.0, cursor.1) < want {
                let Some((_, c)) = chars.next() else { break };
                cursor.2 += c.len_utf8();
                if c == '\n' {
                    cursor = (cursor.0 + 1, 1, cursor.2);
                } else {
                    cursor.1 += 1;
                }
            }
            if (cursor.0, cursor.1) == want {
                cursor.2
            } else {
                query.len()
            }
        })
        .collect();
    Ok(tokens
        .into_iter()
        .enumerate()
        .map(|(i, t)| {
            let end = starts.get(i + 1).copied().unwrap_or(query.len());
            Tok {
                token: t.token,
                range: starts[i]..end,
            }
        })
        .collect())
}

fn is_kw(t: &Token, kw: Keyword) -> bool {
    matches!(t, Token::Word(Word { keyword, quote_style: None, .. }) if *keyword == kw)
}

fn plain_word(t: &Token) -> Option<&str> {
    match t {
        Token::Word(w) if w.quote_style.is_none() => Some(&w.value),
        _ => None,
    }
}

/// Clause order rank for top-level clauses after FROM.
fn clause_rank(toks: &[Tok], i: usize) -> Option<u8> {
    let t = &toks[i].token;
    let next_is = |kw| next_significant(toks, i).is_some_and(|j| is_kw(&toks[j].token, kw));
    if is_kw(t, Keyword::FROM) && !prev_is(toks, i, Keyword::DISTINCT) {
        Some(0)
    } else if is_kw(t, Keyword::WHERE) {
        Some(1)
    } else if is_kw(t, Keyword::GROUP) && next_is(Keyword::BY) {
        Some(2)
    } else if is_kw(t, Keyword::HAVING) {
        Some(3)
    } else if is_kw(t, Keyword::ORDER) && next_is(Keyword::BY) {
        Some(4)
    } else if is_kw(t, Keyword::LIMIT) {
        Some(5)
    } else {
        None
    }
}

fn next_significant(toks: &[Tok], i: usize) -> Option<usize> {
    (i + 1..toks.len()).find(|&j| !matches!(toks[j].token, Token::Whitespace(_)))
}

/// True if the token before `i` (skipping whitespace) is the keyword `kw`:
/// `x IS [NOT] DISTINCT FROM y` has a FROM that is not the FROM clause.
fn prev_is(toks: &[Tok], i: usize, kw: Keyword) -> bool {
    (0..i)
        .rev()
        .find(|&j| !matches!(toks[j].token, Token::Whitespace(_)))
        .is_some_and(|j| is_kw(&toks[j].token, kw))
}

/// Most operators (binary, unary, AND/OR/NOT) a query may have. The planner
/// recurses once per level of an operator chain (`a+b+…` is a left-deep tree);
/// this cap keeps its stack use bounded on any input.
pub const MAX_OPERATORS: usize = 500;

/// Deepest parenthesis nesting a query may have (sqlparser stops at 50 levels
/// of any kind of nesting; this says where).
pub const MAX_PAREN_DEPTH: usize = 32;

fn is_operator(t: &Token) -> bool {
    matches!(
        t,
        Token::Eq
            | Token::DoubleEq
            | Token::Neq
            | Token::Lt
            | Token::Gt
            | Token::LtEq
            | Token::GtEq
            | Token::Plus
            | Token::Minus
            | Token::Mul
            | Token::Div
            | Token::Mod
            | Token::StringConcat
            | Token::Ampersand
            | Token::Pipe
            | Token::Caret
            | Token::ShiftLeft
            | Token::ShiftRight
            | Token::Tilde
            | Token::ExclamationMark
    ) || [Keyword::AND, Keyword::OR, Keyword::NOT]
        .iter()
        .any(|&kw| is_kw(t, kw))
}

/// Rejects inputs whose size would make the planner's recursion unbounded.
fn check_size(toks: &[Tok]) -> Result<(), Diagnostic> {
    let mut operators = 0;
    let mut depth = 0usize;
    for t in toks {
        if is_operator(&t.token) {
            operators += 1;
            if operators > MAX_OPERATORS {
                return Err(Diagnostic::new(
                    format!("the query has more than {MAX_OPERATORS} operators"),
                    Some(t.range.clone()),
                )
                .with_hint(
                    "split it into several queries, or use IN (…) for long lists of alternatives",
                ));
            }
        }
        match t.token {
            Token::LParen => depth += 1,
            Token::RParen => depth = depth.saturating_sub(1),
            _ => {}
        }
        if depth > MAX_PAREN_DEPTH {
            return Err(Diagnostic::new(
                format!("parentheses nest more than {MAX_PAREN_DEPTH} levels deep"),
                Some(t.range.clone()),
            )
            .with_hint("remove redundant parentheses"));
        }
    }
    Ok(())
}

/// Runs the pre-pass. Errors carry positions in `query`.
pub fn prepare(query: &str) -> Result<Prepared, Diagnostic> {
    let toks = tokenize(query)?;
    check_size(&toks)?;
    let mut skip = vec![false; toks.len()];
    let mut replace: Vec<Option<String>> = vec![None; toks.len()];
    // Where a replaced token's original text ends, when the replacement stands for a run of tokens.
    let mut run_end: Vec<Option<usize>> = vec![None; toks.len()];
    let mut events: Vec<EventRef> = Vec::new();
    let mut window = None;
    let mut window_span = None;

    // Pass 1: event names, `==`, WINDOW(...), trailing `;`.
    let mut depth = 0i32;
    let mut after_from = false;
    let mut from_list: Option<i32> = None; // paren depth of the FROM list being read
    let mut i = 0;
    while i < toks.len() {
        let t = &toks[i].token;
        match t {
            Token::LParen => depth += 1,
            Token::RParen => depth -= 1,
            Token::DoubleEq => replace[i] = Some("=".into()),
            _ => {}
        }
        if matches!(t, Token::Whitespace(_)) {
            i += 1;
            continue;
        }
        if after_from {
            after_from = false;
            if let Some((end, name_span, text)) = event_name_run(&toks, i, query) {
                let event = EventName::parse(&text)
                    .map_err(|e| crate::diag::catalog_diag(&e, name_span.clone()))?;
                let table = table_ident(&event, &events);
                for (k, s) in skip.iter_mut().enumerate().take(end + 1).skip(i) {
                    *s = k != i;
                }
                replace[i] = Some(format!("\"{table}\""));
                events.push(EventRef {
                    table,
                    event,
                    span: name_span,
                });
                i = end + 1;
                continue;
            }
        }
        if let Some(column) = array_element(&toks, i) {
            // `args[0]`: the element column the catalog names so (C's indexing).
            replace[i] = Some(format!("\"{column}\""));
            run_end[i] = Some(toks[i + 3].range.end);
            for s in &mut skip[i + 1..i + 4] {
                *s = true;
            }
            i += 4;
            continue;
        }
        if (is_kw(t, Keyword::FROM) && !prev_is(&toks, i, Keyword::DISTINCT))
            || is_kw(t, Keyword::JOIN)
        {
            after_from = true;
            from_list = Some(depth);
        } else if *t == Token::Comma && from_list == Some(depth) {
            after_from = true; // FROM a, b
        } else if matches!(t, Token::Word(w) if w.quote_style.is_none() && w.keyword != Keyword::NoKeyword && w.keyword != Keyword::AS)
            || from_list.is_some_and(|d| depth < d)
        {
            from_list = None; // WHERE, ON, GROUP, … (or the subquery's `)`) ends the FROM list
        }
        if depth == 0 && is_kw(t, Keyword::WINDOW) {
            if let Some(open) =
                next_significant(&toks, i).filter(|&j| toks[j].token == Token::LParen)
            {
                let (spec, close) = parse_window(&toks, i, open)?;
                let span = toks[i].range.start..toks[close].range.end;
                if window.is_some() {
                    return Err(Diagnostic::new(
                        "a query has at most one WINDOW clause",
                        Some(span),
                    )
                    .with_hint("remove one of the WINDOW clauses"));
                }
                if let Some(j) = next_significant(&toks, close) {
                    let next = &toks[j];
                    let ok = matches!(next.token, Token::EOF | Token::SemiColon)
                        || clause_rank(&toks, j).is_some()
                        || is_kw(&next.token, Keyword::WINDOW);
                    if !ok {
                        return Err(Diagnostic::new(
                            format!("unexpected `{}` after the WINDOW clause", next.token),
                            Some(next.range.clone()),
                        )
                        .with_hint(
                            "WINDOW(…) comes after the other clauses, at the end of the query",
                        ));
                    }
                }
                window = Some(spec);
                window_span = Some(span);
                for s in skip.iter_mut().take(close + 1).skip(i) {
                    *s = true;
                }
                i = close + 1;
                continue;
            }
        }
        if depth == 0 && *t == Token::SemiColon {
            if let Some(j) = next_significant(&toks, i) {
                if toks[j].token != Token::EOF {
                    return Err(Diagnostic::new(
                        "only one statement per query",
                        Some(toks[j].range.clone()),
                    )
                    .with_hint("remove everything after the ';'"));
                }
            }
            skip[i] = true;
        }
        i += 1;
    }

    // Pass 2: top-level clause spans, in the order written.
    let mut clauses: Vec<(u8, usize, usize)> = Vec::new(); // (rank, first token, last token)
    let mut depth = 0i32;
    let mut first_clause = None;
    let mut set_operation = false;
    for i in 0..toks.len() {
        match toks[i].token {
            Token::LParen => depth += 1,
            Token::RParen => depth -= 1,
            _ => {}
        }
        if depth != 0 || skip[i] {
            continue;
        }
        if [Keyword::UNION, Keyword::EXCEPT, Keyword::INTERSECT]
            .iter()
            .any(|&kw| is_kw(&toks[i].token, kw))
        {
            set_operation = true;
        }
        if let Some(rank) = clause_rank(&toks, i) {
            if let Some(last) = clauses.last_mut() {
                last.2 = i - 1;
            }
            first_clause.get_or_insert(i);
            clauses.push((rank, i, toks.len() - 1));
        }
    }
    if set_operation {
        // Several SELECTs, each with its own clauses: left in the order written
        // (standard SQL); the planner rejects queries over several scans anyway.
        clauses.clear();
        first_clause = None;
    }
    for (n, c) in clauses.iter().enumerate() {
        if let Some(first) = clauses[..n].iter().find(|d| d.0 == c.0) {
            let name = clause_name(&toks, first.1);
            return Err(Diagnostic::new(
                format!("the {name} clause appears twice"),
                Some(toks[c.1].range.clone()),
            )
            .with_hint(format!("a query has one {name} clause; combine the two")));
        }
    }
    for c in &clauses {
        check_clause_complete(&toks, &skip, c)?;
    }
    let mut order: Vec<usize> = (0..first_clause.unwrap_or(toks.len())).collect();
    let mut sorted = clauses.clone();
    sorted.sort_by_key(|c| c.0);
    for (_, a, b) in &sorted {
        order.extend(*a..=*b);
    }

    // Emit, recording where each piece came from.
    let mut sql = String::new();
    let mut map = SpanMap::default();
    let mut prev: Option<usize> = None;
    let mut sql_end = 0;
    for &k in &order {
        if skip[k] || toks[k].token == Token::EOF {
            continue;
        }
        let tok = &toks[k];
        let comment = matches!(
            tok.token,
            Token::Whitespace(
                Whitespace::SingleLineComment { .. } | Whitespace::MultiLineComment(_)
            )
        );
        if comment {
            // A `-- comment` runs to the end of its line; once clauses are
            // reordered it would swallow whatever is emitted after it.
            replace[k] = Some(" ".into());
        } else if !matches!(tok.token, Token::Whitespace(_)) {
            sql_end = tok.range.end;
        }
        if prev.is_some_and(|p| p + 1 != k) {
            // Clauses were moved: keep them apart.
            map.segments.push((sql.len(), tok.range.start, 0));
            sql.push(' ');
        }
        prev = Some(k);
        let orig_len = run_end[k].unwrap_or(tok.range.end) - tok.range.start;
        map.segments.push((sql.len(), tok.range.start, orig_len));
        match &replace[k] {
            Some(text) => sql.push_str(text),
            None => sql.push_str(&query[tok.range.clone()]),
        }
    }
    Ok(Prepared {
        sql,
        map,
        events,
        window,
        window_span,
        sql_end,
    })
}

/// `name[n]` starting at token `i` (an unquoted word, then `[`, an integer
/// and `]`, with nothing between): the column `name[n]`, an element of an
/// integer array field (see the catalog's `int_array_elements`).
fn array_element(toks: &[Tok], i: usize) -> Option<String> {
    let Token::Word(w) = &toks[i].token else {
        return None;
    };
    match toks
        .get(i + 1..i + 4)?
        .iter()
        .map(|t| &t.token)
        .collect::<Vec<_>>()
        .as_slice()
    {
        [Token::LBracket, Token::Number(n, false), Token::RBracket]
            if w.quote_style.is_none() && n.bytes().all(|b| b.is_ascii_digit()) =>
        {
            Some(format!("{}[{n}]", w.value))
        }
        _ => None,
    }
}

/// `WHERE`, `GROUP BY`, ... for the clause starting at token `i`.
fn clause_name(toks: &[Tok], i: usize) -> &'static str {
    match clause_rank(toks, i) {
        Some(0) => "FROM",
        Some(1) => "WHERE",
        Some(2) => "GROUP BY",
        Some(3) => "HAVING",
        Some(4) => "ORDER BY",
        _ => "LIMIT",
    }
}

/// A clause must not end in an operator, a comma or a keyword that needs
/// something after it (`WHERE fd ==`, `GROUP BY`, `... AND`). Checked here
/// because once clauses are reordered the parser would see the next clause
/// there and report a confusing error about it.
fn check_clause_complete(
    toks: &[Tok],
    skip: &[bool],
    clause: &(u8, usize, usize),
) -> Result<(), Diagnostic> {
    let &(rank, first, last) = clause;
    let Some(end) = (first..=last)
        .rev()
        .find(|&k| !skip[k] && !matches!(toks[k].token, Token::Whitespace(_) | Token::EOF))
    else {
        return Ok(());
    };
    let t = &toks[end].token;
    let operator = (is_operator(t) && *t != Token::ExclamationMark)
        || matches!(t, Token::Comma | Token::LParen);
    let needs_more = [
        Keyword::AND,
        Keyword::OR,
        Keyword::NOT,
        Keyword::WHERE,
        Keyword::BY,
        Keyword::HAVING,
        Keyword::LIMIT,
        Keyword::OFFSET,
        Keyword::ON,
        Keyword::IN,
        Keyword::LIKE,
        Keyword::ILIKE,
        Keyword::BETWEEN,
        Keyword::IS,
        Keyword::FROM,
        Keyword::JOIN,
        Keyword::AS,
        Keyword::CASE,
        Keyword::WHEN,
        Keyword::THEN,
        Keyword::ELSE,
    ];
    if !operator && !needs_more.iter().any(|&kw| is_kw(t, kw)) {
        return Ok(());
    }
    let expected = match rank {
        0 if is_kw(t, Keyword::FROM) || is_kw(t, Keyword::JOIN) => {
            "an event, e.g. tracepoint/syscalls/sys_enter_read"
        }
        5 if is_kw(t, Keyword::LIMIT) || is_kw(t, Keyword::OFFSET) => "a number",
        _ => "an expression",
    };
    let at = toks[end].range.end;
    let tail_is_empty = toks[end + 1..].iter().all(|t| {
        matches!(
            t.token,
            Token::Whitespace(_) | Token::EOF | Token::SemiColon
        )
    });
    let name = clause_name(toks, first);
    let (message, hint) = if tail_is_empty {
        (
            "unexpected end of query".to_string(),
            format!("the query ends here; expected {expected}"),
        )
    } else {
        (
            format!("unexpected end of the {name} clause"),
            format!("the {name} clause ends here; expected {expected}"),
        )
    };
    Err(Diagnostic::new(message, Some(at..at)).with_hint(hint))
}

/// Table identifier for an event: its name, or category_name when two events share a name.
fn table_ident(event: &EventName, seen: &[EventRef]) -> String {
    let clash = seen
        .iter()
        .any(|e| e.event.name == event.name && e.event != *event);
    if clash {
        format!("{}_{}", event.category, event.name)
    } else {
        event.name.clone()
    }
}

/// Recognizes an event name starting at token `i`: a word, `/` or `:`, then
/// every token up to the next whitespace, comma, parenthesis or `;` (paths
/// such as `uprobe:/usr/lib/x86_64-linux-gnu/libc.so.6:malloc` tokenize into
/// many pieces), or one double-quoted identifier holding `/` or `:`.
/// Returns (last token index, byte span, text).
fn event_name_run(toks: &[Tok], i: usize, query: &str) -> Option<(usize, Range<usize>, String)> {
    if let Token::Word(w) = &toks[i].token {
        if w.quote_style == Some('"') && (w.value.contains('/') || w.value.contains(':')) {
            return Some((i, toks[i].range.clone(), w.value.clone()));
        }
    }
    plain_word(&toks[i].token)?;
    if !toks
        .get(i + 1)
        .is_some_and(|t| matches!(t.token, Token::Div | Token::Colon | Token::DoubleColon))
    {
        return None;
    }
    let ends = |t: &Token| {
        matches!(
            t,
            Token::Whitespace(_)
                | Token::Comma
                | Token::LParen
                | Token::RParen
                | Token::SemiColon
                | Token::EOF
        )
    };
    let end = (i + 1..toks.len())
        .take_while(|&k| !ends(&toks[k].token))
        .last()?;
    let span = toks[i].range.start..toks[end].range.end;
    Some((end, span.clone(), query[span].to_string()))
}

/// Parses `WINDOW ( time|count , size , step )`; returns the spec and the index of `)`.
fn parse_window(toks: &[Tok], kw: usize, open: usize) -> Result<(WindowSpec, usize), Diagnostic> {
    let close = (open..toks.len())
        .find(|&j| toks[j].token == Token::RParen)
        .ok_or_else(|| {
            Diagnostic::new("WINDOW( is not closed", Some(toks[kw].range.clone()))
                .with_hint("write WINDOW(time, 1000, 1000) or WINDOW(count, 100, 100)")
        })?;
    // Arguments between the commas, each without its surrounding whitespace.
    let mut args: Vec<Vec<&Tok>> = vec![Vec::new()];
    for t in &toks[open + 1..close] {
        match t.token {
            Token::Comma => args.push(Vec::new()),
            Token::Whitespace(_) => {}
            _ => args.last_mut().expect("one argument at least").push(t),
        }
    }
    let span = toks[kw].range.start..toks[close].range.end;
    let usage = "write WINDOW(time, size_ms, step_ms) or WINDOW(count, n, n)";
    if args.len() != 3 || args.iter().any(|a| a.is_empty()) {
        return Err(Diagnostic::new(
            "WINDOW takes three arguments: kind, size and step",
            Some(span),
        )
        .with_hint(usage));
    }
    let arg_span = |a: &[&Tok]| a[0].range.start..a[a.len() - 1].range.end;
    let number = |a: &[&Tok]| -> Result<u64, Diagnostic> {
        match &a[0].token {
            Token::Number(n, _) if a.len() == 1 => n.parse::<u64>().ok().filter(|v| *v > 0),
            _ => None,
        }
        .ok_or_else(|| {
            Diagnostic::new("expected a positive integer", Some(arg_span(a))).with_hint(usage)
        })
    };
    let size = number(&args[1])?;
    let step = number(&args[2])?;
    if step > size {
        return Err(Diagnostic::new(
            "the window step is larger than its size",
            Some(arg_span(&args[2])),
        )
        .with_hint("the step must be at most the size; equal values give a tumbling window"));
    }
    let kind = match args[0].as_slice() {
        [t] => plain_word(&t.token).map(|w| w.to_ascii_lowercase()),
        _ => None,
    };
    let spec = match kind.as_deref() {
        Some("time") => {
            if size % step != 0 {
                // Panes of one step each: a window must be a whole number of them.
                let lower = size / step * step;
                return Err(Diagnostic::new(
                    format!("the window size ({size} ms) is not a multiple of its step ({step} ms)"),
                    Some(args[1][0].range.start..arg_span(&args[2]).end),
                )
                .with_hint(format!(
                    "a hopping window is made of size/step panes of one step each; use e.g. WINDOW(time, {}, {step}) or WINDOW(time, {lower}, {step})",
                    lower + step
                )));
            }
            crate::window_limits::check_time_window(
                size,
                step,
                args[1][0].range.start..arg_span(&args[2]).end,
                arg_span(&args[2]),
            )?;
            match size.checked_mul(1_000_000) {
                Some(size_ns) => WindowSpec::Time { size_ns, step_ns: step * 1_000_000 },
                None => {
                    return Err(Diagnostic::new("the window is longer than 584 years", Some(arg_span(&args[1])))
                        .with_hint("time windows are given in milliseconds"))
                }
            }
        }
        Some("count") if step < size => {
            return Err(Diagnostic::new("hopping count windows are not supported", Some(args[1][0].range.start..arg_span(&args[2]).end))
                .with_hint("count windows are tumbling (step equal to size, e.g. WINDOW(count, 100, 100)); hopping windows are time windows, e.g. WINDOW(time, 1000, 250)"))
        }
        Some("count") => WindowSpec::Count { size, step },
        _ => {
            return Err(Diagnostic::new("unknown window kind", Some(arg_span(&args[0])))
                .with_hint("the first argument is `time` (sizes in ms) or `count` (sizes in events)"))
        }
    };
    Ok((spec, close))
}

#[cfg(test)]
mod tests {
    use super::*;

    const FIG12: &str = "SELECT fd, cpu, COUNT(*), MAX(count), AVG(count)
                FROM tracepoint/syscalls/sys_enter_pread64
                GROUP BY fd, cpu WHERE pid == 1041370 WINDOW(time, 1000, 1000);";

    #[test]
    fn figure_12_becomes_standard_sql() {
        let p = prepare(FIG12).unwrap();
        let norm: String = p.sql.split_whitespace().collect::<Vec<_>>().join(" ");
        assert_eq!(
            norm,
            "SELECT fd, cpu, COUNT(*), MAX(count), AVG(count) FROM \"sys_enter_pread64\" WHERE pid = 1041370 GROUP BY fd, cpu"
        );
        assert_eq!(
            p.window,
            Some(WindowSpec::Time {
                size_ns: 1_000_000_000,
                step_ns: 1_000_000_000
            })
        );
        assert_eq!(p.events.len(), 1);
        assert_eq!(
            p.events[0].event.table_name(),
            "tracepoint/syscalls/sys_enter_pread64"
        );
        assert_eq!(
            &FIG12[p.events[0].span.clone()],
            "tracepoint/syscalls/sys_enter_pread64"
        );
    }

    #[test]
    fn positions_map_back_through_reordering() {
        let p = prepare(FIG12).unwrap();
        let at = p.sql.find("1041370").unwrap();
        let orig = p.map.range_to_original(at..at + 7);
        assert_eq!(&FIG12[orig], "1041370");
        let at = p.sql.find("cpu\n").or_else(|| p.sql.rfind("cpu")).unwrap();
        let orig = p.map.range_to_original(at..at + 3);
        assert_eq!(&FIG12[orig], "cpu");
    }

    #[test]
    fn hopping_time_windows_are_panes_of_one_step() {
        let p = prepare(
            "SELECT COUNT(*) FROM tracepoint/syscalls/sys_enter_pread64 WINDOW(time, 1000, 250)",
        )
        .unwrap();
        assert_eq!(
            p.window,
            Some(WindowSpec::Time {
                size_ns: 1_000_000_000,
                step_ns: 250_000_000
            })
        );
        assert_eq!(p.window.unwrap().panes(), 4);
        let e = prepare(
            "SELECT COUNT(*) FROM tracepoint/syscalls/sys_enter_pread64 WINDOW(time, 1000, 300)",
        )
        .unwrap_err();
        assert!(e.message.contains("not a multiple"), "{}", e.message);
        assert_eq!(
            e.hint
                .as_deref()
                .map(|h| h.contains("WINDOW(time, 1200, 300) or WINDOW(time, 900, 300)")),
            Some(true),
            "{:?}",
            e.hint
        );
    }

    #[test]
    fn bpftrace_names_and_strings_untouched() {
        let q = "select comm from tracepoint:sched:sched_switch where prev_comm = 'a==b' window(count, 10, 10)";
        let p = prepare(q).unwrap();
        assert!(p.sql.contains("'a==b'"), "{}", p.sql);
        assert_eq!(p.events[0].event.name, "sched_switch");
        assert_eq!(p.window, Some(WindowSpec::Count { size: 10, step: 10 }));
    }

    #[test]
    fn standard_order_is_kept() {
        let q = "SELECT fd, COUNT(*) FROM \"tracepoint/syscalls/sys_enter_pread64\" WHERE fd > 2 GROUP BY fd HAVING COUNT(*) > 1 ORDER BY fd LIMIT 3";
        let p = prepare(q).unwrap();
        assert_eq!(
            p.sql,
            "SELECT fd, COUNT(*) FROM \"sys_enter_pread64\" WHERE fd > 2 GROUP BY fd HAVING COUNT(*) > 1 ORDER BY fd LIMIT 3"
        );
        assert_eq!(p.window, None);
    }

    #[test]
    fn window_errors_are_positioned() {
        let q = "SELECT COUNT(*) FROM tracepoint/syscalls/sys_enter_read WINDOW(time, 1000, 400)";
        let e = prepare(q).unwrap_err();
        assert!(e.message.contains("not a multiple"), "{e:?}");
        assert_eq!(&q[e.span.unwrap()], "1000, 400");
        let q = "SELECT COUNT(*) FROM tracepoint/syscalls/sys_enter_read WINDOW(days, 1, 1)";
        let e = prepare(q).unwrap_err();
        assert_eq!(&q[e.span.unwrap()], "days");
    }

    fn normalized(q: &str) -> String {
        prepare(q)
            .unwrap()
            .sql
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// Regression: the clauses moved after a trailing `-- comment` were commented out.
    #[test]
    fn comments_never_swallow_moved_clauses() {
        let want = "SELECT fd, COUNT(*) FROM \"sys_enter_pread64\" WHERE pid = 1 GROUP BY fd";
        let ev = "tracepoint/syscalls/sys_enter_pread64";
        for q in [
            format!("SELECT fd, COUNT(*) FROM {ev} GROUP BY fd WHERE pid == 1 -- note"),
            format!("SELECT fd, COUNT(*) FROM {ev} GROUP BY fd WHERE pid == 1 /* note */"),
            format!("SELECT fd, COUNT(*) FROM {ev} GROUP BY fd /* c */ WHERE pid == 1"),
            format!("SELECT fd, COUNT(*) FROM {ev} -- a\nGROUP BY fd -- b\nWHERE pid == 1 -- c"),
            format!("SELECT fd, COUNT(*) FROM {ev} GROUP BY fd WINDOW(time, 1000, 1000) -- w\nWHERE pid == 1"),
            format!("SELECT fd, COUNT(*) FROM {ev} GROUP /* x */ BY fd WHERE pid == 1 WINDOW(time, 1000, 1000) -- w"),
            format!("SELECT fd, COUNT(*) FROM {ev} GROUP BY fd WHERE pid == 1 WINDOW(time, 1000, 1000)-- w"),
        ] {
            assert_eq!(normalized(&q), want, "{q}");
        }
    }

    /// Regression: an unexpected end had no position.
    #[test]
    fn incomplete_clauses_point_right_after_their_last_token() {
        let q = "SELECT fd, COUNT(*) FROM tracepoint/syscalls/sys_enter_pread64 GROUP BY fd, WHERE pid == 1";
        let e = prepare(q).unwrap_err();
        assert_eq!(
            e.span,
            Some(q.find(", WHERE").unwrap() + 1..q.find(", WHERE").unwrap() + 1)
        );
        assert_eq!(
            e.hint.as_deref(),
            Some("the GROUP BY clause ends here; expected an expression")
        );
        let q = "SELECT fd FROM tracepoint/syscalls/sys_enter_pread64 WHERE fd ==  -- c";
        let e = prepare(q).unwrap_err();
        assert_eq!(
            e.span,
            Some(q.find("==").unwrap() + 2..q.find("==").unwrap() + 2)
        );
        assert_eq!(e.message, "unexpected end of query");
    }

    #[test]
    fn array_elements_become_their_columns() {
        let p = prepare("SELECT e.args[0], args[5] FROM tracepoint/raw_syscalls/sys_enter AS e WHERE args [1] > 2").unwrap();
        assert!(
            p.sql.contains(r#"e."args[0]""#) && p.sql.contains(r#", "args[5]""#),
            "{}",
            p.sql
        );
        // Only `name[integer]` written without spaces is an element.
        assert!(p.sql.contains("args [1]"), "{}", p.sql);
        let at = p.sql.find("\"args[5]\"").unwrap();
        assert_eq!(p.map.to_original(at), "SELECT e.args[0], ".len());
    }

    #[test]
    fn second_statement_rejected() {
        let q = "SELECT 1 FROM tracepoint/a/b; SELECT 2";
        let e = prepare(q).unwrap_err();
        assert_eq!(&q[e.span.unwrap()], "SELECT");
    }
}
