//! Kernel tier: `query` cases run on real kernel events. One scripted
//! workload process per file executes the `run:` commands; every query
//! filters on its pid (`$pid`), so other BPF users and processes don't matter.

use crate::format::{Kind, Record, RowOrder};
use crate::render::{self, Vars};
use ebql::arrow::record_batch::RecordBatch;
use ebql::executor::{META_WINDOW_END, META_WINDOW_START};
use ebql::{monotonic_ns, Executor, QueryStats};
use ebql_compiler::prepass::WindowSpec;
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::mpsc::Receiver;
use std::time::Duration;

/// Descriptor of the workload's file `$fd<n>`: fixed, so results (and filled
/// expected blocks) are the same on every run.
fn fd_number(n: usize) -> u64 {
    1000 + n as u64
}

/// `ebql workload script`, shared by the cases of one file.
pub struct Workload {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    pid: u32,
    /// `$fd<n>` index → descriptor, for the files created so far.
    fds: BTreeMap<usize, u64>,
}

impl Workload {
    pub fn start() -> Result<Workload, String> {
        let mut child = Command::new(env!("CARGO_BIN_EXE_ebql"))
            .args(["workload", "script"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .map_err(|e| format!("starting the workload: {e}"))?;
        let stdin = child.stdin.take().expect("piped");
        let mut stdout = BufReader::new(child.stdout.take().expect("piped"));
        let mut line = String::new();
        stdout.read_line(&mut line).map_err(|e| e.to_string())?;
        let pid = line
            .trim()
            .strip_prefix("ready ")
            .and_then(|p| p.parse().ok())
            .ok_or(format!("workload said `{line}`"))?;
        Ok(Workload {
            child,
            stdin,
            stdout,
            pid,
            fds: BTreeMap::new(),
        })
    }

    /// One script command; Ok(answer) unless the workload answered `err …`.
    fn command(&mut self, cmd: &str) -> Result<String, String> {
        writeln!(self.stdin, "{cmd}")
            .and_then(|_| self.stdin.flush())
            .map_err(|e| format!("workload gone: {e}"))?;
        let mut answer = String::new();
        self.stdout
            .read_line(&mut answer)
            .map_err(|e| format!("workload gone: {e}"))?;
        let answer = answer.trim().to_string();
        if answer.is_empty() || answer.starts_with("err") {
            return Err(format!("workload command `{cmd}` answered `{answer}`"));
        }
        Ok(answer)
    }

    /// Creates the files `text` refers to as `$fd<n>` that don't exist yet.
    fn ensure_files(&mut self, text: &str) -> Result<(), String> {
        for n in render::fd_refs(text) {
            if !self.fds.contains_key(&n) {
                let fd = fd_number(n);
                self.command(&format!("tmpfile 65536 {fd}"))?;
                self.fds.insert(n, fd);
            }
        }
        Ok(())
    }

    /// `$pid` and the `$fd<n>` created so far.
    pub fn vars(&self) -> Vars {
        let mut v = vec![("pid".to_string(), self.pid.to_string())];
        v.extend(
            self.fds
                .iter()
                .map(|(n, fd)| (format!("fd{n}"), fd.to_string())),
        );
        Vars(v)
    }
}

impl Drop for Workload {
    fn drop(&mut self) {
        let _ = writeln!(self.stdin, "exit");
        let _ = self.stdin.flush();
        let _ = self.child.wait();
    }
}

/// What running a case produced.
pub struct Run {
    /// Result rows in canonical text (concrete values, before compaction).
    pub lines: Vec<String>,
    /// Broken expectations beyond the rows (stats, window invariants).
    pub problems: Vec<String>,
    /// The query as run (variables substituted).
    pub sql: String,
    /// `lines` is eBQL's error message, not rows (compared in order, never sorted).
    pub is_error: bool,
}

/// Runs a kernel-tier case; time-windowed cases whose workload straddled a
/// window boundary (a stalled machine) are rerun, up to three times. An error
/// of eBQL itself (bad query, user-space execution failure) is the case's
/// output, as rendered for the terminal; `Err` is a failure of the harness.
pub fn run(w: &mut Workload, rec: &Record) -> Result<Run, String> {
    if rec.kind == Kind::Check {
        return run_check(w, rec);
    }
    w.ensure_files(&rec.sql)?;
    for c in &rec.run {
        w.ensure_files(c)?;
    }
    let mut last = String::new();
    for _attempt in 0..3 {
        match run_once(w, rec)? {
            Attempt::Done(run) => return Ok(run),
            Attempt::Straddled(why) => last = why,
        }
    }
    Err(format!(
        "the workload straddled a window boundary three times (machine too busy?): {last}"
    ))
}

/// A `check` case: the workload runs under the differential oracle; the case
/// fails with the per-window diff unless every window agrees. `next` waits
/// one step (both sides use the same windows, so no boundary sync is needed).
fn run_check(w: &mut Workload, rec: &Record) -> Result<Run, String> {
    w.ensure_files(&rec.sql)?;
    for c in &rec.run {
        w.ensure_files(c)?;
    }
    let vars = w.vars();
    let sql = vars.substitute(&rec.sql);
    let mut ex = Executor::with_options(options(rec)?);
    let c = match ex.check(&sql, ebql::check::CheckOptions::default()) {
        Ok(c) => c,
        Err(e) => {
            return Ok(Run {
                lines: e.render().lines().map(str::to_string).collect(),
                problems: vec![format!("the query did not start: {}", e.render())],
                sql,
                is_error: true,
            })
        }
    };
    let window = match c.window() {
        Some(WindowSpec::Time { step_ns, .. }) => Duration::from_nanos(step_ns),
        _ => Duration::from_millis(100),
    };
    for cmd in &rec.run {
        if cmd == "next" {
            std::thread::sleep(window);
        } else {
            w.command(&vars.substitute(cmd))?;
        }
    }
    let report = c.stop().map_err(|e| e.render())?;
    let mut problems = Vec::new();
    if !report.agrees() || report.windows() == 0 {
        problems.push(report.to_string());
    }
    if let Some(why) = report.inconclusive() {
        problems.push(why);
    }
    Ok(Run {
        lines: vec![report.to_string()],
        problems,
        sql,
        is_error: false,
    })
}

/// The engine options of a case: its `plan:` choices (`hook=tracefs|raw|raw_tp`,
/// `optimize=total|traced|host`, `group_map=auto|hash|array`,
/// `aggregate=auto|kernel|user`) on the defaults.
fn options(rec: &Record) -> Result<ebql::ExecutorOptions, String> {
    use ebql_compiler::choose::{AggregateChoice, GroupMapChoice, HookChoice, Optimize};
    let mut opts = ebql::ExecutorOptions::default();
    let c = &mut opts.codegen.choices;
    for (k, v) in &rec.plan {
        match (k.as_str(), v.as_str()) {
            ("hook", "auto") => c.hook = HookChoice::Auto,
            ("hook", "tracefs") => c.hook = HookChoice::Tracefs,
            ("hook", "raw") => c.hook = HookChoice::Raw,
            ("hook", "raw_tp") => c.hook = HookChoice::RawTp,
            ("optimize", "total") => c.optimize = Optimize::Total,
            ("optimize", "traced") => c.optimize = Optimize::Traced,
            ("optimize", "host") => c.optimize = Optimize::Host,
            ("group_map", "auto") => c.group_map = GroupMapChoice::Auto,
            ("group_map", "hash") => c.group_map = GroupMapChoice::Hash,
            ("group_map", "array") => c.group_map = GroupMapChoice::Array,
            ("aggregate", "auto") => c.aggregate = AggregateChoice::Auto,
            ("aggregate", "kernel") => c.aggregate = AggregateChoice::Kernel,
            ("aggregate", "user") => c.aggregate = AggregateChoice::User,
            _ => {
                return Err(format!(
                    "{}:{}: unknown plan choice `{k}={v}`",
                    rec.name, rec.line
                ))
            }
        }
    }
    Ok(opts)
}

enum Attempt {
    Done(Run),
    Straddled(String),
}

fn run_once(w: &mut Workload, rec: &Record) -> Result<Attempt, String> {
    let vars = w.vars();
    let sql = vars.substitute(&rec.sql);
    let order = match rec.kind {
        Kind::Query { order } => order,
        _ => RowOrder::Sorted,
    };
    // Workload segments, split at `next` (a window boundary).
    let mut segments: Vec<Vec<String>> = vec![Vec::new()];
    for c in &rec.run {
        if c == "next" {
            segments.push(Vec::new());
        } else {
            segments
                .last_mut()
                .expect("one segment at least")
                .push(vars.substitute(c));
        }
    }
    let engine_error = |e: ebql::Error| {
        Attempt::Done(Run {
            lines: e.render().lines().map(str::to_string).collect(),
            problems: Vec::new(),
            sql: sql.clone(),
            is_error: true,
        })
    };
    let mut ex = Executor::with_options(options(rec)?);
    let mut q = match ex.execute(&sql) {
        Ok(q) => q,
        Err(e) => return Ok(engine_error(e)),
    };
    let rx = q.take_receiver().expect("fresh query");
    let mut problems = Vec::new();
    let mut lines = Vec::new();
    match q.window() {
        Some(spec @ WindowSpec::Time { step_ns, .. }) => {
            // A window is emitted every step; it ends with the pane of one step that just closed.
            let wait = Duration::from_nanos(step_ns) + Duration::from_secs(5);
            // Sync on a boundary: a pane just closed, the next one has (almost) all its time left.
            let first = match recv(&rx, wait) {
                Ok(b) => b,
                Err(why) => return stopped_early(q, why, engine_error),
            };
            let mut windows = vec![bounds(&first)?];
            for (k, seg) in segments.iter().enumerate() {
                let t0 = monotonic_ns();
                for c in seg {
                    w.command(c)?;
                }
                let t1 = monotonic_ns();
                let b = match recv(&rx, wait) {
                    Ok(b) => b,
                    Err(why) => return stopped_early(q, why, engine_error),
                };
                let (start, end) = bounds(&b)?;
                // The segment must fall in the window's newest pane, which began where the previous window ended.
                let pane_start = windows.last().expect("the sync window").1;
                if t0 < pane_start || t1 > end {
                    drop(q);
                    return Ok(Attempt::Straddled(format!(
                        "segment {} ran {t0}..{t1}, its pane {pane_start}..{end}",
                        k + 1
                    )));
                }
                windows.push((start, end));
                lines.extend(render::windowed(
                    k + 1,
                    render::order(render::rows(&[b]), order),
                ));
            }
            // Panes are contiguous: window i starts where window i - size/step ended.
            let n = spec.panes() as usize;
            for i in n..windows.len() {
                if windows[i].0 != windows[i - n].1 {
                    problems.push(format!(
                        "windows are not contiguous: window {:?} should start where {:?} ended",
                        windows[i],
                        windows[i - n]
                    ));
                }
            }
            let stats = match q.stop() {
                Ok(s) => s,
                Err(e) => return Ok(engine_error(e)),
            };
            check_stats(rec, &stats, &mut problems);
        }
        Some(WindowSpec::Count { size, .. }) => {
            if segments.len() > 1 {
                return Err(
                    "`next` waits for a time window; count windows close by themselves".into(),
                );
            }
            for c in &segments[0] {
                w.command(c)?;
            }
            let stats = match q.stop() {
                Ok(s) => s,
                Err(e) => return Ok(engine_error(e)),
            };
            for (k, b) in rx.try_iter().enumerate() {
                let (start, end) = bounds(&b)?;
                let want = (k as u64 * size, (k as u64 + 1) * size);
                if (start, end) != want {
                    problems.push(format!(
                        "count window {} spans events {start}..{end}, expected {}..{}",
                        k + 1,
                        want.0,
                        want.1
                    ));
                }
                lines.extend(render::windowed(
                    k + 1,
                    render::order(render::rows(&[b]), order),
                ));
            }
            check_stats(rec, &stats, &mut problems);
        }
        None => {
            if segments.len() > 1 {
                return Err("`next` waits for a time window; this query has none".into());
            }
            for c in &segments[0] {
                w.command(c)?;
            }
            let stats = match q.stop() {
                Ok(s) => s,
                Err(e) => return Ok(engine_error(e)),
            };
            let batches: Vec<RecordBatch> = rx.try_iter().collect();
            lines = render::order(render::rows(&batches), order);
            check_stats(rec, &stats, &mut problems);
        }
    }
    Ok(Attempt::Done(Run {
        lines,
        problems,
        sql,
        is_error: false,
    }))
}

/// The window channel closed or stalled: the query's own error if it has one, else `why`.
fn stopped_early(
    q: ebql::RunningQuery,
    why: String,
    engine_error: impl Fn(ebql::Error) -> Attempt,
) -> Result<Attempt, String> {
    match q.stop() {
        Err(e) => Ok(engine_error(e)),
        Ok(_) => Err(why),
    }
}

fn recv(rx: &Receiver<RecordBatch>, wait: Duration) -> Result<RecordBatch, String> {
    rx.recv_timeout(wait)
        .map_err(|e| format!("no window within {wait:?}: {e}"))
}

/// Window bounds from a windowed batch's schema metadata (present on empty batches too).
fn bounds(b: &RecordBatch) -> Result<(u64, u64), String> {
    let md = b.schema_ref().metadata().clone();
    let get = |k: &str| {
        md.get(k)
            .and_then(|v| v.parse::<u64>().ok())
            .ok_or(format!("window batch without {k} metadata"))
    };
    Ok((get(META_WINDOW_START)?, get(META_WINDOW_END)?))
}

/// Nothing may be dropped unless the case says so; `stats:` keys are checked exactly.
fn check_stats(rec: &Record, s: &QueryStats, problems: &mut Vec<String>) {
    let mut want: Vec<(String, u64)> = rec.stats.clone();
    if !want.iter().any(|(k, _)| k == "dropped") {
        want.push(("dropped".into(), 0));
    }
    for (k, v) in want {
        let got = match k.as_str() {
            "matched" => s.events_matched,
            "dropped" => s.events_dropped(),
            "rows" => s.rows_emitted,
            "failed" => s.windows_failed,
            "overwritten" => s.pair_starts_overwritten,
            "no_start" => s.pair_ends_without_start,
            "left" => s.pair_starts_left,
            other => {
                problems.push(format!("unknown stats key `{other}` (matched, dropped, rows, failed, overwritten, no_start, left)"));
                continue;
            }
        };
        if got != v {
            problems.push(format!(
                "stats: {k} = {got}, expected {v} (all stats: {})",
                s.to_json()
            ));
        }
    }
}
