//! `--output kafka://HOST:PORT[,HOST:PORT…]/TOPIC`: results produced to a
//! Kafka topic through librdkafka (the system library, linked dynamically).
//!
//! Payloads, chosen by `--format`:
//! - `arrow`: one message per closed window (also an empty one, so consumers
//!   see every window close), holding the window's rows as an Arrow IPC
//!   stream (schema + one record batch; the batch's schema metadata carries
//!   the bounds and drops, `executor::META_*`; a failed window: no rows,
//!   its cause under `ebql.window_error`);
//! - `json`: one message per row, the row as one JSON object (as `--format
//!   json` prints it, with `window_start`/`window_end` in windowed queries);
//!   a failed window is one message `{"window_start":…,"window_end":…,"error":"…"}`.
//!
//! Every message is keyed `<host>/<query id>` (the host: `--host-id` with
//! `--partial`, else the hostname; the query id: xxHash64 of the query
//! text, 16 hex digits), so one host's windows of one query stay
//! in one partition, in order, and consumers can merge many hosts' windows
//! by bounds. Headers (UTF-8 text): `ebql-host`, `ebql-query` (the SQL),
//! `ebql-query-id`, `ebql-payload` (`arrow-ipc-stream` or `json`), and for
//! windowed queries `ebql-window-kind` (`time`: CLOCK_MONOTONIC ns of the
//! host; `count`: event ordinals), `ebql-window-start`, `ebql-window-end`
//! (exclusive), and for time windows `ebql-window-start-unix-ms` /
//! `ebql-window-end-unix-ms` (wall clock, comparable across hosts); a
//! failed window's messages carry `ebql-window-error` (the cause). The
//! message timestamp of a time window is its end, wall clock, in ms (the
//! event time stream processors group by); otherwise the produce time.
//!
//! The broker is asked for the topic's metadata when the sink is built
//! ([`KafkaSink::connect`], before the query is attached), so an unreachable
//! broker fails the command with nothing loaded. Delivery reports are
//! counted: a failed delivery fails the next write (librdkafka has retried
//! it until `message.timeout.ms`), and [`Sink::finish`] flushes for at most
//! [`FLUSH_TIMEOUT`] and fails if any message was not delivered.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rdkafka::config::ClientConfig;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{BaseRecord, DeliveryResult, Producer, ProducerContext, ThreadedProducer};
use rdkafka::ClientContext;

use super::contract::{Format, QueryInfo, Sink, SinkError, WindowKind};
use super::wall_clock::WallClock;
use crate::window::{QueryStats, WindowBatch};

/// The scheme of a Kafka `--output`.
pub const SCHEME: &str = "kafka://";

/// How long [`KafkaSink::connect`] waits for the broker's answer.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// How long [`Sink::finish`] waits for outstanding messages to be delivered.
pub const FLUSH_TIMEOUT: Duration = Duration::from_secs(10);

/// What each message holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Payload {
    /// One message per window: an Arrow IPC stream of the window's rows.
    ArrowIpc,
    /// One message per row: a JSON object.
    Json,
}

impl Payload {
    /// The payload of `--format`; errors for formats Kafka does not carry.
    pub fn of(format: Format) -> Result<Payload, SinkError> {
        match format {
            Format::Arrow => Ok(Payload::ArrowIpc),
            Format::Json => Ok(Payload::Json),
            other => Err(SinkError::new(
                format!("--output kafka:// with --format {}", format!("{other:?}").to_lowercase()),
                "Kafka messages carry --format arrow (one Arrow IPC stream per window) or --format json (one JSON object per row)",
            )),
        }
    }

    /// The `ebql-payload` header's value.
    pub fn name(self) -> &'static str {
        match self {
            Payload::ArrowIpc => "arrow-ipc-stream",
            Payload::Json => "json",
        }
    }
}

/// A parsed `kafka://HOST:PORT[,HOST:PORT…]/TOPIC`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// librdkafka's `bootstrap.servers`: comma-separated `host:port`.
    pub brokers: String,
    /// The topic messages are produced to.
    pub topic: String,
}

impl Target {
    /// Parses `url`. Errors say which part is missing, with the expected shape.
    pub fn parse(url: &str) -> Result<Target, SinkError> {
        let bad = |why: &str| {
            SinkError::new(
                format!("--output {url}"),
                format!("{why}; expected kafka://HOST:PORT[,HOST:PORT…]/TOPIC"),
            )
        };
        let rest = url
            .strip_prefix(SCHEME)
            .ok_or_else(|| bad("not a kafka:// address"))?;
        let (brokers, topic) = rest.split_once('/').ok_or_else(|| bad("no topic"))?;
        if brokers.is_empty()
            || brokers.split(',').any(|b| {
                b.rsplit_once(':')
                    .is_none_or(|(h, p)| h.is_empty() || p.parse::<u16>().is_err())
            })
        {
            return Err(bad("each broker needs a host and a port"));
        }
        // Kafka's own rule for topic names.
        if topic.is_empty()
            || topic.len() > 249
            || !topic
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
        {
            return Err(bad(
                "the topic must be 1 to 249 characters of [a-zA-Z0-9._-]",
            ));
        }
        Ok(Target {
            brokers: brokers.to_string(),
            topic: topic.to_string(),
        })
    }
}

