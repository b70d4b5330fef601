//! Issue 20, items 3 and 4: output formats checked at plan time (CSV of a
//! histogram, `folded` without a stack, binary formats and terminals, the
//! Arrow IPC file format, closed pipes), and the command-line conventions
//! (short flags, durations with units, the query from `-e`, a file or
//! stdin, `--quiet`, completions and man page, exit codes).

use crate::common::*;
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const EBQL: &str = env!("CARGO_BIN_EXE_ebql");
const EV: &str = "tracepoint/syscalls/sys_enter_pread64";

/// `ebql ARGS` with `stdin` written to its standard input; calls `work`
/// once it says it attached; returns its exit code, stdout and stderr.
fn run_around(
    args: &[&str],
    stdin: Option<&str>,
    work: impl FnOnce(),
) -> (Option<i32>, String, String) {
    let mut child = Command::new(EBQL)
        .args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    if let Some(text) = stdin {
        let mut pipe = child.stdin.take().unwrap();
        pipe.write_all(text.as_bytes()).unwrap();
    }
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let mut err = String::new();
    while !err.contains("ebql: attached") {
        assert_ne!(
            stderr.read_line(&mut err).unwrap(),
            0,
            "{args:?} ended before attaching:\n{err}"
        );
    }
    work();
    // SAFETY: signalling our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let out = child.wait_with_output().unwrap();
    stderr.read_to_string(&mut err).unwrap();
    (
        out.status.code(),
        String::from_utf8(out.stdout).unwrap(),
        err,
    )
}

