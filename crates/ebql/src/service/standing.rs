//! Standing queries of the service: each named, running into its own sink
//! (a file format or a Kafka topic, as `--format`/`--output` take them, or
//! the service's Prometheus endpoint) until it is removed or the service
//! stops. Added and removed while the others run: each has its own thread
//! and maps, and the programs of a shared hook swap atomically
//! (`ebql_runtime::SharedHooks`), so adding or removing one never changes
//! another's counts.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use serde::{Deserialize, Serialize};

use super::PrometheusEndpoint;
use crate::sink::prometheus::MetricsPlan;
use crate::sink::{DriveError, Format, QueryInfo, Sink, SinkOptions};
use crate::window::QueryStats;
use crate::{Error, Executor, ExecutorOptions, RunningQuery};

/// What `ebql.add` asks for (its action body, JSON).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AddRequest {
    /// The query's name: unique among the standing queries.
    pub name: String,
    /// The query.
    pub sql: String,
    /// The sink's format, as `--format` names it (`json`, `csv`, `parquet`,
    /// `arrow`, `null`), or `prometheus`: the service's Prometheus endpoint,
    /// the name as the metrics' prefix (a tumbling-window aggregate, as
    /// `ebql serve` exposes).
    pub format: String,
    /// Where it writes, as `--output` takes it: a file, a Parquet
    /// directory, `kafka://HOST:PORT/TOPIC`; `null` and `prometheus` need none.
    pub output: Option<String>,
}

/// One standing query as `ebql.ls` lists it (JSON).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Listed {
    /// Its name.
    pub name: String,
    /// Its query.
    pub sql: String,
    /// Its sink's format and output.
    pub format: String,
    /// Where it writes.
    pub output: Option<String>,
    /// Still running (false: it ended on its own: LIMIT, or an error).
    pub running: bool,
    /// Its counters so far ([`QueryStats::to_json`]'s fields).
    pub stats: serde_json::Value,
    /// Queries reading its kernel synopsis, itself included: more than 1
    /// when it shares one ([`crate::ExecutorOptions::shared_synopses`]).
    #[serde(default)]
    pub synopsis_readers: usize,
}

struct Entry {
    request: AddRequest,
    stop: Arc<AtomicBool>,
    stats: Box<dyn Fn() -> QueryStats + Send + Sync>,
    readers: Box<dyn Fn() -> usize + Send + Sync>,
    thread: JoinHandle<Result<QueryStats, DriveError>>,
    /// Run once the query stopped: takes its metrics off the Prometheus endpoint.
    retire: Option<Box<dyn FnOnce() + Send>>,
}

/// The service's standing queries, by name.
pub struct Standing {
    executor: ExecutorOptions,
    stopping: Arc<AtomicBool>,
    queries: Mutex<BTreeMap<String, Entry>>,
    prometheus: Option<Arc<PrometheusEndpoint>>,
}

fn stats_json(s: &QueryStats) -> serde_json::Value {
    serde_json::from_str(&s.to_json()).unwrap_or(serde_json::Value::Null)
}

impl Standing {
    /// No standing queries yet; each one added stops once `stopping` is set.
    pub fn new(executor: ExecutorOptions, stopping: Arc<AtomicBool>) -> Standing {
        Standing {
            executor,
            stopping,
            queries: Mutex::new(BTreeMap::new()),
            prometheus: None,
        }
    }

    /// Standing queries of format `prometheus` are exposed at `endpoint`
    /// (`None`: that format is refused).
    pub fn with_prometheus(mut self, endpoint: Option<Arc<PrometheusEndpoint>>) -> Standing {
        self.prometheus = endpoint;
        self
    }

    /// Compiles, attaches and starts `req`'s query into its sink. Blocks
    /// while the query compiles and attaches.
    ///
    /// Errors: the name is taken ([`Error::Unavailable`]); the format is
    /// unknown or cannot take the query's results; the query's own errors
    /// (a bad query, a kernel refusal), before anything attaches.
    pub fn add(&self, req: AddRequest) -> Result<Vec<u32>, Error> {
        if req.name.is_empty() || self.lock().contains_key(&req.name) {
            return Err(Error::Unavailable(format!(
                "a standing query needs a name of its own: `{}` is taken or empty",
                req.name
            )));
        }
        if req.format == PROMETHEUS {
            return self.add_prometheus(req);
        }
        let format = format_named(&req.format)?;
        let output = req.output.as_ref().map(PathBuf::from);
        let mut ex = Executor::with_options(self.executor.clone());
        let compiled = ex.compile(&req.sql)?;
        let schema = crate::executor::result_schema(&compiled);
        let refused = |r: crate::sink::FormatRefused| {
            Error::Unavailable(format!("{}; {}", r.problem, r.hint))
        };
        crate::sink::check_format(format, &schema).map_err(refused)?;
        crate::sink::check_output(format, output.as_deref(), false).map_err(refused)?;
        if output.is_none() && format != Format::Null {
            return Err(Error::Unavailable(format!(
                "a standing query writes to a file or a Kafka topic: give `output` for format {}",
                format.name()
            )));
        }
        let sink = crate::sink::for_format(format, output, &SinkOptions::default())
            .map_err(Error::Sink)?;
        self.start(req, ex, compiled, sink, None)
    }

