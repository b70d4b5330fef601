//! Strings the probe cannot read (issue 19, item 6): a system call's path
//! in a page the process never touched (`openat-cold`: a fresh mapping of a
//! memfd page) cannot be copied by `bpf_probe_read_user_str` at the
//! tracepoint, which runs before the call faults the page in. Such a string
//! is SQL NULL (not `''`), a group of its own, never equal or unequal to a
//! literal, and counted per window in `str_read_failed` (not a loss: the
//! row is kept); the same path read from a resident page is itself.

use crate::cli::{check_agrees, query_around};
use crate::common::*;
use ebql::arrow::array::{Array, AsArray};
use ebql::arrow::compute::cast;
use ebql::arrow::datatypes::DataType;
use ebql::arrow::record_batch::RecordBatch;
use ebql::window::WindowBatch;
use ebql::Executor;
use std::collections::BTreeMap;
use std::process::Stdio;

const OPENAT: &str = "tracepoint:syscalls:sys_enter_openat";
/// Calls whose path is in a page not resident, then calls with it resident.
const COLD: u64 = 3;
const WARM: u64 = 2;

/// A path no file has (the calls fail with ENOENT, as the workload allows).
fn path() -> String {
    format!("/tmp/ebql-unread-{}-none", std::process::id())
}

fn open_cold_then_warm(w: &mut Workload) {
    let p = path();
    assert_eq!(
        w.cmd(&format!("openat-cold {p} {COLD}")),
        format!("ok {COLD}")
    );
    assert_eq!(w.cmd(&format!("openat {p} {WARM}")), format!("ok {WARM}"));
}

/// Column `name` as optional strings (NULL as None).
fn opt_strings(b: &RecordBatch, name: &str) -> Vec<Option<String>> {
    let col = b
        .column_by_name(name)
        .unwrap_or_else(|| panic!("no column {name}"));
    let c = cast(col, &DataType::Utf8).unwrap();
    let s = c.as_string::<i32>();
    (0..s.len())
        .map(|i| (!s.is_null(i)).then(|| s.value(i).to_string()))
        .collect()
}

/// Runs `sql` (its one time window lasts the whole run) around `work`:
/// the window's rows and what it carries (`str_read_failed`), and the stats.
fn run_window(sql: &str, work: impl FnOnce()) -> (RecordBatch, WindowBatch, ebql::QueryStats) {
    let mut ex = Executor::new();
    let mut q = ex.execute(sql).unwrap_or_else(|e| panic!("{}", e.render()));
    let rx = q.take_windows().unwrap();
    work();
    let stats = q.stop().unwrap_or_else(|e| panic!("{}", e.render()));
    let windows: Vec<WindowBatch> = rx
        .try_iter()
        .filter(|w| w.batch.num_rows() > 0 || w.drops.str_read_failed > 0)
        .collect();
    assert_eq!(windows.len(), 1, "one window holds the calls: {sql}");
    let w = windows.into_iter().next().unwrap();
    (w.batch.clone(), w, stats)
}

fn grouped(b: &RecordBatch) -> BTreeMap<Option<String>, u64> {
    opt_strings(b, "f").into_iter().zip(u64s(b, "n")).collect()
}

