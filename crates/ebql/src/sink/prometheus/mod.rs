//! The Prometheus endpoint: every query's results as metrics in the text
//! exposition format, version 0.0.4
//! (<https://prometheus.io/docs/instrumenting/exposition_formats/>), served
//! at `/metrics` by one HTTP server ([`PrometheusServer`], `tiny_http`)
//! that any number of queries feed, each through its own [`PrometheusSink`].
//!
//! # From a result to metrics
//!
//! * **Query name** (the metric prefix): `--name` if given, else
//!   `ebql_<event>` (the first event's name, e.g. `ebql_sys_enter_pread64`;
//!   `_2`, `_3`… when several queries read the same event). Sanitized to
//!   `[a-zA-Z_:][a-zA-Z0-9_:]*` ([`metric_name`]).
//! * **Labels**: a column whose SELECT item is a plain column or a GROUP BY
//!   expression is a group key and becomes a label named after the column
//!   (sanitized to `[a-zA-Z_][a-zA-Z0-9_]*`), its value escaped per the format.
//!   Every other column is a value, exposed as the metric
//!   `<query name>_<column>`.
//! * **Counters**: `COUNT(…)` (not DISTINCT) and `SUM` of an unsigned
//!   column are counters `<name>_total` that **add up every closed window**
//!   per label set. That is what Prometheus users expect from an event count:
//!   `rate(x_total[1m])` gives events per second whatever the scrape interval,
//!   and no event is lost when a window closes between two scrapes (a
//!   per-window gauge would be sampled, not summed). A group absent from a
//!   window keeps its total. A signed SUM can decrease, so it is a gauge.
//! * **Gauges**: every other numeric value (MIN, MAX, AVG, COUNT(DISTINCT),
//!   quantiles, …) is the value of the **latest closed window**; groups absent
//!   from it have no sample.
//! * **Histograms**: a HIST/LHIST column is a Prometheus histogram whose
//!   buckets, like counters, add up every closed window. eBQL buckets are
//!   integer ranges with inclusive bounds `[lo, hi]` (bpftrace's `[lo, hi+1)`);
//!   as values are integers, "≤ hi" is exactly "in this bucket or below",
//!   so each non-empty bucket gives `le="hi"`, preceded by `le="lo-1"` when
//!   the bucket below it was never filled (so `histogram_quantile`
//!   interpolates inside the bucket's own range), then `le="+Inf"` and
//!   `_count`. The underflow/negative bucket (`lo` = the type's minimum) has
//!   no lower `le`; the overflow bucket's `hi` is the type's maximum. The
//!   per-bucket counts are all eBQL keeps (as bpftrace), so there is no
//!   `_sum`: add `SUM(x)` to the query for it.
//! * **eBQL's own counters**, one family each with a `query` label:
//!   `ebql_events_seen_total` (events of the processes the query selects
//!   at its hook, as its program counts them), `ebql_events_matched_total`,
//!   `ebql_events_dropped_total{reason=…}`, `ebql_windows_total`,
//!   `ebql_rows_total`, and only when the query holds bpf_stats on
//!   (`--bpf-stats`) `ebql_probe_runs_total` and
//!   `ebql_probe_run_seconds_total`; `ebql_query_info{query, sql} 1`.
//!
//! Only tumbling windows (time or count) are served: in a hopping window an
//! event belongs to several windows, so totals would count it several times.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

use arrow::array::{Array, ArrayRef, AsArray};
use arrow::datatypes::{DataType, Float64Type, Int64Type, UInt64Type};

mod plan;
mod text;

pub use plan::MetricsPlan;
pub use text::{cumulative_buckets, escape_label_value, label_name, metric_name};

use super::contract::{QueryInfo, Sink, SinkError};
use crate::window::{QueryStats, WindowBatch, WindowDrops};
use plan::Item;
use text::{escape_help, labels_text, value_text, Labels};

/// Reads a running query's counters (see [`crate::RunningQuery::stats_source`]).
pub type StatsFn = Box<dyn Fn() -> QueryStats + Send + Sync>;

