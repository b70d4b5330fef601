//! Wall-clock time on real events: time-window bounds as wall-clock
//! timestamps in `-f json`, `-f csv`, Parquet (read back by pyarrow) and
//! Arrow IPC (read back by the `arrow` crate), against the test's own
//! `SystemTime::now()` around the run, with the CLOCK_MONOTONIC bounds
//! beside them; `walltime(time)` of the workload's events against the same
//! clock and against `time` itself.

use crate::cli::query_around;
use crate::common::*;
use ebql::arrow::array::AsArray;
use ebql::arrow::datatypes::{DataType, TimeUnit, TimestampNanosecondType, UInt64Type};
use std::process::{Command, Stdio};
use std::time::{SystemTime, UNIX_EPOCH};

const EV: &str = "tracepoint/syscalls/sys_enter_pread64";
const SEC: i128 = 1_000_000_000;
/// The windows' size (ms) and in ns.
const SIZE_MS: u64 = 200;
const SIZE_NS: u64 = SIZE_MS * 1_000_000;

/// The test's wall clock: ns since the Unix epoch.
fn now_ns() -> i128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos() as i128
}

/// The test's own CLOCK_REALTIME − CLOCK_MONOTONIC, ns.
fn own_offset_ns() -> i128 {
    let read = |clock| {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: valid out-pointer.
        unsafe { libc::clock_gettime(clock, &mut ts) };
        ts.tv_sec as i128 * SEC + ts.tv_nsec as i128
    };
    read(libc::CLOCK_REALTIME) - read(libc::CLOCK_MONOTONIC)
}

/// RFC 3339 text as JSON and CSV write it (UTC, `Z`, nine fractional
/// digits: `2025-01-02T09:11:12.345000000Z`) as ns since the Unix epoch.
fn rfc3339_ns(text: &str) -> i128 {
    assert!(
        text.len() == 30 && text.ends_with('Z') && text.as_bytes()[19] == b'.',
        "not RFC 3339 UTC with nanoseconds: {text:?}"
    );
    chrono::DateTime::parse_from_rfc3339(text)
        .unwrap_or_else(|e| panic!("{text:?}: {e}"))
        .timestamp_nanos_opt()
        .unwrap() as i128
}

/// One window as a format wrote it: wall-clock and CLOCK_MONOTONIC bounds.
#[derive(Debug, Clone, Copy)]
struct Bounds {
    wall: (i128, i128),
    mono: (u64, u64),
}

/// What holds for the windows of one run written by `what`, the test's
/// clock read `before` the command started and `after` it ended: every
/// bound within a second of that interval; wall − mono is one offset for
/// every bound, within a second of the test's own; wall-clock durations are
/// the monotonic ones exactly; windows abut; full windows last the size.
fn check_bounds(what: &str, w: &[Bounds], before: i128, after: i128) {
    assert!(
        w.len() >= 4,
        "{what}: windows close on time, also empty: {w:?}"
    );
    let offset = w[0].wall.0 - w[0].mono.0 as i128;
    assert!(
        (offset - own_offset_ns()).abs() < SEC,
        "{what}: offset {offset} ns, the test's {}",
        own_offset_ns()
    );
    for (k, b) in w.iter().enumerate() {
        assert!(
            before - SEC <= b.wall.0 && b.wall.0 < b.wall.1 && b.wall.1 <= after + SEC,
            "{what}: window {k} {b:?} outside the run [{before}, {after}]"
        );
        assert_eq!(
            b.wall.0 - b.mono.0 as i128,
            offset,
            "{what}: window {k} start"
        );
        assert_eq!(
            b.wall.1 - b.mono.1 as i128,
            offset,
            "{what}: window {k} end"
        );
        assert_eq!(
            b.wall.1 - b.wall.0,
            (b.mono.1 - b.mono.0) as i128,
            "{what}: window {k}"
        );
        if k > 0 {
            assert_eq!(
                b.mono.0,
                w[k - 1].mono.1,
                "{what}: windows {} and {k} abut",
                k - 1
            );
            assert_eq!(
                b.wall.0,
                w[k - 1].wall.1,
                "{what}: windows {} and {k} abut",
                k - 1
            );
        }
    }
    // Each cut is chosen ahead of time, one step after the window's start
    // (executor/cuts.rs): a full window lasts the size exactly, never less;
    // more only when the query thread was descheduled past the cut (a
    // loaded CI run stretched one by hundreds of ms), bounded here by a second.
    // The last window is cut at the stop (shorter).
    for (k, b) in w[..w.len() - 1].iter().enumerate() {
        let d = (b.wall.1 - b.wall.0) as i64 - SIZE_NS as i64;
        assert!(
            (0..SEC as i64).contains(&d),
            "{what}: window {k} lasts {d} ns more than {SIZE_NS}"
        );
    }
    let last = w[w.len() - 1];
    assert!(
        last.wall.1 - last.wall.0 <= SIZE_NS as i128 + SEC,
        "{what}: {last:?}"
    );
}