/// Runs `python3 -c SCRIPT ARGS` on `stdin`; its stdout as JSON.
fn python_json(script: &str, args: &[&str], stdin: &str) -> serde_json::Value {
    let mut child = Command::new("python3")
        .arg("-c")
        .arg(script)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python3 (scripts/setup.sh installs pyarrow and polars)");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "python: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// `-f csv` of a HIST query: the histogram is one field holding its JSON
/// text; Python's csv module reads every row back, and the buckets are the
/// workload's calls (300 reads of 128 bytes in [128, 255], 200 of 64 in [64, 127]).
#[test]
fn csv_of_a_hist_query_reads_back_with_pythons_csv_module() {
    let _k = kernel_lock();
    require_root();
    let mut w = Workload::start();
    let (a, b) = (w.file(), w.file());
    let sql = format!(
        "SELECT fd, COUNT(*) AS n, HIST(count) AS h FROM {EV} WHERE pid = {} GROUP BY fd",
        w.pid
    );
    let (code, out, err) = run_around(&["query", "-f", "csv", &sql], None, || {
        w.pread(a, 128, 300);
        w.pread(b, 64, 200);
    });
    assert_eq!(code, Some(0), "{err}");
    let rows = python_json(
        "import csv, json, sys\n\
         r = csv.DictReader(sys.stdin)\n\
         print(json.dumps({'header': r.fieldnames, 'rows': [{'fd': int(x['fd']), 'n': int(x['n']), 'h': json.loads(x['h'])} for x in r]}))",
        &[],
        &out,
    );
    assert_eq!(rows["header"], serde_json::json!(["fd", "n", "h"]), "{out}");
    let mut got: Vec<serde_json::Value> = rows["rows"].as_array().unwrap().clone();
    got.sort_by_key(|r| r["fd"].as_u64());
    let mut want = vec![
        serde_json::json!({"fd": a, "n": 300, "h": [{"lo": 128, "hi": 255, "count": 300}]}),
        serde_json::json!({"fd": b, "n": 200, "h": [{"lo": 64, "hi": 127, "count": 200}]}),
    ];
    want.sort_by_key(|r| r["fd"].as_u64());
    assert_eq!(got, want, "{out}");
}

/// `-f folded` on results without a stack column, or without a count, is
/// refused after planning and before attaching: exit 2 at once (not after
/// --duration), a message naming what is missing and a hint.
#[test]
fn folded_without_a_stack_or_count_exits_2_before_attaching() {
    let _k = kernel_lock();
    require_root();
    // Not checked: which BPF programs exist afterwards; other processes on
    // the machine load theirs. A run that attached says `attached` and
    // prints its stats, and would last its 20 s.
    for (sql, missing, hint) in [
        (
            format!("SELECT fd, COUNT(*) FROM {EV} GROUP BY fd"),
            "needs a stack column",
            "GROUP BY ustack",
        ),
        (
            format!("SELECT comm FROM {EV}"),
            "needs a count",
            "COUNT(*)",
        ),
    ] {
        let started = Instant::now();
        let out = Command::new(EBQL)
            .args(["query", "-f", "folded", "-d", "20s", &sql])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{sql}\n{err}");
        assert!(
            err.starts_with("error: --format folded ") && err.contains(missing),
            "{err}"
        );
        assert!(
            err.lines()
                .any(|l| l.starts_with("hint: ") && l.contains(hint)),
            "{err}"
        );
        assert!(!err.contains("attached") && !err.contains("stats"), "{err}");
        assert!(out.stdout.is_empty());
        assert!(started.elapsed() < Duration::from_secs(10), "it ran");
    }
}

/// `-o FILE.arrow` is the Arrow IPC file format: pyarrow's `open_file` and
/// polars' `read_ipc` read exactly the 500 calls the workload made.
#[test]
fn arrow_output_file_reads_back_with_pyarrow_open_file_and_polars() {
    let _k = kernel_lock();
    require_root();
    let mut w = Workload::start();
    let (a, b) = (w.file(), w.file());
    let path = std::env::temp_dir().join(format!("ebql-conv-{}.arrow", std::process::id()));
    let sql = format!("SELECT fd, count FROM {EV} WHERE pid = {}", w.pid);
    let (code, out, err) = run_around(
        &["query", "-f", "arrow", "-o", path.to_str().unwrap(), &sql],
        None,
        || {
            w.pread(a, 128, 300);
            w.pread(b, 64, 200);
        },
    );
    assert_eq!(code, Some(0), "{err}");
    assert!(out.is_empty());
    let got = python_json(
        "import collections, json, sys, pyarrow.ipc, polars\n\
         f = pyarrow.ipc.open_file(sys.argv[1])\n\
         t = f.read_all()\n\
         calls = collections.Counter(f'{fd}/{c}' for fd, c in zip(t.column('fd').to_pylist(), t.column('count').to_pylist()))\n\
         meta = {k.decode(): v.decode() for k, v in (f.schema.metadata or {}).items()}\n\
         print(json.dumps({'rows': t.num_rows, 'calls': calls, 'polars_rows': polars.read_ipc(sys.argv[1]).height, 'query': meta.get('ebql.query')}))",
        &[path.to_str().unwrap()],
        "",
    );
    let _ = std::fs::remove_file(&path);
    assert_eq!(got["rows"], 500, "{got}");
    assert_eq!(got["polars_rows"], 500, "{got}");
    assert_eq!(
        got["calls"],
        serde_json::json!({ format!("{a}/128"): 300, format!("{b}/64"): 200 })
    );
    assert_eq!(got["query"], sql.as_str());
}

/// Every format ends quietly when the reader closes the pipe early
/// (`| head -c 100`, `| head -1`): exit 0 long before --duration, no
/// "Broken pipe" and no error on stderr (the stats line, as always), and
/// the reader got what it asked for.
#[test]
fn a_reader_that_stops_early_ends_every_format_quietly() {
    let _k = kernel_lock();
    require_root();
    let sql = format!("SELECT COUNT(*) AS n FROM {EV} WINDOW(time, 100, 100)");
    let got = std::env::temp_dir().join(format!("ebql-conv-{}.head", std::process::id()));
    for (format, reader) in [
        ("arrow", "head -c 100"),
        ("json", "head -1"),
        ("csv", "head -1"),
        ("table", "head -1"),
    ] {
        let started = Instant::now();
        let out = Command::new("bash")
            .arg("-c")
            .arg(format!(
                "\"$0\" query -f {format} -d 20s \"$1\" | {reader} > \"$2\"; exit ${{PIPESTATUS[0]}}"
            ))
            .arg(EBQL)
            .arg(&sql)
            .arg(&got)
            .stdout(Stdio::null())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{format}: {err}");
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{format} ran on after its reader left"
        );
        assert!(
            !err.to_lowercase().contains("broken pipe") && !err.contains("error"),
            "{format}: {err}"
        );
        assert!(err.contains("ebql: stats {"), "{format}: {err}");
        let head = std::fs::read(&got).unwrap();
        match format {
            "arrow" => assert_eq!(head.len(), 100),
            "json" => {
                let line = String::from_utf8(head).unwrap();
                let v: serde_json::Value = serde_json::from_str(&line).unwrap();
                assert!(v["n"].is_u64(), "{line}");
            }
            _ => assert_eq!(head.iter().filter(|&&b| b == b'\n').count(), 1),
        }
    }
    let _ = std::fs::remove_file(&got);
}

