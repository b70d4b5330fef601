#!/usr/bin/env python3
"""eBQL soak test (stdlib only). Entry point: bench/soak.sh.

Runs `ebql query` (a windowed COUNT(*) over sys_enter_pread64 filtered by the
workload's pid, NDJSON to a file) while `ebql workload pread-loop` hammers
pread64 on 2 threads for the whole duration, samples ebql's RSS, then checks:

* exit code 0 after SIGINT;
* every event accounted: sum of COUNT over all windows + the drops reported
  in `ebql: stats` == the workload's own pread64 count;
* RSS flat: the least-squares slope of RSS after the warm-up, projected over
  the run, stays under max(--rss-growth-mib, 5% of the median RSS).

Prints a report; exits 1 when a check fails.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

TRACEPOINT = "tracepoint/syscalls/sys_enter_pread64"


def rss_kib(pid: int) -> int | None:
    """VmRSS of `pid` in KiB (None once it is gone)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def slope_per_min(samples: list[tuple[float, int]]) -> float:
    """Least-squares slope of (seconds, KiB) samples, in KiB per minute."""
    if len(samples) < 2:
        return 0.0
    ts = [t for t, _ in samples]
    vs = [v for _, v in samples]
    mt, mv = statistics.fmean(ts), statistics.fmean(vs)
    den = sum((t - mt) ** 2 for t in ts)
    if den == 0:
        return 0.0
    return 60.0 * sum((t - mt) * (v - mv) for t, v in zip(ts, vs)) / den


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--minutes", type=float, default=30.0, help="duration of the load (default 30)")
    ap.add_argument("--ebql", default=os.environ.get("EBQL", str(Path.home() / ".cache/ebql/target/release/ebql")),
                    help="ebql binary (default $EBQL or ~/.cache/ebql/target/release/ebql)")
    ap.add_argument("--window-ms", type=int, default=1000, help="tumbling window size (default 1000)")
    ap.add_argument("--sample-seconds", type=float, default=5.0, help="RSS sampling period (default 5)")
    ap.add_argument("--warmup-seconds", type=float, default=60.0,
                    help="RSS samples before this are left out of the slope (default 60, capped at 20%% of the run)")
    ap.add_argument("--rss-growth-mib", type=float, default=2.0,
                    help="allowed RSS growth over the run, projected from the slope (default 2 MiB, or 5%% of the median if larger)")
    ap.add_argument("--keep", action="store_true", help="keep the NDJSON output and logs")
    args = ap.parse_args()

    ebql = args.ebql
    if not os.access(ebql, os.X_OK):
        print(f"soak: no ebql binary at {ebql} (build it, or pass --ebql / set EBQL)", file=sys.stderr)
        return 2
    seconds = args.minutes * 60.0
    work = Path(tempfile.mkdtemp(prefix="ebql-soak-"))
    gate = work / "gate"
    os.mkfifo(gate)
    results = work / "windows.ndjson"

    load = subprocess.Popen([ebql, "workload", "pread-loop", "--threads", "2", "--size", "64",
                             "--seconds", str(seconds), "--gate", str(gate)],
                            stdout=subprocess.PIPE, text=True)
    ready = load.stdout.readline().strip()
    if not ready.startswith("ready "):
        print(f"soak: workload did not start: {ready!r}", file=sys.stderr)
        return 1
    pid = int(ready.split()[1])
    sql = f"SELECT COUNT(*) AS n FROM {TRACEPOINT} WHERE pid = {pid} WINDOW(time, {args.window_ms}, {args.window_ms})"
    query = subprocess.Popen([ebql, "query", "--format", "json", "--output", str(results), sql],
                             stderr=subprocess.PIPE, text=True)
    stderr_lines: list[str] = []
    attached = threading.Event()

    def read_stderr() -> None:
        for line in query.stderr:
            stderr_lines.append(line.rstrip("\n"))
            if line.startswith("ebql: attached"):
                attached.set()

    reader = threading.Thread(target=read_stderr, daemon=True)
    reader.start()
    if not attached.wait(120):
        print("soak: ebql did not attach:\n  " + "\n  ".join(stderr_lines), file=sys.stderr)
        query.kill()
        load.kill()
        return 1

    print(f"soak: workload pid {pid}, ebql pid {query.pid}, {args.minutes:g} min, query: {sql}", flush=True)
    samples: list[tuple[float, int]] = []
    start = time.monotonic()
    with open(gate, "wb") as g:  # releases the workload
        g.write(b"x")
    next_sample = start
    while load.poll() is None:
        now = time.monotonic()
        if now >= next_sample:
            r = rss_kib(query.pid)
            if r is None:
                break
            samples.append((now - start, r))
            next_sample += args.sample_seconds
        time.sleep(min(0.5, max(0.0, next_sample - time.monotonic())))
    report = load.stdout.read().splitlines()
    load.wait()
    # One more window closes after the load; then stop ebql like Ctrl-C.
    time.sleep(args.window_ms / 1000.0 + 0.5)
    query.send_signal(signal.SIGINT)
    code = query.wait(timeout=120)
    reader.join(timeout=10)

    total = next((int(l.split()[1]) for l in report if l.startswith("total_ops ")), None)
    stats = next((json.loads(l.split("ebql: stats ", 1)[1]) for l in stderr_lines if l.startswith("ebql: stats ")), None)
    windows = [json.loads(l) for l in results.read_text().splitlines() if l.strip()] if results.exists() else []
    counted = sum(w["n"] for w in windows)

    ok = True

    def check(cond: bool, what: str) -> None:
        nonlocal ok
        ok &= cond
        print(f"  [{'ok' if cond else 'FAIL'}] {what}")

    print("soak: results")
    check(code == 0, f"ebql exit code {code}")
    if total is None or stats is None:
        check(False, f"workload total ({total}) and ebql stats ({stats is not None}) present")
        print("\n".join("  ebql: " + l for l in stderr_lines[-10:]))
        return 1
    dropped = stats["events_dropped"]
    print(f"  workload pread64 calls {total} ({total / seconds:,.0f}/s), windows {len(windows)}, "
          f"sum of COUNT {counted}, dropped {dropped} (groups full {stats['dropped_groups_full']}, "
          f"ring buffer full {stats['dropped_ringbuf_full']}, recursion misses {stats['bpf_recursion_misses']})")
    if counted + dropped == total:
        check(True, "every event accounted: sum of COUNT + drops == workload calls")
    elif counted < total <= counted + dropped and stats["dropped_groups_full"] + stats["dropped_ringbuf_full"] == 0:
        # Recursion misses count skipped runs of every process, not just the workload's.
        check(True, f"every event accounted: {total - counted} missing <= {dropped} recursion misses (all processes)")
    else:
        check(False, f"every event accounted: sum of COUNT {counted} + drops {dropped} != workload calls {total}")

    if len(samples) >= 3:
        rss = [v for _, v in samples]
        warm = min(args.warmup_seconds, 0.2 * seconds)
        steady = [s for s in samples if s[0] >= warm] or samples
        slope = slope_per_min(steady)
        median = statistics.median(rss)
        growth = slope * (seconds - warm) / 60.0
        limit = max(args.rss_growth_mib * 1024, 0.05 * median)
        print(f"  RSS KiB: first {rss[0]}, median {median:.0f}, max {max(rss)}, last {rss[-1]}; "
              f"slope after {warm:.0f} s {slope:+.1f} KiB/min ({len(samples)} samples every {args.sample_seconds:g} s)")
        check(growth <= limit, f"RSS flat: projected growth {growth:+.0f} KiB <= {limit:.0f} KiB")
    else:
        check(False, f"RSS sampled ({len(samples)} samples)")

    if args.keep or not ok:
        (work / "ebql.stderr").write_text("\n".join(stderr_lines) + "\n")
        (work / "rss.tsv").write_text("".join(f"{t:.1f}\t{v}\n" for t, v in samples))
        print(f"  files kept in {work}")
    else:
        for p in (results, gate):
            p.unlink(missing_ok=True)
        work.rmdir()
    print("soak: PASS" if ok else "soak: FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
