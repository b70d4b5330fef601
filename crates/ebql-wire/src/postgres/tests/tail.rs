//! Responses longer than the probe's capture, finished from the last bytes
//! of their writes ([`Chunk::tail`]): the probe keeps the first 2048 bytes
//! of each call and the last 256 of those longer.

use super::wire::*;
use super::*;

const HEAD: usize = 2048;
const TAIL: usize = 256;

/// Writes `resp` as PostgreSQL does, in calls of 8 KiB, each captured as
/// the probe does; returns the last call's time.
fn write_long(c: &mut Conv, resp: &[u8]) -> u64 {
    let mut t = 0;
    for part in resp.chunks(8192) {
        t = c.cut(Direction::Write, part, HEAD, TAIL);
    }
    t
}

/// The bytes the probe does not capture of `resp` written by [`write_long`].
fn missing(resp: &[u8]) -> u64 {
    resp.chunks(8192)
        .map(|p| p.len().saturating_sub(HEAD + TAIL) as u64)
        .sum()
}

/// The same events from a probe that keeps no tails.
fn without_tails(evs: &[Ev]) -> Vec<Ev> {
    evs.iter()
        .cloned()
        .map(|mut e| {
            if let Ev::Chunk(r) = &mut e {
                r.tail.clear();
            }
            e
        })
        .collect()
}

/// 1000 rows of 100 bytes (~110 KB) and the response's end.
fn thousand() -> Vec<u8> {
    [row_description(&["x"]), rows(1000, 100)].concat()
}

fn select_1000() -> Vec<u8> {
    [thousand(), command_complete("SELECT 1000"), ready(b'I')].concat()
}

const BIG: &str = "select repeat('x', 100) from generate_series(1, 1000)";

#[test]
fn long_result_in_one_write() {
    let mut c = Conv::new(1, 7);
    c.login();
    let resp = select_1000();
    assert!(resp.len() > 100_000);
    let s = c.read(&query(BIG));
    let e = c.cut(Direction::Write, &resp, HEAD, TAIL);
    let t = c.simple("select 1", &[one_row(), ready(b'I')].concat());
    let (out, counters) = run(&c.evs);
    assert_eq!(
        out,
        vec![
            simple_row(c.conn, BIG, (s, e), "SELECT 1000", Some(1000)),
            simple_row(c.conn, "select 1", t, "SELECT 1", Some(1)),
        ]
    );
    assert_eq!(
        counters,
        Counters {
            bytes_not_captured: (resp.len() - HEAD - TAIL) as u64,
            ..chunks(4 + 2 + 2)
        }
    );
    // Without tails, as before: the statement lost, counted.
    let (out, counters) = run(&without_tails(&c.evs));
    assert_eq!(
        out,
        vec![simple_row(c.conn, "select 1", t, "SELECT 1", Some(1))]
    );
    assert_eq!(
        counters,
        Counters {
            desyncs: 1,
            unfinished: 1,
            bytes_not_captured: (resp.len() - HEAD) as u64,
            ..chunks(8)
        }
    );
}

#[test]
fn long_result_in_many_writes() {
    let mut c = Conv::new(1, 7);
    c.login();
    let resp = select_1000();
    let s = c.read(&query(BIG));
    let e = write_long(&mut c, &resp);
    let n = resp.chunks(8192).count();
    let t = c.simple("select 1", &[one_row(), ready(b'I')].concat());
    let (out, counters) = run(&c.evs);
    assert_eq!(
        out,
        vec![
            simple_row(c.conn, BIG, (s, e), "SELECT 1000", Some(1000)),
            simple_row(c.conn, "select 1", t, "SELECT 1", Some(1)),
        ]
    );
    assert_eq!(
        counters,
        Counters {
            bytes_not_captured: missing(&resp),
            ..chunks(4 + 1 + n + 2)
        }
    );
}

#[test]
fn last_write_captured_whole_or_its_tail_meeting_its_prefix() {
    // The response cut so that its last write is short (all captured; of
    // 10 bytes, the CommandComplete begins in the write before), or of
    // 2100 bytes (its tail meets its prefix).
    for last in [3, 10, 300, 2100] {
        let resp = select_1000();
        let cut = resp.len() - last;
        let mut c = Conv::new(1, 7);
        c.login();
        let s = c.read(&query(BIG));
        write_long(&mut c, &resp[..cut]);
        let e = c.cut(Direction::Write, &resp[cut..], HEAD, TAIL);
        let (out, counters) = run(&c.evs);
        assert_eq!(
            out,
            vec![simple_row(c.conn, BIG, (s, e), "SELECT 1000", Some(1000))],
            "last write of {last}"
        );
        assert_eq!(counters.desyncs + counters.chunks_skipped, 0);
    }
}

