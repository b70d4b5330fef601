//! Database statements decoded from the wire: the bytes a database server's
//! socket system calls moved (`recvfrom`/`sendto` and friends, captured by
//! eBQL's probes as [`Chunk`]s), turned into one [`Statement`] per
//! statement execution, with its text, latency, outcome and rows.
//!
//! Pure code: no system calls, no clock, no Arrow. The probes capture a
//! bounded prefix of each system call's buffer ([`Chunk::data`]) and the
//! length the call moved ([`Chunk::len`]); messages are framed by their
//! length prefixes, so a cut chunk loses message content (a long statement's
//! tail, result rows) but not the framing, unless a header falls in the
//! part not captured. A response whose rows overflow the prefix (a long
//! result set) is finished from the last bytes of the write that ends it
//! ([`Chunk::tail`]) when exactly one request awaits it and its final
//! messages are found whole there (`postgres::uncaptured`,
//! `mysql::uncaptured`). Whatever cannot be decoded is counted in
//! [`Counters`] and never guessed: a decoder that loses a connection's
//! framing drops that connection's pending work and waits for a point
//! where the protocol says a new message begins.
//!
//! One decoder per protocol, behind [`Decoder`]:
//! * [`postgres`]: PostgreSQL's frontend/backend protocol v3 (PostgreSQL
//!   documentation, chapter 55 "Frontend/Backend Protocol"): simple Query,
//!   the extended protocol (Parse/Bind/Execute/Sync), errors with SQLSTATE;
//! * [`mysql`]: the MySQL/MariaDB client/server protocol (COM_QUERY,
//!   COM_STMT_PREPARE/EXECUTE, OK/ERR/EOF packets).

pub mod chunk;
pub mod mysql;
pub mod postgres;
pub mod statement;

pub use chunk::{Chunk, ConnKey, Direction};
pub use statement::{Counters, Kind, Statement, StatementError};

/// A protocol's decoder: one state per connection, fed every chunk of
/// every connection it serves.
pub trait Decoder: Send {
    /// Feeds one chunk. Chunks of one connection must come in the order
    /// the server's system calls happened (chunks of different connections
    /// may interleave in any way). Statements this chunk completes are
    /// appended to `out`, in the order they completed.
    fn feed(&mut self, chunk: &Chunk<'_>, out: &mut Vec<Statement>);

    /// The connection's socket was closed (or its process exited): forget
    /// its state. Statements still waiting for their response are counted
    /// in [`Counters::unfinished`].
    fn close(&mut self, conn: ConnKey);

    /// Every connection whose state the decoder keeps (seen, and not
    /// closed or forgotten since), in no order. The capture sees no close,
    /// so a caller closes those whose socket the server closed.
    fn connections(&self) -> Vec<ConnKey>;

    /// The capture lost calls (its ring buffer was full) among the
    /// `chunks` that follow and are not fed: which connections' is not
    /// known, so every connection is forgotten ([`Decoder::close`]: its
    /// pending requests count as unfinished) and picked up again at its
    /// next request, as one opened before the capture began. Counts one
    /// desync per connection and the chunks as skipped. Without this, a
    /// response whose request was lost could complete another request.
    fn lost(&mut self, chunks: u64);

    /// The last `chunks` fed, fed while the counters were `before`, turn
    /// out to lie among lost calls (found after feeding them, as a caller
    /// decoding in place learns): their counts are taken back to `before`,
    /// then they count as by [`Decoder::lost`]. The caller drops the
    /// statements they completed.
    fn forget_fed(&mut self, chunks: u64, before: Counters);

    /// What could not be decoded, since the decoder was made.
    fn counters(&self) -> &Counters;
}
