//! Responses longer than the capture, finished from the writes' last bytes
//! ([`crate::Chunk::tail`]): rows without a row count, or counted as lost,
//! never a wrong row.

use super::enc::*;
use crate::mysql::wire::*;
use crate::mysql::MyDecoder;
use crate::{Counters, Decoder, Direction, Kind, Statement};

const EOF_CAPS: u64 = CLIENT_CAPS | CLIENT_SESSION_TRACK;
const NO_EOF_CAPS: u64 = EOF_CAPS | CLIENT_DEPRECATE_EOF;
/// What the probe keeps: a prefix of each call, the last bytes of longer ones.
const PREFIX: usize = 2048;
const KEEP: usize = 256;

fn caps(deprecate: bool) -> u64 {
    if deprecate {
        NO_EOF_CAPS
    } else {
        EOF_CAPS
    }
}

/// `n` text rows of 120 bytes (sysbench's `c`).
fn long_rows(n: usize) -> Vec<Vec<u8>> {
    (0..n).map(|_| text_row(&[&[b'x'; 119]])).collect()
}

/// The segments with the server write at `i` cut into writes of `size` bytes.
fn split_write(segs: &[Seg], i: usize, size: usize) -> Vec<Seg> {
    let mut v = segs[..i].to_vec();
    v.extend(segs[i].bytes.chunks(size).map(|b| Seg {
        dir: Direction::Write,
        bytes: b.to_vec(),
        time: segs[i].time,
    }));
    v.extend_from_slice(&segs[i + 1..]);
    v
}

/// Bytes the probe did not capture of `segs`.
fn missing(segs: &[Seg], prefix: usize, keep: usize) -> u64 {
    segs.iter()
        .map(|s| s.bytes.len().saturating_sub(prefix + keep) as u64)
        .sum()
}

/// Feeds `segs` without tails and with them: the counters without tails
/// (what was lost before), and the rows and counters with them.
fn both(segs: &[Seg]) -> (Counters, Vec<Statement>, Counters) {
    let mut d = MyDecoder::new();
    feed_captured(&mut d, segs, PREFIX, 0);
    let before = *d.counters();
    let mut d = MyDecoder::new();
    let out = feed_captured(&mut d, segs, PREFIX, KEEP);
    assert_eq!(d.counters().bytes_not_captured, missing(segs, PREFIX, KEEP));
    (before, out, *d.counters())
}

/// The counters but the bytes not captured.
fn lost(c: Counters) -> Counters {
    Counters {
        bytes_not_captured: 0,
        ..c
    }
}

fn clean(chunks: usize) -> Counters {
    Counters {
        chunks: chunks as u64,
        ..Counters::default()
    }
}

/// A long SELECT's result in one write, then a short query.
fn long_select(deprecate: bool, status: u16) -> (Script, u64, u64, u64, u64) {
    let mut s = Script::default();
    s.connect(caps(deprecate), "app", Some("shop"));
    let a = s.command(&cmd(
        COM_QUERY,
        b"SELECT c FROM sbtest1 WHERE id BETWEEN 1 AND 100",
    ));
    let b = s.server(&result_set(&["c"], &long_rows(100), deprecate, status));
    let c = s.command(&cmd(COM_QUERY, b"select 2"));
    let d = s.server(&[ok(0, 2)]);
    (s, a, b, c, d)
}

#[test]
fn long_result_in_one_write() {
    for deprecate in [false, true] {
        let (s, a, b, c, d) = long_select(deprecate, 2);
        assert!(s.segs[4].bytes.len() > 12_000);
        for segs in [s.segs.clone(), super::framing::mariadb_reads(&s.segs)] {
            let (before, out, after) = both(&segs);
            assert_eq!(before.desyncs, 1, "lost without the tail");
            let text = "SELECT c FROM sbtest1 WHERE id BETWEEN 1 AND 100";
            assert_eq!(
                out,
                vec![
                    row(Kind::Simple, Some(text), a, b, None),
                    row(Kind::Simple, Some("select 2"), c, d, Some(0)),
                ],
                "deprecate_eof {deprecate}"
            );
            assert_eq!(lost(after), clean(segs.len()));
        }
    }
}

