#!/usr/bin/env python3
"""Issue 11 benchmark: the cost model's error, and the Figure 12 query as planned
vs the hand-written C probe with bpf_stats off (stdlib only; reuses runner.py).

Parts (--only model,fig12,rocksdb,untraced):

* model: each query of the suite under `ebql check --cost` (the built-in
  2-thread pread64 workload; bpf_stats on only inside that measurement):
  predicted vs measured ns per program run, rounds interleaved across
  queries, medians; error = (predicted - measured) / measured.
* fig12 / rocksdb: the Figure 12 query as ebql plans it vs `hand` (the
  hand-written C probe on the tracefs tracepoint, bench/probes/hand.bpf.c),
  no probe, and any `--ebql-variant NAME=FLAGS`, all with bpf_stats off
  (ebql with --no-bpf-stats where the build still needs it), on the pread64
  micro-workload and on RocksDB readrandom. Overhead from the workload's
  throughput (and its CPU per call, which a busy machine disturbs less);
  exact = per-fd totals equal the workload's own counts.
* untraced: the cost put on a process the query does not select: its
  pread64 calls (the query's pid filter names an idle process) and its
  getppid calls (a C loop: another system call, which a syscall tracepoint
  puts on the slow path), CPU ns per call, medians.

usage: sudo bench/cost.py [--rounds N] [--seconds S] [--only PARTS] [--ebql-variant NAME=FLAGS]... [--json FILE]
Environment: EBQL (the ebql binary; it must have `check --cost`), as runner.py.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import runner  # noqa: E402

EV = "tracepoint/syscalls/sys_enter_pread64"
# The suite's queries ($pid = the workload), from BENCHMARKS.md's experiments.
SUITE = {
    "fig12": runner.FIG12.format(where="pid == $pid"),
    "fig12-f4": runner.FIG12.format(where=runner.FILTER4.format(pid="$pid")),
    "count": runner.SKETCH_QUERIES["ebql-count"].format(pid="$pid"),
    "hist": runner.SKETCH_QUERIES["ebql-hist"].format(pid="$pid"),
    "quantile": runner.SKETCH_QUERIES["ebql-quantile"].format(pid="$pid"),
    "hll": runner.SKETCH_QUERIES["ebql-hll"].format(pid="$pid"),
    "stream": f"SELECT fd, count, pos FROM {EV} WHERE pid = $pid",
    "stream-str": f"SELECT time, comm, fd, str(buf, 64) FROM {EV} WHERE pid = $pid",
    "pair": runner.PAIR_QUERIES["ebql-pair"].format(pid="$pid"),
    "pair-sum": runner.PAIR_QUERIES["ebql-pair-sum"].format(pid="$pid"),
    "untraced": runner.FIG12.format(where="pid == {idle}"),
}
GETPPID_C = r"""
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
#include <sys/syscall.h>
/* getppid_loop SECONDS: getppid() as fast as possible; prints calls, wall s and CPU ns per call. */
static double now(clockid_t c) { struct timespec t; clock_gettime(c, &t); return t.tv_sec + t.tv_nsec / 1e9; }
int main(int argc, char **argv) {
    double secs = argc > 1 ? atof(argv[1]) : 1.0, w0 = now(CLOCK_MONOTONIC), c0 = now(CLOCK_PROCESS_CPUTIME_ID);
    long n = 0;
    while (now(CLOCK_MONOTONIC) - w0 < secs) {
        for (int i = 0; i < 4096; i++) syscall(SYS_getppid);
        n += 4096;
    }
    double w = now(CLOCK_MONOTONIC) - w0, c = now(CLOCK_PROCESS_CPUTIME_ID) - c0;
    printf("calls %ld seconds %.6f cpu_ns_per_call %.3f\n", n, w, 1e9 * c / n);
    return 0;
}
"""


def log(m):
    print(m, file=sys.stderr, flush=True)


def bpf_stats_on():
    return Path("/proc/sys/kernel/bpf_stats_enabled").read_text().strip() == "1"


def ebql_flags():
    """Flags that keep bpf_stats off in this ebql build (older builds turn it on by default)."""
    help_text = subprocess.run([str(runner.EBQL), "query", "--help"], capture_output=True, text=True).stdout
    return ["--no-bpf-stats"] if "--no-bpf-stats" in help_text else []


def med(v):
    v = [x for x in v if x is not None]
    return statistics.median(v) if v else None


def rng(v, f="{:,.1f}"):
    v = [x for x in v if x is not None]
    return f"{f.format(med(v))} ({f.format(min(v))}–{f.format(max(v))})" if v else "-"


# --------------------------------------------------------------------------
# model error
# --------------------------------------------------------------------------

def model_error(rounds, seconds, idle_pid):
    res = {name: [] for name in SUITE}
    names = list(SUITE)
    for rd in range(rounds):
        for name in names[rd % len(names):] + names[:rd % len(names)]:
            sql = SUITE[name].replace("{idle}", str(idle_pid))
            out = subprocess.run([str(runner.EBQL), "check", "--cost", "--duration", str(seconds), sql], capture_output=True, text=True)
            line = next((ln[len("ebql: cost "):] for ln in out.stderr.splitlines() if ln.startswith("ebql: cost ")), None)
            if out.returncode != 0 or line is None:
                log(f"[model round {rd + 1}] {name}: FAILED (exit {out.returncode}): {out.stderr.strip()[-300:]}")
                continue
            j = json.loads(line)
            res[name].append(j)
            log(f"[model round {rd + 1}/{rounds}] {name:<11} error {100 * j['error']:+6.1f}%  "
                + "  ".join(f"{p['name']} pred {p['predicted_ns_per_run']:.0f} meas {p['measured_ns_per_run']:.0f}" for p in j["programs"]))
    return res


def model_table(res):
    rows = ["| query | programs | matched/run | predicted ns/run | measured ns/run | error % | exact (matched = workload calls) |",
            "|---|---|---|---|---|---|---|"]
    errors = []
    for name, runs in res.items():
        if not runs:
            rows.append(f"| {name} | failed | | | | | |")
            continue
        progs = runs[0]["programs"]
        pred = [" + ".join(f"{p['predicted_ns_per_run']:.0f}" for p in r["programs"]) for r in runs]
        meas = [" + ".join(f"{p['measured_ns_per_run']:.0f}" for p in r["programs"]) for r in runs]
        mid = sorted(range(len(runs)), key=lambda i: runs[i]["error"])[len(runs) // 2]
        err = [100 * r["error"] for r in runs]
        errors.append((name, med(err)))
        exact = sum(1 for r in runs if r["events_matched"] == r["workload_calls"]) if name not in ("untraced", "pair", "pair-sum") else None
        exact_cell = f"{exact}/{len(runs)}" if exact is not None else ("0 matched" if name == "untraced" and all(r["events_matched"] == 0 for r in runs) else "n/a")
        frac = med([r["programs"][-1]["matched_fraction"] for r in runs])
        rows.append(f"| {name} | {' + '.join(p['name'] for p in progs)} | {frac:.3f} | {pred[mid]} | {meas[mid]} | {rng(err)} | {exact_cell} |")
    return "\n".join(rows), errors


# --------------------------------------------------------------------------
# Figure 12 vs hand, bpf_stats off
# --------------------------------------------------------------------------

_PROCS = []


class _TrackedProc(runner.Proc):
    """runner.Proc that remembers itself, so the workload's CPU time can be read after run_once."""

    def __init__(self, *a, **k):
        super().__init__(*a, **k)
        _PROCS.append(self)


