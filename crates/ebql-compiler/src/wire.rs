//! Relations decoded from a database's wire protocol (issue 21):
//! `postgres.statements` and `mysql.statements`, one row per statement
//! execution, without USDT probes or the database's own logging.
//!
//! Such a relation has two halves. Its **capture** is an eBQL query over
//! the socket system calls of the server's processes ([`capture_sql`]),
//! compiled like any other, keeping `recvfrom` (45) and `sendto` (44)
//! calls that moved bytes, each with a bounded prefix of its buffer read
//! once the bytes moved ([`CAPTURE_BYTES`]). Where the kernel has them it
//! reads the socket tracepoints `sock:sock_recv_length` and
//! `sock_send_length` (one program each, the call's arguments from the
//! task's registers); elsewhere one pairing of `raw_syscalls:sys_enter`
//! with `sys_exit` by thread ([`CaptureHook`]). Its **decoder** (the `ebql-wire`
//! crate, run by the executor) turns each window's captured calls, in
//! order, into statements ([`statement_schema`]). The user's query runs in
//! user space over those rows, as the remainder of a query whose kernel
//! part is the capture.
//!
//! Both PostgreSQL 15 and MariaDB read a client socket with `recv` and
//! write it with `send` (`recvfrom`/`sendto` at the system-call level,
//! observed with strace), on TCP and Unix-domain sockets alike.

use crate::choose::HookChoice;
use crate::diag::Diagnostic;
use crate::prepass::WindowSpec;
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use ebql_catalog::{EventKind, EventName};
use std::sync::Arc;

/// The protocol a relation's decoder speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Protocol {
    /// PostgreSQL's frontend/backend protocol v3.
    Postgres,
    /// The MySQL/MariaDB client/server protocol.
    Mysql,
}

/// A relation decoded from a wire protocol.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WireRelation {
    /// Its name in FROM: `postgres.statements`.
    pub name: &'static str,
    /// The schema and table parts of the name.
    pub parts: (&'static str, &'static str),
    /// What decodes it.
    pub protocol: Protocol,
    /// The server processes' task name (`comm`), which the capture keeps.
    pub server_comm: &'static [&'static str],
    /// One line for `ebql events` and the docs.
    pub doc: &'static str,
}

/// Every wire relation.
pub const RELATIONS: [WireRelation; 2] = [
    WireRelation {
        name: "postgres.statements",
        parts: ("postgres", "statements"),
        protocol: Protocol::Postgres,
        server_comm: &["postgres"],
        doc: "PostgreSQL statements decoded from the v3 wire protocol at the server's socket system calls",
    },
    WireRelation {
        name: "mysql.statements",
        parts: ("mysql", "statements"),
        protocol: Protocol::Mysql,
        server_comm: &["mariadbd", "mysqld"],
        doc: "MySQL/MariaDB statements decoded from the client/server protocol at the server's socket system calls",
    },
];

/// Bytes of each system call's buffer the capture keeps: a statement's
/// text up to about this many bytes whole, longer ones cut
/// (`query_truncated`). Messages are framed by their length prefixes, so
/// the bytes past it are skipped, not lost to the framing, unless a
/// message header lies there (then the decoder counts a lost framing and
/// resynchronizes). Every captured call reserves this much of the ring
/// buffer: 2 KiB holds most statements whole and keeps a busy server's
/// calls (tens of thousands a second) within [`CAPTURE_RINGBUF_BYTES`].
pub const CAPTURE_BYTES: u32 = 2048;

/// Bytes of the server's writes (responses) the capture on the socket
/// tracepoints keeps: an OK, an ERR, a result's header and first rows.
/// Longer writes are finished from their [`CAPTURE_TAIL_BYTES`]: what is
/// lost is MySQL's row count of a result set longer than this (`rows`
/// NULL). Copying 2 KiB of each long response in the server's thread
/// cost MariaDB's `oltp_read_write` about 4% of its TPS (BENCHMARKS.md,
/// issue 21, nineteenth session). The raw hooks' pairing has one program
/// for both directions and keeps [`CAPTURE_BYTES`] of each.
pub const RESPONSE_HEAD_BYTES: u32 = 512;