#[test]
fn long_result_in_several_writes() {
    for deprecate in [false, true] {
        let mut s = Script::default();
        s.connect(caps(deprecate), "app", Some("shop"));
        let a = s.command(&cmd(COM_QUERY, b"SELECT c FROM sbtest1"));
        let b = s.server(&result_set(&["c"], &long_rows(300), deprecate, 2));
        let c = s.command(&cmd(COM_QUERY, b"select 2"));
        let d = s.server(&[ok(0, 2)]);
        // 16 KiB writes, the last one short (whole), or cut too.
        for size in [16 * 1024, 12_000, 5000] {
            let segs = split_write(&s.segs, 4, size);
            let (_, out, after) = both(&segs);
            assert_eq!(
                out,
                vec![
                    row(Kind::Simple, Some("SELECT c FROM sbtest1"), a, b, None),
                    row(Kind::Simple, Some("select 2"), c, d, Some(0)),
                ],
                "deprecate_eof {deprecate}, writes of {size}"
            );
            assert_eq!(lost(after), clean(segs.len()));
        }
    }
}

#[test]
fn long_binary_result() {
    for deprecate in [false, true] {
        let mut s = Script::default();
        s.connect(caps(deprecate), "app", Some("shop"));
        s.command(&cmd(COM_STMT_PREPARE, b"SELECT id FROM t WHERE id > ?"));
        s.server(&prepare_ok(3, 1, 1, deprecate));
        let a = s.command(&execute(3, &[Some(0)]));
        let rows: Vec<_> = (0..1000).map(|i| binary_row(&[1000 + i])).collect();
        let b = s.server(&result_set(&["id"], &rows, deprecate, 2));
        let c = s.command(&execute(3, &[Some(999)]));
        let d = s.server(&result_set(&["id"], &[binary_row(&[1])], deprecate, 2));
        let (_, out, after) = both(&s.segs);
        let q = "SELECT id FROM t WHERE id > ?";
        let mut r1 = row(Kind::Prepared, Some(q), a, b, None);
        let mut r2 = row(Kind::Prepared, Some(q), c, d, Some(1));
        r1.name = Some("3".into());
        r2.name = Some("3".into());
        assert_eq!(out, vec![r1, r2], "deprecate_eof {deprecate}");
        assert_eq!(lost(after), clean(s.segs.len()));
    }
}

#[test]
fn error_after_long_rows() {
    for deprecate in [false, true] {
        let mut s = Script::default();
        s.connect(caps(deprecate), "app", Some("shop"));
        let a = s.command(&cmd(COM_QUERY, b"SELECT c FROM sbtest1"));
        let mut resp = result_set(&["c"], &long_rows(100), deprecate, 2);
        *resp.last_mut().unwrap() = err(1317, "70100", "Query execution was interrupted");
        let b = s.server(&resp);
        let (_, out, after) = both(&s.segs);
        let mut want = row(Kind::Simple, Some("SELECT c FROM sbtest1"), a, b, None);
        want.error = error(1317, "70100", "Query execution was interrupted");
        assert_eq!(out, vec![want], "deprecate_eof {deprecate}");
        assert_eq!(lost(after), clean(s.segs.len()));
    }
}

#[test]
fn tail_without_a_terminal_is_lost_as_before() {
    let (s, _, _, c, d) = long_select(false, 2);
    let next = row(Kind::Simple, Some("select 2"), c, d, Some(0));
    // The EOF's length byte damaged; or the response continues in a write
    // that was never seen; in one write or several.
    let mut damaged = s.segs.clone();
    let n = damaged[4].bytes.len();
    damaged[4].bytes[n - 9] = 6;
    let mut cut = s.segs.clone();
    cut[4].bytes.truncate(n - 300);
    for segs in [
        damaged.clone(),
        split_write(&damaged, 4, 5000),
        cut.clone(),
        split_write(&cut, 4, 4000),
    ] {
        let (before, out, after) = both(&segs);
        assert_eq!(out, vec![next.clone()]);
        assert_eq!(lost(after), lost(before));
        assert_eq!(after.desyncs, 1);
    }
    // The connection closes (or greets anew) inside the response: counted
    // as before.
    let segs = split_write(&cut, 4, 4000);
    for end in [Some(greeting(SERVER_CAPS)), None] {
        let segs = &segs[..segs.len() - 2];
        let mut ds = [MyDecoder::new(), MyDecoder::new()];
        for (d, keep) in ds.iter_mut().zip([0, KEEP]) {
            let mut out = feed_captured(d, segs, PREFIX, keep);
            match &end {
                Some(g) => {
                    let mut b = Vec::new();
                    packets(0, g, &mut b);
                    feed_chunk(d, Direction::Write, &b, b.len() as u64, 1, &mut out);
                }
                None => d.close(KEY),
            }
            assert!(out.is_empty());
        }
        assert_eq!(lost(*ds[0].counters()), lost(*ds[1].counters()));
    }
}

