//! The extended query protocol: Parse, Bind, Describe, Execute, Close, Sync.

use super::wire::*;
use super::*;

#[test]
fn unnamed_statement_in_one_chunk() {
    // libpq's PQexecParams: P/B/D/E/S in one read, the answer in one write.
    let mut c = Conv::new(1, 7);
    c.login();
    let text = "select $1::int";
    let req = [
        parse("", text, &[23]),
        bind("", "", &[], &[Some(b"5")], &[]),
        describe(b'P', ""),
        execute("", 0),
        sync(),
    ];
    let s = c.read(&req.concat());
    let resp = [
        parse_complete(),
        bind_complete(),
        row_description(&["int4"]),
        one_row(),
        ready(b'I'),
    ];
    let e = c.write(&resp.concat());
    let (out, counters) = run(&c.evs);
    assert_eq!(
        out,
        vec![exec_row(&c, None, text, (s, e), "SELECT 1", Some(1))]
    );
    assert_eq!(counters, chunks(6));
}

#[test]
fn named_statement_reused() {
    // pgbench -M prepared: Parse once, then Bind/Execute/Sync per transaction.
    let mut c = Conv::new(1, 7);
    c.login();
    let text = "UPDATE pgbench_accounts SET abalance = abalance + $1 WHERE aid = $2";
    c.read(&[parse("P0_1", text, &[]), sync()].concat());
    c.write(&[parse_complete(), ready(b'I')].concat());
    let mut expect = Vec::new();
    for i in 0..3 {
        let v = i.to_string();
        let s = c.read(
            &[
                bind("", "P0_1", &[], &[Some(v.as_bytes()), Some(b"17")], &[]),
                execute("", 0),
                sync(),
            ]
            .concat(),
        );
        let e = c.write(&[bind_complete(), command_complete("UPDATE 1"), ready(b'I')].concat());
        expect.push(exec_row(
            &c,
            Some("P0_1"),
            text,
            (s, e),
            "UPDATE 1",
            Some(1),
        ));
    }
    let (out, counters) = run(&c.evs);
    assert_eq!(out, expect);
    assert_eq!(counters, chunks(12));
}

#[test]
fn binary_parameters() {
    let mut c = Conv::new(1, 7);
    c.login();
    let text = "insert into blobs values ($1, $2, $3)";
    let zeros = [0u8, 0, 0, 0, b'Q', 0, 0, 0, 5, 0, 0xff];
    let int8 = 7i64.to_be_bytes();
    let req = [
        parse("ins", text, &[17, 20, 25]),
        bind("", "ins", &[1], &[Some(&zeros), Some(&int8), None], &[1]),
        execute("", 0),
        sync(),
    ];
    let s = c.read(&req.concat());
    let e = c.write(
        &[
            parse_complete(),
            bind_complete(),
            command_complete("INSERT 0 1"),
            ready(b'I'),
        ]
        .concat(),
    );
    let (out, counters) = run(&c.evs);
    assert_eq!(
        out,
        vec![exec_row(
            &c,
            Some("ins"),
            text,
            (s, e),
            "INSERT 0 1",
            Some(1)
        )]
    );
    assert_eq!(counters, chunks(6));
}

#[test]
fn describe_statement_then_execute() {
    let mut c = Conv::new(1, 7);
    c.login();
    let text = "select a, b from t where id = $1";
    c.read(&[parse("s1", text, &[]), describe(b'S', "s1"), sync()].concat());
    let resp = [
        parse_complete(),
        parameter_description(&[23]),
        row_description(&["a", "b"]),
        ready(b'I'),
    ];
    c.write(&resp.concat());
    // A statement without result columns: NoData.
    c.read(
        &[
            parse("s2", "delete from t", &[]),
            describe(b'S', "s2"),
            sync(),
        ]
        .concat(),
    );
    c.write(
        &[
            parse_complete(),
            parameter_description(&[]),
            no_data(),
            ready(b'I'),
        ]
        .concat(),
    );
    let s = c.read(
        &[
            bind("p", "s1", &[], &[Some(b"1")], &[]),
            describe(b'P', "p"),
            execute("p", 0),
            sync(),
        ]
        .concat(),
    );
    let e = c.write(
        &[
            bind_complete(),
            row_description(&["a", "b"]),
            one_row(),
            ready(b'I'),
        ]
        .concat(),
    );
    let (out, counters) = run(&c.evs);
    assert_eq!(
        out,
        vec![exec_row(&c, Some("s1"), text, (s, e), "SELECT 1", Some(1))]
    );
    assert_eq!(counters, chunks(10));
}

#[test]
fn pipelined_executes_with_one_sync() {
    let mut c = Conv::new(1, 7);
    c.login();
    let req = [
        parse("", "insert into t values (1)", &[]),
        bind0("", ""),
        execute("", 0),
        parse("", "insert into t values (2), (3)", &[]),
        bind0("", ""),
        execute("", 0),
        parse("", "select 1", &[]),
        bind0("", ""),
        execute("", 0),
        sync(),
    ];
    let s = c.read(&req.concat());
    let e1 = c.write(
        &[
            parse_complete(),
            bind_complete(),
            command_complete("INSERT 0 1"),
        ]
        .concat(),
    );
    let e2 = c.write(
        &[
            parse_complete(),
            bind_complete(),
            command_complete("INSERT 0 2"),
        ]
        .concat(),
    );
    let e3 = c.write(&[parse_complete(), bind_complete(), one_row(), ready(b'I')].concat());
    let (out, counters) = run(&c.evs);
    assert_eq!(
        out,
        vec![
            exec_row(
                &c,
                None,
                "insert into t values (1)",
                (s, e1),
                "INSERT 0 1",
                Some(1)
            ),
            exec_row(
                &c,
                None,
                "insert into t values (2), (3)",
                (s, e2),
                "INSERT 0 2",
                Some(2)
            ),
            exec_row(&c, None, "select 1", (s, e3), "SELECT 1", Some(1)),
        ]
    );
    assert_eq!(counters, chunks(8));
}

