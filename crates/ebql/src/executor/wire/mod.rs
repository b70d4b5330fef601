//! The user-space half of a wire relation (issue 21,
//! [`ebql_compiler::wire`]): each window's captured system calls, named by
//! the capture's projection, fed in order to the protocol's decoder
//! ([`ebql_wire`]); the statements they complete become the rows the
//! user's query reads.

use crate::error::{Error, Result};
use crate::executor::passthrough::PassThrough;
use crate::executor::peers::{Peer, Peers};
use closed::ClosedConns;
use datafusion::arrow::array::{
    ArrayRef, BooleanBuilder, Int32Builder, StringBuilder, UInt16Builder, UInt32Builder,
    UInt64Builder,
};
use datafusion::arrow::datatypes::{Schema, SchemaRef};
use datafusion::arrow::record_batch::{RecordBatch, RecordBatchOptions};
use ebql_compiler::contract::OutputLayout;
use ebql_compiler::wire::{statement_schema, PeerColumns, Protocol, RECVFROM};
use ebql_compiler::WireCapture;
use ebql_runtime::RingBuffer;
use ebql_wire::{Chunk, ConnKey, Counters, Decoder, Direction, Kind, Statement};
use records::{Call, CallFields};
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Instant;

mod closed;
mod records;

/// A wire relation's decoder, reading the capture's calls from its records.
pub(super) struct WireStage {
    decoder: Box<dyn Decoder>,
    /// The relation's columns the query reads.
    projection: Vec<usize>,
    /// Where the capture's columns lie in its records.
    fields: CallFields,
    /// Clients of the statements' connections, when the query reads them.
    clients: Clients,
    /// Statements decoded so far.
    statements: u64,
    /// Statements decoded and not yet taken, in the order they completed.
    decoded: Vec<Statement>,
    /// [`not_decoded`] of the counters when last taken.
    not_decoded_taken: u64,
    /// The capture's ring-buffer drops when the last rows were decoded.
    drops_seen: u64,
    /// The next rows follow a loss too closely to be trusted (see [`WireStage::feed`]).
    distrust_next: bool,
    /// Connections whose socket the server closed, closed in the decoder ([`closed`]).
    closed: ClosedConns,
}

impl WireStage {
    /// The stage of `w`'s relation, its decoder new; `layout`: its capture's
    /// records. Fails (an internal error) when the capture's columns are not
    /// plain kernel columns of those records, which [`super::super::wire`]'s
    /// capture text always makes them.
    pub(super) fn new(w: &WireCapture, layout: &OutputLayout) -> Result<WireStage> {
        let fields = PassThrough::of(&w.split.remainder)
            .and_then(|direct| CallFields::of(layout, &direct))
            .ok_or_else(|| {
                Error::Internal("the wire capture's columns are not fields of its records".into())
            })?;
        let decoder: Box<dyn Decoder> = match w.relation.protocol {
            Protocol::Postgres => Box::new(ebql_wire::postgres::PgDecoder::default()),
            Protocol::Mysql => Box::new(ebql_wire::mysql::MyDecoder::default()),
        };
        let clients = match PeerColumns::for_projection(&w.projection) {
            PeerColumns::Skipped => Clients::Unread,
            PeerColumns::Read if fields.has_peer() => Clients::Captured(Vec::new()),
            // PostgreSQL: a backend process per connection (executor/peers.rs).
            PeerColumns::Read => {
                Clients::LookedUp(Peers::new(w.relation.protocol == Protocol::Postgres))
            }
        };
        Ok(WireStage {
            decoder,
            projection: w.projection.clone(),
            fields,
            clients,
            statements: 0,
            decoded: Vec::new(),
            not_decoded_taken: 0,
            drops_seen: 0,
            distrust_next: false,
            closed: ClosedConns::default(),
        })
    }

