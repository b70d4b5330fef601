//! A conversation recorded from MariaDB 10.11 (Debian 12) with `strace -xx`
//! on the server: pymysql 1.1 over TCP logging in as `app` to `shop`,
//! INSERT, SELECT, a failing SELECT, a multi-statement, a prepared
//! statement executed twice (raw COM_STMT_PREPARE/EXECUTE packets), its
//! COM_STMT_CLOSE, COM_INIT_DB, a SELECT, COM_QUIT. One line per system
//! call: `R` (recvfrom) or `W` (sendto), then the bytes in hex.

use super::enc::*;
use crate::mysql::MyDecoder;
use crate::{Counters, Decoder, Direction, Kind, Statement};
use proptest::prelude::*;

const RECORDED: &str = include_str!("mariadb-10.11-pymysql.txt");

/// The recorded chunks, the i-th at time `(i + 1) * 1000`.
fn recorded() -> Vec<Seg> {
    RECORDED
        .lines()
        .enumerate()
        .map(|(i, l)| {
            let (d, hex) = l.split_once(' ').unwrap();
            let bytes = (0..hex.len())
                .step_by(2)
                .map(|j| u8::from_str_radix(&hex[j..j + 2], 16).unwrap())
                .collect();
            let dir = if d == "R" {
                Direction::Read
            } else {
                Direction::Write
            };
            Seg {
                dir,
                bytes,
                time: (i as u64 + 1) * 1000,
            }
        })
        .collect()
}

/// A row of the recording: its command's payload is chunk `read` (1-based
/// line), its response ends in chunk `write`.
fn rec(kind: Kind, text: &str, read: u64, write: u64, rows: Option<u64>) -> Statement {
    row(kind, Some(text), read * 1000, write * 1000, rows)
}

fn expected() -> Vec<Statement> {
    let mut nope = rec(Kind::Simple, "select * from nope", 18, 19, None);
    nope.error = error(1146, "42S02", "Table 'shop.nope' doesn't exist");
    let q = "select v from a where id > ?";
    let mut e1 = rec(Kind::Prepared, q, 28, 29, Some(2));
    let mut e2 = rec(Kind::Prepared, q, 31, 32, Some(1));
    e1.name = Some("1".into());
    e2.name = Some("1".into());
    let mut last = rec(Kind::Simple, "select 4", 39, 40, Some(1));
    last.database = Some("mysql".into());
    vec![
        rec(Kind::Simple, "SET NAMES utf8mb4", 6, 7, Some(0)),
        rec(Kind::Simple, "SET AUTOCOMMIT = 0", 9, 10, Some(0)),
        rec(
            Kind::Simple,
            "insert into a(v) values ('x'), ('y')",
            12,
            13,
            Some(2),
        ),
        rec(Kind::Simple, "select id, v from a", 15, 16, Some(2)),
        nope,
        rec(Kind::Simple, "select 1; select 2, 3", 21, 23, Some(2)),
        e1,
        e2,
        last,
    ]
}

#[test]
fn recorded_mariadb_conversation() {
    let segs = recorded();
    assert_eq!(segs.len(), 42);
    let mut d = MyDecoder::new();
    assert_eq!(feed(&mut d, &segs), expected());
    d.close(KEY);
    let want = Counters {
        chunks: segs.len() as u64,
        ..Counters::default()
    };
    assert_eq!(d.counters(), &want);
}

#[test]
fn recorded_joined_at_every_chunk() {
    let segs = recorded();
    for from in 1..segs.len() {
        let mut d = MyDecoder::new();
        let out = feed(&mut d, &segs[from..]);
        // The rows of the commands whose header chunk (the line before
        // the payload's) was seen.
        let want: Vec<_> = expected()
            .into_iter()
            .filter(|w| w.start_ns / 1000 - 2 >= from as u64)
            .map(|mut w| {
                (w.user, w.database) = (None, None);
                if w.text.as_deref() == Some(&b"select 4"[..]) && from <= 34 {
                    w.database = Some("mysql".into()); // COM_INIT_DB seen
                }
                if w.kind == Kind::Prepared && from > 23 {
                    w.text = None;
                }
                w
            })
            .collect();
        assert_eq!(out, want, "joined at {from}");
        assert_eq!(d.counters().desyncs, 0, "joined at {from}");
    }
}

proptest! {
    #[test]
    fn recorded_split_anywhere(cuts in proptest::collection::vec(any::<proptest::sample::Index>(), 0..60)) {
        let segs = recorded();
        let total: usize = segs[1..].iter().map(|s| s.bytes.len()).sum();
        let mut at: Vec<usize> = cuts.iter().map(|c| c.index(total)).collect();
        at.sort_unstable();
        let mut d = MyDecoder::new();
        let mut out = Vec::new();
        feed_chunk(&mut d, segs[0].dir, &segs[0].bytes, segs[0].bytes.len() as u64, segs[0].time, &mut out);
        let mut base = 0;
        for s in &segs[1..] {
            let end = base + s.bytes.len();
            let mut from = 0;
            for &a in at.iter().filter(|&&a| a > base && a < end) {
                let part = &s.bytes[from..a - base];
                feed_chunk(&mut d, s.dir, part, part.len() as u64, s.time, &mut out);
                from = a - base;
            }
            let part = &s.bytes[from..];
            feed_chunk(&mut d, s.dir, part, part.len() as u64, s.time, &mut out);
            base = end;
        }
        prop_assert_eq!(out, expected());
    }
}
