//! `--format parquet`: Parquet files, zstd-compressed (level 1), row groups
//! of up to 1 Mi rows, rolled by rows, bytes or time.
//!
//! `--output` names either one file (a path ending in `.parquet`: no
//! rolling) or a directory (created if missing) that receives
//! `ebql-YYYYMMDDTHHMMSSZ-NNNNNN.parquet` files: the UTC time the file was
//! opened, then its sequence number in the run, so names sort in time
//! order. A file being written is named `.NAME.inprogress` (hidden: pyarrow
//! and Spark datasets skip it) and renamed when closed, so every visible
//! file is complete. Each file's key-value metadata (and its Arrow schema's)
//! holds the query text, eBQL's version and the window kind
//! ([`super::file_schema::META_QUERY`], `META_VERSION`, `META_WINDOW`). A
//! failed window writes no rows; the file open at the time gets its bounds
//! and cause in its key-value metadata ([`WINDOW_ERROR_KEY`]).
//!
//! Time windows' `window_start`/`window_end` are Parquet
//! `TIMESTAMP(NANOS, isAdjustedToUTC=true)` (pyarrow:
//! `timestamp[ns, tz=UTC]`), followed by `window_start_mono_ns`/
//! `window_end_mono_ns` (uint64, CLOCK_MONOTONIC ns); count windows'
//! bounds are uint64 ordinals.
//!
//! The first file is created on open (an unwritable path fails before any
//! event is read; a run with no rows leaves one file with the schema); later
//! ones when a window arrives after a roll. Files are closed by `finish`,
//! which the CLI reaches on `--duration`, Ctrl-C and SIGTERM.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use ::parquet::arrow::ArrowWriter;
use ::parquet::basic::{Compression, ZstdLevel};
use ::parquet::file::metadata::KeyValue;
use ::parquet::file::properties::WriterProperties;
use ::parquet::schema::types::ColumnPath;
use arrow::datatypes::SchemaRef;

use super::contract::{QueryInfo, Sink, SinkError};
use super::file_schema::{conform, file_schema};

/// Key-value metadata of a file in which a window failed (no rows):
/// `ebql.window_error.<start>-<end>` = the cause, the bounds as
/// `window_start_mono_ns`/`window_end_mono_ns` (time windows: CLOCK_MONOTONIC
/// ns) or ordinals (count windows) (`ebql.window_error` without a WINDOW clause).
pub const WINDOW_ERROR_KEY: &str = "ebql.window_error";
use crate::window::{QueryStats, WindowBatch};

/// When a directory's current file is closed and the next one started.
/// Checked after each window is written; whichever limit is reached first rolls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Roll {
    /// Rows per file (`--roll-rows`), `None`: no limit.
    pub rows: Option<u64>,
    /// Bytes per file, compressed, counting what the writer still buffers
    /// (`--roll-bytes`), `None`: no limit.
    pub bytes: Option<u64>,
    /// Age of a file (`--roll-seconds`), `None`: no limit.
    pub age: Option<Duration>,
}

impl Default for Roll {
    /// 128 MiB or 10 minutes, whichever comes first: big enough for
    /// efficient scans (the usual Parquet file size), recent enough for a
    /// reader who looks at the directory while the query runs.
    fn default() -> Roll {
        Roll {
            rows: None,
            bytes: Some(128 << 20),
            age: Some(Duration::from_secs(600)),
        }
    }
}

/// Where the files go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// One file, never rolled.
    File(PathBuf),
    /// A directory of rolled files.
    Dir(PathBuf, Roll),
}

impl Target {
    /// A path ending in `.parquet` is one file, anything else a directory.
    pub fn of(path: &Path, roll: Roll) -> Target {
        if path.extension().is_some_and(|e| e == "parquet") {
            Target::File(path.to_path_buf())
        } else {
            Target::Dir(path.to_path_buf(), roll)
        }
    }
}

struct OpenFile {
    writer: ArrowWriter<File>,
    /// Name while written (directories: hidden), and once closed.
    writing: PathBuf,
    done: PathBuf,
    rows: u64,
    opened: Instant,
}

/// Writes windows to Parquet files.
pub struct ParquetSink {
    target: Target,
    schema: Option<SchemaRef>,
    props: Option<WriterProperties>,
    file: Option<OpenFile>,
    /// Files started so far (the next one's sequence number).
    started: u64,
    /// Closed files, in order.
    closed: Vec<PathBuf>,
}

impl ParquetSink {
    /// A sink writing to `target`.
    pub fn new(target: Target) -> ParquetSink {
        ParquetSink {
            target,
            schema: None,
            props: None,
            file: None,
            started: 0,
            closed: Vec::new(),
        }
    }

    /// The files closed so far, in the order written.
    pub fn files(&self) -> &[PathBuf] {
        &self.closed
    }

    fn start_file(&mut self) -> Result<(), SinkError> {
        let (Some(schema), Some(props)) = (self.schema.clone(), self.props.clone()) else {
            return Err(SinkError::new(
                "starting a Parquet file",
                "the sink is not open",
            ));
        };
        let (writing, done) = match &self.target {
            Target::File(p) => (p.clone(), p.clone()),
            Target::Dir(dir, _) => {
                let name = format!(
                    "ebql-{}-{:06}.parquet",
                    utc_stamp(SystemTime::now()),
                    self.started + 1
                );
                (dir.join(format!(".{name}.inprogress")), dir.join(name))
            }
        };
        let f = File::create(&writing)
            .map_err(|e| SinkError::new(format!("creating {}", writing.display()), e))?;
        let writer = ArrowWriter::try_new(f, schema, Some(props))
            .map_err(|e| SinkError::new(format!("starting {}", writing.display()), e))?;
        self.started += 1;
        self.file = Some(OpenFile {
            writer,
            writing,
            done,
            rows: 0,
            opened: Instant::now(),
        });
        Ok(())
    }