/// Delivery reports, counted on librdkafka's polling thread.
#[derive(Default)]
struct Deliveries {
    delivered: AtomicU64,
    failed: AtomicU64,
    first_error: Mutex<Option<String>>,
}

/// The producer's context: counts delivery reports.
struct Counting(Arc<Deliveries>);

impl ClientContext for Counting {}

impl ProducerContext for Counting {
    type DeliveryOpaque = ();

    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        match result {
            Ok(_) => {
                self.0.delivered.fetch_add(1, Ordering::Relaxed);
            }
            Err((e, _)) => {
                self.0.failed.fetch_add(1, Ordering::Relaxed);
                self.0
                    .first_error
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .get_or_insert_with(|| e.to_string());
            }
        }
    }
}

/// Produces each window (`--format arrow`) or row (`--format json`) to a topic.
pub struct KafkaSink {
    target: Target,
    payload: Payload,
    producer: ThreadedProducer<Counting>,
    deliveries: Arc<Deliveries>,
    /// Messages handed to librdkafka.
    sent: u64,
    key: String,
    /// Headers of every message of this run (the SQL, host, ids).
    headers: Vec<(&'static str, String)>,
    window: WindowKind,
    /// The run's ([`QueryInfo::clock`]).
    clock: WallClock,
}

impl KafkaSink {
    /// Parses `url`, creates the producer and asks the broker for the topic's
    /// metadata (at most [`CONNECT_TIMEOUT`]).
    ///
    /// Errors: a malformed address, a format other than arrow/json, a broker
    /// that does not answer (named, with a hint).
    pub fn connect(url: &str, format: Format) -> Result<KafkaSink, SinkError> {
        let payload = Payload::of(format)?;
        let target = Target::parse(url)?;
        let deliveries = Arc::new(Deliveries::default());
        let producer: ThreadedProducer<Counting> = ClientConfig::new()
            .set("bootstrap.servers", &target.brokers)
            .set("client.id", "ebql")
            // Windows are ordered per key: no reordering on retries.
            .set("enable.idempotence", "true")
            .create_with_context(Counting(deliveries.clone()))
            .map_err(|e| {
                SinkError::new(
                    format!("creating a Kafka producer for {}", target.brokers),
                    e,
                )
            })?;
        producer.client().fetch_metadata(Some(&target.topic), CONNECT_TIMEOUT).map_err(|e| {
            SinkError::new(
                format!("connecting to the Kafka broker at {}", target.brokers),
                format!("{e} (waited up to {} s); is the broker running, and its listener reachable from here?", CONNECT_TIMEOUT.as_secs()),
            )
        })?;
        Ok(KafkaSink {
            target,
            payload,
            producer,
            deliveries,
            sent: 0,
            key: String::new(),
            headers: Vec::new(),
            window: WindowKind::None,
            clock: WallClock::now(),
        })
    }

    /// Fails when librdkafka reported a message it could not deliver.
    fn check_deliveries(&self) -> Result<(), SinkError> {
        let failed = self.deliveries.failed.load(Ordering::Relaxed);
        if failed == 0 {
            return Ok(());
        }
        let first = self
            .deliveries
            .first_error
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
            .unwrap_or_default();
        Err(SinkError::new(
            format!(
                "producing to Kafka topic {} at {}",
                self.target.topic, self.target.brokers
            ),
            format!(
                "{failed} of {} messages were not delivered (first error: {first})",
                self.sent
            ),
        ))
    }

