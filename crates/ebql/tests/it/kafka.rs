//! The Kafka sink against a real broker: a single-node Apache Kafka (KRaft)
//! started from the jars scripts/setup.sh downloads, `ebql query --output
//! kafka://…` over our scripted pread workload, and the topic consumed back
//! with librdkafka: exactly the workload's calls, per fd, in both payloads.
//! Plus: an unreachable broker fails before anything is attached.

use crate::common::*;
use ebql::arrow::array::AsArray;
use ebql::arrow::compute::cast;
use ebql::arrow::datatypes::{DataType, UInt64Type};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Headers, Message};
use rdkafka::{Offset, TopicPartitionList};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read};
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, ChildStderr, Command, Stdio};
use std::time::{Duration, Instant};

const EBQL: &str = env!("CARGO_BIN_EXE_ebql");
const EV: &str = "tracepoint/syscalls/sys_enter_pread64";

/// A single-node Kafka broker (KRaft, broker + controller in one JVM) in a
/// temp dir, on ports of its own; killed and removed on drop.
struct Broker {
    child: Child,
    dir: PathBuf,
    port: u16,
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

impl Broker {
    /// A broker with `extra` lines appended to its server.properties.
    fn start(extra: &str) -> Broker {
        let jars = PathBuf::from(std::env::var("HOME").unwrap()).join(".cache/ebql/kafka-jars");
        assert!(
            jars.join("kafka_2.13-3.9.1.jar").exists(),
            "{} lacks Kafka's jars: run scripts/setup.sh",
            jars.display()
        );
        let dir = std::env::temp_dir().join(format!("ebql-kafka-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let (port, controller) = (free_port(), free_port());
        let props = dir.join("server.properties");
        std::fs::write(
            &props,
            format!(
                "process.roles=broker,controller\nnode.id=1\ncontroller.quorum.voters=1@127.0.0.1:{controller}\n\
                 listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller}\n\
                 advertised.listeners=PLAINTEXT://127.0.0.1:{port}\ncontroller.listener.names=CONTROLLER\n\
                 listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT\n\
                 log.dirs={}\nnum.partitions=1\nauto.create.topics.enable=true\n\
                 offsets.topic.replication.factor=1\ntransaction.state.log.replication.factor=1\ntransaction.state.log.min.isr=1\n\
                 group.initial.rebalance.delay.ms=0\n{extra}",
                dir.join("data").display()
            ),
        )
        .unwrap();
        let java = |main: &str| {
            let mut c = Command::new("java");
            c.args([
                "-Xmx384m",
                "-XX:+UseSerialGC",
                "-XX:TieredStopAtLevel=1",
                "-cp",
            ])
            .arg(format!("{}/*", jars.display()))
            .arg(main);
            c
        };
        let out = java("kafka.tools.StorageTool")
            .args(["format", "-t", "ZWJxbC10ZXN0LWNsdXN0ZQ", "-c"])
            .arg(&props)
            .output()
            .expect("java (scripts/setup.sh installs openjdk-17)");
        assert!(
            out.status.success(),
            "formatting the broker's storage: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let log = std::fs::File::create(dir.join("broker.log")).unwrap();
        let child = java("kafka.Kafka")
            .arg(&props)
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap();
        let mut broker = Broker { child, dir, port };
        broker.wait_ready();
        broker
    }

    fn address(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Waits until the broker answers a metadata request (the JVM takes seconds).
    fn wait_ready(&mut self) {
        let consumer: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", self.address())
            .create()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(90);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                panic!("the broker exited ({status}): {}", self.log());
            }
            if consumer
                .fetch_metadata(None, Duration::from_secs(1))
                .is_ok_and(|m| !m.brokers().is_empty())
            {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the broker did not answer within 90 s: {}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("broker.log")).unwrap_or_default()
    }

    /// Every message of partition 0 of `topic` (the topic has one partition).
    fn consume(&self, topic: &str) -> Vec<Record> {
        let consumer: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", self.address())
            .set("group.id", "ebql-test")
            .set("enable.auto.commit", "false")
            .create()
            .unwrap();
        let (_, high) = consumer
            .fetch_watermarks(topic, 0, Duration::from_secs(10))
            .unwrap();
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition_offset(topic, 0, Offset::Beginning)
            .unwrap();
        consumer.assign(&tpl).unwrap();
        let mut records = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(30);
        while (records.len() as i64) < high {
            assert!(
                Instant::now() < deadline,
                "read {} of {high} messages of {topic}",
                records.len()
            );
            let Some(m) = consumer.poll(Duration::from_millis(500)) else {
                continue;
            };
            let m = m.unwrap();
            let headers = m
                .headers()
                .map(|h| {
                    h.iter()
                        .map(|h| {
                            (
                                h.key.to_string(),
                                String::from_utf8(h.value.unwrap_or_default().to_vec()).unwrap(),
                            )
                        })
                        .collect()
                })
                .unwrap_or_default();
            records.push(Record {
                key: String::from_utf8(m.key().unwrap().to_vec()).unwrap(),
                timestamp: m.timestamp().to_millis().unwrap(),
                headers,
                payload: m.payload().unwrap_or_default().to_vec(),
            });
        }
        records
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// One consumed message.
struct Record {
    key: String,
    /// The message's timestamp, ms since the Unix epoch.
    timestamp: i64,
    headers: BTreeMap<String, String>,
    payload: Vec<u8>,
}

/// Starts `ebql query ARGS` and returns once its probe is attached.
fn attached(args: &[&str]) -> (Child, BufReader<ChildStderr>) {
    let mut child = Command::new(EBQL)
        .arg("query")
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    stderr.read_line(&mut line).unwrap();
    assert!(line.starts_with("ebql: attached"), "{args:?}: {line}");
    (child, stderr)
}

/// SIGINT, then checks ebql exited 0 (all messages delivered) after its stats.
fn stop(mut child: Child, mut stderr: BufReader<ChildStderr>) {
    // SAFETY: signalling our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let status = child.wait().unwrap();
    let mut rest = String::new();
    stderr.read_to_string(&mut rest).unwrap();
    assert_eq!(status.code(), Some(0), "{rest}");
    assert!(rest.contains("ebql: stats {"), "{rest}");
}

/// Runs the windowed per-fd count over 300 + 200 preads into `topic` with
/// `--format format`; returns the query and the messages of the topic.
fn produce(broker: &Broker, format: &str, topic: &str) -> (String, Vec<Record>, u64, u64) {
    let mut w = Workload::start();
    let (a, b) = (w.file(), w.file());
    let sql = format!(
        "SELECT fd, COUNT(*) AS calls FROM {EV} WHERE pid = {} GROUP BY fd WINDOW(time, 300, 300)",
        w.pid
    );
    let url = format!("kafka://{}/{topic}", broker.address());
    let (ebql, stderr) = attached(&["--format", format, "--output", &url, &sql]);
    w.pread(a, 128, 300);
    w.sleep_ms(400);
    w.pread(b, 64, 200);
    w.sleep_ms(400);
    stop(ebql, stderr);
    (sql, broker.consume(topic), a, b)
}

/// Checks what every message of one run carries besides its rows.
fn check_envelope(records: &[Record], sql: &str, payload: &str) {
    assert!(!records.is_empty());
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .unwrap()
        .trim()
        .to_string();
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    for r in records {
        let (h, id) = r
            .key
            .split_once('/')
            .unwrap_or_else(|| panic!("key {}", r.key));
        assert_eq!(h, host);
        assert!(
            id.len() == 16 && id.chars().all(|c| c.is_ascii_hexdigit()),
            "{}",
            r.key
        );
        assert_eq!(r.headers["ebql-query"], sql);
        assert_eq!(r.headers["ebql-query-id"], id);
        assert_eq!(r.headers["ebql-host"], host);
        assert_eq!(r.headers["ebql-payload"], payload);
        assert_eq!(r.headers["ebql-window-kind"], "time");
        let (start, end): (u64, u64) = (
            r.headers["ebql-window-start"].parse().unwrap(),
            r.headers["ebql-window-end"].parse().unwrap(),
        );
        assert!(start < end, "{:?}", r.headers);
        // Wall clock: the window ended during this test, its start before its end.
        let (wall_start, wall_end): (i64, i64) = (
            r.headers["ebql-window-start-unix-ms"].parse().unwrap(),
            r.headers["ebql-window-end-unix-ms"].parse().unwrap(),
        );
        assert!(
            wall_start < wall_end && wall_end <= now_ms && now_ms - wall_end < 120_000,
            "{:?}",
            r.headers
        );
        assert_eq!(
            r.timestamp, wall_end,
            "the message's timestamp is the window's end"
        );
    }
}

/// `--format arrow`: one message per window, an Arrow IPC stream of its
/// rows; summed over windows, exactly the workload's calls per fd. Then
/// `--format json` into another topic: one message per row, same sums.
#[test]
fn windows_reach_a_real_broker_as_arrow_ipc_and_as_json_rows() {
    let _k = kernel_lock();
    require_root();
    let broker = Broker::start("");

    let (sql, records, a, b) = produce(&broker, "arrow", "ebql-arrow");
    check_envelope(&records, &sql, "arrow-ipc-stream");
    let mut calls = BTreeMap::new();
    let mut starts = Vec::new();
    for r in &records {
        let reader =
            ebql::arrow::ipc::reader::StreamReader::try_new(std::io::Cursor::new(&r.payload), None)
                .unwrap();
        let batches: Vec<_> = reader.collect::<Result<_, _>>().unwrap();
        assert_eq!(batches.len(), 1, "one batch per message");
        let batch = &batches[0];
        let names: Vec<_> = batch
            .schema()
            .fields()
            .iter()
            .map(|f| f.name().clone())
            .collect();
        assert_eq!(
            names,
            [
                "window_start",
                "window_end",
                "window_start_mono_ns",
                "window_end_mono_ns",
                "fd",
                "calls"
            ]
        );
        let fd = cast(batch.column(4), &DataType::UInt64).unwrap();
        let n = cast(batch.column(5), &DataType::UInt64).unwrap();
        for (fd, n) in fd
            .as_primitive::<UInt64Type>()
            .values()
            .iter()
            .zip(n.as_primitive::<UInt64Type>().values())
        {
            *calls.entry(*fd).or_insert(0) += n;
        }
        starts.push(r.headers["ebql-window-start"].parse::<u64>().unwrap());
    }
    assert_eq!(
        calls,
        BTreeMap::from([(a, 300), (b, 200)]),
        "{} messages",
        records.len()
    );
    assert!(
        starts.is_sorted() && starts.windows(2).all(|p| p[0] < p[1]),
        "windows in order, one message each: {starts:?}"
    );

    let (sql, records, a, b) = produce(&broker, "json", "ebql-json");
    check_envelope(&records, &sql, "json");
    let mut calls = BTreeMap::new();
    for r in &records {
        let row: serde_json::Value = serde_json::from_slice(&r.payload).unwrap();
        assert_eq!(
            row["window_start_mono_ns"].to_string(),
            r.headers["ebql-window-start"],
            "{row}"
        );
        // The wall-clock bound, RFC 3339 UTC, is the header's unix ms (same run offset).
        let wall = chrono::DateTime::parse_from_rfc3339(row["window_start"].as_str().unwrap())
            .unwrap()
            .timestamp_millis();
        assert_eq!(
            wall.to_string(),
            r.headers["ebql-window-start-unix-ms"],
            "{row}"
        );
        *calls.entry(row["fd"].as_u64().unwrap()).or_insert(0) += row["calls"].as_u64().unwrap();
    }
    assert_eq!(
        calls,
        BTreeMap::from([(a, 300), (b, 200)]),
        "{} messages",
        records.len()
    );
}

/// Nobody listens at the address: exit 1 with an error naming the broker,
/// before the probe was ever attached.
#[test]
fn unreachable_broker_fails_before_attaching() {
    require_root();
    let port = free_port();
    let sql =
        format!("SELECT fd, COUNT(*) FROM {EV} WHERE pid = 1 GROUP BY fd WINDOW(time, 1000, 1000)");
    let out = Command::new(EBQL)
        .args([
            "query",
            "--format",
            "arrow",
            "--duration",
            "1",
            "--output",
            &format!("kafka://127.0.0.1:{port}/t"),
            &sql,
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains(&format!(
            "connecting to the Kafka broker at 127.0.0.1:{port}"
        )) && err.contains("is the broker running"),
        "{err}"
    );
    assert!(
        !err.contains("attached"),
        "the broker is checked before the probe is attached: {err}"
    );
}

/// A broker that refuses every message (its size limit is below any of
/// ours): the delivery reports fail the run with exit 1 and the broker's reason.
#[test]
fn undelivered_messages_fail_the_run() {
    let _k = kernel_lock();
    require_root();
    let broker = Broker::start("message.max.bytes=64\n");
    let mut w = Workload::start();
    let fd = w.file();
    let sql = format!(
        "SELECT fd, COUNT(*) AS calls FROM {EV} WHERE pid = {} GROUP BY fd WINDOW(time, 200, 200)",
        w.pid
    );
    let url = format!("kafka://{}/ebql-refused", broker.address());
    let (mut ebql, mut stderr) = attached(&["--format", "arrow", "--output", &url, &sql]);
    w.pread(fd, 8, 10);
    w.sleep_ms(300);
    w.pread(fd, 8, 10);
    // The failed delivery stops the query at the next window; SIGINT only if it has not yet.
    let deadline = Instant::now() + Duration::from_secs(20);
    while ebql.try_wait().unwrap().is_none() && Instant::now() < deadline {
        w.sleep_ms(100);
    }
    if ebql.try_wait().unwrap().is_none() {
        // SAFETY: signalling our own child, not yet waited for.
        unsafe { libc::kill(ebql.id() as i32, libc::SIGINT) };
    }
    let status = ebql.wait().unwrap();
    let mut err = String::new();
    stderr.read_to_string(&mut err).unwrap();
    assert_eq!(status.code(), Some(1), "{err}");
    assert!(
        err.contains("producing to Kafka topic ebql-refused")
            && err.contains("messages were not delivered")
            && err.contains("MessageSizeTooLarge"),
        "{err}"
    );
}
