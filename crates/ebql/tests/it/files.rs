//! File sinks on real events: `--format arrow` (Arrow IPC stream and file) and
//! `--format parquet` (rolled files), read back by pyarrow and by the
//! `parquet`/`arrow` crates, compared with the workload's known calls and
//! with the same query's NDJSON; SIGINT/SIGTERM leave every file complete.

use crate::common::*;
use ebql::arrow::array::{AsArray, RecordBatch};
use ebql::arrow::datatypes::UInt64Type;
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::process::{Child, ChildStderr, Command, Stdio};

const EBQL: &str = env!("CARGO_BIN_EXE_ebql");
const EV: &str = "tracepoint/syscalls/sys_enter_pread64";

/// Starts `ebql query ARGS` and returns once its probe is attached.
fn attached(args: &[&str], stdout: Stdio) -> (Child, BufReader<ChildStderr>) {
    let mut child = Command::new(EBQL)
        .arg("query")
        .args(args)
        .stdout(stdout)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    stderr.read_line(&mut line).unwrap();
    assert!(line.starts_with("ebql: attached"), "{args:?}: {line}");
    (child, stderr)
}

/// Sends `sig` to `child`, waits for it and checks it exited 0 after printing its stats.
fn stop(mut child: Child, mut stderr: BufReader<ChildStderr>, sig: i32) {
    // SAFETY: signalling our own child.
    unsafe { libc::kill(child.id() as i32, sig) };
    let status = child.wait().unwrap();
    let mut rest = String::new();
    stderr.read_to_string(&mut rest).unwrap();
    assert_eq!(status.code(), Some(0), "{rest}");
    assert!(rest.contains("ebql: stats {"), "{rest}");
}

fn python(script: &str, args: &[&str], stdin: Stdio) -> Child {
    Command::new("python3")
        .arg("-c")
        .arg(script)
        .args(args)
        .stdin(stdin)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python3 (scripts/setup.sh installs pyarrow)")
}

