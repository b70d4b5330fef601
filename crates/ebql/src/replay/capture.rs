//! Reading a capture: the statements a query wrote to Parquet files
//! (`ebql query --format parquet`), found by column name.
//!
//! Expected columns (names are matched exactly; each can be renamed with the
//! matching [`ColumnNames`] field, the CLI's `--text-column` etc.):
//!
//! | role | default names, first match wins | type | required |
//! |---|---|---|---|
//! | statement text | `query`, `statement` | string | yes |
//! | start time | `time` | integer, ns (any clock: only differences are used) | yes |
//! | backend (session) | `pid` | integer | yes |
//! | latency | `latency_ns` | integer, ns; NULL: the statement never finished | no |
//! | failed in the capture | `failed` | boolean or integer (non-zero: failed) | no |
//! | text cut at the capture's bound | `truncated` | boolean or integer | no |
//!
//! Other columns are ignored.

use std::path::{Path, PathBuf};

use arrow::array::{Array, ArrayRef, AsArray};
use arrow::compute::cast;
use arrow::datatypes::{DataType, Schema, UInt64Type};
use arrow::record_batch::RecordBatch;
use ebql_compiler::bytetext;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

use super::ReplayError;

/// Column names to look for; `None` takes the defaults in the module docs.
#[derive(Debug, Clone, Default)]
pub struct ColumnNames {
    /// The statement text.
    pub text: Option<String>,
    /// The statement's start time, ns.
    pub time: Option<String>,
    /// The backend (server process) that ran it: one replay connection each.
    pub backend: Option<String>,
    /// Its latency in the capture, ns.
    pub latency: Option<String>,
    /// Whether it failed in the capture.
    pub failed: Option<String>,
    /// Whether its text was cut at the capture's string bound.
    pub truncated: Option<String>,
}

const TEXT: &[&str] = &["query", "statement"];
const TIME: &[&str] = &["time"];
const BACKEND: &[&str] = &["pid"];
const LATENCY: &[&str] = &["latency_ns"];
const FAILED: &[&str] = &["failed"];
const TRUNCATED: &[&str] = &["truncated"];

/// One captured statement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Statement {
    /// The backend's pid in the capture.
    pub backend: u64,
    /// Start time in the capture, ns.
    pub start_ns: u64,
    /// The text as captured.
    pub text: String,
    /// Latency in the capture, ns (`None`: no latency column, or a NULL:
    /// the statement never finished while the capture ran).
    pub latency_ns: Option<u64>,
    /// Failed in the capture: its failure flag, else (with a latency
    /// column) a NULL latency; `None`: the capture does not say.
    pub failed: Option<bool>,
    /// The text was cut at the capture's bound (such statements are not replayed).
    pub truncated: bool,
}

impl Statement {
    /// When it ended in the capture, if its latency is known.
    pub fn end_ns(&self) -> Option<u64> {
        self.latency_ns.map(|l| self.start_ns.saturating_add(l))
    }
}

/// The columns a capture was read with, for the report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedColumns {
    /// Text, time and backend column names.
    pub text: String,
    /// Start time.
    pub time: String,
    /// Backend.
    pub backend: String,
    /// Latency, if the capture has one.
    pub latency: Option<String>,
    /// Failure flag, if the capture has one.
    pub failed: Option<String>,
    /// Truncation flag, if the capture has one.
    pub truncated: Option<String>,
}

/// Every statement of a capture, in start-time order (ties: file order).
#[derive(Debug, Clone)]
pub struct Capture {
    /// The statements.
    pub statements: Vec<Statement>,
    /// The files read, in order.
    pub files: Vec<PathBuf>,
    /// The columns used (of the first file; every file must resolve to the same).
    pub columns: ResolvedColumns,
}

