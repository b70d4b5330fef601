//! The user-space half of a wire relation (issue 21,
//! [`ebql_compiler::wire`]): each window's captured system calls, named by
//! the capture's projection, fed in order to the protocol's decoder
//! ([`ebql_wire`]); the statements they complete become the rows the
//! user's query reads.

use crate::error::{Error, Result};
use crate::executor::passthrough::PassThrough;
use crate::executor::peers::{Peer, Peers};
use crate::executor::userplan::run_plan_concat;
use datafusion::arrow::array::{
    Array, ArrayRef, AsArray, BooleanBuilder, Int32Builder, StringBuilder, UInt16Builder,
    UInt32Builder, UInt64Builder,
};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, SchemaRef, UInt32Type, UInt64Type};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::logical_expr::LogicalPlan;
use datafusion::prelude::SessionContext;
use ebql_compiler::contract::OutputLayout;
use ebql_compiler::planner::WindowInput;
use ebql_compiler::wire::{statement_schema, Protocol, RECVFROM};
use ebql_compiler::WireCapture;
use ebql_wire::{Chunk, ConnKey, Counters, Decoder, Direction, Kind, Statement};
use records::{Call, CallFields};
use std::sync::Arc;

mod records;

/// A wire relation's decoder with the capture's projection before it.
pub(super) struct WireStage {
    /// The capture's kernel rows, as the records decode.
    pub(super) capture_schema: SchemaRef,
    decoder: Box<dyn Decoder>,
    input: Arc<WindowInput>,
    capture: LogicalPlan,
    ctx: SessionContext,
    projection: Vec<usize>,
    /// The capture's columns as columns of its kernel rows, when its
    /// remainder only names them: no DataFusion run per batch.
    direct: Option<PassThrough>,
    /// Where the capture's columns lie in its records, when they can be
    /// read from there (no Arrow columns built).
    fields: Option<CallFields>,
    /// Clients of the connections, when the query reads them.
    peers: Option<Peers>,
    /// Statements decoded so far.
    statements: u64,
    /// Statements decoded and not yet taken, in the order they completed.
    decoded: Vec<Statement>,
    /// [`not_decoded`] of the counters when last taken.
    not_decoded_taken: u64,
    /// The capture's ring-buffer drops when the last rows were decoded.
    drops_seen: u64,
    /// The next rows follow a loss too closely to be trusted (see [`WireStage::decode`]).
    distrust_next: bool,
}

impl WireStage {
    /// The stage of `w`'s relation, its decoder new; `layout`: its capture's records.
    pub(super) fn new(w: &WireCapture, layout: &OutputLayout) -> WireStage {
        let direct = PassThrough::of(&w.split.remainder);
        let decoder: Box<dyn Decoder> = match w.relation.protocol {
            Protocol::Postgres => Box::new(ebql_wire::postgres::PgDecoder::default()),
            Protocol::Mysql => Box::new(ebql_wire::mysql::MyDecoder::default()),
        };
        WireStage {
            capture_schema: w.split.kernel_schema.clone(),
            decoder,
            input: w.split.input.clone(),
            capture: w.split.remainder.clone(),
            ctx: w.ctx.clone(),
            projection: w.projection.clone(),
            fields: direct.as_ref().and_then(|d| CallFields::of(layout, d)),
            direct,
            // PostgreSQL: a backend process per connection (executor/peers.rs).
            peers: reads_clients(&w.projection)
                .then(|| Peers::new(w.relation.protocol == Protocol::Postgres)),
            statements: 0,
            decoded: Vec::new(),
            not_decoded_taken: 0,
            drops_seen: 0,
            distrust_next: false,
        }
    }

