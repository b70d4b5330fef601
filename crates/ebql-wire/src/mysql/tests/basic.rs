//! Whole conversations, one chunk per system call: the rows and counters.

use super::enc::*;
use crate::mysql::wire::*;
use crate::mysql::MyDecoder;
use crate::{Counters, Decoder, Kind};

const EOF_CAPS: u64 = CLIENT_CAPS | CLIENT_SESSION_TRACK;
const NO_EOF_CAPS: u64 = EOF_CAPS | CLIENT_DEPRECATE_EOF;

fn counters(chunks: u64) -> Counters {
    Counters {
        chunks,
        ..Counters::default()
    }
}

#[test]
fn handshake_gives_user_and_database() {
    let mut s = Script::default();
    s.connect(CLIENT_CAPS, "app", Some("shop"));
    let t0 = s.command(&cmd(COM_QUERY, b"SELECT 1"));
    let t1 = s.server(&result_set(&["1"], &[text_row(&[b"1"])], false, 2));
    let mut d = MyDecoder::new();
    let out = feed(&mut d, &s.segs);
    assert_eq!(
        out,
        vec![row(Kind::Simple, Some("SELECT 1"), t0, t1, Some(1))]
    );
    assert_eq!(d.counters(), &counters(5));

    // No database in the login: none in the rows.
    let mut s = Script::default();
    s.connect(CLIENT_CAPS, "app", None);
    s.command(&cmd(COM_QUERY, b"SELECT 1"));
    s.server(&result_set(&["1"], &[text_row(&[b"1"])], false, 2));
    let out = feed(&mut MyDecoder::new(), &s.segs);
    assert_eq!(
        (out[0].user.as_deref(), out[0].database.as_deref()),
        (Some("app"), None)
    );
}

#[test]
fn auth_switch_then_ok() {
    let mut s = Script::default();
    s.greet(SERVER_CAPS);
    s.client(&login(CLIENT_CAPS, "app", Some("shop")));
    s.server(&[b"\xfeclient_ed25519\0scramble".to_vec()]);
    s.client(&[0x22; 64]);
    s.server(&[ok(0, 2)]);
    let t0 = s.command(&cmd(COM_QUERY, b"DELETE FROM t"));
    let t1 = s.server(&[ok(3, 2)]);
    let out = feed(&mut MyDecoder::new(), &s.segs);
    assert_eq!(
        out,
        vec![row(Kind::Simple, Some("DELETE FROM t"), t0, t1, Some(3))]
    );
}

#[test]
fn select_with_and_without_deprecate_eof() {
    for caps in [EOF_CAPS, NO_EOF_CAPS] {
        let deprecate = caps & CLIENT_DEPRECATE_EOF != 0;
        let mut s = Script::default();
        s.connect(caps, "app", Some("shop"));
        let rows = [
            text_row(&[b"1", b"x"]),
            text_row(&[b"2", b""]),
            text_row(&[b"3", b"z"]),
        ];
        let a = s.command(&cmd(COM_QUERY, b"SELECT id, v FROM t"));
        let b = s.server(&result_set(&["id", "v"], &rows, deprecate, 2));
        // Zero rows.
        let c = s.command(&cmd(COM_QUERY, b"SELECT id FROM t WHERE 0"));
        let d = s.server(&result_set(&["id"], &[], deprecate, 2));
        let mut dec = MyDecoder::new();
        let out = feed(&mut dec, &s.segs);
        assert_eq!(
            out,
            vec![
                row(Kind::Simple, Some("SELECT id, v FROM t"), a, b, Some(3)),
                row(
                    Kind::Simple,
                    Some("SELECT id FROM t WHERE 0"),
                    c,
                    d,
                    Some(0)
                ),
            ],
            "deprecate_eof {deprecate}"
        );
        assert_eq!(dec.counters(), &counters(7));
    }
}

#[test]
fn insert_affected_rows_and_failed_query() {
    let mut s = Script::default();
    s.connect(CLIENT_CAPS, "app", Some("shop"));
    let a = s.command(&cmd(COM_QUERY, b"INSERT INTO a(v) VALUES('x'),('y')"));
    let b = s.server(&[ok(2, 2)]);
    let c = s.command(&cmd(COM_QUERY, b"select * from nope"));
    let d = s.server(&[err(1146, "42S02", "Table 'shop.nope' doesn't exist")]);
    let mut dec = MyDecoder::new();
    let out = feed(&mut dec, &s.segs);
    let mut failed = row(Kind::Simple, Some("select * from nope"), c, d, None);
    failed.error = error(1146, "42S02", "Table 'shop.nope' doesn't exist");
    assert_eq!(
        out,
        vec![
            row(
                Kind::Simple,
                Some("INSERT INTO a(v) VALUES('x'),('y')"),
                a,
                b,
                Some(2)
            ),
            failed
        ]
    );
    assert_eq!(dec.counters(), &counters(7));
}

