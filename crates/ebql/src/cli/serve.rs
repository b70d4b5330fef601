//! `ebql serve`: one long-running service. Standing queries' latest
//! windows served as Prometheus metrics; with `--flight-sql ADDR`, clients'
//! queries over Arrow Flight SQL ([`ebql::service`]), streamed back as
//! their windows close.

use super::args::EngineArgs;
use super::common::{interrupt_flag, io_err, read_token};
use super::query::{note_clock_sync, note_placement};
use ebql::{Error, Executor};
use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// `ebql serve`'s arguments.
#[derive(clap::Args)]
pub(super) struct ServeArgs {
    /// Address of the Prometheus endpoint (`/metrics`). Loopback unless
    /// --allow-non-loopback says otherwise: the metrics show what the host does.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:9464")]
    prometheus: std::net::SocketAddr,
    /// Serve Arrow Flight SQL clients on ADDR (e.g. 127.0.0.1:50051; port 0
    /// picks a free one, printed on stderr): each client query runs until
    /// its LIMIT, the `x-ebql-duration` header it sends, or its disconnect.
    #[arg(long, value_name = "ADDR")]
    flight_sql: Option<std::net::SocketAddr>,
    /// A file holding the token Flight SQL clients must send
    /// (`authorization: Bearer TOKEN`); required off loopback.
    #[arg(long, value_name = "FILE")]
    token_file: Option<PathBuf>,
    /// Allow --prometheus and --flight-sql to listen on addresses other
    /// hosts can reach.
    #[arg(long)]
    allow_non_loopback: bool,
    /// Metric prefix of each query, in order (default: `ebql_<event>`).
    #[arg(long = "name", value_name = "NAME")]
    names: Vec<String>,
    /// Read queries from this file: statements end with `;` at the end of a
    /// line or with a blank line; `--` comment lines are kept with their query.
    #[arg(long)]
    file: Option<PathBuf>,
    /// Stop after this long: 5 or 5s, 500ms, 2m; a bare number is seconds
    /// (default: until Ctrl-C).
    #[arg(short, long, value_name = "DURATION", value_parser = super::input::parse_duration)]
    duration: Option<Duration>,
    /// Attach each query's programs alone, as `ebql query` does, instead of
    /// one combined program per hook shared by every query on it (tracefs,
    /// raw and BTF tracepoints), and one group table for queries whose
    /// kernel part is the same (same events, filter, keys, aggregates and
    /// time window). Implied by --bpf-stats, which times each query's own
    /// program.
    #[arg(long)]
    separate_probes: bool,
    #[command(flatten)]
    engine: EngineArgs,
    /// The queries, each a windowed aggregate.
    #[arg(allow_hyphen_values = true)]
    sql: Vec<String>,
}

/// What `q` shares: `, query N in its hook's shared program` when it
/// joined a hook, `, reading the synopsis of N queries` when it reads another's.
fn shared_note(q: &ebql::RunningQuery) -> String {
    let hook = match q.hook_shares().iter().flatten().map(|s| s.members).max() {
        Some(n) => format!(", query {n} in its hook's shared program"),
        None => String::new(),
    };
    match q.synopsis_readers() {
        1 => hook,
        n => format!("{hook}, reading the synopsis of {n} queries"),
    }
}

/// Statements of a queries file: each ends with `;` at a line's end or a blank line.
fn split_statements(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let has_sql = |s: &str| {
        s.lines()
            .any(|l| !l.trim().is_empty() && !l.trim_start().starts_with("--"))
    };
    for line in text.lines() {
        if line.trim().is_empty() {
            if has_sql(&cur) {
                out.push(std::mem::take(&mut cur));
            }
            continue;
        }
        cur.push_str(line);
        cur.push('\n');
        if line.trim_end().ends_with(';') {
            out.push(std::mem::take(&mut cur));
        }
    }
    if has_sql(&cur) {
        out.push(cur);
    }
    out.into_iter()
        .map(|s| s.trim().trim_end_matches(';').trim().to_string())
        .collect()
}

