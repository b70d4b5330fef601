//! Views (issue 21, item 2): `CREATE VIEW name AS SELECT …;` statements
//! before a query (in its text, or from `--views FILE`, which the CLI puts
//! before it), and the views that ship with eBQL ([`BUILTIN`]).
//!
//! A view is expanded into the query's text before anything is planned:
//! `FROM name [alias]` becomes `FROM (its SELECT) AS alias`. DataFusion then
//! plans one query, so the kernel still runs the filters, aggregates and
//! pairings the view's events allow, the user's conditions included.
//!
//! Errors keep pointing at what the user wrote ([`Expanded::remap`]): a
//! position in the query maps back through the expansion; one inside a
//! view's text points at the view's definition in the query (or at the
//! name that used a built-in view), the message saying which view.

use crate::diag::{offset_of, Diagnostic};
use crate::error::CompileError;
use datafusion::sql::sqlparser::dialect::GenericDialect;
use datafusion::sql::sqlparser::keywords::Keyword;
use datafusion::sql::sqlparser::tokenizer::{Token, TokenWithSpan, Tokenizer};
use std::ops::Range;

/// A built-in view: its name, what it is, its SELECT.
pub struct BuiltinView {
    /// The name in FROM, lowercase, maybe dotted (`syscalls.socket_reads`).
    pub name: &'static str,
    /// One line for `ebql events` and the docs.
    pub doc: &'static str,
    /// The SELECT it stands for.
    pub sql: &'static str,
}

/// The views that ship with eBQL.
pub const BUILTIN: [BuiltinView; 2] = [
    BuiltinView {
        name: "syscalls.socket_reads",
        doc: "each recvfrom(2) that returned bytes: when, who, the socket, how many, and the first 512 of them (read when the call returned)",
        sql: "SELECT x.time AS time, x.pid AS pid, x.tid AS tid, x.comm AS comm, e.fd AS fd, \
              x.ret AS len, bytes(e.ubuf, x.ret, 512) AS data, truncated(bytes(e.ubuf, x.ret, 512)) AS data_truncated \
              FROM tracepoint:syscalls:sys_enter_recvfrom e \
              JOIN tracepoint:syscalls:sys_exit_recvfrom x ON e.tid = x.tid WHERE x.ret > 0",
    },
    BuiltinView {
        name: "syscalls.socket_writes",
        doc: "each sendto(2): when, who, the socket, how many bytes were asked to be sent, and the first 512 of them",
        sql: "SELECT time, pid, tid, comm, fd, len, bytes(buff, len, 512) AS data, \
              truncated(bytes(buff, len, 512)) AS data_truncated \
              FROM tracepoint:syscalls:sys_enter_sendto",
    },
];

/// A view the query's text defines.
#[derive(Clone, Debug)]
struct Defined {
    /// The name, lowercase.
    name: String,
    /// Where its SELECT is in the text.
    body: Range<usize>,
}

/// Where an expansion put a view's text, for [`Expanded::remap`].
#[derive(Clone, Debug)]
struct Inlined {
    /// The view's SELECT in the expanded text.
    at: Range<usize>,
    /// The view.
    name: String,
    /// Where the text came from in the user's text: a defined view's body
    /// (positions map into it), or `None` for a built-in one.
    body: Option<usize>,
    /// The name that used it, in the user's text.
    used_at: Range<usize>,
}

/// A query with its views expanded.
#[derive(Clone, Debug)]
pub struct Expanded {
    /// What is planned: the query after the definitions, views inlined.
    pub text: String,
    /// Each piece of `text` copied from the user's text: (start in `text`, start in the user's, length).
    copied: Vec<(usize, usize, usize)>,
    inlined: Vec<Inlined>,
}

/// Most views one query may expand (nested ones included): a view that
/// uses itself, directly or not, is an error before this.
const MAX_EXPANSIONS: usize = 64;

