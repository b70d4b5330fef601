//! Responses whose rows were not captured: a write's header fell in the
//! bytes the probe did not capture (a result longer than its buffer), and
//! the response is finished from the last bytes of the write that ends it
//! ([`Chunk::tail`](crate::Chunk::tail)), when that is certain.
//!
//! # The rule
//!
//! When a header of the writes falls in a write's uncaptured gap, the
//! connection's reads and writes being framed, the client's last message
//! read whole, and the write carrying a tail, and exactly one request
//! awaits its response — one Query, or one Execute and the Sync after it
//! (everything before the Execute in its batch already answered) — the
//! connection is *inside a response whose rows were not captured*: its
//! writes are consumed, uncounted (their missing bytes are in
//! `bytes_not_captured`), until one *ends* with a ReadyForQuery: the last
//! 6 bytes of its tail (or of its `data` when all of it was captured) are
//! `Z`, length 5, status `I`, `T` or `E`. A write captured whole follows
//! the captured end of the write before it (its tail, or all of it), and
//! the two are read as one: the last message may straddle two writes. In
//! those captured bytes, the
//! message ending exactly where the `Z` starts must be found whole and be
//! valid: a CommandComplete (length 5..1024, a tag of printable ASCII
//! beginning with a capital letter, one NUL, at its end), an ErrorResponse
//! (well-formed fields of known codes, a 5-character SQLSTATE, a severity
//! and a message, its terminator at its end) or, for an Execute, an
//! EmptyQueryResponse. It and the ReadyForQuery are then handed to the
//! session as if framed: the row is the one a complete capture would give
//! (its end time the write's), and the connection is framed again.
//!
//! Anything else keeps the behaviour without tails (the framing lost,
//! counted): another request pending (pipelining), a PortalSuspended (its
//! row count is the DataRows not captured), a ParameterStatus or
//! NoticeResponse between the last message and the ReadyForQuery, a last
//! message beginning before the captured bytes (a long error), a read
//! while inside the response (the client did not wait for the end: the
//! assumption failed), the connection closed. The writes consumed are then
//! counted as they would have been (skipped, unmatched), with the desync
//! and the dropped request.
//!
//! # A Query of several statements
//!
//! Its row's `rows` is the sum of every CommandComplete's count, and only
//! the last one is captured. Its `tag` (the last one's) and `error` do not
//! depend on the others (an error ends the Query: nothing follows it but
//! the ReadyForQuery), so they are given; `rows` is given only when the
//! Query certainly held one statement — its text captured whole, with no
//! `;` but in its trailing `;`s and blanks (the server splits a Query's
//! statements at `;` only), and no CommandComplete seen before the gap —
//! and is `None` otherwise, as for a tag not captured whole.
//!
//! # Residual risk
//!
//! A write that is not the response's last whose last bytes happen to
//! spell a valid CommandComplete (or ErrorResponse) and ReadyForQuery:
//! values inside a DataRow (a binary-format `bytea` holding exactly those
//! bytes) ending exactly at a write's end. The row would be made early,
//! with the spelled tag, and the response's real rest would then lose the
//! framing. This is accepted because it needs such values exactly at a
//! write's boundary: in text format a value holds no NUL, so the NULs of
//! `\0 Z \0 \0 \0 \5` (then `I`, `T` or `E`, after a capitalized
//! printable tag and a `C` and length) must come from the DataRow headers
//! between the values, which leaves only contrived layouts (we found none
//! short of a DataRow of 512 MiB); binary results need the exact bytes at
//! the exact offset where the server's send buffer happened to be
//! flushed. PostgreSQL flushes its output at each ReadyForQuery
//! (`ReadyForQuery` in `dest.c` calls `pq_flush`) and then waits for the
//! client, so a real ReadyForQuery always ends a write, while a write
//! inside a response ends where the 8 KiB send buffer filled (or the
//! socket took less), not where a message ends. A cheap guard beyond the
//! strict validation above was not found: delaying the row to the next
//! read would hold it for as long as the connection idles.

use super::backend;
use super::message::Message;
use super::session::{Desync, Pending, Query, Session};
use crate::{Counters, Statement};

/// Field codes of an ErrorResponse (PostgreSQL documentation, 55.8 "Error
/// and Notice Message Fields").
const ERROR_FIELDS: &[u8] = b"SVCMDHPpqWstcdnFLR";

fn be32(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}

/// A CommandComplete's body: a tag of printable ASCII beginning with a
/// capital letter, and its NUL, at the end only.
fn tag_valid(body: &[u8]) -> bool {
    match body.split_last() {
        Some((0, tag)) => {
            tag.first().is_some_and(u8::is_ascii_uppercase)
                && tag.iter().all(|&b| (0x20..=0x7e).contains(&b))
        }
        _ => false,
    }
}

