//! PostgreSQL's frontend/backend protocol, version 3.0 (to be written).

use crate::{Chunk, ConnKey, Counters, Decoder, Statement};

/// Decodes PostgreSQL connections.
#[derive(Debug, Default)]
pub struct PgDecoder {
    counters: Counters,
}

impl Decoder for PgDecoder {
    fn feed(&mut self, chunk: &Chunk<'_>, _out: &mut Vec<Statement>) {
        self.counters.chunks += 1;
        self.counters.bytes_not_captured += chunk.missing();
    }

    fn close(&mut self, _conn: ConnKey) {}

    fn counters(&self) -> &Counters {
        &self.counters
    }
}