/// The tokens of `text`; a tokenizer error has no span (the pre-pass,
/// which then sees the same text, reports it with its position).
fn tokens(text: &str) -> Result<Vec<TokenWithSpan>, Diagnostic> {
    Tokenizer::new(&GenericDialect {}, text)
        .tokenize_with_location()
        .map_err(|e| Diagnostic::new(e.message, None))
}

/// The byte range of a token in `text`.
fn range(text: &str, t: &TokenWithSpan) -> Option<Range<usize>> {
    let start = offset_of(text, t.span.start.line, t.span.start.column)?;
    let end = offset_of(text, t.span.end.line, t.span.end.column)?;
    Some(start..end)
}

fn significant(toks: Vec<TokenWithSpan>) -> Vec<TokenWithSpan> {
    toks.into_iter()
        .filter(|t| !matches!(t.token, Token::Whitespace(_)))
        .collect()
}

fn is_kw(t: &Token, k: Keyword) -> bool {
    matches!(t, Token::Word(w) if w.keyword == k && w.quote_style.is_none())
}

/// A name at `toks[i..]`: `a` or `a.b` (plain words); its lowercase text,
/// the index after it and its byte range.
fn name_at(text: &str, toks: &[TokenWithSpan], i: usize) -> Option<(String, usize, Range<usize>)> {
    let Token::Word(a) = &toks.get(i)?.token else {
        return None;
    };
    let first = range(text, &toks[i])?;
    if let (Some(Token::Period), Some(Token::Word(b))) = (
        toks.get(i + 1).map(|t| &t.token),
        toks.get(i + 2).map(|t| &t.token),
    ) {
        let last = range(text, &toks[i + 2])?;
        return Some((
            format!("{}.{}", a.value, b.value).to_ascii_lowercase(),
            i + 3,
            first.start..last.end,
        ));
    }
    Some((a.value.to_ascii_lowercase(), i + 1, first))
}

/// Splits the leading `CREATE VIEW name AS …;` statements off `text`:
/// the views and where the query after them begins.
fn definitions(text: &str) -> Result<(Vec<Defined>, usize), Diagnostic> {
    let toks = significant(tokens(text)?);
    let mut defs: Vec<Defined> = Vec::new();
    let mut i = 0;
    let mut query_start = 0;
    while is_kw(
        &toks.get(i).map_or(Token::EOF, |t| t.token.clone()),
        Keyword::CREATE,
    ) {
        let create = range(text, &toks[i]).unwrap_or(0..0);
        let bad = |msg: &str| {
            Diagnostic::new(msg, Some(create.clone()))
                .with_hint("define a view as CREATE VIEW name AS SELECT …; before the query")
        };
        if !toks
            .get(i + 1)
            .is_some_and(|t| is_kw(&t.token, Keyword::VIEW))
        {
            let what = toks
                .get(i + 1)
                .map_or(String::new(), |t| format!(" {}", t.token));
            return Err(bad(&format!(
                "CREATE{what} is not supported: only CREATE VIEW may come before the query"
            )));
        }
        let (name, after, name_range) =
            name_at(text, &toks, i + 2).ok_or_else(|| bad("CREATE VIEW needs a name"))?;
        if !toks
            .get(after)
            .is_some_and(|t| is_kw(&t.token, Keyword::AS))
        {
            return Err(bad("CREATE VIEW name needs AS SELECT …"));
        }
        let mut depth = 0i32;
        let mut end = after + 1;
        while let Some(t) = toks.get(end) {
            match t.token {
                Token::LParen => depth += 1,
                Token::RParen => depth -= 1,
                Token::SemiColon | Token::EOF if depth <= 0 => break,
                _ => {}
            }
            end += 1;
        }
        if toks.get(end).is_none_or(|t| t.token != Token::SemiColon) {
            return Err(bad(
                "a view's definition ends with `;`, and the query follows it",
            ));
        }
        let body_start = toks
            .get(after + 1)
            .and_then(|t| range(text, t))
            .map_or(0, |r| r.start);
        let body_end = range(text, &toks[end]).map_or(text.len(), |r| r.start);
        if defs.iter().any(|d| d.name == name) {
            return Err(Diagnostic::new(
                format!("view `{name}` is defined twice"),
                Some(name_range),
            )
            .with_hint("give each view its own name"));
        }
        defs.push(Defined {
            name,
            body: body_start..body_end.max(body_start),
        });
        query_start = range(text, &toks[end]).map_or(text.len(), |r| r.end);
        i = end + 1;
    }
    Ok((defs, query_start))
}