/// Bytes of a call's end captured when it moved more than its head
/// ([`CAPTURE_BYTES`], or [`RESPONSE_HEAD_BYTES`] for the socket
/// capture's writes): the column `tail`, `ebql_wire::Chunk::tail`. A
/// long response's last messages (PostgreSQL's CommandComplete and ReadyForQuery, MySQL's final
/// OK/EOF/ERR), which complete a statement whose rows were not captured.
pub const CAPTURE_TAIL_BYTES: u32 = 256;

/// The capture's ring buffer, at least: 64 MiB, about 30,000 calls, over
/// half a second of a server doing 25,000 statements a second (two calls
/// each) between the query thread's drains.
pub const CAPTURE_RINGBUF_BYTES: u32 = 64 << 20;

/// The relation named `schema.table` (case-insensitive), if any.
pub fn find(schema: &str, table: &str) -> Option<&'static WireRelation> {
    RELATIONS
        .iter()
        .find(|r| r.parts.0.eq_ignore_ascii_case(schema) && r.parts.1.eq_ignore_ascii_case(table))
}

/// The wire relation `query` reads after FROM or JOIN, if any, with the
/// byte range of its name.
pub fn referenced(query: &str) -> Option<(&'static WireRelation, std::ops::Range<usize>)> {
    use datafusion::sql::sqlparser::dialect::GenericDialect;
    use datafusion::sql::sqlparser::keywords::Keyword;
    use datafusion::sql::sqlparser::tokenizer::{Token, Tokenizer};
    let toks = Tokenizer::new(&GenericDialect {}, query)
        .tokenize_with_location()
        .ok()?;
    let toks: Vec<_> = toks
        .into_iter()
        .filter(|t| !matches!(t.token, Token::Whitespace(_)))
        .collect();
    toks.windows(4).find_map(|w| {
        let after_from = matches!(&w[0].token, Token::Word(k) if matches!(k.keyword, Keyword::FROM | Keyword::JOIN));
        match (&w[1].token, &w[2].token, &w[3].token) {
            (Token::Word(s), Token::Period, Token::Word(t)) if after_from => {
                let rel = find(&s.value, &t.value)?;
                let start = crate::diag::offset_of(
                    query,
                    w[1].span.start.line,
                    w[1].span.start.column,
                )?;
                let end = crate::diag::offset_of(query, w[3].span.end.line, w[3].span.end.column)?;
                Some((rel, start..end))
            }
            _ => None,
        }
    })
}

/// The statement rows' columns, in order.
pub fn statement_schema() -> SchemaRef {
    let f = |name: &str, dt: DataType, nullable: bool| Field::new(name, dt, nullable);
    Arc::new(Schema::new(vec![
        f("time", DataType::UInt64, false),
        f("start_time", DataType::UInt64, false),
        f("latency_ns", DataType::UInt64, false),
        f("pid", DataType::UInt32, false),
        f("fd", DataType::Int32, false),
        f("client_addr", DataType::Utf8, true),
        f("client_port", DataType::UInt16, true),
        f("kind", DataType::Utf8, false),
        f("query", DataType::Utf8, true),
        f("query_truncated", DataType::Boolean, false),
        f("statement", DataType::Utf8, true),
        f("tag", DataType::Utf8, true),
        f("rows", DataType::UInt64, true),
        f("sqlstate", DataType::Utf8, true),
        f("error_code", DataType::UInt32, true),
        f("error", DataType::Utf8, true),
        f("user", DataType::Utf8, true),
        f("database", DataType::Utf8, true),
    ]))
}