/// `ebql query ARGS SQL` around three bursts of the workload's calls, with
/// the test's clock read before it started and after it ended.
fn run(w: &mut Workload, args: &[&str], sql: &str) -> (Vec<u8>, i128, i128) {
    let fd = w.file();
    let mut all: Vec<&str> = args.to_vec();
    all.extend(["--duration", "1.1", sql]);
    let before = now_ns();
    let (code, out, err) = query_around(&all, Stdio::piped(), || {
        for _ in 0..3 {
            w.pread(fd, 100, 20);
            w.sleep_ms(150);
        }
    });
    let after = now_ns();
    assert_eq!(code, Some(0), "{args:?}: {err}");
    (out, before, after)
}

fn global_count(w: &Workload) -> String {
    format!(
        "SELECT COUNT(*) AS n FROM {EV} WHERE pid = {} WINDOW(time, {SIZE_MS}, {SIZE_MS})",
        w.pid
    )
}

fn scratch(name: &str) -> std::path::PathBuf {
    let p = std::env::temp_dir().join(format!("ebql-wallclock-{}-{name}", std::process::id()));
    let _ = std::fs::remove_file(&p);
    p
}

/// `-f json`: `window_start`/`window_end` are RFC 3339 UTC text with
/// nanoseconds, `window_start_mono_ns`/`window_end_mono_ns` numbers; and
/// `walltime(time)` of each window's first event converts with the very
/// offset of the bounds, and lies within its window.
#[test]
fn json_bounds_are_rfc3339_wall_clock_with_the_monotonic_beside() {
    let _k = kernel_lock();
    require_root();
    let mut w = Workload::start();
    let sql = format!(
        "SELECT COUNT(*) AS n, MIN(walltime(time)) AS first, MIN(time) AS first_mono FROM {EV} \
         WHERE pid = {} WINDOW(time, {SIZE_MS}, {SIZE_MS})",
        w.pid
    );
    let (out, before, after) = run(&mut w, &["--format", "json"], &sql);
    let rows: Vec<serde_json::Value> = String::from_utf8(out)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let mut bounds = Vec::new();
    let mut calls = 0;
    for r in &rows {
        let keys: Vec<&str> = r.as_object().unwrap().keys().map(|k| k.as_str()).collect();
        assert_eq!(
            keys,
            [
                "first",
                "first_mono",
                "n",
                "window_end",
                "window_end_mono_ns",
                "window_start",
                "window_start_mono_ns"
            ],
            "{r}"
        );
        let b = Bounds {
            wall: (
                rfc3339_ns(r["window_start"].as_str().unwrap()),
                rfc3339_ns(r["window_end"].as_str().unwrap()),
            ),
            mono: (
                r["window_start_mono_ns"].as_u64().unwrap(),
                r["window_end_mono_ns"].as_u64().unwrap(),
            ),
        };
        calls += r["n"].as_u64().unwrap();
        if let Some(first) = r["first"].as_str() {
            let first = rfc3339_ns(first);
            let mono = r["first_mono"].as_u64().unwrap();
            assert_eq!(first - mono as i128, b.wall.0 - b.mono.0 as i128, "{r}");
            assert!(b.wall.0 <= first && first < b.wall.1, "{r}");
        } else {
            assert_eq!(r["n"], 0, "{r}");
        }
        bounds.push(b);
    }
    assert_eq!(calls, 60, "{rows:?}");
    check_bounds("json", &bounds, before, after);
}

/// `-f csv`: the header names the four window columns, the wall-clock ones
/// RFC 3339 UTC text.
#[test]
fn csv_bounds_are_rfc3339_wall_clock_with_the_monotonic_beside() {
    let _k = kernel_lock();
    require_root();
    let mut w = Workload::start();
    let sql = global_count(&w);
    let (out, before, after) = run(&mut w, &["--format", "csv"], &sql);
    let text = String::from_utf8(out).unwrap();
    let mut lines = text.lines();
    assert_eq!(
        lines.next(),
        Some("window_start,window_end,window_start_mono_ns,window_end_mono_ns,n")
    );
    let mut bounds = Vec::new();
    let mut calls = 0;
    for l in lines {
        let f: Vec<&str> = l.split(',').collect();
        assert_eq!(f.len(), 5, "{l}");
        bounds.push(Bounds {
            wall: (rfc3339_ns(f[0]), rfc3339_ns(f[1])),
            mono: (f[2].parse().unwrap(), f[3].parse().unwrap()),
        });
        calls += f[4].parse::<u64>().unwrap();
    }
    assert_eq!(calls, 60, "{text}");
    check_bounds("csv", &bounds, before, after);
}

