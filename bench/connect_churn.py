#!/usr/bin/env python3
"""Issue 21: the wire capture under connection churn. PostgreSQL 15 on TCP
(127.0.0.1) runs pgbench's select-only script with a new connection for
every transaction (`pgbench -C -S`, 4 clients), each scenario in turn,
round after round (order rotated):

* baseline: nothing traced;
* log_statement: `log_statement = 'all'`;
* wire_persist: `ebql query --format parquet "SELECT * FROM postgres.statements"`;
* wire_b (with --ebql-b): the same with another build, an A/B.

Every connection is a new backend process, a new client port, and so a
client the tracer has not seen: what it costs to learn each one's address
(client_addr, client_port) shows here and nowhere else. Reported: TPS
(connections included), the machine's CPU per transaction, the tracer's CPU
per connection, how much the tracer's resident memory grew over the run
(a connection's state must not outlive its backend), and the captured
statements against pgbench's transactions (`SELECT abalance …` rows, each
with its client address).

    python3 bench/connect_churn.py [--ebql PATH] [--ebql-b PATH] [--rounds 5] [--seconds 15] [--json OUT]
"""
import argparse
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dbtrace  # noqa: E402  (beside this script)
import machine_cpu  # noqa: E402

QUERY = "SELECT * FROM postgres.statements"


def rss_kb(pid):
    """The process's resident set (VmRSS), KiB."""
    with open(f"/proc/{pid}/status") as f:
        return next(int(l.split()[1]) for l in f if l.startswith("VmRSS:"))


def run(a, server, scenario, tmp):
    dbtrace.configure(server, scenario)
    tracer, out = None, None
    if scenario.startswith("wire"):
        binary = a.ebql_b if scenario == "wire_b" else a.ebql
        tracer, err, out = dbtrace.start_ebql(binary, "wire_persist", tmp, QUERY)
    cpu0 = dbtrace.ticks(tracer.pid) if tracer else 0
    rss0 = rss_kb(tracer.pid) if tracer else 0
    m0, t0 = machine_cpu.snapshot(), time.monotonic()
    r = subprocess.run(["pgbench", "-n", "-C", "-S", "-c", str(a.clients), "-j", "2", "-T", str(a.seconds),
                        "-h", "127.0.0.1", "-p", str(server.port), "-U", "bench", "bench"],
                       capture_output=True, text=True)
    m1, elapsed = machine_cpu.snapshot(), time.monotonic() - t0
    if r.returncode != 0:
        raise SystemExit(f"pgbench failed: {r.stderr}")
    txns = int(re.search(r"number of transactions actually processed: (\d+)", r.stdout).group(1))
    res = {"tps": float(re.search(r"tps = ([\d.]+)", r.stdout).group(1)), "transactions": txns,
           **machine_cpu.between(m0, m1, txns)}
    if tracer:
        tracer_s = (dbtrace.ticks(tracer.pid) - cpu0) / os.sysconf("SC_CLK_TCK")
        # What the tracer kept of the run's connections (its Parquet buffers too, bounded).
        res["tracer_rss_growth_kb"] = rss_kb(tracer.pid) - rss0
        tracer.send_signal(signal.SIGINT)
        tracer.wait()
        stats = dbtrace.ebql_stats(err.text())
        import pyarrow.compute as pc
        import pyarrow.dataset as ds
        t = ds.dataset(out, format="parquet").to_table(columns=["query", "client_addr"])
        mine = pc.starts_with(t["query"], "SELECT abalance")
        res.update(cpu_pct=100.0 * tracer_s / elapsed, tracer_us_per_connection=1e6 * tracer_s / txns,
                   captured=pc.sum(mine).as_py() or 0,
                   with_client=pc.sum(pc.and_(mine, pc.is_valid(t["client_addr"]))).as_py() or 0,
                   drops=stats.get("events_dropped", 0), wire=stats.get("wire", {}))
        shutil.rmtree(out, ignore_errors=True)
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ebql", default=os.path.expanduser("~/.cache/ebql/target/release/ebql"))
    ap.add_argument("--ebql-b", help="the binary of the wire_b scenario: an A/B of two builds")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seconds", type=int, default=15)
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--json")
    a = ap.parse_args()
    scenarios = ["baseline", "log_statement", "wire_persist"] + (["wire_b"] if a.ebql_b else [])
    tmp = tempfile.mkdtemp(prefix="ebql-churn-")
    server = dbtrace.Server(tmp, 30000 + os.getpid() % 20000, listen="127.0.0.1")
    runs = []
    try:
        server.sql("CREATE ROLE bench LOGIN SUPERUSER")
        server.sql("CREATE DATABASE bench OWNER bench")
        subprocess.run(["pgbench", "-i", "-q", "-s", "10", *server.conn("bench", "bench")], check=True, capture_output=True)
        server.sql("CREATE EXTENSION pg_stat_statements")
        for rnd in range(a.rounds):
            for s in dbtrace.rotated(scenarios, rnd):
                res = run(a, server, s, tmp)
                print(f"round {rnd + 1} {s}: {json.dumps(res)}", file=sys.stderr, flush=True)
                runs.append({"round": rnd + 1, "scenario": s, **res})
    finally:
        server.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    med = lambda s, k: statistics.median([r[k] for r in runs if r["scenario"] == s and r.get(k) is not None] or [0])
    base = med("baseline", "tps")
    print(f"ebql: {a.ebql}; pgbench -C -S, {a.clients} clients over TCP, {a.seconds} s per run, {a.rounds} rounds; medians\n")
    print("| scenario | TPS | Δ TPS vs baseline | machine CPU µs/txn | tracer CPU % | tracer CPU µs/connection | tracer RSS growth, MiB | captured / transactions | with client_addr | drops |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for s in scenarios:
        rs = [r for r in runs if r["scenario"] == s]
        cap, txn = sum(r.get("captured", 0) for r in rs), sum(r["transactions"] for r in rs)
        traced = s.startswith("wire")
        delta = "" if s == "baseline" else "%+.1f%%" % (100 * (med(s, "tps") / base - 1))
        cells = [s, "%s" % format(round(med(s, "tps")), ","), delta, "%.0f" % med(s, "cpu_us_per_txn")]
        if traced:
            cells += ["%.1f" % med(s, "cpu_pct"), "%.0f" % med(s, "tracer_us_per_connection"),
                      "%.1f" % (med(s, "tracer_rss_growth_kb") / 1024),
                      "%s / %s" % (format(cap, ","), format(txn, ",")),
                      format(sum(r.get("with_client", 0) for r in rs), ","), str(sum(r.get("drops", 0) for r in rs))]
        else:
            cells += [""] * 6
        print("| " + " | ".join(cells) + " |")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"meta": {"argv": sys.argv, "kernel": os.uname().release, "cpus": os.cpu_count()}, "runs": runs}, f, indent=1)


if __name__ == "__main__":
    main()
