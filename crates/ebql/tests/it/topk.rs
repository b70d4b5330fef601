//! approx_top_k in the kernel: the Space-Saving summary on scripted pread64
//! calls whose sizes (the value) and descriptors are known. With fewer
//! distinct values than counters the answer is the exact top k; with 200
//! distinct values and 20 counters the planted heavy hitters are reported,
//! in order, each true count within [count − error, count] and every error
//! ≤ N/m; weighted by the bytes asked for; under the oracle, tumbling and
//! hopping (panes merged), exact and approximate.

use crate::common::*;
use ebql::arrow::array::{Array, AsArray, ListArray, RecordBatch, StructArray};
use ebql::arrow::compute::cast;
use ebql::arrow::datatypes::{DataType, UInt64Type};
use ebql::check::{CheckOptions, Verdict};
use ebql::Executor;
use ebql_compiler::agg::topk::{
    counters, entries as summary_entries, merge_entries, top, update, SpaceSaving, ENTRY_BYTES,
};
use ebql_compiler::split::KernelOutput;
use std::collections::HashMap;

const ENTER: &str = "tracepoint/syscalls/sys_enter_pread64";

/// One reported entry: (value, count, error).
type Entry = (u64, u64, u64);

/// Row `row` of the approx_top_k column `name` (values cast to u64).
fn entries(b: &RecordBatch, name: &str, row: usize) -> Vec<Entry> {
    let col = b
        .column_by_name(name)
        .unwrap_or_else(|| panic!("no column {name}"));
    let list: &ListArray = col.as_list::<i32>();
    assert!(!list.is_null(row), "{name}[{row}] is NULL");
    let v = list.value(row);
    let s: &StructArray = v.as_struct();
    let u = |c: &str| {
        cast(s.column_by_name(c).unwrap(), &DataType::UInt64)
            .unwrap()
            .as_primitive::<UInt64Type>()
            .values()
            .to_vec()
    };
    let (vals, counts, errors) = (u("value"), u("count"), u("error"));
    (0..s.len())
        .map(|i| (vals[i], counts[i], errors[i]))
        .collect()
}

/// The exact top k of `truth` (value → count): count descending, then value.
fn exact_top(truth: &HashMap<u64, u64>, k: usize) -> Vec<Entry> {
    let mut v: Vec<Entry> = truth
        .iter()
        .filter(|(_, &c)| c > 0)
        .map(|(&x, &c)| (x, c, 0))
        .collect();
    v.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    v.truncate(k);
    v
}

/// The query's kernel part keeps one Space-Saving summary of `m` counters.
fn assert_kernel_summary(sql: &str, m: usize) {
    let c = Executor::new()
        .compile(sql)
        .unwrap_or_else(|e| panic!("{}", e.render()));
    let KernelOutput::Groups(g) = &c.split.kernel.output else {
        panic!("approx_top_k runs in the kernel: {sql}")
    };
    let s: Vec<_> = g
        .slots
        .iter()
        .filter(|s| s.state.is::<SpaceSaving>())
        .collect();
    assert_eq!(s.len(), 1);
    assert_eq!(s[0].state.bytes() as usize, 24 * m);
}

#[test]
fn fewer_distinct_values_than_counters_give_the_exact_top_k() {
    let _k = kernel_lock();
    require_root();
    let mut w = Workload::start();
    let (fa, fb) = (w.file(), w.file());
    let sql = format!(
        "SELECT fd, approx_top_k(count, 5) AS top, COUNT(*) AS n FROM {ENTER} \
         WHERE pid = {} GROUP BY fd ORDER BY fd",
        w.pid
    );
    assert_kernel_summary(&sql, counters(5));
    // fa: sizes 1..=12 (12 distinct < m = 20), size s read (s * 7) % 13 + 1 times,
    // with ties (counts are not all distinct) broken by the smaller value;
    // fb: 3 sizes, fewer than k.
    let mut truth_a = HashMap::new();
    let mut truth_b = HashMap::new();
    let r = run_once(&sql, || {
        for round in 0..2 {
            for s in 1..=12u64 {
                let n = (s * 7) % 13 + 1;
                let half = if round == 0 { n / 2 } else { n - n / 2 };
                if half > 0 {
                    w.pread(fa, s, half);
                }
                *truth_a.entry(s).or_insert(0) += half;
            }
        }
        for (s, n) in [(4096u64, 3u64), (0, 2), (100, 3)] {
            w.pread(fb, s, n);
            truth_b.insert(s, n);
        }
    });
    assert_eq!(u64s(&r, "fd"), vec![fa, fb]);
    assert_eq!(entries(&r, "top", 0), exact_top(&truth_a, 5));
    // Three values, ties by value: 100 before 4096; size 0 is a value like any other.
    assert_eq!(
        entries(&r, "top", 1),
        vec![(100, 3, 0), (4096, 3, 0), (0, 2, 0)]
    );
}

