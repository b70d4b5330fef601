//! The MySQL/MariaDB client/server protocol, decoded from the bytes a
//! server's socket system calls moved.
//!
//! References: the MySQL source documentation's "Client/Server Protocol"
//! pages (<https://dev.mysql.com/doc/dev/mysql-server/latest/PAGE_PROTOCOL.html>:
//! "MySQL Packets", "Connection Phase", "Command Phase", "Generic Response
//! Packets", "Text Resultset", "Binary Protocol Resultset", "Prepared
//! Statements") and MariaDB's "Client/Server Protocol" knowledge base
//! (<https://mariadb.com/kb/en/clientserver-protocol/>, with "MariaDB
//! Protocol Differences with MySQL").
//!
//! # What the server's system calls look like
//!
//! Observed with `strace` on MariaDB 10.11 (Debian 12), over TCP and a Unix
//! socket alike: the server writes with `sendto(fd, buf, n, MSG_DONTWAIT)`
//! and reads with `recvfrom(fd, buf, n, MSG_DONTWAIT)`. It reads every
//! client packet with two calls, the 4-byte header then exactly the payload,
//! so a command is two read chunks, and it reads a command only after
//! writing the whole response to the previous one. It writes the greeting,
//! the handshake's OK and small responses in one call each (a whole result
//! set with its column definitions and rows, up to its 16 KiB buffer);
//! larger responses go out as 16 KiB writes and large writes of the rest,
//! so packets straddle chunks. Each result of a multi-statement query is
//! its own write.
//!
//! # Framing
//!
//! Packets are a 3-byte little-endian payload length and a sequence id,
//! payloads of 0xffffff bytes continue in the next packet ("MySQL Packets").
//! Each direction is framed on its own: a packet may be split across
//! chunks, several may share a chunk, and bytes a chunk moved but the probe
//! did not capture are skipped by the lengths: a statement text loses its
//! tail ([`Statement::text_truncated`]), the framing stays. A header in
//! bytes not captured loses the framing ([`Counters::desyncs`]). Sequence
//! ids are checked as each packet's header arrives: a command starts at 0,
//! every packet of its exchange (both directions) carries the next id. A
//! command must be a known client command with a length it can have (1 for
//! COM_PING, 5 for COM_STMT_CLOSE, an iteration count of 1 in
//! COM_STMT_EXECUTE, …), and the server writes only once it has read a
//! client packet whole; anything else loses the framing too. These checks
//! also catch most chunks lost without a trace (the [`Chunk`] interface has
//! no loss marker): a lost chunk shifts the framing onto bytes that are not
//! headers, and a command whose response was lost is dropped (below).
//! Losses that keep every length and sequence id consistent (a whole
//! command and its response, say) cannot be seen, and rarely a loss joins
//! pieces of different packets into one that passes the checks.
//!
//! # Connection phase
//!
//! The server's Handshake (protocol 10, sequence id 0) starts a connection
//! afresh, even on a descriptor not closed, when it is a chunk of its own
//! (servers write it with one call; a Handshake split across chunks is
//! treated as a connection joined mid-stream).
//! The client's HandshakeResponse gives `user` and, with
//! CLIENT_CONNECT_WITH_DB, `database` (both kept for the connection's rows);
//! the capabilities both sides announced are remembered (MariaDB's extended
//! capabilities too). An SSLRequest (the 32-byte response with CLIENT_SSL)
//! counts in [`Counters::tls_connections`] and every later chunk of the
//! connection in [`Counters::tls_chunks`], until a new Handshake or the
//! close. Authentication exchanges (auth switch, more data) run to the
//! server's OK or ERR. When compression (CLIENT_COMPRESS, zstd) is
//! negotiated the connection's later chunks are skipped
//! ([`Counters::chunks_skipped`]): compressed packets are not decoded.
//!
//! # What makes a row
//!
//! One [`Statement`] per command whose complete response was seen:
//! * COM_QUERY: [`Kind::Simple`](crate::Kind::Simple), its text. Query
//!   attributes (MySQL 8, CLIENT_QUERY_ATTRIBUTES) are skipped to reach the
//!   text (when they were not all captured, the text is empty and flagged
//!   truncated); when the
//!   handshake was not seen, a payload whose second and third bytes are a
//!   count ≤ 32 and a set count of 1 is read as carrying them.
//! * COM_STMT_EXECUTE (and MariaDB's COM_STMT_BULK_EXECUTE):
//!   [`Kind::Prepared`](crate::Kind::Prepared), the text its
//!   COM_STMT_PREPARE sent, `name` the statement id in decimal (MariaDB's
//!   id 0xffffffff, "the last prepared",
//!   resolved). The text is `None` and [`Counters::unknown_prepared`]
//!   counts when the prepare was not seen (or failed, or its statement was
//!   over the per-connection bounds: [`MAX_PREPARED`] statements,
//!   [`MAX_PREPARED_BYTES`] of text).
//! * COM_STMT_PREPARE answered by ERR:
//!   [`Kind::PrepareFailed`](crate::Kind::PrepareFailed), `rows` `None`. A
//!   prepare that succeeds makes no row; it remembers the text under its id.
//!
//! `start_ns` is the time of the client chunk that completed the command
//! packet, `end_ns` that of the server chunk holding the packet that
//! completed the response. `rows`: the rows of a result set (row packets
//! counted) or the affected rows of an OK; for several results
//! (SERVER_MORE_RESULTS_EXISTS: multi-statements, procedures) their sum and
//! the row completes with the last result. `error`: the ERR packet's code,
//! SQLSTATE and message; an ERR ends the response (a failed part of a
//! multi-statement is the last), and `rows` then keeps the sum of the parts
//! before it (`None` when the ERR was the whole response). MariaDB's
//! progress reports (ERR packets with code 0xffff) are skipped. An
//! execution that opened a cursor has `rows` `None` (its rows come with
//! COM_STMT_FETCH, which makes no row). `tag` is always `None`.
//!
//! Other commands make no row; their responses are followed so the next
//! command pairs right: COM_INIT_DB (sets `database` for later rows when
//! answered OK), COM_CHANGE_USER (its user and database replace the
//! connection's, its prepared statements are forgotten; authentication
//! exchanges followed), COM_RESET_CONNECTION (prepared statements
//! forgotten), COM_STMT_CLOSE (forgets the statement; no response),
//! COM_STMT_RESET, COM_PING, COM_QUIT, COM_FIELD_LIST, COM_STATISTICS,
//! COM_SET_OPTION, COM_STMT_FETCH, COM_STMT_SEND_LONG_DATA, replication's
//! COM_BINLOG_DUMP and the rest. When the handshake negotiated
//! CLIENT_SESSION_TRACK, a schema change an OK packet reports (`USE db`)
//! sets `database` for later rows (the row of the statement that changed it
//! has the previous one). LOAD DATA LOCAL INFILE's file transfer is followed.
//!
//! # Result sets without knowing the capabilities
//!
//! CLIENT_DEPRECATE_EOF removes the EOF after column definitions and ends
//! rows with an OK packet with a 0xfe header. Result sets are decoded the
//! same with or without it: after the definitions, a 0xfe packet of exactly
//! 5 bytes is the EOF ending them (an OK is at least 7), and any 0xfe packet
//! shorter than 0xffffff bytes ends the rows (a text row beginning with 0xfe
//! is longer). A column count followed by one byte is MariaDB's
//! CACHE_METADATA (MySQL's OPTIONAL_RESULTSET_METADATA) flag; 0 means no
//! definitions follow. The negotiated flag is used for COM_STMT_PREPARE's
//! definitions; when the handshake was not seen, a 5-byte 0xfe packet with
//! the next sequence id after the last definition is taken as its EOF.
//!
//! # Pairing, losses and resync
//!
//! Servers answer one command before reading the next, so a command read
//! while another still waits for (the rest of) its response means that
//! response was lost: the waiting command is dropped and counts in
//! [`Counters::desyncs`]. A server packet when no command waits counts in
//! [`Counters::responses_unmatched`] (once per chunk); a server packet with
//! a wrong sequence id, a header not captured, or a packet the response
//! cannot contain drops the waiting command (a desync) and skips server
//! chunks ([`Counters::chunks_skipped`]) until the next command is read:
//! the client's framing is intact and the next response starts with the
//! next server chunk. A header lost in the client's bytes (or a client
//! packet that cannot be there) loses the connection's framing: pending
//! work is dropped, chunks are skipped until a resync point.
//!
//! A connection first seen mid-stream, or whose client framing was lost,
//! resynchronizes at a client chunk that begins with a command packet
//! (sequence id 0, a common command with a length it can have) and that,
//! alone or with the next client chunks (the server reads header and
//! payload separately) and with no server chunk in between, ends exactly
//! where whole command packets end; at most one of them may be a command
//! the server answers, and it comes last. Nothing is pending at that point
//! (the server reads only when it has answered). The earliest client chunk
//! since the search began is tried first; when it fails, or a server chunk
//! shows it never completed, the search resumes at the next one (at most 8
//! chunks are kept, 64 KiB of each). A server chunk ends the search: the
//! command found, if any, is decoded and that chunk is its response.
//! Chunks skipped meanwhile count in [`Counters::chunks_skipped`].
//!
//! Residual risk: client bytes that are not a command's start (a piece of
//! a long payload read in several calls, a LOCAL INFILE block) may pass
//! these checks and be decoded as a command; the response must then also
//! follow the protocol with matching sequence ids for a row to come out,
//! and the row's text is still bytes the client sent. No row is ever made
//! from a response whose command was not seen.
//!
//! # Responses longer than the capture
//!
//! A result set longer than the capture loses the server's framing at the
//! first row header not captured. When that write carries its last bytes
//! ([`Chunk::tail`]), exactly one command is outstanding (it was not read
//! while another waited) and the column count was seen, the connection is
//! instead inside a response whose packets were not captured: server writes
//! are consumed (neither skipped nor desyncs; their missing bytes count in
//! [`Counters::bytes_not_captured`]) until one whose last bytes (its tail, or
//! its data when captured whole) are exactly one EOF, 0xfe OK (checked
//! against CLIENT_DEPRECATE_EOF when the handshake was seen) or ERR packet
//! ending at the write's end. That packet ends the result set as if every
//! byte had been captured, and the row is the one full capture makes but for
//! `rows`: `None`, the row packets were not counted. With
//! SERVER_MORE_RESULTS_EXISTS (or a 5-byte EOF that may be the one ending the
//! metadata, when the framing was lost before the rows), the framing resumes
//! at the next write, its sequence id checked. A client chunk (or a new
//! Handshake, or the close) before such a write falls back to the loss
//! described above, counted as before. Residual risk: a write that is not the
//! response's last ending with row bytes that form such a packet; servers
//! flush a response's writes when their buffer fills, at byte counts unrelated
//! to packets, and read the next command only after its last packet. A
//! terminal packet whose status flags were not captured loses the framing
//! (whether more results follow cannot be told).
//!
//! # Bounds
//!
//! Per connection: at most 3 header bytes and one packet's head per
//! direction are buffered (statement texts up to the decoder's text limit,
//! [`DEFAULT_MAX_TEXT`] unless set, other packets 4 KiB), at most 8 client
//! chunks of 64 KiB while searching for a resync point, at most
//! [`MAX_PREPARED`] prepared statements and [`MAX_PREPARED_BYTES`] of their
//! text. A connection's state lives until [`Decoder::close`]. Nothing is
//! allocated per byte: a packet whole in one chunk is parsed in place.

