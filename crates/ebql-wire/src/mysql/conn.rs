//! One connection: its phase (handshake, commands, TLS), the command
//! waiting for its response, its prepared statements; chunks in, rows out.

use super::candidate::Candidate;
use super::framer::{Cursor, Event, Expect, Framer, Packet};
use super::response::{Pending, Request, Step};
use super::wire::{self, u32_at};
use crate::{Chunk, ConnKey, Counters, Direction, Kind, Statement};
use std::collections::HashMap;

/// A response whose packets were not captured, waiting for its end
/// (its rule and methods: `super::uncaptured`).
#[derive(Debug, Clone, Copy)]
pub(super) struct Unseen {
    /// The metadata's EOF may be among the packets not captured.
    pub(super) before_rows: bool,
    /// The lost header's offset from the current write's first byte
    /// (negative once writes have passed).
    pub(super) header_at: i64,
    /// The lost packet's sequence id.
    pub(super) seq: u8,
    /// Server writes consumed after the one where the framing was lost
    /// (skipped, if the end is not found).
    pub(super) writes: u64,
}

/// Prepared statements remembered per connection, at most.
pub const MAX_PREPARED: usize = 10_000;
/// Bytes of prepared statements' texts remembered per connection, at most.
pub const MAX_PREPARED_BYTES: usize = 16 << 20;
/// Payload bytes kept of a packet that carries no statement text.
const SMALL_CAP: usize = 4096;
/// Payload bytes kept before a COM_QUERY's text (its query attributes).
const ATTRS_SLACK: usize = 1024;

/// What the decoder lends a connection while it handles a chunk.
pub(super) struct Ctx<'o> {
    pub key: ConnKey,
    /// The time of the chunk being handled.
    pub time_ns: u64,
    pub counters: &'o mut Counters,
    pub out: &'o mut Vec<Statement>,
    pub max_text: usize,
}

/// How much of a client packet to keep: statement texts up to the limit.
pub(super) fn read_cap(max_text: usize) -> impl Fn(u8) -> usize {
    move |first| {
        if first == wire::COM_QUERY || first == wire::COM_STMT_PREPARE {
            max_text.saturating_add(ATTRS_SLACK)
        } else {
            SMALL_CAP
        }
    }
}

/// Where the connection is in the protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(super) enum Phase {
    /// Framing unknown (the connection began before the capture, or its
    /// framing was lost): chunks skipped until a resync point.
    #[default]
    Unsynced,
    /// The server's Handshake was seen; the client's response comes next.
    Greeted { server_caps: u64 },
    /// Authentication exchanges, up to the server's OK or ERR.
    Auth { next_seq: u8 },
    /// Commands and their responses.
    Command,
    /// The client asked for TLS: nothing more can be decoded.
    Tls,
    /// Compression was negotiated: not decoded.
    Compressed,
}

/// A prepared statement's text.
#[derive(Debug)]
struct Stored {
    text: Vec<u8>,
    truncated: bool,
}

/// The connection's prepared statements, by id.
#[derive(Debug, Default)]
struct Statements {
    map: HashMap<u32, Stored>,
    bytes: usize,
    /// The last prepared (MariaDB executes id 0xffffffff as this one).
    last: Option<u32>,
}

impl Statements {
    fn insert(&mut self, id: u32, text: Vec<u8>, truncated: bool) {
        self.remove(id);
        self.last = Some(id);
        if self.map.len() >= MAX_PREPARED || self.bytes + text.len() > MAX_PREPARED_BYTES {
            return; // its executions will count as unknown
        }
        self.bytes += text.len();
        self.map.insert(id, Stored { text, truncated });
    }

    fn remove(&mut self, id: u32) {
        if let Some(s) = self.map.remove(&id) {
            self.bytes -= s.text.len();
        }
    }

    fn clear(&mut self) {
        *self = Statements::default();
    }
}

/// What handling a packet asks of the chunk loop.
pub(super) enum Flow {
    Next,
    /// The rest of the chunk is not to be decoded (TLS, compression).
    Stop,
    /// The client's framing is lost.
    ReadLost,
    /// The server's framing (or the pairing of responses) is lost.
    WriteLost,
    /// The server's framing is lost: a packet header, at this offset in
    /// the chunk, fell in bytes not captured.
    WriteGap(i64),
}

