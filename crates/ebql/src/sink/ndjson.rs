//! `--format json`: one JSON object per row (NDJSON), window bounds as the
//! `window_start`/`window_end` members of windowed queries. Every row has
//! every column: a NULL value is `null`, not a missing member. A failed
//! window is one object in place of its rows: its bounds and `error`
//! (`{"window_start":…,"window_end":…,"error":"…"}`; `{"error":"…"}`
//! without a WINDOW clause).

use super::contract::{QueryInfo, Sink, SinkError, TextOutput};
use crate::window::{QueryStats, WindowBatch};

/// Writes each row as one line of JSON.
pub struct NdjsonSink {
    out: TextOutput,
}

impl NdjsonSink {
    /// An NDJSON sink writing to `out`.
    pub fn new(out: TextOutput) -> NdjsonSink {
        NdjsonSink { out }
    }
}

impl Sink for NdjsonSink {
    fn open(&mut self, _: &QueryInfo) -> Result<(), SinkError> {
        self.out.open()
    }

    fn write(&mut self, w: &WindowBatch) -> Result<(), SinkError> {
        match &w.error {
            Some(e) => self.out.write_all(error_line(w, &e.cause).as_bytes()),
            None => self.out.write_all(&encode(&w.batch)?),
        }
    }

    fn finish(&mut self, _: &QueryStats) -> Result<(), SinkError> {
        self.out.close()
    }
}

/// The line of a failed window (also the Kafka sink's JSON message): its bounds (as its rows would carry them) and the cause.
pub fn error_line(w: &WindowBatch, cause: &str) -> String {
    let cause = serde_json::Value::String(cause.to_string());
    match w.bounds {
        Some(b) => format!(
            "{{\"window_start\":{},\"window_end\":{},\"error\":{cause}}}\n",
            b.start, b.end
        ),
        None => format!("{{\"error\":{cause}}}\n"),
    }
}

/// `batch` as NDJSON lines, NULL values as explicit `null`s.
fn encode(batch: &arrow::record_batch::RecordBatch) -> Result<Vec<u8>, SinkError> {
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
        let line = error_line(&w, "sum(x) = 2 does \"not\" fit\n");
        let v: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"window_start": 10, "window_end": 20, "error": "sum(x) = 2 does \"not\" fit\n"})
        );
        assert_eq!(line.lines().count(), 1);
        w.bounds = None;
        assert_eq!(error_line(&w, "x"), "{\"error\":\"x\"}\n");
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
