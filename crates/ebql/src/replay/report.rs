//! What a replay did: the summary for people, and the per-statement report
//! file (`--report FILE.parquet|FILE.csv`).

use std::fmt::Write as _;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use arrow::array::{ArrayRef, BooleanArray, StringArray, UInt64Array};
use arrow::datatypes::{DataType, Field, Schema};
use arrow::record_batch::RecordBatch;

use super::capture::{Capture, Statement};
use super::run::Outcome;
use super::ReplayError;

/// A statement's replay against its capture.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Succeeded in both (or succeeded, and the capture does not say).
    Ok,
    /// Failed in both.
    FailedAsCaptured,
    /// Failed in the replay; in the capture it succeeded, or the capture does not say.
    FailedInReplayOnly,
    /// Succeeded in the replay, failed in the capture.
    SucceededInReplayOnly,
    /// Not sent (its text was cut at the capture's bound).
    Skipped,
}

impl Verdict {
    /// The verdict for a statement and its outcome.
    pub fn of(s: &Statement, o: &Outcome) -> Verdict {
        match (
            o.skipped.is_some(),
            s.failed.unwrap_or(false),
            o.error.is_some(),
        ) {
            (true, ..) => Verdict::Skipped,
            (false, false, false) => Verdict::Ok,
            (false, true, true) => Verdict::FailedAsCaptured,
            (false, false, true) => Verdict::FailedInReplayOnly,
            (false, true, false) => Verdict::SucceededInReplayOnly,
        }
    }

    /// Whether the replay did something the capture did not.
    pub fn differs(self) -> bool {
        matches!(
            self,
            Verdict::FailedInReplayOnly | Verdict::SucceededInReplayOnly
        )
    }

    /// The report file's spelling.
    pub fn name(self) -> &'static str {
        match self {
            Verdict::Ok => "ok",
            Verdict::FailedAsCaptured => "failed as captured",
            Verdict::FailedInReplayOnly => "failed in replay only",
            Verdict::SucceededInReplayOnly => "succeeded in replay only",
            Verdict::Skipped => "skipped",
        }
    }
}

/// Counts over a replay.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Totals {
    /// Statements sent.
    pub replayed: usize,
    /// Of those: succeeded (as in the capture).
    pub ok: usize,
    /// Failed in both.
    pub failed_as_captured: usize,
    /// Failed in the replay only.
    pub failed_in_replay_only: usize,
    /// Succeeded in the replay only.
    pub succeeded_in_replay_only: usize,
    /// Not sent.
    pub skipped: usize,
    /// Sent after the wait for the cross-backend order timed out.
    pub order_gave_up: usize,
}

impl Totals {
    /// Counts the verdicts of `capture`'s statements.
    pub fn of(capture: &Capture, outcomes: &[Outcome]) -> Totals {
        let mut t = Totals::default();
        for (s, o) in capture.statements.iter().zip(outcomes) {
            let v = Verdict::of(s, o);
            t.replayed += usize::from(v != Verdict::Skipped);
            t.order_gave_up += usize::from(o.order_gave_up);
            *match v {
                Verdict::Ok => &mut t.ok,
                Verdict::FailedAsCaptured => &mut t.failed_as_captured,
                Verdict::FailedInReplayOnly => &mut t.failed_in_replay_only,
                Verdict::SucceededInReplayOnly => &mut t.succeeded_in_replay_only,
                Verdict::Skipped => &mut t.skipped,
            } += 1;
        }
        t
    }

    /// Statements whose outcome differs from the capture's.
    pub fn differing(&self) -> usize {
        self.failed_in_replay_only + self.succeeded_in_replay_only
    }
}

/// Errors listed in the summary (the report file has them all).
const ERRORS_SHOWN: usize = 20;
/// Statement texts are cut to this many characters in the summary.
const TEXT_SHOWN: usize = 160;
/// Statement texts in the latency table.
const TEXTS_SHOWN: usize = 10;

