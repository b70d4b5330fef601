//! Properties over generated conversations: chunk boundaries do not
//! matter, arbitrary bytes never panic, and what the capture loses (cut
//! chunks, a connection's beginning) or adds (garbage between exchanges,
//! garbage connections) never yields a text the client did not send.

use proptest::collection::vec;
use proptest::prelude::*;

use super::wire::*;
use super::*;

/// One exchange of a conversation.
#[derive(Clone, Debug)]
enum Op {
    Simple {
        text: String,
        rows: u8,
    },
    SimpleError {
        text: String,
    },
    Empty,
    Unnamed {
        text: String,
        rows: u8,
        param: Vec<u8>,
    },
    Named {
        name: u8,
        text: String,
        execs: u8,
    },
    PipelineError {
        texts: Vec<String>,
        fail_at: usize,
    },
    Copy {
        lines: u8,
    },
    Long {
        len: u16,
    },
    /// A result of `rows` rows of 100 bytes, written in calls of 8 KiB:
    /// `how` 0 a Query, 1 a Query failing at its end, 2 an Execute.
    Big {
        text: String,
        rows: u16,
        how: u8,
    },
}

fn text() -> impl Strategy<Value = String> {
    "[a-z0-9 ,*=()]{0,24}"
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (text(), 0u8..4).prop_map(|(text, rows)| Op::Simple { text, rows }),
        text().prop_map(|text| Op::SimpleError { text }),
        Just(Op::Empty),
        (text(), 0u8..3, vec(any::<u8>(), 0..12)).prop_map(|(text, rows, param)| Op::Unnamed {
            text,
            rows,
            param
        }),
        (0u8..3, text(), 1u8..4).prop_map(|(name, text, execs)| Op::Named { name, text, execs }),
        (vec(text(), 2..4), 0usize..4)
            .prop_map(|(texts, fail_at)| Op::PipelineError { texts, fail_at }),
        (0u8..3).prop_map(|lines| Op::Copy { lines }),
        (1000u16..20000).prop_map(|len| Op::Long { len }),
        (text(), 10u16..1500, 0u8..3).prop_map(|(text, rows, how)| Op::Big { text, rows, how }),
    ]
}

/// `n` one-column rows and their CommandComplete.
fn selected(n: u8) -> Vec<u8> {
    [rows(n.into(), 4), command_complete(&format!("SELECT {n}"))].concat()
}