/// What each column of [`statement_schema`] holds, for `ebql describe` and the docs.
pub const COLUMN_DOCS: [(&str, &str); 18] = [
    ("time", "when the server wrote the response that completed the statement (CLOCK_MONOTONIC ns): windows hold a statement by its completion"),
    ("start_time", "when the server read the last byte of the request that ran it (ns)"),
    ("latency_ns", "time - start_time"),
    ("pid", "the server process (PostgreSQL: the backend)"),
    ("fd", "the client socket's descriptor in that process"),
    ("client_addr", "the client's IP address (TCP), read from the socket with the call that completed the statement; NULL for a Unix-domain socket. On the system call hooks, looked up when the statement is decoded: NULL too for a connection closed by then and (MySQL, a thread per connection) a connection's first batch of rows, when its descriptor may have served another client"),
    ("client_port", "the client's TCP port, as client_addr"),
    ("kind", "simple (a query's text), prepared (an execution of a prepared statement) or prepare_failed"),
    ("query", "the statement's text (cut to about 2,040 bytes); NULL for a prepared statement prepared before the capture began"),
    ("query_truncated", "bytes of the text were not captured"),
    ("statement", "the prepared statement's name (MySQL: its id); NULL for simple queries and PostgreSQL's unnamed statement"),
    ("tag", "PostgreSQL's command tag (SELECT 3, INSERT 0 1); NULL for MySQL"),
    ("rows", "rows returned or affected, when the response says"),
    ("sqlstate", "the error's SQLSTATE (42P01), NULL when the statement succeeded"),
    ("error_code", "MySQL's error number (1146); NULL for PostgreSQL"),
    ("error", "the error message, NULL when the statement succeeded"),
    ("user", "the connection's user, when its startup was captured"),
    ("database", "the connection's database, when its startup was captured"),
];

/// The hook a capture's programs run on: the socket tracepoints, or the
/// raw system call tracepoints (`raw_syscalls:sys_enter`/`sys_exit`, which
/// fire for every system call of the machine) as different program types.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CaptureHook {
    /// `tp_btf:sock:sock_recv_length` and `sock_send_length` (Linux 6.3),
    /// one program each ([`SOCKET_EVENTS`]): they fire inside `recvfrom`
    /// and `sendto` (and every other socket read and write) once the bytes
    /// moved, and the call's descriptor, buffer and number are the task's
    /// saved registers ([`crate::uregs`]). No pairing, and nothing else
    /// pays: attaching to the raw system call tracepoints sends every
    /// system call of every process through the kernel's traced path.
    Sockets,
    /// BTF-typed raw tracepoints (`tp_btf`, direct loads): about 35 ns a
    /// system call on the project's VM with an early-exit program.
    TpBtf,
    /// Raw tracepoints (`raw_tp`) for kernels without BTF: registers read
    /// with `bpf_probe_read_kernel`.
    RawTp,
    /// The tracefs tracepoints: the kernel builds a perf record for every
    /// system call before the program runs (about 210 ns a call on the
    /// project's VM, BENCHMARKS.md "Issue 21").
    Tracefs,
}

impl CaptureHook {
    /// The cheapest hook this kernel has (`has(event)`: whether the event
    /// loads here), unless `choice` (`--hook`) asks for one: `raw`, `raw_tp`
    /// and `tracefs` name the system call hooks.
    pub fn choose(choice: HookChoice, mut has: impl FnMut(&EventName) -> bool) -> CaptureHook {
        let raw = |kind| EventName::new(kind, "raw_syscalls", "sys_enter");
        let sockets = SOCKET_EVENTS.map(|e| {
            let (cat, name) = e.split_once(':').expect("category:name");
            EventName::new(EventKind::TpBtf, cat, name)
        });
        match choice {
            HookChoice::Tracefs => CaptureHook::Tracefs,
            HookChoice::RawTp if has(&raw(EventKind::RawTracepoint)) => CaptureHook::RawTp,
            HookChoice::Auto if sockets.iter().all(&mut has) => CaptureHook::Sockets,
            _ if has(&raw(EventKind::TpBtf)) => CaptureHook::TpBtf,
            _ if has(&raw(EventKind::RawTracepoint)) => CaptureHook::RawTp,
            _ => CaptureHook::Tracefs,
        }
    }
}