/// An ErrorResponse's body: fields of known codes, each a NUL-terminated
/// value, then the terminating NUL at the end; a severity, a 5-character
/// SQLSTATE and a message among them.
fn error_valid(body: &[u8]) -> bool {
    let (mut severity, mut sqlstate, mut message) = (false, false, false);
    let mut rest = body;
    loop {
        let Some((&code, tail)) = rest.split_first() else {
            return false;
        };
        if code == 0 {
            return tail.is_empty() && severity && sqlstate && message;
        }
        if !ERROR_FIELDS.contains(&code) {
            return false;
        }
        let Some(n) = tail.iter().position(|&b| b == 0) else {
            return false;
        };
        let value = &tail[..n];
        match code {
            b'S' | b'V' => severity |= !value.is_empty(),
            b'C' => {
                sqlstate = value.len() == 5
                    && value
                        .iter()
                        .all(|b| b.is_ascii_digit() || b.is_ascii_uppercase());
            }
            b'M' => message = true,
            _ => {}
        }
        rest = &tail[n + 1..];
    }
}

/// The message that ends where the ReadyForQuery ending `end` begins,
/// whole in `end` and valid: its type (`C`, `E` or `I`) and body. `None`
/// when `end` does not end with a ReadyForQuery, when no such message is
/// in it, or (never seen: the NULs of a short length field cannot sit
/// inside another candidate's body) when several are.
pub(super) fn last_message(end: &[u8]) -> Option<(u8, &[u8])> {
    if !backend::ends_ready(end) {
        return None;
    }
    let z = end.len() - 6;
    let before = &end[..z];
    let mut found = None;
    for s in (0..(z + 1).saturating_sub(5)).rev() {
        let typ = before[s];
        if !matches!(typ, b'C' | b'E' | b'I') {
            continue;
        }
        let len = be32(&before[s + 1..s + 5]);
        if u64::from(len) + 1 != (z - s) as u64 || !backend::valid_header(typ, len) {
            continue;
        }
        let body = &before[s + 5..];
        let valid = match typ {
            b'C' => tag_valid(body),
            b'E' => error_valid(body),
            _ => body.is_empty(),
        };
        if valid {
            if found.is_some() {
                return None;
            }
            found = Some((typ, body));
        }
    }
    found
}

/// The Query certainly held one statement (so one CommandComplete): its
/// text whole, no `;` but in its trailing `;`s and blanks, and no
/// CommandComplete seen yet.
fn single_statement(q: &Query) -> bool {
    if q.truncated || q.tag.is_some() || q.rows.is_some() || q.rows_lost {
        return false;
    }
    let t = &q.text;
    let end = t
        .iter()
        .rposition(|&b| b != b';' && !b.is_ascii_whitespace())
        .map_or(0, |i| i + 1);
    !t[..end].contains(&b';')
}

impl Session {
    /// Exactly one request awaits its response, whose end a write's last
    /// bytes can give: one Query, or one Execute and the Sync after it.
    pub fn one_outstanding(&self) -> bool {
        if self.copy_in || self.discard {
            return false;
        }
        let mut p = self.pending.iter();
        matches!(
            (p.next(), p.next(), p.next()),
            (Some(Pending::Query(_)), None, _)
                | (Some(Pending::Execute { .. }), Some(Pending::Sync), None)
        )
    }

    /// Finishes the one outstanding request from `end`, the last captured
    /// bytes of the write at `time_ns` that ends its response (they end
    /// with a ReadyForQuery): its row, as a complete capture would make it.
    /// `Err` (nothing changed) when the message before the ReadyForQuery is
    /// not found whole and valid, or cannot end that request.
    pub fn finish_uncaptured(
        &mut self,
        end: &[u8],
        time_ns: u64,
        counters: &mut Counters,
        out: &mut Vec<Statement>,
    ) -> Result<(), Desync> {
        if !self.one_outstanding() {
            return Err(Desync);
        }
        let (typ, body) = last_message(end).ok_or(Desync)?;
        match self.pending.front_mut() {
            Some(Pending::Query(q)) => {
                // An EmptyQueryResponse answers an empty Query, whose
                // response is never long: not the end of this one.
                if typ == b'I' {
                    return Err(Desync);
                }
                if !single_statement(q) {
                    // The other statements' counts were not captured.
                    q.rows_lost = true;
                }
            }
            Some(Pending::Execute { .. }) => {}
            _ => return Err(Desync),
        }
        let m = Message {
            typ,
            body,
            len: body.len() as u32,
        };
        self.response(&m, time_ns, false, counters, out)?;
        let ready = Message {
            typ: b'Z',
            body: &end[end.len() - 1..],
            len: 1,
        };
        self.response(&ready, time_ns, false, counters, out)
    }
}