/// 200 distinct sizes, 20 counters: five planted heavy hitters among 195
/// light sizes read twice each, interleaved over ten rounds.
#[test]
fn heavy_hitters_are_reported_in_order_within_the_bound() {
    let _k = kernel_lock();
    require_root();
    let mut w = Workload::start();
    // One CPU, so one per-CPU summary sees the whole order below: on two, a
    // CPU whose counters are not yet full takes a heavy size exactly.
    assert_eq!(w.cmd("cpu 0"), "ok cpu");
    let f = w.file();
    let k = 5;
    let m = counters(k) as u64;
    assert_eq!(m, 20);
    let sql = format!(
        "SELECT approx_top_k(count, {k}) AS top, COUNT(*) AS n FROM {ENTER} WHERE pid = {}",
        w.pid
    );
    assert_kernel_summary(&sql, m as usize);
    // Heavy: 1000 × size 5000, 800 × 4000, …, 200 × 1000. N = 3000 + 390 =
    // 3390, N/m = 169.5: each heavy count is above it, and apart by more.
    let heavy: Vec<(u64, u64)> = (1..=5u64).rev().map(|i| (1000 * i, 200 * i)).collect();
    let light: Vec<u64> = (1..=195u64).collect();
    let mut truth: HashMap<u64, u64> = HashMap::new();
    let r = run_once(&sql, || {
        // Each round: 20 new light sizes first (the first round fills the
        // 20 counters with them), then the heavy ones, which therefore enter
        // the summary by evicting a light size: with an error.
        for round in 0..10 {
            for &size in light.iter().skip(round * 20).take(20) {
                w.pread(f, size, 2);
                *truth.entry(size).or_insert(0) += 2;
            }
            for &(size, n) in &heavy {
                w.pread(f, size, n / 10);
                *truth.entry(size).or_insert(0) += n / 10;
            }
        }
    });
    let n: u64 = truth.values().sum();
    assert_eq!((n, u64s(&r, "n")[0]), (3390, 3390));
    let top = entries(&r, "top", 0);
    eprintln!("N = {n}, N/m = {}: {top:?}", n as f64 / m as f64);
    assert_eq!(top.len(), k);
    // The heavy hitters, in order of their true counts.
    assert_eq!(
        top.iter().map(|e| e.0).collect::<Vec<_>>(),
        heavy.iter().map(|h| h.0).collect::<Vec<_>>()
    );
    for &(v, count, error) in &top {
        let t = truth[&v];
        assert!(
            count - error <= t && t <= count,
            "{v}: true {t} not in [{}, {count}]",
            count - error
        );
        assert!(error * m <= n, "{v}: error {error} > N/m = {n}/{m}");
    }
    // The heavy sizes replaced light ones: their counts carry an error (the
    // approximate regime, not an exact summary).
    assert!(top.iter().all(|e| e.2 > 0), "{top:?}");
}

#[test]
fn weighted_top_k_sums_the_weights_and_skips_zero_weights() {
    let _k = kernel_lock();
    require_root();
    let mut w = Workload::start();
    let fds: Vec<u64> = (0..5).map(|_| w.file()).collect();
    let sql = format!(
        "SELECT approx_top_k(fd, 3, count) AS top, approx_top_k(fd, 3) AS calls FROM {ENTER} WHERE pid = {}",
        w.pid
    );
    // Two slots: weighted and unweighted summaries of fd are different states.
    let c = Executor::new()
        .compile(&sql)
        .unwrap_or_else(|e| panic!("{}", e.render()));
    let KernelOutput::Groups(g) = &c.split.kernel.output else {
        panic!("approx_top_k runs in the kernel")
    };
    assert_eq!(g.slots.len(), 2);
    assert!(g.slots.iter().any(|s| s.weight.is_some()));
    let mut bytes: HashMap<u64, u64> = HashMap::new();
    let mut calls: HashMap<u64, u64> = HashMap::new();
    let r = run_once(&sql, || {
        // fd i: 3 - i calls of 1000 * (i + 1) bytes; fds[4] only 0-byte reads (weight 0).
        for (i, &fd) in fds.iter().enumerate().take(4) {
            let (size, n) = (1000 * (i as u64 + 1), 4 - i as u64);
            w.pread(fd, size, n);
            *bytes.entry(fd).or_insert(0) += size * n;
            *calls.entry(fd).or_insert(0) += n;
        }
        w.pread(fds[4], 0, 9);
        calls.insert(fds[4], 9);
    });
    // bytes: 4000, 6000, 6000, 4000: ties by descriptor.
    assert_eq!(entries(&r, "top", 0), exact_top(&bytes, 3));
    assert_eq!(entries(&r, "top", 0)[0].1, 6000);
    assert_eq!(entries(&r, "calls", 0), exact_top(&calls, 3));
    assert_eq!(entries(&r, "calls", 0)[0], (fds[4], 9, 0));
}

