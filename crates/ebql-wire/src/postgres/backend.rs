//! The server's messages (PostgreSQL documentation, 55.7 "Message
//! Formats", the messages marked B): which headers are valid, what to keep
//! of a message split across chunks, and the content the decoder reads:
//! CommandComplete's tag, ErrorResponse's fields (55.8 "Error and Notice
//! Message Fields"), ReadyForQuery's status.

use super::limits::MAX_MESSAGE;
use crate::StatementError;

/// The bytes of an ErrorResponse kept when it is split across chunks: its
/// severity, SQLSTATE and message come first.
const ERROR_KEEP: u32 = 4096;
/// The bytes of a CommandComplete kept (its tag is short).
const TAG_KEEP: u32 = 256;

/// Whether a backend header is valid: a known type and a length (which
/// counts itself) allowed for it.
pub(super) fn valid_header(typ: u8, len: u32) -> bool {
    let min = match typ {
        b'Z' => return len == 5,
        b'1' | b'2' | b'3' | b'n' | b's' | b'I' | b'c' => return len == 4,
        // Process id and a secret key of 4 (protocol 3.0) to 256 bytes (3.2).
        b'K' => return (12..=268).contains(&len),
        // Int32 code; two strings; a string; fields then \0.
        b'R' => 8,
        b'S' => 6,
        // A command tag is short (the server builds it in 64 bytes).
        b'C' => return (5..=1024).contains(&len),
        b'E' | b'N' => 5,
        // Int32 pid, channel\0, payload\0.
        b'A' => 10,
        // Int16 count.
        b'T' | b'D' | b't' => 6,
        // Int8 format, Int16 count.
        b'G' | b'H' | b'W' => 7,
        // Int32 length (-1: NULL).
        b'V' => 8,
        // Int32 minor version, Int32 count.
        b'v' => 12,
        b'd' => 4,
        _ => return false,
    };
    (min..=MAX_MESSAGE).contains(&len)
}

/// How many bytes of a split message's body are kept.
pub(super) fn keep(typ: u8) -> u32 {
    match typ {
        b'E' => ERROR_KEEP,
        b'C' => TAG_KEEP,
        b'Z' => 1,
        _ => 0,
    }
}

/// The string at the start of `b`, up to its \0 or all of `b`.
fn cstr(b: &[u8]) -> &[u8] {
    match b.iter().position(|&c| c == 0) {
        Some(n) => &b[..n],
        None => b,
    }
}

/// The commands whose tag ends with a row count (55.7, CommandComplete).
const COUNTED: [&[u8]; 8] = [
    b"SELECT", b"INSERT", b"UPDATE", b"DELETE", b"MOVE", b"FETCH", b"COPY", b"MERGE",
];

/// A CommandComplete's tag and the row count it states: the last word of
/// `SELECT n`, `INSERT oid n`, `UPDATE n`, `DELETE n`, `MOVE n`,
/// `FETCH n`, `COPY n`, `MERGE n`; `None` for other commands. `None` when
/// the tag was not captured whole (a prefix could state a wrong count).
pub(super) fn tag(body: &[u8]) -> Option<(String, Option<u64>)> {
    let n = body.iter().position(|&c| c == 0)?;
    let t = &body[..n];
    let first = t.split(|&b| b == b' ').next().unwrap_or_default();
    let rows = if COUNTED.contains(&first) {
        t.rsplit(|&b| b == b' ')
            .next()
            .filter(|w| !w.is_empty() && w.len() <= 20 && w.iter().all(u8::is_ascii_digit))
            .and_then(|w| std::str::from_utf8(w).ok()?.parse().ok())
    } else {
        None
    };
    Some((String::from_utf8_lossy(t).into_owned(), rows))
}

/// An ErrorResponse's SQLSTATE (field `C`; empty unless captured whole)
/// and message (`M`; its captured prefix), and whether its severity (`V`,
/// else the localized `S`) is FATAL or PANIC: the server closes the
/// connection after it.
pub(super) fn error(body: &[u8]) -> (StatementError, bool) {
    let (mut sqlstate, mut message): (&[u8], &[u8]) = (b"", b"");
    let (mut severity, mut localized): (Option<&[u8]>, &[u8]) = (None, b"");
    let mut rest = body;
    while let Some((&code, tail)) = rest.split_first() {
        if code == 0 {
            break;
        }
        let value = cstr(tail);
        let whole = value.len() < tail.len();
        match code {
            b'C' if whole => sqlstate = value,
            b'M' => message = value,
            b'V' => severity = Some(value),
            b'S' => localized = value,
            _ => {}
        }
        rest = tail.get(value.len() + 1..).unwrap_or_default();
    }
    let severity = severity.unwrap_or(localized);
    let fatal = severity == b"FATAL" || severity == b"PANIC";
    let error = StatementError {
        sqlstate: String::from_utf8_lossy(sqlstate).into_owned(),
        code: None,
        message: String::from_utf8_lossy(message).into_owned(),
    };
    (error, fatal)
}

/// ReadyForQuery's transaction status: `I` idle, `T` in a transaction
/// block, `E` in a failed one; `None` when not captured; `Err` when not
/// one of these (the framing is wrong).
pub(super) fn ready_status(body: &[u8]) -> Result<Option<u8>, ()> {
    match body.first() {
        None => Ok(None),
        Some(&s @ (b'I' | b'T' | b'E')) => Ok(Some(s)),
        Some(_) => Err(()),
    }
}

/// Whether a write's captured bytes end with a ReadyForQuery (`Z`, length
/// 5, a status): the server had answered everything it was asked.
pub(super) fn ends_ready(data: &[u8]) -> bool {
    data.len() >= 6 && {
        let t = &data[data.len() - 6..];
        t[..5] == [b'Z', 0, 0, 0, 5] && matches!(t[5], b'I' | b'T' | b'E')
    }
}
