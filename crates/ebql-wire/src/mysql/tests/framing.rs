//! Chunks that are not one packet each: splits, several packets per chunk,
//! captures cut short, headers lost, connections joined mid-stream.

use super::enc::*;
use crate::mysql::wire::*;
use crate::mysql::MyDecoder;
use crate::{Counters, Decoder, Direction, Kind, Statement};

const CAPS: u64 = CLIENT_CAPS | CLIENT_SESSION_TRACK;

/// A conversation touching every response shape.
pub fn recorded() -> Script {
    let mut s = Script::default();
    s.connect(CAPS, "app", Some("shop"));
    s.command(&cmd(COM_QUERY, b"SELECT id, v FROM t"));
    let rows = [text_row(&[b"1", b"x"]), text_row(&[b"2", b"\0\0"])];
    s.server(&result_set(&["id", "v"], &rows, false, 2));
    s.command(&cmd(COM_QUERY, b"INSERT INTO t VALUES (3, 'z')"));
    s.server(&[ok(1, 2)]);
    s.command(&cmd(COM_QUERY, b"SELECT * FROM nope"));
    s.server(&[err(1146, "42S02", "Table 'shop.nope' doesn't exist")]);
    s.command(&cmd(COM_STMT_PREPARE, b"SELECT v FROM t WHERE id = ?"));
    s.server(&prepare_ok(1, 1, 1, false));
    s.command(&execute(1, &[Some(0)]));
    s.server(&result_set(&["v"], &[binary_row(&[0])], false, 2));
    s.command(&execute(1, &[None]));
    s.server(&result_set(&["v"], &[], false, 2));
    let more = 2 | SERVER_MORE_RESULTS_EXISTS;
    s.command(&cmd(COM_QUERY, b"select 1; select 2"));
    s.server(&result_set(&["1"], &[text_row(&[b"1"])], false, more));
    s.server(&result_set(&["2"], &[text_row(&[b"2"])], false, 2));
    s
}

/// Feeds `segs` with segment `i` split at `k`.
fn feed_split(segs: &[Seg], i: usize, k: usize) -> (Vec<Statement>, Counters) {
    let mut d = MyDecoder::new();
    let mut out = Vec::new();
    for (j, s) in segs.iter().enumerate() {
        let parts: &[&[u8]] = if j == i {
            &[&s.bytes[..k], &s.bytes[k..]]
        } else {
            &[&s.bytes]
        };
        for p in parts {
            feed_chunk(&mut d, s.dir, p, p.len() as u64, s.time, &mut out);
        }
    }
    (out, *d.counters())
}

#[test]
fn split_at_every_point() {
    let s = recorded();
    let mut d = MyDecoder::new();
    let whole = feed(&mut d, &s.segs);
    assert_eq!(whole.len(), 6);
    // Every segment but the Handshake: a connection starts at a chunk that
    // is exactly one Handshake packet (servers write it with one call).
    for (i, seg) in s.segs.iter().enumerate().skip(1) {
        for k in 1..seg.bytes.len() {
            let (out, c) = feed_split(&s.segs, i, k);
            assert_eq!(out, whole, "segment {i} split at {k}");
            let want = Counters {
                chunks: s.segs.len() as u64 + 1,
                ..Counters::default()
            };
            assert_eq!(c, want, "segment {i} split at {k}");
        }
    }
}

#[test]
fn split_handshake_is_a_mid_stream_join() {
    let s = recorded();
    let whole = feed(&mut MyDecoder::new(), &s.segs);
    let (out, c) = feed_split(&s.segs, 0, 10);
    let anonymous: Vec<_> = whole
        .into_iter()
        .map(|mut w| {
            (w.user, w.database) = (None, None);
            w
        })
        .collect();
    assert_eq!(out, anonymous);
    // Both halves of the Handshake, the login and its OK.
    assert_eq!((c.chunks_skipped, c.desyncs), (4, 0));
}

/// As MariaDB reads: every client packet's header, then its payload.
pub fn mariadb_reads(segs: &[Seg]) -> Vec<Seg> {
    let mut v = Vec::new();
    for s in segs {
        if s.dir == Direction::Write {
            v.push(s.clone());
            continue;
        }
        let mut at = 0;
        while at + 4 <= s.bytes.len() {
            let n = u32::from_le_bytes([s.bytes[at], s.bytes[at + 1], s.bytes[at + 2], 0]) as usize;
            for part in [&s.bytes[at..at + 4], &s.bytes[at + 4..at + 4 + n]] {
                if !part.is_empty() {
                    v.push(Seg {
                        dir: Direction::Read,
                        bytes: part.to_vec(),
                        time: s.time,
                    });
                }
            }
            at += 4 + n;
        }
    }
    v
}

