//! What the probes capture: one system call's bytes on a server's socket.

/// A connection as the server sees it: its process and the socket's file
/// descriptor there. A descriptor may be reused after a close; a decoder
/// that sees a connection begin again (a startup packet, a handshake)
/// starts it afresh.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ConnKey {
    /// The server process (thread group id) that owns the socket.
    pub pid: u32,
    /// The socket's file descriptor in that process.
    pub fd: i32,
}

/// Which way the bytes went, from the server's side.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Direction {
    /// The server read them: the client's requests.
    Read,
    /// The server wrote them: its responses.
    Write,
}

/// One system call's bytes: a read that returned data, or a write.
#[derive(Clone, Copy, Debug)]
pub struct Chunk<'a> {
    /// The connection.
    pub conn: ConnKey,
    /// Read or written by the server.
    pub dir: Direction,
    /// When the system call happened (CLOCK_MONOTONIC ns): a read's
    /// return, a write's entry.
    pub time_ns: u64,
    /// Bytes the system call moved (a read's return value, a write's length).
    pub len: u64,
    /// The bytes captured: the first `data.len() <= len` of them (the probe
    /// copies at most its buffer's size). `data.len() < len` means the rest
    /// was not captured: the decoder skips it by the framing.
    pub data: &'a [u8],
}

impl Chunk<'_> {
    /// Bytes the system call moved that were not captured.
    pub fn missing(&self) -> u64 {
        self.len.saturating_sub(self.data.len() as u64)
    }
}
