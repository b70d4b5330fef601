//! Throughput (ignored by default; run with
//! `cargo test --release -p ebql-wire throughput -- --ignored --nocapture`).

use std::time::Instant;

use super::wire::*;
use super::*;

fn chunk(dir: Direction, time_ns: u64, data: &[u8]) -> Chunk<'_> {
    Chunk {
        conn: ConnKey { pid: 1, fd: 7 },
        dir,
        time_ns,
        len: data.len() as u64,
        data,
        tail: &[],
    }
}

/// Logs in, runs `setup` (request, response) once, then `req`/`resp` `n` times.
fn measure(name: &str, setup: (&[u8], &[u8]), req: &[u8], resp: &[u8], n: usize) {
    let mut d = PgDecoder::new();
    let mut out = Vec::with_capacity(1024);
    d.feed(&chunk(Direction::Read, 0, &ssl_request()), &mut out);
    d.feed(&chunk(Direction::Write, 1, b"N"), &mut out);
    d.feed(
        &chunk(
            Direction::Read,
            2,
            &startup(&[("user", USER), ("database", DB)]),
        ),
        &mut out,
    );
    d.feed(&chunk(Direction::Write, 3, &logged_in()), &mut out);
    d.feed(&chunk(Direction::Read, 4, setup.0), &mut out);
    d.feed(&chunk(Direction::Write, 5, setup.1), &mut out);
    out.clear();
    let start = Instant::now();
    let mut rows = 0;
    for i in 0..n as u64 {
        d.feed(&chunk(Direction::Read, 10 + 2 * i, req), &mut out);
        d.feed(&chunk(Direction::Write, 11 + 2 * i, resp), &mut out);
        rows += out.len();
        out.clear();
    }
    let secs = start.elapsed().as_secs_f64();
    assert_eq!(rows, n);
    assert_eq!(d.counters().unknown_prepared, 0);
    println!(
        "{name}: {:.0} statements/s ({:.0} ns each)",
        n as f64 / secs,
        secs * 1e9 / n as f64
    );
}

#[test]
#[ignore]
fn throughput() {
    let n = 1_000_000;
    let text = "UPDATE pgbench_accounts SET abalance = abalance + $1 WHERE aid = $2";
    let prep = [parse("P0_1", text, &[]), sync()].concat();
    let prepared = [parse_complete(), ready(b'I')].concat();
    let req = [
        bind("", "P0_1", &[], &[Some(b"-1234"), Some(b"56789")], &[]),
        execute("", 0),
        sync(),
    ]
    .concat();
    let resp = [bind_complete(), command_complete("UPDATE 1"), ready(b'T')].concat();
    measure(
        "pgbench -M prepared (B/E/S)",
        (&prep, &prepared),
        &req,
        &resp,
        n,
    );
    let req = [
        parse("", text, &[]),
        bind("", "", &[], &[Some(b"-1234"), Some(b"56789")], &[]),
        execute("", 0),
        sync(),
    ]
    .concat();
    let resp = [
        parse_complete(),
        bind_complete(),
        command_complete("UPDATE 1"),
        ready(b'I'),
    ]
    .concat();
    measure(
        "pgbench -M extended (P/B/E/S)",
        (&prep, &prepared),
        &req,
        &resp,
        n,
    );
    let q = query("SELECT abalance FROM pgbench_accounts WHERE aid = 56789");
    let r = [
        row_description(&["abalance"]),
        rows(1, 4),
        command_complete("SELECT 1"),
        ready(b'I'),
    ]
    .concat();
    measure("simple query", (&prep, &prepared), &q, &r, n);
}