mod candidate;
mod conn;
mod framer;
mod response;
mod resync;
mod uncaptured;
mod wire;

pub use conn::{MAX_PREPARED, MAX_PREPARED_BYTES};

use crate::{Chunk, ConnKey, Counters, Decoder, Statement};
use conn::{Conn, Ctx};
use std::collections::HashMap;

/// Statement texts are kept up to this many bytes by default (longer ones
/// are cut and flagged [`Statement::text_truncated`]).
pub const DEFAULT_MAX_TEXT: usize = 1 << 20;

/// Decodes MySQL and MariaDB connections.
#[derive(Debug)]
pub struct MyDecoder {
    conns: HashMap<ConnKey, Conn>,
    counters: Counters,
    max_text: usize,
}

impl Default for MyDecoder {
    fn default() -> Self {
        MyDecoder::new()
    }
}

impl MyDecoder {
    /// A decoder keeping statement texts up to [`DEFAULT_MAX_TEXT`] bytes.
    pub fn new() -> Self {
        MyDecoder::with_max_text(DEFAULT_MAX_TEXT)
    }

    /// A decoder keeping statement texts up to `max_text` bytes.
    pub fn with_max_text(max_text: usize) -> Self {
        MyDecoder {
            conns: HashMap::new(),
            counters: Counters::default(),
            max_text,
        }
    }
}

impl Decoder for MyDecoder {
    fn feed(&mut self, chunk: &Chunk<'_>, out: &mut Vec<Statement>) {
        self.counters.chunks += 1;
        self.counters.bytes_not_captured += chunk.missing();
        let conn = self.conns.entry(chunk.conn).or_default();
        let mut ctx = Ctx {
            key: chunk.conn,
            time_ns: chunk.time_ns,
            counters: &mut self.counters,
            out,
            max_text: self.max_text,
        };
        conn.feed(chunk, &mut ctx);
    }

    fn close(&mut self, conn: ConnKey) {
        if let Some(c) = self.conns.remove(&conn) {
            c.close(&mut self.counters);
        }
    }

    fn connections(&self) -> Vec<ConnKey> {
        self.conns.keys().copied().collect()
    }

    fn lost(&mut self, chunks: u64) {
        let keys = self.connections();
        self.counters.desyncs += keys.len() as u64;
        self.counters.chunks_skipped += chunks;
        for k in keys {
            self.close(k);
        }
    }

    fn forget_fed(&mut self, chunks: u64, before: Counters) {
        self.counters = before;
        self.lost(chunks);
    }

    fn counters(&self) -> &Counters {
        &self.counters
    }
}

#[cfg(test)]
mod tests;
