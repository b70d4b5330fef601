//! Captures of a real server. `pg15_session.txt` was recorded with
//! `strace -f -xx -ttt -e recvfrom,sendto` on a PostgreSQL 15.18 postmaster
//! (TCP, trust authentication) while psql ran a script (DDL, INSERT,
//! SELECT, two statements in one line, an unknown table, an empty query,
//! COPY FROM STDIN, a NOTICE, SET, LISTEN/NOTIFY, a duplicate key in a
//! transaction, a 3000-byte value) and pgbench ran 2 transactions with
//! `-M prepared` and 2 with `-M extended`; one event per line:
//! `R|W pid fd time_ns hex` (a read or write that moved bytes) or `X pid`
//! (the process exited).
//! `pg15_pipeline.txt` likewise holds pgbench runs of a script in
//! `\startpipeline`/`\endpipeline` (three SELECTs, one Sync), with
//! `-M extended` (once) and `-M prepared` (twice), then of one whose second
//! statement divides by zero (pgbench then aborts), in both modes.
//! `pg15_tls.txt` holds `psql -c 'select 1'` with `sslmode=require` (the
//! SSLRequest answered `S`, then TLS 1.3, OpenSSL reading each record's
//! header apart), then `psql -c 'select 2'` with `sslmode=disable`.
//!
//! Any such file replays with `EBQL_PG_EVENTS=file cargo test -p
//! ebql-wire replay -- --ignored --nocapture`; `EBQL_PG_CAPTURE=n` keeps
//! only the first `n` bytes of each chunk, as a probe with an `n`-byte
//! buffer would.

use std::collections::HashSet;

use super::*;

/// Parses the events of a replay file.
pub fn events(text: &str, capture: usize) -> Vec<Ev> {
    let mut evs = Vec::new();
    let mut open: HashSet<ConnKey> = HashSet::new();
    for line in text.lines() {
        let f: Vec<&str> = line.split(' ').collect();
        match f[..] {
            [dir @ ("R" | "W"), pid, fd, t, hex] => {
                let conn = ConnKey {
                    pid: pid.parse().unwrap(),
                    fd: fd.parse().unwrap(),
                };
                open.insert(conn);
                let bytes: Vec<u8> = (0..hex.len())
                    .step_by(2)
                    .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
                    .collect();
                evs.push(Ev::Chunk(Rec {
                    conn,
                    dir: if dir == "R" {
                        Direction::Read
                    } else {
                        Direction::Write
                    },
                    time_ns: t.parse().unwrap(),
                    len: bytes.len() as u64,
                    data: bytes[..bytes.len().min(capture)].to_vec(),
                    tail: Vec::new(),
                }));
            }
            ["X", pid] => {
                let pid: u32 = pid.parse().unwrap();
                for c in open.iter().filter(|c| c.pid == pid) {
                    evs.push(Ev::Close(*c));
                }
                open.retain(|c| c.pid != pid);
            }
            _ => panic!("bad line: {line}"),
        }
    }
    evs
}

/// One line per statement.
pub fn show(s: &Statement) -> String {
    let text = s.text.as_deref().map(|t| {
        String::from_utf8_lossy(t)
            .chars()
            .take(60)
            .collect::<String>()
    });
    format!(
        "{:>6} {:?} {:?} {:?} tag={:?} rows={:?} err={:?} trunc={} {}us",
        s.conn.pid,
        s.kind,
        text,
        s.name,
        s.tag,
        s.rows,
        s.error.as_ref().map(|e| (&e.sqlstate, &e.message)),
        s.text_truncated,
        (s.end_ns - s.start_ns) / 1000
    )
}

#[test]
#[ignore]
fn replay() {
    let Ok(path) = std::env::var("EBQL_PG_EVENTS") else {
        return;
    };
    let capture = std::env::var("EBQL_PG_CAPTURE").map_or(usize::MAX, |c| c.parse().unwrap());
    let evs = events(&std::fs::read_to_string(path).unwrap(), capture);
    let mut d = PgDecoder::new();
    let mut out = Vec::new();
    for (i, e) in evs.iter().enumerate() {
        let before = *d.counters();
        feed(&mut d, std::slice::from_ref(e), &mut out);
        let after = d.counters();
        if let Ev::Chunk(r) = e {
            if after.desyncs != before.desyncs || after.unfinished != before.unfinished {
                let head: Vec<u8> = r.data.iter().take(16).copied().collect();
                println!(
                    "event {i}: {:?} len {} captured {}: {head:x?} -> {after:?}",
                    r.dir,
                    r.len,
                    r.data.len()
                );
            }
        }
    }
    for s in &out {
        println!("{}", show(s));
    }
    println!("{} statements; {:?}", out.len(), d.counters());
}