/// Everything about a connection but its framers.
#[derive(Debug, Default)]
pub(super) struct State {
    pub phase: Phase,
    /// The response to the last command was lost: server chunks are
    /// skipped until the next command is read.
    pub wr_lost: bool,
    /// Inside a response whose packets were not captured: server chunks
    /// are consumed until one ends with the response's last packet
    /// (`super::uncaptured`).
    pub unseen: Option<Unseen>,
    /// Negotiated capabilities, when the handshake was seen.
    pub(super) caps: Option<u64>,
    user: Option<String>,
    database: Option<String>,
    pub pending: Option<Pending>,
    stmts: Statements,
}

/// A connection.
#[derive(Debug, Default)]
pub(super) struct Conn {
    pub rd: Framer,
    pub wr: Framer,
    pub st: State,
    pub cand: Candidate,
}

impl Conn {
    /// Handles one chunk of this connection.
    pub fn feed(&mut self, chunk: &Chunk<'_>, ctx: &mut Ctx<'_>) {
        let write = chunk.dir == Direction::Write;
        let restartable = match self.st.phase {
            Phase::Unsynced | Phase::Tls | Phase::Compressed => true,
            _ => (self.st.pending.is_none() && self.wr.is_idle()) || self.st.unseen.is_some(),
        };
        if write && restartable {
            if let Some(caps) = greeting(chunk) {
                self.restart(caps, ctx);
                return;
            }
        }
        if write
            && !self.rd.is_idle()
            && matches!(self.st.phase, Phase::Auth { .. } | Phase::Command)
        {
            // The server writes only once it has read the client's packet
            // whole: the client's framing was wrong (a chunk was lost).
            self.lose(ctx);
        }
        match self.st.phase {
            Phase::Tls => ctx.counters.tls_chunks += 1,
            Phase::Compressed => ctx.counters.chunks_skipped += 1,
            Phase::Unsynced if write => {
                if self.unsynced_write(ctx) {
                    self.decode(chunk, ctx);
                } else {
                    ctx.counters.chunks_skipped += 1;
                }
            }
            Phase::Unsynced => self.unsynced_read(chunk, ctx),
            _ if self.st.unseen.is_some() => {
                if write {
                    self.unseen_write(chunk, ctx);
                } else {
                    // The server reads only once it has written the whole
                    // response: its end was not recognized.
                    self.give_up_unseen(ctx.counters);
                    self.decode(chunk, ctx);
                }
            }
            _ if write && self.st.wr_lost => ctx.counters.chunks_skipped += 1,
            _ => self.decode(chunk, ctx),
        }
    }

    /// The connection closed: pending work counts as unfinished.
    pub fn close(mut self, counters: &mut Counters) {
        if self.st.unseen.is_some() {
            self.give_up_unseen(counters);
        } else if self.st.pending.as_ref().is_some_and(|p| !p.tail) {
            counters.unfinished += 1;
        }
        counters.chunks_skipped += self.cand.chunks();
    }

    /// The server greeted: a new connection on this descriptor.
    fn restart(&mut self, server_caps: u64, ctx: &mut Ctx<'_>) {
        self.drop_candidate(ctx);
        if self.st.unseen.is_some() {
            self.give_up_unseen(ctx.counters);
        }
        *self = Conn::default();
        self.st.phase = Phase::Greeted { server_caps };
    }

