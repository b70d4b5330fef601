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
    /// The reads' framing is lost; the writes' is kept, and their responses
    /// still answer the requests queued before the loss. `owed`: requests
    /// lost with the framing may still await their ReadyForQuery.
    ReadsLost { owed: bool },
    /// The framing is lost (or was never found): chunks are skipped until a
    /// read tiles. `veto`: the server may still owe responses (since the
    /// loss, a read was skipped, or the last write was captured whole and
    /// did not end with a ReadyForQuery), so a read now cannot start a
    /// fresh exchange.
    Lost { veto: bool },
    /// Inside the response to the one request outstanding, a header of
    /// which fell in a write's uncaptured gap: writes are consumed until
    /// one ends with a ReadyForQuery (`uncaptured.rs`). `writes`: those
    /// consumed after the one that lost the framing; `veto`: what
    /// [`Mode::Lost`]'s would be, were the framing given up.
    Uncaptured { writes: u64, veto: bool },
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
    /// In [`Mode::Uncaptured`], the last captured bytes of the writes
    /// consumed, when they are the last bytes written (at most [`MAX_END`]).
    end: Vec<u8>,
}

/// The bytes kept of a response's end across writes: its last message may
/// begin in the write before the one holding its ReadyForQuery.
const MAX_END: usize = 4096;

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
            end: Vec::new(),
        }
    }

    /// The connection closed: its pending requests count as unfinished.
    pub fn close(mut self, counters: &mut Counters) {
        self.give_up(counters);
        self.session.drop_pending(counters);
    }

    /// Feeds one chunk.
    pub fn feed(&mut self, c: &Chunk<'_>, counters: &mut Counters, out: &mut Vec<Statement>) {
        let fresh = std::mem::take(&mut self.fresh);
        if fresh && tls_record(c.data) {
            counters.tls_connections += 1;
            self.mode = Mode::Encrypted;
        }
        match c.dir {
            Direction::Read => self.read(c, fresh, counters),
            Direction::Write => self.write(c, counters, out),
        }
    }

    /// The writes' framing is lost: which requests their responses
    /// answered is unknown, so the pending requests are dropped and both
    /// directions wait for a read that tiles.
    fn desync(&mut self, counters: &mut Counters) {
        counters.desyncs += 1;
        self.session.desync(counters);
        self.req.reset();
        self.resp.reset();
        self.mode = Mode::Lost { veto: false };
    }

    /// The reads' framing is lost (a header not captured, or not valid):
    /// the requests queued before stay, answered by the still-framed
    /// writes. Lost in COPY FROM STDIN data, the lost bytes owe no response.
    fn reads_lost(&mut self, counters: &mut Counters) {
        counters.desyncs += 1;
        self.req.reset();
        self.mode = Mode::ReadsLost {
            owed: !self.session.copy_in,
        };
    }

    fn read(&mut self, c: &Chunk<'_>, fresh: bool, counters: &mut Counters) {
        // The client did not wait for the response's end: not the one
        // request assumed.
        self.give_up(counters);
        match self.mode {
            Mode::Synced => {}
            Mode::ReadsLost { owed } => {
                let startup = c.data.first() == Some(&0);
                let tiles = frontend::tiles(c.data, c.len, fresh);
                if startup && tiles {
                    self.resync();
                } else if tiles && !owed && self.session.idle() {
                    // Everything the server read was answered.
                    self.req.reset();
                    self.session.reads_resynced();
                    self.mode = Mode::Synced;
                } else {
                    counters.chunks_skipped += 1;
                    // Past the COPY data (the server answered all it
                    // knew), a skipped read holds requests.
                    let owed = owed || !self.session.copy_in || self.session.idle();
                    self.mode = Mode::ReadsLost { owed };
                    return;
                }
            }
            Mode::Encrypted => {
                // Only a startup packet (first byte 0; TLS records start
                // with 20–23) ends the encryption: a new connection.
                if c.data.first() != Some(&0) || !frontend::tiles(c.data, c.len, fresh) {
                    counters.tls_chunks += 1;
                    return;
                }
                self.resync();
            }
            // Given up above.
            Mode::Lost { veto } | Mode::Uncaptured { veto, .. } => {
                let startup = c.data.first() == Some(&0);
                if (veto && !startup) || !frontend::tiles(c.data, c.len, fresh) {
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
                Step::Lost | Step::Gap => Err(super::session::Desync),
                Step::Message(m) => self.session.request(&m, c.time_ns, counters),
            };
            match flow {
                Ok(Flow::Continue) => {}
                Ok(Flow::Restarted) => self.resp.reset(),
                Err(_) => return self.reads_lost(counters),
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
        let reads_lost = matches!(self.mode, Mode::ReadsLost { .. });
        match self.mode {
            Mode::Synced | Mode::ReadsLost { .. } => {}
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
            Mode::Uncaptured { writes, .. } => {
                return self.uncaptured(c, writes + 1, counters, out)
            }
        }
        let mut pos = 0u64;
        let mut gap = false;
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
                Step::Gap => {
                    gap = true;
                    Err(super::session::Desync)
                }
                Step::Lost => Err(super::session::Desync),
                Step::Message(m) => {
                    let mid_request = !reads_lost && !self.req.at_boundary();
                    let unmatched_ready = m.typ == b'Z' && self.session.idle();
                    let done = self
                        .session
                        .response(&m, c.time_ns, mid_request, counters, out);
                    if reads_lost && unmatched_ready && done.is_ok() {
                        // A lost request got its ReadyForQuery.
                        self.mode = Mode::ReadsLost { owed: false };
                    }
                    done
                }
            };
            if done.is_err() {
                break;
            }
        }
        if gap && self.rows_uncaptured(c) {
            return self.uncaptured(c, 0, counters, out);
        }
        self.desync(counters);
        self.lost_after(c);
    }

    /// A header of the write `c` fell in its uncaptured gap: whether the
    /// one request outstanding may be finished from the end of a write
    /// (`uncaptured.rs`): both directions framed, the client's last message
    /// read whole, the write keeping its last bytes (a probe without tails
    /// loses the framing as before), one request outstanding.
    fn rows_uncaptured(&self, c: &Chunk<'_>) -> bool {
        self.mode == Mode::Synced
            && !c.tail.is_empty()
            && self.req.at_boundary()
            && self.session.one_outstanding()
    }

    /// A write inside a response whose rows were not captured, the
    /// `writes`th since the one that lost the framing (0: that one). When
    /// its last bytes are a ReadyForQuery, the response ends: the request
    /// is finished from them, or, when that is not certain, the framing is
    /// lost as it would have been without tails.
    fn uncaptured(
        &mut self,
        c: &Chunk<'_>,
        writes: u64,
        counters: &mut Counters,
        out: &mut Vec<Statement>,
    ) {
        let whole = c.data.len() as u64 == c.len;
        // The write's last bytes captured: all of it, after the previous
        // write's (the last message may straddle the two), or its tail.
        let mut end = std::mem::take(&mut self.end);
        if whole {
            end.extend_from_slice(c.data);
        } else {
            end.clear();
            end.extend_from_slice(c.tail);
        }
        // What [`Mode::Lost`]'s `veto` would be after this write.
        let veto = whole && !backend::ends_ready(c.data);
        self.mode = Mode::Uncaptured { writes, veto };
        if !backend::ends_ready(&end) {
            // Not the response's end (or not known to be): consumed.
            end.drain(..end.len().saturating_sub(MAX_END));
            self.end = end;
            return;
        }
        if self
            .session
            .finish_uncaptured(&end, c.time_ns, counters, out)
            .is_ok()
        {
            self.mode = Mode::Synced;
            self.req.reset();
            self.resp.reset();
        } else {
            self.give_up(counters);
        }
    }

    /// Inside a response whose rows were not captured, the assumption
    /// failed (or the connection ends): the framing is lost, counted as it
    /// would have been without tails: a desync, the request dropped, each
    /// write after the one that lost it skipped and unmatched.
    fn give_up(&mut self, counters: &mut Counters) {
        self.end = Vec::new();
        if let Mode::Uncaptured { writes, veto } = self.mode {
            counters.chunks_skipped += writes;
            counters.responses_unmatched += writes;
            self.desync(counters);
            self.mode = Mode::Lost { veto };
        }
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
