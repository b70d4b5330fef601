//! One connection: its two framers, its session, and whether its framing
//! is known (synchronized), lost, or hidden by encryption.

use super::backend;
use super::framer::{Framer, Side, Step};
use super::frontend;
use super::session::{Flow, Session};
use crate::{Chunk, ConnKey, Counters, Direction, Statement};

/// Whether the connection's bytes can be decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Both framers are on message boundaries the decoder followed.
    Synced,
    /// The framing is lost (or was never found): chunks are skipped until a
    /// read tiles. `veto`: the server may still owe responses (since the
    /// loss, a read was skipped, or the last write was captured whole and
    /// did not end with a ReadyForQuery), so a read now cannot start a
    /// fresh exchange.
    Lost { veto: bool },
    /// TLS or GSSAPI encryption: skipped until a startup packet begins a
    /// new connection on this key.
    Encrypted,
}

/// One connection's state.
#[derive(Debug)]
pub(super) struct Conn {
    mode: Mode,
    /// No chunk was seen yet.
    fresh: bool,
    req: Framer,
    resp: Framer,
    session: Session,
}

/// Whether `data` starts with a TLS record header (content type 20–23,
/// version 3.x): a connection first seen already encrypted, or using
/// PostgreSQL 17's direct TLS negotiation.
fn tls_record(data: &[u8]) -> bool {
    matches!(data, [20..=23, 3, 0..=4, ..])
}

impl Conn {
    /// A connection not seen before: unsynchronized until a read tiles
    /// (a startup packet does).
    pub fn new(key: ConnKey) -> Self {
        Conn {
            mode: Mode::Lost { veto: false },
            fresh: true,
            req: Framer::default(),
            resp: Framer::default(),
            session: Session::new(key),
        }
    }

    /// The connection closed: its pending requests count as unfinished.
    pub fn close(mut self, counters: &mut Counters) {
        self.session.drop_pending(counters);
    }

    /// Feeds one chunk.
    pub fn feed(&mut self, c: &Chunk<'_>, counters: &mut Counters, out: &mut Vec<Statement>) {
        if std::mem::take(&mut self.fresh) && tls_record(c.data) {
            counters.tls_connections += 1;
            self.mode = Mode::Encrypted;
        }
        match c.dir {
            Direction::Read => self.read(c, counters),
            Direction::Write => self.write(c, counters, out),
        }
    }

    /// The framing is lost: pending requests are dropped. Lost in a read,
    /// the server will answer requests the decoder did not see: `veto`
    /// until a write shows it done.
    fn desync(&mut self, counters: &mut Counters, veto: bool) {
        counters.desyncs += 1;
        self.session.desync(counters);
        self.req.reset();
        self.resp.reset();
        self.mode = Mode::Lost { veto };
    }

    fn read(&mut self, c: &Chunk<'_>, counters: &mut Counters) {
        match self.mode {
            Mode::Synced => {}
            Mode::Encrypted => {
                // Only a startup packet (first byte 0; TLS records start
                // with 20–23) ends the encryption: a new connection.
                if c.data.first() != Some(&0) || !frontend::tiles(c.data, c.len) {
                    counters.tls_chunks += 1;
                    return;
                }
                self.resync();
            }
            Mode::Lost { veto } => {
                let startup = c.data.first() == Some(&0);
                if (veto && !startup) || !frontend::tiles(c.data, c.len) {
                    counters.chunks_skipped += 1;
                    // The server will answer what it read: until a write
                    // shows it done, a read cannot start a fresh exchange.
                    self.mode = Mode::Lost { veto: true };
                    return;
                }
                self.resync();
            }
        }
        let mut pos = 0;
        loop {
            let flow = match self.req.next(Side::Frontend, c.data, c.len, &mut pos) {
                Step::End => return,
                Step::Lost => Err(super::session::Desync),
                Step::Message(m) => self.session.request(&m, c.time_ns, counters),
            };
            match flow {
                Ok(Flow::Continue) => {}
                Ok(Flow::Restarted) => self.resp.reset(),
                Err(_) => return self.desync(counters, true),
            }
        }
    }

    /// A read tiled: both directions start on message boundaries, the
    /// next write with a response to this read's requests.
    fn resync(&mut self) {
        self.mode = Mode::Synced;
        self.req.reset();
        self.resp.reset();
        self.session.started = true;
    }

    fn write(&mut self, c: &Chunk<'_>, counters: &mut Counters, out: &mut Vec<Statement>) {
        match self.mode {
            Mode::Synced => {}
            Mode::Encrypted => {
                counters.tls_chunks += 1;
                return;
            }
            Mode::Lost { .. } => {
                counters.chunks_skipped += 1;
                counters.responses_unmatched += 1;
                self.lost_after(c);
                return;
            }
        }
        let mut pos = 0u64;
        loop {
            if self.resp.at_boundary() && self.session.awaits_handshake() && pos < c.len {
                // The answer to SSLRequest/GSSENCRequest: one byte, no header.
                let answer = c.data.get(pos as usize).copied().unwrap_or(0);
                pos += 1;
                match self.session.handshake(answer) {
                    Ok(false) => continue,
                    Ok(true) => {
                        counters.tls_connections += 1;
                        self.mode = Mode::Encrypted;
                        return;
                    }
                    Err(_) => break,
                }
            }
            let done = match self.resp.next(Side::Backend, c.data, c.len, &mut pos) {
                Step::End => return,
                Step::Lost => Err(super::session::Desync),
                Step::Message(m) => {
                    let mid_request = !self.req.at_boundary();
                    self.session
                        .response(&m, c.time_ns, mid_request, counters, out)
                }
            };
            if done.is_err() {
                break;
            }
        }
        self.desync(counters, false);
        self.lost_after(c);
    }

    /// Notes, for a lost connection, whether the server was mid-response
    /// at the end of this write.
    fn lost_after(&mut self, c: &Chunk<'_>) {
        let whole = c.data.len() as u64 == c.len;
        self.mode = Mode::Lost {
            veto: whole && !backend::ends_ready(c.data),
        };
    }
}