/// The socket tracepoints of [`CaptureHook::Sockets`] (`category:name`),
/// read by one program each: a socket read's, then a write's. Both have the
/// `sock_msg_length` event class's arguments (`sk`, `ret`, `flags`).
pub const SOCKET_EVENTS: [&str; 2] = ["sock:sock_recv_length", "sock:sock_send_length"];

/// The capture of `rel` as eBQL text, on `hook`: the server processes'
/// `recvfrom` and `sendto` calls that moved bytes, each row the call's
/// time (its exit), process, descriptor, system call number, length and
/// first [`CAPTURE_BYTES`] bytes (on [`CaptureHook::Sockets`], a write's
/// first [`RESPONSE_HEAD_BYTES`]), in `window`'s windows.
///
/// On the raw hooks the arguments are read from the registers of the
/// x86-64 system call ABI (`di`, `si`; the number from `orig_ax` at exit),
/// as the tracefs record has them for 64-bit processes. Like the syscall
/// numbers, this is x86-64 only: a 32-bit (ia32) server is not captured.
///
/// On [`CaptureHook::Sockets`] the text reads the first of
/// [`SOCKET_EVENTS`]; the capture is that query and the same over the
/// other event ([`capture_sql_on`]). There it also reads the socket's
/// peer when `peer` says so ([`PeerColumns`]).
pub fn capture_sql(
    rel: &WireRelation,
    window: Option<&WindowSpec>,
    hook: CaptureHook,
    peer: PeerColumns,
) -> String {
    capture_sql_on(rel, window, hook, peer, SOCKET_EVENTS[0])
}

/// Whether a capture on [`CaptureHook::Sockets`] reads each call's socket
/// peer ([`PEER_FAMILY`] and the columns after it): only for a query that
/// reads the statements' `client_addr` or `client_port`, since every
/// captured call of the server then carries them (three loads and 48
/// bytes of its record).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PeerColumns {
    /// The capture reads the peer.
    Read,
    /// It does not: the query reads neither client column.
    Skipped,
}

impl PeerColumns {
    /// For a query reading the columns `projection` of [`statement_schema`].
    pub fn for_projection(projection: &[usize]) -> PeerColumns {
        let schema = statement_schema();
        let reads = projection.iter().any(|&i| {
            matches!(
                schema.field(i).name().as_str(),
                "client_addr" | "client_port"
            )
        });
        if reads {
            PeerColumns::Read
        } else {
            PeerColumns::Skipped
        }
    }
}