#[test]
fn a_string_in_a_page_not_resident_is_null_and_counted_in_its_window() {
    let _k = kernel_lock();
    require_root();
    let mut w = Workload::start();
    let pid = w.pid;
    let win = "WINDOW(time, 60000, 60000)";
    let want: BTreeMap<Option<String>, u64> = [(None, COLD), (Some(path()), WARM)].into();

    // Grouped in the kernel (a 128-byte key: the NULL flag in its last
    // byte) and in user space (2,048 bytes): NULL apart from every string.
    for (f, in_kernel) in [("str(filename, 128)", true), ("str(filename)", false)] {
        let sql = format!(
            "SELECT {f} AS f, COUNT(*) AS n FROM {OPENAT} WHERE pid = {pid} GROUP BY {f} {win}"
        );
        let c = Executor::new()
            .compile(&sql)
            .unwrap_or_else(|e| panic!("{}", e.render()));
        assert_eq!(
            matches!(
                c.split.kernel.output,
                ebql_compiler::split::KernelOutput::Groups(_)
            ),
            in_kernel,
            "{sql}"
        );
        let (b, win_batch, stats) = run_window(&sql, || open_cold_then_warm(&mut w));
        assert_eq!(grouped(&b), want, "{sql}");
        assert_eq!(win_batch.drops.str_read_failed, COLD, "{sql}");
        assert_eq!(win_batch.drops.query_total(), 0, "not a loss: {sql}");
        assert_eq!(
            (stats.str_read_failed, stats.events_dropped()),
            (COLD, 0),
            "{sql}"
        );
    }

    // Streamed: the string and its truncated() are NULL; the rows are kept.
    let sql = format!("SELECT str(filename, 64) AS f, truncated(str(filename, 64)) AS cut FROM {OPENAT} WHERE pid = {pid} {win}");
    let (b, win_batch, _) = run_window(&sql, || open_cold_then_warm(&mut w));
    let cut = b.column_by_name("cut").unwrap().as_boolean().clone();
    let mut rows: Vec<(Option<String>, Option<bool>)> = opt_strings(&b, "f")
        .into_iter()
        .zip((0..cut.len()).map(|i| (!cut.is_null(i)).then(|| cut.value(i))))
        .collect();
    rows.sort();
    let mut expect = vec![(None, None); COLD as usize];
    expect.extend(vec![(Some(path()), Some(false)); WARM as usize]);
    assert_eq!(rows, expect, "{sql}");
    assert_eq!(win_batch.drops.str_read_failed, COLD);

    // A comparison with NULL is never true: neither `=` nor `<>`, nor under
    // NOT, in the kernel; IS NULL (user space) finds exactly the cold calls.
    let p = path();
    for (cond, n, kernel_test) in [
        (format!("str(filename) = '{p}'"), WARM, true),
        ("str(filename) <> '/elsewhere'".to_string(), WARM, true),
        ("NOT (str(filename) = '/elsewhere')".to_string(), WARM, true),
        (format!("NOT (str(filename) <> '{p}')"), WARM, true),
        ("str(filename) LIKE '/tmp/%'".to_string(), WARM, true),
        (
            "str(filename) NOT LIKE '/elsewhere%'".to_string(),
            WARM,
            true,
        ),
        // NULL = literal is not true, the other term is: the row counts
        // (the workload's script thread is its main thread: tid = pid).
        (
            format!("(str(filename) = '/elsewhere' OR tid = {pid})"),
            COLD + WARM,
            true,
        ),
        ("str(filename) IS NULL".to_string(), COLD, false),
        ("str(filename) IS NOT NULL".to_string(), WARM, false),
    ] {
        let sql = format!("SELECT COUNT(*) AS n FROM {OPENAT} WHERE pid = {pid} AND {cond} {win}");
        let c = Executor::new()
            .compile(&sql)
            .unwrap_or_else(|e| panic!("{}", e.render()));
        let tested = c
            .split
            .kernel
            .filters
            .iter()
            .any(|(p, _)| p.reads_str_by_helper());
        assert_eq!(tested, kernel_test, "{sql}");
        let (b, win_batch, _) = run_window(&sql, || open_cold_then_warm(&mut w));
        assert_eq!(u64s(&b, "n"), [n], "{sql}");
        assert_eq!(win_batch.drops.str_read_failed, COLD, "{sql}");
    }
}

#[test]
fn the_stats_line_and_the_warnings_name_the_failed_reads_and_the_oracle_agrees() {
    let _k = kernel_lock();
    require_root();
    let mut w = Workload::start();
    let pid = w.pid;
    let sql = format!("SELECT str(filename, 128) AS f, COUNT(*) AS n FROM {OPENAT} WHERE pid = {pid} GROUP BY str(filename, 128)");
    let (code, out, err) = query_around(
        &["--format", "csv", "--duration", "2", &sql],
        Stdio::piped(),
        || open_cold_then_warm(&mut w),
    );
    assert_eq!(code, Some(0), "{err}");
    let out = String::from_utf8(out).unwrap();
    assert!(
        out.lines().any(|l| l == format!(",{COLD}")),
        "NULL is an empty CSV field: {out}"
    );
    assert!(
        out.lines().any(|l| l == format!("{},{WARM}", path())),
        "{out}"
    );
    assert!(
        err.contains(&format!("\"str_read_failed\":{COLD}")),
        "{err}"
    );
    assert!(err.contains("\"events_dropped\":0"), "{err}");
    assert!(
        err.contains(&format!(
            "{COLD} string reads failed (each value is NULL, its row kept"
        )),
        "{err}"
    );
    assert!(!err.contains("events were not"), "not a loss: {err}");

    // `ebql check`: the tap reads the same strings and fails the same way,
    // so DataFusion over the tap's rows sees the same NULLs: every window
    // agrees, none is inconclusive.
    for sql in [
        sql.clone(),
        format!("SELECT str(filename) AS f, truncated(str(filename)) AS cut FROM {OPENAT} WHERE pid = {pid}"),
        format!("SELECT COUNT(*) AS n FROM {OPENAT} WHERE pid = {pid} AND str(filename) <> '/elsewhere'"),
    ] {
        // str() keeps DuckDB out: DataFusion's reference judges.
        check_agrees(&[], &sql, false, || open_cold_then_warm(&mut w));
    }
}