    /// Feeds the capture's ring-buffer records `records` (the calls drained
    /// since the last feed, in the order they happened, laid out as the
    /// capture's layout) to the decoder; the statements they complete wait
    /// for [`WireStage::take_rows`].
    /// `ring_drops`: the capture's ring-buffer drops so far, read after the
    /// drain (see [`WireStage::follows_loss`]).
    pub(super) fn feed(&mut self, records: &[u8], ring_drops: u64) {
        let calls = self.fields.count(records);
        if self.follows_loss(ring_drops) {
            self.decoder.lost(calls as u64);
            return;
        }
        let before = self.decoded.len();
        // About one statement per two calls (a read, then a write).
        self.decoded.reserve(calls / 2);
        for record in records.chunks_exact(self.fields.size()) {
            self.feed_record(record);
        }
        self.statements += (self.decoded.len() - before) as u64;
        self.closed
            .after_feed(self.decoder.as_mut(), Instant::now());
    }

    /// The run ended, every captured call fed: the connections whose
    /// socket the server closed (or whose process exited) are closed,
    /// their requests still awaiting a response counted as unfinished
    /// ([`closed`]).
    pub(super) fn at_end(&mut self) {
        self.closed.at_end(self.decoder.as_mut());
    }

    /// Decodes the calls waiting in the capture's ring buffer `rb` where
    /// they lie, as [`WireStage::feed`] decodes drained ones: no copy of a
    /// busy server's megabytes a second, and each record is read once,
    /// while in cache. `ring_drops` reads the capture's drops so far; it
    /// is called once the calls are consumed. When they turn out to lie
    /// among lost calls, what they completed is dropped and the decoder
    /// counts them as lost ([`Decoder::forget_fed`]), as `feed` would.
    pub(super) fn feed_from_ring(
        &mut self,
        rb: &mut RingBuffer,
        ring_drops: impl FnOnce() -> u64,
    ) -> ebql_runtime::Result<()> {
        self.feed_visited(|visit| rb.consume_each(visit), ring_drops)
    }

    /// [`WireStage::feed_from_ring`] over the records `consume` hands to
    /// its visitor; `consume` returns how many it handed.
    fn feed_visited<E>(
        &mut self,
        consume: impl FnOnce(&mut dyn FnMut(&[u8])) -> std::result::Result<usize, E>,
        ring_drops: impl FnOnce() -> u64,
    ) -> std::result::Result<(), E> {
        let (before, counters) = (self.decoded.len(), *self.decoder.counters());
        let after_loss = self.distrust_next;
        let calls = consume(&mut |record| {
            if !after_loss {
                self.feed_record(record);
            }
        })? as u64;
        if self.follows_loss(ring_drops()) {
            self.decoded.truncate(before);
            if let Clients::Captured(clients) = &mut self.clients {
                clients.truncate(before);
            }
            if after_loss {
                self.decoder.lost(calls);
            } else {
                self.decoder.forget_fed(calls, counters);
            }
            return Ok(());
        }
        self.statements += (self.decoded.len() - before) as u64;
        self.closed
            .after_feed(self.decoder.as_mut(), Instant::now());
        Ok(())
    }

    /// Whether the calls read since the last feed are to be skipped, given
    /// `ring_drops`, the capture's ring-buffer drops so far, read after
    /// they were read. Calls lost since the last feed lie somewhere among
    /// these (or, the count read a moment late, the next): both are
    /// skipped and the decoder starts every connection over
    /// ([`Decoder::lost`]), so no response completes a request it does
    /// not answer.
    fn follows_loss(&mut self, ring_drops: u64) -> bool {
        let lost = ring_drops > self.drops_seen;
        self.drops_seen = ring_drops;
        let after_loss = std::mem::replace(&mut self.distrust_next, lost);
        lost || after_loss
    }

    /// Feeds one record's call to the decoder.
    fn feed_record(&mut self, record: &[u8]) {
        match self.fields.call(record) {
            Some(call) => {
                let peer = call.peer;
                feed_call(self.decoder.as_mut(), call, &mut self.decoded);
                // A statement completes on its connection's socket: its peer is the client.
                if let Clients::Captured(clients) = &mut self.clients {
                    clients.resize(self.decoded.len(), peer);
                }
            }
            // Too short for the capture's fields (the probe never writes
            // such a record): its connection is not known, so none is trusted.
            None => self.decoder.lost(1),
        }
    }