/// The query in `text` with its views expanded (the ones `text` defines
/// before it, then [`BUILTIN`]). A text without views comes back as is.
///
/// Errors: a malformed definition, a view that uses itself.
pub fn expand(text: &str) -> Result<Expanded, Diagnostic> {
    let (defs, query_start) = definitions(text)?;
    let mut out = Expanded {
        text: String::new(),
        copied: Vec::new(),
        inlined: Vec::new(),
    };
    let mut budget = MAX_EXPANSIONS;
    expand_into(
        text,
        query_start..text.len(),
        &defs,
        &mut Vec::new(),
        &mut out,
        None,
        &mut budget,
    )?;
    Ok(out)
}

/// Appends `text[part]` to `out`, each view it reads after FROM/JOIN
/// replaced by its SELECT in parentheses. `stack`: the views being
/// expanded (a cycle is an error). `in_view`: the name that brought
/// `part` in, when `part` is a view's body (its positions are copied
/// only when the body is the user's).
fn expand_into(
    text: &str,
    part: Range<usize>,
    defs: &[Defined],
    stack: &mut Vec<String>,
    out: &mut Expanded,
    in_view: Option<Range<usize>>,
    budget: &mut usize,
) -> Result<(), Diagnostic> {
    let piece = &text[part.clone()];
    let toks = significant(tokens(piece)?);
    let mut cursor = 0; // in `piece`
    let mut i = 0;
    while i < toks.len() {
        let after_from =
            is_kw(&toks[i].token, Keyword::FROM) || is_kw(&toks[i].token, Keyword::JOIN);
        i += 1;
        if !after_from {
            continue;
        }
        let Some((name, next, at)) = name_at(piece, &toks, i) else {
            continue;
        };
        let defined = defs.iter().find(|d| d.name == name);
        let builtin = BUILTIN.iter().find(|b| b.name == name);
        if defined.is_none() && builtin.is_none() {
            continue;
        }
        let used_at = in_view
            .clone()
            .unwrap_or(part.start + at.start..part.start + at.end);
        if stack.contains(&name) {
            return Err(Diagnostic::new(
                format!("view `{name}` uses itself ({} → {name})", stack.join(" → ")),
                Some(used_at),
            )
            .with_hint("a view may use other views, never itself"));
        }
        if *budget == 0 {
            return Err(Diagnostic::new("views nest too deeply", Some(used_at)));
        }
        *budget -= 1;
        copy(
            text,
            part.start + cursor..part.start + at.start,
            in_view.is_none(),
            out,
        );
        out.text.push('(');
        let start = out.text.len();
        stack.push(name.clone());
        match (defined, builtin) {
            (Some(d), _) => {
                let before = out.copied.len();
                expand_into(
                    text,
                    d.body.clone(),
                    defs,
                    stack,
                    out,
                    Some(used_at.clone()),
                    budget,
                )?;
                // A defined view's own text maps back into its definition.
                out.copied.truncate(before);
                // Positions map into the body only when it was copied as is.
                let verbatim = out.text[start..] == text[d.body.clone()];
                out.inlined.push(Inlined {
                    at: start..out.text.len(),
                    name: name.clone(),
                    body: verbatim.then_some(d.body.start),
                    used_at: used_at.clone(),
                });
            }
            (None, Some(b)) => {
                let before = out.copied.len();
                let mut sub = Expanded {
                    text: String::new(),
                    copied: Vec::new(),
                    inlined: Vec::new(),
                };
                expand_into(
                    b.sql,
                    0..b.sql.len(),
                    defs,
                    stack,
                    &mut sub,
                    Some(used_at.clone()),
                    budget,
                )?;
                out.text.push_str(&sub.text);
                out.copied.truncate(before);
                out.inlined.push(Inlined {
                    at: start..out.text.len(),
                    name: name.clone(),
                    body: None,
                    used_at: used_at.clone(),
                });
            }
            (None, None) => unreachable!("checked above"),
        }
        stack.pop();
        out.text.push(')');
        // Keep the user's alias; else the view's last name part is one.
        let has_alias = match toks.get(next).map(|t| &t.token) {
            Some(Token::Word(w)) => w.keyword == Keyword::AS || w.keyword == Keyword::NoKeyword,
            _ => false,
        };
        if !has_alias {
            let alias = name.rsplit('.').next().unwrap_or(&name);
            out.text.push_str(&format!(" AS \"{alias}\""));
        }
        cursor = at.end;
        i = next;
    }
    copy(text, part.start + cursor..part.end, in_view.is_none(), out);
    Ok(())
}