/// The summary printed after a replay: counts, errors with their statements,
/// latency against the capture (overall, and per statement text for the texts
/// that took the most time in the capture).
pub fn summary(capture: &Capture, outcomes: &[Outcome], speed: f64, wall: Duration) -> String {
    let st = &capture.statements;
    let t = Totals::of(capture, outcomes);
    let mut s = String::new();
    let span = match (st.first(), st.last()) {
        (Some(a), Some(b)) => Duration::from_nanos(b.start_ns - a.start_ns),
        _ => Duration::ZERO,
    };
    let _ = writeln!(
        s,
        "replayed {} of {} statements from {} in {:.3} s; the capture's starts spanned {:.3} s; speed {}",
        t.replayed,
        st.len(),
        plural(capture.backends().len(), "backend"),
        wall.as_secs_f64(),
        span.as_secs_f64(),
        if speed == 0.0 { "0 (as fast as the order allows)".to_string() } else { format!("{speed}") }
    );
    let _ = writeln!(
        s,
        "outcomes: {} ok, {} failed as in the capture, {} failed in the replay only, {} succeeded in the replay only, {} skipped (text cut at the capture's bound)",
        t.ok, t.failed_as_captured, t.failed_in_replay_only, t.succeeded_in_replay_only, t.skipped
    );
    if capture.columns.failed.is_none() && capture.columns.latency.is_none() {
        let _ = writeln!(s, "  (the capture has no failure flag or latency column: every captured statement is taken to have succeeded)");
    }
    if t.order_gave_up > 0 {
        let _ = writeln!(s, "order: {} statements were sent before a statement that had finished before them in the capture (the wait timed out)", t.order_gave_up);
    }
    if speed > 0.0 {
        let mut late: Vec<u64> = outcomes
            .iter()
            .filter(|o| o.skipped.is_none())
            .map(|o| o.late_ns)
            .collect();
        late.sort_unstable();
        if !late.is_empty() {
            let _ = writeln!(
                s,
                "pace: sent late against the capture's pace by {} median, {} at most",
                ms(pct(&late, 0.5)),
                ms(*late.last().expect("non-empty"))
            );
        }
    }
    let errors: Vec<(usize, &Statement, &Outcome)> = st
        .iter()
        .zip(outcomes)
        .enumerate()
        .filter(|(_, (_, o))| o.error.is_some())
        .map(|(i, (s, o))| (i, s, o))
        .collect();
    if !errors.is_empty() {
        let _ = writeln!(s, "errors ({}):", errors.len());
        for (i, st, o) in errors.iter().take(ERRORS_SHOWN) {
            let v = Verdict::of(st, o);
            let _ = writeln!(
                s,
                "  #{i} backend {}: {} ({})",
                st.backend,
                o.error.as_deref().unwrap_or_default(),
                v.name()
            );
            let _ = writeln!(s, "      {}", cut(&st.text, TEXT_SHOWN));
        }
        if errors.len() > ERRORS_SHOWN {
            let _ = writeln!(
                s,
                "  … {} more (every statement is in --report FILE)",
                errors.len() - ERRORS_SHOWN
            );
        }
    }
    latency_section(&mut s, capture, outcomes);
    s
}