#[test]
fn multi_statement_sums_rows() {
    let more = 2 | SERVER_MORE_RESULTS_EXISTS;
    for deprecate in [false, true] {
        let caps = if deprecate { NO_EOF_CAPS } else { EOF_CAPS };
        let mut s = Script::default();
        s.connect(caps, "app", Some("shop"));
        let a = s.command(&cmd(
            COM_QUERY,
            b"select 1; insert into t values (1),(2); select 2, 3",
        ));
        // As MariaDB writes them: one chunk per result.
        s.server(&result_set(&["1"], &[text_row(&[b"1"])], deprecate, more));
        s.server(&[ok(2, more)]);
        let b = s.server(&result_set(
            &["2", "3"],
            &[text_row(&[b"2", b"3"])],
            deprecate,
            2,
        ));
        // A failing part ends the response: rows of the parts before it.
        let c = s.command(&cmd(COM_QUERY, b"select 1; select * from nope; select 3"));
        s.server(&result_set(&["1"], &[text_row(&[b"1"])], deprecate, more));
        let d = s.server(&[err(1146, "42S02", "no")]);
        let out = feed(&mut MyDecoder::new(), &s.segs);
        let mut failed = row(
            Kind::Simple,
            Some("select 1; select * from nope; select 3"),
            c,
            d,
            Some(1),
        );
        failed.error = error(1146, "42S02", "no");
        assert_eq!(
            out,
            vec![
                row(
                    Kind::Simple,
                    Some("select 1; insert into t values (1),(2); select 2, 3"),
                    a,
                    b,
                    Some(4)
                ),
                failed
            ]
        );
    }
}

/// Prepare, then executes with binary parameters (zero bytes, NULLs), as
/// MariaDB answered pymysql (`strace`), with and without CLIENT_DEPRECATE_EOF.
#[test]
fn prepared_statements() {
    for caps in [EOF_CAPS, NO_EOF_CAPS] {
        let deprecate = caps & CLIENT_DEPRECATE_EOF != 0;
        let text = "select id, v from a where id > ?";
        let mut s = Script::default();
        s.connect(caps, "app", Some("shop"));
        s.command(&cmd(COM_STMT_PREPARE, text.as_bytes()));
        s.server(&prepare_ok(1, 2, 1, deprecate));
        let mut want = Vec::new();
        for (param, n) in [
            (Some(0), 2),
            (Some(1), 1),
            (None, 0),
            (Some(0x0100_0000_0000), 0),
        ] {
            let t0 = s.command(&execute(1, &[param]));
            let rows: Vec<_> = (0..n).map(|i| binary_row(&[i, 0])).collect();
            let t1 = s.server(&result_set(&["id", "v"], &rows, deprecate, 2));
            let mut r = row(Kind::Prepared, Some(text), t0, t1, Some(n as u64));
            r.name = Some("1".into());
            want.push(r);
        }
        // An INSERT prepared and executed: OK with affected rows.
        s.command(&cmd(COM_STMT_PREPARE, b"insert into a(v) values (?)"));
        s.server(&prepare_ok(2, 0, 1, deprecate));
        let t0 = s.command(&execute(2, &[Some(0)]));
        let t1 = s.server(&[ok(1, 2)]);
        let mut r = row(
            Kind::Prepared,
            Some("insert into a(v) values (?)"),
            t0,
            t1,
            Some(1),
        );
        r.name = Some("2".into());
        want.push(r);
        let mut dec = MyDecoder::new();
        assert_eq!(feed(&mut dec, &s.segs), want, "deprecate_eof {deprecate}");
        assert_eq!(dec.counters(), &counters(s.segs.len() as u64));
    }
}

