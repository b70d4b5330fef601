#!/usr/bin/env python3
"""Issue 23's benchmark: partial windows of several hosts on Kafka, merged by Spark.

Three agents (`ebql query --partial`, host ids h1..h3), each on its own
scripted workload making 1-byte preads at 1,000 positions every 100 ms, so
every 1 s window has 1,000 groups per host (GROUP BY pos). One KRaft broker,
one Spark session (local[2], ebql.spark.merge). Measures:

* bytes per window per host on Kafka, --partial as JSON rows and as Arrow
  IPC windows against the same query's final values as JSON rows (three
  sets of agents on the same workloads, 8 s side by side);
* then, with the partial agents only: the merge's end-to-end latency from a
  window's end (wall clock) to its merged rows in Spark's memory sink
  (polled every 100 ms; watermark delay 0, 500 ms trigger), merged rows per
  second and Spark's micro-batch durations.

EBQL=path/to/ebql picks the agents' binary (a release build for numbers).

Usage: python3 bench/fleet.py [--seconds 40] [--out bench/results/issue23-fleet.json]
Needs what tests/test_fleet.py needs (scripts/setup.sh), and the ebql wheel.
"""

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "crates", "ebql-python", "tests"))

import ebql  # noqa: E402
import ebql.spark  # noqa: E402
from test_fleet import Agent, Broker, quiet, shut_down, spark_session  # noqa: E402
from conftest import Workload  # noqa: E402

EV = "tracepoint/syscalls/sys_enter_pread64"
GROUPS = 1000
QUERIES = {
    "exact": f"SELECT pos, COUNT(*) AS calls, SUM(count) AS bytes, AVG(count) AS mean, MAX(count) AS largest "
             f"FROM {EV} WHERE count = 1 GROUP BY pos WINDOW(time, 1000, 1000)",
    "hist": f"SELECT pos, COUNT(*) AS calls, HIST(count) AS sizes FROM {EV} WHERE count = 1 "
            f"GROUP BY pos WINDOW(time, 1000, 1000)",
}


def drive(workloads, fds, stop):
    """Every 100 ms, each workload reads 1 byte at each of GROUPS positions."""
    while not stop.is_set():
        t = time.time()
        for h, w in workloads.items():
            w.cmd(f"preadpos {fds[h]} 0 {GROUPS} 1")
        stop.wait(max(0.0, 0.1 - (time.time() - t)))