    /// Feeds the capture's ring-buffer records `records` (the calls drained
    /// since the last feed, in the order they happened, laid out as the
    /// capture's layout) to the decoder; the statements they complete wait
    /// for [`WireStage::take_rows`]. Read straight from the records
    /// ([`CallFields`]) when the capture's columns are plain kernel
    /// columns, else through Arrow (`batch` makes the kernel rows) and the
    /// capture's projection.
    /// `ring_drops`: the capture's ring-buffer drops so far. Calls lost
    /// since the last feed lie somewhere among these (or, read a moment
    /// late, the next): both are skipped and the decoder starts every
    /// connection over ([`Decoder::lost`]), so no response completes a
    /// request it does not answer.
    pub(super) fn feed(
        &mut self,
        rt: &tokio::runtime::Runtime,
        records: &[u8],
        batch: impl FnOnce() -> Result<RecordBatch>,
        ring_drops: u64,
    ) -> Result<()> {
        let lost = ring_drops > self.drops_seen;
        self.drops_seen = ring_drops;
        let after_loss = std::mem::replace(&mut self.distrust_next, lost);
        let out = &mut self.decoded;
        let before = out.len();
        match &self.fields {
            Some(fields) if lost || after_loss => self.decoder.lost(fields.count(records) as u64),
            Some(fields) => {
                // About one statement per two calls (a read, then a write).
                out.reserve(fields.count(records) / 2);
                for call in fields.calls(records) {
                    feed_call(self.decoder.as_mut(), call, out);
                }
            }
            None => {
                let raw = batch()?;
                if lost || after_loss {
                    self.decoder.lost(raw.num_rows() as u64);
                    return Ok(());
                }
                let direct = self
                    .direct
                    .as_ref()
                    .and_then(|d| d.apply(std::slice::from_ref(&raw)));
                let calls = match direct {
                    Some(calls) => calls,
                    None => run_plan_concat(rt, &self.ctx, &self.input, vec![raw], &self.capture)?,
                };
                out.reserve(calls.num_rows() / 2);
                feed(self.decoder.as_mut(), &calls, out)?;
            }
        }
        self.statements += (out.len() - before) as u64;
        Ok(())
    }

    /// Statements decoded and not yet taken.
    pub(super) fn waiting(&self) -> usize {
        self.decoded.len()
    }

    /// The statements decoded since the last take, as the columns of the
    /// relation the query reads.
    pub(super) fn take_rows(&mut self) -> Result<RecordBatch> {
        let out = std::mem::take(&mut self.decoded);
        let clients: Vec<Option<Peer>> = match self.peers.as_mut() {
            Some(peers) => {
                peers.new_batch();
                out.iter()
                    .map(|s| peers.peer(s.conn.pid, s.conn.fd).cloned())
                    .collect()
            }
            None => Vec::new(),
        };
        Ok(statements_batch(&out, &clients)?.project(&self.projection)?)
    }

    /// What the decoder could not decode, and the statements it decoded.
    pub(super) fn counters(&self) -> (Counters, u64) {
        (*self.decoder.counters(), self.statements)
    }

    /// Calls not decoded since the last call (a window's share).
    pub(super) fn take_not_decoded(&mut self) -> u64 {
        let now = not_decoded(self.decoder.counters());
        now - std::mem::replace(&mut self.not_decoded_taken, now)
    }
}

/// Captured calls a decoder could not decode: skipped while a
/// connection's framing was lost or not yet found, TLS, and responses to
/// requests it did not see ([`crate::window::WindowDrops::wire_not_decoded`]).
fn not_decoded(c: &Counters) -> u64 {
    c.chunks_skipped + c.tls_chunks + c.responses_unmatched
}

/// Column `name` of `b` cast to `to` (the capture's types are the events' own).
fn column(b: &RecordBatch, name: &str, to: &DataType) -> Result<ArrayRef> {
    let c = b
        .column_by_name(name)
        .ok_or_else(|| Error::Internal(format!("the capture has no column {name}")))?;
    Ok(cast(c, to)?)
}

