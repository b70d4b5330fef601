//! Test-only encoders: packets, payloads, and scripted conversations.

use crate::mysql::wire::*;
use crate::{Chunk, ConnKey, Decoder, Direction, Kind, Statement, StatementError};

pub const KEY: ConnKey = ConnKey { pid: 42, fd: 7 };

/// Capabilities of a MariaDB 10.11 server (its Handshake as `strace` showed
/// it, with CLIENT_DEPRECATE_EOF and CLIENT_SESSION_TRACK).
pub const SERVER_CAPS: u64 = 0x81ff_f7fe;
/// A 4.1 client with multi-statements, plugin auth, connect-with-db.
pub const CLIENT_CAPS: u64 = CLIENT_PROTOCOL_41
    | CLIENT_SECURE_CONNECTION
    | CLIENT_PLUGIN_AUTH_LENENC
    | CLIENT_CONNECT_WITH_DB
    | (1 << 13) // TRANSACTIONS
    | (1 << 16) // MULTI_STATEMENTS
    | (1 << 17) // MULTI_RESULTS
    | (1 << 19); // PLUGIN_AUTH

/// Packets of `payload` with sequence ids from `seq` (split at 0xffffff
/// bytes, an empty packet after an exact multiple); the next sequence id.
pub fn packets(seq: u8, payload: &[u8], out: &mut Vec<u8>) -> u8 {
    let mut seq = seq;
    let mut rest = payload;
    loop {
        let n = rest.len().min(MAX_PACKET as usize);
        out.extend_from_slice(&(n as u32).to_le_bytes()[..3]);
        out.push(seq);
        out.extend_from_slice(&rest[..n]);
        seq = seq.wrapping_add(1);
        rest = &rest[n..];
        if n < MAX_PACKET as usize {
            return seq;
        }
    }
}

pub fn lenenc_int(v: u64, out: &mut Vec<u8>) {
    match v {
        0..=250 => out.push(v as u8),
        251..=0xffff => {
            out.push(0xfc);
            out.extend_from_slice(&(v as u16).to_le_bytes());
        }
        0x1_0000..=0xff_ffff => {
            out.push(0xfd);
            out.extend_from_slice(&(v as u32).to_le_bytes()[..3]);
        }
        _ => {
            out.push(0xfe);
            out.extend_from_slice(&v.to_le_bytes());
        }
    }
}

pub fn lenenc_bytes(s: &[u8], out: &mut Vec<u8>) {
    lenenc_int(s.len() as u64, out);
    out.extend_from_slice(s);
}

/// The server's Handshake (protocol 10).
pub fn greeting(caps: u64) -> Vec<u8> {
    let mut p = vec![10];
    p.extend_from_slice(b"5.5.5-10.11.19-MariaDB-0+deb12u1\0");
    p.extend_from_slice(&5u32.to_le_bytes()); // thread id
    p.extend_from_slice(b"?aK5f%\"x\0"); // scramble part 1, filler
    p.extend_from_slice(&(caps as u16).to_le_bytes());
    p.push(45); // charset
    p.extend_from_slice(&2u16.to_le_bytes()); // status
    p.extend_from_slice(&((caps >> 16) as u16).to_le_bytes());
    p.push(21);
    p.extend_from_slice(&[0; 6]);
    p.extend_from_slice(&((caps >> 32) as u32).to_le_bytes());
    p.extend_from_slice(b"0123456789ab\0mysql_native_password\0");
    p
}

/// The client's HandshakeResponse41.
pub fn login(caps: u64, user: &str, db: Option<&str>) -> Vec<u8> {
    let caps = if db.is_some() {
        caps | CLIENT_CONNECT_WITH_DB
    } else {
        caps & !CLIENT_CONNECT_WITH_DB
    };
    let mut p = (caps as u32).to_le_bytes().to_vec();
    p.extend_from_slice(&(1u32 << 24).to_le_bytes());
    p.push(45);
    p.extend_from_slice(&[0; 19]);
    p.extend_from_slice(&((caps >> 32) as u32).to_le_bytes());
    p.extend_from_slice(user.as_bytes());
    p.push(0);
    lenenc_bytes(&[0x11; 20], &mut p); // auth response
    if let Some(db) = db {
        p.extend_from_slice(db.as_bytes());
        p.push(0);
    }
    p.extend_from_slice(b"mysql_native_password\0");
    p
}

/// An SSLRequest: the HandshakeResponse41's 32-byte header with CLIENT_SSL.
pub fn ssl_request(caps: u64) -> Vec<u8> {
    let mut p = login(caps | CLIENT_SSL, "x", None);
    p.truncate(32);
    p
}

pub fn ok(affected: u64, status: u16) -> Vec<u8> {
    ok_with(0x00, affected, status)
}

/// An OK packet with header `hdr` (0xfe: a result set's terminator).
pub fn ok_with(hdr: u8, affected: u64, status: u16) -> Vec<u8> {
    let mut p = vec![hdr];
    lenenc_int(affected, &mut p);
    lenenc_int(0, &mut p);
    p.extend_from_slice(&status.to_le_bytes());
    p.extend_from_slice(&0u16.to_le_bytes());
    p
}

