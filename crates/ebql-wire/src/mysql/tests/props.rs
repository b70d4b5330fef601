//! Property tests: random conversations decode to the rows they were built
//! with, however their chunks are split; arbitrary bytes never panic; cut
//! and lost chunks never make a text the client did not send.

use super::enc::*;
use super::framing::mariadb_reads;
use crate::mysql::wire::*;
use crate::mysql::MyDecoder;
use crate::{Counters, Decoder, Direction, Kind, Statement};
use proptest::collection::vec;
use proptest::prelude::*;
use proptest::sample::Index;

/// One step of a random conversation.
#[derive(Clone, Debug)]
struct Op {
    kind: u8,
    text: String,
    a: u8,
    b: u8,
    params: Vec<Option<i64>>,
}

fn op() -> impl Strategy<Value = Op> {
    (
        0u8..8,
        "[ -~]{1,40}",
        any::<u8>(),
        any::<u8>(),
        vec(proptest::option::of(any::<i64>()), 0..4),
    )
        .prop_map(|(kind, text, a, b, params)| Op {
            kind,
            text,
            a,
            b,
            params,
        })
}

/// A result set of `n` rows over `cols` columns (text or binary rows).
fn rows(n: u8, cols: usize, binary: bool) -> Vec<Vec<u8>> {
    (0..n)
        .map(|i| {
            if binary {
                binary_row(&vec![i64::from(i); cols])
            } else {
                let v = [i; 3].map(|i| vec![b'0' + i % 10; usize::from(i)]);
                text_row(&v.iter().take(cols).map(|v| &v[..]).collect::<Vec<_>>())
            }
        })
        .collect()
}

/// The conversation the ops make, and the rows and unknown executions it
/// should decode to.
fn build(deprecate: bool, ops: &[Op]) -> (Script, Vec<Statement>, u64) {
    let caps =
        CLIENT_CAPS | CLIENT_SESSION_TRACK | if deprecate { CLIENT_DEPRECATE_EOF } else { 0 };
    let mut s = Script::default();
    s.connect(caps, "app", Some("shop"));
    let mut want = Vec::new();
    let mut unknown = 0;
    let mut prepared: Vec<(u32, String)> = Vec::new();
    let mut next_id = 1;
    let cols_of = |a: u8| 1 + usize::from(a % 3);
    let names = ["a", "b", "c"];
    for o in ops {
        let text = o.text.as_str();
        match o.kind {
            0..=2 => {
                let t0 = s.command(&cmd(COM_QUERY, text.as_bytes()));
                let (resp, n, e) = match o.kind {
                    0 => {
                        let n = o.b % 6;
                        let cols = &names[..cols_of(o.a)];
                        (
                            result_set(cols, &rows(n, cols.len(), false), deprecate, 2),
                            Some(u64::from(n)),
                            None,
                        )
                    }
                    1 => (
                        vec![ok(u64::from(o.a) * 1000, 2)],
                        Some(u64::from(o.a) * 1000),
                        None,
                    ),
                    _ => {
                        let code = 1000 + u16::from(o.a);
                        let e = err(code, "42000", text);
                        (vec![e], None, error(u32::from(code), "42000", text))
                    }
                };
                let t1 = s.server(&resp);
                let mut r = row(Kind::Simple, Some(text), t0, t1, n);
                r.error = e;
                want.push(r);
            }
            3 => {
                // Several results, one write each.
                let t0 = s.command(&cmd(COM_QUERY, text.as_bytes()));
                let parts = 1 + o.a % 3;
                let mut total = 0;
                let mut t1 = 0;
                for i in 0..parts {
                    let status = if i + 1 < parts {
                        2 | SERVER_MORE_RESULTS_EXISTS
                    } else {
                        2
                    };
                    let n = (o.b >> (2 * i)) % 4;
                    total += u64::from(n);
                    t1 = if n == 3 {
                        s.server(&[ok(3, status)])
                    } else {
                        s.server(&result_set(&["a"], &rows(n, 1, false), deprecate, status))
                    };
                }
                want.push(row(Kind::Simple, Some(text), t0, t1, Some(total)));
            }
            4 => {
                let t0 = s.command(&cmd(COM_STMT_PREPARE, text.as_bytes()));
                if o.b % 4 == 0 {
                    let t1 = s.server(&[err(1064, "42000", "syntax")]);
                    let mut r = row(Kind::PrepareFailed, Some(text), t0, t1, None);
                    r.error = error(1064, "42000", "syntax");
                    want.push(r);
                } else {
                    let cols = (o.a % 3) as u16;
                    s.server(&prepare_ok(next_id, cols, o.params.len() as u16, deprecate));
                    prepared.push((next_id, o.text.clone()));
                    next_id += 1;
                }
            }
            5 | 6 => {
                let known = (!prepared.is_empty() && o.a % 5 != 0)
                    .then(|| prepared[usize::from(o.a) % prepared.len()].clone());
                let id = known.as_ref().map_or(1000 + u32::from(o.a), |k| k.0);
                let t0 = s.command(&execute(id, &o.params));
                let (t1, n, e) = if known.is_none() {
                    unknown += 1;
                    let t1 = s.server(&[err(1243, "HY000", "Unknown prepared statement handler")]);
                    (
                        t1,
                        None,
                        error(1243, "HY000", "Unknown prepared statement handler"),
                    )
                } else if o.kind == 5 {
                    let n = o.b % 5;
                    let cols = cols_of(o.a);
                    let t1 = s.server(&result_set(
                        &names[..cols],
                        &rows(n, cols, true),
                        deprecate,
                        2,
                    ));
                    (t1, Some(u64::from(n)), None)
                } else {
                    (
                        s.server(&[ok(u64::from(o.b), 2)]),
                        Some(u64::from(o.b)),
                        None,
                    )
                };
                let mut r = row(
                    Kind::Prepared,
                    known.as_ref().map(|k| k.1.as_str()),
                    t0,
                    t1,
                    n,
                );
                r.name = Some(id.to_string());
                r.error = e;
                want.push(r);
            }
            _ => {
                // Close a statement (no response), or ping.
                if let Some(i) = (!prepared.is_empty()).then(|| usize::from(o.a) % prepared.len()) {
                    let (id, _) = prepared.remove(i);
                    s.command(&cmd(COM_STMT_CLOSE, &id.to_le_bytes()));
                } else {
                    s.command(&cmd(COM_PING, b""));
                    s.server(&[ok(0, 2)]);
                }
            }
        }
    }
    (s, want, unknown)
}