    /// Decodes a chunk of a connection whose framing is known.
    fn decode(&mut self, chunk: &Chunk<'_>, ctx: &mut Ctx<'_>) {
        let mut cur = Cursor::new(chunk.data, chunk.len);
        let rcap = read_cap(ctx.max_text);
        let wcap = |_| SMALL_CAP;
        let mut unmatched = false;
        loop {
            let flow = match chunk.dir {
                Direction::Read => match self.rd.next(&mut cur, &rcap, self.st.read_expect()) {
                    None => break,
                    Some(Event::Lost | Event::Gap { .. }) => Flow::ReadLost,
                    Some(Event::Packet(p)) => self.st.on_read(&p, &mut self.wr, ctx),
                },
                Direction::Write => match self.wr.next(&mut cur, &wcap, self.st.write_expect()) {
                    None => break,
                    Some(Event::Lost) => Flow::WriteLost,
                    Some(Event::Gap { header_at }) => Flow::WriteGap(header_at),
                    Some(Event::Packet(p)) => self.st.on_write(&p, ctx, &mut unmatched),
                },
            };
            match flow {
                Flow::Next => {}
                Flow::Stop => break,
                Flow::WriteGap(at) if self.begin_unseen(chunk, at) => {
                    self.unseen_end(chunk, ctx);
                    break;
                }
                Flow::WriteLost | Flow::WriteGap(_) if self.st.phase == Phase::Command => {
                    ctx.counters.desyncs += 1;
                    self.st.pending = None;
                    self.st.wr_lost = true;
                    self.wr.reset();
                    break;
                }
                Flow::ReadLost | Flow::WriteLost | Flow::WriteGap(_) => {
                    self.lose(ctx);
                    break;
                }
            }
        }
        if unmatched {
            ctx.counters.responses_unmatched += 1;
        }
    }

    /// The framing is lost: drop pending work, wait for a resync point.
    fn lose(&mut self, ctx: &mut Ctx<'_>) {
        ctx.counters.desyncs += 1;
        self.st.phase = Phase::Unsynced;
        self.st.pending = None;
        self.st.unseen = None;
        self.st.wr_lost = false;
        self.rd.reset();
        self.wr.reset();
    }
}

/// A write chunk that is exactly one whole Handshake (protocol 10) packet
/// with sequence id 0, from a 4.1 server: its capabilities.
fn greeting(chunk: &Chunk<'_>) -> Option<u64> {
    let d = chunk.data;
    if d.len() as u64 != chunk.len || d.len() < 4 + 34 || d[3] != 0 {
        return None;
    }
    let plen = u32::from_le_bytes([d[0], d[1], d[2], 0]) as usize;
    if plen + 4 != d.len() {
        return None;
    }
    wire::greeting_caps(&d[4..]).filter(|c| c & wire::CLIENT_PROTOCOL_41 != 0)
}

impl State {
    /// Sequence ids a client packet may begin with.
    fn read_expect(&self) -> Expect {
        match self.phase {
            Phase::Greeted { .. } => Expect::seq(1, None),
            Phase::Auth { next_seq } => Expect::seq(next_seq, None),
            Phase::Command if !self.wr_lost => {
                let exchange = self.pending.as_ref().filter(|p| p.accepts_client());
                Expect::seq(0, exchange.map(|p| p.next_seq))
            }
            _ => Expect::ANY,
        }
    }

    /// Sequence ids a server packet may begin with.
    fn write_expect(&self) -> Expect {
        match (self.phase, &self.pending) {
            (Phase::Auth { next_seq }, _) => Expect::seq(next_seq, None),
            (Phase::Command, Some(p)) if !p.tail => Expect::seq(p.next_seq, None),
            _ => Expect::ANY,
        }
    }

    /// A client packet.
    pub fn on_read(&mut self, p: &Packet<'_>, wr: &mut Framer, ctx: &mut Ctx<'_>) -> Flow {
        match self.phase {
            Phase::Greeted { server_caps } => {
                if p.seq != 1 {
                    return Flow::ReadLost;
                }
                let Some(login) = wire::handshake_response(p.head, p.len) else {
                    return Flow::ReadLost;
                };
                if login.ssl {
                    ctx.counters.tls_connections += 1;
                    self.phase = Phase::Tls;
                    return Flow::Stop;
                }
                self.caps = Some(server_caps & login.caps);
                self.user = login.user;
                self.database = login.database;
                self.phase = Phase::Auth {
                    next_seq: p.last_seq.wrapping_add(1),
                };
                Flow::Next
            }
            Phase::Auth { next_seq } if p.seq == next_seq => {
                self.phase = Phase::Auth {
                    next_seq: p.last_seq.wrapping_add(1),
                };
                Flow::Next
            }
            Phase::Auth { .. } => Flow::ReadLost,
            Phase::Command => self.command(p, wr, ctx),
            _ => Flow::Next,
        }
    }