/// Records a login then `ops` on `c`; returns the texts sent and the
/// number of statements that make rows.
fn record(c: &mut Conv, ops: &[Op]) -> (Vec<Vec<u8>>, usize) {
    let mut texts = Vec::new();
    let mut n = 0;
    let mut prepared = [false; 3];
    c.login();
    for op in ops {
        match op {
            Op::Simple { text, rows } => {
                c.simple(
                    text,
                    &[row_description(&["a"]), selected(*rows), ready(b'I')].concat(),
                );
                texts.push(text.clone().into_bytes());
                n += 1;
            }
            Op::SimpleError { text } => {
                c.simple(
                    text,
                    &[error("42601", "syntax error"), ready(b'I')].concat(),
                );
                texts.push(text.clone().into_bytes());
                n += 1;
            }
            Op::Empty => {
                c.simple("", &[empty_query(), ready(b'I')].concat());
                texts.push(Vec::new());
                n += 1;
            }
            Op::Unnamed { text, rows, param } => {
                let req = [
                    parse("", text, &[]),
                    bind("", "", &[1], &[Some(param)], &[]),
                    execute("", 0),
                    sync(),
                ];
                c.read(&req.concat());
                c.write(
                    &[
                        parse_complete(),
                        bind_complete(),
                        selected(*rows),
                        ready(b'I'),
                    ]
                    .concat(),
                );
                texts.push(text.clone().into_bytes());
                n += 1;
            }
            Op::Named { name, text, execs } => {
                let name_s = format!("stmt{name}");
                let slot = &mut prepared[usize::from(*name)];
                if std::mem::replace(slot, true) {
                    c.read(&[close(b'S', &name_s), sync()].concat());
                    c.write(&[close_complete(), ready(b'I')].concat());
                }
                c.read(&[parse(&name_s, text, &[]), sync()].concat());
                c.write(&[parse_complete(), ready(b'I')].concat());
                for _ in 0..*execs {
                    c.read(&[bind0("", &name_s), execute("", 0), sync()].concat());
                    c.write(&[bind_complete(), selected(1), ready(b'I')].concat());
                }
                texts.push(text.clone().into_bytes());
                n += usize::from(*execs);
            }
            Op::PipelineError { texts: ts, fail_at } => {
                let fail_at = fail_at % ts.len();
                let req: Vec<u8> = ts
                    .iter()
                    .flat_map(|t| [parse("", t, &[]), bind0("", ""), execute("", 0)].concat())
                    .collect();
                c.read(&[req, sync()].concat());
                let mut resp = Vec::new();
                for _ in 0..fail_at {
                    resp.extend([parse_complete(), bind_complete(), selected(1)].concat());
                }
                resp.extend([error("42601", "syntax error"), ready(b'I')].concat());
                c.write(&resp);
                texts.extend(ts.iter().map(|t| t.clone().into_bytes()));
                n += fail_at + 1;
            }
            Op::Copy { lines } => {
                c.read(&query("copy t from stdin"));
                c.write(&copy_in_response(1));
                let data: Vec<u8> = (0..*lines)
                    .flat_map(|i| copy_data(format!("{i}\n").as_bytes()))
                    .collect();
                c.read(&[data, copy_done()].concat());
                c.write(&[command_complete(&format!("COPY {lines}")), ready(b'I')].concat());
                texts.push(b"copy t from stdin".to_vec());
                n += 1;
            }
            Op::Long { len } => {
                let text = "l".repeat(usize::from(*len));
                for part in query(&text).chunks(8192) {
                    c.read(part);
                }
                c.write(&[selected(1), ready(b'I')].concat());
                texts.push(text.into_bytes());
                n += 1;
            }
            Op::Big { text, rows: k, how } => {
                let body = rows(usize::from(*k), 100);
                let resp = match how {
                    0 => {
                        c.read(&query(text));
                        let end = command_complete(&format!("SELECT {k}"));
                        [row_description(&["a"]), body, end, ready(b'I')].concat()
                    }
                    1 => {
                        c.read(&query(text));
                        [body, error("57014", "canceled"), ready(b'I')].concat()
                    }
                    _ => {
                        let req = [parse("", text, &[]), bind0("", ""), execute("", 0), sync()];
                        c.read(&req.concat());
                        let end = command_complete(&format!("SELECT {k}"));
                        [parse_complete(), bind_complete(), body, end, ready(b'T')].concat()
                    }
                };
                for part in resp.chunks(8192) {
                    c.write(part);
                }
                texts.push(text.clone().into_bytes());
                n += 1;
            }
        }
    }
    c.read(&terminate());
    c.close();
    (texts, n)
}

/// Splits chunks at the given (event, position) seeds; pieces keep their
/// chunk's time.
fn split_all(evs: &[Ev], seeds: &[(usize, usize)]) -> Vec<Ev> {
    let mut v = evs.to_vec();
    for &(i, at) in seeds {
        let i = i % v.len();
        let Ev::Chunk(r) = &v[i] else { continue };
        if r.data.len() < 2 {
            continue;
        }
        let at = 1 + at % (r.data.len() - 1);
        let mut a = r.clone();
        let mut b = r.clone();
        a.tail.clear();
        a.data.truncate(at);
        a.len = at as u64;
        b.data.drain(..at);
        b.len -= at as u64;
        v[i] = Ev::Chunk(a);
        v.insert(i + 1, Ev::Chunk(b));
    }
    v
}

/// Garbage the client "sends" must hold no Query or Parse: those would be
/// texts sent.
fn no_texts(mut data: Vec<u8>, dir: Direction) -> Vec<u8> {
    if dir == Direction::Read {
        for b in &mut data {
            if matches!(*b, b'Q' | b'P') {
                *b = b'?';
            }
        }
    }
    data
}

/// A chunk of random bytes, or of messages with valid or random types,
/// random bodies and sometimes wrong lengths.
fn soup() -> impl Strategy<Value = Vec<u8>> {
    let typ = prop_oneof![
        prop::sample::select(b"QPBEDCSHXFdcfpRKZTIN123ntsAGHWVv".to_vec()),
        any::<u8>(),
    ];
    let len = prop_oneof![any::<u32>(), 0u32..64];
    let message =
        (typ, vec(any::<u8>(), 0..24), any::<bool>(), len).prop_map(|(t, body, wrong, len)| {
            let mut m = msg(t, &body);
            if wrong {
                m[1..5].copy_from_slice(&len.to_be_bytes());
            }
            m
        });
    prop_oneof![
        vec(any::<u8>(), 0..64),
        vec(message, 1..6).prop_map(|ms| ms.concat()),
        Just(startup(&[("user", "u")])),
        Just(ssl_request()),
    ]
}