/// Feeds each captured call of `calls` (`time`, `pid`, `fd`, `id`, `ret`, `tail`, `data`) to `decoder`.
fn feed(decoder: &mut dyn Decoder, calls: &RecordBatch, out: &mut Vec<Statement>) -> Result<()> {
    let time = column(calls, "time", &DataType::UInt64)?;
    let pid = column(calls, "pid", &DataType::UInt32)?;
    let fd = column(calls, "fd", &DataType::UInt64)?;
    let id = column(calls, "id", &DataType::UInt64)?;
    let ret = column(calls, "ret", &DataType::UInt64)?;
    let binary = |name: &str| {
        calls
            .column_by_name(name)
            .ok_or_else(|| Error::Internal(format!("the capture has no column {name}")))
    };
    let (data, tail) = (binary("data")?, binary("tail")?);
    let (time, pid, fd, id, ret) = (
        time.as_primitive::<UInt64Type>(),
        pid.as_primitive::<UInt32Type>(),
        fd.as_primitive::<UInt64Type>(),
        id.as_primitive::<UInt64Type>(),
        ret.as_primitive::<UInt64Type>(),
    );
    let (data, tail) = (data.as_binary::<i32>(), tail.as_binary::<i32>());
    for i in 0..calls.num_rows() {
        // A buffer the probe could not read (NULL) is a call whose bytes were all missed.
        let call = Call {
            time: time.value(i),
            pid: pid.value(i),
            fd: fd.value(i),
            id: id.value(i),
            ret: ret.value(i),
            data: if data.is_null(i) { &[] } else { data.value(i) },
            tail: if tail.is_null(i) { &[] } else { tail.value(i) },
        };
        feed_call(decoder, call, out);
    }
    Ok(())
}

/// Feeds one captured call to `decoder`.
fn feed_call(decoder: &mut dyn Decoder, call: Call<'_>, out: &mut Vec<Statement>) {
    // The tail was read at the call's last bytes: the part the prefix already holds is dropped.
    let overlap = (call.data.len() + call.tail.len()).saturating_sub(call.ret as usize);
    let tail = &call.tail[overlap.min(call.tail.len())..];
    decoder.feed(
        &Chunk {
            conn: ConnKey {
                pid: call.pid,
                fd: call.fd as i32,
            },
            dir: if call.id == RECVFROM {
                Direction::Read
            } else {
                Direction::Write
            },
            time_ns: call.time,
            len: call.ret,
            data: call.data,
            tail,
        },
        out,
    );
}

/// Whether a query reading the columns `projection` of [`statement_schema`] reads a client's address or port.
fn reads_clients(projection: &[usize]) -> bool {
    let schema = statement_schema();
    projection.iter().any(|&i| {
        matches!(
            schema.field(i).name().as_str(),
            "client_addr" | "client_port"
        )
    })
}

