//! Re-issuing a capture's statements: one connection (and thread) per
//! captured backend, fed by one dispatcher that walks the statements in
//! capture start order.
//!
//! Order kept:
//! * **within a backend**: its statements run one after the other on one
//!   connection, in capture order, so session state (transactions, `SET`,
//!   temporary tables, prepared statements) is the capture's;
//! * **across backends**: a statement is sent only after every statement
//!   that had *finished* in the capture before it *started* has finished in
//!   the replay. What one session committed before another read it is
//!   therefore committed before the read in the replay too, while
//!   statements that overlapped in the capture may overlap again (waiting
//!   for them could deadlock on the locks they held). A statement's end is
//!   its start plus its latency; without one (no latency column, or a
//!   statement that never finished) the start of its backend's next
//!   statement bounds it (a backend runs one statement at a time), and a
//!   backend's last statement without a latency orders nothing after it;
//! * **pace** (`speed > 0`): a statement is also not sent before
//!   `(start - first start) / speed` after the replay began; `speed = 0`
//!   sends as soon as the order allows.
//!
//! If a wait for the order lasts longer than [`ReplayOptions::order_timeout`]
//! (a statement blocked in the replay on something it did not block on in
//! the capture), the dispatcher goes on and counts the statement in
//! [`Outcome::order_gave_up`] rather than hang.

use std::collections::HashMap;
use std::str::FromStr;
use std::sync::mpsc::{channel, Sender};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use super::capture::Capture;
use super::ReplayError;

/// How to replay.
#[derive(Debug, Clone)]
pub struct ReplayOptions {
    /// Where: a libpq-style connection string, `postgresql://user@host:port/db`
    /// (a Unix socket directory percent-encoded as the host, or `?host=/dir`)
    /// or `host=/dir port=5432 user=postgres dbname=x`. No TLS.
    pub dsn: String,
    /// 0: as fast as the order allows; 1.0: the capture's pace; 2.0: twice as fast.
    pub speed: f64,
    /// Longest wait for the cross-backend order before going on anyway.
    pub order_timeout: Duration,
}

/// What became of one statement, by its index in [`Capture::statements`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Outcome {
    /// Why it was not sent (`None`: it was).
    pub skipped: Option<String>,
    /// Its latency in the replay, ns (from sending it to its last result).
    pub latency_ns: Option<u64>,
    /// The server's error (`ERROR 22012: division by zero`), or why it could not be sent.
    pub error: Option<String>,
    /// With `speed > 0`: how late it was sent against the capture's pace, ns.
    pub late_ns: u64,
    /// The wait for a statement of another backend that finished before it
    /// in the capture timed out, and it was sent anyway.
    pub order_gave_up: bool,
}

/// One statement for a backend's connection.
struct Job {
    index: usize,
    text: String,
    due: Instant,
    order_gave_up: bool,
}

/// Which statements have finished in the replay, and how many of the
/// capture's ends (in end order) are all finished.
struct Finished {
    done: Vec<bool>,
    /// Statements with a known end, by capture end time.
    by_end: Vec<usize>,
    /// `by_end[..prefix]` are all done.
    prefix: usize,
}

impl Finished {
    fn mark(&mut self, index: usize) {
        self.done[index] = true;
        while self.prefix < self.by_end.len() && self.done[self.by_end[self.prefix]] {
            self.prefix += 1;
        }
    }
}