/// Appends `text[r]`; `mapped`: its positions map back to the user's text.
fn copy(text: &str, r: Range<usize>, mapped: bool, out: &mut Expanded) {
    if mapped && !r.is_empty() {
        out.copied.push((out.text.len(), r.start, r.len()));
    }
    out.text.push_str(&text[r]);
}

impl Expanded {
    /// True when the expansion changed nothing but the definitions' removal.
    pub fn is_plain(&self) -> bool {
        self.inlined.is_empty()
    }

    /// A position of [`Expanded::text`] in the user's text: through a copied
    /// piece, into a defined view's body, or the name that used a built-in
    /// view (with that view's name).
    fn position(&self, at: usize) -> (Option<usize>, Option<&Inlined>) {
        if let Some(v) = self
            .inlined
            .iter()
            .filter(|v| v.at.contains(&at) || v.at.end == at)
            .min_by_key(|v| v.at.len())
        {
            return (v.body.map(|b| b + (at - v.at.start)), Some(v));
        }
        let hit = self
            .copied
            .iter()
            .find(|(s, _, len)| (*s..=*s + *len).contains(&at))
            .map(|(s, o, _)| o + (at - s));
        (hit, None)
    }

    /// `e` with its position in the user's text: errors are found in the
    /// expanded text, shown in what the user wrote.
    pub fn remap(&self, e: CompileError) -> CompileError {
        let CompileError::Query(mut d) = e else {
            return e;
        };
        if let Some(span) = d.span.clone() {
            let (start, view) = self.position(span.start);
            let (end, _) = self.position(span.end);
            match (start, end, view) {
                (Some(s), Some(e), Some(v)) if v.body.is_some() && e >= s => {
                    d.message = format!("in view `{}`: {}", v.name, d.message);
                    d.span = Some(s..e);
                }
                (_, _, Some(v)) => {
                    d.message = format!("in view `{}`: {}", v.name, d.message);
                    d.span = Some(v.used_at.clone());
                }
                (Some(s), Some(e), None) if e >= s => d.span = Some(s..e),
                _ => d.span = None,
            }
        }
        CompileError::Query(d)
    }
}