fn python_json(child: Child) -> serde_json::Value {
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "python: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn scratch(name: &str) -> std::path::PathBuf {
    let p = std::env::temp_dir().join(format!("ebql-files-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&p);
    let _ = std::fs::remove_file(&p);
    p
}

/// The pipe: `ebql query … --format arrow | python3 -c 'pyarrow.ipc.open_stream(sys.stdin.buffer)…'`.
#[test]
fn arrow_ipc_stream_pipes_into_pyarrow() {
    let _k = kernel_lock();
    require_root();
    let mut w = Workload::start();
    let (a, b) = (w.file(), w.file());
    let sql = format!("SELECT fd, count FROM {EV} WHERE pid = {}", w.pid);
    let (mut ebql, stderr) = attached(&["--format", "arrow", &sql], Stdio::piped());
    let reader = python(
        "import json, sys, collections, pyarrow.ipc\n\
         r = pyarrow.ipc.open_stream(sys.stdin.buffer)\n\
         calls = collections.Counter()\n\
         batches = 0\n\
         for batch in r:\n\
         \x20   batches += 1\n\
         \x20   for fd, count in zip(batch.column('fd').to_pylist(), batch.column('count').to_pylist()):\n\
         \x20       calls[f'{fd}/{count}'] += 1\n\
         meta = {k.decode(): v.decode() for k, v in (r.schema.metadata or {}).items()}\n\
         print(json.dumps({'calls': calls, 'batches': batches, 'meta': meta, 'types': [str(f.type) for f in r.schema]}))",
        &[],
        Stdio::from(ebql.stdout.take().unwrap()),
    );
    w.pread(a, 128, 300);
    w.pread(b, 64, 200);
    stop(ebql, stderr, libc::SIGINT);
    let got = python_json(reader);
    assert_eq!(
        got["calls"],
        serde_json::json!({ format!("{a}/128"): 300, format!("{b}/64"): 200 }),
        "{got}"
    );
    assert!(got["batches"].as_u64().unwrap() >= 1, "{got}");
    assert_eq!(got["meta"]["ebql.query"], sql.as_str());
    assert_eq!(got["meta"]["ebql.window"], "none");
    assert_eq!(got["meta"]["ebql.version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(
        got["types"],
        serde_json::json!(["uint32", "uint64"]),
        "{got}"
    );
}

/// A grouped time-windowed query with a histogram into a directory of
/// Parquet files rolled every row, stopped by SIGINT: every file is closed,
/// named in time order, carries the query, and pyarrow reads back exactly the
/// calls the workload made.
#[test]
fn parquet_directory_rolls_and_sigint_leaves_every_file_readable() {
    let _k = kernel_lock();
    require_root();
    let mut w = Workload::start();
    let (a, b) = (w.file(), w.file());
    let dir = scratch("dir");
    let sql = format!("SELECT fd, COUNT(*) AS n, HIST(count) AS h FROM {EV} WHERE pid = {} GROUP BY fd WINDOW(time, 200, 200)", w.pid);
    let (ebql, stderr) = attached(
        &[
            "--format",
            "parquet",
            "--roll-rows",
            "1",
            "--output",
            dir.to_str().unwrap(),
            &sql,
        ],
        Stdio::null(),
    );
    // Three bursts, each in a window of its own (200 ms windows, 300 ms apart).
    w.pread(a, 128, 300);
    w.sleep_ms(300);
    w.pread(b, 64, 200);
    w.sleep_ms(300);
    w.pread(a, 128, 100);
    stop(ebql, stderr, libc::SIGINT);
    let got = python_json(python(
        "import json, os, sys, pyarrow.parquet as pq\n\
         d = sys.argv[1]\n\
         out = {'names': sorted(os.listdir(d)), 'rows': [], 'meta': []}\n\
         for name in out['names']:\n\
         \x20   f = pq.ParquetFile(os.path.join(d, name))\n\
         \x20   out['meta'].append({k.decode(): v.decode() for k, v in f.metadata.metadata.items() if k.startswith(b'ebql.')})\n\
         \x20   t = f.read()\n\
         \x20   out['rows'] += [[name] + [r[c] for c in ('window_start_mono_ns', 'window_end_mono_ns', 'fd', 'n', 'h')] for r in t.to_pylist()]\n\
         print(json.dumps(out))",
        &[dir.to_str().unwrap()],
        Stdio::null(),
    ));
    let _ = std::fs::remove_dir_all(&dir);
    let names: Vec<&str> = got["names"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_str().unwrap())
        .collect();
    assert!(
        names
            .iter()
            .all(|n| n.starts_with("ebql-") && n.ends_with(".parquet")),
        "no file left in progress: {names:?}"
    );
    assert!(
        names.len() >= 3,
        "one file per window with rows (roll every row), plus none empty: {names:?}"
    );
    for m in got["meta"].as_array().unwrap() {
        assert_eq!(m["ebql.query"], sql.as_str());
        assert_eq!(m["ebql.window"], "time");
        assert_eq!(m["ebql.version"], env!("CARGO_PKG_VERSION"));
    }
    let mut per_fd: BTreeMap<u64, u64> = BTreeMap::new();
    let mut last_start = 0;
    for r in got["rows"].as_array().unwrap() {
        let (start, end, fd, n) = (
            r[1].as_u64().unwrap(),
            r[2].as_u64().unwrap(),
            r[3].as_u64().unwrap(),
            r[4].as_u64().unwrap(),
        );
        assert!(
            start < end && start >= last_start,
            "files sort in window order: {r}"
        );
        last_start = start;
        *per_fd.entry(fd).or_default() += n;
        // Every call of a burst read the same size: one bucket holding it, counting them all.
        let size = if fd == a { 128 } else { 64 };
        let buckets = r[5].as_array().unwrap();
        assert_eq!(buckets.len(), 1, "{r}");
        let (lo, hi, count) = (
            buckets[0]["lo"].as_u64().unwrap(),
            buckets[0]["hi"].as_u64().unwrap(),
            buckets[0]["count"].as_u64().unwrap(),
        );
        assert!(lo <= size && size <= hi && count == n, "{r}");
    }
    assert_eq!(per_fd, BTreeMap::from([(a, 400), (b, 200)]), "{got}");
}

/// (fd, count, pid) rows of a batch, in order.
fn fd_count_pid(b: &RecordBatch) -> Vec<(u64, u64, u64)> {
    let col = |name: &str| {
        ebql::arrow::compute::cast(
            b.column_by_name(name).unwrap(),
            &ebql::arrow::datatypes::DataType::UInt64,
        )
        .unwrap()
    };
    let (fd, count, pid) = (col("fd"), col("count"), col("pid"));
    let (fd, count, pid) = (
        fd.as_primitive::<UInt64Type>(),
        count.as_primitive::<UInt64Type>(),
        pid.as_primitive::<UInt64Type>(),
    );
    (0..b.num_rows())
        .map(|i| (fd.value(i), count.value(i), pid.value(i)))
        .collect()
}

fn read_parquet(path: &Path) -> (Vec<RecordBatch>, BTreeMap<String, String>) {
    let f = std::fs::File::open(path).unwrap();
    let builder =
        parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(f).unwrap();
    let kv = builder
        .metadata()
        .file_metadata()
        .key_value_metadata()
        .cloned()
        .unwrap_or_default();
    let meta = kv
        .into_iter()
        .filter_map(|kv| Some((kv.key, kv.value?)))
        .collect();
    (builder.build().unwrap().map(Result::unwrap).collect(), meta)
}

/// One raw stream, three sinks at once (one Parquet file, an Arrow IPC file,
/// NDJSON), stopped by SIGTERM: the `parquet` and `arrow` crates read back
/// the same rows, in the same order, as the NDJSON, and they are the calls the workload made.
#[test]
fn raw_stream_round_trips_through_parquet_and_arrow_files_like_ndjson() {
    let _k = kernel_lock();
    require_root();
    let mut w = Workload::start();
    let (a, b) = (w.file(), w.file());
    let (pq_path, ipc_path) = (scratch("one.parquet"), scratch("one.arrow"));
    let sql = format!("SELECT fd, count, pid FROM {EV} WHERE pid = {}", w.pid);
    let pq = attached(
        &[
            "--format",
            "parquet",
            "--output",
            pq_path.to_str().unwrap(),
            &sql,
        ],
        Stdio::null(),
    );
    let ipc = attached(
        &[
            "--format",
            "arrow",
            "--output",
            ipc_path.to_str().unwrap(),
            &sql,
        ],
        Stdio::null(),
    );
    let (mut json, json_err) = attached(&["--format", "json", &sql], Stdio::piped());
    let json_out = json.stdout.take().unwrap();
    let json_reader = std::thread::spawn(move || {
        let mut s = String::new();
        BufReader::new(json_out).read_to_string(&mut s).unwrap();
        s
    });
    for _ in 0..3 {
        w.pread(a, 100, 1000);
        w.pread(b, 7, 500);
    }
    stop(pq.0, pq.1, libc::SIGTERM);
    stop(ipc.0, ipc.1, libc::SIGTERM);
    stop(json, json_err, libc::SIGTERM);

    let ndjson: Vec<(u64, u64, u64)> = json_reader
        .join()
        .unwrap()
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            (
                v["fd"].as_u64().unwrap(),
                v["count"].as_u64().unwrap(),
                v["pid"].as_u64().unwrap(),
            )
        })
        .collect();
    let expected: Vec<(u64, u64, u64)> = (0..3)
        .flat_map(|_| {
            std::iter::repeat_n((a, 100, w.pid as u64), 1000)
                .chain(std::iter::repeat_n((b, 7, w.pid as u64), 500))
        })
        .collect();
    assert_eq!(
        ndjson, expected,
        "the NDJSON stream holds every call, in order"
    );

    let (batches, meta) = read_parquet(&pq_path);
    let _ = std::fs::remove_file(&pq_path);
    assert_eq!(meta.get("ebql.query"), Some(&sql));
    assert_eq!(meta.get("ebql.window").map(String::as_str), Some("none"));
    assert_eq!(
        batches.iter().flat_map(fd_count_pid).collect::<Vec<_>>(),
        ndjson,
        "Parquet = NDJSON"
    );

    // `.arrow`: the IPC file format (footer written at SIGTERM).
    let f = std::fs::File::open(&ipc_path).unwrap();
    let reader = ebql::arrow::ipc::reader::FileReader::try_new(f, None).unwrap();
    assert_eq!(reader.schema().metadata().get("ebql.query"), Some(&sql));
    let rows: Vec<_> = reader
        .map(|b| fd_count_pid(&b.unwrap()))
        .collect::<Vec<_>>()
        .concat();
    let _ = std::fs::remove_file(&ipc_path);
    assert_eq!(rows, ndjson, "Arrow IPC = NDJSON");
}

/// An output the sink cannot create: a clear error naming the path, exit 1,
/// and the program the query attached is gone once ebql has exited.
#[test]
fn unwritable_parquet_output_exits_1_and_leaves_nothing_attached() {
    let _k = kernel_lock();
    require_root();
    let sql = format!("SELECT fd FROM {EV} WHERE pid = 1");
    let out = Command::new(EBQL)
        .args([
            "query",
            "--format",
            "parquet",
            "--duration",
            "1",
            "--output",
            "/proc/ebql-no/such/dir",
            &sql,
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("creating directory /proc/ebql-no/such/dir"),
        "the message names the path: {err}"
    );
    // Opening a sink follows the attach; the id the CLI printed must be gone.
    let id: u32 = err
        .split("program id ")
        .nth(1)
        .and_then(|s| s.split(')').next())
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("{err}"));
    assert!(
        !ebql_runtime::bpf_object_exists(ebql_runtime::BpfObject::Program, id).unwrap(),
        "program {id} left loaded"
    );
}