runner.Proc = _TrackedProc


def install_ebql_variants(variants):
    """Teaches runner.manager_argv the ebql variants NAME -> extra flags (bpf_stats off)."""
    orig = runner.manager_argv

    def argv(variant, pid, duration, where=None):
        if variant in variants:
            w = where or f"pid == {pid}"
            return ([runner.EBQL, "query", "--format", "json", "--duration", str(int(duration) + 1)] + variants[variant]
                    + [runner.FIG12.format(where=w)], r"ebql: attached", "ebql")
        return orig(variant, pid, duration, where)

    runner.manager_argv = argv


def overhead_runs(workload, variants, rounds, tmp, **kw):
    out = []
    for rd in range(rounds):
        for v in variants[rd % len(variants):] + variants[:rd % len(variants)]:
            stats_before = bpf_stats_on()
            _PROCS.clear()
            r = runner.run_once(workload, v, tmp, **kw)
            wl = next((p for p in _PROCS if p.name == "workload"), None)
            if not r.get("error") and wl is not None and wl.cpu_seconds() and r.get("ref_total"):
                # The workload's own CPU (user + system, the probes' run time included) per pread64 call.
                r["cpu_ns_per_call"] = 1e9 * wl.cpu_seconds() / r["ref_total"]
            r["bpf_stats_seen_on"] = stats_before or bpf_stats_on()
            r["round"] = rd
            out.append(r)
            log(f"[{workload.name} round {rd + 1}/{rounds}] {runner.short(r)}")
    return out