#[test]
fn header_and_payload_read_apart() {
    let s = recorded();
    let whole = feed(&mut MyDecoder::new(), &s.segs);
    let segs = mariadb_reads(&s.segs);
    let mut d = MyDecoder::new();
    assert_eq!(feed(&mut d, &segs), whole);
    assert_eq!(d.counters().chunks, segs.len() as u64);
    assert_eq!(d.counters().desyncs + d.counters().chunks_skipped, 0);
}

#[test]
fn several_packets_per_chunk() {
    let mut s = Script::default();
    s.connect(CAPS, "app", Some("shop"));
    s.command(&cmd(COM_STMT_PREPARE, b"select ?"));
    s.server(&prepare_ok(5, 1, 1, false));
    // The client closes the statement and queries in one write.
    let mut b = Vec::new();
    packets(0, &cmd(COM_STMT_CLOSE, &5u32.to_le_bytes()), &mut b);
    packets(0, &cmd(COM_QUERY, b"select 1; select 2"), &mut b);
    s.segs.push(Seg {
        dir: Direction::Read,
        bytes: b,
        time: 50_000,
    });
    // Both results in one server write.
    let more = 2 | SERVER_MORE_RESULTS_EXISTS;
    let mut b = Vec::new();
    let mut seq = 1;
    for p in result_set(&["1"], &[text_row(&[b"1"])], false, more)
        .into_iter()
        .chain(result_set(
            &["2"],
            &[text_row(&[b"2"]), text_row(&[b"3"])],
            false,
            2,
        ))
    {
        seq = packets(seq, &p, &mut b);
    }
    s.segs.push(Seg {
        dir: Direction::Write,
        bytes: b,
        time: 60_000,
    });
    let mut d = MyDecoder::new();
    let out = feed(&mut d, &s.segs);
    assert_eq!(
        out,
        vec![row(
            Kind::Simple,
            Some("select 1; select 2"),
            50_000,
            60_000,
            Some(3)
        )]
    );
    assert_eq!(d.counters().chunks, 7);
    assert_eq!(d.counters().desyncs, 0);
}

#[test]
fn long_statement_captured_in_part() {
    let text: Vec<u8> = (0..100_000).map(|i| b'a' + (i % 26) as u8).collect();
    let mut s = Script::default();
    s.connect(CAPS, "app", Some("shop"));
    s.command(&cmd(COM_QUERY, &text));
    s.server(&[ok(0, 2)]);
    let t0 = s.command(&cmd(COM_QUERY, b"select 2"));
    let t1 = s.server(&[ok(0, 2)]);
    // Read as MariaDB does (header, then the whole payload), or in 16 KiB
    // pieces; every chunk captured up to 512 bytes.
    for piece in [usize::MAX, 16 * 1024] {
        let mut d = MyDecoder::new();
        let mut out = Vec::new();
        let mut missing = 0;
        for seg in mariadb_reads(&s.segs) {
            for part in seg.bytes.chunks(piece) {
                let keep = part.len().min(512);
                missing += (part.len() - keep) as u64;
                feed_chunk(
                    &mut d,
                    seg.dir,
                    &part[..keep],
                    part.len() as u64,
                    seg.time,
                    &mut out,
                );
            }
        }
        assert_eq!(out.len(), 2);
        // The payload chunk begins with the command byte: 511 bytes of text.
        assert_eq!(out[0].text.as_deref(), Some(&text[..511]));
        assert!(out[0].text_truncated);
        assert_eq!(out[1], row(Kind::Simple, Some("select 2"), t0, t1, Some(0)));
        assert_eq!(d.counters().bytes_not_captured, missing);
        assert_eq!(d.counters().desyncs + d.counters().chunks_skipped, 0);
    }
    // The text cut by the decoder's own limit.
    let mut d = MyDecoder::with_max_text(100);
    let out = feed(&mut d, &s.segs);
    assert_eq!(out[0].text.as_deref(), Some(&text[..100]));
    assert!(out[0].text_truncated);
    assert!(!out[1].text_truncated);
}

