//! Errors in the extended query protocol: PrepareFailed rows, failed
//! Executes, the server skipping to the next Sync.

use super::wire::*;
use super::*;

#[test]
fn error_in_a_pipeline_skips_to_sync() {
    let mut c = Conv::new(1, 7);
    c.login();
    let req = [
        parse("", "select 1", &[]),
        bind0("", ""),
        execute("", 0),
        parse("", "select 1/0", &[]),
        bind0("", ""),
        execute("", 0),
        parse("", "select 3", &[]),
        bind0("", ""),
        execute("", 0),
        sync(),
    ];
    let s = c.read(&req.concat());
    let resp = [
        parse_complete(),
        bind_complete(),
        one_row(),
        parse_complete(),
        bind_complete(),
        error("22012", "division by zero"),
        ready(b'I'),
    ];
    let e = c.write(&resp.concat());
    // The connection goes on.
    let s2 = c.read(
        &[
            parse("", "select 4", &[]),
            bind0("", ""),
            execute("", 0),
            sync(),
        ]
        .concat(),
    );
    let e2 = c.write(&[parse_complete(), bind_complete(), one_row(), ready(b'I')].concat());
    let (out, counters) = run(&c.evs);
    assert_eq!(
        out,
        vec![
            exec_row(&c, None, "select 1", (s, e), "SELECT 1", Some(1)),
            Statement {
                error: err("22012", "division by zero"),
                ..row(c.conn, Kind::Prepared, Some("select 1/0"), s, e)
            },
            exec_row(&c, None, "select 4", (s2, e2), "SELECT 1", Some(1)),
        ]
    );
    assert_eq!(counters, chunks(8));
}

#[test]
fn parse_error_is_prepare_failed() {
    let mut c = Conv::new(1, 7);
    c.login();
    let s = c.read(
        &[
            parse("bad", "selec 1", &[]),
            bind0("", "bad"),
            execute("", 0),
            sync(),
        ]
        .concat(),
    );
    let msg = "syntax error at or near \"selec\"";
    let e = c.write(&[error("42601", msg), ready(b'I')].concat());
    // The failed statement does not exist: a Bind of it fails too.
    let s2 = c.read(&[bind0("", "bad"), execute("", 0), sync()].concat());
    let msg2 = "prepared statement \"bad\" does not exist";
    let e2 = c.write(&[error("26000", msg2), ready(b'I')].concat());
    let (out, counters) = run(&c.evs);
    assert_eq!(
        out,
        vec![
            Statement {
                name: Some("bad".into()),
                error: err("42601", msg),
                ..row(c.conn, Kind::PrepareFailed, Some("selec 1"), s, e)
            },
            Statement {
                name: Some("bad".into()),
                error: err("26000", msg2),
                ..row(c.conn, Kind::PrepareFailed, None, s2, e2)
            },
        ]
    );
    assert_eq!(
        counters,
        Counters {
            unknown_prepared: 1,
            ..chunks(8)
        }
    );
}

#[test]
fn bind_error_is_prepare_failed_with_the_statement_text() {
    let mut c = Conv::new(1, 7);
    c.login();
    let text = "select $1::int";
    c.read(&[parse("s", text, &[]), sync()].concat());
    c.write(&[parse_complete(), ready(b'I')].concat());
    let s = c.read(
        &[
            bind("", "s", &[], &[Some(b"x")], &[]),
            execute("", 0),
            sync(),
        ]
        .concat(),
    );
    let msg = "invalid input syntax for type integer: \"x\"";
    let e = c.write(&[error("22P02", msg), ready(b'I')].concat());
    let (out, _) = run(&c.evs);
    let expect = Statement {
        name: Some("s".into()),
        error: err("22P02", msg),
        ..row(c.conn, Kind::PrepareFailed, Some(text), s, e)
    };
    assert_eq!(out, vec![expect]);
}

#[test]
fn execute_error_row() {
    let mut c = Conv::new(1, 7);
    c.login();
    let s = c.read(
        &[
            parse("", "select 1/0", &[]),
            bind0("", ""),
            execute("", 0),
            sync(),
        ]
        .concat(),
    );
    let e = c.write(
        &[
            parse_complete(),
            bind_complete(),
            error("22012", "division by zero"),
            ready(b'I'),
        ]
        .concat(),
    );
    let (out, _) = run(&c.evs);
    let expect = Statement {
        error: err("22012", "division by zero"),
        ..row(c.conn, Kind::Prepared, Some("select 1/0"), s, e)
    };
    assert_eq!(out, vec![expect]);
}

#[test]
fn error_answered_after_flush_discards_up_to_sync() {
    let mut c = Conv::new(1, 7);
    c.login();
    c.read(
        &[
            parse("", "selec", &[]),
            bind0("", ""),
            execute("", 0),
            flush(),
        ]
        .concat(),
    );
    let e = c.write(&error("42601", "syntax error"));
    // The client had sent more before reading the error: skipped by the server.
    c.read(&[bind0("", ""), execute("", 0), query("select 9"), sync()].concat());
    c.write(&ready(b'I'));
    let t = c.simple(
        "select 1",
        &[command_complete("SELECT 1"), ready(b'I')].concat(),
    );
    let (out, counters) = run(&c.evs);
    assert_eq!(
        out,
        vec![
            Statement {
                error: err("42601", "syntax error"),
                ..row(c.conn, Kind::PrepareFailed, Some("selec"), 50, e)
            },
            simple_row(c.conn, "select 1", t, "SELECT 1", Some(1)),
        ]
    );
    assert_eq!(counters, chunks(10));
}

#[test]
fn error_at_sync_makes_no_row() {
    // A deferred constraint fails at the implicit commit of the Sync.
    let mut c = Conv::new(1, 7);
    c.login();
    let s = c.read(
        &[
            parse("", "insert into t values (1)", &[]),
            bind0("", ""),
            execute("", 0),
            sync(),
        ]
        .concat(),
    );
    let resp = [
        parse_complete(),
        bind_complete(),
        command_complete("INSERT 0 1"),
        error("23503", "fk"),
        ready(b'I'),
    ];
    let e = c.write(&resp.concat());
    let (out, counters) = run(&c.evs);
    assert_eq!(
        out,
        vec![exec_row(
            &c,
            None,
            "insert into t values (1)",
            (s, e),
            "INSERT 0 1",
            Some(1)
        )]
    );
    assert_eq!(counters, chunks(6));
}