def overhead_table(results, variants, throughput_label):
    base = med([r["throughput"] for r in results if r["variant"] == "none" and not r.get("error")])
    base_rate = med([r["events_per_sec"] for r in results if r["variant"] == "none" and not r.get("error")])
    base_cpu = med([r.get("cpu_ns_per_call") for r in results if r["variant"] == "none" and not r.get("error")])
    rows = [f"| variant | {throughput_label} | overhead % | added ns per pread64 (wall) | workload CPU ns per pread64 | added CPU ns per pread64 | exact | runs with bpf_stats on (another process) |",
            "|---|---|---|---|---|---|---|---|"]
    summary = {}
    for v in variants:
        good = [r for r in results if r["variant"] == v and not r.get("error")]
        if not good:
            rows.append(f"| {v} | failed: {next((r['error'] for r in results if r['variant'] == v), '')[:120]} | | | | |")
            continue
        ov = [100 * (1 - r["throughput"] / base) for r in good] if base else []
        added = [1e9 * r.get("threads", 1) * (1 / r["events_per_sec"] - 1 / base_rate) for r in good if r.get("events_per_sec")] if base_rate else []
        exact = [r.get("exact") for r in good]
        ex = "ref" if v == "none" else (f"{sum(1 for e in exact if e)}/{len(exact)}" if any(e is not None for e in exact) else "n/a")
        on = sum(1 for r in good if r.get("bpf_stats_seen_on"))
        tput = rng([r["throughput"] for r in good], "{:,.0f}")
        ov_cell = rng(ov) if v != "none" else "0"
        added_cell = rng(added, "{:,.0f}") if v != "none" else "-"
        cpu = [r.get("cpu_ns_per_call") for r in good]
        cpu_added = [c - base_cpu for c in cpu if c is not None] if base_cpu else []
        cpu_cell = rng(cpu, "{:,.0f}")
        cpu_added_cell = rng(cpu_added, "{:+,.0f}") if v != "none" else "-"
        rows.append(f"| {v} | {tput} | {ov_cell} | {added_cell} | {cpu_cell} | {cpu_added_cell} | {ex} | {on}/{len(good)} |")
        summary[v] = {"overhead_pct": med(ov), "added_ns": med(added), "added_cpu_ns": med(cpu_added)}
    return "\n".join(rows), summary


# --------------------------------------------------------------------------
# untraced process
# --------------------------------------------------------------------------

def build_getppid(tmp):
    exe = runner.CACHE / "getppid_loop"
    src = Path(tmp) / "getppid_loop.c"
    src.write_text(GETPPID_C)
    subprocess.run(["cc", "-O2", "-o", str(exe), str(src)], check=True)
    return exe