/// A binary format to a terminal is refused before anything runs (exit 2,
/// hint: -o FILE or a pipe); a pseudo-terminal stands for the terminal.
#[test]
fn binary_formats_refuse_a_terminal() {
    use std::os::fd::FromRawFd;
    let (mut master, mut slave) = (0, 0);
    // SAFETY: openpty writes two descriptors; no name, termios or size.
    let rc = unsafe {
        libc::openpty(
            &mut master,
            &mut slave,
            std::ptr::null_mut(),
            std::ptr::null(),
            std::ptr::null(),
        )
    };
    assert_eq!(rc, 0, "openpty");
    // SAFETY: openpty returned these descriptors; each is owned once here.
    let (_master, tty) = unsafe {
        (
            std::os::fd::OwnedFd::from_raw_fd(master),
            std::os::fd::OwnedFd::from_raw_fd(slave),
        )
    };
    let sql = format!("SELECT fd FROM {EV}");
    for format in ["arrow", "parquet"] {
        let out = Command::new(EBQL)
            .args(["query", "-f", format, "-d", "5", &sql])
            .stdout(Stdio::from(tty.try_clone().unwrap()))
            .stderr(Stdio::piped())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{format}: {err}");
        assert!(err.contains("hint: use -o "), "{format}: {err}");
        assert!(!err.contains("attached"), "{format}: {err}");
    }
    let out = Command::new(EBQL)
        .args(["query", "-f", "arrow", "-d", "5", &sql])
        .stdout(Stdio::from(tty))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--format arrow is binary and stdout is a terminal"),
        "{err}"
    );
}

/// `-d 500ms` runs about half a second: 100 ms windows close about 5 times
/// (not 500 s, nor 0); `-d 0.5` is the same (a bare number is seconds); a
/// duration without a known unit is a usage error.
#[test]
fn durations_take_units_and_bare_numbers_are_seconds() {
    let _k = kernel_lock();
    require_root();
    let sql = format!("SELECT COUNT(*) AS n FROM {EV} WHERE pid = 1 WINDOW(time, 100, 100)");
    for d in ["500ms", "0.5"] {
        let started = Instant::now();
        let out = Command::new(EBQL)
            .args(["query", "-f", "json", "-d", d, &sql])
            .output()
            .unwrap();
        let took = started.elapsed();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{d}: {err}");
        let windows = String::from_utf8(out.stdout).unwrap().lines().count();
        assert!((4..=7).contains(&windows), "{d}: {windows} windows");
        assert!(
            took >= Duration::from_millis(500) && took < Duration::from_secs(4),
            "{d}: ran {took:?}"
        );
    }
    let out = Command::new(EBQL)
        .args(["query", "-d", "5parsecs", &sql])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("unknown unit `parsecs`"), "{err}");
}

/// `-q`: stdout has the results, stderr nothing (no program id, planner
/// note or stats line), where the same run without it says all three.
#[test]
fn quiet_leaves_only_the_results() {
    let _k = kernel_lock();
    require_root();
    let w = Workload::start();
    let sql = format!(
        "SELECT COUNT(*) AS n FROM {EV} WHERE pid = {} WINDOW(time, 100, 100)",
        w.pid
    );
    let run = |quiet: bool| {
        let mut args = vec!["query", "-f", "json", "-d", "350ms"];
        if quiet {
            args.push("-q");
        }
        let out = Command::new(EBQL).args(&args).arg(&sql).output().unwrap();
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        (
            String::from_utf8(out.stdout).unwrap(),
            String::from_utf8(out.stderr).unwrap(),
        )
    };
    let (_, loud) = run(false);
    assert!(
        loud.contains("ebql: attached (program id ") && loud.contains("ebql: stats {"),
        "{loud}"
    );
    let (out, err) = run(true);
    assert_eq!(err, "", "stderr of -q");
    let rows: Vec<serde_json::Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(rows.len() >= 2, "{out}");
    for r in &rows {
        let keys: Vec<&String> = r.as_object().unwrap().keys().collect();
        assert_eq!(
            keys,
            [
                "n",
                "window_end",
                "window_end_mono_ns",
                "window_start",
                "window_start_mono_ns"
            ],
            "{out}"
        );
        assert_eq!(r["n"], 0, "the workload made no calls: {out}");
    }
}

