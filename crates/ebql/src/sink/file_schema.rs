//! The schema result files and streams are written with (Arrow IPC,
//! Parquet): the query's result schema with the query, eBQL's version and
//! the window kind in its metadata, and batches conformed to it. Shared by
//! [`super::arrow_ipc`] and [`super::parquet`]; a leaf among the sinks.

use std::collections::HashMap;
use std::sync::Arc;

use arrow::datatypes::{Schema, SchemaRef};
use arrow::record_batch::{RecordBatch, RecordBatchOptions};

use super::contract::{QueryInfo, SinkError, WindowKind};

/// Schema (and Parquet file) metadata key: the query as the user wrote it.
pub const META_QUERY: &str = "ebql.query";
/// Metadata key: eBQL's version.
pub const META_VERSION: &str = "ebql.version";
/// Metadata key: the window kind, `none`, `time` (bounds `window_start`/`window_end`
/// as `Timestamp(Nanosecond, "UTC")`, plus `window_start_mono_ns`/`window_end_mono_ns`
/// in CLOCK_MONOTONIC ns) or `count` (bounds in event ordinals).
pub const META_WINDOW: &str = "ebql.window";

/// The name [`META_WINDOW`] gives a window kind.
pub fn window_kind_name(kind: WindowKind) -> &'static str {
    match kind {
        WindowKind::None => "none",
        WindowKind::Time => "time",
        WindowKind::Count => "count",
    }
}

/// The schema files and streams are written with: the query's result schema
/// with the query, version and window kind in its metadata (and nothing
/// window-specific, so every batch of the run shares it).
pub fn file_schema(info: &QueryInfo) -> SchemaRef {
    let md = HashMap::from([
        (META_QUERY.to_string(), info.sql.clone()),
        (META_VERSION.to_string(), info.version.to_string()),
        (
            META_WINDOW.to_string(),
            window_kind_name(info.window).to_string(),
        ),
    ]);
    Arc::new(Schema::new(info.schema.fields().clone()).with_metadata(md))
}

/// `batch`'s columns under `schema` (its own schema carries per-window
/// metadata, which a stream or file writer would take for a schema change).
///
/// Errors: a column whose type differs from the schema's.
pub fn conform(batch: &RecordBatch, schema: &SchemaRef) -> Result<RecordBatch, SinkError> {
    RecordBatch::try_new_with_options(
        schema.clone(),
        batch.columns().to_vec(),
        &RecordBatchOptions::new().with_row_count(Some(batch.num_rows())),
    )
    .map_err(|e| SinkError::new("matching a window's rows to the output schema", e))
}
