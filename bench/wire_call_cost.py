#!/usr/bin/env python3
"""Issue 21: what the wire capture adds to each socket call of a server,
measured without a server. A Python loop names itself `mariadbd` (the
capture keeps that comm) and sends 65 bytes on one end of a socket pair,
then reads them on the other: two captured calls an iteration. It is timed
with nothing attached and with `SELECT * FROM mysql.statements` captured by
each build given (`--ebql`, `--ebql-b`), scenarios in turn, round after
round (order rotated), over a Unix-domain socket pair and over TCP on
127.0.0.1. Reported: medians of ns per iteration, and the capture's
addition per call.

One thread doing nothing but the calls: far steadier than a server's TPS
(±2% here, against ±20%), so it separates changes of tens of ns in the
programs the servers' threads run. The bytes are no protocol: the decoder
counts them as undecodable, which costs the tracer, on the other CPU, not
the loop.

    python3 bench/wire_call_cost.py [--ebql PATH] [--ebql-b PATH] [--rounds 7] [--json OUT]
"""
import argparse
import json
import os
import signal
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from attach import start_attached  # noqa: E402  (beside this script)

LOOP = r"""
import ctypes, socket, sys, time
ctypes.CDLL(None).prctl(15, b"mariadbd", 0, 0, 0)  # PR_SET_NAME
if sys.argv[2] == "unix":
    a, b = socket.socketpair()
else:
    l = socket.socket(); l.bind(("127.0.0.1", 0)); l.listen(1)
    a = socket.create_connection(l.getsockname()); b, _ = l.accept()
n, msg = int(sys.argv[1]), b"\x05\x00\x00\x00\x17" + b"x" * 60
t = time.perf_counter()
for _ in range(n):
    a.send(msg); b.recv(4096)
print((time.perf_counter() - t) / n * 1e9)
"""
ITERATIONS = 500_000


def start(ebql):
    return start_attached([ebql, "query", "--format", "null", "SELECT * FROM mysql.statements"], ebql)[0]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ebql", default=os.path.expanduser("~/.cache/ebql/target/release/ebql"))
    ap.add_argument("--ebql-b", help="another build, an A/B")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--json")
    a = ap.parse_args()
    builds = {"none": None, "a": a.ebql, **({"b": a.ebql_b} if a.ebql_b else {})}
    names = list(builds)
    ns = {(s, n): [] for s in ("unix", "tcp") for n in names}
    for r in range(a.rounds):
        for sock in ("unix", "tcp"):
            for n in names[r % len(names):] + names[:r % len(names)]:
                p = start(builds[n]) if builds[n] else None
                out = subprocess.run([sys.executable, "-c", LOOP, str(ITERATIONS), sock],
                                     capture_output=True, text=True, check=True).stdout
                ns[(sock, n)].append(float(out))
                if p:
                    p.send_signal(signal.SIGINT)
                    p.wait()
            print(f"round {r + 1} {sock}: " + ", ".join(f"{n} {ns[(sock, n)][-1]:.0f}" for n in names), file=sys.stderr)
    print(f"{ITERATIONS:,} iterations of a send and a recv, {a.rounds} rounds; a: {a.ebql}"
          + (f"; b: {a.ebql_b}" if a.ebql_b else "") + "\n")
    print("| socket | build | ns per iteration, median (min–max) | added per captured call |")
    print("|---|---|---|---|")
    for sock in ("unix", "tcp"):
        base = statistics.median(ns[(sock, "none")])
        for n in names:
            v = ns[(sock, n)]
            added = "" if n == "none" else f"{(statistics.median(v) - base) / 2:.0f} ns"
            print(f"| {sock} | {n} | {statistics.median(v):,.0f} ({min(v):,.0f}–{max(v):,.0f}) | {added} |")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"argv": sys.argv, "kernel": os.uname().release,
                       "runs": {f"{s}/{n}": v for (s, n), v in ns.items()}}, f, indent=1)


if __name__ == "__main__":
    main()