    fn close_file(&mut self) -> Result<(), SinkError> {
        let Some(f) = self.file.take() else {
            return Ok(());
        };
        f.writer
            .close()
            .map_err(|e| SinkError::new(format!("closing {}", f.writing.display()), e))?;
        if f.writing != f.done {
            std::fs::rename(&f.writing, &f.done).map_err(|e| {
                SinkError::new(
                    format!("renaming {} to {}", f.writing.display(), f.done.display()),
                    e,
                )
            })?;
        }
        self.closed.push(f.done);
        Ok(())
    }

    fn due_to_roll(&self) -> bool {
        let (Target::Dir(_, roll), Some(f)) = (&self.target, &self.file) else {
            return false;
        };
        let bytes = (f.writer.bytes_written() + f.writer.in_progress_size()) as u64;
        roll.rows.is_some_and(|n| f.rows >= n)
            || roll.bytes.is_some_and(|n| bytes >= n)
            || roll.age.is_some_and(|a| f.opened.elapsed() >= a)
    }
}

/// The writer's settings for files of `schema`: zstd (level 1), and
/// dictionary encoding for text and byte columns only. A number column of
/// events is mostly distinct values (times, latencies), whose dictionary
/// the writer builds, hashing every value, then abandons; plain encoding
/// and zstd store the few repeated ones (pids, descriptors) as well.
fn writer_properties(schema: &SchemaRef, kv: Vec<KeyValue>) -> WriterProperties {
    let mut props = WriterProperties::builder()
        .set_compression(Compression::ZSTD(ZstdLevel::default()))
        .set_key_value_metadata(Some(kv));
    for field in schema.fields() {
        if field.data_type().is_primitive() {
            props =
                props.set_column_dictionary_enabled(ColumnPath::from(field.name().as_str()), false);
        }
    }
    props.build()
}

impl Sink for ParquetSink {
    fn open(&mut self, info: &QueryInfo) -> Result<(), SinkError> {
        if let Target::Dir(dir, _) = &self.target {
            std::fs::create_dir_all(dir)
                .map_err(|e| SinkError::new(format!("creating directory {}", dir.display()), e))?;
        }
        let schema = file_schema(info);
        let kv = schema
            .metadata()
            .iter()
            .map(|(k, v)| KeyValue::new(k.clone(), v.clone()))
            .collect();
        self.props = Some(writer_properties(&schema, kv));
        self.schema = Some(schema);
        self.start_file()
    }

    fn write(&mut self, window: &WindowBatch) -> Result<(), SinkError> {
        if window.batch.num_rows() == 0 && window.error.is_none() {
            return Ok(());
        }
        if self.file.is_none() {
            self.start_file()?;
        }
        if let Some(e) = &window.error {
            // No rows: the file that holds the rows around it says which window failed and why.
            let key = match window.bounds {
                Some(b) => format!("{WINDOW_ERROR_KEY}.{}-{}", b.start, b.end),
                None => WINDOW_ERROR_KEY.to_string(),
            };
            let f = self.file.as_mut().expect("started above");
            f.writer
                .append_key_value_metadata(KeyValue::new(key, e.cause.clone()));
            return Ok(());
        }
        let schema = self.schema.as_ref().expect("open before write");
        let batch = conform(&window.batch, schema)?;
        let f = self.file.as_mut().expect("started above");
        f.writer
            .write(&batch)
            .map_err(|e| SinkError::new(format!("writing {}", f.writing.display()), e))?;
        f.rows += batch.num_rows() as u64;
        if self.due_to_roll() {
            self.close_file()?;
        }
        Ok(())
    }

    fn finish(&mut self, _stats: &QueryStats) -> Result<(), SinkError> {
        self.close_file()
    }
}

/// `t` as `YYYYMMDDTHHMMSSZ` (UTC), for file names that sort in time order.
fn utc_stamp(t: SystemTime) -> String {
    let secs = t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let (days, rem) = ((secs / 86400) as i64, secs % 86400);
    // Civil date from days since 1970-01-01 (proleptic Gregorian; eras of 400 years).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}{month:02}{day:02}T{:02}{:02}{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Text keeps its dictionary; numbers are written plain.
    #[test]
    fn only_text_and_bytes_are_dictionary_encoded() {
        use arrow::datatypes::{DataType, Field, Schema};
        let schema = std::sync::Arc::new(Schema::new(vec![
            Field::new("latency_ns", DataType::UInt64, true),
            Field::new("query", DataType::Utf8, true),
            Field::new("data", DataType::Binary, true),
        ]));
        let props = writer_properties(&schema, Vec::new());
        let dict = |c: &str| props.dictionary_enabled(&ColumnPath::from(c));
        assert_eq!(
            (dict("latency_ns"), dict("query"), dict("data")),
            (false, true, true)
        );
    }

    #[test]
    fn utc_stamps() {
        assert_eq!(utc_stamp(UNIX_EPOCH), "19700101T000000Z");
        // 2000-02-29 23:59:59 UTC (a leap day of a century year).
        assert_eq!(
            utc_stamp(UNIX_EPOCH + Duration::from_secs(951_868_799)),
            "20000229T235959Z"
        );
        // 2026-05-14 12:34:56 UTC.
        assert_eq!(
            utc_stamp(UNIX_EPOCH + Duration::from_secs(1_778_762_096)),
            "20260514T123456Z"
        );
    }
}