/// Two summaries, one per CPU (the workload pinned to each in turn), each
/// past its 16 counters: the kernel's answer is exactly the model's
/// (`agg::topk::update` per event in order on each CPU, then the merge),
/// errors and all.
#[test]
fn the_kernel_folds_and_merges_exactly_as_the_model() {
    let _k = kernel_lock();
    require_root();
    let mut w = Workload::start();
    let f = w.file();
    let k = 4;
    let m = counters(k);
    let sql = format!(
        "SELECT approx_top_k(count, {k}) AS top FROM {ENTER} WHERE pid = {}",
        w.pid
    );
    assert_kernel_summary(&sql, m);
    // Per CPU: (size, calls) in order. 30 and 25 distinct sizes, some shared.
    let streams: Vec<Vec<(u64, u64)>> = (0..2u64)
        .map(|cpu| {
            (0..30 - 5 * cpu)
                .flat_map(|i| {
                    let size = 1 + (i * 7 + cpu * 3) % 40;
                    [(size, 1 + i % 4), (900 + cpu, 2)]
                })
                .collect()
        })
        .collect();
    let mut state = vec![vec![0u8; m * ENTRY_BYTES]; 2];
    let r = run_once(&sql, || {
        for (cpu, stream) in streams.iter().enumerate() {
            assert_eq!(w.cmd(&format!("cpu {cpu}")), "ok cpu");
            for &(size, n) in stream {
                w.pread(f, size, n);
                for _ in 0..n {
                    update(&mut state[cpu], size, 1);
                }
            }
        }
    });
    let merged = merge_entries(&summary_entries(&state[0]), &summary_entries(&state[1]), m);
    assert!(merged.iter().any(|e| e.error > 0), "the summaries evicted");
    let want: Vec<Entry> = top(
        merged
            .iter()
            .map(|e| (e.value as i128, e.count, e.error))
            .collect(),
        k,
    )
    .into_iter()
    .map(|(v, c, e)| (v as u64, c, e))
    .collect();
    assert_eq!(entries(&r, "top", 0), want);
}

/// The oracle compares the kernel's top k with DataFusion's exact one,
/// `size` ms windows every `step` ms; with `distinct` sizes against m = 16.
fn check_agrees(size: u64, step: u64, distinct: u64) -> ebql::check::CheckReport {
    let mut w = Workload::start();
    let f = w.file();
    let sql = format!(
        "SELECT fd, approx_top_k(count, 4) AS top FROM {ENTER} WHERE pid = {} GROUP BY fd WINDOW(time, {size}, {step})",
        w.pid
    );
    let c = Executor::new()
        .check(&sql, CheckOptions::default())
        .unwrap_or_else(|e| panic!("{}", e.render()));
    for round in 0..6u64 {
        // A heavy size per round and a spread of light ones.
        w.pread(f, 10_000 + round % 2, 60);
        for s in 0..distinct {
            w.pread(f, 1 + s, 1 + (s + round) % 3);
        }
        w.sleep_ms(step / 2);
    }
    c.stop().unwrap_or_else(|e| panic!("{}", e.render()))
}

#[test]
fn the_oracle_agrees_on_hopping_windows_exact_and_approximate() {
    let _k = kernel_lock();
    require_root();
    // 10 distinct sizes + 2 heavy < 16 counters: every window exact,
    // hopping windows merged from their panes.
    let report = check_agrees(400, 200, 10);
    assert!(report.agrees(), "{report}");
    let compared = report
        .windows
        .iter()
        .filter(|w| w.verdict == Verdict::Agree && w.kernel_rows > 0)
        .count();
    assert!(compared >= 3, "{report}");
    // 60 distinct sizes: the summary is approximate; the kernel's entries
    // are within the Space-Saving bound of the exact top 4.
    let report = check_agrees(400, 200, 60);
    assert!(report.agrees(), "{report}");
}