const SESSION: &str = include_str!("pg15_session.txt");

#[test]
fn recorded_postgres_15_session() {
    let evs = events(SESSION, usize::MAX);
    let (out, counters) = run(&evs);
    assert_eq!(counters, chunks(142));
    assert_eq!(out.len(), 49);
    let simple = out.iter().filter(|s| s.kind == Kind::Simple).count();
    assert_eq!((simple, out.len() - simple), (21, 28));
    assert!(out
        .iter()
        .all(|s| s.user.as_deref() == Some("postgres") && s.database.as_deref() == Some("shop")));
    let by_text = |t: &str| {
        out.iter()
            .find(|s| s.text.as_deref() == Some(t.as_bytes()))
            .unwrap()
    };
    assert_eq!(by_text("select 1;").tag.as_deref(), Some("SELECT 1"));
    assert_eq!(by_text("copy t2 from stdin;").rows, Some(2));
    assert_eq!(by_text(";").tag, None);
    assert_eq!(
        by_text("select * from nope;").error,
        err("42P01", "relation \"nope\" does not exist")
    );
    let dup = by_text("insert into t2 values (1, 'dup');");
    assert_eq!(
        dup.error.as_ref().map(|e| e.sqlstate.as_str()),
        Some("23505")
    );
    let select = "SELECT abalance FROM pgbench_accounts WHERE aid = $1;";
    let names: Vec<_> = out
        .iter()
        .filter(|s| s.text.as_deref() == Some(select.as_bytes()))
        .map(|s| s.name.as_deref())
        .collect();
    // -M prepared names its statements; -M extended uses the unnamed one.
    assert_eq!(names, [Some("P_2"), Some("P_2"), None, None]);
    assert!(out
        .iter()
        .all(|s| s.error.is_some() || s.tag.is_some() || s.text.as_deref() == Some(b";")));
    assert!(out.iter().all(|s| s.start_ns < s.end_ns));
}

#[test]
fn recorded_session_split_anywhere() {
    let evs = events(SESSION, usize::MAX);
    let (whole, _) = run(&evs);
    for frac in [1, 2, 3] {
        let mut split = Vec::new();
        for e in &evs {
            match e {
                Ev::Chunk(r) if r.data.len() >= 2 => {
                    let at = (r.data.len() * frac / 4).max(1);
                    let mut a = r.clone();
                    let mut b = r.clone();
                    a.data.truncate(at);
                    a.len = at as u64;
                    b.data.drain(..at);
                    b.len -= at as u64;
                    split.push(Ev::Chunk(a));
                    split.push(Ev::Chunk(b));
                }
                e => split.push(e.clone()),
            }
        }
        let (out, counters) = run(&split);
        assert_eq!(out, whole, "split at {frac}/4");
        assert_eq!(counters, chunks(n_chunks(&split)));
    }
}

/// Whether `cut`, a row decoded from a capture that kept a prefix of each
/// chunk, says nothing `full` (the same statement fully captured) does not.
fn consistent(cut: &Statement, full: &Statement) -> bool {
    // No text (its Parse not seen), or a prefix flagged as such.
    let text = match (&cut.text, &full.text) {
        (None, _) => true,
        (Some(c), Some(f)) => f.starts_with(c) && (cut.text_truncated || c == f),
        (Some(_), None) => false,
    };
    let error = match (&cut.error, &full.error) {
        (None, None) => true,
        (Some(c), Some(f)) => {
            (c.sqlstate.is_empty() || c.sqlstate == f.sqlstate) && f.message.starts_with(&c.message)
        }
        _ => false,
    };
    cut.conn == full.conn
        && (cut.start_ns, cut.end_ns, cut.kind, &cut.name)
            == (full.start_ns, full.end_ns, full.kind, &full.name)
        && text
        && (cut.tag.is_none() || cut.tag == full.tag)
        && (cut.rows.is_none() || cut.rows == full.rows)
        && error
}