#[test]
fn prepare_failure_and_unknown_statement() {
    let mut s = Script::default();
    s.connect(EOF_CAPS, "app", Some("shop"));
    let a = s.command(&cmd(COM_STMT_PREPARE, b"select nope from a"));
    let b = s.server(&[err(1054, "42S22", "Unknown column 'nope' in 'SELECT'")]);
    // Executing an id never prepared (MariaDB answers ERR 1243).
    let c = s.command(&execute(9, &[]));
    let d = s.server(&[err(1243, "HY000", "Unknown prepared statement handler")]);
    // Prepared, closed (no response), executed.
    s.command(&cmd(COM_STMT_PREPARE, b"select 1"));
    s.server(&prepare_ok(3, 1, 0, false));
    s.command(&cmd(COM_STMT_CLOSE, &3u32.to_le_bytes()));
    let e = s.command(&execute(3, &[]));
    let f = s.server(&[err(1243, "HY000", "Unknown prepared statement handler")]);
    let mut dec = MyDecoder::new();
    let out = feed(&mut dec, &s.segs);
    let mut r0 = row(Kind::PrepareFailed, Some("select nope from a"), a, b, None);
    r0.error = error(1054, "42S22", "Unknown column 'nope' in 'SELECT'");
    let mut r1 = row(Kind::Prepared, None, c, d, None);
    r1.name = Some("9".into());
    r1.error = error(1243, "HY000", "Unknown prepared statement handler");
    let mut r2 = r1.clone();
    (r2.start_ns, r2.end_ns, r2.name) = (e, f, Some("3".into()));
    assert_eq!(out, vec![r0, r1, r2]);
    let mut want = counters(s.segs.len() as u64);
    want.unknown_prepared = 2;
    assert_eq!(dec.counters(), &want);
}

#[test]
fn init_db_change_user_and_session_schema() {
    let mut s = Script::default();
    s.connect(EOF_CAPS, "app", Some("shop"));
    s.command(&cmd(COM_INIT_DB, b"sales"));
    s.server(&[ok(0, 2)]);
    s.command(&cmd(COM_QUERY, b"select 1"));
    s.server(&result_set(&["1"], &[text_row(&[b"1"])], false, 2));
    // `USE` through COM_QUERY: the OK reports the new schema.
    s.command(&cmd(COM_QUERY, b"use hr"));
    s.server(&[ok_schema("hr")]);
    s.command(&cmd(COM_QUERY, b"select 2"));
    s.server(&[ok(0, 2)]);
    // A COM_INIT_DB that fails changes nothing.
    s.command(&cmd(COM_INIT_DB, b"nope"));
    s.server(&[err(1049, "42000", "Unknown database 'nope'")]);
    s.command(&cmd(COM_PING, b""));
    s.server(&[ok(0, 2)]);
    s.command(&cmd(COM_QUERY, b"select 3"));
    s.server(&[ok(0, 2)]);
    // COM_CHANGE_USER with an auth switch.
    let mut body = b"bob\0".to_vec();
    body.push(20);
    body.extend_from_slice(&[7; 20]);
    body.extend_from_slice(b"crm\0");
    s.command(&cmd(COM_CHANGE_USER, &body));
    s.server(&[b"\xfemysql_native_password\0abc".to_vec()]);
    s.client(&[9; 20]);
    s.server(&[ok(0, 2)]);
    s.command(&cmd(COM_QUERY, b"select 4"));
    s.server(&[ok(0, 2)]);
    let mut dec = MyDecoder::new();
    let out = feed(&mut dec, &s.segs);
    let got: Vec<_> = out
        .iter()
        .map(|r| {
            (
                String::from_utf8_lossy(r.text.as_deref().unwrap()).into_owned(),
                r.user.clone().unwrap(),
                r.database.clone().unwrap(),
            )
        })
        .collect();
    let want = [
        ("select 1", "app", "sales"),
        ("use hr", "app", "sales"),
        ("select 2", "app", "hr"),
        ("select 3", "app", "hr"),
        ("select 4", "bob", "crm"),
    ];
    let want: Vec<_> = want
        .iter()
        .map(|(a, b, c)| (a.to_string(), b.to_string(), c.to_string()))
        .collect();
    assert_eq!(got, want);
    assert_eq!(dec.counters(), &counters(s.segs.len() as u64));
}