fn latency_section(s: &mut String, capture: &Capture, outcomes: &[Outcome]) {
    let both: Vec<(&Statement, u64, u64)> = capture
        .statements
        .iter()
        .zip(outcomes)
        .filter_map(|(st, o)| {
            Some((
                st,
                st.latency_ns?,
                o.latency_ns
                    .filter(|_| o.error.is_none() && !st.failed.unwrap_or(false))?,
            ))
        })
        .collect();
    if both.is_empty() {
        if capture.columns.latency.is_none() {
            let _ = writeln!(
                s,
                "latency: the capture has no latency column; replay latencies are in --report FILE"
            );
        }
        return;
    }
    let mut cap: Vec<u64> = both.iter().map(|b| b.1).collect();
    let mut rep: Vec<u64> = both.iter().map(|b| b.2).collect();
    let mut ratio: Vec<f64> = both
        .iter()
        .map(|b| b.2 as f64 / b.1.max(1) as f64)
        .collect();
    cap.sort_unstable();
    rep.sort_unstable();
    ratio.sort_by(f64::total_cmp);
    let _ = writeln!(
        s,
        "latency of {} statements that succeeded in both: capture p50 {} p99 {}, replay p50 {} p99 {}; replay/capture per statement: median {:.2}x, p99 {:.2}x",
        both.len(),
        ms(pct(&cap, 0.5)),
        ms(pct(&cap, 0.99)),
        ms(pct(&rep, 0.5)),
        ms(pct(&rep, 0.99)),
        pctf(&ratio, 0.5),
        pctf(&ratio, 0.99)
    );
    // Per statement text: the texts that took the most time in the capture.
    let mut by_text: std::collections::HashMap<&str, (usize, u64, u64)> =
        std::collections::HashMap::new();
    for (st, c, r) in &both {
        let e = by_text.entry(st.text.as_str()).or_default();
        *e = (e.0 + 1, e.1 + c, e.2 + r);
    }
    let mut texts: Vec<(&str, (usize, u64, u64))> = by_text.into_iter().collect();
    texts.sort_by(|a, b| b.1 .1.cmp(&a.1 .1).then(a.0.cmp(b.0)));
    let _ = writeln!(
        s,
        "{:>7} {:>12} {:>12}  statement (most time in the capture first)",
        "count", "capture avg", "replay avg"
    );
    for (text, (n, c, r)) in texts.iter().take(TEXTS_SHOWN) {
        let _ = writeln!(
            s,
            "{n:>7} {:>12} {:>12}  {}",
            ms(c / *n as u64),
            ms(r / *n as u64),
            cut(text, TEXT_SHOWN)
        );
    }
}

/// Writes one row per statement to `path`: Parquet if it ends in `.parquet`,
/// else CSV. Columns: `index` (capture order), `backend`, `start_ns`,
/// `statement`, `captured_latency_ns`, `captured_failed`, `replayed`,
/// `replay_latency_ns`, `replay_error`, `verdict`, `late_ns`.
///
/// Errors: the file cannot be created or written.
pub fn write_report(
    path: &Path,
    capture: &Capture,
    outcomes: &[Outcome],
) -> Result<(), ReplayError> {
    let err = |e: &dyn std::fmt::Display| ReplayError::Report {
        path: path.to_path_buf(),
        why: e.to_string(),
    };
    let st = &capture.statements;
    let schema = Arc::new(Schema::new(vec![
        Field::new("index", DataType::UInt64, false),
        Field::new("backend", DataType::UInt64, false),
        Field::new("start_ns", DataType::UInt64, false),
        Field::new("statement", DataType::Utf8, false),
        Field::new("captured_latency_ns", DataType::UInt64, true),
        Field::new("captured_failed", DataType::Boolean, true),
        Field::new("replayed", DataType::Boolean, false),
        Field::new("replay_latency_ns", DataType::UInt64, true),
        Field::new("replay_error", DataType::Utf8, true),
        Field::new("verdict", DataType::Utf8, false),
        Field::new("late_ns", DataType::UInt64, false),
    ]));
    let columns: Vec<ArrayRef> = vec![
        Arc::new(UInt64Array::from_iter_values(0..st.len() as u64)),
        Arc::new(UInt64Array::from_iter_values(st.iter().map(|s| s.backend))),
        Arc::new(UInt64Array::from_iter_values(st.iter().map(|s| s.start_ns))),
        Arc::new(StringArray::from_iter_values(
            st.iter().map(|s| s.text.as_str()),
        )),
        Arc::new(UInt64Array::from_iter(st.iter().map(|s| s.latency_ns))),
        Arc::new(BooleanArray::from_iter(st.iter().map(|s| s.failed))),
        Arc::new(BooleanArray::from_iter(
            outcomes.iter().map(|o| Some(o.skipped.is_none())),
        )),
        Arc::new(UInt64Array::from_iter(
            outcomes.iter().map(|o| o.latency_ns),
        )),
        Arc::new(StringArray::from_iter(
            outcomes.iter().map(|o| o.error.as_deref()),
        )),
        Arc::new(StringArray::from_iter_values(
            st.iter()
                .zip(outcomes)
                .map(|(s, o)| Verdict::of(s, o).name()),
        )),
        Arc::new(UInt64Array::from_iter_values(
            outcomes.iter().map(|o| o.late_ns),
        )),
    ];
    let batch = RecordBatch::try_new(schema.clone(), columns).map_err(|e| err(&e))?;
    let file = std::fs::File::create(path).map_err(|e| err(&e))?;
    if path.extension().is_some_and(|e| e == "parquet") {
        let mut w =
            parquet::arrow::ArrowWriter::try_new(file, schema, None).map_err(|e| err(&e))?;
        w.write(&batch).map_err(|e| err(&e))?;
        w.close().map_err(|e| err(&e))?;
    } else {
        let mut w = arrow::csv::Writer::new(std::io::BufWriter::new(file));
        w.write(&batch).map_err(|e| err(&e))?;
    }
    Ok(())
}