#[test]
fn close_forgets_the_statement() {
    let mut c = Conv::new(1, 7);
    c.login();
    c.read(&[parse("s", "select 1", &[]), sync()].concat());
    c.write(&[parse_complete(), ready(b'I')].concat());
    c.read(&[close(b'S', "s"), sync()].concat());
    c.write(&[close_complete(), ready(b'I')].concat());
    let s = c.read(&[bind0("", "s"), execute("", 0), sync()].concat());
    let msg = "prepared statement \"s\" does not exist";
    let e = c.write(&[error("26000", msg), ready(b'I')].concat());
    let (out, counters) = run(&c.evs);
    let expect = Statement {
        name: Some("s".into()),
        error: err("26000", msg),
        ..row(c.conn, Kind::PrepareFailed, None, s, e)
    };
    assert_eq!(out, vec![expect]);
    assert_eq!(
        counters,
        Counters {
            unknown_prepared: 1,
            ..chunks(10)
        }
    );
}

#[test]
fn portal_suspended_by_max_rows() {
    let mut c = Conv::new(1, 7);
    c.login();
    let text = "select x from t";
    let s = c.read(
        &[
            parse("", text, &[]),
            bind0("c1", ""),
            execute("c1", 2),
            flush(),
        ]
        .concat(),
    );
    let e = c.write(
        &[
            parse_complete(),
            bind_complete(),
            rows(2, 1),
            portal_suspended(),
        ]
        .concat(),
    );
    let s2 = c.read(&[execute("c1", 2), sync()].concat());
    let e2 = c.write(&[rows(1, 1), command_complete("SELECT 1"), ready(b'I')].concat());
    let (out, counters) = run(&c.evs);
    assert_eq!(
        out,
        vec![
            Statement {
                rows: Some(2),
                ..row(c.conn, Kind::Prepared, Some(text), s, e)
            },
            exec_row(&c, None, text, (s2, e2), "SELECT 1", Some(1)),
        ]
    );
    assert_eq!(counters, chunks(8));
}

#[test]
fn statement_prepared_before_the_capture() {
    // The connection is first seen mid-stream, executing a named statement.
    let mut c = Conv::new(1, 7);
    let s = c.read(&[bind0("", "S_1"), execute("", 0), sync()].concat());
    let e = c.write(&[bind_complete(), one_row(), ready(b'I')].concat());
    let (out, counters) = run(&c.evs);
    let expect = Statement {
        name: Some("S_1".into()),
        tag: Some("SELECT 1".into()),
        rows: Some(1),
        user: None,
        database: None,
        ..row(c.conn, Kind::Prepared, None, s, e)
    };
    assert_eq!(out, vec![expect]);
    assert_eq!(
        counters,
        Counters {
            unknown_prepared: 1,
            ..chunks(2)
        }
    );
}

#[test]
fn portals_end_with_their_transaction() {
    let mut c = Conv::new(1, 7);
    c.login();
    c.read(&[parse("", "select 1", &[]), bind0("cur", ""), sync()].concat());
    c.write(&[parse_complete(), bind_complete(), ready(b'I')].concat());
    // The server dropped "cur" at the end of the implicit transaction.
    let s = c.read(&[execute("cur", 0), sync()].concat());
    let e = c.write(&[error("34000", "portal \"cur\" does not exist"), ready(b'I')].concat());
    let (out, counters) = run(&c.evs);
    let expect = Statement {
        error: err("34000", "portal \"cur\" does not exist"),
        ..row(c.conn, Kind::Prepared, None, s, e)
    };
    assert_eq!(out, vec![expect]);
    assert_eq!(
        counters,
        Counters {
            unknown_prepared: 1,
            ..chunks(8)
        }
    );
}

#[test]
fn copy_from_stdin_in_the_extended_protocol() {
    // The Sync sent with the Execute is ignored during COPY FROM STDIN;
    // the one after CopyDone is answered.
    let mut c = Conv::new(1, 7);
    c.login();
    let text = "copy t from stdin";
    let s = c.read(&[parse("", text, &[]), bind0("", ""), execute("", 0), sync()].concat());
    c.write(&[parse_complete(), bind_complete(), copy_in_response(1)].concat());
    c.read(&[copy_data(b"1\n"), copy_data(b"2\n"), copy_done(), sync()].concat());
    let e = c.write(&[command_complete("COPY 2"), ready(b'I')].concat());
    let t = c.simple(
        "select 1",
        &[command_complete("SELECT 1"), ready(b'I')].concat(),
    );
    let (out, counters) = run(&c.evs);
    assert_eq!(
        out,
        vec![
            exec_row(&c, None, text, (s, e), "COPY 2", Some(2)),
            simple_row(c.conn, "select 1", t, "SELECT 1", Some(1)),
        ]
    );
    assert_eq!(counters, chunks(10));
}