fn conversation() -> impl Strategy<Value = (bool, Vec<Op>)> {
    (any::<bool>(), vec(op(), 1..16))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn random_conversations_decode_exactly((deprecate, ops) in conversation()) {
        let (s, want, unknown) = build(deprecate, &ops);
        for segs in [s.segs.clone(), mariadb_reads(&s.segs)] {
            let mut d = MyDecoder::new();
            prop_assert_eq!(&feed(&mut d, &segs), &want);
            let c = Counters { chunks: segs.len() as u64, unknown_prepared: unknown, ..Counters::default() };
            prop_assert_eq!(d.counters(), &c);
        }
    }

    #[test]
    fn random_splits_change_nothing(
        (deprecate, ops) in conversation(),
        cuts in vec((any::<Index>(), any::<Index>()), 0..40),
    ) {
        let (s, want, _) = build(deprecate, &ops);
        // Split points per segment (not the Handshake: it comes whole).
        let mut at: Vec<Vec<usize>> = vec![Vec::new(); s.segs.len()];
        for (i, k) in &cuts {
            let i = 1 + i.index(s.segs.len() - 1);
            at[i].push(k.index(s.segs[i].bytes.len()));
        }
        let mut d = MyDecoder::new();
        let mut out = Vec::new();
        let mut chunks = 0;
        for (seg, at) in s.segs.iter().zip(&mut at) {
            at.push(0);
            at.push(seg.bytes.len());
            at.sort_unstable();
            at.dedup();
            for w in at.windows(2) {
                let part = &seg.bytes[w[0]..w[1]];
                feed_chunk(&mut d, seg.dir, part, part.len() as u64, seg.time, &mut out);
                chunks += 1;
            }
        }
        prop_assert_eq!(out, want);
        prop_assert_eq!(d.counters().chunks, chunks);
        prop_assert_eq!(d.counters().desyncs + d.counters().chunks_skipped, 0);
    }

    #[test]
    fn captures_with_tails_make_no_wrong_row(
        (deprecate, ops) in conversation(),
        // At least 64 bytes: a single OK or ERR packet here is whole (a cut
        // one is decoded from what was captured, as before), result sets
        // are cut.
        prefix in 64usize..256,
        keep in 0usize..48,
    ) {
        // Every server write after the login cut to `prefix` bytes, `keep`
        // of its last bytes kept: rows are the conversation's, some left
        // out (counted), some without their row count (`rows` None), never
        // a wrong one.
        let (s, want, _) = build(deprecate, &ops);
        for (segs, login) in [(s.segs.clone(), 3), (mariadb_reads(&s.segs), 4)] {
            let mut d = MyDecoder::new();
            let mut out = feed(&mut d, &segs[..login]);
            let mut missing = 0;
            for s in &segs[login..] {
                let (p, k) = if s.dir == Direction::Write { (prefix, keep) } else { (usize::MAX, 0) };
                out.extend(feed_captured(&mut d, std::slice::from_ref(s), p, k));
                missing += s.bytes.len().saturating_sub(p.saturating_add(k)) as u64;
            }
            prop_assert!(only_known_rows(&out, &want), "{:#?}\nnot in\n{:#?}", out, want);
            prop_assert_eq!(d.counters().bytes_not_captured, missing);
        }
    }

    #[test]
    fn arbitrary_bytes_never_panic(
        chunks in vec((any::<bool>(), vec(any::<u8>(), 0..64), 0u64..100_000), 0..64),
    ) {
        let mut d = MyDecoder::new();
        let mut out = Vec::new();
        for (write, data, extra) in &chunks {
            let dir = if *write { Direction::Write } else { Direction::Read };
            feed_chunk(&mut d, dir, data, data.len() as u64 + extra, 1, &mut out);
        }
        let c = *d.counters();
        prop_assert_eq!(c.chunks, chunks.len() as u64);
        prop_assert_eq!(c.bytes_not_captured, chunks.iter().map(|c| c.2).sum::<u64>());
        d.close(KEY);
    }

    #[test]
    fn cuts_and_noise_make_only_sent_texts(
        (deprecate, ops) in conversation(),
        fate in vec((0u8..16, any::<Index>()), 1..200),
        noise in vec(any::<u8>(), 0..32),
    ) {
        let (s, _, _) = build(deprecate, &ops);
        let out = mangle(&mariadb_reads(&s.segs), &fate, &noise, false);
        for r in &out {
            if let Some(t) = &r.text {
                let sent = s.texts.iter().any(|s| s.starts_with(t) && (r.text_truncated || s == t));
                prop_assert!(sent, "{:?} was not sent", String::from_utf8_lossy(t));
            } else {
                prop_assert_eq!(r.kind, Kind::Prepared);
            }
        }
    }

    #[test]
    fn silent_losses_never_panic(
        (deprecate, ops) in conversation(),
        fate in vec((0u8..16, any::<Index>()), 1..200),
        noise in vec(any::<u8>(), 0..32),
    ) {
        let (s, _, _) = build(deprecate, &ops);
        // No panic, every chunk counted, no row ending before it began.
        mangle(&mariadb_reads(&s.segs), &fate, &noise, true);
    }
}

