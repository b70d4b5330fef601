//! Framing: messages split across chunks, several per chunk, chunks cut
//! by the capture, lost framing and its resynchronization, latency.

use super::wire::*;
use super::*;

/// A conversation with every kind of exchange.
pub fn recorded() -> Conv {
    let mut c = Conv::new(1, 7);
    c.login();
    let resp = [
        row_description(&["x"]),
        rows(3, 5),
        command_complete("SELECT 3"),
        ready(b'I'),
    ]
    .concat();
    c.simple("select x from t", &resp);
    c.simple(
        "select * from nope",
        &[
            error("42P01", "relation \"nope\" does not exist"),
            ready(b'I'),
        ]
        .concat(),
    );
    c.read(&[parse("s1", "select $1::bytea", &[17]), sync()].concat());
    c.write(&[parse_complete(), ready(b'I')].concat());
    let bin = [0u8, 1, 0, 0, 0, 5, b'Z'];
    c.read(
        &[
            bind("", "s1", &[1], &[Some(&bin)], &[1]),
            execute("", 0),
            sync(),
        ]
        .concat(),
    );
    c.write(
        &[
            bind_complete(),
            rows(1, 7),
            command_complete("SELECT 1"),
            ready(b'I'),
        ]
        .concat(),
    );
    c.read(&query("copy t from stdin"));
    c.write(&copy_in_response(1));
    c.read(&[copy_data(b"1\n"), copy_done()].concat());
    c.write(&[command_complete("COPY 1"), ready(b'I')].concat());
    c.read(
        &[
            parse("", "select 1/0", &[]),
            bind0("", ""),
            execute("", 0),
            sync(),
        ]
        .concat(),
    );
    c.write(
        &[
            parse_complete(),
            bind_complete(),
            error("22012", "division by zero"),
            ready(b'I'),
        ]
        .concat(),
    );
    c.close();
    c
}

/// The events with chunk `i` split at `at`, both pieces at the chunk's time.
fn split(evs: &[Ev], i: usize, at: usize) -> Vec<Ev> {
    let mut v = evs.to_vec();
    let Ev::Chunk(r) = &evs[i] else { return v };
    let mut a = r.clone();
    let mut b = r.clone();
    a.tail.clear();
    a.data.truncate(at);
    a.len = at as u64;
    b.data.drain(..at);
    b.len -= at as u64;
    v[i] = Ev::Chunk(a);
    v.insert(i + 1, Ev::Chunk(b));
    v
}

#[test]
fn split_at_every_point_gives_the_same_statements() {
    let c = recorded();
    let (whole, counters) = run(&c.evs);
    assert_eq!(whole.len(), 5);
    assert_eq!(counters, chunks(n_chunks(&c.evs)));
    for (i, e) in c.evs.iter().enumerate() {
        let Ev::Chunk(r) = e else { continue };
        for at in 1..r.data.len() {
            let (out, n) = run(&split(&c.evs, i, at));
            assert_eq!(out, whole, "chunk {i} split at {at}");
            assert_eq!(n, chunks(n_chunks(&c.evs) + 1), "chunk {i} split at {at}");
        }
    }
}

#[test]
fn one_message_in_many_chunks() {
    // A Query of 100 KB read 8192 bytes at a time, every byte captured.
    let text = "x".repeat(100_000);
    let q = query(&text);
    let mut c = Conv::new(1, 7);
    c.login();
    let mut s = 0;
    for part in q.chunks(8192) {
        s = c.read(part);
    }
    let e = c.write(&[command_complete("SELECT 1"), ready(b'I')].concat());
    let (out, counters) = run(&c.evs);
    assert_eq!(
        out,
        vec![simple_row(c.conn, &text, (s, e), "SELECT 1", Some(1))]
    );
    assert_eq!(counters, chunks(4 + 13 + 1));
}

#[test]
fn several_messages_per_chunk() {
    let mut c = Conv::new(1, 7);
    c.login();
    let s = c.read(&[query("select 1"), query("select 2"), query("select 3")].concat());
    let one = [command_complete("SELECT 1"), ready(b'I')].concat();
    let e = c.write(&[one.clone(), one.clone(), one].concat());
    let (out, _) = run(&c.evs);
    let expect: Vec<_> = ["select 1", "select 2", "select 3"]
        .iter()
        .map(|t| simple_row(c.conn, t, (s, e), "SELECT 1", Some(1)))
        .collect();
    assert_eq!(out, expect);
}