#[test]
fn recorded_sessions_with_small_captures_make_no_wrong_row() {
    for file in [SESSION, include_str!("pg15_pipeline.txt")] {
        let (full, _) = run(&events(file, usize::MAX));
        for capture in [8, 16, 32, 64, 128, 512, 4096] {
            let (out, counters) = run(&events(file, capture));
            // Each row is one of the full capture's, in order.
            let mut rest = full.iter();
            for s in &out {
                assert!(
                    rest.any(|f| consistent(s, f)),
                    "capture {capture}: {}",
                    show(s)
                );
            }
            if capture >= 4096 {
                assert_eq!(out, full);
                assert_eq!(counters.desyncs, 0);
            }
        }
    }
}

#[test]
fn recorded_postgres_15_pipelines() {
    let (out, counters) = run(&events(include_str!("pg15_pipeline.txt"), usize::MAX));
    assert_eq!(counters, chunks(64));
    let got: Vec<_> = out
        .iter()
        .map(|s| {
            let text = String::from_utf8_lossy(s.text.as_deref().unwrap_or_default()).into_owned();
            let sqlstate = s.error.as_ref().map(|e| e.sqlstate.clone());
            (
                s.conn.pid,
                s.kind,
                text,
                s.name.clone(),
                s.tag.clone(),
                s.rows,
                sqlstate,
            )
        })
        .collect();
    let ok = |pid, text: &str, name: Option<&str>, tag: &str, rows| {
        let name = name.map(String::from);
        (
            pid,
            Kind::Prepared,
            text.to_string(),
            name,
            Some(tag.to_string()),
            Some(rows),
            None,
        )
    };
    // Constant folding divides at Bind (the unnamed statement is planned
    // there): the Bind fails, and the server skips the rest to the Sync.
    let failed = |pid, name: Option<&str>| {
        let name = name.map(String::from);
        (
            pid,
            Kind::PrepareFailed,
            "select 1/0;".to_string(),
            name,
            None,
            None,
            Some("22012".to_string()),
        )
    };
    let mut expect = vec![
        ok(4264, "select 1;", None, "SELECT 1", 1),
        ok(4264, "select 2, 'two';", None, "SELECT 1", 1),
        ok(4264, "select generate_series(1, 3);", None, "SELECT 3", 3),
    ];
    for _ in 0..2 {
        expect.push(ok(4269, "select 1;", Some("P_0"), "SELECT 1", 1));
        expect.push(ok(4269, "select 2, 'two';", Some("P_1"), "SELECT 1", 1));
        expect.push(ok(
            4269,
            "select generate_series(1, 3);",
            Some("P_2"),
            "SELECT 3",
            3,
        ));
    }
    expect.push(ok(4273, "select 10;", None, "SELECT 1", 1));
    expect.push(failed(4273, None));
    expect.push(ok(4277, "select 10;", Some("P_0"), "SELECT 1", 1));
    expect.push(failed(4277, Some("P_1")));
    assert_eq!(got, expect);
    // -M extended: one read holds the pipeline, one write answers it.
    let first: Vec<_> = out
        .iter()
        .filter(|s| s.conn.pid == 4264)
        .map(|s| (s.start_ns, s.end_ns))
        .collect();
    assert!(first.iter().all(|t| *t == first[0]));
}

#[test]
fn recorded_postgres_15_tls() {
    let (out, counters) = run(&events(include_str!("pg15_tls.txt"), usize::MAX));
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].text.as_deref(), Some(&b"select 2"[..]));
    assert_eq!(
        counters,
        Counters {
            tls_connections: 1,
            // All the TLS connection's chunks after the `S`.
            tls_chunks: 19,
            ..chunks(26)
        }
    );
}

#[test]
fn recorded_sessions_joined_mid_stream_make_no_wrong_row() {
    for file in [SESSION, include_str!("pg15_pipeline.txt")] {
        let evs = events(file, usize::MAX);
        let (full, _) = run(&evs);
        for (skip, capture) in (0..evs.len()).flat_map(|k| [(k, usize::MAX), (k, 48)]) {
            let (out, _) = run(&evs[skip..]
                .iter()
                .cloned()
                .map(|e| cap(e, capture))
                .collect::<Vec<_>>());
            let mut rest = full.iter();
            for s in &out {
                assert!(
                    rest.any(|f| consistent(s, f)),
                    "from event {skip}, capture {capture}: {}",
                    show(s)
                );
            }
        }
    }
}

/// The event with its chunk's capture cut to `capture` bytes.
fn cap(e: Ev, capture: usize) -> Ev {
    match e {
        Ev::Chunk(mut r) => {
            r.data.truncate(capture);
            Ev::Chunk(r)
        }
        e => e,
    }
}