#[test]
fn more_results_in_the_tail() {
    for deprecate in [false, true] {
        let more = 2 | SERVER_MORE_RESULTS_EXISTS;
        // The next result in its own write: the framing resumes there.
        let mut s = Script::default();
        s.connect(caps(deprecate), "app", Some("shop"));
        let a = s.command(&cmd(COM_QUERY, b"CALL p()"));
        s.server(&result_set(&["c"], &long_rows(100), deprecate, more));
        let b = s.server(&[ok(0, 2)]);
        let c = s.command(&cmd(COM_QUERY, b"select 2"));
        let d = s.server(&[ok(0, 2)]);
        let (_, out, after) = both(&s.segs);
        assert_eq!(
            out,
            vec![
                row(Kind::Simple, Some("CALL p()"), a, b, None),
                row(Kind::Simple, Some("select 2"), c, d, Some(0)),
            ]
        );
        assert_eq!(lost(after), clean(s.segs.len()));
        // The next result long too.
        let mut s = Script::default();
        s.connect(caps(deprecate), "app", Some("shop"));
        let a = s.command(&cmd(COM_QUERY, b"CALL p()"));
        s.server(&result_set(&["c"], &long_rows(100), deprecate, more));
        let b = s.server(&result_set(&["c"], &long_rows(50), deprecate, 2));
        let (_, out, after) = both(&s.segs);
        assert_eq!(out, vec![row(Kind::Simple, Some("CALL p()"), a, b, None)]);
        assert_eq!(lost(after), clean(s.segs.len()));
        // No more result comes (the client's next command), or one that
        // does not continue the sequence ids: no row for the first command.
        let (s, _, _, c, d) = long_select(deprecate, more);
        let (before, out, after) = both(&s.segs);
        assert_eq!(
            out,
            vec![row(Kind::Simple, Some("select 2"), c, d, Some(0))]
        );
        assert_eq!(lost(after), lost(before));
        let mut segs = s.segs.clone();
        let mut b = Vec::new();
        packets(7, &ok(0, 2), &mut b);
        segs.insert(
            5,
            Seg {
                dir: Direction::Write,
                bytes: b,
                time: 99,
            },
        );
        let mut dec = MyDecoder::new();
        let out = feed_captured(&mut dec, &segs, PREFIX, KEEP);
        assert_eq!(
            out,
            vec![row(Kind::Simple, Some("select 2"), c, d, Some(0))]
        );
        assert_eq!(dec.counters().desyncs, 1);
    }
}

#[test]
fn metadata_longer_than_the_capture() {
    let cols: Vec<String> = (0..100).map(|i| format!("column_{i}")).collect();
    let cols: Vec<&str> = cols.iter().map(String::as_str).collect();
    for deprecate in [false, true] {
        let mut s = Script::default();
        s.connect(caps(deprecate), "app", Some("shop"));
        let a = s.command(&cmd(COM_QUERY, b"SELECT * FROM wide"));
        let vals = vec![&b"v"[..]; 100];
        let b = s.server(&result_set(&cols, &[text_row(&vals)], deprecate, 2));
        s.command(&cmd(COM_QUERY, b"select 2"));
        s.server(&[ok(0, 2)]);
        let (before, out, after) = both(&s.segs);
        let first = row(Kind::Simple, Some("SELECT * FROM wide"), a, b, None);
        if deprecate {
            // No EOF after the definitions: the OK ends the result.
            assert_eq!(out.len(), 2);
            assert_eq!(out[0], first);
            assert_eq!(lost(after), clean(s.segs.len()));
        } else {
            // The final EOF may be the one ending the definitions: taken
            // as it, the next command shows the response was not followed.
            assert_eq!(out.len(), 1);
            assert_eq!(out[0].text.as_deref(), Some(&b"select 2"[..]));
            assert_eq!(lost(after), lost(before));
        }
    }
}

#[test]
fn overlapping_commands_are_lost_as_before() {
    // A command read while another waits: the write may answer either.
    let mut s = Script::default();
    s.connect(EOF_CAPS, "app", Some("shop"));
    s.command(&cmd(COM_QUERY, b"select 1"));
    s.command(&cmd(COM_QUERY, b"SELECT c FROM sbtest1"));
    s.server(&result_set(&["c"], &long_rows(100), false, 2));
    let c = s.command(&cmd(COM_QUERY, b"select 2"));
    let d = s.server(&[ok(0, 2)]);
    let (before, out, after) = both(&s.segs);
    assert_eq!(
        out,
        vec![row(Kind::Simple, Some("select 2"), c, d, Some(0))]
    );
    assert_eq!(lost(after), lost(before));
    assert_eq!(after.desyncs, 2);
}