#[test]
fn extended_protocol_with_a_long_result() {
    let mut c = Conv::new(1, 7);
    c.login();
    // Unnamed statement, Parse/Bind/Execute/Sync in one read.
    let s = c.read(
        &[
            parse("", BIG, &[]),
            bind0("", ""),
            describe(b'P', ""),
            execute("", 0),
            sync(),
        ]
        .concat(),
    );
    let resp = [
        parse_complete(),
        bind_complete(),
        thousand(),
        command_complete("SELECT 1000"),
        ready(b'I'),
    ]
    .concat();
    let e = write_long(&mut c, &resp);
    // A named statement executed twice.
    c.read(&[parse("big", BIG, &[]), sync()].concat());
    c.write(&[parse_complete(), ready(b'I')].concat());
    let resp2 = [
        bind_complete(),
        rows(1000, 100),
        command_complete("SELECT 1000"),
        ready(b'T'),
    ]
    .concat();
    let mut times = Vec::new();
    for _ in 0..2 {
        let s = c.read(&[bind0("", "big"), execute("", 0), sync()].concat());
        times.push((s, write_long(&mut c, &resp2)));
    }
    let t = c.simple(
        "commit",
        &[command_complete("COMMIT"), ready(b'I')].concat(),
    );
    let (out, counters) = run(&c.evs);
    assert_eq!(
        out,
        vec![
            exec_row(&c, None, BIG, (s, e), "SELECT 1000", Some(1000)),
            exec_row(&c, Some("big"), BIG, times[0], "SELECT 1000", Some(1000)),
            exec_row(&c, Some("big"), BIG, times[1], "SELECT 1000", Some(1000)),
            simple_row(c.conn, "commit", t, "COMMIT", None),
        ]
    );
    assert_eq!(
        counters,
        Counters {
            bytes_not_captured: missing(&resp) + 2 * missing(&resp2),
            ..chunks(n_chunks(&c.evs))
        }
    );
}

#[test]
fn error_at_the_end_of_a_long_result() {
    let mut c = Conv::new(1, 7);
    c.login();
    let s = c.read(&query(BIG));
    let resp = [
        thousand(),
        error("57014", "canceling statement due to user request"),
        ready(b'I'),
    ]
    .concat();
    let e = write_long(&mut c, &resp);
    // The same in the extended protocol: the Execute fails.
    let s2 = c.read(&[parse("", BIG, &[]), bind0("", ""), execute("", 0), sync()].concat());
    let resp2 = [
        parse_complete(),
        bind_complete(),
        rows(1000, 100),
        error("22012", "division by zero"),
        ready(b'I'),
    ]
    .concat();
    let e2 = write_long(&mut c, &resp2);
    let t = c.simple("select 1", &[one_row(), ready(b'I')].concat());
    let (out, counters) = run(&c.evs);
    assert_eq!(
        out,
        vec![
            Statement {
                error: err("57014", "canceling statement due to user request"),
                ..row(c.conn, Kind::Simple, Some(BIG), s, e)
            },
            Statement {
                error: err("22012", "division by zero"),
                ..row(c.conn, Kind::Prepared, Some(BIG), s2, e2)
            },
            simple_row(c.conn, "select 1", t, "SELECT 1", Some(1)),
        ]
    );
    assert_eq!(
        counters,
        Counters {
            bytes_not_captured: missing(&resp) + missing(&resp2),
            ..chunks(n_chunks(&c.evs))
        }
    );
}

/// Runs `c` with and without tails: the same rows and counters (nothing
/// guessed, counted as before); returns the rows.
fn as_without_tails(c: &Conv) -> Vec<Statement> {
    let (out, counters) = run(&c.evs);
    let (out2, counters2) = run(&without_tails(&c.evs));
    assert_eq!(out, out2);
    let extra: u64 = c
        .evs
        .iter()
        .map(|e| match e {
            Ev::Chunk(r) => r.tail.len() as u64,
            Ev::Close(_) => 0,
        })
        .sum();
    assert_eq!(
        counters,
        Counters {
            bytes_not_captured: counters2.bytes_not_captured - extra,
            ..counters2
        }
    );
    assert!(counters.desyncs > 0);
    out
}