/// The `Content-Type` of the text exposition format 0.0.4.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// What a result column is exposed as.
#[derive(Debug, Clone)]
enum Role {
    /// The window's columns (`window_start`, `window_end`, and for time
    /// windows `window_start_mono_ns`, `window_end_mono_ns`): not exposed.
    Bound,
    Label(String),
    Counter(String),
    Gauge(String),
    Histogram(String),
    /// A value that is not a number (exposed as nothing; a comment says so).
    Skip(String),
}

/// True for HIST/LHIST columns: a list of `{lo, hi, count}` (see `ebql_compiler::agg::hist`).
fn is_hist(dt: &DataType) -> bool {
    match dt {
        DataType::List(item) => {
            matches!(item.data_type(), DataType::Struct(f) if f.len() == 3 && f[0].name() == "lo" && f[1].name() == "hi" && f[2].name() == "count")
        }
        _ => false,
    }
}

/// The metrics of one query, as its windows closed.
struct QueryMetrics {
    plan: MetricsPlan,
    roles: Vec<Role>,
    /// Result column names, as the query names them.
    columns: Vec<String>,
    /// (column, labels) → total over closed windows.
    counters: BTreeMap<(usize, Labels), u64>,
    /// The latest closed window's gauge samples.
    gauges: Vec<(usize, Labels, f64)>,
    /// (column, labels) → bucket `(lo, hi)` → total over closed windows.
    hists: BTreeMap<(usize, Labels), BTreeMap<(i128, i128), u64>>,
    windows: u64,
    /// Windows that failed (their metrics keep the previous window's values).
    failed: u64,
    rows: u64,
    drops: WindowDrops,
    live: Option<StatsFn>,
    /// The counters its driver passed last ([`Sink::progress`]), for a
    /// query exposed without `live` (a standing query added to a service).
    progress: Option<QueryStats>,
    last: Option<QueryStats>,
    /// Removed from the service ([`PrometheusServer::retire`]): its series
    /// are no longer exposed. Kept in place, since sinks hold an index.
    retired: bool,
}

impl QueryMetrics {
    /// Counters of the query: final once finished, else live, else what the windows said.
    fn stats(&self) -> QueryStats {
        if let Some(s) = self.last {
            return s;
        }
        let mut s = self
            .live
            .as_ref()
            .map(|f| f())
            .or(self.progress)
            .unwrap_or_default();
        s.windows_emitted = s.windows_emitted.max(self.windows);
        s.windows_failed = s.windows_failed.max(self.failed);
        s.rows_emitted = s.rows_emitted.max(self.rows);
        s.dropped_groups_full = s.dropped_groups_full.max(self.drops.groups_full);
        s.dropped_ringbuf_full = s.dropped_ringbuf_full.max(self.drops.ringbuf_full);
        s.dropped_distinct_full = s.dropped_distinct_full.max(self.drops.distinct_full);
        s
    }

    fn absorb(&mut self, w: &WindowBatch) -> Result<(), String> {
        if w.error.is_some() {
            // No values: counters and gauges keep what the last computed window gave.
            self.windows += 1;
            self.failed += 1;
            self.drops.add(&w.drops);
            return Ok(());
        }
        let b = &w.batch;
        let opts = arrow::util::display::FormatOptions::default();
        let mut label_cols = Vec::new();
        for (i, r) in self.roles.iter().enumerate() {
            if let Role::Label(n) = r {
                label_cols.push((
                    n.clone(),
                    arrow::util::display::ArrayFormatter::try_new(b.column(i).as_ref(), &opts)
                        .map_err(|e| e.to_string())?,
                ));
            }
        }
        let row_labels: Vec<Labels> = (0..b.num_rows())
            .map(|row| {
                label_cols
                    .iter()
                    .map(|(n, f)| (n.clone(), f.value(row).to_string()))
                    .collect()
            })
            .collect();
        let mut gauges = Vec::new();
        for (i, role) in self.roles.iter().enumerate() {
            let col: &ArrayRef = b.column(i);
            match role {
                Role::Counter(_) => {
                    let c =
                        arrow::compute::cast(col, &DataType::UInt64).map_err(|e| e.to_string())?;
                    let c = c.as_primitive::<UInt64Type>();
                    for (row, l) in row_labels.iter().enumerate() {
                        if c.is_valid(row) {
                            let t = self.counters.entry((i, l.clone())).or_default();
                            *t = t.saturating_add(c.value(row));
                        }
                    }
                }
                Role::Gauge(_) => {
                    let c =
                        arrow::compute::cast(col, &DataType::Float64).map_err(|e| e.to_string())?;
                    let c = c.as_primitive::<Float64Type>();
                    for (row, l) in row_labels.iter().enumerate() {
                        if c.is_valid(row) {
                            gauges.push((i, l.clone(), c.value(row)));
                        }
                    }
                }
                Role::Histogram(_) => {
                    let list = col.as_list::<i32>();
                    for (row, l) in row_labels.iter().enumerate() {
                        if list.is_null(row) {
                            continue;
                        }
                        let buckets = list.value(row);
                        let s = buckets.as_struct();
                        let (lo, hi) = (bound_values(s.column(0))?, bound_values(s.column(1))?);
                        let n = arrow::compute::cast(s.column(2), &DataType::UInt64)
                            .map_err(|e| e.to_string())?;
                        let n = n.as_primitive::<UInt64Type>();
                        let h = self.hists.entry((i, l.clone())).or_default();
                        for k in 0..s.len() {
                            *h.entry((lo[k], hi[k])).or_default() += n.value(k);
                        }
                    }
                }
                Role::Bound | Role::Label(_) | Role::Skip(_) => {}
            }
        }
        self.gauges = gauges;
        self.windows += 1;
        self.rows += b.num_rows() as u64;
        self.drops.add(&w.drops);
        Ok(())
    }

