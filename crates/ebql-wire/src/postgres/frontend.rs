//! The client's messages (PostgreSQL documentation, 55.7 "Message
//! Formats", the messages marked F): which headers are valid, what to keep
//! of a message split across chunks, what a message says, and whether a
//! chunk "tiles" into well-formed messages (the resynchronization test).

use super::limits::{MAX_MESSAGE, MAX_NAME, MAX_TEXT};
use super::message::Message;

/// SSLRequest's code (55.7).
pub(super) const SSL_REQUEST: u32 = 80_877_103;
/// GSSENCRequest's code.
pub(super) const GSSENC_REQUEST: u32 = 80_877_104;
/// CancelRequest's code.
pub(super) const CANCEL_REQUEST: u32 = 80_877_102;
/// The longest startup packet the server accepts (`MAX_STARTUP_PACKET_LENGTH`).
pub(super) const MAX_STARTUP: u32 = 10_000;

/// The longest Close, Describe, Execute, CopyFail the server accepts
/// (`PQ_SMALL_MESSAGE_LIMIT`); longer is a FATAL "invalid message length".
const SMALL_MESSAGE: u32 = 10_000;
/// The longest password, SASL or GSSAPI message (`PG_MAX_AUTH_TOKEN_LENGTH`).
const AUTH_MESSAGE: u32 = 65_535;

/// Whether a frontend header is valid: a known type (0: a startup packet)
/// and a length (which counts itself) between the message's smallest and
/// the server's limit for its type (postgres.c, `SocketBackend`).
pub(super) fn valid_header(typ: u8, len: u32) -> bool {
    let (min, max) = match typ {
        0 => (8, MAX_STARTUP),
        b'S' | b'H' | b'X' | b'c' => return len == 4,
        // String\0; name\0 Int32; Byte1 name\0.
        b'f' => (5, SMALL_MESSAGE),
        b'E' => (9, SMALL_MESSAGE),
        b'D' | b'C' => (6, SMALL_MESSAGE),
        b'p' => (4, AUTH_MESSAGE),
        // String\0; name\0 text\0 Int16; portal\0 stmt\0 Int16 Int16 Int16.
        b'Q' => (5, MAX_MESSAGE),
        b'P' => (8, MAX_MESSAGE),
        b'B' => (12, MAX_MESSAGE),
        // Int32 oid, Int16 formats, Int16 arguments, Int16 result format.
        b'F' => (14, MAX_MESSAGE),
        b'd' => (4, MAX_MESSAGE),
        _ => return false,
    };
    (min..=max).contains(&len)
}

/// How many bytes of a split message's body are kept.
pub(super) fn keep(typ: u8) -> u32 {
    match typ {
        b'Q' | b'P' => MAX_TEXT,
        b'B' => 2 * MAX_NAME,
        b'E' | b'D' | b'C' => MAX_NAME + 4,
        0 => MAX_STARTUP,
        _ => 0,
    }
}

/// What a startup packet (no type byte) asks.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Startup<'a> {
    /// SSLRequest: a one-byte answer, `S` (TLS follows) or `N`.
    Ssl,
    /// GSSENCRequest: a one-byte answer, `G` (GSSAPI encryption follows) or `N`.
    Gss,
    /// CancelRequest: sent on a connection of its own, which then closes.
    Cancel,
    /// StartupMessage, protocol 3.x: a session begins.
    Session {
        user: Option<&'a [u8]>,
        database: Option<&'a [u8]>,
        /// Every pair was read, up to the final \0: a `database` not
        /// among them was not sent (a cut packet's may have been).
        whole: bool,
    },
}

