//! `--format null`: every window is decoded and computed like for any other
//! format, then dropped. What a query costs when its results are processed
//! but not kept (the "process" mode of README "Modes"); the rows it produced
//! are counted in the stats the CLI prints (`rows_emitted`).

use super::contract::{QueryInfo, Sink, SinkError};
use crate::window::{QueryStats, WindowBatch};

/// Drops every window.
pub struct NullSink;

impl Sink for NullSink {
    fn open(&mut self, _info: &QueryInfo) -> Result<(), SinkError> {
        Ok(())
    }

    fn write(&mut self, _window: &WindowBatch) -> Result<(), SinkError> {
        Ok(())
    }

    fn finish(&mut self, _stats: &QueryStats) -> Result<(), SinkError> {
        Ok(())
    }
}