#[test]
fn long_statement_captured_in_part() {
    // 100 KB read in 13 chunks of which the probe captured 512 bytes each:
    // the text is the first bytes, the framing is kept.
    let text: String = (0..100_000)
        .map(|i| char::from(b'a' + (i % 26) as u8))
        .collect();
    let q = query(&text);
    let mut c = Conv::new(1, 7);
    c.login();
    let mut s = 0;
    let mut missing = 0;
    for part in q.chunks(8192) {
        s = c.chunk(Direction::Read, part, 512);
        missing += part.len().saturating_sub(512) as u64;
    }
    let e = c.write(&[command_complete("SELECT 1"), ready(b'I')].concat());
    let t2 = c.simple(
        "select 2",
        &[command_complete("SELECT 1"), ready(b'I')].concat(),
    );
    let (out, counters) = run(&c.evs);
    assert_eq!(
        out,
        vec![
            Statement {
                text_truncated: true,
                ..simple_row(c.conn, &text[..512 - 5], (s, e), "SELECT 1", Some(1))
            },
            simple_row(c.conn, "select 2", t2, "SELECT 1", Some(1)),
        ]
    );
    assert_eq!(
        counters,
        Counters {
            bytes_not_captured: missing,
            ..chunks(4 + 13 + 3)
        }
    );
}

#[test]
fn cut_parse_truncates_its_text_or_loses_its_batch() {
    let text = format!("select {}", "1 + ".repeat(300));
    let mut c = Conv::new(1, 7);
    c.login();
    // Parse last in its read, cut: the text is truncated, the framing kept.
    let p = parse("long", &text, &[]);
    c.chunk(Direction::Read, &p, 200);
    c.read(&sync());
    c.write(&[parse_complete(), ready(b'I')].concat());
    let s = c.read(&[bind0("", "long"), execute("", 0), sync()].concat());
    let e = c.write(
        &[
            bind_complete(),
            rows(1, 3),
            command_complete("SELECT 1"),
            ready(b'I'),
        ]
        .concat(),
    );
    // Parse batched with its Bind/Execute/Sync, cut: the headers after it
    // were not captured; the Parse is answered, the rest matches nothing.
    let batch = [parse("", &text, &[]), bind0("", ""), execute("", 0), sync()].concat();
    c.chunk(Direction::Read, &batch, 200);
    c.write(
        &[
            parse_complete(),
            bind_complete(),
            rows(1, 3),
            command_complete("SELECT 1"),
            ready(b'I'),
        ]
        .concat(),
    );
    let t = c.simple(
        "select 2",
        &[command_complete("SELECT 1"), ready(b'I')].concat(),
    );
    let (out, counters) = run(&c.evs);
    assert_eq!(
        out,
        vec![
            Statement {
                name: Some("long".into()),
                tag: Some("SELECT 1".into()),
                rows: Some(1),
                text_truncated: true,
                // 200 bytes captured: type, length, "long\0".
                ..row(c.conn, Kind::Prepared, Some(&text[..200 - 10]), s, e)
            },
            simple_row(c.conn, "select 2", t, "SELECT 1", Some(1)),
        ]
    );
    assert_eq!(
        counters,
        Counters {
            desyncs: 1,
            // BindComplete, DataRow, CommandComplete, ReadyForQuery.
            responses_unmatched: 4,
            bytes_not_captured: (p.len() - 200 + batch.len() - 200) as u64,
            ..chunks(13)
        }
    );
}

#[test]
fn cut_responses_never_state_a_prefix() {
    let mut c = Conv::new(1, 7);
    c.login();
    let req = [
        parse("", "select x from t", &[]),
        bind0("", ""),
        execute("", 0),
        sync(),
    ]
    .concat();
    // The tag cut after "SELECT": no tag, no row count.
    let s = c.read(&req);
    let resp = [
        parse_complete(),
        bind_complete(),
        command_complete("SELECT 12345"),
        ready(b'I'),
    ]
    .concat();
    let e = c.chunk(Direction::Write, &resp, 5 + 5 + 5 + 6);
    // The error cut in its message: the SQLSTATE whole, the message's prefix.
    let s2 = c.read(&req);
    let resp2 = [
        parse_complete(),
        bind_complete(),
        error("22012", "division by zero"),
        ready(b'I'),
    ]
    .concat();
    let e2 = c.chunk(Direction::Write, &resp2, 5 + 5 + 5 + 7 + 7 + 7 + 9);
    // The error cut in its SQLSTATE: none.
    let s3 = c.read(&req);
    let e3 = c.chunk(Direction::Write, &resp2, 5 + 5 + 5 + 7 + 7 + 4);
    let (out, counters) = run(&c.evs);
    let failed = |error, s, e| Statement {
        error,
        ..row(c.conn, Kind::Prepared, Some("select x from t"), s, e)
    };
    assert_eq!(
        out,
        vec![
            row(c.conn, Kind::Prepared, Some("select x from t"), s, e),
            failed(err("22012", "division"), s2, e2),
            failed(err("", ""), s3, e3),
        ]
    );
    // Each time, the ReadyForQuery after was not captured: its Sync is lost.
    assert_eq!(
        counters,
        Counters {
            desyncs: 3,
            unfinished: 3,
            bytes_not_captured: (resp.len() - 21 + resp2.len() - 45 + resp2.len() - 33) as u64,
            ..chunks(10)
        }
    );
}

