#!/usr/bin/env python3
"""Issue 24 benchmark: per-event cost of the new operators on the pread64
micro-workload, against COUNT(*) (stdlib only).

Each query runs under `ebql check --cost` (the built-in 2-thread pread64
workload, `$pid` its pid; bpf_stats on only for the measurement), rounds
interleaved across queries; a query's cost is its programs' measured ns per
run weighted by their runs (a query over two events has two programs), and
ebql's own CPU over the run. Medians over the rounds.

* count: the baseline, SELECT fd, COUNT(*) … GROUP BY fd.
* distinct-on: DISTINCT ON (fd): the latest record per key in a per-CPU hash.
* stream: the same columns streamed, one ring-buffer record per event.
* topk-hit / topk-miss: approx_top_k(count, 10) (one size: a hit) and
  approx_top_k(pos, 10) (random offsets: every event misses a full summary).
* union-kernel / union-user: COUNT(*) per fd over a UNION ALL of pread64's
  enter with itself under a second filter: one group table in the kernel,
  or both programs streaming (--aggregate user).
* join-kernel / join-stream: a join of two relations (pread64 calls per
  tid joined with bytes per tid, entries and exits): each side aggregated
  in the kernel (one group table keyed by side and tid), or both sides
  streamed and aggregated by DataFusion (--aggregate user).

usage: sudo bench/operators.py [--rounds N] [--seconds S] [--json FILE]
Environment: EBQL (the ebql binary).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys

EV = "tracepoint/syscalls/sys_enter_pread64"
EX = "tracepoint/syscalls/sys_exit_pread64"
W = " WINDOW(time, 1000, 1000)"
QUERIES = {
    "count": (f"SELECT fd, COUNT(*) FROM {EV} WHERE pid = $pid GROUP BY fd" + W, []),
    "distinct-on": (f"SELECT DISTINCT ON (fd) fd, count, pos FROM {EV} WHERE pid = $pid" + W, []),
    "stream": (f"SELECT fd, count, pos, time FROM {EV} WHERE pid = $pid" + W, []),
    "topk-hit": (f"SELECT fd, COUNT(*), approx_top_k(count, 10) FROM {EV} WHERE pid = $pid GROUP BY fd" + W, []),
    "topk-miss": (f"SELECT fd, COUNT(*), approx_top_k(pos, 10) FROM {EV} WHERE pid = $pid GROUP BY fd" + W, []),
    "union-kernel": (
        f"SELECT fd, COUNT(*) FROM (SELECT fd FROM {EV} WHERE pid = $pid AND count > 0 "
        f"UNION ALL SELECT fd FROM {EV} WHERE pid = $pid AND count = 128) GROUP BY fd" + W, ["--aggregate", "kernel"]),
    "union-user": (
        f"SELECT fd, COUNT(*) FROM (SELECT fd FROM {EV} WHERE pid = $pid AND count > 0 "
        f"UNION ALL SELECT fd FROM {EV} WHERE pid = $pid AND count = 128) GROUP BY fd" + W, ["--aggregate", "user"]),
    "join-kernel": (
        f"SELECT e.tid, e.n, x.bytes FROM (SELECT tid, COUNT(*) AS n FROM {EV} WHERE pid = $pid GROUP BY tid) AS e "
        f"JOIN (SELECT tid, SUM(ret) AS bytes FROM {EX} WHERE pid = $pid GROUP BY tid) AS x ON e.tid = x.tid" + W,
        ["--aggregate", "kernel"]),
    "join-stream": (
        f"SELECT e.tid, e.n, x.bytes FROM (SELECT tid, COUNT(*) AS n FROM {EV} WHERE pid = $pid GROUP BY tid) AS e "
        f"JOIN (SELECT tid, SUM(ret) AS bytes FROM {EX} WHERE pid = $pid GROUP BY tid) AS x ON e.tid = x.tid" + W,
        ["--aggregate", "user"]),
}
ROW = re.compile(r"^(\S+)\s+(\d+)\s+[\d.]+%\s+[\d.]+\s+([\d.]+)\s+[+-][\d.]+%$")
CPU = re.compile(r"measured ([\d.]+) ms")
MATCHED = re.compile(r"events matched (\d+)")


def measure(ebql: str, sql: str, flags: list[str], seconds: float) -> dict:
    out = subprocess.run([ebql, "check", "--cost", "-d", f"{seconds}s", *flags, sql],
                         capture_output=True, text=True, timeout=120)
    if out.returncode != 0:
        raise RuntimeError(out.stderr.strip()[-400:] or out.stdout[-400:])
    runs = ns = 0.0
    for line in out.stdout.splitlines():
        m = ROW.match(line.strip())
        if m:
            runs += float(m.group(2))
            ns += float(m.group(2)) * float(m.group(3))
    cpu = CPU.search(out.stdout)
    matched = MATCHED.search(out.stdout)
    return {"ns_per_run": ns / runs if runs else None, "runs": runs,
            "cpu_ms": float(cpu.group(1)) if cpu else None,
            "matched": int(matched.group(1)) if matched else None}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--only", default=",".join(QUERIES))
    ap.add_argument("--json")
    args = ap.parse_args()
    ebql = os.environ.get("EBQL", "ebql")
    names = [n for n in args.only.split(",") if n]
    res: dict[str, list[dict]] = {n: [] for n in names}
    for r in range(args.rounds):
        for n in names:
            sql, flags = QUERIES[n]
            try:
                res[n].append(measure(ebql, sql, flags, args.seconds))
            except Exception as e:  # noqa: BLE001
                print(f"round {r + 1} {n}: {e}", file=sys.stderr)
        print(f"round {r + 1}/{args.rounds} done", file=sys.stderr)
    med = lambda xs: statistics.median(xs) if xs else None  # noqa: E731
    base = med([x["ns_per_run"] for x in res.get("count", []) if x["ns_per_run"]])
    print(f"| query | probe ns/event (median) | − count | ebql CPU ms per {args.seconds:g} s | program runs |")
    print("|---|---|---|---|---|")
    summary = {}
    for n in names:
        ns = med([x["ns_per_run"] for x in res[n] if x["ns_per_run"]])
        cpu = med([x["cpu_ms"] for x in res[n] if x["cpu_ms"] is not None])
        runs = med([x["runs"] for x in res[n]])
        delta = f"{ns - base:+.0f}" if ns is not None and base is not None else "-"
        print(f"| {n} | {ns:.0f} | {delta} | {cpu:.1f} | {runs:,.0f} |" if ns else f"| {n} | failed | - | - | - |")
        summary[n] = {"ns_per_event": ns, "cpu_ms": cpu, "runs": runs, "rounds": res[n],
                      "query": QUERIES[n][0], "flags": QUERIES[n][1]}
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rounds": args.rounds, "seconds": args.seconds, "variants": summary}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
