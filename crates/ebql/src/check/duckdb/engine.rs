//! The DuckDB process: `python3` running `reference.py` (the `duckdb` and
//! `pyarrow` packages), fed each window's tap rows as an Arrow IPC stream on
//! its stdin and answering with the result as one on its stdout (the
//! protocol is described at the top of `reference.py`).

use datafusion::arrow::datatypes::{Field, Schema, SchemaRef};
use datafusion::arrow::ipc::reader::StreamReader;
use datafusion::arrow::ipc::writer::StreamWriter;
use datafusion::arrow::record_batch::RecordBatch;
use std::io::{Read, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::Arc;

/// One event's rows in the tap of a query over several events
/// (`ebql_compiler::multi`): the rows whose `__branch` is `index`, with
/// `columns` as (tap column, the event's column name), registered in
/// DuckDB as the table `table` (the event's name in the query).
#[derive(Clone, Debug, PartialEq)]
pub struct TapBranch {
    /// The event's table name in the query, without quotes.
    pub table: String,
    /// The branch's index in the tap's `__branch` column.
    pub index: u64,
    /// (tap column, the event's column name).
    pub columns: Vec<(String, String)>,
}

const SCRIPT: &str = include_str!("reference.py");

/// A running DuckDB session for one query. Dropping it ends the process.
pub struct DuckDb {
    child: Child,
    stdin: ChildStdin,
    stdout: ChildStdout,
    /// The tap's schema with the event's column names (what the SQL reads).
    schema: SchemaRef,
    /// DuckDB's version, e.g. `2.0.1`.
    pub version: String,
}

/// Why a window has no DuckDB result.
#[derive(Debug, Clone)]
pub enum Failure {
    /// DuckDB refused the query on these rows (its error message): an answer of its own.
    Query(String),
    /// The process is gone or spoke garbage: no answer at all.
    Engine(String),
}

impl DuckDb {
    /// Starts `$EBQL_PYTHON` (default `python3`) with the reference script
    /// for `sql` over the table `table`, whose columns are `columns` (names
    /// of the tap's columns, in order).
    ///
    /// Errors: the interpreter cannot start, or `duckdb`/`pyarrow` cannot
    /// be imported, or DuckDB refuses its session set-up (the text says which).
    ///
    /// `branches` (a query over several events): each table the query
    /// reads is one event's rows of the tap, as [`TapBranch`] says.
    pub fn start(
        sql: &str,
        table: &str,
        tap: &SchemaRef,
        columns: &[String],
        branches: &[TapBranch],
    ) -> Result<DuckDb, String> {
        let python = std::env::var("EBQL_PYTHON").unwrap_or_else(|_| "python3".into());
        let mut child = Command::new(&python)
            .args(["-c", SCRIPT])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| format!("cannot run {python}: {e}"))?;
        let stdin = child.stdin.take().expect("piped stdin");
        let stdout = child.stdout.take().expect("piped stdout");
        let fields: Vec<Field> = tap
            .fields()
            .iter()
            .zip(columns)
            .map(|(f, name)| f.as_ref().clone().with_name(name))
            .collect();
        let mut db = DuckDb {
            child,
            stdin,
            stdout,
            schema: Arc::new(Schema::new(fields)),
            version: String::new(),
        };
        let branches: Vec<serde_json::Value> = branches
            .iter()
            .map(
                |b| serde_json::json!({ "table": b.table, "index": b.index, "columns": b.columns }),
            )
            .collect();
        let request =
            serde_json::json!({ "sql": sql, "table": table, "branches": branches }).to_string();
        let hello = (|| {
            db.stdin.write_all(&(request.len() as u32).to_le_bytes())?;
            db.stdin.write_all(request.as_bytes())?;
            db.stdin.flush()?;
            db.answer()
        })()
        .map_err(|e| format!("{python}: {e}"))?;
        match hello {
            (0, v) => db.version = String::from_utf8_lossy(&v).into_owned(),
            (_, why) => return Err(String::from_utf8_lossy(&why).into_owned()),
        }
        Ok(db)
    }

    /// Evaluates the query over `rows` (batches of the tap's schema).
    pub fn run(&mut self, rows: &[RecordBatch]) -> Result<RecordBatch, Failure> {
        let engine = |e: std::io::Error| Failure::Engine(format!("the DuckDB process: {e}"));
        let arrow = |e: datafusion::arrow::error::ArrowError| {
            Failure::Engine(format!("Arrow IPC with DuckDB: {e}"))
        };
        let mut buf = Vec::new();
        {
            let mut w = StreamWriter::try_new(&mut buf, &self.schema).map_err(arrow)?;
            for b in rows {
                let b = RecordBatch::try_new(self.schema.clone(), b.columns().to_vec())
                    .map_err(arrow)?;
                w.write(&b).map_err(arrow)?;
            }
            w.finish().map_err(arrow)?;
        }
        self.stdin
            .write_all(&(buf.len() as u64).to_le_bytes())
            .map_err(engine)?;
        self.stdin.write_all(&buf).map_err(engine)?;
        self.stdin.flush().map_err(engine)?;
        match self.answer().map_err(engine)? {
            (0, ipc) => {
                let reader =
                    StreamReader::try_new(std::io::Cursor::new(ipc), None).map_err(arrow)?;
                let schema = reader.schema();
                let batches = reader.collect::<Result<Vec<_>, _>>().map_err(arrow)?;
                datafusion::arrow::compute::concat_batches(&schema, &batches).map_err(arrow)
            }
            (_, why) => Err(Failure::Query(String::from_utf8_lossy(&why).into_owned())),
        }
    }

    /// One framed answer: status byte and payload.
    ///
    /// Errors: the pipe's, and a length no answer has (the bytes are not
    /// the reference's framing: then the check fails with that, rather
    /// than allocating what the length says).
    fn answer(&mut self) -> std::io::Result<(u8, Vec<u8>)> {
        let mut head = [0u8; 9];
        self.stdout.read_exact(&mut head)?;
        let len = u64::from_le_bytes(head[1..].try_into().expect("8 bytes"));
        if head[0] > 1 || len > MAX_ANSWER_BYTES {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!(
                    "the DuckDB reference's answer is not framed (status {}, {len} bytes): {:?}",
                    head[0],
                    String::from_utf8_lossy(&head)
                ),
            ));
        }
        let mut payload = vec![0u8; len as usize];
        self.stdout.read_exact(&mut payload)?;
        Ok((head[0], payload))
    }
}

/// The longest answer accepted, bytes: one window's result is far smaller.
const MAX_ANSWER_BYTES: u64 = 1 << 32;

impl Drop for DuckDb {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
