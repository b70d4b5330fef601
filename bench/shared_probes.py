#!/usr/bin/env python3
"""Many queries on one hook: shared programs vs one program per query (issue 22).

For N = 1, 2, 5, 10, 20 queries on `tracepoint:syscalls:sys_enter_pread64`,
`ebql serve` runs them while `ebql workload pread-loop` (1 thread, 64-byte
pread64 calls from the page cache, started behind a FIFO gate once every
query is attached) calls as fast as it can. Two variants: `shared` (serve's
default: one combined program per hook) and `separate` (`--separate-probes`:
each query's program attached alone, as N `ebql query` processes would).

The query mix (QUERIES below, taken in order, cycled beyond 10) has
different filters, keys and aggregates; two of them never match the
workload (another pid, a closed fd), as dashboards' queries mostly miss a
given event. Beyond 10 the queries repeat the first ten's kernel parts
(the same texts, named apart by serve), so in `shared` they read the
first ten's synopses (`ebql serve`'s shared synopses): N = 20 measures
ten kernel parts and ten readers, as overlapping dashboards are. Every
query filters `pid` first: in `shared`, other processes' pread64 calls
cost one test per run of queries of one pid; in `separate`, one helper
call and a compare per program.

Measured per run: the workload's CPU ns per pread64 (its rusage: the probe
runs in its system calls, so this is what the probes cost the traced
thread, independent of the CPU share it got), the service's CPU ns per
pread64 (its rusage over the run, window drains included), and whether the
first query (COUNT(*) of the workload's calls) counted exactly the calls the
workload made (from its Prometheus counter after the last window closed).
Configurations are interleaved round by round; medians are printed, with
the added ns per call against the run without a probe.

Both variants run with `--sample-ms 0`: no rates recorded by earlier runs,
so every query gets the plan that needs no rates (the tracefs
tracepoint). Otherwise the one query whose text is the same in every run
(`pid = 1`) would plan from its recorded rates and move to the raw syscall
hook, on which it runs alone: the hook rule does not weigh sharing yet.

With `--others`, every query's pid is another process's (an idle `sleep`):
each traced call is another process's event for every query, what a
dashboard scoped to one service sees of the rest of the machine. Shared,
the chunk tests the pid once for the run of queries; separate, every
program tests it. The first query's count is then exact at 0.

usage: bench/shared_probes.py EBQL_BINARY [--rounds 5] [--seconds 2] [--ns 1,2,5,10,20] [--others] [--json OUT]
"""
import argparse
import json
import os
import re
import resource
import signal
import statistics
import subprocess
import tempfile
import time
import urllib.request

EV = "tracepoint:syscalls:sys_enter_pread64"
QUERIES = [
    "SELECT COUNT(*) AS n FROM {ev} WHERE pid = {pid}",
    "SELECT fd, COUNT(*) AS n FROM {ev} WHERE pid = {pid} GROUP BY fd",
    "SELECT COUNT(*) AS n FROM {ev} WHERE pid = {pid} AND fd = 999",
    "SELECT SUM(count) AS n FROM {ev} WHERE pid = {pid}",
    "SELECT tid, COUNT(*) AS n FROM {ev} WHERE pid = {pid} GROUP BY tid",
    "SELECT MAX(pos) AS n FROM {ev} WHERE pid = {pid}",
    "SELECT COUNT(*) AS n FROM {ev} WHERE pid = {pid} AND count > 4096",
    "SELECT COUNT(*) AS n FROM {ev} WHERE pid = 1",
    "SELECT fd, SUM(count) AS n FROM {ev} WHERE pid = {pid} GROUP BY fd",
    "SELECT COUNT(*) AS n FROM {ev} WHERE pid = {pid} AND fd < 3",
]
PORT = 19464

ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
ap.add_argument("ebql")
ap.add_argument("--rounds", type=int, default=5)
ap.add_argument("--seconds", default="2")
ap.add_argument("--ns", default="1,2,5,10,20")
ap.add_argument("--others", action="store_true", help="queries scoped to another (idle) process")
ap.add_argument("--json")
args = ap.parse_args()
NS = [int(n) for n in args.ns.split(",")]
CONFIGS = [("no probe", 0, None)] + [(f"{v} N={n}", n, v) for n in NS for v in ("shared", "separate")]


def children_cpu_s():
    u = resource.getrusage(resource.RUSAGE_CHILDREN)
    return u.ru_utime + u.ru_stime


