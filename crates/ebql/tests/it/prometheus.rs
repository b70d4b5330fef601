//! `ebql serve --prometheus`: Debian's real Prometheus server scrapes ebql,
//! and its HTTP API gives back exactly what our scripted workload did.
//! Also: a port in use, and a non-loopback address without the flag.

use crate::common::*;
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const EBQL: &str = env!("CARGO_BIN_EXE_ebql");
const EV: &str = "tracepoint:syscalls:sys_enter_pread64";

fn url_encode(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// Debian's `prometheus` scraping 127.0.0.1:`target` every second, storing in a
/// temp dir, its API on its own port; killed (and its dir removed) on drop.
struct Prometheus {
    child: Child,
    port: u16,
    dir: PathBuf,
}

impl Prometheus {
    fn start(target: u16) -> Prometheus {
        let bin = ["/usr/bin/prometheus", "/usr/local/bin/prometheus"]
            .into_iter()
            .find(|p| std::path::Path::new(p).exists())
            .expect("the prometheus server (scripts/setup.sh installs Debian's `prometheus`)");
        let dir =
            std::env::temp_dir().join(format!("ebql-prom-test-{}-{target}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let config = dir.join("prometheus.yml");
        std::fs::write(
            &config,
            format!("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n  - job_name: ebql\n    static_configs:\n      - targets: ['127.0.0.1:{target}']\n"),
        )
        .unwrap();
        let port = free_port();
        let child = Command::new(bin)
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join("prometheus.log")).unwrap())
            .spawn()
            .expect("start prometheus");
        let p = Prometheus { child, port, dir };
        let deadline = Instant::now() + Duration::from_secs(60);
        while !matches!(http_get(port, "/-/ready"), Ok((200, _))) {
            assert!(
                Instant::now() < deadline,
                "prometheus did not get ready:\n{}",
                p.log()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        p
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("prometheus.log")).unwrap_or_default()
    }

    /// An instant query: each series' labels (without job/instance) → value.
    fn query(&self, promql: &str) -> BTreeMap<BTreeMap<String, String>, f64> {
        let (status, body) = http_get(
            self.port,
            &format!("/api/v1/query?query={}", url_encode(promql)),
        )
        .unwrap();
        assert_eq!(status, 200, "{promql}: {body}");
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(v["status"], "success", "{body}");
        v["data"]["result"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| {
                let labels = s["metric"]
                    .as_object()
                    .unwrap()
                    .iter()
                    .filter(|(k, _)| !matches!(k.as_str(), "job" | "instance"))
                    .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_string()))
                    .collect();
                (labels, s["value"][1].as_str().unwrap().parse().unwrap())
            })
            .collect()
    }

    /// Polls `promql` until it gives `want` (a scrape after the last window
    /// closed), else fails with what it gave last.
    fn wait_for(&self, promql: &str, want: &BTreeMap<BTreeMap<String, String>, f64>) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let got = self.query(promql);
            if &got == want {
                return;
            }
            if Instant::now() > deadline {
                assert_eq!(&got, want, "{promql}\nprometheus log:\n{}", self.log());
            }
            std::thread::sleep(Duration::from_millis(250));
        }
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A running `ebql serve`, killed on drop.
struct Serve(Child);

impl Drop for Serve {
    fn drop(&mut self) {
        // SAFETY: signalling our own child.
        unsafe { libc::kill(self.0.id() as i32, libc::SIGTERM) };
        let _ = self.0.wait();
    }
}

fn series(pairs: &[(&[(&str, &str)], f64)]) -> BTreeMap<BTreeMap<String, String>, f64> {
    pairs
        .iter()
        .map(|(l, v)| {
            (
                l.iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
                *v,
            )
        })
        .collect()
}