/// The same query given as `-e SQL` (starting with a `-- comment`), as the
/// QUERY argument, as a file and on stdin (`-`) gives the same rows: the
/// workload's calls per fd.
#[test]
fn e_argument_file_and_stdin_queries_give_the_same_results() {
    let _k = kernel_lock();
    require_root();
    let mut w = Workload::start();
    let (a, b) = (w.file(), w.file());
    let sql = format!(
        "-- reads per fd\nSELECT fd, COUNT(*) AS n, MAX(count) AS m FROM {EV} WHERE pid = {} GROUP BY fd",
        w.pid
    );
    let file = std::env::temp_dir().join(format!("ebql-conv-{}.sql", std::process::id()));
    std::fs::write(&file, &sql).unwrap();
    let file = file.to_str().unwrap().to_string();
    let mut results = BTreeMap::new();
    for (how, args, stdin) in [
        ("-e", vec!["-e", sql.as_str()], None),
        ("argument", vec![sql.as_str()], None),
        ("file", vec![file.as_str()], None),
        ("stdin", vec!["-"], Some(sql.as_str())),
    ] {
        let mut full = vec!["query", "-f", "json"];
        full.extend(args);
        let (code, out, err) = run_around(&full, stdin, || {
            w.pread(a, 128, 30);
            w.pread(b, 64, 20);
        });
        assert_eq!(code, Some(0), "{how}: {err}");
        let mut rows: Vec<(u64, u64, u64)> = out
            .lines()
            .map(|l| {
                let v: serde_json::Value = serde_json::from_str(l).unwrap();
                (
                    v["fd"].as_u64().unwrap(),
                    v["n"].as_u64().unwrap(),
                    v["m"].as_u64().unwrap(),
                )
            })
            .collect();
        rows.sort();
        results.insert(how, rows);
    }
    let _ = std::fs::remove_file(&file);
    let mut want = vec![(a, 30, 128), (b, 20, 64)];
    want.sort();
    for (how, rows) in &results {
        assert_eq!(rows, &want, "{how}");
    }
}

/// `ebql completions bash` is a completion script naming the subcommands;
/// `ebql man` a roff page with the exit codes; no `--help` shows Rust
/// paths or doc-link syntax.
#[test]
fn completions_man_page_and_help_texts() {
    let ebql = |args: &[&str]| {
        let out = Command::new(EBQL).args(args).output().unwrap();
        assert_eq!(out.status.code(), Some(0), "{args:?}");
        String::from_utf8(out.stdout).unwrap()
    };
    let bash = ebql(&["completions", "bash"]);
    assert!(bash.contains("complete -F _ebql"), "{bash}");
    for sub in ["query", "describe", "completions"] {
        assert!(bash.contains(sub), "{sub} in:\n{bash}");
    }
    assert!(!ebql(&["completions", "zsh"]).is_empty());
    let man = ebql(&["man"]);
    assert!(man.contains(".TH ebql 1"), "{man}");
    assert!(man.contains("Exit codes: 0 ok"), "{man}");
    let query_man = ebql(&["man", "query"]);
    assert!(query_man.contains(".TH ebql-query 1"), "{query_man}");
    assert!(query_man.contains("\\-\\-duration"), "{query_man}");
    for sub in [
        "query",
        "check",
        "calibrate",
        "serve",
        "replay",
        "explain",
        "events",
        "describe",
        "demo",
        "completions",
        "man",
    ] {
        let help = ebql(&[sub, "--help"]);
        for rust in ["[`", "::", "super", "crate"] {
            assert!(
                !help.contains(rust),
                "`{rust}` in ebql {sub} --help:\n{help}"
            );
        }
    }
    let help = ebql(&["query", "--help"]);
    for flag in [
        "-d, --duration",
        "-f, --format",
        "-o, --output",
        "-q, --quiet",
        "-e, --execute",
    ] {
        assert!(help.contains(flag), "{flag}:\n{help}");
    }
}

/// An event that does not exist: `describe` exits 2, as `query` does for
/// a query naming it; an existing one exits 0.
#[test]
fn describe_of_an_unknown_event_exits_2_like_query() {
    let run = |args: &[&str]| Command::new(EBQL).args(args).output().unwrap();
    let out = run(&["describe", "tracepoint:syscalls:sys_enter_pread65"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("unknown event"), "{err}");
    assert!(err.contains("did you mean"), "{err}");
    let out = run(&["describe", "not an event"]);
    assert_eq!(out.status.code(), Some(2));
    let out = run(&[
        "query",
        "-d",
        "1",
        "SELECT fd FROM tracepoint:syscalls:sys_enter_pread65",
    ]);
    assert_eq!(out.status.code(), Some(2));
    let out = run(&["describe", "tracepoint:syscalls:sys_enter_pread64"]);
    assert_eq!(out.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&out.stdout).contains("count"));
}

/// `demo -d` is the duration as everywhere; the old `--seconds` still works
/// (hidden).
#[test]
fn demo_takes_duration_and_the_old_seconds_spelling() {
    let _k = kernel_lock();
    require_root();
    let help = String::from_utf8(
        Command::new(EBQL)
            .args(["demo", "--help"])
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap();
    assert!(
        help.contains("-d, --duration") && !help.contains("--seconds"),
        "{help}"
    );
    for args in [["-d", "300ms"], ["--seconds", "0.3"]] {
        let out = Command::new(EBQL).arg("demo").args(args).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{args:?}: {err}");
        assert!(err.contains("workload's own count"), "{args:?}: {err}");
    }
}