    /// Statements decoded and not yet taken.
    pub(super) fn waiting(&self) -> usize {
        self.decoded.len()
    }

    /// The statements decoded since the last take, as the columns of the
    /// relation the query reads.
    pub(super) fn take_rows(&mut self) -> Result<RecordBatch> {
        let out = std::mem::take(&mut self.decoded);
        // Captured clients leave with their statements, whatever the columns read.
        let clients: Vec<Option<Peer>> = match &mut self.clients {
            Clients::Unread => Vec::new(),
            Clients::Captured(clients) => std::mem::take(clients),
            Clients::LookedUp(peers) => {
                peers.new_batch();
                out.iter()
                    .map(|s| peers.peer(s.conn.pid, s.conn.fd).copied())
                    .collect()
            }
        };
        if self.projection.is_empty() {
            // `COUNT(*)` reads no column: the statements are only counted
            // (a batch of no columns carries its row count).
            let rows = RecordBatchOptions::new().with_row_count(Some(out.len()));
            return Ok(RecordBatch::try_new_with_options(
                Arc::new(Schema::empty()),
                Vec::new(),
                &rows,
            )?);
        }
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

/// Where the statements' clients (`client_addr`, `client_port`) come from.
enum Clients {
    /// The query reads neither column.
    Unread,
    /// The capture's records hold each call's socket peer (the socket
    /// tracepoints): the client of each statement decoded and not yet
    /// taken, in step with [`WireStage::decoded`], from the call that
    /// completed it.
    Captured(Vec<Option<Peer>>),
    /// Looked up in user space when the statements are taken (the system
    /// call hooks, which do not see the socket).
    LookedUp(Peers),
}

/// Captured calls a decoder could not decode: skipped while a
/// connection's framing was lost or not yet found, TLS, and responses to
/// requests it did not see ([`crate::window::WindowDrops::wire_not_decoded`]).
fn not_decoded(c: &Counters) -> u64 {
    c.chunks_skipped + c.tls_chunks + c.responses_unmatched
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

/// Statements as the columns of [`statement_schema`]; `clients`: each
/// one's connection's client, or none at all (NULL).
fn statements_batch(stmts: &[Statement], clients: &[Option<Peer>]) -> Result<RecordBatch> {
    let n = stmts.len();
    let mut addr = StringBuilder::new();
    let mut port = UInt16Builder::with_capacity(n);
    for i in 0..n {
        match clients.get(i).copied().flatten() {
            Some(client) => {
                // Written into the builder's buffer: no String per row.
                write!(addr, "{}", client.ip()).expect("a builder takes any text");
                addr.append_value("");
                port.append_value(client.port());
            }
            None => {
                addr.append_null();
                port.append_null();
            }
        }
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
    use datafusion::arrow::array::{Array, AsArray};
    use datafusion::arrow::compute::cast;
    use datafusion::arrow::datatypes::DataType;
    use ebql_compiler::choose::HookChoice;
    use ebql_compiler::{CodegenOptions, CompiledQuery};
    use std::net::SocketAddr;

    /// `SELECT * FROM postgres.statements` compiled with its capture on
    /// `hook`, and the capture's projection as kernel columns.
    pub(super) fn postgres_capture(hook: HookChoice) -> (CompiledQuery, PassThrough) {
        capture_of("SELECT * FROM postgres.statements", hook)
    }

    /// The compiled `query` over a wire relation, on `hook`, with its capture's plain columns.
    pub(super) fn capture_of(query: &str, hook: HookChoice) -> (CompiledQuery, PassThrough) {
        let catalog = ebql_catalog::Catalog::open().unwrap();
        let mut opts = CodegenOptions::default();
        opts.choices.hook = hook;
        let c = ebql_compiler::compile_query(query, &catalog, &opts).unwrap();
        let w = c.wire.as_ref().expect("a wire relation");
        let direct = PassThrough::of(&w.split.remainder).expect("plain columns");
        (c, direct)
    }

    /// The capture's remainder only names kernel columns: each batch is
    /// read without DataFusion, every captured column found once.
    #[test]
    fn the_capture_is_read_without_running_its_projection() {
        let (c, direct) = postgres_capture(HookChoice::Auto);
        let w = c.wire.expect("a wire relation");
        let names: Vec<&str> = direct.columns().map(|(n, _)| n).collect();
        assert_eq!(
            names,
            [
                "time",
                "pid",
                "fd",
                "id",
                "ret",
                "peer_family",
                "peer_port",
                "peer_v4",
                "peer_v6",
                "tail",
                "data"
            ]
        );
        let mut kernel: Vec<usize> = direct.columns().map(|(_, i)| i).collect();
        kernel.sort();
        kernel.dedup();
        assert_eq!(kernel.len(), names.len(), "{direct:?}");
        assert!(kernel
            .iter()
            .all(|&i| i < w.split.kernel_schema.fields().len()));
    }

    /// A PostgreSQL simple query's request and response on one connection,
    /// at `t` ns: the capture's records of its `recvfrom` and `sendto`.
    fn one_query(fields: &CallFields, t: u64) -> Vec<u8> {
        let msg = |tag: u8, body: &[u8]| {
            let mut m = vec![tag];
            m.extend_from_slice(&(body.len() as u32 + 4).to_be_bytes());
            m.extend_from_slice(body);
            m
        };
        let request = msg(b'Q', b"SELECT 1\0");
        let response = [msg(b'C', b"SELECT 1\0"), msg(b'Z', b"I")].concat();
        fn call(time: u64, id: u64, data: &[u8]) -> Call<'_> {
            Call {
                time,
                pid: 7,
                fd: 9,
                id,
                ret: data.len() as u64,
                data,
                tail: b"",
                peer: Some(SocketAddr::from(([10, 0, 0, 1], 5000))),
            }
        }
        [
            fields.record(&call(t, RECVFROM, &request)),
            fields.record(&call(t + 1_000, ebql_compiler::wire::SENDTO, &response)),
        ]
        .concat()
    }

    /// Calls read around a ring-buffer loss (the drop count grew by the
    /// time they were read, or had just grown) complete nothing, whether
    /// drained then fed or decoded where they lie (the loss then found
    /// after feeding them); the next clean calls decode again. Both ways
    /// count the same.
    #[test]
    fn statements_around_a_ring_buffer_loss_are_dropped_not_guessed() {
        let (c, _) = postgres_capture(HookChoice::Auto);
        let w = c.wire.as_ref().expect("a wire relation");
        let mut drained = WireStage::new(w, &c.code.layout).unwrap();
        let mut in_place = WireStage::new(w, &c.code.layout).unwrap();
        let size = drained.fields.size();
        // (ring drops read after the calls, statements then decoded in all)
        let feeds = [(0, 1), (1, 1), (1, 1), (1, 2), (3, 2), (3, 2), (3, 3)];
        for (i, (drops, decoded)) in feeds.into_iter().enumerate() {
            let records = one_query(&drained.fields, i as u64 * 10_000);
            drained.feed(&records, drops);
            in_place
                .feed_visited(
                    |visit| {
                        records.chunks_exact(size).for_each(&mut *visit);
                        Ok::<_, ()>(2)
                    },
                    || drops,
                )
                .unwrap();
            for stage in [&drained, &in_place] {
                assert_eq!(stage.counters().1, decoded, "feed {i}");
                assert_eq!(stage.waiting() as u64, decoded, "feed {i}");
            }
            assert_eq!(drained.counters(), in_place.counters(), "feed {i}");
        }
        let (counters, _) = drained.counters();
        assert_eq!(counters.chunks_skipped, 8, "4 feeds of 2 calls skipped");
        // Each statement kept its client, dropped with it where it was dropped.
        for stage in [&mut drained, &mut in_place] {
            let b = stage.take_rows().unwrap();
            let addr = b.column_by_name("client_addr").unwrap().as_string::<i32>();
            let clients: Vec<_> = addr.iter().collect();
            assert_eq!(clients, vec![Some("10.0.0.1"); 3]);
        }
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
        let b = statements_batch(&[s], &[Some(SocketAddr::from(([10, 0, 0, 1], 5432)))]).unwrap();
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
