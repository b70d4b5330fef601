//! Wall-clock time as text: CLOCK_MONOTONIC instants (window bounds) shown
//! in local time with the run's [`WallClock`] (table, live view, warnings),
//! and wall-clock timestamp columns (the time-window bounds,
//! `walltime(time)`) as RFC 3339 text with nanoseconds for JSON and CSV.
//! Shared by the text sinks and Kafka; depends only on [`crate::window`].

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, StringArray};
use arrow::datatypes::{DataType, Field, Schema};
use arrow::error::ArrowError;
use arrow::record_batch::{RecordBatch, RecordBatchOptions};
use arrow::util::display::{ArrayFormatter, FormatOptions};

pub use crate::window::WallClock;

/// RFC 3339 with nanoseconds, for a timestamp column in UTC: `2025-01-02T10:11:12.123456789Z`.
const RFC3339_UTC: &str = "%Y-%m-%dT%H:%M:%S%.9fZ";
/// RFC 3339 with nanoseconds and the column's UTC offset: `…12.123456789+02:00`.
const RFC3339_OFFSET: &str = "%Y-%m-%dT%H:%M:%S%.9f%:z";

impl WallClock {
    /// A CLOCK_MONOTONIC instant (ns) as local `YYYY-MM-DD HH:MM:SS.mmm`.
    pub fn show(&self, monotonic_ns: u64) -> String {
        let realtime_ns = self.unix_ns(monotonic_ns);
        let secs = realtime_ns.div_euclid(1_000_000_000) as libc::time_t;
        let ms = realtime_ns.rem_euclid(1_000_000_000) / 1_000_000;
        // SAFETY: plain C struct, all-zero is valid.
        let mut tm: libc::tm = unsafe { std::mem::zeroed() };
        // SAFETY: valid pointers; localtime_r is thread-safe.
        unsafe { libc::localtime_r(&secs, &mut tm) };
        format!(
            "{:04}-{:02}-{:02} {:02}:{:02}:{:02}.{:03}",
            tm.tm_year + 1900,
            tm.tm_mon + 1,
            tm.tm_mday,
            tm.tm_hour,
            tm.tm_min,
            tm.tm_sec,
            ms
        )
    }

    /// A CLOCK_MONOTONIC instant (ns) as RFC 3339 UTC text with nanoseconds
    /// (`2025-01-02T10:11:12.123456789Z`), as JSON and CSV write wall-clock
    /// columns.
    pub fn rfc3339(&self, monotonic_ns: u64) -> String {
        let ns = self.timestamp_ns(monotonic_ns);
        chrono::DateTime::from_timestamp_nanos(ns)
            .format(RFC3339_UTC)
            .to_string()
    }
}

/// Whether a time zone name is UTC itself (written with `Z`).
fn is_utc(tz: &str) -> bool {
    matches!(tz, "UTC" | "utc" | "Z" | "+00:00" | "Etc/UTC")
}

/// `batch` with every timestamp column that has a time zone (the
/// time-window bounds, `walltime(time)`) as RFC 3339 text with nanoseconds:
/// `2025-01-02T10:11:12.123456789Z` in UTC, `…+02:00` in another zone
/// (NULL stays NULL). Other columns are unchanged.
pub fn timestamps_as_text(batch: &RecordBatch) -> Result<RecordBatch, ArrowError> {
    replace_columns(
        batch,
        |f, c| {
            let DataType::Timestamp(_, Some(tz)) = c.data_type() else {
                return Ok(None);
            };
            let format = if is_utc(tz) {
                RFC3339_UTC
            } else {
                RFC3339_OFFSET
            };
            let opts = FormatOptions::default().with_timestamp_tz_format(Some(format));
            let show = ArrayFormatter::try_new(c.as_ref(), &opts)?;
            let texts: StringArray = (0..c.len())
                .map(|i| c.is_valid(i).then(|| show.value(i).to_string()))
                .collect();
            Ok(Some((
                Field::new(f.name(), DataType::Utf8, f.is_nullable()),
                Arc::new(texts) as ArrayRef,
            )))
        },
        |e| e,
    )
}

/// `batch` with each column for which `replace` gives a new field and
/// column swapped for them, the others unchanged (the batch itself when
/// none is replaced); `arrow_err` turns a failure to build the batch into `E`.
pub(super) fn replace_columns<E>(
    batch: &RecordBatch,
    mut replace: impl FnMut(&Field, &ArrayRef) -> Result<Option<(Field, ArrayRef)>, E>,
    arrow_err: impl FnOnce(ArrowError) -> E,
) -> Result<RecordBatch, E> {
    let schema = batch.schema();
    let mut fields = Vec::with_capacity(batch.num_columns());
    let mut columns = Vec::with_capacity(batch.num_columns());
    let mut replaced = false;
    for (f, c) in schema.fields().iter().zip(batch.columns()) {
        match replace(f, c)? {
            Some((field, column)) => {
                replaced = true;
                fields.push(field);
                columns.push(column);
            }
            None => {
                fields.push(f.as_ref().clone());
                columns.push(c.clone());
            }
        }
    }
    if !replaced {
        return Ok(batch.clone());
    }
    RecordBatch::try_new_with_options(
        Arc::new(Schema::new(fields)),
        columns,
        &RecordBatchOptions::new().with_row_count(Some(batch.num_rows())),
    )
    .map_err(arrow_err)
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{TimestampMillisecondArray, TimestampNanosecondArray, UInt64Array};

    /// UTC columns get `Z` and always nine digits; another zone its offset;
    /// NULL stays NULL; other columns are untouched.
    #[test]
    fn zoned_timestamps_become_rfc3339_with_nanoseconds() {
        let batch = RecordBatch::try_from_iter([
            (
                "t",
                Arc::new(
                    TimestampNanosecondArray::from(vec![
                        Some(1_736_000_000_000_000_000),
                        Some(1_736_000_000_123_456_789),
                        None,
                    ])
                    .with_timezone("UTC"),
                ) as ArrayRef,
            ),
            (
                "p",
                Arc::new(
                    TimestampMillisecondArray::from(vec![Some(0), Some(1), Some(2)])
                        .with_timezone("+02:00"),
                ) as ArrayRef,
            ),
            ("n", Arc::new(UInt64Array::from(vec![1, 2, 3])) as ArrayRef),
        ])
        .unwrap();
        let text = timestamps_as_text(&batch).unwrap();
        let t = text
            .column(0)
            .as_any()
            .downcast_ref::<StringArray>()
            .unwrap();
        assert_eq!(t.value(0), "2025-01-04T14:13:20.000000000Z");
        assert_eq!(t.value(1), "2025-01-04T14:13:20.123456789Z");
        assert!(t.is_null(2));
        let p = text
            .column(1)
            .as_any()
            .downcast_ref::<StringArray>()
            .unwrap();
        assert_eq!(p.value(1), "1970-01-01T02:00:00.001000000+02:00");
        assert_eq!(text.column(2).data_type(), &DataType::UInt64);
        // The instant of a bound, written alone (error lines), reads the same.
        let clock = WallClock::from_offset_ns(1_736_000_000_000_000_000);
        assert_eq!(clock.rfc3339(123_456_789), "2025-01-04T14:13:20.123456789Z");
    }
}
