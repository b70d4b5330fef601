#!/usr/bin/env python3
"""Issue 10: what tracing every PostgreSQL statement costs, eBQL against the
server's own statement logging and bcc's dbslower (paper 002's scenarios).

The bench starts its own PostgreSQL 15 (initdb in a temp dir, its own port
and socket dir, shared_preload_libraries=pg_stat_statements,
synchronous_commit=off so that writes measure CPU rather than the VM's
shared disk), from a
byte-identical copy of Debian's postgres binary: uprobes belong to a file,
so only this server's backends trap into the probes and other PostgreSQL
servers on the host are untouched. pgbench initializes it at --scale, then
runs two mixes of single-statement transactions through the simple query
protocol (the one PostgreSQL's query__start/query__done USDT probes fire on):

* read-heavy: read.sql@9 (point SELECT) + write.sql@1 (point UPDATE);
* write-heavy: read.sql@1 + write.sql@9.

Scenarios:

* baseline: nothing traces;
* log_min_duration: log_min_duration_statement = 0 (every statement with its
  duration) to the server's log file;
* log_statement: log_statement = 'all' to the log file;
* ebql_active: `ebql query --attach-only Q`: the query's probes attached with
  programs that return at once (hooks and USDT semaphores only);
* ebql_process: `ebql query --format null Q`: every statement's text and
  latency read, streamed, decoded and dropped;
* ebql_persist: `ebql query --format parquet --output DIR Q`;
* dbslower: bcc's `dbslower-bpfcc postgres -p PIDS -m 0` (USDT, threshold 0),
  output to a file.

Q pairs query__start and query__done on the thread: each statement's start
time, backend pid, text, truncation flag and latency in one row, failed
statements included (PAIRED below); an ebql that
cannot store a string on a pairing's start side yet runs the stream of
statement texts at query__start instead (STREAM: no latency); the table
header says which ran.

One run: the tracer starts (eBQL before pgbench); pgbench starts with its
clients held at a gate (a session holds an ACCESS EXCLUSIVE lock on
pgbench_accounts, so each client's first statement waits); dbslower, which
traces given pids only, starts once the clients' backends exist and have
compiled its program (~30 s); the gate opens; pgbench's per-second progress
lines (-P 1) after the gate give TPS and latency over --seconds; pgbench is
stopped, its backends gone, then the tracer. Runs are interleaved, mixes and
scenarios in an order rotated each round; medians with min-max.

Completeness: statements executed = sum(calls) of pg_stat_statements (reset
before the run, read after the tracer stopped; failed statements are not
counted, and none fail here) against the rows eBQL wrote (persist: the
Parquet rows; process: rows_emitted), the log entries the server wrote, and
dbslower's lines (it traces pgbench's backends only, from its attach on:
expected = pgbench's statements - one per client, blocked at the gate
before it attached).

Tracer CPU: user+system ticks of the tracer process over the measured
window (/proc/PID/stat), as % of one CPU.

usage: sudo bench/dbtrace.py [--ebql PATH] [--quick] [--seconds D] [--rounds R]
                             [--clients C] [--scale S] [--scenarios a,b] [--mixes read,write]
Prints a markdown table (BENCHMARKS.md "Issue 10").
"""
import argparse, json, os, pwd, re, shutil, signal, statistics, subprocess, sys, tempfile, time

PGBIN = "/usr/lib/postgresql/15/bin"
SCENARIOS = ["baseline", "log_min_duration", "log_statement", "ebql_active", "ebql_process", "ebql_persist", "dbslower"]
# Not traced, but a process that wakes every 10 ms as eBQL's query thread polls
# (--scenarios baseline,baseline_wakeups,...): on a VM, a vCPU kept from idling
# answers wake-ups faster, which can make a tracer look cheaper than nothing.
EXTRA = ["baseline_wakeups"]
MIXES = {"read": (9, 1), "write": (1, 9)}
READ_SQL = "\\set aid random(1, :naccounts)\nSELECT abalance FROM pgbench_accounts WHERE aid = :aid;\n"
WRITE_SQL = ("\\set aid random(1, :naccounts)\n\\set delta random(-5000, 5000)\n"
             "UPDATE pgbench_accounts SET abalance = abalance + :delta WHERE aid = :aid;\n")