/// [`capture_sql`], on [`CaptureHook::Sockets`] over `socket_event` (one
/// of [`SOCKET_EVENTS`]); the other hooks ignore it.
pub fn capture_sql_on(
    rel: &WireRelation,
    window: Option<&WindowSpec>,
    hook: CaptureHook,
    peer: PeerColumns,
    socket_event: &str,
) -> String {
    let comms = rel
        .server_comm
        .iter()
        .map(|c| format!("'{c}'"))
        .collect::<Vec<_>>()
        .join(", ");
    let window = match window {
        Some(WindowSpec::Time { size_ns, step_ns }) => format!(
            " WINDOW(time, {}, {})",
            size_ns / 1_000_000,
            step_ns / 1_000_000
        ),
        _ => String::new(),
    };
    // The tail: the last CAPTURE_TAIL_BYTES of a call longer than the prefix
    // (length 0, nothing read, for the others: ret / (CAPTURE_BYTES + 1) is 0).
    let (t, over) = (CAPTURE_TAIL_BYTES, CAPTURE_BYTES + 1);
    let (kind, fd, buf, nr) = match hook {
        // One program per socket event, no pairing: the registers hold the call.
        CaptureHook::Sockets => {
            let (fd, buf, nr) = ("uregs('di')", "uregs('si')", "uregs('orig_ax')");
            // `ret` is an int here: widened, the tail's arithmetic is unsigned 64-bit as below.
            let len = "unsigned(CAST(ret AS BIGINT))";
            // A write keeps its first RESPONSE_HEAD_BYTES: min(len, head)
            // without a conditional, `past` 1 when len is over the head
            // (len / over < 2^32: ret is an int).
            let (head, data_len) = if socket_event == SOCKET_EVENTS[1] {
                let (head, over) = (RESPONSE_HEAD_BYTES, RESPONSE_HEAD_BYTES + 1);
                let past = format!("(({len} / {over} + 4294967295) >> 32)");
                (head, format!("{len} - {past} * ({len} - {head})"))
            } else {
                (CAPTURE_BYTES, "ret".to_string())
            };
            let over = head + 1;
            return format!(
                "SELECT time, pid, {fd} AS fd, {nr} AS id, ret, {peer}\
                 bytes({buf} + {len} - {t}, {len} / {over} * {t}, {t}) AS tail, \
                 bytes({buf}, {data_len}, {CAPTURE_BYTES}) AS data \
                 FROM tp_btf:{socket_event} \
                 WHERE {nr} IN ({RECVFROM}, {SENDTO}) AND ret > 0 AND comm IN ({comms}){window}",
                peer = match peer {
                    PeerColumns::Read => peer_columns(),
                    PeerColumns::Skipped => String::new(),
                },
            );
        }
        CaptureHook::TpBtf => ("tp_btf", "e.regs.di", "e.regs.si", "x.regs.orig_ax"),
        CaptureHook::RawTp => ("raw_tp", "e.regs.di", "e.regs.si", "x.regs.orig_ax"),
        CaptureHook::Tracefs => ("tracepoint", "e.args[0]", "e.args[1]", "x.id"),
    };
    format!(
        "SELECT x.time AS time, x.pid AS pid, {fd} AS fd, {nr} AS id, x.ret AS ret, \
         bytes({buf} + unsigned(x.ret) - {t}, unsigned(x.ret) / {over} * {t}, {t}) AS tail, \
         bytes({buf}, x.ret, {CAPTURE_BYTES}) AS data \
         FROM {kind}:raw_syscalls:sys_enter e \
         JOIN {kind}:raw_syscalls:sys_exit x ON e.tid = x.tid \
         WHERE e.id IN ({RECVFROM}, {SENDTO}) AND {nr} IN ({RECVFROM}, {SENDTO}) \
         AND x.ret > 0 AND e.comm IN ({comms}){window}"
    )
}

/// The capture's columns of the call's socket peer on [`CaptureHook::Sockets`]
/// (the tracepoints' `sk`), each followed by `, `: its address family
/// ([`PEER_FAMILY`]), port ([`PEER_PORT`], network byte order), IPv4
/// address ([`PEER_V4`], in memory order) and, for an `AF_INET6` socket
/// only, its IPv6 address ([`PEER_V6`], 16 bytes read from `struct
/// sock_common`'s `skc_v6_daddr`, whose offset kernel BTF gives; a kernel
/// without it has no IPv6 sockets). Read with the call, they name the client
/// of the connection at that moment, whatever happens to the descriptor later.
fn peer_columns() -> String {
    let common = "sk.__sk_common";
    let v6 = ebql_catalog::kernel_member_offset("sock", &["__sk_common", "skc_v6_daddr"])
        .map(|off| {
            // 16 bytes for AF_INET6 (10), none for AF_UNIX (1) and AF_INET (2).
            format!("bytes(sk + {off}, unsigned(CAST({common}.skc_family AS BIGINT)) / {AF_INET6} * 16, 16) AS {PEER_V6}, ")
        })
        .unwrap_or_default();
    format!(
        "{common}.skc_family AS {PEER_FAMILY}, {common}.skc_dport AS {PEER_PORT}, \
         {common}.skc_daddr AS {PEER_V4}, {v6}"
    )
}