impl Capture {
    /// Reads `paths`: Parquet files, or directories whose visible `*.parquet`
    /// files are read in name order (the Parquet sink's names sort in time order).
    ///
    /// Errors: a path that is neither, an unreadable file, a file without a
    /// required column (the message lists its columns), a column of the wrong type.
    pub fn read(paths: &[PathBuf], names: &ColumnNames) -> Result<Capture, ReplayError> {
        let files = expand(paths)?;
        if files.is_empty() {
            return Err(ReplayError::Input {
                path: paths.first().cloned().unwrap_or_default(),
                why: "no .parquet files there".into(),
            });
        }
        let mut statements = Vec::new();
        let mut columns: Option<ResolvedColumns> = None;
        for f in &files {
            let (cols, mut rows) = read_file(f, names)?;
            match &columns {
                Some(c) if *c != cols => {
                    return Err(ReplayError::Input {
                        path: f.clone(),
                        why: format!("its columns ({cols:?}) differ from the first file's ({c:?})"),
                    })
                }
                Some(_) => {}
                None => columns = Some(cols),
            }
            statements.append(&mut rows);
        }
        // Stable: statements with the same start keep their file order.
        statements.sort_by_key(|s| s.start_ns);
        Ok(Capture {
            statements,
            files,
            columns: columns.expect("at least one file"),
        })
    }

    /// The distinct backends, in order of their first statement.
    pub fn backends(&self) -> Vec<u64> {
        let mut seen = std::collections::HashSet::new();
        self.statements
            .iter()
            .filter(|s| seen.insert(s.backend))
            .map(|s| s.backend)
            .collect()
    }
}

/// Files named by `paths`, directories expanded.
fn expand(paths: &[PathBuf]) -> Result<Vec<PathBuf>, ReplayError> {
    let mut out = Vec::new();
    for p in paths {
        let meta = std::fs::metadata(p).map_err(|e| ReplayError::Input {
            path: p.clone(),
            why: e.to_string(),
        })?;
        if meta.is_dir() {
            let entries = std::fs::read_dir(p).map_err(|e| ReplayError::Input {
                path: p.clone(),
                why: e.to_string(),
            })?;
            let mut files: Vec<PathBuf> = entries
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|f| {
                    f.extension().is_some_and(|x| x == "parquet")
                        && !f
                            .file_name()
                            .is_some_and(|n| n.to_string_lossy().starts_with('.'))
                })
                .collect();
            files.sort();
            out.extend(files);
        } else {
            out.push(p.clone());
        }
    }
    Ok(out)
}

/// The column for a role: the override if given (must exist), else the first default present.
fn find(
    schema: &Schema,
    path: &Path,
    role: &str,
    flag: &str,
    given: &Option<String>,
    defaults: &[&str],
    required: bool,
) -> Result<Option<String>, ReplayError> {
    let has = |n: &str| schema.field_with_name(n).is_ok();
    let columns = || {
        schema
            .fields()
            .iter()
            .map(|f| f.name().as_str())
            .collect::<Vec<_>>()
            .join(", ")
    };
    if let Some(n) = given {
        return if has(n) {
            Ok(Some(n.clone()))
        } else {
            Err(ReplayError::Input {
                path: path.to_path_buf(),
                why: format!("{flag} {n}: no such column (columns: {})", columns()),
            })
        };
    }
    match defaults.iter().find(|n| has(n)) {
        Some(n) => Ok(Some(n.to_string())),
        None if required => Err(ReplayError::Input {
            path: path.to_path_buf(),
            why: format!(
                "no {role} column (looked for {}; columns: {}); name it with {flag}",
                defaults.join(", "),
                columns()
            ),
        }),
        None => Ok(None),
    }
}

fn read_file(
    path: &Path,
    names: &ColumnNames,
) -> Result<(ResolvedColumns, Vec<Statement>), ReplayError> {
    let input = |why: String| ReplayError::Input {
        path: path.to_path_buf(),
        why,
    };
    let file = std::fs::File::open(path).map_err(|e| input(e.to_string()))?;
    let builder = ParquetRecordBatchReaderBuilder::try_new(file)
        .map_err(|e| input(format!("not a readable Parquet file: {e}")))?;
    let schema = builder.schema().clone();
    let req = |role, flag, given, defaults| {
        find(&schema, path, role, flag, given, defaults, true).map(|c| c.expect("required"))
    };
    let opt = |role, flag, given, defaults| find(&schema, path, role, flag, given, defaults, false);
    let cols = ResolvedColumns {
        text: req("statement text", "--text-column", &names.text, TEXT)?,
        time: req("start time", "--time-column", &names.time, TIME)?,
        backend: req("backend", "--backend-column", &names.backend, BACKEND)?,
        latency: opt("latency", "--latency-column", &names.latency, LATENCY)?,
        failed: opt("failure flag", "--failed-column", &names.failed, FAILED)?,
        truncated: opt(
            "truncation flag",
            "--truncated-column",
            &names.truncated,
            TRUNCATED,
        )?,
    };
    let reader = builder.build().map_err(|e| input(e.to_string()))?;
    let mut out = Vec::new();
    for batch in reader {
        let batch = batch.map_err(|e| input(e.to_string()))?;
        rows_of(&batch, &cols, &mut out).map_err(input)?;
    }
    Ok((cols, out))
}

