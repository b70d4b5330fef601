#!/usr/bin/env python3
"""Issues 10 and 21: what tracing every PostgreSQL statement costs, eBQL (at
PostgreSQL's USDT probes, and from the wire protocol at the server's socket
system calls) against the server's own statement logging and bcc's dbslower
(paper 002's scenarios).

The bench starts its own PostgreSQL 15 (initdb in a temp dir, its own port
and socket dir, shared_preload_libraries=pg_stat_statements with
pg_stat_statements.track_utility=on, synchronous_commit=off so that writes
measure CPU rather than the VM's shared disk), from a
byte-identical copy of Debian's postgres binary: uprobes belong to a file,
so only this server's backends trap into the probes and other PostgreSQL
servers on the host are untouched (the wire capture is not: see
wire_process). pgbench initializes it at --scale, then runs each mix
(--mixes) through each protocol (--protocol).

Mixes:

* read: read.sql@9 (point SELECT) + write.sql@1 (point UPDATE), one
  statement per transaction;
* write: read.sql@1 + write.sql@9;
* select: pgbench's builtin select-only (-b select-only, as -S): one point
  SELECT per transaction;
* tpcb: pgbench's builtin tpcb-like (-b tpcb-like): BEGIN, UPDATE accounts,
  SELECT, UPDATE tellers, UPDATE branches, INSERT history, END: 7
  statements per transaction.

Protocols (pgbench -M): simple (the default): one Query message per
statement; extended: Parse, Bind and Execute of an unnamed statement each
time; prepared: each statement parsed once per connection, then Bind and
Execute. PostgreSQL's query__start/query__done USDT probes fire for the
simple protocol only, so under extended or prepared the ebql_* scenarios
and dbslower see the bench's own psql statements and pgbench's setup
queries, not pgbench's statements: their completeness is expected to be
near 0, and their rows say so in the notes rather than leave it out.

Scenarios:

* baseline: nothing traces. pg_stat_statements is loaded and counting in
  it as in every scenario (completeness needs its counts): the baseline is
  issue 21's "pg_stat_statements" scenario, and every Δ against it is the
  cost of tracing on top of pg_stat_statements;
* no_pgss (not in the default list): pg_stat_statements.track = none, its
  hooks return without hashing or counting (the library stays loaded:
  unloading it needs a restart); no_pgss against baseline is
  pg_stat_statements' own cost; no completeness (nothing counts);
* log_min_duration: log_min_duration_statement = 0 (every statement with its
  duration) to the server's log file;
* log_statement: log_statement = 'all' to the log file;
* ebql_active: `ebql query --attach-only Q`: the query's probes attached with
  programs that return at once (hooks and USDT semaphores only);
* ebql_process: `ebql query --format null Q`: every statement's text and
  latency read, streamed, decoded and dropped;
* ebql_persist: `ebql query --format parquet --output DIR Q`;
* wire_process: `ebql query --format null 'SELECT * FROM postgres.statements'`:
  every statement decoded from the PostgreSQL wire protocol at the server's
  recvfrom/sendto calls (no USDT: every protocol), with its text, latency,
  tag, rows and error, streamed and dropped. It captures every process
  named postgres on the machine: the bench's server must be the only busy
  one, or completeness can pass 100%;
* wire_persist: the same query to Parquet (--format parquet --output DIR);
* wire_syscalls (not in the default list): wire_persist with `--hook raw`,
  the capture on the raw system call tracepoints (an enter/exit pairing)
  instead of the socket tracepoints, which kernels before 6.3 lack;
* wire_b (not in the default list): wire_persist with the binary
  `--ebql-b`, to compare two builds in interleaved rounds;
* dbslower: bcc's `dbslower-bpfcc postgres -p PIDS -m 0` (USDT, threshold 0),
  output to a file;
* baseline_wakeups (not in the default list): nothing traces, but a process
  wakes every 10 ms as eBQL's query thread polls (a control for VM noise).

Q pairs query__start and query__done on the thread: each statement's start
time, backend pid, text, truncation flag and latency in one row, failed
statements included (PAIRED below); an ebql that
cannot store a string on a pairing's start side yet runs the stream of
statement texts at query__start instead (STREAM: no latency); the output
says which ran.

One run: the tracer starts (every eBQL scenario before pgbench, so the wire
decoder sees each connection's startup and each Parse: one started later
would resynchronize at a connection's next request and count what it missed
in its `wire` stats); pgbench starts with its
clients held at a gate (a session holds an ACCESS EXCLUSIVE lock on
pgbench_accounts, so each client waits at its first statement touching it:
the first for read, write and select, the UPDATE after BEGIN for tpcb; with
prepared, pgbench prepares synchronously, so one client per pgbench thread
waits in its Parse and the thread's others wait behind it); dbslower, which
traces given pids only, starts once the clients' backends exist and have
compiled its program (~30 s); the gate opens; pgbench's per-second progress
lines (-P 1) after the gate give TPS and latency over --seconds; pgbench is
stopped, its backends gone, then the tracer. Runs are interleaved: mixes,
protocols and scenarios in an order rotated each round; medians with min-max.

Completeness: statements executed = sum(calls) of pg_stat_statements (reset
before the run, read after the tracer stopped): every statement the server
executed in the run, the bench's own psql statements (the gate, its polls
of pg_stat_activity) included, which every tracer but dbslower sees too.
It counts executions whatever the protocol (an Execute is a call, a Parse
is none) and counts BEGIN and END: they are utility statements, counted
with pg_stat_statements.track_utility = on (the default; the server sets
it explicitly and the bench checks it at start), but PostgreSQL 15 does
not count utility statements run through the extended protocol: for tpcb
under extended/prepared, two per transaction (its BEGIN and END; the
transactions are the calls of its accounts UPDATE) are added. Failed statements are not
counted, and none fail here. Against it:

* ebql_process and wire_process: the final stats line's rows_emitted;
* ebql_persist and wire_persist: the rows of the Parquet files;
* log_min_duration, log_statement: the entries the server logged;
* dbslower: its lines. It traces pgbench's backends only, from its attach
  on, so its expected count is pgbench's statements (the bench user's
  calls) minus those finished before it attached (read at the gate) minus,
  for simple, one per client (waiting at the gate, started before);
* the wire scenarios also report their stats' `wire` member, summed over
  rounds: desyncs, calls_skipped, responses_unmatched, unknown_prepared
  (statements or calls the decoder could not decode, never guessed).

Drops: eBQL's events_dropped (events the kernel could not record, its ring
buffer full: statements for the USDT queries, system calls for the wire
capture) and dbslower's lost perf samples.

Tracer CPU: user+system ticks of the tracer process over the measured
window (/proc/PID/stat), as % of one CPU.

usage: sudo bench/dbtrace.py [--ebql PATH] [--quick] [--seconds D] [--rounds R]
                             [--clients C] [--scale S] [--scenarios a,b]
                             [--mixes read,write,select,tpcb] [--protocol simple,prepared]
                             [--json PATH]
Prints one markdown table per (mix, protocol) (BENCHMARKS.md "Issue 10",
"Issue 21"); --json PATH writes every run and the tables' rows as JSON,
rewritten after each run so an interrupted run keeps what it measured.
"""
import argparse, glob, json, os, pwd, re, shutil, signal, statistics, subprocess, sys, tempfile, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import machine_cpu  # noqa: E402  (beside this script)
from attach import start_attached  # noqa: E402