    /// A server packet.
    pub fn on_write(&mut self, p: &Packet<'_>, ctx: &mut Ctx<'_>, unmatched: &mut bool) -> Flow {
        match self.phase {
            Phase::Auth { next_seq } if p.seq == next_seq => {
                match p.first() {
                    Some(0x00) => {
                        if let Some(s) = wire::ok_packet(p.head, self.caps, !p.truncated())
                            .and_then(|ok| ok.schema)
                        {
                            self.database = Some(wire::string(s));
                        }
                        let compress = wire::CLIENT_COMPRESS | wire::CLIENT_ZSTD;
                        if self.caps.is_some_and(|c| c & compress != 0) {
                            self.phase = Phase::Compressed;
                            return Flow::Stop;
                        }
                        self.phase = Phase::Command;
                    }
                    Some(0xff) => self.phase = Phase::Command, // refused: the server closes
                    _ => {
                        self.phase = Phase::Auth {
                            next_seq: p.last_seq.wrapping_add(1),
                        }
                    }
                }
                Flow::Next
            }
            Phase::Command => self.response(p, ctx, unmatched),
            _ => Flow::WriteLost,
        }
    }

    /// A client packet in the command phase: a new command, or part of
    /// the exchange of the pending one.
    fn command(&mut self, p: &Packet<'_>, wr: &mut Framer, ctx: &mut Ctx<'_>) -> Flow {
        if let Some(pend) = self.pending.as_mut() {
            if pend.accepts_client() && p.seq == pend.next_seq {
                pend.on_client(p);
                return Flow::Next;
            }
            if pend.tail {
                self.pending = None; // the prepare ended without an EOF
            }
        }
        if p.seq != 0 {
            // Part of an exchange whose response was lost, or not a command.
            return if self.wr_lost {
                Flow::Next
            } else {
                Flow::ReadLost
            };
        }
        // Servers answer a command before reading the next: a command
        // still waiting means its response (or part of it) was not seen.
        let overlapped = self.pending.take().is_some();
        if overlapped {
            ctx.counters.desyncs += 1;
        }
        if self.wr_lost || !wr.is_idle() {
            wr.reset();
            self.wr_lost = false;
        }
        let Some(cmd) = p.first() else {
            if p.len == 0 {
                return Flow::ReadLost; // an empty packet is no command
            }
            // The command byte was not captured: its response cannot be followed.
            ctx.counters.desyncs += 1;
            self.wr_lost = true;
            return Flow::Next;
        };
        if !wire::command_fits(p.head, p.len, false) {
            return Flow::ReadLost;
        }
        let req = match cmd {
            wire::COM_QUERY => {
                let attrs = match self.caps {
                    Some(c) => c & wire::CLIENT_QUERY_ATTRIBUTES != 0,
                    // Unknown: MySQL 8 clients that negotiated query
                    // attributes send a parameter count (≤ 32 here) and a
                    // parameter set count of 1 before the text.
                    None => p.head.get(1).is_some_and(|&n| n <= 32) && p.head.get(2) == Some(&1),
                };
                let start = wire::query_text_start(p.head, attrs)
                    .or_else(|| (self.caps.is_none()).then_some(1));
                let (text, truncated) = text_at(p, start, ctx.max_text);
                Request::Query { text, truncated }
            }
            wire::COM_STMT_PREPARE => {
                let (text, truncated) = text_at(p, Some(1), ctx.max_text);
                Request::Prepare { text, truncated }
            }
            wire::COM_STMT_EXECUTE | wire::COM_STMT_BULK_EXECUTE => Request::Execute {
                id: u32_at(p.head, 1),
            },
            wire::COM_STMT_CLOSE => {
                if let Some(id) = u32_at(p.head, 1) {
                    self.stmts.remove(id);
                }
                Request::Other
            }
            wire::COM_INIT_DB => Request::InitDb {
                name: (!p.truncated()).then(|| wire::string(&p.head[1..])),
            },
            wire::COM_CHANGE_USER => change_user(p.head, self.caps),
            wire::COM_RESET_CONNECTION => Request::ResetConnection,
            _ => Request::Other,
        };
        self.pending = Pending::new(cmd, req, ctx.time_ns, p.last_seq).map(|mut p| {
            p.overlapped = overlapped;
            p
        });
        Flow::Next
    }