def kafka_bytes_per_window(spark, broker, topic, hosts_per_key):
    """The median bytes one host produced per window to `topic` (message
    values), over the windows in the second half of the run (all groups
    present). Messages of a time window carry its end as their timestamp;
    `hosts_per_key` agents share one key (the final agents: the hostname)."""
    df = spark.read.format("kafka").option("kafka.bootstrap.servers", broker).option("subscribe", topic).load()
    by = {}
    for r in df.selectExpr("cast(key as string) AS key", "timestamp", "length(value) AS n").collect():
        by[(r["key"], r["timestamp"])] = by.get((r["key"], r["timestamp"]), 0) + r["n"]
    sizes = sorted(v / hosts_per_key for v in by.values())
    return statistics.median(sizes[len(sizes) // 2:])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=int, default=40, help="the merge's measured run")
    ap.add_argument("--out", default=os.path.join(HERE, "results", "issue23-fleet.json"))
    args = ap.parse_args()
    hosts = ["h1", "h2", "h3"]
    broker = Broker()
    workloads = {h: Workload() for h in hosts}
    fds = {h: w.file() for h, w in workloads.items()}
    agents = []
    spark = None
    stop = threading.Event()
    result = {"hosts": len(hosts), "groups_per_window_per_host": GROUPS, "window_ms": 1000,
              "ebql": os.environ.get("EBQL", "debug build"), "queries": {}}
    try:
        spark = quiet(spark_session())
        # Phase 1, bytes: partial and final agents side by side for 8 s.
        for name, sql in QUERIES.items():
            for h in hosts:
                pid = workloads[h].pid
                agents.append(Agent(h, pid, sql, f"kafka://{broker.address()}/{name}-partial"))
                agents.append(Agent(h, pid, sql, f"kafka://{broker.address()}/{name}-partialarrow", "arrow"))
                agents.append(FinalAgent(h, pid, sql, f"kafka://{broker.address()}/{name}-final"))
        driver = threading.Thread(target=drive, args=(workloads, fds, stop))
        driver.start()
        time.sleep(8)
        stop.set()
        driver.join()
        for a in agents:
            a.stop()
        agents = []
        for name, sql in QUERIES.items():
            partial = kafka_bytes_per_window(spark, broker.address(), f"{name}-partial", 1)
            arrow = kafka_bytes_per_window(spark, broker.address(), f"{name}-partialarrow", 1)
            final = kafka_bytes_per_window(spark, broker.address(), f"{name}-final", len(hosts))
            result["queries"][name] = {
                "sql": sql,
                "bytes_per_window_per_host": {"partial_json": partial, "partial_arrow": arrow, "final_json": final},
                "partial_json_over_final": partial / final,
                "partial_arrow_over_final": arrow / final,
            }
        # Phase 2, the merge: partial agents only, Spark reading as they produce.
        stop.clear()
        tmp = tempfile.mkdtemp(prefix="ebql-fleet-bench-")
        streams = {}
        for name, sql in QUERIES.items():
            for h in hosts:
                agents.append(Agent(h, workloads[h].pid, sql, f"kafka://{broker.address()}/{name}-merge"))
            layout = ebql.partial_layout(sql)
            rows = ebql.spark.read_kafka(spark, broker.address(), f"{name}-merge", layout)
            merged = ebql.spark.merge(rows, layout, delay="0 seconds")
            streams[name] = (merged.writeStream.outputMode("append").format("memory").queryName(f"{name}_merged")
                             .option("checkpointLocation", os.path.join(tmp, name))
                             .trigger(processingTime="500 milliseconds").start())
        time.sleep(15)  # Spark's first micro-batches (JIT, planning) before the measured run
        driver = threading.Thread(target=drive, args=(workloads, fds, stop))
        driver.start()
        seen = {name: {} for name in QUERIES}
        t_end = time.time() + args.seconds
        while time.time() < t_end:
            now = time.time()
            for name in QUERIES:
                for r in spark.sql(f"SELECT unix_micros(window_end) AS e, count(*) AS n FROM {name}_merged "
                                   "GROUP BY 1").collect():
                    seen[name].setdefault(r["e"], (now, r["n"]))
            time.sleep(0.1)
        stop.set()
        driver.join()
        for name in QUERIES:
            # Full windows only: 3 hosts' 1,000 groups each merged into 1,000 rows.
            full = {e: t for e, (t, n) in seen[name].items() if n == GROUPS}
            lat = sorted(t - e / 1e6 for e, t in full.items())
            progress = [p for p in streams[name].recentProgress if p["numInputRows"] > 0]
            result["queries"][name].update({
                "merged_full_windows": len(full),
                "produced_windows": args.seconds,
                "latency_s": {"min": lat[0], "median": statistics.median(lat), "max": lat[-1]} if lat else None,
                "merged_rows_per_s": len(full) * GROUPS / args.seconds,
                "spark_batch_ms_median": statistics.median(
                    [p["durationMs"]["triggerExecution"] for p in progress]) if progress else None,
                "spark_input_rows_per_batch_median": statistics.median(
                    [p["numInputRows"] for p in progress]) if progress else None,
            })
        print(json.dumps(result, indent=2))
        os.makedirs(os.path.dirname(args.out), exist_ok=True)
        with open(args.out, "w") as f:
            json.dump(result, f, indent=2)
    finally:
        stop.set()
        shut_down(agents, spark, workloads, broker)


class FinalAgent(Agent):
    """The same query without --partial (final values), for the bytes comparison."""

    def __init__(self, host, pid, sql, url):
        import subprocess
        from conftest import ebql_binary

        self.proc = subprocess.Popen([ebql_binary(), "query", "--align-windows", "-p", str(pid), "-f", "json",
                                      "-o", url, sql], stderr=subprocess.PIPE, text=True)
        while True:
            line = self.proc.stderr.readline()
            assert line, f"the {host} final agent exited before attaching"
            if line.startswith("ebql: attached"):
                break


if __name__ == "__main__":
    main()