#[test]
fn text_longer_than_the_bound_is_truncated() {
    let text = "y".repeat(super::super::limits::MAX_TEXT as usize + 10);
    let mut c = Conv::new(1, 7);
    c.login();
    let t = c.simple(&text, &[command_complete("SELECT 1"), ready(b'I')].concat());
    let (out, _) = run(&c.evs);
    let expect = Statement {
        text_truncated: true,
        ..simple_row(
            c.conn,
            &text[..super::super::limits::MAX_TEXT as usize],
            t,
            "SELECT 1",
            Some(1),
        )
    };
    assert_eq!(out, vec![expect]);
}

#[test]
fn cut_write_loses_the_framing_until_the_next_request() {
    let mut c = Conv::new(1, 7);
    c.login();
    c.read(&query("select big from t"));
    let big = [
        row_description(&["big"]),
        rows(200, 100),
        command_complete("SELECT 200"),
        ready(b'I'),
    ]
    .concat();
    c.chunk(Direction::Write, &big, 512);
    let t = c.simple(
        "select 1",
        &[command_complete("SELECT 1"), ready(b'I')].concat(),
    );
    let (out, counters) = run(&c.evs);
    assert_eq!(
        out,
        vec![simple_row(c.conn, "select 1", t, "SELECT 1", Some(1))]
    );
    assert_eq!(
        counters,
        Counters {
            desyncs: 1,
            unfinished: 1,
            bytes_not_captured: big.len() as u64 - 512,
            ..chunks(8)
        }
    );
}

#[test]
fn cut_read_hiding_a_header_keeps_the_requests_before_it() {
    let mut c = Conv::new(1, 7);
    c.login();
    let two = [query("select 1"), query("select 2")].concat();
    // Captured: the first Query and 2 bytes of the second's header. The
    // writes are still framed: the first Query is answered, the second's
    // answer matches nothing.
    let s = c.chunk(Direction::Read, &two, query("select 1").len() + 2);
    let one = [command_complete("SELECT 1"), ready(b'I')].concat();
    let e = c.write(&[one.clone(), one.clone()].concat());
    let t = c.simple("select 3", &one);
    let (out, counters) = run(&c.evs);
    assert_eq!(
        out,
        vec![
            simple_row(c.conn, "select 1", (s, e), "SELECT 1", Some(1)),
            simple_row(c.conn, "select 3", t, "SELECT 1", Some(1)),
        ]
    );
    assert_eq!(
        counters,
        Counters {
            desyncs: 1,
            responses_unmatched: 2,
            bytes_not_captured: 12,
            ..chunks(8)
        }
    );
}

#[test]
fn reads_lost_in_copy_data_keep_the_copy() {
    // COPY FROM STDIN with a 64-byte capture: the CopyData headers after
    // the first bytes of each read are lost, the COPY's answer is not.
    let mut c = Conv::new(1, 7);
    c.login();
    let s = c.read(&query("copy t from stdin"));
    c.write(&copy_in_response(2));
    let data: Vec<u8> = (0..300)
        .flat_map(|i| copy_data(format!("{i}\tx\n").as_bytes()))
        .collect();
    for part in data.chunks(1000) {
        c.chunk(Direction::Read, part, 64);
    }
    c.chunk(Direction::Read, &copy_done(), 64);
    let e = c.write(&[command_complete("COPY 300"), ready(b'I')].concat());
    let t = c.simple(
        "commit",
        &[command_complete("COMMIT"), ready(b'I')].concat(),
    );
    let (out, counters) = run(&c.evs);
    assert_eq!(
        out,
        vec![
            simple_row(c.conn, "copy t from stdin", (s, e), "COPY 300", Some(300)),
            simple_row(c.conn, "commit", t, "COMMIT", None),
        ]
    );
    let cut = data.len() as u64 - 64 * data.chunks(1000).count() as u64;
    let n = data.chunks(1000).count();
    assert_eq!(
        counters,
        Counters {
            desyncs: 1,
            chunks_skipped: n as u64,
            bytes_not_captured: cut,
            ..chunks(4 + 2 + n + 1 + 1 + 2)
        }
    );
}

#[test]
fn latency_is_from_the_completing_read_to_the_completing_write() {
    let mut c = Conv::new(1, 7);
    c.login();
    let q = query("select x from t");
    c.read(&q[..3]);
    c.read(&q[3..9]);
    let s = c.read(&q[9..]);
    c.write(&[row_description(&["x"]), rows(2, 1)].concat());
    let e = c.write(&[rows(1, 1), command_complete("SELECT 3"), ready(b'I')].concat());
    // Extended: Execute read before its Sync; completed by CommandComplete.
    let s2 = c.read(&[parse("", "select 1", &[]), bind0("", ""), execute("", 0)].concat());
    c.read(&sync());
    let e2 = c.write(&[parse_complete(), bind_complete(), one_row()].concat());
    c.write(&ready(b'I'));
    let (out, _) = run(&c.evs);
    assert_eq!(
        out,
        vec![
            simple_row(c.conn, "select x from t", (s, e), "SELECT 3", Some(3)),
            Statement {
                tag: Some("SELECT 1".into()),
                rows: Some(1),
                ..row(c.conn, Kind::Prepared, Some("select 1"), s2, e2)
            },
        ]
    );
    assert_eq!((s, e, s2, e2), (70, 90, 100, 120));
}