/// The `q` quantile of sorted values (nearest rank).
fn pct(sorted: &[u64], q: f64) -> u64 {
    sorted[((sorted.len() as f64 * q).ceil() as usize).clamp(1, sorted.len()) - 1]
}

fn pctf(sorted: &[f64], q: f64) -> f64 {
    sorted[((sorted.len() as f64 * q).ceil() as usize).clamp(1, sorted.len()) - 1]
}

/// `1 backend`, `2 backends`.
fn plural(n: usize, what: &str) -> String {
    format!("{n} {what}{}", if n == 1 { "" } else { "s" })
}

/// ns as milliseconds, 3 decimals.
fn ms(ns: u64) -> String {
    format!("{:.3} ms", ns as f64 / 1e6)
}

/// The text on one line, cut to `n` characters.
fn cut(text: &str, n: usize) -> String {
    let one_line: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    match one_line.char_indices().nth(n) {
        Some((at, _)) => format!("{}…", &one_line[..at]),
        None => one_line,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_and_cuts() {
        assert_eq!(pct(&[1, 2, 3, 4], 0.5), 2);
        assert_eq!(pct(&[1, 2, 3, 4], 0.99), 4);
        assert_eq!(pct(&[7], 0.01), 7);
        assert_eq!(cut("SELECT\n  1,   2", 100), "SELECT 1, 2");
        assert_eq!(cut("abcdef", 3), "abc…");
    }

    #[test]
    fn verdicts() {
        let s = |failed| Statement {
            backend: 1,
            start_ns: 0,
            text: "x".into(),
            latency_ns: None,
            failed,
            truncated: false,
        };
        let o = |error: Option<&str>| Outcome {
            error: error.map(str::to_string),
            ..Outcome::default()
        };
        assert_eq!(Verdict::of(&s(None), &o(None)), Verdict::Ok);
        assert_eq!(
            Verdict::of(&s(Some(true)), &o(Some("e"))),
            Verdict::FailedAsCaptured
        );
        assert_eq!(
            Verdict::of(&s(None), &o(Some("e"))),
            Verdict::FailedInReplayOnly
        );
        assert_eq!(
            Verdict::of(&s(Some(true)), &o(None)),
            Verdict::SucceededInReplayOnly
        );
        let skipped = Outcome {
            skipped: Some("cut".into()),
            ..Outcome::default()
        };
        assert_eq!(Verdict::of(&s(Some(true)), &skipped), Verdict::Skipped);
    }
}
