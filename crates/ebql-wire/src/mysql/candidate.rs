//! The state of a search for a resync point ([`super::resync`]): the client
//! chunks read since it began. A leaf: the connection holds it, the search
//! fills it.

/// A client chunk kept while searching.
#[derive(Debug)]
pub(super) struct Kept {
    /// Its captured bytes (at most `resync::MAX_KEPT` of them).
    pub(super) data: Vec<u8>,
    /// Bytes the call moved.
    pub(super) len: u64,
    /// When the call happened (ns).
    pub(super) time_ns: u64,
}

/// The search for a resync point: client chunks read since it began.
#[derive(Debug, Default)]
pub(super) struct Candidate {
    /// The chunks, oldest first; the first is where a resync point would begin.
    pub(super) kept: Vec<Kept>,
}

impl Candidate {
    /// Chunks kept (skipped, if no resync point is found among them).
    pub fn chunks(&self) -> u64 {
        self.kept.len() as u64
    }
}