#[test]
fn packets_of_16_mib_and_more() {
    let n = MAX_PACKET as usize + 10;
    let text: Vec<u8> = (0..n).map(|i| b'a' + (i % 26) as u8).collect();
    let mut s = Script::default();
    s.connect(CAPS, "app", Some("shop"));
    let t0 = s.command(&cmd(COM_QUERY, &text));
    // A text row whose value is ≥ 16 MiB: it begins with 0xfe, and is a row.
    let big = vec![b'y'; MAX_PACKET as usize];
    let rows = [text_row(&[&big]), text_row(&[b"2"])];
    let t1 = s.server(&result_set(&["v"], &rows, true, 2));
    let mut d = MyDecoder::with_max_text(1000);
    let out = feed(&mut d, &s.segs);
    let mut want = row(Kind::Simple, None, t0, t1, Some(2));
    want.text = Some(text[..1000].to_vec());
    want.text_truncated = true;
    assert_eq!(out, vec![want]);
    assert_eq!(d.counters().desyncs, 0);
}

#[test]
fn server_header_lost_then_next_command() {
    let mut s = Script::default();
    s.connect(CAPS, "app", Some("shop"));
    s.command(&cmd(COM_QUERY, b"select v from t"));
    let rows: Vec<_> = (0..100).map(|_| text_row(&[&[b'v'; 50]])).collect();
    s.server(&result_set(&["v"], &rows, false, 2));
    let t0 = s.command(&cmd(COM_QUERY, b"select 2"));
    let t1 = s.server(&[ok(0, 2)]);
    let mut d = MyDecoder::new();
    let mut out = Vec::new();
    for (i, seg) in s.segs.iter().enumerate() {
        // The result set's write captured up to 512 bytes, then split in
        // two system calls: a row header falls in the bytes not captured.
        if i == 4 {
            let (a, b) = seg.bytes.split_at(3000);
            feed_chunk(
                &mut d,
                seg.dir,
                &a[..512],
                a.len() as u64,
                seg.time,
                &mut out,
            );
            feed_chunk(
                &mut d,
                seg.dir,
                &b[..512],
                b.len() as u64,
                seg.time,
                &mut out,
            );
        } else {
            feed_chunk(
                &mut d,
                seg.dir,
                &seg.bytes,
                seg.bytes.len() as u64,
                seg.time,
                &mut out,
            );
        }
    }
    assert_eq!(
        out,
        vec![row(Kind::Simple, Some("select 2"), t0, t1, Some(0))]
    );
    let c = d.counters();
    assert_eq!(
        (c.desyncs, c.chunks_skipped, c.responses_unmatched),
        (1, 1, 0)
    );
}

#[test]
fn client_header_lost_then_resync() {
    let mut s = Script::default();
    s.connect(CAPS, "app", Some("shop"));
    s.command(&cmd(COM_STMT_PREPARE, b"select 1"));
    s.server(&prepare_ok(1, 1, 0, false));
    // Close and query in one read, captured up to 6 bytes: the query's
    // header is lost.
    let mut b = Vec::new();
    packets(0, &cmd(COM_STMT_CLOSE, &1u32.to_le_bytes()), &mut b);
    packets(0, &cmd(COM_QUERY, b"select 2"), &mut b);
    let mut segs = s.segs.clone();
    segs.push(Seg {
        dir: Direction::Read,
        bytes: b,
        time: 70_000,
    });
    let mut s2 = Script::default();
    s2.server(&[ok(0, 2)]);
    let t0 = s2.command(&cmd(COM_QUERY, b"select 3"));
    let t1 = s2.server(&[ok(4, 2)]);
    segs.extend(mariadb_reads(&s2.segs));
    let mut d = MyDecoder::new();
    let mut out = Vec::new();
    for seg in &segs {
        let cut = if seg.time == 70_000 {
            6
        } else {
            seg.bytes.len()
        };
        feed_chunk(
            &mut d,
            seg.dir,
            &seg.bytes[..cut],
            seg.bytes.len() as u64,
            seg.time,
            &mut out,
        );
    }
    let mut want = row(Kind::Simple, Some("select 3"), t0, t1, Some(4));
    // The row's identity survives the loss.
    want.user = Some("app".into());
    assert_eq!(out, vec![want]);
    let c = d.counters();
    assert_eq!((c.desyncs, c.chunks_skipped), (1, 1));
}

