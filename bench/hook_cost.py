#!/usr/bin/env python3
"""Hook cost of tracefs tracepoints vs BTF (tp_btf) tracepoints (issue 8).

For each configuration, an `ebql query` with an empty-ish program
(`SELECT COUNT(*) FROM <event> WHERE pid = 1`: the hook, one helper call and
one compare; pid 1 never preads) runs while `ebql workload pread-loop`
(1 thread, pread64 of 128 bytes from the page cache) counts its calls per
second. Configurations are interleaved round by round; medians are printed,
with the added ns per pread64 call against the run without a probe.

usage: bench/hook_cost.py EBQL_BINARY [ROUNDS] [SECONDS]
"""
import statistics
import subprocess
import sys
import time

EBQL = sys.argv[1]
ROUNDS = int(sys.argv[2]) if len(sys.argv) > 2 else 5
SECONDS = sys.argv[3] if len(sys.argv) > 3 else "2"
CONFIGS = [
    ("no probe", None),
    ("tracepoint:syscalls:sys_enter_pread64", "tracepoint:syscalls:sys_enter_pread64"),
    ("tp_btf:raw_syscalls:sys_enter", "tp_btf:raw_syscalls:sys_enter"),
    ("tracepoint:raw_syscalls:sys_enter", "tracepoint:raw_syscalls:sys_enter"),
    ("raw_tp:raw_syscalls:sys_enter", "raw_tp:raw_syscalls:sys_enter"),
]


def one(event):
    q = None
    if event:
        q = subprocess.Popen([EBQL, "query", f"SELECT COUNT(*) FROM {event} WHERE pid = 1"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(1.0)  # compiled, loaded and attached
        assert q.poll() is None, f"query on {event} exited"
    out = subprocess.run([EBQL, "workload", "pread-loop", "--threads", "1", "--seconds", SECONDS], capture_output=True, text=True, check=True).stdout
    if q:
        q.terminate()
        q.wait()
    return float(out.split("ops_per_sec")[1].split()[0])


results = {name: [] for name, _ in CONFIGS}
for r in range(ROUNDS):
    for name, event in CONFIGS:
        results[name].append(one(event))
base = statistics.median(results["no probe"])
print(f"{'configuration':40} {'median pread64/s':>16} {'min':>10} {'max':>10} {'added ns/call':>13}")
for name, _ in CONFIGS:
    v = results[name]
    m = statistics.median(v)
    print(f"{name:40} {m:16.0f} {min(v):10.0f} {max(v):10.0f} {1e9 / m - 1e9 / base:13.1f}")
