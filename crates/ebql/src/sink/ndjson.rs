//! `--format json`: one JSON object per row (NDJSON), window bounds as the
//! leading members of windowed queries: time windows `window_start`,
//! `window_end` (wall clock, RFC 3339 UTC with nanoseconds:
//! `"2025-01-02T09:11:12.345000000Z"`) and `window_start_mono_ns`,
//! `window_end_mono_ns` (CLOCK_MONOTONIC ns, numbers); count windows
//! `window_start`, `window_end` (ordinals). Every wall-clock column
//! (`walltime(time)`) is such text. Every row has every column: a NULL
//! value is `null`, not a missing member. A failed window is one object in
//! place of its rows: its bounds and `error`
//! (`{"window_start":…,"window_end":…,…,"error":"…"}`; `{"error":"…"}`
//! without a WINDOW clause).

use super::contract::{QueryInfo, Sink, SinkError, TextOutput, WindowKind};
use super::wall_clock::{timestamps_as_text, WallClock};
use crate::window::{QueryStats, WindowBatch};

/// Writes each row as one line of JSON.
pub struct NdjsonSink {
    out: TextOutput,
    /// The run's clock, for time windows (a failed window's bounds).
    clock: Option<WallClock>,
}

impl NdjsonSink {
    /// An NDJSON sink writing to `out`.
    pub fn new(out: TextOutput) -> NdjsonSink {
        NdjsonSink { out, clock: None }
    }
}

impl Sink for NdjsonSink {
    fn open(&mut self, info: &QueryInfo) -> Result<(), SinkError> {
        self.clock = (info.window == WindowKind::Time).then_some(info.clock);
        self.out.open()
    }

    fn write(&mut self, w: &WindowBatch) -> Result<(), SinkError> {
        match &w.error {
            Some(e) => self
                .out
                .write_all(error_line(w, &e.cause, self.clock.as_ref()).as_bytes()),
            None => self.out.write_all(&encode(&w.batch)?),
        }
    }

    fn finish(&mut self, _: &QueryStats) -> Result<(), SinkError> {
        self.out.close()
    }
}

/// The line of a failed window (also the Kafka sink's JSON message): its
/// bounds (as its rows would carry them: with the run's `clock` for time
/// windows, as ordinals for count windows) and the cause.
pub fn error_line(w: &WindowBatch, cause: &str, clock: Option<&WallClock>) -> String {
    let cause = serde_json::Value::String(cause.to_string());
    match (w.bounds, clock) {
        (Some(b), Some(c)) => format!(
            "{{\"window_start\":\"{}\",\"window_end\":\"{}\",\"window_start_mono_ns\":{},\"window_end_mono_ns\":{},\"error\":{cause}}}\n",
            c.rfc3339(b.start),
            c.rfc3339(b.end),
            b.start,
            b.end
        ),
        (Some(b), None) => format!(
            "{{\"window_start\":{},\"window_end\":{},\"error\":{cause}}}\n",
            b.start, b.end
        ),
        (None, _) => format!("{{\"error\":{cause}}}\n"),
    }
}

/// `batch` as NDJSON lines, NULL values as explicit `null`s, wall-clock
/// columns as RFC 3339 text ([`timestamps_as_text`]).
pub fn encode(batch: &arrow::record_batch::RecordBatch) -> Result<Vec<u8>, SinkError> {
    let batch = timestamps_as_text(batch).map_err(|e| SinkError::new("encoding JSON", e))?;
    let batch = &batch;
    let mut buf = Vec::new();
    let mut json = arrow::json::WriterBuilder::new()
        .with_explicit_nulls(true)
        .build::<_, arrow::json::writer::LineDelimited>(&mut buf);
    json.write(batch)
        .and_then(|()| json.finish())
        .map_err(|e| SinkError::new("encoding JSON", e))?;
    Ok(buf)
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{ArrayRef, StringArray, UInt64Array};
    use arrow::record_batch::RecordBatch;
    use std::sync::Arc;

    #[test]
    fn a_null_value_is_written_as_null() {
        let batch = RecordBatch::try_from_iter([
            (
                "comm",
                Arc::new(StringArray::from(vec![Some("bash"), None])) as ArrayRef,
            ),
            (
                "n",
                Arc::new(UInt64Array::from(vec![None, Some(2)])) as ArrayRef,
            ),
        ])
        .unwrap();
        let text = String::from_utf8(encode(&batch).unwrap()).unwrap();
        assert_eq!(
            text,
            "{\"comm\":\"bash\",\"n\":null}\n{\"comm\":null,\"n\":2}\n"
        );
    }

    #[test]
    fn a_failed_window_is_one_object_with_its_bounds_and_error() {
        let empty = RecordBatch::new_empty(Arc::new(arrow::datatypes::Schema::empty()));
        let mut w = WindowBatch {
            batch: empty,
            bounds: Some(crate::window::WindowBounds {
                start: 10,
                end: 20,
                panes: None,
            }),
            drops: Default::default(),
            error: None,
        };
        let line = error_line(&w, "sum(x) = 2 does \"not\" fit\n", None);
        let v: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"window_start": 10, "window_end": 20, "error": "sum(x) = 2 does \"not\" fit\n"})
        );
        assert_eq!(line.lines().count(), 1);
        // A time window's: wall clock as its rows' text, and the monotonic ns.
        let clock = WallClock::from_offset_ns(1_736_000_000_000_000_000);
        let v: serde_json::Value =
            serde_json::from_str(&error_line(&w, "x", Some(&clock))).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"window_start": "2025-01-04T14:13:20.000000010Z", "window_end": "2025-01-04T14:13:20.000000020Z",
                "window_start_mono_ns": 10, "window_end_mono_ns": 20, "error": "x"})
        );
        w.bounds = None;
        assert_eq!(error_line(&w, "x", None), "{\"error\":\"x\"}\n");
    }

    #[test]
    fn control_characters_are_json_escapes() {
        let raw = "a\x1b[2J\nb\"\\";
        let batch = RecordBatch::try_from_iter([(
            "comm",
            Arc::new(StringArray::from(vec![raw])) as ArrayRef,
        )])
        .unwrap();
        let text = String::from_utf8(encode(&batch).unwrap()).unwrap();
        // One line, no raw control character, and the value reads back unchanged.
        assert_eq!(text.lines().count(), 1, "{text}");
        assert!(!text.trim_end().chars().any(char::is_control), "{text:?}");
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["comm"], raw);
    }
}
