//! PostgreSQL's frontend/backend protocol, version 3 (PostgreSQL
//! documentation, chapter 55 "Frontend/Backend Protocol"; message layouts
//! in 55.7 "Message Formats"), decoded from the bytes a server's socket
//! system calls moved: its reads are the client's requests, its writes
//! the responses.
//!
//! (Module docs: to be completed.)

mod backend;
mod conn;
mod framer;
mod frontend;
mod respond;
mod session;
mod table;

#[cfg(test)]
mod tests;

use std::collections::HashMap;

use crate::{Chunk, ConnKey, Counters, Decoder, Statement};
use conn::Conn;

/// The longest message accepted: a length field beyond this is not a
/// message (the server's own limit is 1 GiB, `PQ_LARGE_MESSAGE_LIMIT`).
const MAX_MESSAGE: u32 = 1 << 30;
/// The longest text kept of one Query or Parse; beyond, `text_truncated`.
const MAX_TEXT: u32 = 1 << 20;
/// The longest statement or portal name kept.
const MAX_NAME: u32 = 1024;
/// Prepared statements remembered per connection; beyond, the least
/// recently used eighth is forgotten.
const MAX_STATEMENTS: usize = 10_000;
/// Bytes of prepared statements' names and texts remembered per connection.
const MAX_STATEMENT_BYTES: usize = 64 << 20;
/// Portals remembered per connection.
const MAX_PORTALS: usize = 10_000;
/// Requests awaiting responses per connection; beyond, the framing is
/// deemed lost.
const MAX_PENDING: usize = 65_536;
/// Bytes of texts held by requests awaiting responses per connection.
const MAX_PENDING_BYTES: usize = 64 << 20;

/// Decodes PostgreSQL connections.
#[derive(Debug, Default)]
pub struct PgDecoder {
    conns: HashMap<ConnKey, Conn>,
    counters: Counters,
}

impl PgDecoder {
    /// A decoder that has seen no connection.
    pub fn new() -> Self {
        Self::default()
    }
}

impl Decoder for PgDecoder {
    fn feed(&mut self, chunk: &Chunk<'_>, out: &mut Vec<Statement>) {
        self.counters.chunks += 1;
        self.counters.bytes_not_captured += chunk.missing();
        let data = &chunk.data[..chunk
            .data
            .len()
            .min(usize::try_from(chunk.len).unwrap_or(usize::MAX))];
        let chunk = Chunk { data, ..*chunk };
        self.conns
            .entry(chunk.conn)
            .or_insert_with(|| Conn::new(chunk.conn))
            .feed(&chunk, &mut self.counters, out);
    }

    fn close(&mut self, conn: ConnKey) {
        if let Some(c) = self.conns.remove(&conn) {
            c.close(&mut self.counters);
        }
    }

    fn counters(&self) -> &Counters {
        &self.counters
    }
}
