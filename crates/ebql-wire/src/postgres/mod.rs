//! PostgreSQL's frontend/backend protocol, version 3 (PostgreSQL
//! documentation, chapter 55 "Frontend/Backend Protocol": message flow in
//! 55.2, message layouts in 55.7 "Message Formats", error fields in 55.8),
//! decoded from the bytes a server's socket system calls moved: its reads
//! are the client's requests, its writes the responses. One [`PgDecoder`]
//! serves every connection; each [`ConnKey`] has its own state.
//!
//! # Framing
//!
//! Each direction is cut into messages by their length prefixes (a type
//! byte, then an `Int32` length; a startup packet has a length and no type
//! byte, and is told by its first byte, 0, which no type byte is). A message
//! may span many chunks (a 100 KB Query arrives in 13 reads of 8192 bytes),
//! a chunk may hold many (pipelining; Parse/Bind/Execute/Sync in one read).
//! A message whole in one chunk's captured bytes is read in place; one
//! split across chunks keeps a bounded prefix of its body, only for the
//! messages whose content is used (Query, Parse, Bind, Execute, Close,
//! startup packets; CommandComplete, ErrorResponse, ReadyForQuery).
//!
//! Bytes a system call moved that the probe did not capture
//! ([`Chunk::missing`]) are skipped by the lengths: a text that lost bytes
//! is kept up to the first byte lost (or 1 MiB) and flagged
//! `text_truncated`. The framing is *lost* when a header (type byte or
//! length) falls in bytes not captured, or is not valid: an unknown type
//! byte, a length below the message's smallest or above the server's limit
//! for its type (1 GiB for Query, Parse, Bind, FunctionCall, CopyData and
//! the server's messages; 10,000 bytes for Describe, Execute, Close,
//! CopyFail and startup packets, 65,535 for password messages, 1 KiB for
//! CommandComplete), a fixed-length message (Sync, ReadyForQuery,
//! ParseComplete, …) of another length. A response when no request waits
//! while the client's message is still being read (the server answers
//! nothing before it has read it all) also loses the framing.
//!
//! The two directions lose their framing apart. Reads lost: the requests
//! queued before the loss stay, and the writes, still framed, answer them
//! (their rows are made); the responses after those answer requests lost
//! with the framing (`responses_unmatched`). So a read that batches a
//! Parse longer than the probe's capture with its Bind/Execute/Sync (as
//! libpq and JDBC send them) loses that statement's row, and COPY FROM
//! STDIN data cut by the capture loses nothing but the data. Writes lost:
//! which requests the lost bytes answered is unknown, so the pending
//! requests are dropped (`unfinished`) and both directions are lost. A cut
//! message that is the last of its read only loses its text's tail.
//!
//! A call's last bytes ([`Chunk::tail`]) that meet its captured prefix
//! complete it: the call is read as captured whole. Otherwise they finish
//! a response whose rows were not captured (a result longer than the
//! probe's buffer): when a header of the writes falls in a write's gap
//! while exactly one request awaits its response (one Query, or one
//! Execute and its Sync), the writes are consumed up to one whose last
//! bytes are a ReadyForQuery, and the request is finished from the
//! CommandComplete, ErrorResponse or EmptyQueryResponse found whole and
//! valid just before it, with the row a complete capture gives; when that
//! is not certain, the framing is lost as above. The rule, a Query of
//! several statements (its tag, no row count) and the residual risk are in
//! `uncaptured.rs`.
//!
//! Content cut by the capture is never completed by a guess: a text is
//! its captured prefix (`text_truncated`), a CommandComplete tag not
//! captured whole gives no `tag` nor `rows`, an ErrorResponse's SQLSTATE
//! not captured whole is empty and its message is the captured prefix.
//!
//! # What makes a row
//!
//! Requests are queued in the order the server read them; each response
//! answers the oldest request still waiting (55.2: the server answers in
//! order).
//!
//! * Query (`Q`): one [`Kind::Simple`](crate::Kind::Simple) row at its
//!   ReadyForQuery. `tag`: the last CommandComplete's; `rows`: the sum of
//!   the CommandCompletes' row counts (`None` when none states one); an
//!   EmptyQueryResponse leaves both `None`; an ErrorResponse sets `error`
//!   (SQLSTATE from field `C`, message from `M`) and clears `tag` and
//!   `rows`. COPY's messages (CopyIn/Out/BothResponse, CopyData,
//!   CopyDone) come within its response.
//! * Execute (`E`): one [`Kind::Prepared`](crate::Kind::Prepared) row at
//!   its CommandComplete (`tag`, `rows` from the tag), EmptyQueryResponse,
//!   PortalSuspended (`rows`: the DataRows it sent) or ErrorResponse.
//!   `text` and `name` are those of the statement its portal was bound
//!   to; `None` text when the Parse or the Bind was not seen (counted in
//!   `unknown_prepared`).
//! * Parse (`P`), Bind (`B`): no row when they succeed; a
//!   [`Kind::PrepareFailed`](crate::Kind::PrepareFailed) row with the error
//!   when an ErrorResponse answers them (Bind: the bound statement's name
//!   and text).
//! * Describe, Close, Sync, Flush, FunctionCall, Terminate, the client's
//!   CopyData/CopyDone/CopyFail, password and SASL messages: no row.
//!   FunctionCall's response (FunctionCallResponse, ReadyForQuery) is
//!   consumed.
//!
//! Rows carry the `user` and `database` of the StartupMessage (the database
//! defaults to the user, as the server does), `None` when it was not seen.
//! `start_ns` is the time of the read that completed the request message
//! (the Query, Execute, or failed Parse/Bind); `end_ns` the time of the
//! write holding the response message that completed the statement.
//!
//! The state the protocol names is changed in the server's order, when the
//! response says it happened: a statement is stored at its ParseComplete,
//! a portal at its BindComplete (bound to the statement's text then), a
//! Close applied at its CloseComplete; every portal is forgotten at a
//! ReadyForQuery that reports no open transaction (portals end with their
//! transaction). An Execute's text is its portal's at its response. A
//! failed Parse stores nothing.
//!
//! Errors (55.2.3): after an ErrorResponse to a Parse, Bind, Describe,
//! Execute or Close, the server skips every message up to the next Sync;
//! the decoder drops the queued requests up to it (or, when none is queued
//! yet, skips requests read later up to a Sync): they get no response,
//! make no row and are not counted. An error at a Sync (a deferred
//! constraint failing at commit) makes no row. A FATAL or PANIC error
//! completes the request in front (its row carries the error) and ends
//! the connection: the others count as `unfinished`. During COPY FROM
//! STDIN the server ignores Sync and Flush (55.2.6), and so does the
//! decoder.
//!
//! Server messages that answer nothing are consumed without a row:
//! ParameterStatus, NoticeResponse, NotificationResponse at any time;
//! authentication requests, BackendKeyData, NegotiateProtocolVersion and
//! the ReadyForQuery of a startup. A response of a kind the request in
//! front cannot get (a ParseComplete to a Query, a ReadyForQuery to an
//! Execute, …) means the decoder's view is wrong: the framing is lost.
//!
//! # Startup and encryption
//!
//! An SSLRequest or GSSENCRequest is answered by one byte without a header:
//! `N`, and the client goes on in plain text (another request or the
//! StartupMessage); `S` or `G`, and the connection is encrypted: counted in
//! `tls_connections`, its chunks in `tls_chunks`, until a startup packet on
//! the same key begins a new connection. A connection whose first chunk
//! is a TLS record (PostgreSQL 17's direct TLS, or a TLS connection opened
//! before the capture) is counted the same way. A CancelRequest arrives on
//! a connection of its own and makes nothing. A startup packet on a key
//! whose session has started (a descriptor reused, its close not seen)
//! begins a new connection: the requests still pending count `unfinished`.
//!
//! # Counters
//!
//! * `chunks`, `bytes_not_captured`: every chunk.
//! * `desyncs`: each time a direction's framing is lost. Lost writes drop
//!   the pending requests (counted in `unfinished`). What may change
//!   unseen is forgotten when the decoder resumes: the unnamed statement
//!   and the portals (named statements are kept, the server refusing to
//!   re-Parse a name before a Close).
//! * `unfinished`: requests dropped unanswered, at a close, a loss of the
//!   writes' framing, a FATAL error or a new connection on the key; the
//!   startup's own exchange is not counted.
//! * `chunks_skipped`: every chunk, read or write, skipped while the
//!   framing is lost or not yet found.
//! * `responses_unmatched`: each write skipped while its framing is lost
//!   or not yet found (one per chunk: it cannot be cut into messages), and
//!   each framed response that finds no request waiting (except the
//!   asynchronous ones above, and a FATAL error on an idle connection).
//! * `unknown_prepared`: every row whose `text` is `None`. A statement
//!   forgotten by the bounds below shows up here when executed.
//! * `tls_connections`, `tls_chunks`: as above.
//!
//! # Resynchronization, and its residual risk
//!
//! A connection first seen mid-stream (opened before the capture began)
//! starts lost; a connection whose framing was lost stays so. The reads
//! resume at a read chunk that *tiles*: from its first byte, a sequence of
//! valid frontend headers whose first message can begin a request (a startup
//! packet, Query, Parse, Bind, Describe, Execute, Close, Sync, Flush,
//! FunctionCall or Terminate; not CopyData, CopyDone, CopyFail nor a
//! password message), every message whole in the captured bytes exactly
//! well-formed (strings terminated where the layout says, counts and
//! lengths adding up to the message's end, format codes 0 or 1, startup
//! codes known), and the last message ending at the chunk's end or running
//! beyond it (a Query's text so far then holds no \0); a startup packet's
//! code captured and known (only a connection's very first chunk may end
//! inside a header or a startup code: a startup packet split across
//! reads). The read must also come when the server owes nothing: with the
//! writes still framed, when every queued request was answered and a
//! ReadyForQuery answered the requests lost with the reads (unless they
//! were COPY data, which get no answer); with the writes lost too, when
//! no read was skipped since the last write and the last write was not
//! captured whole without ending with a ReadyForQuery (else the server
//! was mid-response). A startup packet needs neither: it begins a
//! connection. The queue of pending requests is then empty; the read's
//! requests are queued, and, if the writes were lost, the next write is
//! framed from its first byte as the start of their response. A chunk
//! that does not tile is skipped: no row is made from a guess.
//!
//! What remains possible:
//! * A tiling read that does not start at a message boundary: its first
//!   byte must be one of the request types above, its length bytes within
//!   bounds, every whole message in it well-formed down to its
//!   terminators and counts. Bytes inside a message that satisfy this
//!   are taken for requests: a text's tail such as `Q = 1 …` (a Query
//!   of 540 MB: its "text" swallows the reads until the server answers,
//!   which loses the framing again, above), a binary Bind parameter or
//!   CopyData carrying embedded messages. The misframed stream usually
//!   loses the framing again at once, and a row comes only when a
//!   misframed Query or Execute also gets responses of the kinds it
//!   expects.
//! * Responses still owed when the resync read arrives: a pipelining
//!   client's requests read before it whose responses the server writes
//!   after it, when nothing showed that the server was mid-response (its
//!   last write was cut by the capture, so its end was not seen; the
//!   connection's first chunk is that read; or the lost reads held
//!   several requests ending with a ReadyForQuery, and the first
//!   ReadyForQuery was taken for the last). Such responses are matched
//!   to the new requests (wrong tags, times, errors) until one of a kind
//!   the request in front cannot get loses the framing again. A client
//!   that waits for each ReadyForQuery before sending (psql, pgbench
//!   without `--pipeline`, most drivers between transactions) never leaves
//!   responses owed at a read.
//! * While the framing is lost, Parse and Close are not seen: a statement
//!   name closed and prepared again with another text during the loss
//!   keeps its old text; a statement prepared during the loss has no text.
//! * The decoder cannot tell that chunks are missing from its feed (events
//!   lost before it): the bytes after the hole are read as the
//!   continuation of the stream, and only a broken framing reveals it.
//!
//! # Bounds
//!
//! Texts are kept up to 1 MiB (longer ones are `text_truncated`). Per
//! connection: a message split across chunks keeps at most 1 MiB of a
//! Query or Parse, 1 KiB names, 4 KiB of an ErrorResponse; 10,000 prepared
//! statements and 10,000 portals (64 MiB of names and texts each),
//! forgetting the least recently used eighth when over; 65,536 requests
//! awaiting responses holding 64 MiB of texts, beyond which the framing is
//! deemed lost. The decoder never panics on any bytes (property-tested).

mod backend;
mod conn;
mod framer;
mod frontend;
mod limits;
mod message;
mod respond;
mod session;
mod table;
mod uncaptured;

#[cfg(test)]
mod tests;

use std::collections::HashMap;

use crate::{Chunk, ConnKey, Counters, Decoder, Statement};
use conn::Conn;

/// Decodes PostgreSQL connections (protocol 3.x): the rules are in the
/// [module documentation](self).
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
        let len = usize::try_from(chunk.len).unwrap_or(usize::MAX);
        let data = &chunk.data[..chunk.data.len().min(len)];
        // A tail that overlaps `data` (or beyond `len`) breaks the chunk's
        // contract: not used.
        let tail = if data.len().saturating_add(chunk.tail.len()) <= len {
            chunk.tail
        } else {
            &[]
        };
        // A tail that meets `data`: every byte was captured.
        let joined;
        let (data, tail) = if !tail.is_empty() && data.len() + tail.len() == len {
            joined = [data, tail].concat();
            (&joined[..], &[][..])
        } else {
            (data, tail)
        };
        let chunk = Chunk {
            data,
            tail,
            ..*chunk
        };
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
