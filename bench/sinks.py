#!/usr/bin/env python3
"""Issue 9 benchmark: each sink on a raw stream of pread64 events (the ring-buffer path).

For each sink: start `ebql workload pread-loop` gated on a FIFO, attach
`ebql query --format F` to a raw stream of its pread64 calls, open the gate,
let the workload run, stop ebql with SIGINT. Reported per sink: the
workload's calls/s, rows written per second of workload run, drops, and
ebql's CPU (user+system, getrusage of the child) per million rows.

usage: bench/sinks.py EBQL [--seconds S] [--threads N] [--rate CALLS_PER_S_PER_THREAD] [--rounds R] [--sinks json,csv,parquet,arrow] [--query-args "--hook raw"]
"""
import argparse, json, os, re, signal, statistics, subprocess, sys, tempfile

QUERY = "SELECT fd, count, pid FROM tracepoint/syscalls/sys_enter_pread64 WHERE pid = {pid}"


def run(ebql, fmt, seconds, threads, rate, tmp, extra=()):
    fifo = os.path.join(tmp, "gate")
    if not os.path.exists(fifo):
        os.mkfifo(fifo)
    wl_args = [ebql, "workload", "pread-loop", "--threads", str(threads), "--seconds", str(seconds), "--gate", fifo]
    if rate:
        wl_args += ["--rate", str(rate)]
    wl = subprocess.Popen(wl_args, stdout=subprocess.PIPE, text=True)
    pid = int(wl.stdout.readline().split()[1])
    out = {"parquet": os.path.join(tmp, "pq"), "arrow": os.path.join(tmp, "out.arrow"),
           "json": "/dev/null", "csv": "/dev/null"}[fmt]
    q = subprocess.Popen([ebql, "query", *extra, "--format", fmt, "--output", out, QUERY.format(pid=pid)],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    line = q.stderr.readline()
    assert line.startswith("ebql: attached"), line
    with open(fifo, "w") as g:
        g.write("x")
    report = wl.stdout.read()
    wl.wait()
    q.send_signal(signal.SIGINT)
    _, status, ru = os.wait4(q.pid, 0)
    q.returncode = os.waitstatus_to_exitcode(status)
    err = q.stderr.read()
    assert q.returncode == 0, err
    stats = json.loads(re.search(r"ebql: stats (\{.*\})", err).group(1))
    m = re.search(r"total_ops (\d+) seconds ([\d.]+)", report)
    calls, secs = int(m.group(1)), float(m.group(2))
    rows = stats["rows_emitted"]
    cpu = ru.ru_utime + ru.ru_stime
    for f in os.listdir(tmp):
        p = os.path.join(tmp, f)
        if f != "gate":
            subprocess.run(["rm", "-rf", p])
    return {"calls_per_s": calls / secs, "rows_per_s": rows / secs, "rows": rows, "calls": calls,
            "dropped": stats["events_dropped"], "cpu_s_per_M_rows": cpu / max(rows, 1) * 1e6}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("ebql")
    ap.add_argument("--seconds", type=float, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rate", type=int, default=0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--sinks", default="json,csv,parquet,arrow")
    ap.add_argument("--query-args", default="", help="extra `ebql query` arguments, e.g. '--hook raw'")
    a = ap.parse_args()
    sinks = a.sinks.split(",")
    res = {s: [] for s in sinks}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(a.rounds):
            for s in sinks[r % len(sinks):] + sinks[:r % len(sinks)]:
                res[s].append(run(a.ebql, s, a.seconds, a.threads, a.rate, tmp, a.query_args.split()))
    print(f"| sink | workload calls/s | rows/s | rows/s per round | dropped | rows written = calls | ebql CPU s per M rows |")
    print("|---|---|---|---|---|---|---|")
    for s in sinks:
        med = lambda k: statistics.median(x[k] for x in res[s])
        exact = sum(x["rows"] == x["calls"] for x in res[s])
        each = " ".join(f"{x['rows_per_s'] / 1e6:.2f}M" for x in res[s])
        print(f"| {s} | {med('calls_per_s'):,.0f} | {med('rows_per_s'):,.0f} | {each} | {med('dropped'):,.0f} | {exact}/{len(res[s])} | {med('cpu_s_per_M_rows'):.3f} |")


if __name__ == "__main__":
    main()
