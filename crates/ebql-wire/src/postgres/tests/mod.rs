//! Tests of the PostgreSQL decoder: conversations built with a test-only
//! message encoder ([`wire`]), fed as the server's reads and writes, with
//! the exact statements and counters they must give.

mod errors;
mod extended;
mod framing;
mod perf;
mod props;
mod replay;
mod resync;
mod simple;
mod tail;
mod wire;

use super::PgDecoder;
use crate::{Chunk, ConnKey, Counters, Decoder, Direction, Kind, Statement, StatementError};
use wire::{command_complete, rows};

/// A recorded chunk.
#[derive(Clone, Debug)]
pub struct Rec {
    pub conn: ConnKey,
    pub dir: Direction,
    pub time_ns: u64,
    pub len: u64,
    pub data: Vec<u8>,
    /// The call's last bytes beyond `data` ([`Chunk::tail`]).
    pub tail: Vec<u8>,
}

/// What the decoder is fed.
#[derive(Clone, Debug)]
pub enum Ev {
    Chunk(Rec),
    Close(ConnKey),
}

/// A conversation being recorded: each chunk 10 ns after the previous one.
pub struct Conv {
    pub conn: ConnKey,
    pub t: u64,
    pub evs: Vec<Ev>,
}

pub const USER: &str = "alice";
pub const DB: &str = "shop";

impl Conv {
    pub fn new(pid: u32, fd: i32) -> Self {
        Conv {
            conn: ConnKey { pid, fd },
            t: 0,
            evs: Vec::new(),
        }
    }

    /// A chunk of `len` bytes of which the first `captured` were captured.
    pub fn chunk(&mut self, dir: Direction, bytes: &[u8], captured: usize) -> u64 {
        self.t += 10;
        self.evs.push(Ev::Chunk(Rec {
            conn: self.conn,
            dir,
            time_ns: self.t,
            len: bytes.len() as u64,
            data: bytes[..captured.min(bytes.len())].to_vec(),
            tail: Vec::new(),
        }));
        self.t
    }

    /// A chunk of which the first `head` and the last `tail` bytes were
    /// captured (a probe that keeps calls' tails).
    pub fn cut(&mut self, dir: Direction, bytes: &[u8], head: usize, tail: usize) -> u64 {
        let t = self.chunk(dir, bytes, head);
        let head = head.min(bytes.len());
        let tail = tail.min(bytes.len() - head);
        if let Some(Ev::Chunk(r)) = self.evs.last_mut() {
            r.tail = bytes[bytes.len() - tail..].to_vec();
        }
        t
    }

    /// The server read these bytes; returns the chunk's time.
    pub fn read(&mut self, bytes: &[u8]) -> u64 {
        self.chunk(Direction::Read, bytes, bytes.len())
    }

    /// The server wrote these bytes; returns the chunk's time.
    pub fn write(&mut self, bytes: &[u8]) -> u64 {
        self.chunk(Direction::Write, bytes, bytes.len())
    }

    pub fn close(&mut self) {
        self.evs.push(Ev::Close(self.conn));
    }

    /// psql over TCP: SSLRequest refused, StartupMessage, logged in.
    pub fn login(&mut self) {
        self.read(&wire::ssl_request());
        self.write(b"N");
        self.read(&wire::startup(&[
            ("user", USER),
            ("database", DB),
            ("application_name", "psql"),
        ]));
        self.write(&wire::logged_in());
    }

    /// A simple query answered by `response`; returns (read, write) times.
    pub fn simple(&mut self, text: &str, response: &[u8]) -> (u64, u64) {
        (self.read(&wire::query(text)), self.write(response))
    }
}

/// Feeds events to a new decoder.
pub fn run(evs: &[Ev]) -> (Vec<Statement>, Counters) {
    let mut d = PgDecoder::new();
    let mut out = Vec::new();
    feed(&mut d, evs, &mut out);
    (out, *d.counters())
}

pub fn feed(d: &mut PgDecoder, evs: &[Ev], out: &mut Vec<Statement>) {
    for e in evs {
        match e {
            Ev::Chunk(r) => d.feed(
                &Chunk {
                    conn: r.conn,
                    dir: r.dir,
                    time_ns: r.time_ns,
                    len: r.len,
                    data: &r.data,
                    tail: &r.tail,
                },
                out,
            ),
            Ev::Close(k) => d.close(*k),
        }
    }
}

/// Counters with only `chunks` set.
pub fn chunks(n: usize) -> Counters {
    Counters {
        chunks: n as u64,
        ..Counters::default()
    }
}

/// The number of chunks in a conversation.
pub fn n_chunks(evs: &[Ev]) -> usize {
    evs.iter().filter(|e| matches!(e, Ev::Chunk(_))).count()
}

/// A row of a conversation that logged in as alice on shop.
pub fn row(conn: ConnKey, kind: Kind, text: Option<&str>, start_ns: u64, end_ns: u64) -> Statement {
    Statement {
        conn,
        start_ns,
        end_ns,
        kind,
        text: text.map(|t| t.as_bytes().to_vec()),
        text_truncated: false,
        name: None,
        tag: None,
        rows: None,
        error: None,
        user: Some(USER.into()),
        database: Some(DB.into()),
    }
}

/// A simple query's successful row.
pub fn simple_row(
    conn: ConnKey,
    text: &str,
    (start, end): (u64, u64),
    tag: &str,
    rows: Option<u64>,
) -> Statement {
    Statement {
        tag: Some(tag.into()),
        rows,
        ..row(conn, Kind::Simple, Some(text), start, end)
    }
}

pub fn err(sqlstate: &str, message: &str) -> Option<StatementError> {
    Some(StatementError {
        sqlstate: sqlstate.into(),
        code: None,
        message: message.into(),
    })
}

/// A `Prepared` row of a statement named `name` (`None`: unnamed).
pub fn exec_row(
    c: &Conv,
    name: Option<&str>,
    text: &str,
    (s, e): (u64, u64),
    tag: &str,
    rows: Option<u64>,
) -> Statement {
    Statement {
        name: name.map(Into::into),
        tag: Some(tag.into()),
        rows,
        ..row(c.conn, Kind::Prepared, Some(text), s, e)
    }
}

pub fn one_row() -> Vec<u8> {
    [rows(1, 1), command_complete("SELECT 1")].concat()
}
