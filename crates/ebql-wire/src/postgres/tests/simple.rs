//! The simple query protocol, startup, TLS, connection life.

use super::wire::*;
use super::*;

#[test]
fn select_with_rows() {
    let mut c = Conv::new(1, 7);
    c.login();
    let resp = [
        row_description(&["x"]),
        rows(3, 2),
        command_complete("SELECT 3"),
        ready(b'I'),
    ]
    .concat();
    let t = c.simple("select x from t", &resp);
    let (out, counters) = run(&c.evs);
    assert_eq!(
        out,
        vec![simple_row(
            c.conn,
            "select x from t",
            t,
            "SELECT 3",
            Some(3)
        )]
    );
    assert_eq!(counters, chunks(6));
}

#[test]
fn insert_update_and_untagged_commands() {
    let mut c = Conv::new(1, 7);
    c.login();
    let t1 = c.simple(
        "insert into t values (1)",
        &[command_complete("INSERT 0 1"), ready(b'I')].concat(),
    );
    let t2 = c.simple(
        "update t set x = 2",
        &[command_complete("UPDATE 5"), ready(b'I')].concat(),
    );
    let t3 = c.simple(
        "create table u (x int)",
        &[command_complete("CREATE TABLE"), ready(b'I')].concat(),
    );
    let t4 = c.simple("begin", &[command_complete("BEGIN"), ready(b'T')].concat());
    let (out, counters) = run(&c.evs);
    assert_eq!(
        out,
        vec![
            simple_row(
                c.conn,
                "insert into t values (1)",
                t1,
                "INSERT 0 1",
                Some(1)
            ),
            simple_row(c.conn, "update t set x = 2", t2, "UPDATE 5", Some(5)),
            simple_row(c.conn, "create table u (x int)", t3, "CREATE TABLE", None),
            simple_row(c.conn, "begin", t4, "BEGIN", None),
        ]
    );
    assert_eq!(counters, chunks(12));
}

#[test]
fn several_statements_in_one_query_sum_their_rows() {
    let mut c = Conv::new(1, 7);
    c.login();
    let one = [
        row_description(&["?column?"]),
        rows(1, 1),
        command_complete("SELECT 1"),
    ]
    .concat();
    let t = c.simple(
        "SELECT 1; SELECT 2",
        &[one.clone(), one, ready(b'I')].concat(),
    );
    let (out, _) = run(&c.evs);
    assert_eq!(
        out,
        vec![simple_row(
            c.conn,
            "SELECT 1; SELECT 2",
            t,
            "SELECT 1",
            Some(2)
        )]
    );
}

#[test]
fn empty_query_text() {
    let mut c = Conv::new(1, 7);
    c.login();
    let (s, e) = c.simple("", &[empty_query(), ready(b'I')].concat());
    let (out, counters) = run(&c.evs);
    assert_eq!(out, vec![row(c.conn, Kind::Simple, Some(""), s, e)]);
    assert_eq!(counters, chunks(6));
}

#[test]
fn failed_query_carries_sqlstate_and_message() {
    let mut c = Conv::new(1, 7);
    c.login();
    let msg = "relation \"nope\" does not exist";
    let (s, e) = c.simple(
        "select * from nope",
        &[error("42P01", msg), ready(b'I')].concat(),
    );
    // A multi-statement query failing after a first success: no tag, no rows.
    let resp = [
        command_complete("INSERT 0 1"),
        error("23505", "duplicate key"),
        ready(b'I'),
    ]
    .concat();
    let (s2, e2) = c.simple("insert into t values (1); insert into t values (1)", &resp);
    let (out, counters) = run(&c.evs);
    assert_eq!(
        out,
        vec![
            Statement {
                error: err("42P01", msg),
                ..row(c.conn, Kind::Simple, Some("select * from nope"), s, e)
            },
            Statement {
                error: err("23505", "duplicate key"),
                ..row(
                    c.conn,
                    Kind::Simple,
                    Some("insert into t values (1); insert into t values (1)"),
                    s2,
                    e2
                )
            },
        ]
    );
    assert_eq!(counters, chunks(8));
}