/// The peer's address family column of the socket capture (`AF_INET`, `AF_INET6`, …).
pub const PEER_FAMILY: &str = "peer_family";
/// The peer's TCP port column, network byte order as `struct sock_common` keeps it.
pub const PEER_PORT: &str = "peer_port";
/// The peer's IPv4 address column, its bytes in memory in address order.
pub const PEER_V4: &str = "peer_v4";
/// The peer's IPv6 address column (`bytes()`, 16 bytes for an `AF_INET6` socket).
pub const PEER_V6: &str = "peer_v6";
/// `AF_INET6` in Linux (`include/linux/socket.h`).
pub const AF_INET6: u16 = 10;
/// `AF_INET` in Linux.
pub const AF_INET: u16 = 2;

/// `recvfrom`'s system call number on x86-64: a read of the client's bytes.
pub const RECVFROM: u64 = 45;

/// `sendto`'s system call number on x86-64: a write of the server's bytes.
pub const SENDTO: u64 = 44;

/// Why `window` cannot cut a wire relation's rows, if it cannot.
pub fn check_window(
    window: Option<&WindowSpec>,
    span: Option<std::ops::Range<usize>>,
) -> Result<(), Diagnostic> {
    match window {
        Some(WindowSpec::Count { .. }) => Err(Diagnostic::new(
            "count windows count the captured system calls, not statements",
            span,
        )
        .with_hint("use a time window over statements, e.g. WINDOW(time, 1000, 1000)")),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The capture runs on the socket tracepoints where the kernel has
    /// them, else on the raw system call hooks: tp_btf where the kernel has
    /// it, raw_tp without BTF, tracefs when asked or when nothing else loads.
    #[test]
    fn the_capture_takes_the_cheapest_hook_the_kernel_has() {
        let all = |_: &EventName| true;
        let no_sockets = |e: &EventName| e.category != "sock";
        let no_btf = |e: &EventName| e.kind != EventKind::TpBtf;
        assert_eq!(
            CaptureHook::choose(HookChoice::Auto, all),
            CaptureHook::Sockets
        );
        assert_eq!(
            CaptureHook::choose(HookChoice::Auto, no_sockets),
            CaptureHook::TpBtf
        );
        assert_eq!(
            CaptureHook::choose(HookChoice::Raw, all),
            CaptureHook::TpBtf
        );
        assert_eq!(
            CaptureHook::choose(HookChoice::Auto, no_btf),
            CaptureHook::RawTp
        );
        assert_eq!(
            CaptureHook::choose(HookChoice::RawTp, all),
            CaptureHook::RawTp
        );
        assert_eq!(
            CaptureHook::choose(HookChoice::Tracefs, all),
            CaptureHook::Tracefs
        );
        assert_eq!(
            CaptureHook::choose(HookChoice::Auto, |_: &EventName| false),
            CaptureHook::Tracefs
        );
        let rel = &RELATIONS[0];
        let raw = capture_sql(rel, None, CaptureHook::TpBtf, PeerColumns::Read);
        assert!(
            raw.contains("FROM tp_btf:raw_syscalls:sys_enter e"),
            "{raw}"
        );
        assert!(raw.contains("bytes(e.regs.si, x.ret, 2048)"), "{raw}");
        let sockets = capture_sql(rel, None, CaptureHook::Sockets, PeerColumns::Read);
        assert!(
            sockets.contains("FROM tp_btf:sock:sock_recv_length")
                && sockets.contains("bytes(uregs('si'), ret, 2048)"),
            "{sockets}"
        );
        // A write keeps its first 512 bytes, a tail past them (it::btf has the bytes).
        let writes = capture_sql_on(
            rel,
            None,
            CaptureHook::Sockets,
            PeerColumns::Read,
            SOCKET_EVENTS[1],
        );
        assert!(
            writes.contains("FROM tp_btf:sock:sock_send_length")
                && writes.contains("/ 513 * 256, 256) AS tail")
                && !writes.contains("bytes(uregs('si'), ret, 2048)"),
            "{writes}"
        );
        let tracefs = capture_sql(rel, None, CaptureHook::Tracefs, PeerColumns::Read);
        assert!(
            tracefs.contains("bytes(e.args[1], x.ret, 2048)"),
            "{tracefs}"
        );
    }
}
