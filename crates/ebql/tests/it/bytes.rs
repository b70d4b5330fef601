//! Strings are byte strings (issue 19, bug 3): three files in one directory
//! whose names differ only in bytes that are not UTF-8 (`x-\x80`, `x-\x81`,
//! and `x-\xef\xbf\xbd`, U+FFFD, what a lossy decoding made of the other
//! two), plus a fourth whose name is the four characters `x-\x80`, are four
//! keys and four values: grouped in the kernel and in user space, filtered
//! by equality, shown distinctly by the table, CSV and JSON outputs, and
//! judged alike by `ebql check` (DataFusion and DuckDB over the tap's rows).

use crate::cli::{check_agrees, query_around};
use crate::common::*;
use ebql::Executor;
use ebql_compiler::bytetext;
use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::process::Stdio;

const OPENAT: &str = "tracepoint:syscalls:sys_enter_openat";

/// (name's bytes, how the workload script spells it, opens, the value's text).
const NAMES: [(&[u8], &str, u64, &str); 4] = [
    (b"x-\x80", "x-\\x80", 3, "x-\\x80"),
    (b"x-\x81", "x-\\x81", 5, "x-\\x81"),
    (b"x-\xef\xbf\xbd", "x-\\xef\\xbf\\xbd", 7, "x-\u{fffd}"),
    (b"x-\\x80", "x-\\\\x80", 2, "x-\\\\x80"),
];

/// A fresh directory holding the four files, removed on drop.
struct Dir(std::path::PathBuf);