    /// This query's own metric families.
    fn render(&self, out: &mut String) {
        let what = &self.plan.name;
        for (i, role) in self.roles.iter().enumerate() {
            match role {
                Role::Counter(m) => {
                    let _ = writeln!(
                        out,
                        "# HELP {m} {} of query {what}, summed over its closed windows",
                        escape_help(&self.column_text(i))
                    );
                    let _ = writeln!(out, "# TYPE {m} counter");
                    for ((_, l), v) in self
                        .counters
                        .range((i, Vec::new())..)
                        .take_while(|((c, _), _)| *c == i)
                    {
                        let _ = writeln!(out, "{m}{} {v}", labels_text(l, None));
                    }
                }
                Role::Gauge(m) => {
                    let _ = writeln!(
                        out,
                        "# HELP {m} {} of query {what} in its latest closed window",
                        escape_help(&self.column_text(i))
                    );
                    let _ = writeln!(out, "# TYPE {m} gauge");
                    for (_, l, v) in self.gauges.iter().filter(|(c, ..)| *c == i) {
                        let _ = writeln!(out, "{m}{} {}", labels_text(l, None), value_text(*v));
                    }
                }
                Role::Histogram(m) => {
                    let _ = writeln!(out, "# HELP {m} {} of query {what}, buckets summed over its closed windows (no _sum: eBQL histograms keep bucket counts only)", escape_help(&self.column_text(i)));
                    let _ = writeln!(out, "# TYPE {m} histogram");
                    for ((_, l), buckets) in self
                        .hists
                        .range((i, Vec::new())..)
                        .take_while(|((c, _), _)| *c == i)
                    {
                        let mut total = 0u64;
                        for (le, cum) in cumulative_buckets(buckets) {
                            let _ = writeln!(
                                out,
                                "{m}_bucket{} {cum}",
                                labels_text(l, Some(("le", &le.to_string())))
                            );
                            total = cum;
                        }
                        let _ = writeln!(
                            out,
                            "{m}_bucket{} {total}",
                            labels_text(l, Some(("le", "+Inf")))
                        );
                        let _ = writeln!(out, "{m}_count{} {total}", labels_text(l, None));
                    }
                }
                Role::Skip(c) => {
                    let _ = writeln!(
                        out,
                        "# ebql: column {c} of query {what} is not a number and is not exposed"
                    );
                }
                Role::Bound | Role::Label(_) => {}
            }
        }
    }

    /// How HELP names column `i`: `column count(*)`.
    fn column_text(&self, i: usize) -> String {
        format!(
            "column {}",
            self.columns.get(i).map(String::as_str).unwrap_or("?")
        )
    }
}