/// `-o FILE.parquet`: pyarrow reads `timestamp[ns, tz=UTC]` bounds and
/// uint64 monotonic ones.
#[test]
fn parquet_bounds_read_back_by_pyarrow_as_utc_timestamps() {
    let _k = kernel_lock();
    require_root();
    let mut w = Workload::start();
    let sql = global_count(&w);
    let path = scratch("x.parquet");
    let (_, before, after) = run(
        &mut w,
        &["--format", "parquet", "--output", path.to_str().unwrap()],
        &sql,
    );
    let out = Command::new("python3")
        .arg("-c")
        .arg(
            "import json, sys, pyarrow as pa, pyarrow.parquet as pq\n\
             t = pq.read_table(sys.argv[1])\n\
             cols = ['window_start', 'window_end', 'window_start_mono_ns', 'window_end_mono_ns', 'n']\n\
             print(json.dumps({'types': {f.name: str(f.type) for f in t.schema},\n\
             \x20   'rows': [[int(v) for v in r] for r in zip(*[(t[c].cast(pa.int64()) if c.startswith('window_start') or c.startswith('window_end') else t[c]).to_pylist() for c in cols])]}))",
        )
        .arg(&path)
        .output()
        .expect("python3 (scripts/setup.sh installs pyarrow)");
    let _ = std::fs::remove_file(&path);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let got: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        got["types"],
        serde_json::json!({"window_start": "timestamp[ns, tz=UTC]", "window_end": "timestamp[ns, tz=UTC]",
            "window_start_mono_ns": "uint64", "window_end_mono_ns": "uint64", "n": "int64"}),
        "{got}"
    );
    let rows = got["rows"].as_array().unwrap();
    let n = |r: &serde_json::Value, i: usize| r[i].as_i64().unwrap();
    let bounds: Vec<Bounds> = rows
        .iter()
        .map(|r| Bounds {
            wall: (n(r, 0) as i128, n(r, 1) as i128),
            mono: (n(r, 2) as u64, n(r, 3) as u64),
        })
        .collect();
    assert_eq!(rows.iter().map(|r| n(r, 4)).sum::<i64>(), 60, "{got}");
    check_bounds("parquet", &bounds, before, after);
}

/// `-o FILE.arrow`: the Arrow IPC file's bounds are
/// `Timestamp(Nanosecond, "UTC")` and UInt64.
#[test]
fn arrow_ipc_bounds_are_utc_timestamps() {
    let _k = kernel_lock();
    require_root();
    let mut w = Workload::start();
    let sql = global_count(&w);
    let path = scratch("x.arrow");
    let (_, before, after) = run(
        &mut w,
        &["--format", "arrow", "--output", path.to_str().unwrap()],
        &sql,
    );
    let f = std::fs::File::open(&path).unwrap();
    let reader = ebql::arrow::ipc::reader::FileReader::try_new(f, None).unwrap();
    let schema = reader.schema();
    let types: Vec<(&str, &DataType)> = schema
        .fields()
        .iter()
        .map(|f| (f.name().as_str(), f.data_type()))
        .collect();
    let utc = DataType::Timestamp(TimeUnit::Nanosecond, Some("UTC".into()));
    assert_eq!(
        types,
        [
            ("window_start", &utc),
            ("window_end", &utc),
            ("window_start_mono_ns", &DataType::UInt64),
            ("window_end_mono_ns", &DataType::UInt64),
            ("n", &DataType::Int64),
        ]
    );
    let mut bounds = Vec::new();
    let mut calls = 0;
    for batch in reader {
        let b = batch.unwrap();
        let wall = |i: usize| {
            b.column(i)
                .as_primitive::<TimestampNanosecondType>()
                .clone()
        };
        let mono = |i: usize| b.column(i).as_primitive::<UInt64Type>().clone();
        let (ws, we, ms, me) = (wall(0), wall(1), mono(2), mono(3));
        for r in 0..b.num_rows() {
            bounds.push(Bounds {
                wall: (ws.value(r) as i128, we.value(r) as i128),
                mono: (ms.value(r), me.value(r)),
            });
        }
        calls += u64s(&b, "n").iter().sum::<u64>();
    }
    let _ = std::fs::remove_file(&path);
    assert_eq!(calls, 60);
    check_bounds("arrow", &bounds, before, after);
}

