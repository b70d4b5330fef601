#!/usr/bin/env python3
"""Issue 8: uprobe and USDT hit cost, eBQL vs bpftrace on the same binary,
and the cost on a process the query does not select.

Target: bench/probes/uprobe_loop.c (built here with cc -O2): a loop calling
a non-inlined function (uprobe) or passing a semaphore-guarded USDT probe.
Each scenario starts the target, attaches the tracer, runs the loop once
(ITERS iterations) and reads the target's own ns per iteration; median of
REPS runs. Scenarios:

* none: no tracer (the baseline; for USDT the semaphore is 0, the probe is a nop).
* ebql pid: `SELECT COUNT(*) ... WHERE pid = <target>` (attached to the target only).
* bpftrace -p: `bpftrace -p <target> -e '<probe> { @n = count(); }'` (also per process).
* ebql other pid: the query selects another process running the same binary
  (pid = <idle copy>): the target must run at baseline speed (no trap).
* ebql tid filter: `WHERE tid = <idle copy>` is not used for scoping: every
  hit in the target traps and the program's filter rejects it.

Usage: sudo bench/uprobe.py [--ebql PATH] [--iters N] [--reps R]
Prints a markdown table (the BENCHMARKS.md "Issue 8" uprobe subsection).
"""
import argparse, os, statistics, subprocess, sys, tempfile, time

HERE = os.path.dirname(os.path.abspath(__file__))


def build(tmp):
    out = os.path.join(tmp, "uprobe_loop")
    subprocess.run(["cc", "-O2", "-o", out, os.path.join(HERE, "probes", "uprobe_loop.c")], check=True)
    return out


class Target:
    def __init__(self, binary, mode, iters):
        self.p = subprocess.Popen([binary, mode, str(iters)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.pid = int(self.p.stdout.readline().split()[1])

    def run(self):
        self.p.stdin.write("go\n")
        self.p.stdin.flush()
        return float(self.p.stdout.readline().split()[1])

    def close(self):
        self.p.stdin.close()
        self.p.wait()


def start_tracer(kind, ebql, binary, mode, target, other):
    probe_ebql = f"uprobe:{binary}:bench_fn" if mode == "func" else f"usdt:{binary}:bench:hit"
    if kind == "none":
        return None
    if kind == "bpftrace -p":
        probe = f"uprobe:{binary}:bench_fn" if mode == "func" else f"usdt:{binary}:bench:hit"
        p = subprocess.Popen(["bpftrace", "-p", str(target), "-e", f"{probe} {{ @n = count(); }}"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        seen = []
        while True:  # warnings (RLIMIT_MEMLOCK in containers) may come first
            line = p.stdout.readline()
            seen.append(line)
            if "Attaching" in line:
                time.sleep(1.0)  # bpftrace prints this line before it attaches
                return p
            if not line:
                raise SystemExit("bpftrace: " + "".join(seen))
    where = {"ebql pid": f"pid = {target}", "ebql other pid": f"pid = {other}", "ebql tid filter": f"tid = {other}"}[kind]
    sql = f"SELECT COUNT(*) FROM {probe_ebql} WHERE {where}"
    p = subprocess.Popen([ebql, "query", "--duration", "120", "--format", "json", sql], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    time.sleep(2.5)  # compile, load, attach (debug build)
    if p.poll() is not None:
        raise SystemExit(f"ebql: {p.stderr.read()}")
    return p


def stop(p):
    if p is not None:
        p.send_signal(2)
        try:
            p.wait(10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ebql", default=os.path.expanduser("~/.cache/ebql/wt-uprobe/debug/ebql"))
    ap.add_argument("--iters", type=int, default=100_000)
    ap.add_argument("--reps", type=int, default=3)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        binary = build(tmp)
        rows = []
        for mode in ["func", "usdt"]:
            for kind in ["none", "ebql pid", "bpftrace -p", "ebql other pid", "ebql tid filter"]:
                samples = []
                for _ in range(a.reps):
                    t = Target(binary, mode, a.iters)
                    idle = Target(binary, mode, a.iters)  # same binary, never runs its loop
                    tr = start_tracer(kind, a.ebql, binary, mode, t.pid, idle.pid)
                    try:
                        samples.append(t.run())
                    finally:
                        stop(tr)
                        t.close()
                        idle.close()
                rows.append((mode, kind, statistics.median(samples), samples))
                print(f"{mode:5} {kind:16} {statistics.median(samples):9.1f} ns/iter  {samples}", file=sys.stderr)
        base = {m: ns for m, k, ns, _ in rows if k == "none"}
        print("| probe | tracer | ns per iteration (median) | added per hit |")
        print("|---|---|---:|---:|")
        for mode, kind, ns, _ in rows:
            probe = "uprobe bench_fn" if mode == "func" else "USDT bench:hit (semaphore)"
            print(f"| {probe} | {kind} | {ns:.1f} | {ns - base[mode]:+.1f} |")


if __name__ == "__main__":
    main()