#[test]
fn copy_from_stdin() {
    let mut c = Conv::new(1, 7);
    c.login();
    let s = c.read(&query("copy t from stdin"));
    c.write(&copy_in_response(1));
    c.read(&[copy_data(b"1\n"), copy_data(b"2\n")].concat());
    c.read(&copy_done());
    let e = c.write(&[command_complete("COPY 2"), ready(b'I')].concat());
    // A failed COPY: the client's CopyFail, the server's error.
    let s2 = c.read(&query("copy t from stdin"));
    c.write(&copy_in_response(1));
    c.read(&[copy_data(b"3\n"), copy_fail("interrupted")].concat());
    let e2 = c.write(
        &[
            error("57014", "COPY from stdin failed: interrupted"),
            ready(b'I'),
        ]
        .concat(),
    );
    let (out, counters) = run(&c.evs);
    assert_eq!(
        out,
        vec![
            simple_row(c.conn, "copy t from stdin", (s, e), "COPY 2", Some(2)),
            Statement {
                error: err("57014", "COPY from stdin failed: interrupted"),
                ..row(c.conn, Kind::Simple, Some("copy t from stdin"), s2, e2)
            },
        ]
    );
    assert_eq!(counters, chunks(13));
}

#[test]
fn copy_to_stdout() {
    let mut c = Conv::new(1, 7);
    c.login();
    let resp = [
        copy_out_response(1),
        copy_data(b"1\n"),
        copy_data(b"2\n"),
        msg(b'c', &[]),
        command_complete("COPY 2"),
        ready(b'I'),
    ]
    .concat();
    let t = c.simple("copy t to stdout", &resp);
    let (out, _) = run(&c.evs);
    assert_eq!(
        out,
        vec![simple_row(c.conn, "copy t to stdout", t, "COPY 2", Some(2))]
    );
}

#[test]
fn asynchronous_messages_answer_nothing() {
    let mut c = Conv::new(1, 7);
    c.login();
    let resp = [
        notice("hello"),
        parameter_status("TimeZone", "UTC"),
        command_complete("SET"),
        ready(b'I'),
    ]
    .concat();
    let t = c.simple("set timezone = 'UTC'", &resp);
    c.write(
        &[
            notification(9, "ch", "x"),
            parameter_status("a", "b"),
            notice("bye"),
        ]
        .concat(),
    );
    let (out, counters) = run(&c.evs);
    assert_eq!(
        out,
        vec![simple_row(c.conn, "set timezone = 'UTC'", t, "SET", None)]
    );
    assert_eq!(counters, chunks(7));
}

#[test]
fn startup_captures_user_and_database() {
    let mut c = Conv::new(3, 9);
    c.read(&startup(&[("user", "bob")]));
    // Password authentication: md5 request, password, ok.
    c.write(&auth_md5());
    c.read(&password("md5abcdef"));
    c.write(&logged_in());
    let t = c.simple(
        "select 1",
        &[command_complete("SELECT 1"), ready(b'I')].concat(),
    );
    let (out, counters) = run(&c.evs);
    let expect = Statement {
        user: Some("bob".into()),
        // "database: defaults to the user name".
        database: Some("bob".into()),
        ..simple_row(c.conn, "select 1", t, "SELECT 1", Some(1))
    };
    assert_eq!(out, vec![expect]);
    assert_eq!(counters, chunks(6));
}

/// A startup packet cut before its `database` (a long `options` value
/// first): the database is unknown, not the user's name.
#[test]
fn a_cut_startup_packets_database_is_unknown() {
    let mut c = Conv::new(3, 9);
    let long = "x".repeat(3000);
    let packet = startup(&[("user", "bob"), ("options", &long), ("database", "db")]);
    c.chunk(Direction::Read, &packet, 2048);
    c.write(&logged_in());
    let t = c.simple(
        "select 1",
        &[command_complete("SELECT 1"), ready(b'I')].concat(),
    );
    let (out, _) = run(&c.evs);
    let expect = Statement {
        user: Some("bob".into()),
        database: None,
        ..simple_row(c.conn, "select 1", t, "SELECT 1", Some(1))
    };
    assert_eq!(out, vec![expect]);
}

