//! The decoder's bounds: what a message may be, what a connection keeps.

/// The longest message accepted: a length field beyond this is not a
/// message (the server's own limit is 1 GiB, `PQ_LARGE_MESSAGE_LIMIT`).
pub(super) const MAX_MESSAGE: u32 = 1 << 30;
/// The longest text kept of one Query or Parse; beyond, `text_truncated`.
pub(super) const MAX_TEXT: u32 = 1 << 20;
/// The longest statement or portal name kept.
pub(super) const MAX_NAME: u32 = 1024;
/// Prepared statements remembered per connection; beyond, the least
/// recently used eighth is forgotten.
pub(super) const MAX_STATEMENTS: usize = 10_000;
/// Bytes of prepared statements' names and texts remembered per connection.
pub(super) const MAX_STATEMENT_BYTES: usize = 64 << 20;
/// Portals remembered per connection.
pub(super) const MAX_PORTALS: usize = 10_000;
/// Requests awaiting responses per connection; beyond, the framing is
/// deemed lost.
pub(super) const MAX_PENDING: usize = 65_536;
/// Bytes of texts held by requests awaiting responses per connection.
pub(super) const MAX_PENDING_BYTES: usize = 64 << 20;