/// `walltime(time)` of every event of a raw stream: within the run's
/// wall-clock interval, `time` plus one offset for the whole run (the test's
/// own within a second), so order and differences of `time` are kept to the
/// nanosecond.
#[test]
fn walltime_of_events_is_within_the_run_and_keeps_time_differences_exactly() {
    let _k = kernel_lock();
    require_root();
    let mut w = Workload::start();
    let fd = w.file();
    let sql = format!(
        "SELECT time, walltime(time) AS wall, count FROM {EV} WHERE pid = {}",
        w.pid
    );
    let before = now_ns();
    let (code, out, err) = query_around(
        &["--format", "json", "--duration", "0.8", &sql],
        Stdio::piped(),
        || {
            for size in [10, 20, 30] {
                w.pread(fd, size, 50);
                w.sleep_ms(100);
            }
        },
    );
    let after = now_ns();
    assert_eq!(code, Some(0), "{err}");
    let mut events: Vec<(u64, i128, u64)> = String::from_utf8(out)
        .unwrap()
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            (
                v["time"].as_u64().unwrap(),
                rfc3339_ns(v["wall"].as_str().unwrap()),
                v["count"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(events.len(), 150);
    events.sort();
    let offset = events[0].1 - events[0].0 as i128;
    assert!((offset - own_offset_ns()).abs() < SEC, "{offset}");
    for (i, &(t, wall, _)) in events.iter().enumerate() {
        assert!(
            before <= wall && wall <= after,
            "event {i}: {wall} outside the run [{before}, {after}]"
        );
        if i > 0 {
            let (t0, wall0, _) = events[i - 1];
            assert!(t0 < t && wall0 < wall, "event {i}: order");
            assert_eq!(wall - wall0, (t - t0) as i128, "event {i}: difference");
        }
    }
    // In time order, the workload's three bursts.
    let sizes: Vec<u64> = events.iter().map(|e| e.2).collect();
    assert_eq!(sizes, [[10; 50], [20; 50], [30; 50]].concat());
}

/// `ExecutorOptions::align_windows` (`--align-windows`): every cut between
/// the attach and the stop is a wall-clock multiple of the step, tumbling
/// or hopping, and the counts stay exact.
#[test]
fn aligned_windows_end_on_wall_clock_multiples_of_their_step() {
    require_root();
    let _k = kernel_lock();
    let mut w = Workload::start();
    let fd = w.file();
    let opts = ebql::ExecutorOptions {
        align_windows: true,
        ..Default::default()
    };
    for (size, step) in [(200u64, 200u64), (400, 200)] {
        let sql = format!(
            "SELECT COUNT(*) AS n FROM {EV} WHERE pid = {} WINDOW(time, {size}, {step})",
            w.pid
        );
        let mut q = ebql::Executor::with_options(opts.clone())
            .execute(&sql)
            .unwrap_or_else(|e| panic!("{}", e.render()));
        let rx = q.take_windows().unwrap();
        let offset = i128::from(q.wall_clock().offset_ns());
        for _ in 0..5 {
            w.pread(fd, 16, 100);
            std::thread::sleep(std::time::Duration::from_millis(130));
        }
        q.stop().unwrap();
        let windows: Vec<_> = rx.try_iter().collect();
        let bounds: Vec<_> = windows.iter().map(|w| w.bounds.unwrap()).collect();
        assert!(bounds.len() >= 4, "{bounds:?}");
        let aligned = |t: u64| (i128::from(t) + offset) % i128::from(step * 1_000_000) == 0;
        // Each window ends on a boundary but the last (cut at the stop).
        for b in &bounds[..bounds.len() - 1] {
            assert!(aligned(b.end), "{size}/{step}: {b:?} of {bounds:?}");
        }
        // Windows whose panes all closed after the first start on one too.
        let panes = (size / step) as usize;
        for b in &bounds[panes..] {
            assert!(aligned(b.start), "{size}/{step}: {b:?} of {bounds:?}");
        }
        assert!(
            !aligned(bounds[0].start),
            "the first window starts at the attach"
        );
        if size == step {
            let total: u64 = windows.iter().flat_map(|w| u64s(&w.batch, "n")).sum();
            assert_eq!(total, 500);
        }
    }
}