/// Replays `capture` and returns one outcome per statement, in capture order.
///
/// Errors: a DSN that does not parse, a server that refuses the first
/// connection (checked before anything is sent), a negative or non-finite speed.
/// Statement errors and connections refused later are outcomes, not errors.
pub fn replay(capture: &Capture, opts: &ReplayOptions) -> Result<Vec<Outcome>, ReplayError> {
    if !(opts.speed.is_finite() && opts.speed >= 0.0) {
        return Err(ReplayError::Usage(format!("--speed {}: give 0 (as fast as possible) or a positive factor (1.0: the capture's pace)", opts.speed)));
    }
    let config =
        postgres::Config::from_str(&opts.dsn).map_err(|e| ReplayError::Dsn(e.to_string()))?;
    drop(
        config
            .connect(postgres::NoTls)
            .map_err(|e| ReplayError::Connect(e.to_string()))?,
    );

    let st = &capture.statements;
    let known_ends = ends_known(capture);
    let mut by_end: Vec<usize> = (0..st.len()).filter(|&i| known_ends[i].is_some()).collect();
    by_end.sort_by_key(|&i| known_ends[i]);
    let ends: Vec<u64> = by_end
        .iter()
        .map(|&i| known_ends[i].expect("filtered"))
        .collect();
    let finished = Arc::new((
        Mutex::new(Finished {
            done: vec![false; st.len()],
            by_end,
            prefix: 0,
        }),
        Condvar::new(),
    ));
    let mut last_of: HashMap<u64, usize> = HashMap::new();
    for (i, s) in st.iter().enumerate() {
        last_of.insert(s.backend, i);
    }

    let mut outcomes = vec![Outcome::default(); st.len()];
    let mut queues: HashMap<u64, Sender<Job>> = HashMap::new();
    let mut workers = Vec::new();
    let began = Instant::now();
    let first = st.first().map_or(0, |s| s.start_ns);
    for (i, s) in st.iter().enumerate() {
        if s.truncated {
            outcomes[i].skipped = Some("its text was cut at the capture's bound".into());
            let (m, cv) = &*finished;
            m.lock().expect("no worker panics holding it").mark(i);
            cv.notify_all();
            continue;
        }
        // Every statement that ended (in the capture) before this one started must have finished.
        let need = ends.partition_point(|&e| e < s.start_ns);
        let order_gave_up = {
            let (m, cv) = &*finished;
            let guard = m.lock().expect("no worker panics holding it");
            let (_guard, timeout) = cv
                .wait_timeout_while(guard, opts.order_timeout, |f| f.prefix < need)
                .expect("no worker panics holding it");
            timeout.timed_out()
        };
        // A backend's connection opens while its first statement waits for its time.
        let queue = queues.entry(s.backend).or_insert_with(|| {
            let (tx, rx) = channel::<Job>();
            let (config, finished) = (config.clone(), finished.clone());
            workers.push(std::thread::spawn(move || {
                backend_worker(config, rx.into_iter(), &finished)
            }));
            tx
        });
        let due = if opts.speed > 0.0 {
            began + Duration::from_nanos(((s.start_ns - first) as f64 / opts.speed) as u64)
        } else {
            Instant::now()
        };
        if let Some(wait) = due.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
        // The queue outlives a failed worker only if the thread panicked; joining below reports it.
        let _ = queue.send(Job {
            index: i,
            text: s.text.clone(),
            due,
            order_gave_up,
        });
        if last_of.get(&s.backend) == Some(&i) {
            // The backend's last statement: its connection closes after it.
            queues.remove(&s.backend);
        }
    }
    drop(queues);
    for w in workers {
        let done = w
            .join()
            .map_err(|_| ReplayError::Internal("a replay connection's thread panicked".into()))?;
        for (i, o) in done {
            outcomes[i] = o;
        }
    }
    Ok(outcomes)
}

/// When each statement had surely finished in the capture: its start plus
/// its latency, else the start of its backend's next statement, else unknown.
pub fn ends_known(capture: &Capture) -> Vec<Option<u64>> {
    let st = &capture.statements;
    let mut next_start: HashMap<u64, u64> = HashMap::new();
    let mut out = vec![None; st.len()];
    for (i, s) in st.iter().enumerate().rev() {
        out[i] = s.end_ns().or_else(|| next_start.get(&s.backend).copied());
        next_start.insert(s.backend, s.start_ns);
    }
    out
}

/// Runs one backend's statements in order on one connection, opened when
/// the thread starts; returns their outcomes.
fn backend_worker(
    config: postgres::Config,
    jobs: impl Iterator<Item = Job>,
    finished: &(Mutex<Finished>, Condvar),
) -> Vec<(usize, Outcome)> {
    let mut client = config
        .connect(postgres::NoTls)
        .map_err(|e| format!("could not connect: {e}"));
    let mut out = Vec::new();
    for job in jobs {
        let c = &mut client;
        let sent = Instant::now();
        let mut o = Outcome {
            late_ns: sent.saturating_duration_since(job.due).as_nanos() as u64,
            order_gave_up: job.order_gave_up,
            ..Outcome::default()
        };
        match c {
            Ok(c) => {
                let r = c.simple_query(&job.text);
                o.latency_ns = Some(sent.elapsed().as_nanos() as u64);
                o.error = r.err().map(|e| describe_error(&e));
            }
            Err(e) => o.error = Some(e.clone()),
        }
        out.push((job.index, o));
        let (m, cv) = finished;
        m.lock()
            .expect("no thread panics holding it")
            .mark(job.index);
        cv.notify_all();
    }
    out
}

/// `ERROR 22012: division by zero` for a server error, else the client's message.
fn describe_error(e: &postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => format!("{} {}: {}", db.severity(), db.code().code(), db.message()),
        None => e.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replay::capture::{ResolvedColumns, Statement};

    fn capture(rows: &[(u64, u64, Option<u64>)]) -> Capture {
        let statements = rows
            .iter()
            .map(|&(backend, start_ns, latency_ns)| Statement {
                backend,
                start_ns,
                text: String::new(),
                latency_ns,
                failed: None,
                truncated: false,
            })
            .collect();
        let columns = ResolvedColumns {
            text: "query".into(),
            time: "time".into(),
            backend: "pid".into(),
            latency: None,
            failed: None,
            truncated: None,
        };
        Capture {
            statements,
            files: Vec::new(),
            columns,
        }
    }

    #[test]
    fn ends_from_latency_else_the_backends_next_start() {
        // Backend 1 at 10 (latency 5) and 40 (no latency, last of its backend); backend 2 at 20 and 30, no latencies.
        let c = capture(&[
            (1, 10, Some(5)),
            (2, 20, None),
            (2, 30, None),
            (1, 40, None),
        ]);
        assert_eq!(ends_known(&c), [Some(15), Some(30), None, None]);
    }
}
