//! Connections whose framing is unknown: first seen mid-stream, or lost;
//! when a read may resume it, and what must not.

use super::wire::*;
use super::*;

#[test]
fn connection_first_seen_mid_stream() {
    let mut c = Conv::new(1, 7);
    // The end of a result the decoder never saw asked for.
    c.write(&[rows(2, 3), command_complete("SELECT 9"), ready(b'I')].concat());
    // The tail of a long Query: not a message start.
    c.read(b"ere id = 3\0");
    c.write(&[command_complete("SELECT 0"), ready(b'I')].concat());
    let (s, e) = c.simple(
        "select 1",
        &[command_complete("SELECT 1"), ready(b'I')].concat(),
    );
    let (out, counters) = run(&c.evs);
    let expect = Statement {
        user: None,
        database: None,
        ..simple_row(c.conn, "select 1", (s, e), "SELECT 1", Some(1))
    };
    assert_eq!(out, vec![expect]);
    assert_eq!(
        counters,
        Counters {
            chunks_skipped: 3,
            responses_unmatched: 2,
            ..chunks(5)
        }
    );
}

#[test]
fn a_resync_inside_a_text_is_undone_by_the_response() {
    let mut c = Conv::new(1, 7);
    // First seen mid-way through a text: "E'…" (an escape string) is not
    // an Execute, too long for one.
    c.read(b"E'\\n' and y = 3\0");
    c.write(&[command_complete("SELECT 0"), ready(b'I')].concat());
    // Mid-way through "select * from t where Q = 1 and x = 2": "Q = 1 and "
    // reads as a Query of about 540 MB whose text goes on.
    c.read(b"Q = 1 and ");
    c.read(b"x = 2\0");
    // The server answers while the "Query" is not all read: impossible.
    c.write(&[command_complete("SELECT 0"), ready(b'I')].concat());
    let (s, e) = c.simple(
        "select 1",
        &[command_complete("SELECT 1"), ready(b'I')].concat(),
    );
    let (out, counters) = run(&c.evs);
    let expect = Statement {
        user: None,
        database: None,
        ..simple_row(c.conn, "select 1", (s, e), "SELECT 1", Some(1))
    };
    assert_eq!(out, vec![expect]);
    assert_eq!(
        counters,
        Counters {
            desyncs: 1,
            chunks_skipped: 2,
            responses_unmatched: 1,
            ..chunks(7)
        }
    );
}

#[test]
fn copy_data_that_looks_like_a_startup_packet_is_skipped() {
    // pgbench -i with a 4 KiB capture: a read of CopyData starting inside a
    // length, "\0\0\x0f2…", is a startup packet's header (length 3890)
    // but has no startup code.
    let mut c = Conv::new(1, 7);
    c.login();
    let s = c.read(&query("copy pgbench_accounts from stdin"));
    c.write(&copy_in_response(4));
    let data: Vec<u8> = (0..400)
        .flat_map(|i| copy_data(format!("{i}\t1\t0\t\n").as_bytes()))
        .collect();
    c.chunk(Direction::Read, &data, 64);
    c.read(b"\0\0\x0f20151\t1\t0\t\nd\0\0\0\x0f20152\t1\t0\t\n");
    c.read(&copy_done());
    let e = c.write(&[command_complete("COPY 400"), ready(b'I')].concat());
    let (out, counters) = run(&c.evs);
    assert_eq!(
        out,
        vec![simple_row(
            c.conn,
            "copy pgbench_accounts from stdin",
            (s, e),
            "COPY 400",
            Some(400)
        )]
    );
    assert_eq!(
        counters,
        Counters {
            desyncs: 1,
            chunks_skipped: 2,
            bytes_not_captured: data.len() as u64 - 64,
            ..chunks(10)
        }
    );
}

#[test]
fn no_resync_while_the_server_is_mid_response() {
    let mut c = Conv::new(1, 7);
    // Whole write not ending with ReadyForQuery: more of it is due.
    c.write(&rows(3, 3));
    // A Query read now might be answered after the rest: not trusted.
    c.read(&query("select 1"));
    c.write(
        &[
            command_complete("SELECT 3"),
            ready(b'I'),
            command_complete("SELECT 1"),
            ready(b'I'),
        ]
        .concat(),
    );
    let (s, e) = c.simple(
        "select 2",
        &[command_complete("SELECT 1"), ready(b'I')].concat(),
    );
    let (out, counters) = run(&c.evs);
    let expect = Statement {
        user: None,
        database: None,
        ..simple_row(c.conn, "select 2", (s, e), "SELECT 1", Some(1))
    };
    assert_eq!(out, vec![expect]);
    assert_eq!(
        counters,
        Counters {
            chunks_skipped: 3,
            responses_unmatched: 2,
            ..chunks(5)
        }
    );
}

#[test]
fn garbage_read_loses_the_framing() {
    let mut c = Conv::new(1, 7);
    c.login();
    c.read(b"\x01\x02garbage");
    c.write(
        &[
            error("08P01", "invalid frontend message type 1"),
            ready(b'I'),
        ]
        .concat(),
    );
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
            // The error's two messages.
            responses_unmatched: 2,
            ..chunks(8)
        }
    );
}

/// Calls the capture lost (its ring buffer was full) between a Query and
/// its response: the response must not complete it, nor the next Query's
/// response an older one. Every connection starts over; the next request
/// that tiles is decoded exactly.
#[test]
fn calls_lost_by_the_capture_forget_every_connection() {
    let mut before = Conv::new(1, 7);
    before.read(&startup(&[("user", "u"), ("database", "d")]));
    before.write(&logged_in());
    before.read(&query("select 'lost'"));
    let mut d = PgDecoder::new();
    let mut out = Vec::new();
    feed(&mut d, &before.evs, &mut out);
    // The response's call was among those lost: the decoder is told, not fed.
    d.lost(1);
    let mut after = Conv::new(1, 7);
    let (s, e) = after.simple(
        "select 2",
        &[command_complete("SELECT 1"), ready(b'I')].concat(),
    );
    feed(&mut d, &after.evs, &mut out);
    let expect = Statement {
        user: None,
        database: None,
        ..simple_row(after.conn, "select 2", (s, e), "SELECT 1", Some(1))
    };
    assert_eq!(out, vec![expect]);
    let c = *d.counters();
    assert_eq!(
        (c.desyncs, c.chunks_skipped, c.unfinished),
        (1, 1, 1),
        "{c:?}"
    );
}