#[test]
fn local_infile_and_other_commands() {
    let mut s = Script::default();
    s.connect(EOF_CAPS, "app", Some("shop"));
    let a = s.command(&cmd(COM_QUERY, b"LOAD DATA LOCAL INFILE 'f' INTO TABLE t"));
    s.server(&[b"\xfbf".to_vec()]);
    s.client(b"1\n2\n3\n");
    s.client(b"");
    let b = s.server(&[ok(3, 2)]);
    // Responses of other shapes: field list, statistics, set option, reset.
    s.command(&cmd(COM_FIELD_LIST, b"t\0"));
    s.server(&[column("id"), column("v"), eof(2)]);
    s.command(&cmd(COM_STATISTICS, b""));
    s.server(&[b"Uptime: 10  Threads: 1".to_vec()]);
    s.command(&cmd(COM_SET_OPTION, &[0, 0]));
    s.server(&[eof(2)]);
    s.command(&cmd(COM_STMT_RESET, &1u32.to_le_bytes()));
    s.server(&[err(1243, "HY000", "Unknown prepared statement handler")]);
    let c = s.command(&cmd(COM_QUERY, b"select 1"));
    // A MariaDB progress report before the result.
    let d = s.server(&[b"\xff\xff\xff\x01\x01\x02\x00\x00\x00".to_vec(), ok(0, 2)]);
    s.command(&cmd(COM_QUIT, b""));
    let mut dec = MyDecoder::new();
    let out = feed(&mut dec, &s.segs);
    assert_eq!(
        out,
        vec![
            row(
                Kind::Simple,
                Some("LOAD DATA LOCAL INFILE 'f' INTO TABLE t"),
                a,
                b,
                Some(3)
            ),
            row(Kind::Simple, Some("select 1"), c, d, Some(0)),
        ]
    );
    assert_eq!(dec.counters(), &counters(s.segs.len() as u64));
}

#[test]
fn tls_is_counted_and_skipped() {
    let mut s = Script::default();
    s.greet(SERVER_CAPS);
    s.client(&ssl_request(CLIENT_CAPS));
    for _ in 0..3 {
        s.segs.push(Seg {
            dir: crate::Direction::Read,
            bytes: b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03".to_vec(),
            time: 1,
        });
        s.segs.push(Seg {
            dir: crate::Direction::Write,
            bytes: b"\x17\x03\x03\x00\x05hello".to_vec(),
            time: 1,
        });
    }
    let mut dec = MyDecoder::new();
    assert!(feed(&mut dec, &s.segs).is_empty());
    let mut want = counters(8);
    want.tls_connections = 1;
    want.tls_chunks = 6;
    assert_eq!(dec.counters(), &want);
    // The descriptor is reused without a close seen: a new Handshake starts afresh.
    let mut s = Script::default();
    s.connect(CLIENT_CAPS, "app", Some("shop"));
    let a = s.command(&cmd(COM_QUERY, b"select 1"));
    let b = s.server(&[ok(0, 2)]);
    assert_eq!(
        feed(&mut dec, &s.segs),
        vec![row(Kind::Simple, Some("select 1"), a, b, Some(0))]
    );
    assert_eq!(dec.counters().tls_chunks, 6);
}

#[test]
fn close_counts_unfinished_and_compression_is_skipped() {
    let mut s = Script::default();
    s.connect(CLIENT_CAPS, "app", Some("shop"));
    s.command(&cmd(COM_QUERY, b"select sleep(100)"));
    let mut dec = MyDecoder::new();
    assert!(feed(&mut dec, &s.segs).is_empty());
    dec.close(KEY);
    let mut want = counters(4);
    want.unfinished = 1;
    assert_eq!(dec.counters(), &want);

    let mut s = Script::default();
    s.connect(CLIENT_CAPS | CLIENT_COMPRESS, "app", Some("shop"));
    s.command(&cmd(COM_QUERY, b"select 1"));
    s.server(&[ok(0, 2)]);
    let mut dec = MyDecoder::new();
    assert!(feed(&mut dec, &s.segs).is_empty());
    let mut want = counters(5);
    want.chunks_skipped = 2;
    assert_eq!(dec.counters(), &want);
}

#[test]
fn unmatched_response_and_lost_response() {
    let mut s = Script::default();
    s.connect(CLIENT_CAPS, "app", Some("shop"));
    s.command(&cmd(COM_QUERY, b"select 1"));
    s.server(&[ok(0, 2)]);
    let mut segs = s.segs.clone();
    // A response nobody asked for.
    segs.push(segs[4].clone());
    // The response to a command lost: the next command pairs right.
    let mut s2 = Script::default();
    s2.command(&cmd(COM_QUERY, b"select 2"));
    s2.server(&[ok(0, 2)]);
    let a = s2.command(&cmd(COM_QUERY, b"select 3"));
    let b = s2.server(&[ok(7, 2)]);
    segs.push(s2.segs[0].clone());
    segs.extend(s2.segs[2..].iter().cloned());
    let mut dec = MyDecoder::new();
    let out = feed(&mut dec, &segs);
    assert_eq!(out.len(), 2);
    assert_eq!(out[1], row(Kind::Simple, Some("select 3"), a, b, Some(7)));
    let mut want = counters(segs.len() as u64);
    want.responses_unmatched = 1;
    want.desyncs = 1;
    assert_eq!(dec.counters(), &want);
}