/// A histogram's `lo`/`hi` column (Int64 or UInt64) as i128.
fn bound_values(a: &ArrayRef) -> Result<Vec<i128>, String> {
    match a.data_type() {
        DataType::Int64 => Ok(a
            .as_primitive::<Int64Type>()
            .values()
            .iter()
            .map(|&v| v as i128)
            .collect()),
        DataType::UInt64 => Ok(a
            .as_primitive::<UInt64Type>()
            .values()
            .iter()
            .map(|&v| v as i128)
            .collect()),
        t => Err(format!("histogram bounds of type {t}")),
    }
}

/// Every query's metrics; the HTTP thread renders it on each scrape.
#[derive(Default)]
struct Registry {
    queries: Vec<QueryMetrics>,
}

impl Registry {
    /// The queries still exposed.
    fn exposed(&self) -> impl Iterator<Item = &QueryMetrics> {
        self.queries.iter().filter(|q| !q.retired)
    }

    fn render(&self) -> String {
        let mut out = String::new();
        for q in self.exposed() {
            q.render(&mut out);
        }
        let stats: Vec<(&str, QueryStats)> = self
            .exposed()
            .map(|q| (q.plan.name.as_str(), q.stats()))
            .collect();
        let family = |out: &mut String,
                      name: &str,
                      kind: &str,
                      help: &str,
                      samples: Vec<(String, String)>| {
            if samples.is_empty() {
                return;
            }
            let _ = writeln!(out, "# HELP {name} {help}");
            let _ = writeln!(out, "# TYPE {name} {kind}");
            for (labels, v) in samples {
                let _ = writeln!(out, "{name}{labels} {v}");
            }
        };
        let per_query = |f: &dyn Fn(&QueryStats) -> Option<String>| -> Vec<(String, String)> {
            stats
                .iter()
                .filter_map(|(q, s)| f(s).map(|v| (labels_text(&[], Some(("query", q))), v)))
                .collect()
        };
        family(
            &mut out,
            "ebql_events_seen_total",
            "counter",
            "Events of the processes and threads the query selects, at its hook (before the rest of its filter)",
            per_query(&|s| Some(s.events_seen.to_string())),
        );
        family(
            &mut out,
            "ebql_events_matched_total",
            "counter",
            "Events that passed the query's kernel filter (recorded plus dropped)",
            per_query(&|s| Some(s.events_matched.to_string())),
        );
        let mut dropped = Vec::new();
        for (q, s) in &stats {
            for (reason, n) in [
                ("group_table_full", s.dropped_groups_full),
                ("ring_buffer_full", s.dropped_ringbuf_full),
                ("distinct_set_full", s.dropped_distinct_full),
                ("bpf_recursion", s.bpf_recursion_misses),
                ("pair_start_map_full", s.pair_start_map_full),
            ] {
                dropped.push((
                    format!(
                        "{{query=\"{}\",reason=\"{reason}\"}}",
                        escape_label_value(q)
                    ),
                    n.to_string(),
                ));
            }
        }
        family(
            &mut out,
            "ebql_events_dropped_total",
            "counter",
            "Events the query could not record, by reason",
            dropped,
        );
        family(
            &mut out,
            "ebql_windows_total",
            "counter",
            "Windows the query closed",
            per_query(&|s| Some(s.windows_emitted.to_string())),
        );
        family(
            &mut out,
            "ebql_windows_failed_total",
            "counter",
            "Windows whose evaluation failed (an exact SUM beyond its type, a failing CAST, …): their metrics kept the previous values",
            per_query(&|s| Some(s.windows_failed.to_string())),
        );
        family(
            &mut out,
            "ebql_rows_total",
            "counter",
            "Result rows of the query's closed windows",
            per_query(&|s| Some(s.rows_emitted.to_string())),
        );
        family(
            &mut out,
            "ebql_probe_runs_total",
            "counter",
            "Runs of the query's probes: every event at the hook, from any process (bpf_stats: --bpf-stats)",
            per_query(&|s| s.bpf_stats.then(|| s.bpf_run_cnt.to_string())),
        );
        family(
            &mut out,
            "ebql_probe_run_seconds_total",
            "counter",
            "Time spent in the query's probes (bpf_stats: --bpf-stats)",
            per_query(&|s| {
                s.bpf_stats
                    .then(|| value_text(s.bpf_run_time_ns as f64 / 1e9))
            }),
        );
        let info = self
            .exposed()
            .map(|q| {
                (
                    format!(
                        "{{query=\"{}\",sql=\"{}\"}}",
                        escape_label_value(&q.plan.name),
                        escape_label_value(&q.plan.sql)
                    ),
                    "1".to_string(),
                )
            })
            .collect();
        family(
            &mut out,
            "ebql_query_info",
            "gauge",
            "The SQL of each query served",
            info,
        );
        out
    }
}