/// Runs `compile` on `query` with its views expanded, errors pointing
/// into `query` ([`Expanded::remap`]); a query without views is compiled
/// as is.
pub fn with_views<T>(
    query: &str,
    compile: impl FnOnce(&str) -> Result<T, CompileError>,
) -> Result<T, CompileError> {
    let expanded = match expand(query) {
        Ok(e) => e,
        // Text the tokenizer refuses: the pre-pass says where and why.
        Err(d) if d.span.is_none() => return compile(query),
        Err(d) => return Err(CompileError::Query(d)),
    };
    if expanded.is_plain() && expanded.text == query {
        return compile(query);
    }
    compile(&expanded.text).map_err(|e| expanded.remap(e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_query_without_views_is_unchanged() {
        let q = "SELECT pid FROM tracepoint:syscalls:sys_enter_read WHERE fd = 3";
        let e = expand(q).unwrap();
        assert_eq!(e.text, q);
        assert!(e.is_plain());
    }

    #[test]
    fn a_defined_view_is_inlined_with_the_users_alias_or_its_name() {
        let q = "CREATE VIEW reads AS SELECT pid, fd FROM tracepoint:syscalls:sys_enter_read;\n\
                 SELECT r.fd FROM reads r WHERE r.pid = 7";
        let e = expand(q).unwrap();
        assert_eq!(
            e.text,
            "\nSELECT r.fd FROM (SELECT pid, fd FROM tracepoint:syscalls:sys_enter_read) r WHERE r.pid = 7"
        );
        let q = "CREATE VIEW reads AS SELECT pid FROM tracepoint:syscalls:sys_enter_read; SELECT pid FROM reads";
        assert!(expand(q)
            .unwrap()
            .text
            .ends_with("FROM (SELECT pid FROM tracepoint:syscalls:sys_enter_read) AS \"reads\""));
    }

    #[test]
    fn builtin_views_and_views_of_views_expand() {
        let q = "CREATE VIEW big AS SELECT * FROM syscalls.socket_writes WHERE len > 100; SELECT COUNT(*) FROM big";
        let e = expand(q).unwrap();
        assert!(
            e.text.contains("FROM (SELECT * FROM (SELECT time, pid"),
            "{}",
            e.text
        );
        assert!(
            e.text
                .contains("sys_enter_sendto) AS \"socket_writes\" WHERE len > 100) AS \"big\""),
            "{}",
            e.text
        );
    }

    #[test]
    fn a_view_that_uses_itself_is_an_error() {
        let q =
            "CREATE VIEW a AS SELECT * FROM b; CREATE VIEW b AS SELECT * FROM a; SELECT * FROM a";
        let d = expand(q).unwrap_err();
        assert!(d.message.contains("uses itself"), "{}", d.message);
    }

    /// An error inside a defined view points into its definition; one in
    /// the query after the definitions, into the query.
    #[test]
    fn errors_point_at_what_the_user_wrote() {
        let q = "CREATE VIEW v AS SELECT nosuch FROM t; SELECT x FROM v";
        let e = expand(q).unwrap();
        let in_view = e.text.find("nosuch").unwrap();
        let err = e.remap(CompileError::Query(Diagnostic::new(
            "unknown",
            Some(in_view..in_view + 6),
        )));
        let CompileError::Query(d) = err else {
            panic!()
        };
        assert_eq!(&q[d.span.clone().unwrap()], "nosuch");
        assert!(d.message.starts_with("in view `v`"), "{}", d.message);
        let x = e.text.rfind("x FROM").unwrap();
        let CompileError::Query(d) =
            e.remap(CompileError::Query(Diagnostic::new("bad", Some(x..x + 1))))
        else {
            panic!()
        };
        assert_eq!(&q[d.span.unwrap()], "x");
        let q = "SELECT nope FROM syscalls.socket_reads";
        let e = expand(q).unwrap();
        let at = e.text.find("bytes(").unwrap();
        let CompileError::Query(d) = e.remap(CompileError::Query(Diagnostic::new(
            "bad",
            Some(at..at + 5),
        ))) else {
            panic!()
        };
        assert_eq!(&q[d.span.unwrap()], "syscalls.socket_reads");
    }

    #[test]
    fn malformed_definitions_say_how_to_write_one() {
        for q in [
            "CREATE TABLE t (x INT); SELECT 1",
            "CREATE VIEW v SELECT 1; SELECT 1",
            "CREATE VIEW v AS SELECT 1",
        ] {
            let d = expand(q).unwrap_err();
            assert!(d.hint.is_some(), "{q}: {}", d.message);
        }
    }
}
