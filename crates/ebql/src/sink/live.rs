//! `--format live`: the current window redrawn in place (placeholder: tables).

use super::{table::TableSink, QueryInfo, Sink, SinkError, TextOutput, WindowBatch};
use crate::executor::QueryStats;

/// Redraws the current window in place.
pub struct LiveSink(TableSink);

impl LiveSink {
    /// A live view on `out` (a terminal).
    pub fn new(out: TextOutput) -> LiveSink {
        LiveSink(TableSink::new(out))
    }
}

impl Sink for LiveSink {
    fn open(&mut self, info: &QueryInfo) -> Result<(), SinkError> {
        self.0.open(info)
    }
    fn write(&mut self, w: &WindowBatch) -> Result<(), SinkError> {
        self.0.write(w)
    }
    fn finish(&mut self, s: &QueryStats) -> Result<(), SinkError> {
        self.0.finish(s)
    }
}