def metric_total(text, name):
    m = re.search(rf"^{name} (\d+)", text, re.M)
    return int(m.group(1)) if m else None


def one(n, variant):
    """(workload CPU ns per call, service CPU ns per call or None, first query exact or None, calls/s)."""
    gate = os.path.join(tempfile.mkdtemp(prefix="shared-probes-"), "gate")
    os.mkfifo(gate)
    workload = subprocess.Popen([args.ebql, "workload", "pread-loop", "--threads", "1", "--size", "64",
                                 "--seconds", args.seconds, "--gate", gate], stdout=subprocess.PIPE, text=True)
    pid = int(workload.stdout.readline().split()[1])  # "ready <pid>"
    if args.others:
        pid = IDLE.pid
    serve = None
    if n:
        queries = [f"{QUERIES[i % len(QUERIES)].format(ev=EV, pid=pid)} WINDOW(time, 1000, 1000)" for i in range(n)]
        flags = ["--sample-ms", "0"] + (["--separate-probes"] if variant == "separate" else [])
        serve = subprocess.Popen([args.ebql, "serve", *flags, "--prometheus", f"127.0.0.1:{PORT}", *queries],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        while True:  # every query attached before the gate opens
            line = serve.stderr.readline()
            assert line, f"serve exited before serving (N={n} {variant})"
            if "serving http" in line:
                break
    with open(gate, "w") as g:
        g.write("go")
    out = workload.stdout.read()
    _, status, usage = os.wait4(workload.pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, out
    os.unlink(gate)
    os.rmdir(os.path.dirname(gate))
    ops = int(out.split("total_ops")[1].split()[0])
    rate = float(out.split("ops_per_sec")[1].split()[0])
    work_ns = (usage.ru_utime + usage.ru_stime) * 1e9 / ops
    service_ns = exact = None
    if serve:
        time.sleep(1.6)  # the last 1 s window closes and is exported
        metrics = urllib.request.urlopen(f"http://127.0.0.1:{PORT}/metrics", timeout=10).read().decode()
        got = metric_total(metrics, "ebql_sys_enter_pread64_n_total")
        exact = got == (0 if args.others else ops)
        before = children_cpu_s()
        serve.send_signal(signal.SIGINT)
        serve.communicate(timeout=60)
        # The service's whole CPU time over its life, startup excluded only
        # approximately: compiling and loading N queries happens before the gate.
        service_ns = (children_cpu_s() - before) * 1e9 / ops
    return work_ns, service_ns, exact, rate


IDLE = subprocess.Popen(["sleep", "100000"]) if args.others else None
results = {c[0]: [] for c in CONFIGS}
for r in range(args.rounds):
    for name, n, variant in CONFIGS:
        results[name].append(one(n, variant))
        print(f"round {r + 1} {name}: {results[name][-1]}", flush=True)

med = statistics.median
base = med(v[0] for v in results["no probe"])
rows = ["| queries | variant | workload CPU ns per pread64 (min–max) | added ns per call | × one query's | service CPU ns per call | first query exact |",
        "|---|---|---|---|---|---|---|"]
summary = {}
one_query = {}
for name, n, variant in CONFIGS:
    vs = results[name]
    w = [v[0] for v in vs]
    added = med(w) - base
    if n == 1:
        one_query[variant] = added
    summary[name] = {"work_ns": med(w), "added_ns": added,
                     "service_ns": med(v[1] for v in vs) if n else None,
                     "exact": sum(1 for v in vs if v[2]) if n else None}
for name, n, variant in CONFIGS:
    s = summary[name]
    ratio = f"{s['added_ns'] / one_query[variant]:.1f}×" if n and one_query.get(variant) else "-"
    svc = f"{s['service_ns']:.0f}" if n else "-"
    ex = f"{s['exact']}/{len(results[name])}" if n else "-"
    w = [v[0] for v in results[name]]
    rows.append(f"| {n or '-'} | {variant or 'no probe'} | {med(w):.0f} ({min(w):.0f}–{max(w):.0f}) | "
                f"{s['added_ns']:.0f} | {ratio} | {svc} | {ex} |")
print("\n".join(rows))
if IDLE:
    IDLE.kill()
if args.json:
    with open(args.json, "w") as f:
        json.dump({"results": results, "summary": summary, "rounds": args.rounds, "seconds": args.seconds}, f, indent=1)