/// Statements as the columns of [`statement_schema`]; `clients`: each
/// one's connection's client, or none at all (NULL).
fn statements_batch(stmts: &[Statement], clients: &[Option<Peer>]) -> Result<RecordBatch> {
    let n = stmts.len();
    let mut addr = StringBuilder::new();
    let mut port = UInt16Builder::with_capacity(n);
    for i in 0..n {
        let client = clients.get(i).and_then(Option::as_ref);
        addr.append_option(client.map(|c| c.0.as_str()));
        port.append_option(client.map(|c| c.1));
    }
    let mut time = UInt64Builder::with_capacity(n);
    let mut start = UInt64Builder::with_capacity(n);
    let mut latency = UInt64Builder::with_capacity(n);
    let mut pid = UInt32Builder::with_capacity(n);
    let mut fd = Int32Builder::with_capacity(n);
    let mut kind = StringBuilder::new();
    let mut query = StringBuilder::with_capacity(n, n * 64);
    let mut cut = BooleanBuilder::with_capacity(n);
    let mut name = StringBuilder::new();
    let mut tag = StringBuilder::new();
    let mut rows = UInt64Builder::with_capacity(n);
    let mut sqlstate = StringBuilder::new();
    let mut code = UInt32Builder::with_capacity(n);
    let mut error = StringBuilder::new();
    let mut user = StringBuilder::new();
    let mut database = StringBuilder::new();
    for s in stmts {
        time.append_value(s.end_ns);
        start.append_value(s.start_ns);
        latency.append_value(s.end_ns.saturating_sub(s.start_ns));
        pid.append_value(s.conn.pid);
        fd.append_value(s.conn.fd);
        kind.append_value(match s.kind {
            Kind::Simple => "simple",
            Kind::Prepared => "prepared",
            Kind::PrepareFailed => "prepare_failed",
        });
        // Lossless text: bytes that are not UTF-8 as \xHH escapes, as every eBQL string.
        query.append_option(s.text.as_deref().map(ebql_compiler::bytetext::encode));
        cut.append_value(s.text_truncated);
        name.append_option(s.name.as_deref());
        tag.append_option(s.tag.as_deref());
        rows.append_option(s.rows);
        let e = s.error.as_ref();
        sqlstate.append_option(e.map(|e| e.sqlstate.as_str()));
        code.append_option(e.and_then(|e| e.code));
        error.append_option(e.map(|e| e.message.as_str()));
        user.append_option(s.user.as_deref());
        database.append_option(s.database.as_deref());
    }
    let columns: Vec<ArrayRef> = vec![
        Arc::new(time.finish()),
        Arc::new(start.finish()),
        Arc::new(latency.finish()),
        Arc::new(pid.finish()),
        Arc::new(fd.finish()),
        Arc::new(addr.finish()),
        Arc::new(port.finish()),
        Arc::new(kind.finish()),
        Arc::new(query.finish()),
        Arc::new(cut.finish()),
        Arc::new(name.finish()),
        Arc::new(tag.finish()),
        Arc::new(rows.finish()),
        Arc::new(sqlstate.finish()),
        Arc::new(code.finish()),
        Arc::new(error.finish()),
        Arc::new(user.finish()),
        Arc::new(database.finish()),
    ];
    let schema: SchemaRef = statement_schema();
    Ok(RecordBatch::try_new(schema, columns)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The capture's remainder only names kernel columns: each batch is
    /// read without DataFusion, every captured column found once.
    #[test]
    fn the_capture_is_read_without_running_its_projection() {
        let catalog = ebql_catalog::Catalog::open().unwrap();
        let c = ebql_compiler::compile_query(
            "SELECT * FROM postgres.statements",
            &catalog,
            &Default::default(),
        )
        .unwrap();
        let w = c.wire.expect("a wire relation");
        let direct = PassThrough::of(&w.split.remainder).expect("plain columns");
        let names: Vec<&str> = direct.columns().map(|(n, _)| n).collect();
        assert_eq!(names, ["time", "pid", "fd", "id", "ret", "tail", "data"]);
        let mut kernel: Vec<usize> = direct.columns().map(|(_, i)| i).collect();
        kernel.sort();
        kernel.dedup();
        assert_eq!(kernel.len(), 7, "{direct:?}");
        assert!(kernel
            .iter()
            .all(|&i| i < w.split.kernel_schema.fields().len()));
    }

    /// Every statement field lands in its column of the relation's schema.
    #[test]
    fn statements_fill_the_relations_columns() {
        let s = Statement {
            conn: ConnKey { pid: 7, fd: 9 },
            start_ns: 100,
            end_ns: 350,
            kind: Kind::Prepared,
            text: Some(b"SELECT \x80".to_vec()),
            text_truncated: true,
            name: Some("s1".into()),
            tag: Some("SELECT 2".into()),
            rows: Some(2),
            error: Some(ebql_wire::StatementError {
                sqlstate: "42P01".into(),
                code: None,
                message: "no".into(),
            }),
            user: Some("u".into()),
            database: None,
        };
        let b = statements_batch(&[s], &[Some(("10.0.0.1".into(), 5432))]).unwrap();
        let text = |c: &str| {
            let a = cast(b.column_by_name(c).unwrap(), &DataType::Utf8).unwrap();
            let s = a.as_string::<i32>();
            (!s.is_null(0)).then(|| s.value(0).to_string())
        };
        assert_eq!(text("time").as_deref(), Some("350"));
        assert_eq!(text("latency_ns").as_deref(), Some("250"));
        assert_eq!(text("fd").as_deref(), Some("9"));
        assert_eq!(text("client_addr").as_deref(), Some("10.0.0.1"));
        assert_eq!(text("client_port").as_deref(), Some("5432"));
        assert_eq!(text("kind").as_deref(), Some("prepared"));
        assert_eq!(text("query").as_deref(), Some("SELECT \\x80"));
        assert_eq!(text("query_truncated").as_deref(), Some("true"));
        assert_eq!(text("statement").as_deref(), Some("s1"));
        assert_eq!(text("rows").as_deref(), Some("2"));
        assert_eq!(text("sqlstate").as_deref(), Some("42P01"));
        assert_eq!(text("error_code"), None);
        assert_eq!(text("database"), None);
        assert_eq!(b.schema(), statement_schema());
    }
}