impl Dir {
    fn create() -> Dir {
        let d = std::env::temp_dir().join(format!("ebql-bytes-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir(&d).unwrap();
        for (name, ..) in NAMES {
            std::fs::write(d.join(OsStr::from_bytes(name)), b"").unwrap();
        }
        Dir(d)
    }

    fn text(&self) -> &str {
        self.0
            .to_str()
            .expect("the temporary directory's path is UTF-8")
    }

    /// Each name's value: the directory, `/`, the name's text.
    fn values(&self) -> BTreeMap<String, u64> {
        NAMES
            .iter()
            .map(|(_, _, n, text)| (format!("{}/{text}", self.text()), *n))
            .collect()
    }

    /// Opens each file its number of times (each open is one event).
    fn open_all(&self, w: &mut Workload) {
        for (name, script, n, _) in NAMES {
            assert!(self.0.join(OsStr::from_bytes(name)).exists());
            let p = format!("{}/{script}", self.text());
            assert_eq!(w.cmd(&format!("openat {p} {n}")), format!("ok {n}"));
        }
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// (string, count) rows of a two-column result, as a map.
fn counts(b: &ebql::arrow::record_batch::RecordBatch) -> BTreeMap<String, u64> {
    strings(b, "f").into_iter().zip(u64s(b, "n")).collect()
}

fn compiled(sql: &str) -> ebql_compiler::CompiledQuery {
    Executor::new()
        .compile(sql)
        .unwrap_or_else(|e| panic!("{}", e.render()))
}

/// Whether `sql` runs its aggregate in the kernel.
fn aggregated_in_kernel(sql: &str) -> bool {
    matches!(
        compiled(sql).split.kernel.output,
        ebql_compiler::split::KernelOutput::Groups(_)
    )
}

/// Whether the kernel tests a string against a literal for `sql`.
fn string_test_in_kernel(sql: &str) -> bool {
    compiled(sql)
        .split
        .kernel
        .filters
        .iter()
        .any(|(p, _)| matches!(p, ebql_compiler::kexpr::KPred::StrEq { .. }))
}

#[test]
fn names_differing_in_invalid_bytes_are_distinct_keys_in_kernel_and_user_space() {
    let _k = kernel_lock();
    require_root();
    let dir = Dir::create();
    let mut w = Workload::start();
    let pid = w.pid;

    let kernel = format!("SELECT str(filename, 64) AS f, COUNT(*) AS n FROM {OPENAT} WHERE pid = {pid} GROUP BY str(filename, 64)");
    assert!(aggregated_in_kernel(&kernel));
    let r = run_once(&kernel, || dir.open_all(&mut w));
    assert_eq!(counts(&r), dir.values(), "grouped in the kernel");

    // A 2,048-byte key is too large for the kernel: DataFusion groups the
    // streamed values (where a lossy decoding merged the first three names).
    let user = format!("SELECT str(filename) AS f, COUNT(*) AS n FROM {OPENAT} WHERE pid = {pid} GROUP BY str(filename)");
    assert!(!aggregated_in_kernel(&user));
    let r = run_once(&user, || dir.open_all(&mut w));
    assert_eq!(counts(&r), dir.values(), "grouped in user space");

    // Each value, as a literal, counts exactly its own opens: in the kernel
    // (bytes against bytes) and in user space (text against text).
    for (_, _, n, text) in NAMES {
        let lit = format!("{}/{text}", dir.text());
        assert_eq!(bytetext::encode(&bytetext::decode(&lit)), lit);
        for (test, in_kernel) in [
            ("str(filename)", true),
            ("concat(str(filename), '')", false),
        ] {
            let sql = format!(
                "SELECT COUNT(*) AS n FROM {OPENAT} WHERE pid = {pid} AND {test} = '{lit}'"
            );
            assert_eq!(string_test_in_kernel(&sql), in_kernel, "{sql}");
            let r = run_once(&sql, || dir.open_all(&mut w));
            assert_eq!(u64s(&r, "n"), [n], "{sql}");
        }
    }
}

#[test]
fn table_csv_and_json_show_each_name_distinctly() {
    let _k = kernel_lock();
    require_root();
    let dir = Dir::create();
    let mut w = Workload::start();
    let sql = format!(
        "SELECT str(filename, 64) AS f, COUNT(*) AS n FROM {OPENAT} WHERE pid = {} GROUP BY str(filename, 64)",
        w.pid
    );
    let d = dir.text();
    let mut run = |format: &str| {
        let (code, out, err) = query_around(
            &["--format", format, "--duration", "2", &sql],
            Stdio::piped(),
            || dir.open_all(&mut w),
        );
        assert_eq!(code, Some(0), "{err}");
        String::from_utf8(out).expect("every output is UTF-8")
    };

    // The table shows the bytes: a byte that is not UTF-8 as `\xHH`, a
    // backslash as `\\` (so the fourth name is `x-\\x80`), U+FFFD as itself.
    let table = run("table");
    let mut rows: Vec<(String, String)> = table
        .lines()
        .filter(|l| l.contains(d))
        .map(|l| {
            let cells: Vec<&str> = l.split('|').map(str::trim).collect();
            (cells[1].to_string(), cells[2].to_string())
        })
        .collect();
    rows.sort();
    let want = |shown: [&str; 4]| -> Vec<(String, String)> {
        let mut v: Vec<(String, String)> = shown
            .iter()
            .zip(NAMES)
            .map(|(s, (.., n, _))| (format!("{d}/{s}"), n.to_string()))
            .collect();
        v.sort();
        v
    };
    assert_eq!(
        rows,
        want(["x-\\x80", "x-\\x81", "x-\u{fffd}", "x-\\\\x80"]),
        "{table}"
    );

    // CSV holds the values' text (`bytetext`), one row per name.
    let csv = run("csv");
    let mut rows: Vec<(String, String)> = csv
        .lines()
        .filter(|l| l.contains(d))
        .map(|l| {
            let (f, n) = l.rsplit_once(',').unwrap();
            (f.to_string(), n.to_string())
        })
        .collect();
    rows.sort();
    assert_eq!(
        rows,
        want(["x-\\x80", "x-\\x81", "x-\u{fffd}", "x-\\\\x80"]),
        "{csv}"
    );

    // JSON strings hold the same text, and decode to the names' bytes.
    let json = run("json");
    let mut got = BTreeMap::new();
    for line in json.lines().filter(|l| !l.trim().is_empty()) {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        let f = v["f"].as_str().unwrap().to_string();
        got.insert(f, v["n"].as_u64().unwrap());
    }
    assert_eq!(got, dir.values(), "{json}");
    let bytes: Vec<Vec<u8>> = got
        .keys()
        .map(|f| bytetext::decode(f).into_owned())
        .collect();
    for (name, ..) in NAMES {
        let path = [dir.0.as_os_str().as_bytes(), b"/", name].concat();
        assert!(bytes.contains(&path), "{name:?} in {json}");
    }
}

/// The thread renames itself to each name (`comm`: a 16-byte string the
/// kernel reads, plain SQL for DuckDB) and opens a file its number of times.
fn open_as_each_comm(w: &mut Workload) {
    for (_, script, n, _) in NAMES {
        assert_eq!(w.cmd(&format!("comm {script}")), "ok comm");
        assert_eq!(
            w.cmd(&format!("openat /nonexistent-ebql-bytes {n}")),
            format!("ok {n}")
        );
    }
}

#[test]
fn the_oracle_agrees_on_names_differing_in_invalid_bytes() {
    let _k = kernel_lock();
    require_root();
    let mut w = Workload::start();
    let pid = w.pid;

    // Task names: DataFusion and DuckDB, grouped in the kernel or (by
    // `--aggregate user`) in user space, filtered in the kernel (`=`) or in
    // user space (lower() has no kernel form).
    let by_comm =
        format!("SELECT comm AS f, COUNT(*) AS n FROM {OPENAT} WHERE pid = {pid} GROUP BY comm");
    let r = run_once(&by_comm, || open_as_each_comm(&mut w));
    let want: BTreeMap<String, u64> = NAMES
        .iter()
        .map(|(.., n, text)| (text.to_string(), *n))
        .collect();
    assert_eq!(counts(&r), want);
    let windowed = format!("{by_comm} WINDOW(time, 500, 500)");
    for args in [&["--aggregate", "kernel"][..], &["--aggregate", "user"]] {
        check_agrees(args, &windowed, true, || open_as_each_comm(&mut w));
    }
    for test in ["comm", "lower(comm)"] {
        let sql = format!("SELECT comm, COUNT(*) AS n FROM {OPENAT} WHERE pid = {pid} AND {test} = 'x-\\x80' GROUP BY comm WINDOW(time, 500, 500)");
        assert_eq!(string_test_in_kernel(&sql), test == "comm", "{sql}");
        check_agrees(&[], &sql, true, || open_as_each_comm(&mut w));
    }

    // File names through str(): DataFusion only.
    let dir = Dir::create();
    let lit = format!("{}/x-\\x80", dir.text());
    for sql in [
        format!("SELECT str(filename, 64) AS f, COUNT(*) AS n FROM {OPENAT} WHERE pid = {pid} GROUP BY str(filename, 64) WINDOW(time, 500, 500)"),
        format!("SELECT str(filename) AS f, COUNT(*) AS n FROM {OPENAT} WHERE pid = {pid} GROUP BY str(filename) WINDOW(time, 500, 500)"),
        format!("SELECT str(filename) AS f, COUNT(*) AS n FROM {OPENAT} WHERE pid = {pid} AND str(filename, 64) = '{lit}' GROUP BY str(filename) WINDOW(time, 500, 500)"),
        format!("SELECT COUNT(*) AS n FROM {OPENAT} WHERE pid = {pid} AND concat(str(filename), '') = '{lit}' WINDOW(time, 500, 500)"),
    ] {
        check_agrees(&[], &sql, false, || dir.open_all(&mut w));
    }
}
