//! Message framing of one direction of a connection: cuts the bytes of
//! successive chunks into messages by their length prefixes (PostgreSQL
//! documentation, 55.2 "Message Flow" and 55.7 "Message Formats": a type
//! byte, then an `Int32` length that counts itself but not the type byte).
//!
//! A message whose bytes are all captured in one chunk is handed out in
//! place (a slice of the chunk). A message split across chunks, or partly
//! not captured, is handed out when its last byte has passed, with the
//! contiguous captured prefix of its body that was kept (at most
//! [`Side::keep`] bytes, only for the types whose content is needed). Bytes
//! not captured are skipped by the length; a header (type byte or length)
//! that falls in bytes not captured ([`Step::Gap`]), or that is not valid
//! ([`Step::Lost`]), loses the framing.

use super::message::Message;
use super::{backend, frontend};

/// Which side sent the messages, which decides their valid headers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Side {
    /// The client's requests (the server's reads). Besides the typed
    /// messages, a message whose first byte is 0 is a startup packet
    /// (StartupMessage, SSLRequest, GSSENCRequest, CancelRequest): a length
    /// and no type byte.
    Frontend,
    /// The server's responses (its writes).
    Backend,
}

impl Side {
    /// The header's size, from its first byte.
    fn header_size(self, first: u8) -> usize {
        match (self, first) {
            (Side::Frontend, 0) => 4,
            _ => 5,
        }
    }

    /// Whether a header is valid: a known type byte and a length allowed
    /// for it.
    fn valid(self, typ: u8, len: u32) -> bool {
        match self {
            Side::Frontend => frontend::valid_header(typ, len),
            Side::Backend => backend::valid_header(typ, len),
        }
    }

    /// How many bytes of a split message's body to keep.
    fn keep(self, typ: u8) -> u32 {
        match self {
            Side::Frontend => frontend::keep(typ),
            Side::Backend => backend::keep(typ),
        }
    }
}

/// What [`Framer::next`] found.
#[derive(Debug)]
pub(super) enum Step<'a> {
    /// A message ended in this chunk.
    Message(Message<'a>),
    /// The chunk is used up (it may have ended inside a message).
    End,
    /// A header was not valid: the framing is lost (the framer is reset).
    Lost,
    /// A header fell in bytes not captured (between the chunk's `data` and
    /// its end): the framing is lost (the framer is reset).
    Gap,
}

/// A message whose body continues in later chunks.
#[derive(Debug)]
struct Body {
    typ: u8,
    len: u32,
    done: u32,
    keep: u32,
    /// Bytes of the body were not captured: nothing more is kept.
    gap: bool,
}

/// The framing state of one direction.
#[derive(Debug, Default)]
pub(super) struct Framer {
    /// A header split across chunks.
    head: [u8; 5],
    have: u8,
    body: Option<Body>,
    /// The kept prefix of a body split across chunks (bounded by `keep`).
    buf: Vec<u8>,
}

/// A body buffer grown beyond this is freed before the next message.
const SHRINK_ABOVE: usize = 64 * 1024;

fn be32(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}

/// Decodes a complete header: type and the body's length.
fn decode(side: Side, head: &[u8]) -> Option<(u8, u32)> {
    let (typ, len) = if head.len() == 4 {
        (0, be32(head))
    } else {
        (head[0], be32(&head[1..]))
    };
    side.valid(typ, len).then(|| (typ, len - 4))
}

impl Framer {
    /// Forgets any partial message: the next byte starts a message.
    pub fn reset(&mut self) {
        self.have = 0;
        self.body = None;
        self.buf.clear();
    }

    /// The next byte starts a message.
    pub fn at_boundary(&self) -> bool {
        self.have == 0 && self.body.is_none()
    }

    /// Cuts the next message out of a chunk (`data`, the captured prefix of
    /// the `len` bytes the system call moved), from `*pos` on, and advances
    /// `*pos` past it.
    pub fn next<'a>(&'a mut self, side: Side, data: &'a [u8], len: u64, pos: &mut u64) -> Step<'a> {
        let captured = data.len() as u64;
        loop {
            if *pos >= len {
                return Step::End;
            }
            if let Some(b) = &mut self.body {
                let n = (len - *pos).min(u64::from(b.len - b.done));
                let lo = (*pos).min(captured) as usize;
                let hi = (*pos + n).min(captured) as usize;
                if !b.gap && self.buf.len() < b.keep as usize {
                    let take = (hi - lo).min(b.keep as usize - self.buf.len());
                    self.buf.extend_from_slice(&data[lo..lo + take]);
                }
                if (hi as u64) < *pos + n {
                    b.gap = true;
                }
                // n <= b.len - b.done, a u32.
                b.done += n as u32;
                *pos += n;
                if b.done == b.len {
                    let (typ, len) = (b.typ, b.len);
                    self.body = None;
                    return Step::Message(Message {
                        typ,
                        body: &self.buf,
                        len,
                    });
                }
                continue;
            }
            if *pos >= captured {
                self.reset();
                return Step::Gap;
            }
            let p = *pos as usize;
            if self.have == 0 {
                let size = side.header_size(data[p]);
                if p + size <= data.len() {
                    // The common case: the header is whole in this chunk.
                    let Some((typ, blen)) = decode(side, &data[p..p + size]) else {
                        return Step::Lost;
                    };
                    let start = p + size;
                    if start as u64 + u64::from(blen) <= captured {
                        let end = start + blen as usize;
                        *pos = end as u64;
                        return Step::Message(Message {
                            typ,
                            body: &data[start..end],
                            len: blen,
                        });
                    }
                    *pos = start as u64;
                    self.start_body(side, typ, blen);
                    continue;
                }
            }
            // A header split across chunks: collect it.
            let size = side.header_size(if self.have == 0 {
                data[p]
            } else {
                self.head[0]
            });
            let take = (size - self.have as usize).min(data.len() - p);
            let have = self.have as usize;
            self.head[have..have + take].copy_from_slice(&data[p..p + take]);
            self.have += take as u8;
            *pos += take as u64;
            if (self.have as usize) < size {
                continue;
            }
            self.have = 0;
            let Some((typ, blen)) = decode(side, &self.head[..size]) else {
                self.reset();
                return Step::Lost;
            };
            if blen == 0 {
                return Step::Message(Message {
                    typ,
                    body: &[],
                    len: 0,
                });
            }
            self.start_body(side, typ, blen);
        }
    }

    fn start_body(&mut self, side: Side, typ: u8, len: u32) {
        self.buf.clear();
        if self.buf.capacity() > SHRINK_ABOVE {
            // A long text was kept once: do not hold its buffer forever.
            self.buf = Vec::new();
        }
        self.body = Some(Body {
            typ,
            len,
            done: 0,
            keep: side.keep(typ),
            gap: false,
        });
    }
}