    /// A server packet in the command phase: part of the pending command's response.
    fn response(&mut self, p: &Packet<'_>, ctx: &mut Ctx<'_>, unmatched: &mut bool) -> Flow {
        let Some(pend) = self.pending.as_mut() else {
            *unmatched = true;
            return Flow::Next;
        };
        if pend.tail && !(p.seq == pend.next_seq && p.first() == Some(0xfe) && p.len == 5) {
            // The prepare's response had ended: this answers nothing seen.
            self.pending = None;
            *unmatched = true;
            return Flow::Next;
        }
        if p.seq != pend.next_seq {
            return Flow::WriteLost;
        }
        let step = pend.on_server(p, self.caps);
        if let Some(id) = pend.prepared.take() {
            if let Request::Prepare { text, truncated } = &mut pend.req {
                self.stmts.insert(id, std::mem::take(text), *truncated);
            }
        }
        match step {
            Step::More => Flow::Next,
            Step::Done => {
                self.complete(ctx);
                Flow::Next
            }
            Step::Invalid => Flow::WriteLost,
        }
    }

    /// The pending command's response is complete: its row, if it makes
    /// one, and what it changed.
    pub(super) fn complete(&mut self, ctx: &mut Ctx<'_>) {
        let Some(pend) = self.pending.take() else {
            return;
        };
        let Pending {
            req,
            start_ns,
            error,
            schema,
            ..
        } = pend;
        let rows = (pend.results && !pend.cursor && !pend.uncounted).then_some(pend.rows);
        let failed = error.is_some();
        let row = |kind, text, text_truncated, name, rows| Statement {
            conn: ctx.key,
            start_ns,
            end_ns: ctx.time_ns,
            kind,
            text,
            text_truncated,
            name,
            tag: None,
            rows,
            error,
            user: self.user.clone(),
            database: self.database.clone(),
        };
        let statement = match req {
            Request::Query { text, truncated } => {
                Some(row(Kind::Simple, Some(text), truncated, None, rows))
            }
            Request::Prepare { text, truncated } if failed => {
                Some(row(Kind::PrepareFailed, Some(text), truncated, None, None))
            }
            Request::Execute { id } => {
                let id = match id {
                    Some(u32::MAX) => self.stmts.last,
                    id => id,
                };
                let stored = id.and_then(|id| self.stmts.map.get(&id));
                if stored.is_none() {
                    ctx.counters.unknown_prepared += 1;
                }
                Some(row(
                    Kind::Prepared,
                    stored.map(|s| s.text.clone()),
                    stored.is_some_and(|s| s.truncated),
                    id.map(|id| id.to_string()),
                    rows,
                ))
            }
            Request::InitDb { name } if !failed => {
                self.database = name;
                None
            }
            Request::ChangeUser { user, database } if !failed => {
                self.user = user;
                self.database = database;
                self.stmts.clear();
                None
            }
            Request::ResetConnection if !failed => {
                self.stmts.clear();
                None
            }
            _ => None,
        };
        ctx.out.extend(statement);
        if let Some(s) = schema {
            self.database = Some(s);
        }
    }
}

/// A statement text from `start` in the packet's payload, at most
/// `max` bytes, and whether it is cut. No start (query attributes not
/// captured): an empty, cut text.
fn text_at(p: &Packet<'_>, start: Option<usize>, max: usize) -> (Vec<u8>, bool) {
    let Some(start) = start.filter(|&s| s <= p.head.len()) else {
        return (Vec::new(), true);
    };
    let text = &p.head[start..];
    let text = &text[..text.len().min(max)];
    (text.to_vec(), (text.len() as u64) < p.len - start as u64)
}

/// COM_CHANGE_USER: user, auth data, database. Without the handshake's
/// capabilities, the auth data is taken as length-prefixed
/// (CLIENT_SECURE_CONNECTION, which 4.1 clients set).
fn change_user(p: &[u8], caps: Option<u64>) -> Request {
    let mut at = 1;
    let user = wire::nul_str(p, &mut at).map(wire::string);
    let secure = caps.is_none_or(|c| c & wire::CLIENT_SECURE_CONNECTION != 0);
    let auth = if secure {
        p.get(at).map(|&n| at += 1 + usize::from(n))
    } else {
        wire::nul_str(p, &mut at).map(|_| ())
    };
    let database = auth
        .and_then(|()| wire::nul_str(p, &mut at))
        .filter(|d| !d.is_empty())
        .map(wire::string);
    Request::ChangeUser { user, database }
}