#[test]
fn uncertain_ends_are_lost_as_before() {
    let next = |c: &mut Conv| c.simple("select 1", &[one_row(), ready(b'I')].concat());
    // A long error: it starts before the tail.
    let mut c = Conv::new(1, 7);
    c.login();
    c.read(&query(BIG));
    let long = "x".repeat(400);
    write_long(
        &mut c,
        &[thousand(), error("XX000", &long), ready(b'I')].concat(),
    );
    let t = next(&mut c);
    let ok = vec![simple_row(c.conn, "select 1", t, "SELECT 1", Some(1))];
    assert_eq!(as_without_tails(&c), ok);

    // A ParameterStatus between the CommandComplete and the ReadyForQuery.
    let mut c = Conv::new(1, 7);
    c.login();
    c.read(&query(BIG));
    let resp = [
        thousand(),
        command_complete("SELECT 1000"),
        parameter_status("application_name", "x"),
        ready(b'I'),
    ];
    write_long(&mut c, &resp.concat());
    next(&mut c);
    assert_eq!(as_without_tails(&c).len(), 1);

    // A PortalSuspended: its row count is the DataRows not captured.
    let mut c = Conv::new(1, 7);
    c.login();
    c.read(
        &[
            parse("", BIG, &[]),
            bind0("", ""),
            execute("", 1000),
            sync(),
        ]
        .concat(),
    );
    let resp = [
        parse_complete(),
        bind_complete(),
        rows(1000, 100),
        portal_suspended(),
        ready(b'T'),
    ];
    write_long(&mut c, &resp.concat());
    next(&mut c);
    assert_eq!(as_without_tails(&c).len(), 1);

    // Bytes that are no message before a ReadyForQuery (a tag not NUL
    // terminated, a wrong length).
    for bad in [
        msg(b'C', b"SELECT 1000"),
        [b'C', 0, 0, 0, 40]
            .iter()
            .copied()
            .chain(*b"SELECT 1000\0")
            .collect(),
    ] {
        let mut c = Conv::new(1, 7);
        c.login();
        c.read(&query(BIG));
        write_long(&mut c, &[thousand(), bad, ready(b'I')].concat());
        next(&mut c);
        assert_eq!(as_without_tails(&c).len(), 1);
    }

    // The response's writes end with no ReadyForQuery, and the client
    // sends: not the one request's end.
    let mut c = Conv::new(1, 7);
    c.login();
    c.read(&query(BIG));
    write_long(&mut c, &thousand());
    next(&mut c);
    next(&mut c);
    assert_eq!(as_without_tails(&c).len(), 2);

    // The connection closes (or the capture loses events) inside the response.
    let mut c = Conv::new(1, 7);
    c.login();
    c.read(&query(BIG));
    write_long(&mut c, &thousand());
    c.close();
    assert!(as_without_tails(&c).is_empty());
}

#[test]
fn pipelined_requests_are_not_guessed() {
    // Two Queries in one read, or two Executes before one Sync, or two
    // batches: the first response's end is not known to be the last.
    let batch = [parse("", BIG, &[]), bind0("", ""), execute("", 0)].concat();
    let reqs = [
        [query(BIG), query("select 1")].concat(),
        [batch.clone(), batch.clone(), sync()].concat(),
        [batch.clone(), sync(), batch.clone(), sync()].concat(),
    ];
    for req in reqs {
        let mut c = Conv::new(1, 7);
        c.login();
        c.read(&req);
        write_long(&mut c, &select_1000());
        c.simple("select 2", &[one_row(), ready(b'I')].concat());
        assert_eq!(as_without_tails(&c).len(), 1);
    }
}

#[test]
fn several_statements_in_one_query_state_no_row_count() {
    // The first statements' counts were not captured: the last tag, no
    // row count.
    let text = "select 1; select repeat('x', 100) from generate_series(1, 1000)";
    let mut c = Conv::new(1, 7);
    c.login();
    let s = c.read(&query(text));
    let resp = [row_description(&["a"]), one_row(), select_1000()].concat();
    let e = write_long(&mut c, &resp);
    // One statement and trailing semicolons: its count.
    let one = format!("{BIG} ;\n;");
    let s2 = c.read(&query(&one));
    let e2 = write_long(&mut c, &select_1000());
    let (out, counters) = run(&c.evs);
    assert_eq!(
        out,
        vec![
            simple_row(c.conn, text, (s, e), "SELECT 1000", None),
            simple_row(c.conn, &one, (s2, e2), "SELECT 1000", Some(1000)),
        ]
    );
    assert_eq!(counters.desyncs + counters.chunks_skipped, 0);
}