    /// [`Standing::add`] of format `prometheus`: the query's metrics on the
    /// service's endpoint, prefixed with its name, until it is removed.
    fn add_prometheus(&self, req: AddRequest) -> Result<Vec<u32>, Error> {
        let endpoint = self
            .prometheus
            .as_ref()
            .ok_or_else(|| Error::Unavailable("this service has no Prometheus endpoint".into()))?;
        if req.output.is_some() {
            return Err(Error::Unavailable(
                "a query of format prometheus is exposed on the service's endpoint: give no output"
                    .into(),
            ));
        }
        let plan = MetricsPlan::new(&req.sql, Some(&req.name))?;
        let mut ex = Executor::with_options(self.executor.clone());
        let compiled = ex.compile(&plan.sql)?;
        let server = endpoint.server()?;
        let name = req.name.clone();
        let sink = server.sink(plan, None).map_err(Error::Sink)?;
        let retire = Box::new(move || server.retire(&name));
        self.start(req, ex, compiled, Box::new(sink), Some(retire))
    }

    /// Starts `compiled` (of `req`) into `sink` on its own thread and lists it.
    fn start(
        &self,
        req: AddRequest,
        mut ex: Executor,
        compiled: ebql_compiler::CompiledQuery,
        sink: Box<dyn Sink>,
        retire: Option<Box<dyn FnOnce() + Send>>,
    ) -> Result<Vec<u32>, Error> {
        let q = match ex.start(compiled) {
            Ok(q) => q,
            Err(e) => {
                if let Some(retire) = retire {
                    retire();
                }
                return Err(e);
            }
        };
        let programs = q.prog_ids().to_vec();
        self.adopt(req, q, sink, retire, false)?;
        Ok(programs)
    }

    /// Lists `q`, started already (`ebql serve`'s command-line queries), as
    /// `req.name`: it runs into `sink` on its own thread until removed or
    /// the service stops; `retire` runs once it stopped. `critical`: its
    /// failure stops the whole service (the stop flag), as a command-line
    /// query's does.
    ///
    /// Errors: the name is taken ([`Error::Unavailable`]; the query is stopped).
    pub fn adopt(
        &self,
        req: AddRequest,
        q: RunningQuery,
        mut sink: Box<dyn Sink>,
        retire: Option<Box<dyn FnOnce() + Send>>,
        critical: bool,
    ) -> Result<(), Error> {
        let info = QueryInfo::of(&req.sql, &q);
        let stats = Box::new(q.stats_source());
        let readers = q.synopsis_readers_source();
        let stop = Arc::new(AtomicBool::new(false));
        let (own, all) = (stop.clone(), self.stopping.clone());
        let thread = std::thread::Builder::new()
            .name(format!("ebql-standing-{}", req.name))
            .spawn(move || {
                let ran = crate::sink::drive(q, &info, sink.as_mut(), || {
                    own.load(Ordering::Relaxed) || all.load(Ordering::Relaxed)
                });
                if critical && ran.is_err() {
                    all.store(true, Ordering::Relaxed);
                }
                ran
            })
            .map_err(|e| Error::Internal(format!("starting a standing query's thread: {e}")))?;
        let mut queries = self.lock();
        if queries.contains_key(&req.name) {
            // Added meanwhile under the same name: this one stops.
            stop.store(true, Ordering::Relaxed);
            let _ = thread.join();
            if let Some(retire) = retire {
                retire();
            }
            return Err(Error::Unavailable(format!("`{}` is taken", req.name)));
        }
        queries.insert(
            req.name.clone(),
            Entry {
                request: req,
                stop,
                stats,
                readers,
                thread,
                retire,
            },
        );
        Ok(())
    }

    /// Stops the query named `name` (its last window is written, its sink
    /// finished, its programs detached) and returns its final counters.
    ///
    /// Errors: no such query ([`Error::Unavailable`]); the query or its sink
    /// failed while it ran.
    pub fn remove(&self, name: &str) -> Result<QueryStats, Error> {
        match self.take(name) {
            None => Err(Error::Unavailable(format!(
                "no standing query named `{name}`"
            ))),
            Some(ended) => ended.map_err(|e| e.error),
        }
    }

    /// Stops and unlists `name`; how its run ended (`None`: no such query).
    fn take(&self, name: &str) -> Option<Result<QueryStats, DriveError>> {
        let entry = self.lock().remove(name)?;
        entry.stop.store(true, Ordering::Relaxed);
        let ended = entry.thread.join();
        if let Some(retire) = entry.retire {
            retire();
        }
        Some(ended.unwrap_or_else(|_| {
            Err(DriveError {
                stats: None,
                error: Error::Internal(format!("standing query `{name}` panicked")),
            })
        }))
    }

    /// Every standing query, by name.
    pub fn list(&self) -> Vec<Listed> {
        self.lock()
            .values()
            .map(|e| Listed {
                name: e.request.name.clone(),
                sql: e.request.sql.clone(),
                format: e.request.format.clone(),
                output: e.request.output.clone(),
                running: !e.thread.is_finished(),
                stats: stats_json(&(e.stats)()),
                synopsis_readers: (e.readers)(),
            })
            .collect()
    }

    /// Stops every standing query (the service is stopping), waits for
    /// them, and says how each run ended, by name.
    pub fn stop_all(&self) -> Vec<(String, Result<QueryStats, DriveError>)> {
        let names: Vec<String> = self.lock().keys().cloned().collect();
        names
            .into_iter()
            .filter_map(|name| self.take(&name).map(|ended| (name, ended)))
            .collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Entry>> {
        self.queries.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The format of a standing query exposed on the service's Prometheus endpoint.
const PROMETHEUS: &str = "prometheus";

/// The [`Format`] `--format` calls `name`; the terminal's formats (table,
/// live, folded) are refused: a standing query writes where no one watches.
fn format_named(name: &str) -> Result<Format, Error> {
    let all = [
        Format::Json,
        Format::Csv,
        Format::Parquet,
        Format::Arrow,
        Format::Null,
    ];
    all.into_iter().find(|f| f.name() == name).ok_or_else(|| {
        Error::Unavailable(format!(
            "format `{name}` for a standing query: use one of json, csv, parquet, arrow, null, prometheus"
        ))
    })
}
