#!/usr/bin/env python3
"""Issue 19, item 6: what a uprobe's string read costs per event, with the
faulting prologue (the program loaded sleepable, `bpf_copy_from_user_str`
of the string before the body) and without (`--no-faulting-reads`: the
body's non-faulting `bpf_probe_read_user_str` alone).

Target: crates/ebql/tests/targets/probed.c (built here with cc -O0):
* cold: `ebql_cold(p)` N times, p in a page the process never touched
  (a fresh private mapping of a memfd page);
* resident: USDT `ebql:name(i, word)`, word a string literal (resident).

Metric: the program's own time per run (bpf_stats: run_time_ns / run_cnt,
`ebql query --bpf-stats`), not the uprobe trap. Variants are interleaved
round by round; medians over ROUNDS.

Usage: sudo bench/faulting_reads.py [--ebql PATH] [--n N] [--rounds R]
Prints a markdown table (BENCHMARKS.md, "faulting string reads").
"""
import argparse, json, os, statistics, subprocess, sys, tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from attach import start_attached  # noqa: E402  (beside this script)

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.join(HERE, "..", "crates", "ebql", "tests", "targets", "probed.c")


class Target:
    def __init__(self, binary, n):
        self.p = subprocess.Popen([binary, str(n)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.pid = int(self.p.stdout.readline().split()[1])

    def say(self, what):
        self.p.stdin.write(what + "\n")
        self.p.stdin.flush()
        line = self.p.stdout.readline()
        assert line.startswith("done "), line


def one(ebql, target, sql, work, faulting):
    args = [ebql, "query", "--bpf-stats", "-f", "json", "-d", "60", "-e", sql]
    if not faulting:
        args.insert(2, "--no-faulting-reads")
    q, stderr = start_attached(args, sql)
    target.say(work)
    q.send_signal(2)
    q.wait(timeout=60)
    err = stderr.text()
    stats = json.loads(err.split("ebql: stats ", 1)[1].splitlines()[0])
    return stats["bpf_run_time_ns"] / max(stats["bpf_run_cnt"], 1), stats["bpf_run_cnt"], stats["str_read_failed"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ebql", default=os.path.expanduser("~/.cache/ebql/target/debug/ebql"))
    ap.add_argument("--n", type=int, default=20000)
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        binary = os.path.join(tmp, "probed")
        subprocess.run(["cc", "-O0", "-o", binary, SRC], check=True)
        t = Target(binary, a.n)
        cases = {
            "cold": (f"SELECT str(arg0) AS s, COUNT(*) AS n FROM uprobe:{binary}:ebql_cold WHERE pid = {t.pid} GROUP BY str(arg0)", "cold"),
            "resident": (f"SELECT str(arg1) AS s, COUNT(*) AS n FROM usdt:{binary}:ebql:name WHERE pid = {t.pid} GROUP BY str(arg1)", "run"),
        }
        results = {}
        for _ in range(a.rounds):
            for name, (sql, work) in cases.items():
                for faulting in (True, False):
                    ns, runs, failed = one(a.ebql, t, sql, work, faulting)
                    results.setdefault((name, faulting), []).append((ns, runs, failed))
        print("| string | faulting prologue (sleepable) | non-faulting read only | runs per query | str_read_failed (faulting / not) |")
        print("|---|---|---|---|---|")
        for name in cases:
            on, off = results[(name, True)], results[(name, False)]
            med = lambda r: statistics.median(x[0] for x in r)
            print(f"| {name} | {med(on):.0f} ns | {med(off):.0f} ns | {on[0][1]} | {on[0][2]} / {off[0][2]} |")


if __name__ == "__main__":
    main()