/// A request, as much as the decoder needs of it.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Request<'a> {
    /// A startup packet; `None`: not one the decoder knows.
    Startup(Option<Startup<'a>>),
    /// Query (`Q`).
    Query { text: &'a [u8], truncated: bool },
    /// Parse (`P`).
    Parse {
        name: &'a [u8],
        text: &'a [u8],
        truncated: bool,
    },
    /// Bind (`B`).
    Bind { portal: &'a [u8], stmt: &'a [u8] },
    /// Describe (`D`).
    Describe,
    /// Execute (`E`).
    Execute { portal: &'a [u8] },
    /// Close (`C`) of a portal (`P`) or a statement (`S`).
    Close { portal: bool, name: &'a [u8] },
    /// Sync (`S`).
    Sync,
    /// FunctionCall (`F`).
    FunctionCall,
    /// Flush, Terminate, CopyData, CopyDone, CopyFail, the password and
    /// SASL messages: no response of their own.
    Other,
}

/// A cursor over a body.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    /// A string up to its \0 (consumed); `None` when no \0 is left.
    fn cstr(&mut self) -> Option<&'a [u8]> {
        let n = self.0.iter().position(|&b| b == 0)?;
        let s = &self.0[..n];
        self.0 = &self.0[n + 1..];
        Some(s)
    }

    fn bytes(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Some(a)
    }

    fn i16(&mut self) -> Option<i16> {
        self.bytes(2).map(|b| i16::from_be_bytes([b[0], b[1]]))
    }

    fn i32(&mut self) -> Option<i32> {
        self.bytes(4)
            .map(|b| i32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    /// A count (Int16 ≥ 0) then that many Int16 format codes, each 0 or 1.
    fn formats(&mut self) -> Option<()> {
        let n = usize::try_from(self.i16()?).ok()?;
        for _ in 0..n {
            if !matches!(self.i16()?, 0 | 1) {
                return None;
            }
        }
        Some(())
    }

    /// A count (Int16 ≥ 0) then that many values: Int32 length (-1: NULL)
    /// then the bytes.
    fn values(&mut self) -> Option<()> {
        let n = usize::try_from(self.i16()?).ok()?;
        for _ in 0..n {
            match self.i32()? {
                -1 => {}
                len => {
                    self.bytes(usize::try_from(len).ok()?)?;
                }
            }
        }
        Some(())
    }

    fn end(&self) -> Option<()> {
        self.0.is_empty().then_some(())
    }
}

fn be32(b: &[u8]) -> Option<u32> {
    b.get(..4)
        .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
}

/// Splits a string off the front of `body`: the string (at most
/// [`MAX_TEXT`] bytes), whether it was cut (its \0 not captured, or longer
/// than [`MAX_TEXT`]), and the rest after its \0.
fn split_text(body: &[u8], complete: bool) -> (&[u8], bool, &[u8]) {
    match body.iter().position(|&b| b == 0) {
        Some(n) => {
            let cut = n > MAX_TEXT as usize;
            (&body[..n.min(MAX_TEXT as usize)], cut, &body[n + 1..])
        }
        None => {
            let n = body.len().min(MAX_TEXT as usize);
            (&body[..n], !complete || n < body.len(), &[])
        }
    }
}

/// A name: up to its \0, or all that was captured.
fn name<'a>(r: &mut Reader<'a>) -> &'a [u8] {
    match r.cstr() {
        Some(s) => s,
        None => std::mem::take(&mut r.0),
    }
}

/// What a startup packet's body (its code, then for a StartupMessage the
/// `key\0value\0` pairs and a final \0) asks.
fn startup(body: &[u8], len: u32) -> Option<Startup<'_>> {
    let code = be32(body)?;
    match code {
        SSL_REQUEST if len == 4 => Some(Startup::Ssl),
        GSSENC_REQUEST if len == 4 => Some(Startup::Gss),
        // Process id and a secret key of 4 bytes (protocol 3.0) up to 256 (3.2).
        CANCEL_REQUEST if (12..=264).contains(&len) => Some(Startup::Cancel),
        _ if code >> 16 == 3 => {
            let mut r = Reader(&body[4..]);
            let (mut user, mut database, mut whole) = (None, None, false);
            while let Some(key) = r.cstr() {
                if key.is_empty() {
                    whole = true;
                    break;
                }
                let Some(value) = r.cstr() else { break };
                match key {
                    b"user" => user = Some(value),
                    b"database" => database = Some(value),
                    _ => {}
                }
            }
            Some(Startup::Session {
                user,
                database,
                whole,
            })
        }
        _ => None,
    }
}

/// What a request says. Lenient: a message the server would reject (and
/// answer with an ErrorResponse) still yields its request; names and texts
/// are what was captured.
pub(super) fn parse<'a>(m: &Message<'a>) -> Request<'a> {
    let complete = m.complete();
    let mut r = Reader(m.body);
    match m.typ {
        0 => Request::Startup(startup(m.body, m.len)),
        b'Q' => {
            let (text, truncated, _) = split_text(m.body, complete);
            Request::Query { text, truncated }
        }
        b'P' => {
            let name = name(&mut r);
            let (text, truncated, _) = split_text(r.0, complete);
            Request::Parse {
                name,
                text,
                truncated,
            }
        }
        b'B' => {
            let portal = name(&mut r);
            let stmt = name(&mut r);
            Request::Bind { portal, stmt }
        }
        b'E' => Request::Execute {
            portal: name(&mut r),
        },
        b'D' => Request::Describe,
        b'C' => {
            let portal = r.bytes(1) == Some(b"P");
            Request::Close {
                portal,
                name: name(&mut r),
            }
        }
        b'S' => Request::Sync,
        b'F' => Request::FunctionCall,
        _ => Request::Other,
    }
}