#[test]
fn cursor_fetch_and_bulk_execute() {
    let mut s = Script::default();
    s.connect(EOF_CAPS, "app", Some("shop"));
    s.command(&cmd(COM_STMT_PREPARE, b"select id from t"));
    s.server(&prepare_ok(4, 1, 0, false));
    // Executed with a read-only cursor: definitions, an EOF saying a
    // cursor exists, no rows; the rows come with COM_STMT_FETCH.
    let mut exec = execute(4, &[]);
    exec[5] = 1;
    let a = s.command(&exec);
    let b = s.server(&[vec![1], column("id"), eof(2 | SERVER_STATUS_CURSOR_EXISTS)]);
    let mut fetch = 4u32.to_le_bytes().to_vec();
    fetch.extend_from_slice(&100u32.to_le_bytes());
    s.command(&cmd(COM_STMT_FETCH, &fetch));
    s.server(&[binary_row(&[1]), binary_row(&[2]), eof(2 | 0x80)]);
    // MariaDB's bulk execution of "the last prepared" (id 0xffffffff).
    s.command(&cmd(COM_STMT_PREPARE, b"insert into t values (?)"));
    s.server(&prepare_ok(5, 0, 1, false));
    let mut bulk = vec![COM_STMT_BULK_EXECUTE];
    bulk.extend_from_slice(&u32::MAX.to_le_bytes());
    bulk.extend_from_slice(&[0x80, 0, 0x08, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0]);
    let c = s.command(&bulk);
    let e = s.server(&[ok(2, 2)]);
    let mut dec = MyDecoder::new();
    let out = feed(&mut dec, &s.segs);
    let mut r0 = row(Kind::Prepared, Some("select id from t"), a, b, None);
    r0.name = Some("4".into());
    let mut r1 = row(
        Kind::Prepared,
        Some("insert into t values (?)"),
        c,
        e,
        Some(2),
    );
    r1.name = Some("5".into());
    assert_eq!(out, vec![r0, r1]);
    assert_eq!(dec.counters(), &counters(s.segs.len() as u64));
}

#[test]
fn query_attributes() {
    // Negotiated (MySQL 8): the count and set count precede the text, and
    // attribute values when there are some.
    let caps = CLIENT_CAPS | CLIENT_QUERY_ATTRIBUTES;
    let mut s = Script::default();
    s.greet(SERVER_CAPS | CLIENT_QUERY_ATTRIBUTES);
    s.client(&login(caps, "app", Some("shop")));
    s.server(&[ok(0, 2)]);
    s.command(&cmd(COM_QUERY, b"\x00\x01select 1"));
    s.server(&[ok(0, 2)]);
    let mut attrs = vec![1, 1, 0, 1, 0xfd, 0, 2];
    attrs.extend_from_slice(b"id");
    lenenc_bytes(b"trace-7", &mut attrs);
    attrs.extend_from_slice(b"select 2");
    s.command(&cmd(COM_QUERY, &attrs));
    s.server(&[ok(0, 2)]);
    let texts = |segs: &[Seg]| -> Vec<Vec<u8>> {
        feed(&mut MyDecoder::new(), segs)
            .into_iter()
            .map(|r| r.text.unwrap())
            .collect()
    };
    assert_eq!(
        texts(&s.segs),
        vec![b"select 1".to_vec(), b"select 2".to_vec()]
    );
    // Not negotiated: the text as sent.
    let mut plain = s.segs.clone();
    plain[0].bytes.clear();
    packets(0, &greeting(SERVER_CAPS), &mut plain[0].bytes);
    assert_eq!(texts(&plain)[0], b"\x00\x01select 1".to_vec());
    // Joined mid-stream (capabilities unknown): recognized by their shape.
    assert_eq!(
        texts(&s.segs[3..]),
        vec![b"select 1".to_vec(), b"select 2".to_vec()]
    );
}