/// An OK reporting a schema change (session tracking).
pub fn ok_schema(schema: &str) -> Vec<u8> {
    let mut p = ok(0, 0x4002);
    p.push(0); // info
    let mut entry = Vec::new();
    lenenc_bytes(schema.as_bytes(), &mut entry);
    let mut changes = vec![1];
    lenenc_bytes(&entry, &mut changes);
    lenenc_bytes(&changes, &mut p);
    p
}

pub fn err(code: u16, state: &str, msg: &str) -> Vec<u8> {
    let mut p = vec![0xff];
    p.extend_from_slice(&code.to_le_bytes());
    p.push(b'#');
    p.extend_from_slice(state.as_bytes());
    p.extend_from_slice(msg.as_bytes());
    p
}

pub fn eof(status: u16) -> Vec<u8> {
    let mut p = vec![0xfe, 0, 0];
    p.extend_from_slice(&status.to_le_bytes());
    p
}

pub fn column(name: &str) -> Vec<u8> {
    let mut p = Vec::new();
    for s in [
        &b"def"[..],
        b"shop",
        b"t",
        b"t",
        name.as_bytes(),
        name.as_bytes(),
    ] {
        lenenc_bytes(s, &mut p);
    }
    p.extend_from_slice(&[0x0c, 0x21, 0, 0, 1, 0, 0, 0xfd, 0, 0, 0, 0, 0]);
    p
}

pub fn text_row(values: &[&[u8]]) -> Vec<u8> {
    let mut p = Vec::new();
    for v in values {
        lenenc_bytes(v, &mut p);
    }
    p
}

/// A binary-protocol row of BIGINT values.
pub fn binary_row(values: &[i64]) -> Vec<u8> {
    let mut p = vec![0x00];
    p.extend(std::iter::repeat_n(0, (values.len() + 7 + 2) / 8));
    for v in values {
        p.extend_from_slice(&v.to_le_bytes());
    }
    p
}

/// A result set's packets: column count, definitions, EOF (unless
/// `deprecate_eof`), rows, terminator with `status`.
pub fn result_set(
    cols: &[&str],
    rows: &[Vec<u8>],
    deprecate_eof: bool,
    status: u16,
) -> Vec<Vec<u8>> {
    let mut v = Vec::new();
    let mut count = Vec::new();
    lenenc_int(cols.len() as u64, &mut count);
    v.push(count);
    v.extend(cols.iter().map(|c| column(c)));
    if !deprecate_eof {
        v.push(eof(status & !SERVER_MORE_RESULTS_EXISTS));
    }
    v.extend(rows.iter().cloned());
    v.push(if deprecate_eof {
        ok_with(0xfe, 0, status)
    } else {
        eof(status)
    });
    v
}

/// COM_STMT_PREPARE's response: OK, definitions, EOFs unless `deprecate_eof`.
pub fn prepare_ok(id: u32, cols: u16, params: u16, deprecate_eof: bool) -> Vec<Vec<u8>> {
    let mut p = vec![0];
    p.extend_from_slice(&id.to_le_bytes());
    p.extend_from_slice(&cols.to_le_bytes());
    p.extend_from_slice(&params.to_le_bytes());
    p.extend_from_slice(&[0, 0, 0]);
    let mut v = vec![p];
    for (n, name) in [(params, "?"), (cols, "c")] {
        if n > 0 {
            v.extend((0..n).map(|_| column(name)));
            if !deprecate_eof {
                v.push(eof(2));
            }
        }
    }
    v
}

/// COM_STMT_EXECUTE with BIGINT parameters (`None`: NULL).
pub fn execute(id: u32, params: &[Option<i64>]) -> Vec<u8> {
    let mut p = vec![COM_STMT_EXECUTE];
    p.extend_from_slice(&id.to_le_bytes());
    p.push(0);
    p.extend_from_slice(&1u32.to_le_bytes());
    if !params.is_empty() {
        let mut bitmap = vec![0u8; params.len().div_ceil(8)];
        for (i, v) in params.iter().enumerate() {
            if v.is_none() {
                bitmap[i / 8] |= 1 << (i % 8);
            }
        }
        p.extend_from_slice(&bitmap);
        p.push(1);
        for _ in params {
            p.extend_from_slice(&[0x08, 0]);
        }
        for v in params.iter().flatten() {
            p.extend_from_slice(&v.to_le_bytes());
        }
    }
    p
}

/// A command: its byte, then `body`.
pub fn cmd(c: u8, body: &[u8]) -> Vec<u8> {
    let mut p = vec![c];
    p.extend_from_slice(body);
    p
}

/// One system call's bytes in a scripted conversation.
#[derive(Clone, Debug)]
pub struct Seg {
    pub dir: Direction,
    pub bytes: Vec<u8>,
    pub time: u64,
}