/// Whether a whole message's body has exactly its type's layout (strict:
/// used to resynchronize, where only a message that can be nothing else
/// is trusted).
fn well_formed(typ: u8, body: &[u8]) -> bool {
    let mut r = Reader(body);
    match typ {
        0 => match startup(body, body.len() as u32) {
            None => false,
            // A StartupMessage: `key\0value\0` pairs, then an empty key
            // that ends the body.
            Some(Startup::Session { .. }) => (|| {
                r.bytes(4)?;
                while !r.cstr()?.is_empty() {
                    r.cstr()?;
                }
                r.end()
            })()
            .is_some(),
            Some(_) => true,
        },
        b'Q' | b'f' => r.cstr().and_then(|_| r.end()).is_some(),
        b'P' => (|| {
            r.cstr()?;
            r.cstr()?;
            let n = usize::try_from(r.i16()?).ok()?;
            r.bytes(4 * n)?;
            r.end()
        })()
        .is_some(),
        b'B' => (|| {
            r.cstr()?;
            r.cstr()?;
            r.formats()?;
            r.values()?;
            r.formats()?;
            r.end()
        })()
        .is_some(),
        b'E' => (|| {
            r.cstr()?;
            r.i32()?;
            r.end()
        })()
        .is_some(),
        b'D' | b'C' => (|| {
            if !matches!(r.bytes(1)?, b"S" | b"P") {
                return None;
            }
            r.cstr()?;
            r.end()
        })()
        .is_some(),
        b'F' => (|| {
            r.i32()?;
            r.formats()?;
            r.values()?;
            if !matches!(r.i16()?, 0 | 1) {
                return None;
            }
            r.end()
        })()
        .is_some(),
        b'S' | b'H' | b'X' | b'c' => body.is_empty(),
        _ => true,
    }
}

/// Whether a message can begin a request when the server awaits one (not
/// CopyData, CopyDone, CopyFail, nor a password message, which only
/// continue an exchange).
fn starts_request(typ: u8) -> bool {
    matches!(
        typ,
        0 | b'Q' | b'P' | b'B' | b'E' | b'D' | b'C' | b'S' | b'H' | b'F' | b'X'
    )
}

/// Whether the first bytes of a header, cut by the chunk's end, can begin
/// a valid one: a known type, and a length not yet over its bound.
fn valid_head_prefix(head: &[u8]) -> bool {
    // Big-endian: a prefix of the length can be completed to a length
    // within the bound iff it is at most the bound's prefix.
    let (typ, len) = match head {
        [] => return false,
        [0, ..] => (0, head),
        [typ, len @ ..] => (*typ, len),
    };
    // The largest length valid for the type, if any.
    let max = [MAX_MESSAGE, AUTH_MESSAGE, SMALL_MESSAGE, MAX_STARTUP, 4]
        .into_iter()
        .find(|&l| valid_header(typ, l));
    max.is_some_and(|max| len <= &max.to_be_bytes()[..len.len()])
}

/// Whether a read chunk (`data`, the captured prefix of its `len` bytes)
/// "tiles": from its first byte, a sequence of valid frontend headers,
/// the first one starting a request, each whole message captured in the
/// chunk well-formed, the last one ending at the chunk's end or running
/// beyond it (a Query's text captured so far must then hold no \0). A
/// startup packet's code must be captured and known. Only the first chunk
/// of a connection (`fresh`: a startup packet split across reads) may end
/// inside a header, or inside a startup packet's code; the header must
/// then be valid as far as it goes.
pub(super) fn tiles(data: &[u8], len: u64, fresh: bool) -> bool {
    let mut p = 0usize;
    loop {
        let Some(&first) = data.get(p) else {
            return false;
        };
        let size = if first == 0 { 4 } else { 5 };
        let Some(head) = data.get(p..p + size) else {
            // A header cut by the chunk's end, continued by the next one.
            let head = &data[p..];
            return fresh
                && data.len() as u64 == len
                && valid_head_prefix(head)
                && (p > 0 || starts_request(if first == 0 { 0 } else { head[0] }));
        };
        let (typ, mlen) = if size == 4 {
            (0, be32(head))
        } else {
            (head[0], be32(&head[1..]))
        };
        let mlen = mlen.unwrap_or(0);
        if !valid_header(typ, mlen) || (p == 0 && !starts_request(typ)) {
            return false;
        }
        let start = p + size;
        let end = start as u64 + u64::from(mlen) - 4;
        if typ == 0 {
            // The code, right after the length, says what the packet is.
            match data.get(start..start + 4) {
                Some(code) if startup(code, mlen - 4).is_none() => return false,
                Some(_) => {}
                None if !(fresh && data.len() as u64 == len) => return false,
                None => {}
            }
        }
        if end <= data.len() as u64 {
            if !well_formed(typ, &data[start..end as usize]) {
                return false;
            }
        } else if end < len {
            // The next header would be in bytes not captured.
            return false;
        } else if typ == b'Q' && data[start..].contains(&0) {
            return false;
        }
        if end >= len {
            return true;
        }
        p = end as usize;
    }
}