/// `ebql serve --prometheus ADDR QUERY…`: one thread per query drives it into
/// a sink of one shared Prometheus server. The port is bound and every query
/// checked before anything is attached.
pub(super) fn serve(a: ServeArgs) -> Result<(), Error> {
    use ebql::service::standing::{AddRequest, Standing};
    use ebql::service::PrometheusEndpoint;
    use ebql::sink::prometheus::MetricsPlan;
    let usage = |m: String| Error::Sink(ebql::sink::SinkError::new("starting serve", m));
    let mut queries = a.sql.clone();
    if let Some(f) = &a.file {
        let text = std::fs::read_to_string(f)
            .map_err(|e| io_err(format!("reading {}", f.display()), e))?;
        queries.extend(split_statements(&text));
    }
    if queries.is_empty() && a.flight_sql.is_none() {
        return Err(usage(
            "no query: give them as arguments or with --file, or serve clients with --flight-sql ADDR"
                .into(),
        ));
    }
    if a.names.len() > queries.len() {
        return Err(usage(format!(
            "{} --name for {} queries",
            a.names.len(),
            queries.len()
        )));
    }
    if !queries.is_empty() || a.flight_sql.is_some() {
        reachable(
            &a,
            "--prometheus",
            a.prometheus,
            "the metrics show what this host does",
        )?;
    }
    let token = read_token(a.token_file.as_deref())?;
    if let Some(addr) = a.flight_sql {
        reachable(&a, "--flight-sql", addr, "clients run queries on this host")?;
        if !addr.ip().is_loopback() && token.is_none() {
            return Err(usage(format!(
                "--flight-sql {addr} is reachable from other hosts: give a token with --token-file"
            )));
        }
    }
    let several = queries.len() > 1;
    let plans = queries
        .iter()
        .enumerate()
        .map(|(i, q)| {
            MetricsPlan::new(q, a.names.get(i).map(String::as_str))
                .map_err(|e| named(e, i, several))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let mut opts = a.engine.options();
    // bpf_stats times programs: a query's own, only if it runs alone.
    if !a.separate_probes && !opts.bpf_stats {
        opts.shared_hooks = Some(ebql_runtime::SharedHooks::new());
        opts.shared_synopses = Some(ebql::SharedSynopses::new());
    }
    // Compile every query before attaching any: a bad one attaches nothing.
    let mut compiled = Vec::new();
    for (i, plan) in plans.into_iter().enumerate() {
        let mut ex = Executor::with_options(opts.clone());
        let c = ex.compile(&plan.sql).map_err(|e| named(e, i, several))?;
        compiled.push((i, plan, ex, c));
    }
    let flight = match a.flight_sql {
        Some(addr) => Some(
            std::net::TcpListener::bind(addr)
                .map_err(|e| io_err(format!("binding --flight-sql {addr}"), e))?,
        ),
        None => None,
    };
    // Bound now for the command line's queries, else when a client first
    // adds a standing query of format prometheus.
    let endpoint = Arc::new(PrometheusEndpoint::new(a.prometheus));
    let server = match compiled.is_empty() {
        true => None,
        false => Some(endpoint.server()?),
    };
    let interrupted = interrupt_flag()?;
    // One flag stops everything: Ctrl-C or SIGTERM, --duration, a failed query.
    let stop = Arc::new(AtomicBool::new(false));
    // The command line's queries are standing queries like those clients
    // add: `ebql ctl ls` lists them and `ebql ctl rm` removes them.
    let standing =
        Arc::new(Standing::new(opts.clone(), stop.clone()).with_prometheus(Some(endpoint.clone())));
    // Attach every query before serving any: an error detaches those started.
    let mut clock_noted = false;
    for (i, plan, mut ex, c) in compiled {
        let started = ex.start(c).and_then(|q| {
            let server = server
                .clone()
                .expect("bound for the command line's queries");
            let sink = server
                .sink(plan.clone(), Some(Box::new(q.stats_source())))
                .map_err(Error::Sink)?;
            let name = sink.name();
            let retire = {
                let name = name.clone();
                Box::new(move || server.retire(&name))
            };
            note!(
                "ebql: attached {name} (program id {}{})",
                q.prog_id(),
                shared_note(&q)
            );
            note_placement(&q);
            // Once: the clock is the host's.
            note_clock_sync(&q, opts.align_windows && !clock_noted);
            clock_noted = true;
            let req = AddRequest {
                name,
                sql: plan.sql.clone(),
                format: "prometheus".into(),
                output: None,
            };
            standing.adopt(req, q, Box::new(sink), Some(retire), true)
        });
        if let Err(e) = started {
            standing.stop_all();
            return Err(named(e, i, several));
        }
    }
    if let Some(server) = &server {
        note!("ebql: serving http://{}/metrics", server.addr());
    }
    let clock = {
        let (stop, begun, run_for) = (stop.clone(), Instant::now(), a.duration);
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                if interrupted.load(Ordering::Relaxed)
                    || run_for.is_some_and(|d| begun.elapsed() >= d)
                {
                    stop.store(true, Ordering::Relaxed);
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        })
    };
    let flight = flight
        .map(|listener| -> Result<_, Error> {
            let addr = listener
                .local_addr()
                .map_err(|e| io_err("reading the Flight SQL address".into(), e))?;
            note!("ebql: serving Flight SQL on grpc://{addr}");
            let opts = ebql::service::ServiceOptions {
                executor: opts.clone(),
                token,
                prometheus: Some(endpoint.clone()),
                ..Default::default()
            };
            let (stop, standing) = (stop.clone(), standing.clone());
            Ok(std::thread::spawn(move || {
                let r =
                    ebql::service::flight::serve_standing(listener, opts, standing, stop.clone());
                if r.is_err() {
                    stop.store(true, Ordering::Relaxed);
                }
                r
            }))
        })
        .transpose()?;
    let _ = clock.join();
    let mut first_err = match flight.map(|t| t.join()) {
        None | Some(Ok(Ok(()))) => None,
        Some(Ok(Err(e))) => Some(e),
        Some(Err(_)) => Some(Error::Internal("the Flight SQL thread panicked".into())),
    };
    for (_, ended) in standing.stop_all() {
        match ended {
            Ok(stats) => note!("ebql: stats {}", stats.to_json()),
            Err(e) => {
                if let Some(stats) = e.stats {
                    note!("ebql: stats {}", stats.to_json());
                }
                first_err = first_err.or(Some(e.error))
            }
        }
    }
    drop(server);
    first_err.map_or(Ok(()), Err)
}

/// Refuses `addr` (of `flag`) when other hosts can reach it, unless
/// --allow-non-loopback says so; then warns, saying `why` it matters.
fn reachable(
    a: &ServeArgs,
    flag: &str,
    addr: std::net::SocketAddr,
    why: &str,
) -> Result<(), Error> {
    if addr.ip().is_loopback() {
        return Ok(());
    }
    if !a.allow_non_loopback {
        return Err(Error::Sink(ebql::sink::SinkError::new(
            "starting serve",
            format!(
                "{flag} {addr} is reachable from other hosts, and {why}; add --allow-non-loopback to mean it"
            ),
        )));
    }
    note!("ebql: warning: {flag} on {addr} is reachable from other hosts");
    Ok(())
}

/// `e`, from the `i`-th (0-based) of the queries served, saying which:
/// a bad query's position reads `query 2:1:44-47` when there are several;
/// other errors are preceded by a note naming the query.
fn named(e: Error, i: usize, several: bool) -> Error {
    if !several {
        return e;
    }
    match e {
        Error::Query { query, diagnostic } => Error::Query {
            query,
            diagnostic: diagnostic.in_source(format!("query {}", i + 1)),
        },
        other => {
            note!("ebql: query {} failed:", i + 1);
            other
        }
    }
}