    /// Hands one message to librdkafka, waiting while its queue is full.
    fn send(&mut self, w: &WindowBatch, payload: &[u8]) -> Result<(), SinkError> {
        let deadline = Instant::now() + FLUSH_TIMEOUT;
        let headers = self.headers_of(w);
        let mut record = BaseRecord::to(&self.target.topic)
            .key(&self.key)
            .payload(payload)
            .headers(headers);
        if let (Some(b), WindowKind::Time) = (w.bounds, self.window) {
            record = record.timestamp((self.clock.unix_ns(b.end) / 1_000_000) as i64);
        }
        loop {
            match self.producer.send(record) {
                Ok(()) => break,
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), r))
                    if Instant::now() < deadline =>
                {
                    record = r;
                    std::thread::sleep(Duration::from_millis(10));
                }
                Err((e, _)) => {
                    return Err(SinkError::new(
                        format!("producing to Kafka topic {}", self.target.topic),
                        e,
                    ))
                }
            }
        }
        self.sent += 1;
        Ok(())
    }

    fn headers_of(&self, w: &WindowBatch) -> OwnedHeaders {
        let mut h = OwnedHeaders::new_with_capacity(self.headers.len() + 5);
        for (k, v) in &self.headers {
            h = h.insert(Header {
                key: k,
                value: Some(v.as_bytes()),
            });
        }
        if let Some(b) = w.bounds {
            let kind = if self.window == WindowKind::Count {
                "count"
            } else {
                "time"
            };
            h = h.insert(Header {
                key: "ebql-window-kind",
                value: Some(kind),
            });
            h = h.insert(Header {
                key: "ebql-window-start",
                value: Some(&b.start.to_string()),
            });
            h = h.insert(Header {
                key: "ebql-window-end",
                value: Some(&b.end.to_string()),
            });
            if self.window == WindowKind::Time {
                let ms = |ns: u64| (self.clock.unix_ns(ns) / 1_000_000).to_string();
                h = h.insert(Header {
                    key: "ebql-window-start-unix-ms",
                    value: Some(&ms(b.start)),
                });
                h = h.insert(Header {
                    key: "ebql-window-end-unix-ms",
                    value: Some(&ms(b.end)),
                });
            }
        }
        if let Some(e) = &w.error {
            h = h.insert(Header {
                key: "ebql-window-error",
                value: Some(&e.cause),
            });
        }
        h
    }
}

/// This machine's host name (the kernel's), `unknown-host` if unreadable.
impl Sink for KafkaSink {
    fn open(&mut self, info: &QueryInfo) -> Result<(), SinkError> {
        let host = info.host.clone();
        let id = crate::partial::query_hash(&info.sql);
        self.key = format!("{host}/{id}");
        self.window = info.window;
        self.clock = info.clock;
        self.headers = vec![
            ("ebql-host", host),
            ("ebql-query", info.sql.clone()),
            ("ebql-query-id", id),
            ("ebql-payload", self.payload.name().to_string()),
        ];
        Ok(())
    }

    fn write(&mut self, w: &WindowBatch) -> Result<(), SinkError> {
        self.check_deliveries()?;
        match self.payload {
            Payload::ArrowIpc => {
                let batch = w.to_batch_with_metadata();
                let mut buf = Vec::new();
                let mut ipc =
                    arrow::ipc::writer::StreamWriter::try_new(&mut buf, batch.schema_ref())
                        .map_err(|e| SinkError::new("encoding Arrow IPC", e))?;
                ipc.write(&batch)
                    .and_then(|()| ipc.finish())
                    .map_err(|e| SinkError::new("encoding Arrow IPC", e))?;
                drop(ipc);
                self.send(w, &buf)
            }
            Payload::Json if w.error.is_some() => {
                let cause = w.error.as_ref().map_or("", |e| e.cause.as_str());
                let clock = (self.window == WindowKind::Time).then_some(&self.clock);
                let line = super::ndjson::error_line(w, cause, clock);
                self.send(w, line.trim_end().as_bytes())
            }
            Payload::Json => {
                let buf = super::ndjson::encode(&w.batch)?;
                // JSON escapes newlines inside strings: each line is one row.
                for row in buf.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
                    self.send(w, row)?;
                }
                Ok(())
            }
        }
    }

    fn finish(&mut self, _: &QueryStats) -> Result<(), SinkError> {
        let flushed = self.producer.flush(FLUSH_TIMEOUT);
        self.check_deliveries()?;
        flushed.map_err(|e| {
            let delivered = self.deliveries.delivered.load(Ordering::Relaxed);
            SinkError::new(
                format!(
                    "flushing to Kafka topic {} at {}",
                    self.target.topic, self.target.brokers
                ),
                format!(
                    "{} of {} messages not delivered within {} s: {e}",
                    self.sent.saturating_sub(delivered),
                    self.sent,
                    FLUSH_TIMEOUT.as_secs()
                ),
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_addresses() {
        let t = Target::parse("kafka://localhost:9092,b2:19092/ebql.results").unwrap();
        assert_eq!(
            t,
            Target {
                brokers: "localhost:9092,b2:19092".into(),
                topic: "ebql.results".into()
            }
        );
        for bad in [
            "kafka://localhost:9092",
            "kafka://localhost/t",
            "kafka://:9092/t",
            "kafka://h:9092/",
            "kafka://h:9092/a/b",
            "kafka://h:99999/t",
        ] {
            assert!(Target::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn payload_of_format() {
        assert_eq!(Payload::of(Format::Arrow).unwrap(), Payload::ArrowIpc);
        assert_eq!(Payload::of(Format::Json).unwrap(), Payload::Json);
        let e = Payload::of(Format::Csv).unwrap_err();
        assert!(
            e.to_string().contains("--format csv") && e.to_string().contains("--format arrow"),
            "{e}"
        );
    }
}