#[test]
fn prometheus_scrapes_exact_counts_histograms_and_stats() {
    let _k = kernel_lock();
    require_root();
    let mut w = Workload::start();
    let (a, b) = (w.file(), w.file());
    let port = free_port();
    // Two queries from a file: the first named by --name, the second by its event.
    let dir = std::env::temp_dir().join(format!("ebql-serve-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("queries.sql");
    std::fs::write(
        &file,
        format!(
            "-- reads per fd\nSELECT fd, COUNT(*) AS reads, HIST(count) AS size FROM {EV} WHERE pid = {pid} GROUP BY fd WINDOW(time, 1000, 1000);\n\nSELECT COUNT(*) AS n, SUM(count) AS bytes FROM {EV}\n  WHERE pid = {pid} WINDOW(time, 1000, 1000)\n",
            pid = w.pid
        ),
    )
    .unwrap();
    let mut child = Command::new(EBQL)
        .args([
            "serve",
            "--prometheus",
            &format!("127.0.0.1:{port}"),
            "--name",
            "preads",
            "--bpf-stats",
            "--file",
        ])
        .arg(&file)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let _serve = Serve(child);
    for name in ["preads", "ebql_sys_enter_pread64"] {
        let mut line = String::new();
        stderr.read_line(&mut line).unwrap();
        assert!(
            line.starts_with(&format!("ebql: attached {name} ")),
            "{line}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
    let prom = Prometheus::start(port);
    // fd a: 5 reads of 100 bytes ([64, 127]) and 7 of 1000 ([512, 1023]); fd b: 300 of 8 ([8, 15]).
    w.pread(a, 100, 5);
    w.pread(a, 1000, 7);
    w.pread(b, 8, 300);
    let (fa, fb) = (a.to_string(), b.to_string());
    prom.wait_for(
        "preads_reads_total",
        &series(&[
            (&[("__name__", "preads_reads_total"), ("fd", &fa)], 12.0),
            (&[("__name__", "preads_reads_total"), ("fd", &fb)], 300.0),
        ]),
    );
    let bucket = |fd: &str, le: &str, v: f64| {
        (
            vec![
                ("__name__".to_string(), "preads_size_bucket".to_string()),
                ("fd".into(), fd.to_string()),
                ("le".into(), le.to_string()),
            ]
            .into_iter()
            .collect(),
            v,
        )
    };
    let want: BTreeMap<_, _> = [
        bucket(&fa, "63", 0.0),
        bucket(&fa, "127", 5.0),
        bucket(&fa, "511", 5.0),
        bucket(&fa, "1023", 12.0),
        bucket(&fa, "+Inf", 12.0),
        bucket(&fb, "7", 0.0),
        bucket(&fb, "15", 300.0),
        bucket(&fb, "+Inf", 300.0),
    ]
    .into();
    prom.wait_for("preads_size_bucket", &want);
    prom.wait_for(
        "preads_size_count",
        &series(&[
            (&[("__name__", "preads_size_count"), ("fd", &fa)], 12.0),
            (&[("__name__", "preads_size_count"), ("fd", &fb)], 300.0),
        ]),
    );
    // Prometheus' own quantile over our buckets: the median of fd a's 12 reads is in [512, 1023].
    let median = prom.query(&format!(
        "histogram_quantile(0.5, preads_size_bucket{{fd=\"{fa}\"}})"
    ));
    let m = *median.values().next().expect("a median");
    assert!((511.0..=1023.0).contains(&m), "median {m}");
    // The second query: no group key, so no labels; SUM of an unsigned column is a counter.
    let one = |name: &str, v: f64| series(&[(&[("__name__", name)], v)]);
    prom.wait_for(
        "ebql_sys_enter_pread64_n_total",
        &one("ebql_sys_enter_pread64_n_total", 312.0),
    );
    prom.wait_for(
        "ebql_sys_enter_pread64_bytes_total",
        &one(
            "ebql_sys_enter_pread64_bytes_total",
            (5 * 100 + 7 * 1000 + 300 * 8) as f64,
        ),
    );
    let matched = |q: &str| {
        (
            vec![
                (
                    "__name__".to_string(),
                    "ebql_events_matched_total".to_string(),
                ),
                ("query".to_string(), q.to_string()),
            ]
            .into_iter()
            .collect(),
            312.0,
        )
    };
    prom.wait_for(
        "ebql_events_matched_total",
        &[matched("preads"), matched("ebql_sys_enter_pread64")].into(),
    );
    let dropped = prom.query("sum(ebql_events_dropped_total)");
    assert_eq!(dropped.values().copied().collect::<Vec<_>>(), vec![0.0]);
    // --bpf-stats: the kernel's run count of each query's program is its own count of events seen.
    let seen = prom.query("ebql_events_seen_total");
    let runs = prom.query("ebql_probe_runs_total");
    assert_eq!(seen.len(), 2, "{seen:?}");
    assert!(
        seen.values().all(|&r| r >= 312.0),
        "the probe saw at least every matched event: {seen:?}"
    );
    assert_eq!(
        runs.len(),
        2,
        "probe run counters are served with --bpf-stats: {runs:?}"
    );
    assert!(runs.values().all(|&r| r >= 312.0), "{runs:?}");
}

#[test]
fn a_port_in_use_exits_1_before_attaching() {
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let sql = format!("SELECT COUNT(*) FROM {EV} WINDOW(time, 1000, 1000)");
    let out = Command::new(EBQL)
        .args(["serve", "--prometheus", &addr, "--duration", "1", &sql])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains(&addr) && err.contains("in use") && err.contains("choose a free port"),
        "{err}"
    );
    assert!(
        !err.contains("attached"),
        "nothing may be attached when the port is taken:\n{err}"
    );
}

#[test]
fn non_loopback_needs_the_flag_and_bad_queries_exit_2() {
    let sql = format!("SELECT COUNT(*) FROM {EV} WINDOW(time, 1000, 1000)");
    let out = Command::new(EBQL)
        .args([
            "serve",
            "--prometheus",
            "0.0.0.0:1",
            "--duration",
            "1",
            &sql,
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("--allow-non-loopback") && !err.contains("attached"),
        "{err}"
    );
    let hopping = format!("SELECT COUNT(*) FROM {EV} WINDOW(time, 2000, 1000)");
    let out = Command::new(EBQL)
        .args([
            "serve",
            "--prometheus",
            &format!("127.0.0.1:{}", free_port()),
            &hopping,
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("tumbling windows only")
            && err.contains("WINDOW(time, 1000, 1000)")
            && !err.contains("attached"),
        "{err}"
    );
    let under = err
        .lines()
        .find(|l| l.trim_start().starts_with('~'))
        .unwrap_or_else(|| panic!("no underline:\n{err}"));
    assert_eq!(
        under.trim().len(),
        "WINDOW(time, 2000, 1000)".len(),
        "{err}"
    );
}

/// Issue 20, item 8: every query is compiled before any attaches, and a
/// bad one is named by its place (`query 2:…`), so nothing is loaded.
#[test]
fn a_bad_second_query_is_named_and_nothing_attaches() {
    require_root();
    let _k = kernel_lock();
    let good = format!("SELECT COUNT(*) FROM {EV} WINDOW(time, 1000, 1000)");
    let bad = format!("SELECT SUM(cnt) FROM {EV} WINDOW(time, 1000, 1000)");
    let out = Command::new(EBQL)
        .args([
            "serve",
            "--prometheus",
            "127.0.0.1:0",
            "-d",
            "1",
            &good,
            &bad,
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("query 2:1:12-14: error: unknown field 'cnt'") && err.contains("hint:"),
        "{err}"
    );
    // Each query says `attached` as soon as it is: none was.
    assert!(!err.contains("attached"), "{err}");
}
