#!/usr/bin/env python3
"""Paired comparison of two scenarios of a database benchmark run
(`bench/dbtrace.py` or `bench/mydbtrace.py --json`): for each mode (mix,
protocol) and round, the TPS ratio of scenario A to scenario B measured in
that round, side by side; then the median ratio over the rounds, its range,
and in how many rounds A did better.

Why: this VM's speed drifts by ±20% over minutes, so one scenario's TPS
medians across rounds spread more than the differences measured. Within a
round the scenarios run back to back (their order rotated each round), and
the drift mostly cancels in their ratio (the brief: "interleaved rounds,
medians and ratios").

    python3 bench/paired.py RESULTS.json wire_persist general_log
"""
import json
import statistics
import sys
from collections import defaultdict


def main():
    path, a, b = sys.argv[1:4]
    runs = json.load(open(path))["runs"]
    tps = defaultdict(dict)
    for r in runs:
        tps[(r["mix"], r["protocol"], r["round"])][r["scenario"]] = r["tps"]
    modes = sorted({(m, p) for m, p, _ in tps}, key=lambda k: [r["mix"] for r in runs].index(k[0]))
    print(f"{a} / {b}, TPS ratio per round (> 1: {a} lost less)\n")
    print("| mix, protocol | rounds | median ratio (min–max) | rounds where it lost less |")
    print("|---|---|---|---|")
    for mix, proto in modes:
        ratios = [v[a] / v[b] for (m, p, _), v in sorted(tps.items()) if (m, p) == (mix, proto) and a in v and b in v]
        if not ratios:
            continue
        better = sum(r > 1 for r in ratios)
        print(f"| {mix}, {proto} | {len(ratios)} | {statistics.median(ratios):.3f} ({min(ratios):.3f}–{max(ratios):.3f}) | {better} of {len(ratios)} |")


if __name__ == "__main__":
    main()
