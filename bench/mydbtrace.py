#!/usr/bin/env python3
"""Issue 21, MariaDB: what tracing every statement costs, eBQL's
`mysql.statements` (decoded from the wire at the server's socket system
calls) against the server's own general log and slow log.

The bench starts its own MariaDB (mariadb-install-db in a temp dir, its own
socket, no TCP), fills one sysbench table, then runs each mix (--mixes)
through each protocol (--protocol) with sysbench's 4 threads, each scenario
in turn, round after round (interleaved: the VM drifts), and prints one
markdown table per (mix, protocol) with medians (min–max).

Mixes (sysbench's own Lua scripts):

* point_select: `oltp_point_select`, one point SELECT per transaction;
* read_write: `oltp_read_write`, 18 statements per transaction (BEGIN, 10
  point SELECTs, 4 range SELECTs, 2 UPDATEs, a DELETE and an INSERT, COMMIT).

Protocols: text (`--db-ps-mode=disable`: COM_QUERY with the statement's
text) and prepared (`--db-ps-mode=auto`: each statement prepared once per
connection, then COM_STMT_EXECUTE with binary parameters).

Scenarios:

* baseline: nothing traces, both logs off;
* general_log: `general_log = ON` to a file (every statement as received);
* slow_log: `slow_query_log = ON` with `long_query_time = 0` to a file
  (every statement with its duration: the analog of PostgreSQL's
  `log_min_duration_statement = 0`);
* wire_process: `ebql query --format null 'SELECT * FROM mysql.statements'`;
* wire_persist: the same query to Parquet (`--format parquet --output DIR`);
* wire_syscalls (not in the default list): wire_persist with `--hook raw`,
  the capture on the raw system call tracepoints (an enter/exit pairing)
  instead of the socket tracepoints, which kernels before 6.3 lack.
* wire_b (not in the default list): wire_persist with the binary
  `--ebql-b`, to compare two builds in interleaved rounds.
* wire_nice (not in the default list): wire_persist with ebql under
  `nice -n 10`: its user space yields the CPU to the server and clients.

Completeness (the wire scenarios): rows captured against the server's
`Questions` counter over the run (statements clients sent, prepared
executions included, prepares and closes not, as `mysql.statements` has a
row per execution), read before ebql attaches and after sysbench ends; the
`mariadb` client that reads it after is in both counts. Questions also
counts COM_QUIT, which has no response and so no row: the threads' and
the first reader's, subtracted. It captures every
process named mariadbd on the machine: run nothing else on it.

Needs root, sysbench and mariadb-server (bench/setup.sh), python3-pyarrow
for wire_persist, and an ebql binary (--ebql, default
~/.cache/ebql/target/release/ebql; the script builds nothing).
"""

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import machine_cpu  # noqa: E402  (beside this script)
from attach import start_attached  # noqa: E402

MIXES = {"point_select": "oltp_point_select", "read_write": "oltp_read_write"}
PROTOCOLS = {"text": "disable", "prepared": "auto"}
SCENARIOS = ["baseline", "general_log", "slow_log", "wire_process", "wire_persist"]
QUERY = "SELECT * FROM mysql.statements"