/// `s` is `w`, or knows less of it (a text's prefix or no text, no tag,
/// no row count, an error's message prefix and no SQLSTATE, no user or
/// database). No text is a statement prepared while the framing was lost
/// (module documentation, "Resynchronization").
fn knows_less(s: &Statement, w: &Statement) -> bool {
    let text = match (&s.text, &w.text) {
        (Some(a), Some(b)) => b.starts_with(a) && (s.text_truncated || a == b),
        (None, _) => s.kind == Kind::Prepared,
        (Some(_), None) => false,
    };
    let error = match (&s.error, &w.error) {
        (Some(a), Some(b)) => {
            (a.sqlstate == b.sqlstate || a.sqlstate.is_empty()) && b.message.starts_with(&a.message)
        }
        (a, b) => a == b,
    };
    text && error
        && (s.tag.is_none() || s.tag == w.tag)
        && (s.rows.is_none() || s.rows == w.rows)
        && (s.user.is_none() || s.user == w.user)
        && (s.database.is_none() || s.database == w.database)
        && (s.conn, s.start_ns, s.end_ns, s.kind, &s.name)
            == (w.conn, w.start_ns, w.end_ns, w.kind, &w.name)
}

proptest! {
    #[test]
    fn chunk_boundaries_do_not_matter(ops in vec(op(), 1..10), seeds in vec((any::<usize>(), any::<usize>()), 0..40)) {
        let mut c = Conv::new(1, 7);
        let (_, n) = record(&mut c, &ops);
        let (whole, counters) = run(&c.evs);
        prop_assert_eq!(whole.len(), n);
        prop_assert_eq!(&counters, &chunks(n_chunks(&c.evs)));
        let split = split_all(&c.evs, &seeds);
        let (out, counters2) = run(&split);
        prop_assert_eq!(out, whole);
        prop_assert_eq!(counters2, chunks(n_chunks(&split)));
    }

    #[test]
    fn cut_chunks_with_tails_never_make_a_row_up(
        ops in vec(op(), 1..8),
        // From 128 bytes: a startup packet cut before its `database` is
        // taken to name none (the user's), a case apart.
        head in prop_oneof![Just(2048usize), 128usize..3000],
        tail in prop_oneof![Just(256usize), 0usize..300],
    ) {
        let mut c = Conv::new(1, 7);
        let (_, n) = record(&mut c, &ops);
        let (whole, _) = run(&c.evs);
        // The probe keeps the first `head` bytes of each call, and the
        // last `tail` of those longer.
        let mut evs = c.evs.clone();
        for e in &mut evs {
            if let Ev::Chunk(r) = e {
                if r.data.len() > head {
                    let t = tail.min(r.data.len() - head);
                    r.tail = r.data[r.data.len() - t..].to_vec();
                    r.data.truncate(head);
                }
            }
        }
        let (out, counters) = run(&evs);
        prop_assert_eq!(counters.chunks, n_chunks(&evs) as u64);
        // Each row is one a whole capture gives, or knows less of it.
        for s in &out {
            prop_assert!(whole.iter().any(|w| knows_less(s, w)), "row made up: {:?}", s);
        }
        // The probe's actual capture: every statement, whole.
        if (head, tail) == (2048, 256) {
            prop_assert_eq!(out.len(), n);
        }
    }

    #[test]
    fn arbitrary_bytes_never_panic(
        evs in vec((0u8..3, any::<bool>(), soup(), 0u64..100, prop::bool::weighted(0.05)), 0..60),
    ) {
        let mut d = PgDecoder::new();
        let mut out = Vec::new();
        let mut n = 0;
        for (fd, read, data, extra, close) in evs {
            let conn = ConnKey { pid: 1, fd: i32::from(fd) };
            if close {
                d.close(conn);
                continue;
            }
            let dir = if read { Direction::Read } else { Direction::Write };
            d.feed(&Chunk { conn, dir, time_ns: n, len: data.len() as u64 + extra, data: &data, tail: &[] }, &mut out);
            n += 1;
        }
        prop_assert_eq!(d.counters().chunks, n);
    }

    #[test]
    fn corrupted_conversations_never_panic(
        ops in vec(op(), 1..8),
        flips in vec((any::<usize>(), any::<usize>(), any::<u8>()), 1..20),
        seeds in vec((any::<usize>(), any::<usize>()), 0..20),
    ) {
        let mut c = Conv::new(1, 7);
        record(&mut c, &ops);
        let mut evs = split_all(&c.evs, &seeds);
        for (i, at, x) in flips {
            let n = evs.len();
            if let Ev::Chunk(r) = &mut evs[i % n] {
                if !r.data.is_empty() {
                    let at = at % r.data.len();
                    r.data[at] ^= x.max(1);
                }
            }
        }
        let (_, counters) = run(&evs);
        prop_assert_eq!(counters.chunks, n_chunks(&evs) as u64);
    }

    #[test]
    fn lost_and_added_bytes_never_make_a_text_up(
        ops_a in vec(op(), 1..8),
        ops_b in vec(op(), 1..8),
        skip_a in 0usize..30,
        cuts in vec((any::<usize>(), any::<usize>()), 0..8),
        garbage in vec((any::<usize>(), any::<bool>(), soup()), 0..8),
        noise in vec((any::<bool>(), soup()), 0..6),
        order in vec(any::<bool>(), 0..200),
    ) {
        let mut a = Conv::new(1, 7);
        let mut b = Conv::new(1, 8);
        let (mut texts, _) = record(&mut a, &ops_a);
        texts.extend(record(&mut b, &ops_b).0);
        // a was already open when the capture began.
        let mut ea: Vec<Ev> = a.evs[skip_a.min(a.evs.len())..].to_vec();
        let mut eb = b.evs.clone();
        // The probe captured only a prefix of some chunks.
        for (i, keep) in cuts {
            let v = if i % 2 == 0 { &mut ea } else { &mut eb };
            if v.is_empty() { continue; }
            let j = i / 2 % v.len();
            if let Ev::Chunk(r) = &mut v[j] {
                let keep = keep % (r.data.len() + 1);
                r.data.truncate(keep);
            }
        }
        // Garbage between exchanges: after a write.
        for (i, read, bytes) in garbage {
            let v = &mut eb;
            let j = i % v.len();
            if let Ev::Chunk(r) = &v[j] {
                if r.dir == Direction::Write {
                    let dir = if read { Direction::Read } else { Direction::Write };
                    let data = no_texts(bytes, dir);
                    let g = Rec { dir, len: data.len() as u64, data, tail: Vec::new(), ..r.clone() };
                    v.insert(j + 1, Ev::Chunk(g));
                }
            }
        }
        // A connection carrying something else.
        let noise: Vec<Ev> = noise.into_iter().enumerate().map(|(i, (read, data))| {
            let dir = if read { Direction::Read } else { Direction::Write };
            let data = no_texts(data, dir);
            Ev::Chunk(Rec { conn: ConnKey { pid: 1, fd: 9 }, dir, time_ns: i as u64, len: data.len() as u64, data, tail: Vec::new() })
        }).collect();
        // Interleave.
        let mut evs = Vec::new();
        let (mut ia, mut ib, mut iz) = (0, 0, 0);
        for pick in order.iter().chain(std::iter::repeat_n(&true, ea.len() + eb.len() + noise.len())) {
            if iz < noise.len() && (ia + ib) % 7 == 3 {
                evs.push(noise[iz].clone());
                iz += 1;
            }
            if *pick && ia < ea.len() {
                evs.push(ea[ia].clone());
                ia += 1;
            } else if ib < eb.len() {
                evs.push(eb[ib].clone());
                ib += 1;
            } else if ia < ea.len() {
                evs.push(ea[ia].clone());
                ia += 1;
            }
        }
        evs.extend(noise[iz..].iter().cloned());
        let (out, _) = run(&evs);
        for s in &out {
            if let Some(t) = &s.text {
                prop_assert!(
                    texts.iter().any(|sent| sent.starts_with(t) && (s.text_truncated || sent == t)),
                    "text {:?} was not sent", String::from_utf8_lossy(t)
                );
            }
        }
    }
}