def untraced(variants, rounds, seconds, idle_pid, tmp):
    """CPU ns per call of an untraced pread64 loop (1 thread) and getppid loop, per variant attached with pid = idle."""
    exe = build_getppid(tmp)
    res = {v: {"pread": [], "getppid": []} for v in variants}
    for rd in range(rounds):
        for v in variants[rd % len(variants):] + variants[:rd % len(variants)]:
            mgr = None
            try:
                if v != "none":
                    argv, attached_re, _ = runner.manager_argv(v, idle_pid, 4 * seconds + 10)
                    mgr = runner.Proc(argv, v, attached_re)
                    if not mgr.attached.wait(60):
                        raise RuntimeError(f"{v}: not attached: {mgr.stderr_tail()}")
                wl = runner.Proc([runner.WORKLOAD, "pread-loop", "--threads", 1, "--seconds", seconds, "--size", 128], "pread")
                wl.wait(seconds * 6 + 30)
                m = next(re.match(r"^total_ops (\d+) seconds ([\d.]+)", ln) for ln in wl.lines["out"] if ln.startswith("total_ops"))
                res[v]["pread"].append(1e9 * wl.cpu_seconds() / int(m.group(1)))
                g = subprocess.run([str(exe), str(seconds)], capture_output=True, text=True, check=True).stdout
                res[v]["getppid"].append(float(re.search(r"cpu_ns_per_call ([\d.]+)", g).group(1)))
                log(f"[untraced round {rd + 1}/{rounds}] {v:<14} pread {res[v]['pread'][-1]:.0f} ns/call, getppid {res[v]['getppid'][-1]:.0f} ns/call")
            except Exception as e:  # noqa: BLE001
                log(f"[untraced round {rd + 1}] {v}: {e}")
            finally:
                if mgr is not None:
                    mgr.stop(signal.SIGINT)
    base = {k: med(res["none"][k]) for k in ("pread", "getppid")}
    rows = ["| variant | untraced pread64: CPU ns per call | added | untraced getppid: CPU ns per call | added |", "|---|---|---|---|---|"]
    for v in variants:
        r = res[v]
        cells = []
        for k in ("pread", "getppid"):
            cells.append(rng(r[k]))
            cells.append("-" if v == "none" or not r[k] else f"{med(r[k]) - base[k]:+.0f}")
        rows.append(f"| {v} | " + " | ".join(cells) + " |")
    return "\n".join(rows), res


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--only", default="model,fig12,rocksdb,untraced")
    ap.add_argument("--ebql-variant", action="append", default=[], metavar="NAME=FLAGS",
                    help="another ebql plan of Figure 12, e.g. ebql-traced='--optimize traced'")
    ap.add_argument("--json", help="write the raw results here")
    a = ap.parse_args()
    parts = set(a.only.split(","))
    if os.geteuid() != 0:
        sys.exit("bench/cost.py: run as root")
    off = ebql_flags()
    variants = {"ebql": off}
    for spec in a.ebql_variant:
        name, _, flags = spec.partition("=")
        variants[name] = off + shlex.split(flags)
    install_ebql_variants(variants)
    fig_variants = ["none", "hand"] + list(variants)
    idle = subprocess.Popen(["sleep", "100000"])
    out, raw = [], {}
    t0 = time.monotonic()
    stats_at_start = bpf_stats_on()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            if "model" in parts:
                res = model_error(a.rounds, min(a.seconds, 2.0), idle.pid)
                table, errors = model_table(res)
                raw["model"] = res
                within = sum(1 for _, e in errors if e is not None and abs(e) <= 25)
                out.append(f"### Model error: predicted vs measured ns per program run\n\n"
                           f"`ebql check --cost --duration {min(a.seconds, 2.0)} QUERY` per query ({a.rounds} rounds, queries interleaved; "
                           f"built-in workload: 2 threads of 128-byte pread64, `$pid` = its pid; *untraced*: the pid filter names an idle process). "
                           f"ns/run as bpf_stats counts it (on for each measurement only). Error = (predicted − measured) ÷ measured, "
                           f"median (min–max) over rounds; the cells show the median round's numbers.\n\n{table}\n\n"
                           f"Within ±25%: {within} of {len(errors)} queries.\n")
            if "fig12" in parts:
                wl = runner.PreadMicro(a.seconds, threads=2, size=128)
                res = overhead_runs(wl, fig_variants, a.rounds, tmp, ebql_stop="sigint")
                table, summ = overhead_table(res, fig_variants, "ops/s")
                raw["fig12"] = res
                out.append(f"### Figure 12, pread64 micro-workload, bpf_stats off\n\n`{wl.describe()}` ({a.rounds} rounds). "
                           f"ebql flags: {' '.join(off) or '(none: stats off by default)'}.\n\n{table}\n\n" + ratio_line(summ))
            if "rocksdb" in parts:
                wl = runner.RocksDB(num=1000000, reads=250000)
                wl.prepare()
                res = overhead_runs(wl, fig_variants, a.rounds, tmp)
                table, summ = overhead_table(res, fig_variants, "Gets/s")
                raw["rocksdb"] = res
                out.append(f"### Figure 12, RocksDB readrandom, bpf_stats off\n\n`{wl.describe()}` ({a.rounds} rounds).\n\n{table}\n\n" + ratio_line(summ))
            if "untraced" in parts:
                table, res = untraced(fig_variants, a.rounds, min(a.seconds, 2.0), idle.pid, tmp)
                raw["untraced"] = res
                out.append(f"### Cost on an untraced process\n\nThe probe's pid filter names an idle process; another process runs "
                           f"`ebql-workload pread-loop --threads 1` and a C `getppid()` loop, {min(a.seconds, 2.0)} s each; CPU ns per call "
                           f"(its own user + system CPU ÷ calls), medians (min–max) of {a.rounds} rounds.\n\n{table}\n")
    finally:
        idle.kill()
    head = (f"ebql: {runner.EBQL}" + (f" ({runner.EBQL_NOTE})" if runner.EBQL_NOTE else "")
            + f"; kernel.bpf_stats_enabled at start: {int(stats_at_start)}; load average at end: {os.getloadavg()[0]:.1f}; "
            f"{time.monotonic() - t0:.0f} s")
    print(head + "\n\n" + "\n".join(out))
    if a.json:
        Path(a.json).write_text(json.dumps(raw, indent=1, default=str))


def ratio_line(summ):
    hand, lines = summ.get("hand"), []
    for v, s in summ.items():
        if v in ("none", "hand") or not hand:
            continue
        for key, what in (("overhead_pct", "throughput overhead"), ("added_cpu_ns", "added CPU per call")):
            if hand.get(key) and s.get(key) is not None:
                ratio = s[key] / hand[key]
                lines.append(f"{v} ÷ hand, {what}: {ratio:.2f} (target ≤ 0.70: {'met' if ratio <= 0.70 else 'NOT met'})")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