#[test]
fn failed_authentication_leaves_nothing_pending() {
    let mut c = Conv::new(3, 9);
    c.login_fails();
    c.close();
    let (out, counters) = run(&c.evs);
    assert_eq!(out, vec![]);
    assert_eq!(counters, chunks(4));
}

impl Conv {
    fn login_fails(&mut self) {
        self.read(&startup(&[("user", "bob")]));
        self.write(&auth_md5());
        self.read(&password("md5wrong"));
        self.write(&fatal(
            "28P01",
            "password authentication failed for user \"bob\"",
        ));
    }
}

#[test]
fn tls_is_counted_and_skipped_until_the_key_starts_again() {
    let mut c = Conv::new(1, 7);
    c.read(&ssl_request());
    c.write(b"S");
    c.read(&[22, 3, 1, 0, 5, 1, 2, 3, 4, 5]);
    c.write(&[22, 3, 3, 0, 2, 1, 2]);
    c.read(&[23, 3, 3, 0, 20, b'Q', 0, 0, 0, 5, 0]);
    c.close();
    // The descriptor is reused by a plain connection.
    c.login();
    let t = c.simple(
        "select 1",
        &[command_complete("SELECT 1"), ready(b'I')].concat(),
    );
    // Again TLS, then a new connection on the key without a close seen.
    c.read(&ssl_request());
    c.write(b"S");
    c.read(&[23, 3, 3, 0, 1, 0]);
    c.login();
    let t2 = c.simple(
        "select 2",
        &[command_complete("SELECT 1"), ready(b'I')].concat(),
    );
    let (out, counters) = run(&c.evs);
    assert_eq!(
        out,
        vec![
            simple_row(c.conn, "select 1", t, "SELECT 1", Some(1)),
            simple_row(c.conn, "select 2", t2, "SELECT 1", Some(1)),
        ]
    );
    assert_eq!(
        counters,
        Counters {
            tls_connections: 2,
            tls_chunks: 4,
            ..chunks(20)
        }
    );
}

#[test]
fn gssenc_and_ssl_refused_then_startup() {
    let mut c = Conv::new(1, 7);
    c.read(&gss_request());
    c.write(b"N");
    c.login();
    let t = c.simple(
        "select 1",
        &[command_complete("SELECT 1"), ready(b'I')].concat(),
    );
    let (out, counters) = run(&c.evs);
    assert_eq!(
        out,
        vec![simple_row(c.conn, "select 1", t, "SELECT 1", Some(1))]
    );
    assert_eq!(counters, chunks(8));
}

#[test]
fn gssenc_accepted_is_encrypted() {
    let mut c = Conv::new(1, 7);
    c.read(&gss_request());
    c.write(b"G");
    c.read(&[0x60, 0x82, 1, 2]);
    let (out, counters) = run(&c.evs);
    assert_eq!(out, vec![]);
    assert_eq!(
        counters,
        Counters {
            tls_connections: 1,
            tls_chunks: 1,
            ..chunks(3)
        }
    );
}

#[test]
fn direct_tls_first_seen_is_encrypted() {
    let mut c = Conv::new(1, 7);
    c.read(&[22, 3, 1, 0, 200, 1, 0, 0, 196]);
    c.write(&[22, 3, 3, 0, 90]);
    let (out, counters) = run(&c.evs);
    assert_eq!(out, vec![]);
    assert_eq!(
        counters,
        Counters {
            tls_connections: 1,
            tls_chunks: 2,
            ..chunks(2)
        }
    );
}

#[test]
fn cancel_request_connection() {
    let mut c = Conv::new(1, 8);
    c.read(&cancel_request(4242, 99));
    c.close();
    let (out, counters) = run(&c.evs);
    assert_eq!(out, vec![]);
    assert_eq!(counters, chunks(1));
}

#[test]
fn close_counts_pending_requests_unfinished() {
    let mut c = Conv::new(1, 7);
    c.login();
    c.read(&query("select pg_sleep(100)"));
    c.close();
    c.login();
    c.read(
        &[
            parse("", "select 1", &[]),
            bind0("", ""),
            execute("", 0),
            sync(),
        ]
        .concat(),
    );
    c.close();
    let (out, counters) = run(&c.evs);
    assert_eq!(out, vec![]);
    assert_eq!(
        counters,
        Counters {
            unfinished: 5,
            ..chunks(10)
        }
    );
}