/// A conversation, built in order: sequence ids follow the protocol.
#[derive(Clone, Debug, Default)]
pub struct Script {
    pub segs: Vec<Seg>,
    seq: u8,
    time: u64,
    /// Statement texts the client sent (COM_QUERY, COM_STMT_PREPARE).
    pub texts: Vec<Vec<u8>>,
}

impl Script {
    fn seg(&mut self, dir: Direction, bytes: Vec<u8>) -> u64 {
        self.time += 1000;
        self.segs.push(Seg {
            dir,
            bytes,
            time: self.time,
        });
        self.time
    }

    /// The server's Handshake.
    pub fn greet(&mut self, caps: u64) -> u64 {
        let mut b = Vec::new();
        self.seq = packets(0, &greeting(caps), &mut b);
        self.seg(Direction::Write, b)
    }

    /// A client packet continuing the exchange, in its own chunk.
    pub fn client(&mut self, payload: &[u8]) -> u64 {
        let mut b = Vec::new();
        self.seq = packets(self.seq, payload, &mut b);
        self.seg(Direction::Read, b)
    }

    /// A new command (sequence id 0), in its own chunk.
    pub fn command(&mut self, payload: &[u8]) -> u64 {
        if matches!(payload.first(), Some(&COM_QUERY | &COM_STMT_PREPARE)) {
            self.texts.push(payload[1..].to_vec());
        }
        self.seq = 0;
        self.client(payload)
    }

    /// Server packets continuing the exchange, in one chunk.
    pub fn server(&mut self, payloads: &[Vec<u8>]) -> u64 {
        let mut b = Vec::new();
        for p in payloads {
            self.seq = packets(self.seq, p, &mut b);
        }
        self.seg(Direction::Write, b)
    }

    /// Greeting, login as `user` (into `db`), OK; `caps` for both sides.
    pub fn connect(&mut self, caps: u64, user: &str, db: Option<&str>) {
        self.greet(SERVER_CAPS);
        self.client(&login(caps, user, db));
        self.server(&[ok(0, 2)]);
    }
}

/// Feeds `segs` as one chunk each, every byte captured.
pub fn feed(dec: &mut impl Decoder, segs: &[Seg]) -> Vec<Statement> {
    let mut out = Vec::new();
    for s in segs {
        feed_chunk(dec, s.dir, &s.bytes, s.bytes.len() as u64, s.time, &mut out);
    }
    out
}

pub fn feed_chunk(
    dec: &mut impl Decoder,
    dir: Direction,
    data: &[u8],
    len: u64,
    time_ns: u64,
    out: &mut Vec<Statement>,
) {
    dec.feed(
        &Chunk {
            conn: KEY,
            dir,
            time_ns,
            len,
            data,
            tail: &[],
        },
        out,
    );
}

/// A row as the tests expect most: user `app`, database `shop`.
pub fn row(
    kind: Kind,
    text: Option<&str>,
    start_ns: u64,
    end_ns: u64,
    rows: Option<u64>,
) -> Statement {
    Statement {
        conn: KEY,
        start_ns,
        end_ns,
        kind,
        text: text.map(|t| t.as_bytes().to_vec()),
        text_truncated: false,
        name: None,
        tag: None,
        rows,
        error: None,
        user: Some("app".into()),
        database: Some("shop".into()),
    }
}

pub fn error(code: u32, state: &str, msg: &str) -> Option<StatementError> {
    Some(StatementError {
        sqlstate: state.into(),
        code: Some(code),
        message: msg.into(),
    })
}

/// Feeds one chunk with its last bytes `tail` (`len` bytes moved; `data`
/// the first captured, `tail` the last).
pub fn feed_tail(
    dec: &mut impl Decoder,
    dir: Direction,
    (data, tail): (&[u8], &[u8]),
    len: u64,
    time_ns: u64,
    out: &mut Vec<Statement>,
) {
    dec.feed(
        &Chunk {
            conn: KEY,
            dir,
            time_ns,
            len,
            data,
            tail,
        },
        out,
    );
}

/// Feeds `segs` as the probe captures them: the first `prefix` bytes of
/// each call and, of a longer call, up to `keep` of its last bytes.
pub fn feed_captured(
    dec: &mut impl Decoder,
    segs: &[Seg],
    prefix: usize,
    keep: usize,
) -> Vec<Statement> {
    let mut out = Vec::new();
    for s in segs {
        let b = &s.bytes;
        let n = b.len().min(prefix);
        let tail = &b[n.max(b.len().saturating_sub(keep))..];
        feed_tail(
            dec,
            s.dir,
            (&b[..n], tail),
            b.len() as u64,
            s.time,
            &mut out,
        );
    }
    out
}

/// `out` is `want` but for rows left out and `rows` counts not known
/// (`None`): never a row that was not sent, nor a wrong field.
pub fn only_known_rows(out: &[Statement], want: &[Statement]) -> bool {
    let mut w = want.iter();
    out.iter().all(|o| {
        w.by_ref().any(|w| {
            o == w
                || (o.rows.is_none() && {
                    let mut w = w.clone();
                    w.rows = None;
                    *o == w
                })
        })
    })
}
