#!/usr/bin/env python3
"""Issue 21: what a running wire capture costs the machine's other
processes. `dd bs=1` of /dev/zero into /dev/null (two system calls a byte,
none of them socket calls) is timed with nothing attached, with
`SELECT * FROM postgres.statements` captured on the socket tracepoints
(the default) and on the raw system call hooks (`--hook raw`), each
scenario in turn, round after round (order rotated), medians of ns per
system call.

The raw hooks fire for every system call of the machine, so every process
takes the kernel's traced system call path and runs the capture's
programs up to their first test; the socket tracepoints fire only when a
socket moves bytes. No server needs to run: the capture attaches and sees
nothing but dd.

    python3 bench/wire_untraced.py [--ebql PATH] [--rounds 7] [--json OUT]
"""
import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from attach import start_attached  # noqa: E402  (beside this script)

SCENARIOS = {"none": None, "sockets": [], "syscalls": ["--hook", "raw"]}
CALLS = 2_000_000  # dd's bytes: a read and a write each


def start(ebql, extra):
    return start_attached([ebql, "query", "--format", "null", *extra, "SELECT * FROM postgres.statements"])[0]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ebql", default=os.path.expanduser("~/.cache/ebql/target/release/ebql"))
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--json")
    a = ap.parse_args()
    names = list(SCENARIOS)
    ns = {s: [] for s in names}
    for r in range(a.rounds):
        for s in names[r % len(names):] + names[:r % len(names)]:
            p = None if SCENARIOS[s] is None else start(a.ebql, SCENARIOS[s])
            time.sleep(0.5)
            t0 = time.perf_counter()
            subprocess.run(["dd", "if=/dev/zero", "of=/dev/null", "bs=1", f"count={CALLS}"], capture_output=True, check=True)
            ns[s].append((time.perf_counter() - t0) / (2 * CALLS) * 1e9)
            if p:
                p.send_signal(signal.SIGINT)
                p.wait()
    base = statistics.median(ns["none"])
    print("| capture running | ns per system call of dd, median (min–max) | added |")
    print("|---|---|---|")
    for s in names:
        m = statistics.median(ns[s])
        print(f"| {s} | {m:.0f} ({min(ns[s]):.0f}–{max(ns[s]):.0f}) | {'' if s == 'none' else f'{m - base:+.0f} ns'} |")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"ebql": a.ebql, "rounds": a.rounds, "calls": 2 * CALLS, "ns_per_call": ns}, f, indent=1)


if __name__ == "__main__":
    main()
