//! The MySQL/MariaDB client/server protocol (to be written).

use crate::{Chunk, ConnKey, Counters, Decoder, Statement};

/// Decodes MySQL and MariaDB connections.
#[derive(Debug, Default)]
pub struct MyDecoder {
    counters: Counters,
}

impl Decoder for MyDecoder {
    fn feed(&mut self, chunk: &Chunk<'_>, _out: &mut Vec<Statement>) {
        self.counters.chunks += 1;
        self.counters.bytes_not_captured += chunk.missing();
    }

    fn close(&mut self, _conn: ConnKey) {}

    fn counters(&self) -> &Counters {
        &self.counters
    }
}