#[test]
fn joined_mid_stream() {
    let s = recorded();
    let whole = feed(&mut MyDecoder::new(), &s.segs);
    let segs = mariadb_reads(&s.segs);
    // A command's first chunk: its header.
    let header = |t: u64| {
        segs.iter()
            .position(|s| s.dir == Direction::Read && s.time == t)
            .unwrap()
    };
    let prepare = segs
        .iter()
        .position(|s| s.bytes.first() == Some(&COM_STMT_PREPARE))
        .unwrap()
        - 1;
    // Joined at every chunk: rows for exactly the commands seen from their
    // header on, without user or database unless the handshake was seen,
    // without text when the prepare was not.
    for from in 0..segs.len() {
        let want: Vec<Statement> = whole
            .iter()
            .filter(|w| header(w.start_ns) >= from)
            .map(|w| {
                let mut w = w.clone();
                if from > 0 {
                    (w.user, w.database) = (None, None);
                }
                if w.kind == Kind::Prepared && from > prepare {
                    w.text = None;
                }
                w
            })
            .collect();
        let mut d = MyDecoder::new();
        assert_eq!(feed(&mut d, &segs[from..]), want, "joined at {from}");
        let c = d.counters();
        let unknown = want
            .iter()
            .filter(|w| w.kind == Kind::Prepared && w.text.is_none());
        assert_eq!(
            c.unknown_prepared,
            unknown.count() as u64,
            "joined at {from}"
        );
        assert_eq!(c.desyncs + c.responses_unmatched, 0, "joined at {from}");
    }
}

#[test]
fn mid_stream_prepare_without_capabilities() {
    for deprecate in [false, true] {
        let mut s = Script::default();
        s.command(&cmd(COM_STMT_PREPARE, b"select ?, ?"));
        s.server(&prepare_ok(7, 2, 2, deprecate));
        let a = s.command(&execute(7, &[Some(1), Some(0)]));
        let b = s.server(&result_set(
            &["a", "b"],
            &[binary_row(&[1, 0])],
            deprecate,
            2,
        ));
        s.command(&cmd(COM_STMT_PREPARE, b"do 1"));
        s.server(&prepare_ok(8, 0, 0, deprecate));
        let c = s.command(&execute(8, &[]));
        let e = s.server(&[ok(0, 2)]);
        let mut d = MyDecoder::new();
        let out = feed(&mut d, &mariadb_reads(&s.segs));
        let mut r1 = row(Kind::Prepared, Some("select ?, ?"), a, b, Some(1));
        let mut r2 = row(Kind::Prepared, Some("do 1"), c, e, Some(0));
        for (r, n) in [(&mut r1, "7"), (&mut r2, "8")] {
            (r.user, r.database, r.name) = (None, None, Some(n.into()));
        }
        assert_eq!(out, vec![r1, r2], "deprecate_eof {deprecate}");
        let c = d.counters();
        assert_eq!(
            (c.desyncs, c.chunks_skipped, c.responses_unmatched),
            (0, 0, 0)
        );
    }
}

#[test]
fn resync_needs_a_command() {
    let mut d = MyDecoder::new();
    let mut out = Vec::new();
    let t = |d: &mut MyDecoder, out: &mut Vec<_>, dir, b: &[u8]| {
        feed_chunk(d, dir, b, b.len() as u64, 1, out)
    };
    // LOCAL INFILE data (sequence id 2), an unknown command byte, a
    // COM_PING of the wrong length, a payload read alone, a header whose
    // payload never comes whole before the server writes.
    t(&mut d, &mut out, Direction::Read, b"\x03\x00\x00\x021\n2");
    t(&mut d, &mut out, Direction::Read, b"\x01\x00\x00\x00\x00");
    t(
        &mut d,
        &mut out,
        Direction::Read,
        b"\x02\x00\x00\x00\x0e\x00",
    );
    t(&mut d, &mut out, Direction::Read, b"\x03select 1");
    t(&mut d, &mut out, Direction::Read, b"\x09\x00\x00\x00");
    t(&mut d, &mut out, Direction::Read, b"\x03sel");
    t(
        &mut d,
        &mut out,
        Direction::Write,
        b"\x07\x00\x00\x01\x00\x00\x00\x02\x00\x00\x00",
    );
    assert!(out.is_empty());
    assert_eq!(d.counters().chunks_skipped, 7);
    // Then a command: decoded.
    t(&mut d, &mut out, Direction::Read, b"\x09\x00\x00\x00");
    t(&mut d, &mut out, Direction::Read, b"\x03select 1");
    t(
        &mut d,
        &mut out,
        Direction::Write,
        b"\x07\x00\x00\x01\x00\x00\x00\x02\x00\x00\x00",
    );
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].text.as_deref(), Some(&b"select 1"[..]));
    assert_eq!(d.counters().chunks_skipped, 7);
}