fn lock(r: &Mutex<Registry>) -> MutexGuard<'_, Registry> {
    r.lock().unwrap_or_else(|e| e.into_inner())
}

/// The HTTP server of `/metrics`; stops serving on drop.
pub struct PrometheusServer {
    registry: Arc<Mutex<Registry>>,
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl PrometheusServer {
    /// Listens on `addr` (port 0: any free port, see [`Self::addr`]) and
    /// serves `/metrics` from a thread.
    ///
    /// Errors: the address is in use or not ours to bind.
    pub fn bind(addr: SocketAddr) -> Result<PrometheusServer, SinkError> {
        let what = format!("listening on {addr} for Prometheus");
        let server = tiny_http::Server::http(addr).map_err(|e| match e.downcast_ref::<std::io::Error>().map(|e| e.kind()) {
            Some(std::io::ErrorKind::AddrInUse) => SinkError::new(what.clone(), format!("{e}: another process listens there; choose a free port (e.g. --prometheus 127.0.0.1:9465)")),
            _ => SinkError::new(what.clone(), e),
        })?;
        let addr = server.server_addr().to_ip().unwrap_or(addr);
        let registry = Arc::new(Mutex::new(Registry::default()));
        let stop = Arc::new(AtomicBool::new(false));
        let (r, s) = (registry.clone(), stop.clone());
        let thread = std::thread::Builder::new()
            .name("ebql-prometheus".into())
            .spawn(move || serve(server, &r, &s))
            .map_err(|e| SinkError::new("starting the Prometheus HTTP thread", e))?;
        Ok(PrometheusServer {
            registry,
            addr,
            stop,
            thread: Some(thread),
        })
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// A sink feeding this server with one query's windows. `live` reads the
    /// running query's counters on each scrape (else they come from its windows,
    /// then its final stats).
    ///
    /// Errors: another query already has this explicit name (a derived one
    /// gets a `_2`, `_3`… suffix instead).
    pub fn sink(
        &self,
        mut plan: MetricsPlan,
        live: Option<StatsFn>,
    ) -> Result<PrometheusSink, SinkError> {
        let mut reg = lock(&self.registry);
        let taken = |n: &str| reg.exposed().any(|q| q.plan.name == n);
        if taken(&plan.name) {
            if plan.explicit {
                return Err(SinkError::new(
                    format!("serving query {}", plan.sql),
                    format!(
                        "another query is already named {}; give each --name once",
                        plan.name
                    ),
                ));
            }
            let base = plan.name.clone();
            plan.name = (2..)
                .map(|i| format!("{base}_{i}"))
                .find(|n| !taken(n))
                .expect("a free suffix");
        }
        reg.queries.push(QueryMetrics {
            plan,
            roles: vec![],
            columns: vec![],
            counters: BTreeMap::new(),
            gauges: vec![],
            hists: BTreeMap::new(),
            windows: 0,
            failed: 0,
            rows: 0,
            drops: WindowDrops::default(),
            live,
            progress: None,
            last: None,
            retired: false,
        });
        Ok(PrometheusSink {
            registry: self.registry.clone(),
            index: reg.queries.len() - 1,
        })
    }

    /// Stops exposing the query whose metric prefix is `name` (a standing
    /// query removed from the service): its series vanish from the next
    /// scrape, and the name is free again.
    pub fn retire(&self, name: &str) {
        let mut reg = lock(&self.registry);
        for q in reg.queries.iter_mut().filter(|q| q.plan.name == name) {
            q.retired = true;
        }
    }

    /// The text `/metrics` answers now.
    pub fn render(&self) -> String {
        lock(&self.registry).render()
    }
}

impl Drop for PrometheusServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The HTTP loop: `/metrics` renders the registry, anything else is 404.
/// Wakes every 100 ms to see whether to stop (dropping the server closes the socket).
fn serve(server: tiny_http::Server, registry: &Mutex<Registry>, stop: &AtomicBool) {
    while !stop.load(Ordering::SeqCst) {
        let req = match server.recv_timeout(Duration::from_millis(100)) {
            Ok(Some(r)) => r,
            Ok(None) | Err(_) => continue,
        };
        let path = req.url().split('?').next().unwrap_or("");
        let resp = if path == "/metrics"
            && matches!(
                req.method(),
                tiny_http::Method::Get | tiny_http::Method::Head
            ) {
            let header =
                tiny_http::Header::from_bytes(&b"Content-Type"[..], CONTENT_TYPE.as_bytes())
                    .expect("a valid header");
            tiny_http::Response::from_string(lock(registry).render()).with_header(header)
        } else {
            tiny_http::Response::from_string("eBQL serves its metrics at /metrics\n")
                .with_status_code(404)
        };
        // A scraper that hung up is its own business.
        let _ = req.respond(resp);
    }
}

/// One query's results into a [`PrometheusServer`].
pub struct PrometheusSink {
    registry: Arc<Mutex<Registry>>,
    index: usize,
}

impl PrometheusSink {
    /// The metric prefix this query got (a derived name may have a suffix).
    pub fn name(&self) -> String {
        lock(&self.registry).queries[self.index].plan.name.clone()
    }
}

impl Sink for PrometheusSink {
    fn open(&mut self, info: &QueryInfo) -> Result<(), SinkError> {
        let mut reg = lock(&self.registry);
        let q = &mut reg.queries[self.index];
        let fields = info.schema.fields();
        let bounds = crate::window::bound_columns(&info.schema);
        if fields.len() - bounds != q.plan.items.len() {
            return Err(SinkError::new(
                format!("exposing query {}", q.plan.name),
                format!(
                    "the result has {} columns, its SELECT list {} items",
                    fields.len() - bounds,
                    q.plan.items.len()
                ),
            ));
        }
        let prefix = q.plan.name.clone();
        q.columns = fields.iter().map(|f| f.name().clone()).collect();
        q.roles = fields
            .iter()
            .enumerate()
            .map(|(i, f)| {
                if i < bounds {
                    return Role::Bound;
                }
                let metric = format!("{prefix}_{}", metric_name(f.name()));
                match &q.plan.items[i - bounds] {
                    Item::Key => Role::Label(label_name(f.name())),
                    _ if is_hist(f.data_type()) => Role::Histogram(metric),
                    Item::Value {
                        func: Some(func),
                        distinct: false,
                    } if func == "count"
                        || (func == "sum" && f.data_type().is_unsigned_integer()) =>
                    {
                        Role::Counter(if metric.ends_with("_total") {
                            metric
                        } else {
                            format!("{metric}_total")
                        })
                    }
                    _ if f.data_type().is_numeric() => Role::Gauge(metric),
                    _ => Role::Skip(f.name().clone()),
                }
            })
            .collect();
        Ok(())
    }

    fn write(&mut self, window: &WindowBatch) -> Result<(), SinkError> {
        let mut reg = lock(&self.registry);
        let q = &mut reg.queries[self.index];
        q.absorb(window)
            .map_err(|e| SinkError::new(format!("exposing a window of query {}", q.plan.name), e))
    }

    fn finish(&mut self, stats: &QueryStats) -> Result<(), SinkError> {
        let mut reg = lock(&self.registry);
        let q = &mut reg.queries[self.index];
        q.last = Some(*stats);
        q.live = None;
        Ok(())
    }

    fn progress(&mut self, stats: &QueryStats) -> Result<(), SinkError> {
        lock(&self.registry).queries[self.index].progress = Some(*stats);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_sanitized() {
        assert_eq!(metric_name("count(*)"), "count");
        assert_eq!(metric_name("max(count)"), "max_count");
        assert_eq!(metric_name("9lives"), "_9lives");
        assert_eq!(metric_name("a:b-c"), "a:b_c");
        assert_eq!(label_name("a:b"), "a_b");
        assert_eq!(label_name("__name"), "_name");
        assert_eq!(escape_label_value("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    }

    #[test]
    fn buckets_become_cumulative_le_bounds() {
        // HIST of u64: [64, 127] ×5, [512, 1023] ×7; the negative-type-minimum bucket has no lower bound.
        let b: BTreeMap<(i128, i128), u64> = [((64, 127), 5), ((512, 1023), 7)].into();
        assert_eq!(
            cumulative_buckets(&b),
            vec![(63, 0), (127, 5), (511, 5), (1023, 12)]
        );
        let b: BTreeMap<(i128, i128), u64> =
            [((i64::MIN as i128, -1), 2), ((0, 0), 3), ((1, 1), 1)].into();
        assert_eq!(cumulative_buckets(&b), vec![(-1, 2), (0, 5), (1, 6)]);
    }

    #[test]
    fn plans_refuse_what_serve_cannot_expose() {
        let ev = "tracepoint:syscalls:sys_enter_pread64";
        let p = MetricsPlan::new(&format!("SELECT fd, fd % 2 AS odd, COUNT(*) AS n, MAX(count) FROM {ev} GROUP BY fd, odd WINDOW(time, 1000, 1000)"), None).unwrap();
        assert_eq!(p.name, "ebql_sys_enter_pread64");
        assert_eq!(
            p.items,
            vec![
                Item::Key,
                Item::Key,
                Item::Value {
                    func: Some("count".into()),
                    distinct: false
                },
                Item::Value {
                    func: Some("max".into()),
                    distinct: false
                }
            ]
        );
        let d = MetricsPlan::new(
            &format!("SELECT COUNT(DISTINCT fd) FROM {ev} WINDOW(count, 10, 10)"),
            Some("x y"),
        )
        .unwrap();
        assert_eq!(
            (d.name.as_str(), &d.items[0]),
            (
                "x_y",
                &Item::Value {
                    func: Some("count".into()),
                    distinct: true
                }
            )
        );
        for (sql, words) in [
            (format!("SELECT COUNT(*) FROM {ev}"), "no WINDOW clause"),
            (
                format!("SELECT COUNT(*) FROM {ev} WINDOW(time, 2000, 1000)"),
                "tumbling windows only",
            ),
            (
                format!("SELECT * FROM {ev} WINDOW(time, 1000, 1000)"),
                "not `*`",
            ),
            (
                format!("SELECT fd, count FROM {ev} WINDOW(time, 1000, 1000)"),
                "has none",
            ),
        ] {
            let e = MetricsPlan::new(&sql, None).unwrap_err().to_string();
            assert!(e.contains(words), "{sql}: {e}");
        }
    }
    #[test]
    fn windows_render_as_escaped_labels_counters_gauges_and_histograms() {
        use arrow::array::{
            Float64Array, Int64Array, ListArray, StringArray, StructArray, UInt64Array,
        };
        use arrow::buffer::OffsetBuffer;
        use arrow::datatypes::{Field, Fields, Schema};
        use arrow::record_batch::RecordBatch;
        let ev = "tracepoint:syscalls:sys_enter_pread64";
        let plan = MetricsPlan::new(&format!("SELECT comm, COUNT(*), AVG(count), HIST(count) AS size FROM {ev} GROUP BY comm WINDOW(time, 1000, 1000)"), None).unwrap();
        let bucket = Fields::from(vec![
            Field::new("lo", DataType::Int64, false),
            Field::new("hi", DataType::Int64, false),
            Field::new("count", DataType::UInt64, false),
        ]);
        let item = Arc::new(Field::new("item", DataType::Struct(bucket.clone()), false));
        let clock = crate::window::WallClock::from_offset_ns(1_736_000_000_000_000_000);
        let mut fields = crate::window::bound_fields(true);
        fields.extend([
            Field::new("comm", DataType::Utf8, false),
            Field::new("count(*)", DataType::Int64, false),
            Field::new("avg(count)", DataType::Float64, false),
            Field::new("size", DataType::List(item.clone()), true),
        ]);
        let schema = Arc::new(Schema::new(fields));
        // One row, comm `a"b\`, buckets [i64::MIN, -1] x1 and [4, 7] x2.
        let window = |count: i64, avg: f64| {
            let buckets = StructArray::new(
                bucket.clone(),
                vec![
                    Arc::new(Int64Array::from(vec![i64::MIN, 4])),
                    Arc::new(Int64Array::from(vec![-1, 7])),
                    Arc::new(UInt64Array::from(vec![1, 2])),
                ],
                None,
            );
            let hist = ListArray::new(
                item.clone(),
                OffsetBuffer::from_lengths([2]),
                Arc::new(buckets),
                None,
            );
            let mut cols = crate::window::bound_arrays(0, 1, Some(&clock), 1);
            cols.extend::<[ArrayRef; 4]>([
                Arc::new(StringArray::from(vec!["a\"b\\"])),
                Arc::new(Int64Array::from(vec![count])),
                Arc::new(Float64Array::from(vec![avg])),
                Arc::new(hist),
            ]);
            WindowBatch {
                batch: RecordBatch::try_new(schema.clone(), cols).unwrap(),
                bounds: None,
                drops: WindowDrops {
                    groups_full: 1,
                    ..Default::default()
                },
                error: None,
            }
        };
        let server = PrometheusServer::bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let mut sink = server.sink(plan, None).unwrap();
        let info = QueryInfo {
            sql: String::new(),
            schema: schema.clone(),
            window: super::super::WindowKind::Time,
            clock,
            version: "test",
            host: "test".into(),
        };
        sink.open(&info).unwrap();
        sink.write(&window(3, 1.5)).unwrap();
        sink.write(&window(4, 2.5)).unwrap();
        let text = server.render();
        let samples: Vec<&str> = text
            .lines()
            .filter(|l| !l.starts_with('#'))
            .take(7)
            .collect();
        let l = r#"comm="a\"b\\""#;
        assert_eq!(
            samples,
            vec![
                format!("ebql_sys_enter_pread64_count_total{{{l}}} 7"),
                format!("ebql_sys_enter_pread64_avg_count{{{l}}} 2.5"),
                format!("ebql_sys_enter_pread64_size_bucket{{{l},le=\"-1\"}} 2"),
                format!("ebql_sys_enter_pread64_size_bucket{{{l},le=\"3\"}} 2"),
                format!("ebql_sys_enter_pread64_size_bucket{{{l},le=\"7\"}} 6"),
                format!("ebql_sys_enter_pread64_size_bucket{{{l},le=\"+Inf\"}} 6"),
                format!("ebql_sys_enter_pread64_size_count{{{l}}} 6"),
            ]
        );
        assert!(
            text.contains("# TYPE ebql_sys_enter_pread64_size histogram\n"),
            "{text}"
        );
        assert!(text.contains("ebql_events_dropped_total{query=\"ebql_sys_enter_pread64\",reason=\"group_table_full\"} 2\n"), "{text}");
        assert!(
            text.contains("ebql_windows_total{query=\"ebql_sys_enter_pread64\"} 2\n"),
            "{text}"
        );
    }

    /// eBQL's own counters: events seen always (the query's program counts
    /// them); probe runs and run time only when the query holds bpf_stats on.
    #[test]
    fn probe_run_metrics_only_with_bpf_stats() {
        let ev = "tracepoint:syscalls:sys_enter_pread64";
        for on in [false, true] {
            let plan = MetricsPlan::new(
                &format!("SELECT COUNT(*) AS n FROM {ev} WINDOW(time, 1000, 1000)"),
                Some("q"),
            )
            .unwrap();
            let server = PrometheusServer::bind("127.0.0.1:0".parse().unwrap()).unwrap();
            let stats = QueryStats {
                events_seen: 9,
                events_matched: 4,
                bpf_stats: on,
                bpf_run_cnt: 9 * on as u64,
                bpf_run_time_ns: 900 * on as u64,
                ..Default::default()
            };
            let _sink = server.sink(plan, Some(Box::new(move || stats))).unwrap();
            let text = server.render();
            assert!(
                text.contains("ebql_events_seen_total{query=\"q\"} 9\n")
                    && text.contains("ebql_events_matched_total{query=\"q\"} 4\n"),
                "{text}"
            );
            assert_eq!(
                text.contains("ebql_probe_runs_total{query=\"q\"} 9\n"),
                on,
                "{text}"
            );
            assert_eq!(
                text.contains("ebql_probe_run_seconds_total{query=\"q\"} 0.0000009\n"),
                on,
                "{text}"
            );
            assert_eq!(text.contains("ebql_probe_run"), on, "{text}");
        }
    }
}
