//! What a decoder produces: statements, and counts of what it could not decode.

use crate::chunk::ConnKey;

/// How the client sent the statement.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    /// Its text in one request: PostgreSQL's Query (`Q`), MySQL's COM_QUERY.
    Simple,
    /// A prepared statement executed: PostgreSQL's Execute (`E`) of a Parse
    /// (`P`), MySQL's COM_STMT_EXECUTE of a COM_STMT_PREPARE.
    Prepared,
    /// A statement that failed to prepare: PostgreSQL's Parse or Bind
    /// answered by an ErrorResponse, MySQL's COM_STMT_PREPARE answered by
    /// an ERR packet. Never executed; the row carries the error.
    PrepareFailed,
}

/// A failed statement's error.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StatementError {
    /// The SQLSTATE, five characters (`42P01`); empty when the server sent none.
    pub sqlstate: String,
    /// The server's own error number (MySQL's `1146`); `None` for PostgreSQL.
    pub code: Option<u32>,
    /// The message (lossy UTF-8).
    pub message: String,
}

/// One statement execution.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Statement {
    /// The connection it ran on.
    pub conn: ConnKey,
    /// When the server read the last byte of the request that ran it
    /// (CLOCK_MONOTONIC ns).
    pub start_ns: u64,
    /// When the server wrote the response that completed it: PostgreSQL's
    /// ReadyForQuery after a Query, the CommandComplete (or error, or
    /// EmptyQueryResponse, PortalSuspended) of an Execute; MySQL's final
    /// OK/EOF/ERR packet.
    pub end_ns: u64,
    /// How the client sent it.
    pub kind: Kind,
    /// The statement's text as the client sent it (bytes; not always
    /// UTF-8). `None` when the decoder never saw it: an Execute of a
    /// statement prepared before the capture began.
    pub text: Option<Vec<u8>>,
    /// Bytes of the text were not captured (the probe's buffer was smaller
    /// than the message): `text` is a prefix.
    pub text_truncated: bool,
    /// The prepared statement's name (PostgreSQL: `None` for the unnamed
    /// statement) or, for MySQL, its statement id in decimal.
    pub name: Option<String>,
    /// PostgreSQL's command tag (`SELECT 3`, `INSERT 0 1`; for a Query of
    /// several statements, the last one's); `None` for MySQL and errors.
    pub tag: Option<String>,
    /// Rows returned (a result set) or affected (INSERT/UPDATE/DELETE);
    /// `None` when the response says neither. For a Query of several
    /// statements, their sum.
    pub rows: Option<u64>,
    /// Set when the statement failed.
    pub error: Option<StatementError>,
    /// The database user the connection logged in as, when its startup was seen.
    pub user: Option<String>,
    /// The database the connection uses, when its startup (or a MySQL
    /// COM_INIT_DB) was seen.
    pub database: Option<String>,
}

/// What a decoder could not decode, since it was made. Every chunk the
/// decoder skips or cannot attribute lands in one of these; a statement is
/// either a [`Statement`] or counted here, never guessed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    /// Chunks fed.
    pub chunks: u64,
    /// Bytes the system calls moved that the probes did not capture
    /// ([`crate::Chunk::missing`]), whether or not the framing skipped them.
    pub bytes_not_captured: u64,
    /// Times a connection's framing was lost (a message header fell in
    /// bytes not captured, or bytes that are not a valid message).
    pub desyncs: u64,
    /// Chunks skipped while a connection's framing was lost (or before it
    /// was found, for connections opened before the capture began).
    pub chunks_skipped: u64,
    /// Responses that answered no request the decoder saw (requests read
    /// before the capture began, or lost with the framing).
    pub responses_unmatched: u64,
    /// Executions of prepared statements whose text the decoder never saw
    /// (prepared before the capture began): rows with a `None` text.
    pub unknown_prepared: u64,
    /// Requests still waiting for their response when their connection
    /// was closed ([`crate::Decoder::close`]: the executor closes a
    /// connection whose descriptor the server closed), forgotten after a loss,
    /// or begun again.
    pub unfinished: u64,
    /// Connections that switched to TLS (PostgreSQL's SSLRequest answered
    /// `S`, MySQL's SSL request): their bytes cannot be decoded at system
    /// calls and are skipped.
    pub tls_connections: u64,
    /// Chunks of TLS connections skipped.
    pub tls_chunks: u64,
}
