//! Quantiles in the kernel: for a scripted distribution of pread64 sizes
//! spanning six orders of magnitude, every reported quantile is within the
//! sketch's stated relative error of the exact nearest-rank quantile of the
//! same values, computed here from the workload's own list; in user space
//! (an argument the kernel cannot compute) the answer is exact.

use crate::common::*;
use ebql::Executor;
use ebql_compiler::agg::quantile::RELATIVE_ERROR;
use ebql_compiler::split::KernelOutput;

const ENTER: &str = "tracepoint/syscalls/sys_enter_pread64";

/// Quantiles asked for, and their column names.
const QS: [(f64, &str); 9] = [
    (0.0, "p0"),
    (0.01, "p1"),
    (0.1, "p10"),
    (0.25, "p25"),
    (0.5, "p50"),
    (0.75, "p75"),
    (0.9, "p90"),
    (0.99, "p99"),
    (0.999, "p999"),
];

/// `n` sizes from 1 to 1,000,000, log-uniformly spaced, in a scrambled order.
fn sizes(n: usize) -> Vec<u64> {
    let mut v: Vec<u64> = (0..n)
        .map(|i| 10f64.powf(6.0 * i as f64 / (n - 1) as f64).round() as u64)
        .collect();
    // A fixed permutation (multiplicative step coprime with n): order must not matter.
    let step = 7919 % n;
    v = (0..n).map(|i| v[(i * step) % n]).collect();
    v
}

/// The nearest-rank quantile: the value of rank max(1, ⌈q·n⌉).
fn exact(values: &[u64], q: f64) -> u64 {
    let mut s = values.to_vec();
    s.sort_unstable();
    let r = ((q * s.len() as f64).ceil() as usize).clamp(1, s.len());
    s[r - 1]
}

fn select(arg: &str) -> String {
    QS.iter()
        .map(|(q, name)| format!("QUANTILE({arg}, {q}) AS {name}"))
        .collect::<Vec<_>>()
        .join(", ")
}

#[test]
fn kernel_quantiles_within_the_stated_error_of_the_exact_ones() {
    let _k = kernel_lock();
    require_root();
    let mut w = Workload::start();
    let (fa, fb) = (w.file(), w.file());
    let a = sizes(3000);
    let b: Vec<u64> = sizes(1000).iter().map(|v| v * 3).collect();
    let sql = format!(
        "SELECT fd, {}, approx_median(count) AS med, approx_percentile_cont(count, 0.99) AS apc99, MIN(count) AS lo, MAX(count) AS hi, COUNT(*) AS n
         FROM {ENTER} WHERE pid = {} GROUP BY fd ORDER BY fd",
        select("count"),
        w.pid
    );
    // Eleven quantiles of one argument: one sketch in the map value.
    let c = Executor::new()
        .compile(&sql)
        .unwrap_or_else(|e| panic!("{}", e.render()));
    let KernelOutput::Groups(g) = &c.split.kernel.output else {
        panic!("the aggregate runs in the kernel")
    };
    assert_eq!(
        g.slots
            .iter()
            .filter(|s| s.state.is::<ebql_compiler::agg::quantile::Sketch>())
            .count(),
        1
    );

    let r = run_once(&sql, || {
        for &s in &a {
            w.pread(fa, s, 1);
        }
        for &s in &b {
            w.pread(fb, s, 1);
        }
    });
    assert_eq!(u64s(&r, "fd"), vec![fa, fb]);
    assert_eq!(u64s(&r, "n"), vec![3000, 1000]);
    for (row, values) in [a.as_slice(), b.as_slice()].into_iter().enumerate() {
        // MIN and MAX stay exact.
        assert_eq!(u64s(&r, "lo")[row], *values.iter().min().unwrap());
        assert_eq!(u64s(&r, "hi")[row], *values.iter().max().unwrap());
        let mut cols: Vec<(f64, &str)> = QS.to_vec();
        cols.extend([(0.5, "med"), (0.99, "apc99")]);
        for (q, name) in cols {
            let (got, want) = (u64s(&r, name)[row], exact(values, q));
            assert!(
                (got as f64 - want as f64).abs() <= RELATIVE_ERROR * want as f64,
                "group {row} {name}: kernel {got}, exact {want}, bound {:.2}%",
                RELATIVE_ERROR * 100.0
            );
        }
    }
}

#[test]
fn user_space_quantiles_are_exact() {
    let _k = kernel_lock();
    require_root();
    let mut w = Workload::start();
    let f = w.file();
    let a = sizes(500);
    // Division by a column does not compile: the aggregate runs in DataFusion.
    let arg = "count * fd / fd";
    let sql = format!("SELECT {} FROM {ENTER} WHERE pid = {}", select(arg), w.pid);
    let c = Executor::new()
        .compile(&sql)
        .unwrap_or_else(|e| panic!("{}", e.render()));
    assert!(
        matches!(c.split.kernel.output, KernelOutput::Stream { .. }),
        "runs in user space"
    );
    let r = run_once(&sql, || {
        for &s in &a {
            w.pread(f, s, 1);
        }
    });
    for (q, name) in QS {
        assert_eq!(u64s(&r, name), vec![exact(&a, q)], "{name}");
    }
}