PGBIN = "/usr/lib/postgresql/15/bin"
SCENARIOS = ["baseline", "log_min_duration", "log_statement", "ebql_active", "ebql_process", "ebql_persist",
             "wire_process", "wire_persist", "dbslower"]
# Not traced, but a process that wakes every 10 ms as eBQL's query thread polls
# (--scenarios baseline,baseline_wakeups,...): on a VM, a vCPU kept from idling
# answers wake-ups faster, which can make a tracer look cheaper than nothing.
# no_pgss: pg_stat_statements' own cost (baseline against it).
# wire_syscalls: the capture on the raw system call hooks (--hook raw).
# wire_b: wire_persist with the binary --ebql-b, an A/B of two builds.
EXTRA = ["baseline_wakeups", "no_pgss", "wire_syscalls", "wire_b"]
# The scenarios run by `ebql query`, and those whose probes see the simple protocol only.
EBQL = {"ebql_active", "ebql_process", "ebql_persist", "wire_process", "wire_persist", "wire_syscalls", "wire_b"}
USDT = {"ebql_active", "ebql_process", "ebql_persist", "dbslower"}
# No tracer process whose CPU means anything (baseline_wakeups' is its own noise).
NO_TRACER = {"baseline", "no_pgss", "log_min_duration", "log_statement", "baseline_wakeups"}
# Server settings a scenario changes (ALTER SYSTEM, reloaded); every run resets them all first.
SETTINGS = {"log_min_duration": ("log_min_duration_statement", "0"), "log_statement": ("log_statement", "'all'"),
            "no_pgss": ("pg_stat_statements.track", "'none'")}