class Server:
    """A mariadbd of the bench's own, on a Unix socket only."""

    def __init__(self, tmp):
        self.tmp, self.sock = tmp, f"{tmp}/sock"
        data = f"{tmp}/data"
        subprocess.run(["mariadb-install-db", "--no-defaults", "--user=root", "--auth-root-authentication-method=normal",
                        "--skip-test-db", f"--datadir={data}"], check=True, capture_output=True)
        self.proc = subprocess.Popen(
            ["mariadbd", "--no-defaults", "--user=root", "--skip-networking", "--skip-name-resolve",
             "--innodb-buffer-pool-size=256M", "--innodb-flush-log-at-trx-commit=0", "--max-connections=50",
             f"--datadir={data}", f"--socket={self.sock}", f"--log-error={tmp}/error.log",
             f"--general-log-file={tmp}/general.log", f"--slow-query-log-file={tmp}/slow.log",
             f"--pid-file={tmp}/mariadbd.pid"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(200):
            if subprocess.run(["mariadb-admin", "--no-defaults", "-uroot", f"--socket={self.sock}", "ping"],
                              capture_output=True).returncode == 0:
                return
            time.sleep(0.1)
        raise SystemExit(f"the bench's mariadbd did not start: see {tmp}/error.log")

    def sql(self, q):
        r = subprocess.run(["mariadb", "--no-defaults", "-uroot", f"--socket={self.sock}", "-N", "-B", "-e", q],
                           capture_output=True, text=True)
        if r.returncode != 0:
            raise SystemExit(f"mariadb {q!r}: {r.stderr}")
        return r.stdout.strip()

    def questions(self):
        return int(self.sql("SHOW GLOBAL STATUS LIKE 'Questions'").split()[1])

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait()


def sysbench(server, mix, protocol, seconds, threads, table_size, command="run"):
    return ["sysbench", MIXES[mix], f"--mysql-socket={server.sock}", "--mysql-user=root", "--mysql-db=sbtest",
            "--tables=1", f"--table-size={table_size}", f"--threads={threads}", f"--time={seconds}",
            f"--db-ps-mode={PROTOCOLS[protocol]}", "--report-interval=0", command]


def configure(server, scenario):
    server.sql("SET GLOBAL general_log = %s" % ("ON" if scenario == "general_log" else "OFF"))
    server.sql("SET GLOBAL slow_query_log = %s" % ("ON" if scenario == "slow_log" else "OFF"))
    server.sql("SET GLOBAL long_query_time = %s" % ("0" if scenario == "slow_log" else "10"))
    server.sql("SET GLOBAL log_output = 'FILE'")


def start_ebql(ebql, scenario, tmp):
    args = [ebql, "query"] + (["--hook", "raw"] if scenario == "wire_syscalls" else [])
    if scenario == "wire_nice":
        args = ["nice", "-n", "10"] + args
    out = None
    if scenario == "wire_process":
        args += ["--format", "null"]
    else:
        out = f"{tmp}/capture"
        shutil.rmtree(out, ignore_errors=True)
        args += ["--format", "parquet", "--output", out]
    p, err = start_attached(args + [QUERY], scenario)
    return p, err, out


def ticks(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def parquet_rows(path):
    import pyarrow.parquet as pq
    return sum(pq.ParquetFile(os.path.join(path, f)).metadata.num_rows
               for f in os.listdir(path) if f.endswith(".parquet"))


def run(a, server, scenario, mix, protocol, tmp):
    configure(server, scenario)
    before = server.questions()
    tracer, tracer_err, out = (None, None, None)
    if scenario.startswith("wire"):
        tracer, tracer_err, out = start_ebql(a.ebql_b if scenario == "wire_b" else a.ebql, scenario, tmp)
    cpu0, t0 = (ticks(tracer.pid) if tracer else 0), time.monotonic()
    machine0 = machine_cpu.snapshot()
    r = subprocess.run(sysbench(server, mix, protocol, a.seconds, a.threads, a.table_size),
                       capture_output=True, text=True)
    machine1 = machine_cpu.snapshot()
    if r.returncode != 0:
        raise SystemExit(f"sysbench failed: {r.stderr or r.stdout}")
    elapsed = time.monotonic() - t0
    res = {}
    for line in r.stdout.splitlines():
        line = line.strip()
        if line.startswith("transactions:"):
            res["tps"] = float(line.split("(")[1].split()[0])
            res.update(machine_cpu.between(machine0, machine1, int(line.split()[1])))
        elif line.startswith("queries:"):
            res["qps"] = float(line.split("(")[1].split()[0])
        elif line.startswith("avg:") and "lat_ms" not in res:
            res["lat_ms"] = float(line.split()[1])
    after = server.questions()
    # Questions also counts each connection's COM_QUIT, which has no response and no row:
    # sysbench's threads' and the mariadb client's that read `before`.
    res["expected"] = after - before - (a.threads + 1)
    if tracer:
        tracer_s = (ticks(tracer.pid) - cpu0) / os.sysconf("SC_CLK_TCK")
        res["cpu_pct"] = 100.0 * tracer_s / elapsed
        tracer.send_signal(signal.SIGINT)
        tracer.wait()
        err = tracer_err.text()
        stats = next((json.loads(l.split("stats ", 1)[1]) for l in err.splitlines() if l.startswith("ebql: stats")), {})
        res["drops"] = stats.get("events_dropped", 0)
        res["wire"] = stats.get("wire", {})
        res["captured"] = parquet_rows(out) if out else res["wire"].get("statements", 0)
        # The tracer's own CPU per statement it wrote: far steadier than TPS on a noisy VM.
        res["tracer_us_per_stmt"] = 1e6 * tracer_s / res["captured"] if res["captured"] else None
    return res


def fmt(xs, f="{:,.0f}"):
    return f"{f.format(statistics.median(xs))} ({f.format(min(xs))}–{f.format(max(xs))})" if xs else ""


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ebql", default=os.path.expanduser("~/.cache/ebql/target/release/ebql"))
    ap.add_argument("--ebql-b", help="the binary of the wire_b scenario (wire_persist): an A/B of two builds")
    ap.add_argument("--seconds", type=int, default=15)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--table-size", type=int, default=100000)
    ap.add_argument("--mixes", default="point_select,read_write")
    ap.add_argument("--protocol", default="text,prepared")
    ap.add_argument("--scenarios", default=",".join(SCENARIOS))
    ap.add_argument("--json")
    a = ap.parse_args()
    mixes, protocols, scenarios = a.mixes.split(","), a.protocol.split(","), a.scenarios.split(",")
    tmp = tempfile.mkdtemp(prefix="ebql-mybench-")
    server = Server(tmp)
    runs = []
    try:
        server.sql("CREATE DATABASE sbtest")
        subprocess.run(sysbench(server, "point_select", "text", 10, 1, a.table_size, "prepare"), check=True, capture_output=True)
        for mix in mixes:
            # Warm the buffer pool before the first measured run.
            subprocess.run(sysbench(server, mix, "text", max(5, a.seconds // 2), a.threads, a.table_size), check=True, capture_output=True)
        for rnd in range(a.rounds):
            for mix in mixes:
                for protocol in protocols:
                    order = scenarios[rnd % len(scenarios):] + scenarios[:rnd % len(scenarios)]
                    for scenario in order:
                        res = run(a, server, scenario, mix, protocol, tmp)
                        print(f"round {rnd + 1} {mix} {protocol} {scenario}: {json.dumps(res)}", file=sys.stderr, flush=True)
                        runs.append({"round": rnd + 1, "mix": mix, "protocol": protocol, "scenario": scenario, **res})
    finally:
        server.stop()
    version = subprocess.run(["mariadbd", "--version"], capture_output=True, text=True).stdout.strip()
    print(f"ebql: {a.ebql}; {version}; sysbench {a.threads} threads, table of {a.table_size:,} rows, "
          f"{a.seconds} s per run, {a.rounds} rounds; median (min–max)\n")
    rows = []
    for mix in mixes:
        for protocol in protocols:
            print(f"### {mix} (`{MIXES[mix]}`), {protocol} protocol\n")
            print("| scenario | TPS | Δ TPS vs baseline (< 0: loss) | machine CPU µs/txn | Δ cost vs baseline | steal % | latency ms | tracer CPU % | tracer CPU µs/statement | captured / executed | drops |")
            print("|---|---|---|---|---|---|---|---|---|---|---|")
            of = lambda s, k: [r[k] for r in runs if r["mix"] == mix and r["protocol"] == protocol and r["scenario"] == s and k in r]
            base = statistics.median(of("baseline", "tps")) if of("baseline", "tps") else None
            base_cost = statistics.median(of("baseline", "cpu_us_per_txn")) if of("baseline", "cpu_us_per_txn") else None
            for s in scenarios:
                tps = of(s, "tps")
                delta = f"{100 * (statistics.median(tps) / base - 1):+.1f}%" if base and s != "baseline" else ""
                cost = of(s, "cpu_us_per_txn")
                dcost = f"{100 * (statistics.median(cost) / base_cost - 1):+.1f}%" if base_cost and cost and s != "baseline" else ""
                cap, exp = sum(of(s, "captured")), sum(of(s, "expected"))
                complete = f"{cap:,} / {exp:,} ({100 * cap / exp:.2f}%)" if of(s, "captured") else ""
                print(f"| {s} | {fmt(tps)} | {delta} | {fmt(cost, '{:.1f}')} | {dcost} | {fmt(of(s, 'steal_pct'), '{:.1f}')} "
                      f"| {fmt(of(s, 'lat_ms'), '{:.3f}')} | {fmt(of(s, 'cpu_pct'), '{:.1f}')} "
                      f"| {fmt([x for x in of(s, 'tracer_us_per_stmt') if x], '{:.2f}')} "
                      f"| {complete} | {sum(of(s, 'drops')) if of(s, 'drops') else ''} |")
                rows.append({"mix": mix, "protocol": protocol, "scenario": s, "tps_median": statistics.median(tps) if tps else None,
                             "delta_pct": delta, "cpu_us_per_txn_median": statistics.median(cost) if cost else None,
                             "cost_delta_pct": dcost, "captured": cap, "expected": exp})
            print()
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"meta": {"ebql": a.ebql, "server": version, "threads": a.threads, "seconds": a.seconds,
                                "rounds": a.rounds}, "runs": runs, "rows": rows}, f, indent=1)
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