# The persist query, a capture `ebql replay` takes as it is: each statement's
# start time, backend, text (up to 2,047 bytes, with its truncation flag) and
# latency in one row; a statement that never finished (an error) is a row too,
# its latency NULL (LEFT JOIN). Builds that cannot store a string on a
# pairing's start side get the stream of statement texts at query__start
# (start time, backend, text; no latency).
PAIRED = ("SELECT s.time AS time, s.pid AS pid, str(s.arg0, 2048) AS query, truncated(str(s.arg0, 2048)) AS truncated, "
          "x.time - s.time AS latency_ns "
          "FROM usdt:{bin}:postgresql:query__start AS s LEFT JOIN usdt:{bin}:postgresql:query__done AS x ON s.tid = x.tid")
STREAM = "SELECT time, pid, str(arg0, 1024) AS query FROM usdt:{bin}:postgresql:query__start"
# bcc compiles its program against kernel headers at start; Debian's
# linux-headers-*-amd64 and -common trees merged (bench/setup.sh installs them).
HEADERS_GLOB = "/usr/src/linux-headers-*-amd64"


def ticks(pid):
    """User + system CPU of a process so far, in clock ticks."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


class Server:
    def __init__(self, tmp, port):
        self.tmp, self.port = tmp, port
        pw = pwd.getpwnam("postgres")
        self.uid, self.gid = pw.pw_uid, pw.pw_gid
        # Not a directory named bin: postgres then finds lib/ and share/ at their installed paths.
        os.makedirs(f"{tmp}/server")
        self.binary = f"{tmp}/server/postgres"
        shutil.copy2(f"{PGBIN}/postgres", self.binary)
        for p in (tmp, f"{tmp}/server", self.binary):
            os.chown(p, self.uid, self.gid)
        self.data = f"{tmp}/data"
        self.as_postgres([f"{PGBIN}/initdb", "-D", self.data, "-A", "trust", "-U", "postgres"], stdout=subprocess.DEVNULL)
        self.log = f"{tmp}/server.log"
        log = open(self.log, "wb")
        os.chown(self.log, self.uid, self.gid)
        self.proc = subprocess.Popen(
            [self.binary, "-D", self.data, "-p", str(port), "-k", tmp, "-c", "listen_addresses=",
             "-c", "shared_preload_libraries=pg_stat_statements", "-c", "max_connections=50",
             # Commits do not wait for the WAL flush: the write mix measures CPU, not a shared VM disk.
             "-c", "synchronous_commit=off"],
            stdout=log, stderr=log, preexec_fn=self._drop)
        for _ in range(100):
            if subprocess.run([f"{PGBIN}/pg_isready", "-q", "-h", tmp, "-p", str(port)]).returncode == 0:
                return
            time.sleep(0.1)
        raise SystemExit("the bench's PostgreSQL did not start: see " + self.log)

    def _drop(self):
        os.setgid(self.gid)
        os.setuid(self.uid)

    def as_postgres(self, args, **kw):
        subprocess.run(args, check=True, preexec_fn=self._drop, **kw)

    def conn(self, db="postgres", user="postgres"):
        return ["-h", self.tmp, "-p", str(self.port), "-U", user, "-d", db]

    def sql(self, q, db="postgres"):
        """One statement through psql; its output (tuples only, unaligned)."""
        r = subprocess.run(["psql", "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", *self.conn(db), "-c", q], capture_output=True, text=True)
        if r.returncode != 0:
            raise SystemExit(f"psql {q!r}: {r.stderr}")
        return r.stdout.strip()

    def stop(self):
        self.proc.send_signal(signal.SIGQUIT)
        self.proc.wait()


class Gate:
    """A session holding an ACCESS EXCLUSIVE lock on pgbench_accounts until opened."""

    def __init__(self, server):
        self.p = subprocess.Popen(["psql", "-X", "-q", "-A", "-t", *server.conn("bench")], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.send("BEGIN;")
        self.send("LOCK TABLE pgbench_accounts IN ACCESS EXCLUSIVE MODE;")
        self.send("SELECT 'locked';")
        line = self.p.stdout.readline()
        assert line.strip() == "locked", line

    def send(self, line):
        self.p.stdin.write(line + "\n")
        self.p.stdin.flush()

    def open(self):
        self.send("COMMIT;")
        self.p.stdin.close()
        self.p.wait()


def choose_query(ebql, server):
    """PAIRED if this ebql runs it (one statement captured with its text), else STREAM."""
    q = PAIRED.format(bin=server.binary)
    p = subprocess.Popen([ebql, "query", "--format", "json", q], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if p.stderr.readline().startswith("ebql: attached"):
        server.sql("SELECT 'probe' AS dbtrace_probe")
        time.sleep(0.5)
    p.send_signal(signal.SIGTERM)
    out, err = p.communicate()
    if p.returncode == 0 and "dbtrace_probe" in out:
        return q
    print(f"dbtrace: this ebql cannot run the paired query ({err.strip().splitlines()[-1] if err.strip() else p.returncode}); "
          "persisting the statement stream at query__start (no latency)", file=sys.stderr)
    return STREAM.format(bin=server.binary)


def start_ebql(ebql, scenario, server, tmp, q):
    # bpf_stats is off by default (binaries before issue 11 needed --no-bpf-stats).
    args = [ebql, "query"]
    out = None
    if scenario == "ebql_active":
        args += ["--attach-only", "--format", "null"]
    elif scenario == "ebql_process":
        args += ["--format", "null"]
    else:
        out = f"{tmp}/capture"
        args += ["--format", "parquet", "--output", out]
    p = subprocess.Popen(args + [q], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    line = p.stderr.readline()
    if not line.startswith("ebql: attached"):
        raise SystemExit(f"ebql did not attach: {line}{p.stderr.read()}")
    return p, out


def start_dbslower(pids, tmp):
    heads = sorted(d for d in __import__("glob").glob(HEADERS_GLOB))
    if not heads:
        raise SystemExit("dbslower needs kernel headers: run bench/setup.sh (linux-headers-amd64)")
    amd64 = heads[-1]
    merged = f"{tmp}/kheaders"
    if not os.path.isdir(merged):
        # bcc wants one tree; Debian splits the generated headers (-amd64) from the rest (-common).
        common = amd64.replace("-amd64", "-common")
        subprocess.run(["cp", "-rs", f"{common}/.", merged + "/"], check=True)
        subprocess.run(["cp", "-rsf", "--remove-destination", f"{amd64}/.", merged + "/"], check=True)
    out = f"{tmp}/dbslower.out"
    p = subprocess.Popen(["dbslower-bpfcc", "postgres", "-m", "0", "-p", *map(str, pids)],
                         stdout=open(out, "w"), stderr=subprocess.PIPE, text=True,
                         env={**os.environ, "BCC_KERNEL_SOURCE": merged, "PYTHONUNBUFFERED": "1"})
    # Ready once it prints its header (after compiling and attaching).
    while True:
        with open(out) as f:
            if "QUERY" in f.read():
                return p, out
        if p.poll() is not None:
            raise SystemExit(f"dbslower did not start: {p.stderr.read()}")
        time.sleep(0.2)


def parquet_rows(path):
    import pyarrow.parquet as pq
    n = 0
    for f in sorted(os.listdir(path)):
        if f.endswith(".parquet") and not f.startswith("."):
            n += pq.ParquetFile(os.path.join(path, f)).metadata.num_rows
    return n


def log_entries(server, since):
    with open(server.log, "rb") as f:
        f.seek(since)
        text = f.read().decode(errors="replace")
    return len(re.findall(r"LOG:  (?:duration: [\d.]+ ms  )?statement: ", text))


def run(a, server, scenario, mix, tmp, query):
    native = {"log_min_duration": ("log_min_duration_statement", "0"), "log_statement": ("log_statement", "'all'")}
    for name in ("log_min_duration_statement", "log_statement"):
        server.sql(f"ALTER SYSTEM RESET {name}")
    if scenario in native:
        k, v = native[scenario]
        server.sql(f"ALTER SYSTEM SET {k} = {v}")
    server.sql("SELECT pg_reload_conf()")
    time.sleep(0.2)
    server.sql("SELECT pg_stat_statements_reset()")
    log_start = os.path.getsize(server.log)
    tracer = ebql_out = None
    if scenario == "baseline_wakeups":
        tracer = subprocess.Popen([sys.executable, "-c", "import time\nwhile True: time.sleep(0.01)"])
    if scenario.startswith("ebql"):
        tracer, ebql_out = start_ebql(a.ebql, scenario, server, tmp, query)
    gate = Gate(server)
    r, w = MIXES[mix]
    started = time.monotonic()
    bench = subprocess.Popen(
        ["pgbench", "-n", "-M", "simple", "-c", str(a.clients), "-j", "2", "-T", "3600", "-P", "1",
         "-D", f"naccounts={a.scale * 100000}", "-f", f"{tmp}/read.sql@{r}", "-f", f"{tmp}/write.sql@{w}",
         *server.conn("bench", "bench")],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    pids = []
    for _ in range(300):
        pids = [int(p) for p in server.sql("SELECT pid FROM pg_stat_activity WHERE usename = 'bench' AND wait_event_type = 'Lock'").split()]
        if len(pids) == a.clients:
            break
        time.sleep(0.1)
    assert len(pids) == a.clients, f"pgbench's clients did not reach the gate: {pids}"
    if scenario == "dbslower":
        tracer, dbslower_out = start_dbslower(pids, tmp)
    cpu0 = ticks(tracer.pid) if tracer else 0
    gate.open()
    opened = time.monotonic() - started
    tps, lat = [], []
    while len(tps) < a.seconds:
        line = bench.stderr.readline()
        if not line:
            raise SystemExit("pgbench ended early")
        m = re.match(r"progress: ([\d.]+) s, ([\d.]+) tps, lat ([\d.]+) ms", line)
        # Only whole seconds after the gate opened (pgbench's clock starts a little after ours).
        if m and float(m.group(1)) - 1 >= opened:
            tps.append(float(m.group(2)))
            lat.append(float(m.group(3)))
    cpu1 = ticks(tracer.pid) if tracer else 0
    # SIGTERM throughout: a shell starts background jobs with SIGINT ignored, and children inherit that.
    bench.send_signal(signal.SIGTERM)
    bench.wait()
    while server.sql("SELECT count(*) FROM pg_stat_activity WHERE usename = 'bench'") != "0":
        time.sleep(0.05)
    res = {"tps": statistics.mean(tps), "lat_ms": statistics.mean(lat),
           "cpu_pct": (cpu1 - cpu0) / os.sysconf("SC_CLK_TCK") / a.seconds * 100 if tracer else 0.0}
    if scenario.startswith("ebql"):
        tracer.send_signal(signal.SIGTERM)
        err = tracer.communicate()[1]
        if tracer.returncode != 0:
            raise SystemExit(f"ebql failed: {err}")
        stats = json.loads(re.search(r"ebql: stats (\{.*\})", err).group(1))
        res["drops"] = stats["events_dropped"]
        res["captured"] = {"ebql_active": None, "ebql_process": stats["rows_emitted"]}.get(scenario)
        if scenario == "ebql_persist":
            res["captured"] = parquet_rows(ebql_out)
            shutil.rmtree(ebql_out)
    elif scenario == "dbslower":
        tracer.send_signal(signal.SIGTERM)
        err = tracer.communicate()[1]
        with open(dbslower_out) as f:
            res["captured"] = sum(1 for _ in f) - 2  # its two header lines
        lost = re.findall(r"Possibly lost (\d+) samples", err)
        res["drops"] = sum(map(int, lost))
    elif scenario == "baseline_wakeups":
        tracer.send_signal(signal.SIGTERM)
        tracer.wait()
    elif scenario in native:
        time.sleep(0.2)
        res["captured"] = log_entries(server, log_start)
    # The reset's own call is counted after it ran, before anything traced.
    executed = int(server.sql("SELECT coalesce(sum(calls), 0) FROM pg_stat_statements WHERE query NOT LIKE '%pg_stat_statements_reset%'"))
    by_bench = int(server.sql("SELECT coalesce(sum(calls), 0) FROM pg_stat_statements WHERE userid = 'bench'::regrole"))
    # dbslower sees pgbench's backends from its attach on: not the first statement of each client.
    res["expected"] = by_bench - a.clients if scenario == "dbslower" else executed
    return res


def fmt_range(xs, f="{:,.0f}"):
    return f"{f.format(statistics.median(xs))} ({f.format(min(xs))}–{f.format(max(xs))})"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ebql", default=os.path.expanduser("~/.cache/ebql/target/release/ebql"))
    ap.add_argument("--quick", action="store_true", help="smoke run: scale 1, 3 s, 1 round")
    ap.add_argument("--seconds", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--scale", type=int, default=10)
    ap.add_argument("--scenarios", default=",".join(SCENARIOS))
    ap.add_argument("--mixes", default="read,write")
    a = ap.parse_args()
    if a.quick:
        a.seconds, a.rounds, a.scale = 3, 1, 1
    if not os.path.exists(a.ebql):
        raise SystemExit(f"no ebql binary at {a.ebql} (--ebql PATH)")
    scenarios, mixes = a.scenarios.split(","), a.mixes.split(",")
    unknown = set(scenarios) - set(SCENARIOS + EXTRA) | set(mixes) - set(MIXES)
    if unknown:
        raise SystemExit(f"unknown scenario or mix: {', '.join(sorted(unknown))} (scenarios: {', '.join(SCENARIOS + EXTRA)}; mixes: read, write)")
    load_before = os.getloadavg()
    tmp = tempfile.mkdtemp(prefix="ebql-dbtrace-")
    server = Server(tmp, 30000 + os.getpid() % 20000)
    results = {(s, m): [] for s in scenarios for m in mixes}
    try:
        server.sql("CREATE ROLE bench LOGIN SUPERUSER")
        server.sql("CREATE DATABASE bench OWNER bench")
        subprocess.run(["pgbench", "-i", "-q", "-s", str(a.scale), *server.conn("bench", "bench")], check=True, capture_output=True)
        server.sql("CREATE EXTENSION pg_stat_statements")  # in the control database; its counts cover the server
        for name, text in (("read.sql", READ_SQL), ("write.sql", WRITE_SQL)):
            with open(f"{tmp}/{name}", "w") as f:
                f.write(text)
        # Warm the caches (shared buffers, page cache) before the first measured run.
        subprocess.run(["pgbench", "-n", "-M", "simple", "-c", str(a.clients), "-j", "2", "-T", str(max(5, a.seconds // 2)),
                        "-D", f"naccounts={a.scale * 100000}", "-f", f"{tmp}/read.sql@1", "-f", f"{tmp}/write.sql@1",
                        *server.conn("bench", "bench")], check=True, capture_output=True)
        query = choose_query(a.ebql, server)
        for rnd in range(a.rounds):
            for mix in mixes[rnd % len(mixes):] + mixes[:rnd % len(mixes)]:
                for s in scenarios[rnd % len(scenarios):] + scenarios[:rnd % len(scenarios)]:
                    r = run(a, server, s, mix, tmp, query)
                    print(f"round {rnd + 1} {mix} {s}: {json.dumps(r)}", file=sys.stderr, flush=True)
                    results[(s, mix)].append(r)
    finally:
        server.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"eBQL query: `{query}`\n")
    print(f"load average (1, 5, 15 min) before {load_before}, after {os.getloadavg()}\n")
    print(f"ebql: {a.ebql}; {a.clients} clients, scale {a.scale}, {a.seconds} s measured per run, {a.rounds} rounds; median (min–max)\n")
    print("| mix | scenario | TPS | Δ TPS vs baseline | latency ms | Δ latency | tracer CPU % | captured / executed | drops |")
    print("|---|---|---|---|---|---|---|---|---|")
    for mix in mixes:
        base = results.get(("baseline", mix))
        btps = statistics.median(x["tps"] for x in base) if base else None
        blat = statistics.median(x["lat_ms"] for x in base) if base else None
        for s in scenarios:
            rs = results[(s, mix)]
            tps = [x["tps"] for x in rs]
            lat = [x["lat_ms"] for x in rs]
            dt = f"{(statistics.median(tps) / btps - 1) * 100:+.1f}%" if btps and s != "baseline" else ""
            dl = f"{(statistics.median(lat) / blat - 1) * 100:+.1f}%" if blat and s != "baseline" else ""
            cap = ""
            if rs[0].get("captured") is not None:
                got, want = sum(x["captured"] for x in rs), sum(x["expected"] for x in rs)
                cap = f"{got:,} / {want:,} ({got / want * 100:.2f}%)" if want else "-"
            drops = f"{sum(x.get('drops', 0) for x in rs):,}" if "drops" in rs[0] else ""
            cpu = fmt_range([x["cpu_pct"] for x in rs], "{:.1f}") if s not in ("baseline", "log_min_duration", "log_statement", "baseline_wakeups") else ""
            print(f"| {mix}-heavy | {s} | {fmt_range(tps)} | {dt} | {fmt_range(lat, '{:.3f}')} | {dl} | {cpu} | {cap} | {drops} |")


if __name__ == "__main__":
    main()