# A mix: pgbench's script options (files are in the run's temp dir) and statements per transaction.
MIXES = {
    "read": (["-f", "read.sql@9", "-f", "write.sql@1"], 1),
    "write": (["-f", "read.sql@1", "-f", "write.sql@9"], 1),
    "select": (["-b", "select-only"], 1),
    "tpcb": (["-b", "tpcb-like"], 7),
}
PROTOCOLS = ["simple", "extended", "prepared"]
# pgbench's threads (-j): with 4 clients, two per thread, as in issue 10's runs.
JOBS = 2
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
# Every column of every statement the wire decoder finds (issue 21).
WIRE = "SELECT * FROM postgres.statements"
# The stats' `wire` counters the tables show (the JSON keeps them all).
WIRE_SHOWN = ["desyncs", "calls_skipped", "responses_unmatched", "unknown_prepared"]
# bcc compiles its program against kernel headers at start; Debian's
# linux-headers-*-amd64 and -common trees merged (bench/setup.sh installs them).
HEADERS_GLOB = "/usr/src/linux-headers-*-amd64"


def ticks(pid):
    """User + system CPU of a process so far, in clock ticks."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


class Server:
    """A PostgreSQL of the bench's own, on a Unix socket in `tmp` (and TCP at `listen`, if given)."""

    def __init__(self, tmp, port, listen=""):
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
            [self.binary, "-D", self.data, "-p", str(port), "-k", tmp, "-c", f"listen_addresses={listen}",
             "-c", "shared_preload_libraries=pg_stat_statements", "-c", "max_connections=50",
             # The default, explicit: BEGIN and END (tpcb) are utility statements, counted only with it on.
             "-c", "pg_stat_statements.track_utility=on",
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
        # The database last and positional: pgbench's -d is --debug (a line per message on stderr).
        return ["-h", self.tmp, "-p", str(self.port), "-U", user, db]

    def sql(self, q, db="postgres"):
        """One statement through psql; its output (tuples only, unaligned)."""
        r = subprocess.run(["psql", "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", *self.conn(db), "-c", q], capture_output=True, text=True)
        if r.returncode != 0:
            raise SystemExit(f"psql {q!r}: {r.stderr}")
        return r.stdout.strip()

    def bench_calls(self):
        """Statements pgbench's user executed since the last reset."""
        return int(self.sql("SELECT coalesce(sum(calls), 0) FROM pg_stat_statements WHERE userid = 'bench'::regrole"))

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


def check_wire(ebql):
    """Refuses, before any run, an ebql without postgres.statements."""
    r = subprocess.run([ebql, "explain", WIRE], capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"this ebql cannot run {WIRE!r} (wire_* scenarios): {r.stderr.strip()}")


def start_ebql(ebql, scenario, tmp, q):
    """`ebql query` for an eBQL scenario, once attached; its stderr drained, and its Parquet directory (persist)."""
    # bpf_stats is off by default (binaries before issue 11 needed --no-bpf-stats).
    args = [ebql, "query"] + (["--hook", "raw"] if scenario == "wire_syscalls" else [])
    out = None
    if scenario == "ebql_active":
        args += ["--attach-only", "--format", "null"]
    elif scenario.endswith("_process"):
        args += ["--format", "null"]
    else:
        out = f"{tmp}/capture"
        args += ["--format", "parquet", "--output", out]
    p, err = start_attached(args + [q], scenario)
    return p, err, out


def ebql_stats(err):
    """The final `ebql: stats {...}` line as a dict."""
    m = re.search(r"ebql: stats (\{.*\})", err)
    if not m:
        raise SystemExit(f"ebql printed no stats line: {err}")
    return json.loads(m.group(1))


def start_dbslower(pids, tmp):
    heads = sorted(glob.glob(HEADERS_GLOB))
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
    # The simple protocol logs `statement: …`; the extended one `execute <name>: …` (log_statement)
    # or `duration: … ms  execute <name>: …` (log_min_duration_statement), one per Execute.
    return len(re.findall(r"LOG:  (?:duration: [\d.]+ ms  )?(?:statement|execute [^:]*): ", text))


def pgbench_scripts(mix, tmp, scale):
    """pgbench's options for a mix: its scripts (builtin ones find the scale in pgbench_branches)."""
    opts, _ = MIXES[mix]
    if opts[0] == "-b":
        return opts
    return ["-D", f"naccounts={scale * 100000}", *[o if o.startswith("-") else f"{tmp}/{o}" for o in opts]]


def wait_at_gate(server, clients, protocol):
    """pgbench's client backends once all are connected and held at the gate; those blocked on its lock.
    pgbench sends statements asynchronously but prepares them synchronously (-M prepared): there one
    client per thread (-j) waits on the lock, its thread's other clients behind it, idle."""
    want = min(JOBS, clients) if protocol == "prepared" else clients
    for _ in range(300):
        rows = [r.split("|") for r in server.sql("SELECT pid, wait_event_type IS NOT DISTINCT FROM 'Lock' "
                                                  "FROM pg_stat_activity WHERE usename = 'bench'").split()]
        pids, blocked = [int(p) for p, _ in rows], [int(p) for p, lock in rows if lock == "t"]
        # Equal, not at least: pgbench's setup connection (builtin scripts) may not have exited yet.
        if len(pids) == clients and len(blocked) == want:
            return pids, blocked
        time.sleep(0.1)
    raise SystemExit(f"pgbench's clients did not reach the gate: {pids}, {blocked} waiting on its lock")


def configure(server, scenario):
    """The scenario's server settings, every other one reset; pg_stat_statements zeroed."""
    for name, _ in SETTINGS.values():
        server.sql(f"ALTER SYSTEM RESET {name}")
    if scenario in SETTINGS:
        k, v = SETTINGS[scenario]
        server.sql(f"ALTER SYSTEM SET {k} = {v}")
    server.sql("SELECT pg_reload_conf()")
    time.sleep(0.2)
    server.sql("SELECT pg_stat_statements_reset()")


def run(a, server, scenario, mix, protocol, tmp, query):
    configure(server, scenario)
    log_start = os.path.getsize(server.log)
    tracer = ebql_out = err = None
    at_gate = 0
    if scenario == "baseline_wakeups":
        tracer = subprocess.Popen([sys.executable, "-c", "import time\nwhile True: time.sleep(0.01)"])
    if scenario in EBQL:
        # Before pgbench (and the gate's session): every connection is seen from its startup.
        ebql = a.ebql_b if scenario == "wire_b" else a.ebql
        tracer, err, ebql_out = start_ebql(ebql, scenario, tmp, WIRE if scenario.startswith("wire") else query)
    gate = Gate(server)
    started = time.monotonic()
    bench = subprocess.Popen(
        ["pgbench", "-n", "-M", protocol, "-c", str(a.clients), "-j", str(JOBS), "-T", "3600", "-P", "1",
         *pgbench_scripts(mix, tmp, a.scale), *server.conn("bench", "bench")],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    pids, blocked = wait_at_gate(server, a.clients, protocol)
    if scenario == "dbslower":
        # What pgbench ran before the gate (tpcb's BEGIN, builtin scripts' scale query): dbslower misses it.
        at_gate = server.bench_calls()
        tracer, dbslower_out = start_dbslower(pids, tmp)
    cpu0 = ticks(tracer.pid) if tracer else 0
    machine0 = machine_cpu.snapshot()
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
    machine1 = machine_cpu.snapshot()
    # SIGTERM throughout: a shell starts background jobs with SIGINT ignored, and children inherit that.
    bench.send_signal(signal.SIGTERM)
    bench.wait()
    while server.sql("SELECT count(*) FROM pg_stat_activity WHERE usename = 'bench'") != "0":
        time.sleep(0.05)
    res = {"tps": statistics.mean(tps), "lat_ms": statistics.mean(lat),
           "cpu_pct": (cpu1 - cpu0) / os.sysconf("SC_CLK_TCK") / a.seconds * 100 if tracer else 0.0,
           "tps_series": tps,
           # pgbench's per-second rates over the measured seconds: its transactions in them.
           **machine_cpu.between(machine0, machine1, sum(tps))}
    if scenario in EBQL:
        tracer.send_signal(signal.SIGTERM)
        tracer.wait()
        err = err.text()
        if tracer.returncode != 0:
            raise SystemExit(f"ebql failed ({scenario}): {err}")
        stats = ebql_stats(err)
        res["drops"] = stats["events_dropped"]
        res["captured"] = None if scenario == "ebql_active" else stats["rows_emitted"]
        if ebql_out:
            res["captured"] = parquet_rows(ebql_out)
            shutil.rmtree(ebql_out)
        if "wire" in stats:
            res["wire"] = stats["wire"]
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
    elif scenario in ("log_min_duration", "log_statement"):
        time.sleep(0.2)
        res["captured"] = log_entries(server, log_start)
    # The reset's own call is counted after it ran, before anything traced.
    executed = int(server.sql("SELECT coalesce(sum(calls), 0) FROM pg_stat_statements WHERE query NOT LIKE '%pg_stat_statements_reset%'"))
    if mix == "tpcb" and protocol != "simple":
        # PostgreSQL 15's pg_stat_statements does not count utility statements run through the
        # extended protocol: tpcb's BEGIN and END, one each per transaction (= its accounts UPDATEs).
        executed += 2 * int(server.sql("SELECT coalesce(sum(calls), 0) FROM pg_stat_statements WHERE query LIKE 'UPDATE pgbench_accounts%'"))
    # dbslower sees pgbench's backends from its attach on: not what ran before, nor the statements
    # waiting at the gate (started before: simple protocol; a Parse or an unnamed statement's is no call yet).
    in_flight = len(blocked) if protocol == "simple" else 0
    res["expected"] = server.bench_calls() - at_gate - in_flight if scenario == "dbslower" else executed
    if scenario == "no_pgss":
        res["expected"] = None  # nothing counted
    return res


def rotated(xs, n):
    return xs[n % len(xs):] + xs[:n % len(xs)]


def spread(xs):
    return {"median": statistics.median(xs), "min": min(xs), "max": max(xs)}


def note(scenario, protocol, wire):
    """What a row's completeness means when it is not the whole story."""
    parts = []
    if scenario.startswith("wire") and not wire:
        parts.append("no `wire` in the stats: the capture saw no call")
    if scenario in USDT and protocol != "simple":
        parts.append(f"USDT probes see the simple protocol only: pgbench's {protocol} statements not seen")
    if scenario == "no_pgss":
        parts.append("pg_stat_statements.track = none: nothing counted")
    if wire:
        shown = [f"{k} {wire[k]:,}" for k in WIRE_SHOWN if k in wire]
        shown += [f"{k} {v:,}" for k, v in wire.items() if k not in WIRE_SHOWN and k in ("unfinished", "tls_connections") and v]
        parts.append("wire: " + ", ".join(shown))
    return "; ".join(parts)


def summarize(results, mixes, protocols, scenarios):
    """One row per (mix, protocol, scenario): the tables' content, and the JSON's summary."""
    rows = []
    for mix in mixes:
        for protocol in protocols:
            base = results.get(("baseline", mix, protocol))
            btps = statistics.median(x["tps"] for x in base) if base else None
            blat = statistics.median(x["lat_ms"] for x in base) if base else None
            bcost = statistics.median(x["cpu_us_per_txn"] for x in base) if base and all("cpu_us_per_txn" in x for x in base) else None
            for s in scenarios:
                rs = results[(s, mix, protocol)]
                row = {"mix": mix, "protocol": protocol, "scenario": s, "runs": len(rs),
                       "tps": spread([x["tps"] for x in rs]), "lat_ms": spread([x["lat_ms"] for x in rs]),
                       "tps_change_pct": None, "tps_loss_pct": None, "lat_change_pct": None,
                       "cpu_pct": None if s in NO_TRACER else spread([x["cpu_pct"] for x in rs]),
                       "captured": None, "expected": None, "completeness_pct": None, "drops": None, "wire": None,
                       "cpu_us_per_txn": spread([x["cpu_us_per_txn"] for x in rs]) if all("cpu_us_per_txn" in x for x in rs) else None,
                       "steal_pct": spread([x["steal_pct"] for x in rs]) if all("steal_pct" in x for x in rs) else None,
                       "cost_change_pct": None}
                if btps and s != "baseline":
                    row["tps_change_pct"] = (row["tps"]["median"] / btps - 1) * 100
                    row["tps_loss_pct"] = -row["tps_change_pct"]
                    row["lat_change_pct"] = (row["lat_ms"]["median"] / blat - 1) * 100
                    if bcost and row["cpu_us_per_txn"]:
                        row["cost_change_pct"] = (row["cpu_us_per_txn"]["median"] / bcost - 1) * 100
                if rs[0].get("captured") is not None:
                    row["captured"] = sum(x["captured"] for x in rs)
                    row["expected"] = sum(x["expected"] for x in rs)
                    row["completeness_pct"] = row["captured"] / row["expected"] * 100 if row["expected"] else None
                if "drops" in rs[0]:
                    row["drops"] = sum(x.get("drops", 0) for x in rs)
                if any("wire" in x for x in rs):
                    keys = sorted({k for x in rs for k in x.get("wire", {})})
                    row["wire"] = {k: sum(x.get("wire", {}).get(k, 0) for x in rs) for k in keys}
                row["note"] = note(s, protocol, row["wire"])
                rows.append(row)
    return rows


def fmt_range(r, f="{:,.0f}"):
    return f"{f.format(r['median'])} ({f.format(r['min'])}–{f.format(r['max'])})"


def fmt_pct(v):
    return "" if v is None else f"{v:+.1f}%"


def print_tables(rows, mixes, protocols):
    for mix in mixes:
        for protocol in protocols:
            _, per_tx = MIXES[mix]
            print(f"\n### {mix} ({per_tx} statement{'s' if per_tx > 1 else ''} per transaction), -M {protocol}\n")
            print("| scenario | TPS | Δ TPS vs baseline (< 0: loss) | machine CPU µs/txn | Δ cost vs baseline | steal % | latency ms | Δ latency | tracer CPU % | captured / executed | drops | notes |")
            print("|---|---|---|---|---|---|---|---|---|---|---|---|")
            for r in (r for r in rows if r["mix"] == mix and r["protocol"] == protocol):
                cap = ""
                if r["captured"] is not None:
                    got, want = r["captured"], r["expected"]
                    cap = f"{got:,} / {want:,} ({r['completeness_pct']:.2f}%)" if want else "-"
                cpu = "" if r["cpu_pct"] is None else fmt_range(r["cpu_pct"], "{:.1f}")
                drops = "" if r["drops"] is None else f"{r['drops']:,}"
                cost = "" if r.get("cpu_us_per_txn") is None else fmt_range(r["cpu_us_per_txn"], "{:.1f}")
                steal = "" if r.get("steal_pct") is None else fmt_range(r["steal_pct"], "{:.1f}")
                print(f"| {r['scenario']} | {fmt_range(r['tps'])} | {fmt_pct(r['tps_change_pct'])} | {cost} | {fmt_pct(r.get('cost_change_pct'))} | {steal} | {fmt_range(r['lat_ms'], '{:.3f}')} | "
                      f"{fmt_pct(r['lat_change_pct'])} | {cpu} | {cap} | {drops} | {r['note']} |")


def write_json(path, meta, runs, rows):
    """Every run and the tables' rows; written whole to a temp file, then renamed."""
    if os.path.dirname(path):
        os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path + ".tmp", "w") as f:
        json.dump({"meta": meta, "runs": runs, "summary": rows}, f, indent=1)
        f.write("\n")
    os.replace(path + ".tmp", path)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 epilog="Scenarios, mixes, protocols and how completeness is counted: see the script's docstring.")
    ap.add_argument("--ebql", default=os.path.expanduser("~/.cache/ebql/target/release/ebql"))
    ap.add_argument("--ebql-b", help="the binary of the wire_b scenario (wire_persist): an A/B of two builds")
    ap.add_argument("--quick", action="store_true", help="smoke run: scale 1, 3 s, 1 round (unless given)")
    ap.add_argument("--seconds", type=int, help="measured per run (default 20)")
    ap.add_argument("--rounds", type=int, help="default 3")
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--scale", type=int, help="pgbench -i scale (default 10)")
    ap.add_argument("--scenarios", default=",".join(SCENARIOS), help=f"of {', '.join(SCENARIOS + EXTRA)}")
    ap.add_argument("--mixes", default="read,write", help=f"of {', '.join(MIXES)}")
    ap.add_argument("--protocol", default="simple", help=f"pgbench -M, a comma list of {', '.join(PROTOCOLS)}")
    ap.add_argument("--json", metavar="PATH", help="also write every run and the tables' rows as JSON here")
    a = ap.parse_args()
    for k, quick, full in (("seconds", 3, 20), ("rounds", 1, 3), ("scale", 1, 10)):
        if getattr(a, k) is None:
            setattr(a, k, quick if a.quick else full)
    if not os.path.exists(a.ebql):
        raise SystemExit(f"no ebql binary at {a.ebql} (--ebql PATH)")
    scenarios, mixes, protocols = a.scenarios.split(","), a.mixes.split(","), a.protocol.split(",")
    unknown = set(scenarios) - set(SCENARIOS + EXTRA) | set(mixes) - set(MIXES) | set(protocols) - set(PROTOCOLS)
    if unknown:
        raise SystemExit(f"unknown scenario, mix or protocol: {', '.join(sorted(unknown))} (scenarios: {', '.join(SCENARIOS + EXTRA)}; "
                         f"mixes: {', '.join(MIXES)}; protocols: {', '.join(PROTOCOLS)})")
    if any(s.startswith("wire") for s in scenarios):
        check_wire(a.ebql)
    load_before = os.getloadavg()
    tmp = tempfile.mkdtemp(prefix="ebql-dbtrace-")
    server = Server(tmp, 30000 + os.getpid() % 20000)
    results = {(s, m, p): [] for s in scenarios for m in mixes for p in protocols}
    runs, query = [], None
    meta = {"started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "argv": sys.argv, "ebql": a.ebql,
            "clients": a.clients, "scale": a.scale, "seconds": a.seconds, "rounds": a.rounds,
            "mixes": mixes, "protocols": protocols, "scenarios": scenarios, "wire_query": WIRE,
            "kernel": os.uname().release, "cpus": os.cpu_count(), "load_before": load_before}
    try:
        if server.sql("SHOW pg_stat_statements.track_utility") != "on":
            raise SystemExit("pg_stat_statements.track_utility is off: BEGIN and END would not be counted")
        meta["postgres"] = server.sql("SHOW server_version")
        server.sql("CREATE ROLE bench LOGIN SUPERUSER")
        server.sql("CREATE DATABASE bench OWNER bench")
        subprocess.run(["pgbench", "-i", "-q", "-s", str(a.scale), *server.conn("bench", "bench")], check=True, capture_output=True)
        server.sql("CREATE EXTENSION pg_stat_statements")  # in the control database; its counts cover the server
        for name, text in (("read.sql", READ_SQL), ("write.sql", WRITE_SQL)):
            with open(f"{tmp}/{name}", "w") as f:
                f.write(text)
        # Warm the caches (shared buffers, page cache) before the first measured run.
        subprocess.run(["pgbench", "-n", "-M", "simple", "-c", str(a.clients), "-j", str(JOBS), "-T", str(max(5, a.seconds // 2)),
                        "-D", f"naccounts={a.scale * 100000}", "-f", f"{tmp}/read.sql@1", "-f", f"{tmp}/write.sql@1",
                        *server.conn("bench", "bench")], check=True, capture_output=True)
        if set(scenarios) & {"ebql_active", "ebql_process", "ebql_persist"}:
            query = meta["usdt_query"] = choose_query(a.ebql, server)
        for rnd in range(a.rounds):
            for mix in rotated(mixes, rnd):
                for protocol in rotated(protocols, rnd):
                    for s in rotated(scenarios, rnd):
                        r = run(a, server, s, mix, protocol, tmp, query)
                        print(f"round {rnd + 1} {mix} {protocol} {s}: {json.dumps(r)}", file=sys.stderr, flush=True)
                        results[(s, mix, protocol)].append(r)
                        runs.append({"round": rnd + 1, "mix": mix, "protocol": protocol, "scenario": s, **r})
                        if a.json:
                            write_json(a.json, {**meta, "complete": False}, runs, [])
    finally:
        server.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    rows = summarize(results, mixes, protocols, scenarios)
    meta.update(complete=True, load_after=os.getloadavg())
    if a.json:
        write_json(a.json, meta, runs, rows)
    if query:
        print(f"eBQL USDT query (ebql_*): `{query}`\n")
    if any(s.startswith("wire") for s in scenarios):
        print(f"eBQL wire query (wire_*): `{WIRE}`\n")
    print(f"load average (1, 5, 15 min) before {load_before}, after {meta['load_after']}\n")
    print(f"ebql: {a.ebql}; PostgreSQL {meta['postgres']}; {a.clients} clients, scale {a.scale}, {a.seconds} s measured per run, "
          f"{a.rounds} rounds; median (min–max); every scenario but no_pgss runs with pg_stat_statements counting"
          + (f"; runs in {a.json}" if a.json else ""))
    print_tables(rows, mixes, protocols)


if __name__ == "__main__":
    main()