/// Appends `batch`'s statements to `out`. Errors: a column of a type the role cannot take.
fn rows_of(
    batch: &RecordBatch,
    cols: &ResolvedColumns,
    out: &mut Vec<Statement>,
) -> Result<(), String> {
    let col = |n: &str| {
        batch
            .column_by_name(n)
            .expect("resolved from the schema")
            .clone()
    };
    let text = cast(&col(&cols.text), &DataType::Utf8)
        .map_err(|e| format!("column {}: not text: {e}", cols.text))?;
    let text = text.as_string::<i32>();
    let time = ints(&col(&cols.time), &cols.time)?;
    let backend = ints(&col(&cols.backend), &cols.backend)?;
    let latency = cols
        .latency
        .as_deref()
        .map(|n| ints(&col(n), n))
        .transpose()?;
    let failed = cols
        .failed
        .as_deref()
        .map(|n| flags(&col(n), n))
        .transpose()?;
    let truncated = cols
        .truncated
        .as_deref()
        .map(|n| flags(&col(n), n))
        .transpose()?;
    for i in 0..batch.num_rows() {
        let value = |a: &Option<arrow::array::PrimitiveArray<UInt64Type>>| {
            a.as_ref().filter(|a| a.is_valid(i)).map(|a| a.value(i))
        };
        if text.is_null(i) || time.is_null(i) || backend.is_null(i) {
            return Err(format!("row {i}: NULL text, time or backend"));
        }
        out.push(Statement {
            backend: backend.value(i),
            start_ns: time.value(i),
            // The statement's bytes (a value's text doubles a backslash before
            // `x80`…`xff`, as in PostgreSQL's bytea literal '\x80': see `bytetext`);
            // bytes that are not UTF-8 stay escaped, as no server takes them.
            text: String::from_utf8(bytetext::decode(text.value(i)).into_owned())
                .unwrap_or_else(|_| text.value(i).to_string()),
            latency_ns: value(&latency),
            // Without a flag, a NULL latency says the statement never finished.
            failed: match (&failed, &latency) {
                (Some(f), _) => Some(f.is_valid(i) && f.value(i) != 0),
                (None, Some(l)) => Some(l.is_null(i)),
                (None, None) => None,
            },
            truncated: truncated
                .as_ref()
                .is_some_and(|t| t.is_valid(i) && t.value(i) != 0),
        });
    }
    Ok(())
}

/// An integer column as u64 (negative values are refused).
fn ints(a: &ArrayRef, name: &str) -> Result<arrow::array::PrimitiveArray<UInt64Type>, String> {
    if !a.data_type().is_integer() {
        return Err(format!(
            "column {name}: {} is not an integer type",
            a.data_type()
        ));
    }
    let c = arrow::compute::kernels::cast::cast_with_options(
        a,
        &DataType::UInt64,
        &arrow::compute::CastOptions {
            safe: false,
            ..Default::default()
        },
    )
    .map_err(|e| format!("column {name}: {e}"))?;
    Ok(c.as_primitive::<UInt64Type>().clone())
}

/// A boolean or integer column as 0/1 (integers: non-zero is true).
fn flags(a: &ArrayRef, name: &str) -> Result<arrow::array::PrimitiveArray<UInt64Type>, String> {
    match a.data_type() {
        DataType::Boolean => {
            let b = a.as_boolean();
            Ok(b.iter().map(|v| v.map(u64::from)).collect())
        }
        t if t.is_integer() => Ok(arrow::array::PrimitiveArray::<UInt64Type>::from_iter(
            cast(a, &DataType::Int64)
                .map_err(|e| format!("column {name}: {e}"))?
                .as_primitive::<arrow::datatypes::Int64Type>()
                .iter()
                .map(|v| v.map(|v| u64::from(v != 0))),
        )),
        t => Err(format!(
            "column {name}: {t} is neither boolean nor an integer"
        )),
    }
}
