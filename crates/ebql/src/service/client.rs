//! One client's stream of windows: the [`Sink`] an ad-hoc query of the
//! service drives. Each closed window goes into the client's bounded
//! buffer without waiting; a reader too slow for the windows loses whole
//! windows, counted ([`ClientStream::dropped`]), and never holds up the
//! query's thread (issue 22: "one misbehaving client never blocks other
//! queries").

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use futures::channel::mpsc;

use crate::sink::arrow_ipc::{conform, file_schema};
use crate::sink::{QueryInfo, Sink, SinkError};
use crate::window::{QueryStats, WindowBatch};

/// What the service and the query's thread share about one client.
#[derive(Debug, Default)]
pub struct ClientStream {
    /// Windows the client's buffer had no room for.
    dropped: AtomicU64,
    /// Windows that failed (no rows to send; the cause went to the log).
    failed: AtomicU64,
}

impl ClientStream {
    /// Windows lost because the client read too slowly.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// Windows that failed to evaluate and were not sent.
    pub fn failed(&self) -> u64 {
        self.failed.load(Ordering::Relaxed)
    }
}

/// The sink: a window's rows, conformed to the stream's schema, into the
/// client's buffer of `capacity` windows.
pub struct ClientSink {
    tx: mpsc::Sender<RecordBatch>,
    schema: Option<SchemaRef>,
    shared: Arc<ClientStream>,
}

impl ClientSink {
    /// A sink and the receiving end of its buffer, which holds at most
    /// `capacity` windows (and one more per sender, as `futures`'
    /// channels do).
    pub fn new(capacity: usize) -> (ClientSink, mpsc::Receiver<RecordBatch>, Arc<ClientStream>) {
        let (tx, rx) = mpsc::channel(capacity);
        let shared = Arc::new(ClientStream::default());
        let sink = ClientSink {
            tx,
            schema: None,
            shared: shared.clone(),
        };
        (sink, rx, shared)
    }
}

impl ClientSink {
    /// Whether the client has gone, asked between windows (its stream was
    /// dropped): a query with long windows stops within the driver's poll,
    /// not at its next window.
    pub fn gone_probe(&self) -> impl Fn() -> bool + Send + 'static {
        let tx = self.tx.clone();
        move || tx.is_closed()
    }
}

impl Sink for ClientSink {
    fn open(&mut self, info: &QueryInfo) -> Result<(), SinkError> {
        self.schema = Some(file_schema(info));
        Ok(())
    }

    fn write(&mut self, window: &WindowBatch) -> Result<(), SinkError> {
        if window.error.is_some() {
            self.shared.failed.fetch_add(1, Ordering::Relaxed);
            return Ok(());
        }
        let schema = self
            .schema
            .as_ref()
            .ok_or_else(|| SinkError::new("sending a window", "the sink was not opened"))?;
        let batch = conform(&window.batch, schema)?;
        match self.tx.try_send(batch) {
            Ok(()) => {}
            Err(e) if e.is_full() => {
                self.shared.dropped.fetch_add(1, Ordering::Relaxed);
            }
            // The client has gone: `gone_probe` stops the query.
            Err(_) => {}
        }
        Ok(())
    }

    fn finish(&mut self, _stats: &QueryStats) -> Result<(), SinkError> {
        // Closing the buffer ends the client's stream after what it holds.
        self.tx.close_channel();
        Ok(())
    }
}