/// Feeds `segs` with captures cut short (bytes moved but not captured),
/// noise the server never wrote, and, with `drop`, chunks lost without a
/// trace; the rows, each checked for `start_ns <= end_ns`.
fn mangle(segs: &[Seg], fate: &[(u8, Index)], noise: &[u8], drop: bool) -> Vec<Statement> {
    let mut d = MyDecoder::new();
    let mut out = Vec::new();
    let mut fed = 0;
    for (i, seg) in segs.iter().enumerate() {
        let (f, k) = fate[i % fate.len()];
        let data: &[u8] = match f {
            0 if drop => continue,
            1 | 2 => &seg.bytes[..k.index(seg.bytes.len() + 1)],
            4 => {
                // Cut, with the call's last bytes.
                let n = k.index(seg.bytes.len() + 1);
                let tail = &seg.bytes[n.max(seg.bytes.len().saturating_sub(17))..];
                feed_tail(
                    &mut d,
                    seg.dir,
                    (&seg.bytes[..n], tail),
                    seg.bytes.len() as u64,
                    seg.time,
                    &mut out,
                );
                fed += 1;
                continue;
            }
            3 => {
                feed_chunk(
                    &mut d,
                    Direction::Write,
                    noise,
                    noise.len() as u64,
                    seg.time,
                    &mut out,
                );
                fed += 1;
                &seg.bytes
            }
            _ => &seg.bytes,
        };
        feed_chunk(
            &mut d,
            seg.dir,
            data,
            seg.bytes.len() as u64,
            seg.time,
            &mut out,
        );
        fed += 1;
    }
    assert_eq!(d.counters().chunks, fed);
    for r in &out {
        assert!(r.start_ns <= r.end_ns, "{r:?}");
    }
    d.close(KEY);
    out
}
