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
    /// The last bytes the system call moved, when `data` does not hold
    /// them: bytes `len - tail.len() .. len`, never overlapping `data`
    /// (`data.len() + tail.len() <= len`); empty when `data` holds every
    /// byte or the probe kept no tail. A long response's end (PostgreSQL's
    /// CommandComplete and ReadyForQuery, MySQL's final OK/EOF/ERR) is
    /// here when its rows overflow `data`.
    pub tail: &'a [u8],
}

impl Chunk<'_> {
    /// Bytes the system call moved that were not captured (in `data` or `tail`).
    pub fn missing(&self) -> u64 {
        self.len
            .saturating_sub(self.data.len() as u64 + self.tail.len() as u64)
    }

    /// The bytes between `data` and `tail` that were not captured.
    pub fn gap(&self) -> std::ops::Range<u64> {
        self.data.len() as u64..self.len - self.tail.len() as u64
    }
}