#[test]
fn a_new_startup_on_a_known_key_resets_the_connection() {
    let mut c = Conv::new(1, 7);
    c.login();
    c.read(&query("select pg_sleep(100)"));
    // No close was seen: the descriptor now serves another client.
    c.read(&startup(&[("user", "carol"), ("database", "db2")]));
    c.write(&logged_in());
    let t = c.simple(
        "select 1",
        &[command_complete("SELECT 1"), ready(b'I')].concat(),
    );
    let (out, counters) = run(&c.evs);
    let expect = Statement {
        user: Some("carol".into()),
        database: Some("db2".into()),
        ..simple_row(c.conn, "select 1", t, "SELECT 1", Some(1))
    };
    assert_eq!(out, vec![expect]);
    assert_eq!(
        counters,
        Counters {
            unfinished: 1,
            ..chunks(9)
        }
    );
}

#[test]
fn a_response_to_nothing_is_unmatched() {
    let mut c = Conv::new(1, 7);
    c.login();
    c.write(&[command_complete("SELECT 1"), ready(b'I')].concat());
    // The server terminating an idle session answers no request.
    c.write(&fatal(
        "57P01",
        "terminating connection due to administrator command",
    ));
    let (out, counters) = run(&c.evs);
    assert_eq!(out, vec![]);
    assert_eq!(
        counters,
        Counters {
            responses_unmatched: 2,
            ..chunks(6)
        }
    );
}

#[test]
fn fatal_error_during_a_query_ends_it() {
    let mut c = Conv::new(1, 7);
    c.login();
    let s = c.read(&[query("select pg_sleep(100)"), query("select 2")].concat());
    let e = c.write(&fatal(
        "57P01",
        "terminating connection due to administrator command",
    ));
    c.close();
    let (out, counters) = run(&c.evs);
    let expect = Statement {
        error: err(
            "57P01",
            "terminating connection due to administrator command",
        ),
        ..row(c.conn, Kind::Simple, Some("select pg_sleep(100)"), s, e)
    };
    assert_eq!(out, vec![expect]);
    assert_eq!(
        counters,
        Counters {
            unfinished: 1,
            ..chunks(6)
        }
    );
}

#[test]
fn function_call_makes_no_row() {
    let mut c = Conv::new(1, 7);
    c.login();
    c.read(&function_call(1598, &[b"x"]));
    c.write(&[function_call_response(b"42"), ready(b'I')].concat());
    c.read(&function_call(1598, &[]));
    c.write(&[error("42883", "no function"), ready(b'I')].concat());
    let t = c.simple(
        "select 1",
        &[command_complete("SELECT 1"), ready(b'I')].concat(),
    );
    c.read(&terminate());
    c.close();
    let (out, counters) = run(&c.evs);
    assert_eq!(
        out,
        vec![simple_row(c.conn, "select 1", t, "SELECT 1", Some(1))]
    );
    assert_eq!(counters, chunks(11));
}

#[test]
fn connections_are_apart() {
    let mut a = Conv::new(1, 7);
    let mut b = Conv::new(1, 8);
    a.login();
    b.login();
    let sa = a.read(&query("select 'a'"));
    b.t = a.t;
    let sb = b.read(&query("select 'b'"));
    a.t = b.t;
    let eb = b.write(&[command_complete("SELECT 1"), ready(b'I')].concat());
    a.t = b.t;
    let ea = a.write(&[command_complete("SELECT 1"), ready(b'I')].concat());
    // Interleave: a's login, b's login, then a, b, b, a.
    let (a_login, a_rest) = a.evs.split_at(4);
    let (b_login, b_rest) = b.evs.split_at(4);
    let evs: Vec<Ev> = [a_login, b_login, &a_rest[..1], &b_rest[..2], &a_rest[1..]].concat();
    let (out, _) = run(&evs);
    assert_eq!(
        out,
        vec![
            simple_row(b.conn, "select 'b'", (sb, eb), "SELECT 1", Some(1)),
            simple_row(a.conn, "select 'a'", (sa, ea), "SELECT 1", Some(1)),
        ]
    );
}
