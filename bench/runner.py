#!/usr/bin/env python3
"""eBQL evaluation suite runner (stdlib only). Entry point: bench/run.sh.

Runs every variant (none, empty, standard, standard-nw, hand, bpftrace, ebql; the
pair scenario's hand-pair, bpftrace-pair, ebql-pair...; the sketch-cost ebql-* queries)
alongside a workload whose pid is known before its first event (FIFO gate),
in interleaved rounds with the variant order rotated each round, and reports
medians with min-max. See bench/README.md.
"""
from __future__ import annotations

import argparse
import ctypes
import datetime as dt
import json
import math
import os
import platform
import re
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
HOME = Path.home()
CACHE = Path(os.environ.get("EBQL_BENCH_CACHE", HOME / ".cache/ebql/bench"))
WORKLOAD = Path(os.environ.get("EBQL_WORKLOAD", HOME / ".cache/ebql/target-workload/release/ebql-workload"))
LOADER = Path(os.environ.get("EBQL_BENCH_LOADER", CACHE / "bench_loader"))


def _resolve_ebql():
    """(path, note): $EBQL, else a release build, else a debug build (with a note)."""
    if os.environ.get("EBQL"):
        p = Path(os.environ["EBQL"])
    else:
        dirs = [Path(d) for d in (os.environ.get("CARGO_TARGET_DIR"),) if d] + [HOME / ".cache/ebql/target"]
        cands = [d / "release/ebql" for d in dirs] + [d / "debug/ebql" for d in dirs]
        p = next((c for c in cands if c.is_file()), cands[0])
    note = None
    if "debug" in p.parts:
        note = ("debug build of ebql (no release build found): the BPF programs are the same as a release "
                "build's, so probe ns are representative; manager CPU and startup are not")
    return p, note


EBQL, EBQL_NOTE = _resolve_ebql()

ALL_VARIANTS = ["none", "empty", "standard", "standard-nw", "hand", "bpftrace", "ebql"]
TRACEPOINT = "tracepoint/syscalls/sys_enter_pread64"
FIG12 = ("SELECT fd, cpu, COUNT(*), MAX(count), AVG(count) FROM " + TRACEPOINT +
         " GROUP BY fd, cpu WHERE {where} WINDOW(time, 1000, 1000);")
FILTER4 = "pid == {pid} AND fd > 2 AND count >= 64 AND count <= 4096"
BPFTRACE_SCRIPT = """BEGIN {{ printf("bench: attached\\n"); }}
tracepoint:syscalls:sys_enter_pread64 /pid == {pid}/ {{
  @count[args->fd, cpu] = count();
  @max[args->fd, cpu] = max(args->count);
  @avg[args->fd, cpu] = avg(args->count);
}}
interval:s:1 {{ print(@count); print(@max); print(@avg); clear(@count); clear(@max); clear(@avg); }}
END {{ print(@count); print(@max); print(@avg); clear(@count); clear(@max); clear(@avg); }}
"""
# The pairing scenario (issue 7): pread64 latency per fd, enter/exit joined on the thread.
PAIR_FROM = ("FROM tracepoint:syscalls:sys_enter_pread64 AS e "
             "JOIN tracepoint:syscalls:sys_exit_pread64 AS x ON e.tid = x.tid "
             "WHERE e.pid = {pid} GROUP BY e.fd WINDOW(time, 1000, 1000)")
PAIR_QUERIES = {
    "ebql-pair": "SELECT e.fd, HIST(x.time - e.time) AS lat_ns, COUNT(*) " + PAIR_FROM,
    "ebql-pair-sum": "SELECT e.fd, COUNT(*), SUM(x.time - e.time) AS lat_sum_ns " + PAIR_FROM,
}
BPFTRACE_PAIR_SCRIPT = """BEGIN {{ printf("bench: attached\\n"); }}
tracepoint:syscalls:sys_enter_pread64 /pid == {pid}/ {{ @start[tid] = nsecs; @fd[tid] = args->fd; }}
tracepoint:syscalls:sys_exit_pread64 /@start[tid]/ {{
  @lat[@fd[tid]] = hist(nsecs - @start[tid]);
  delete(@start[tid]);
  delete(@fd[tid]);
}}
interval:s:1 {{ print(@lat); clear(@lat); }}
END {{ print(@lat); clear(@lat); clear(@start); clear(@fd); }}
"""
PAIR_VARIANTS = ["none", "hand-pair", "hand-pair-hash", "bpftrace-pair", "ebql-pair", "ebql-pair-sum"]
# Update cost of an in-kernel sketch vs a plain COUNT(*) (every query also counts, for exactness).
SKETCH_FROM = " FROM " + TRACEPOINT + " GROUP BY fd WHERE pid == {pid} WINDOW(time, 1000, 1000);"
SKETCH_QUERIES = {
    "ebql-count": "SELECT fd, COUNT(*)" + SKETCH_FROM,
    "ebql-quantile": "SELECT fd, COUNT(*), approx_percentile_cont(count, 0.99)" + SKETCH_FROM,
    "ebql-hll": "SELECT fd, COUNT(*), approx_distinct(pos)" + SKETCH_FROM,
    "ebql-hist": "SELECT fd, COUNT(*), HIST(count)" + SKETCH_FROM,
    # approx_top_k's Space-Saving summary: its best case (one size, a hit in
    # the first entry), its worst (131,072 random offsets: every event
    # misses a full summary and scans its m = 40 entries twice) and the
    # worst at k = 64 (m = 128, the cap).
    "ebql-topk": "SELECT fd, COUNT(*), approx_top_k(count, 10)" + SKETCH_FROM,
    "ebql-topk-miss": "SELECT fd, COUNT(*), approx_top_k(pos, 10)" + SKETCH_FROM,
    "ebql-topk64-miss": "SELECT fd, COUNT(*), approx_top_k(pos, 64)" + SKETCH_FROM,
}
SKETCH_VARIANTS = ["none", "ebql-count", "ebql-quantile", "ebql-hll", "ebql-hist",
                   "ebql-topk", "ebql-topk-miss", "ebql-topk64-miss"]
# Figure 2 ring buffer: 1024 records of 32 bytes. The no-wakeup variant needs
# room for one 5 ms consumer period at several million events/s.
STANDARD_RB = 1024 * 32
STANDARD_NW_RB = 4 << 20
PROG_TYPES_TRACE = {5, 17, 26}  # tracepoint, raw_tracepoint, tracing

_libc = ctypes.CDLL(None, use_errno=True)


def _die_with_parent():
    # PR_SET_PDEATHSIG: children (probe managers, workloads) never outlive the runner.
    _libc.prctl(1, signal.SIGTERM, 0, 0, 0)


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# --------------------------------------------------------------------------
# process helpers
# --------------------------------------------------------------------------

class Proc:
    """A child with line readers on stdout/stderr, timestamps and rusage."""

    def __init__(self, argv, name, attached_re=None, stdin=subprocess.DEVNULL, env=None):
        self.name = name
        self.argv = [str(a) for a in argv]
        self.lines = {"out": [], "err": []}
        self.attached = threading.Event()
        self.attached_at = None
        self.ready = threading.Event()
        self.ready_line = None
        self.attached_re = re.compile(attached_re) if attached_re else None
        self.t_start = time.monotonic()
        self.p = subprocess.Popen(self.argv, stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  preexec_fn=_die_with_parent, env=env)
        self.pid = self.p.pid
        self.rusage = None
        self.returncode = None
        self.threads = [threading.Thread(target=self._read, args=(self.p.stdout, "out"), daemon=True),
                        threading.Thread(target=self._read, args=(self.p.stderr, "err"), daemon=True)]
        for t in self.threads:
            t.start()

    def _read(self, f, key):
        for raw in iter(f.readline, b""):
            now = time.monotonic()
            line = raw.decode("utf-8", "replace").rstrip("\n")
            self.lines[key].append(line)
            if key == "out" and self.ready_line is None and line.startswith("ready "):
                self.ready_line = line
                self.ready.set()
            if self.attached_re and not self.attached.is_set() and self.attached_re.search(line):
                self.attached_at = now
                self.attached.set()
        f.close()

    def poll(self):
        if self.returncode is None:
            pid, status, ru = os.wait4(self.pid, os.WNOHANG)
            if pid == self.pid:
                self._reaped(status, ru)
        return self.returncode

    def _reaped(self, status, ru):
        self.returncode = os.waitstatus_to_exitcode(status)
        self.p.returncode = self.returncode
        self.rusage = ru
        for t in self.threads:
            t.join(timeout=5)

    def wait(self, timeout=None):
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                return None
            time.sleep(0.02)
        return self.returncode

    def send(self, sig):
        if self.returncode is None:
            try:
                os.kill(self.pid, sig)
            except ProcessLookupError:
                pass

    def stop(self, sig=signal.SIGINT, timeout=15.0):
        self.send(sig)
        if self.wait(timeout) is None:
            self.send(signal.SIGKILL)
            self.wait(5)
        return self.returncode

    def cpu_seconds(self):
        return (self.rusage.ru_utime + self.rusage.ru_stime) if self.rusage else None

    def stderr_tail(self, n=5):
        return " | ".join(self.lines["err"][-n:])


def prog_stats_from_fdinfo(pid):
    """Sums run_cnt/run_time_ns over the tracing programs whose fds `pid` holds."""
    cnt = ns = 0
    found = False
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return None
    for fd in fds:
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}") != "anon_inode:bpf-prog":
                continue
            info = {}
            with open(f"/proc/{pid}/fdinfo/{fd}") as f:
                for line in f:
                    k, _, v = line.partition(":")
                    info[k.strip()] = v.strip()
        except OSError:
            continue
        if int(info.get("prog_type", "-1")) in PROG_TYPES_TRACE:
            found = True
            cnt += int(info.get("run_cnt", 0))
            ns += int(info.get("run_time_ns", 0))
    return {"bpf_run_cnt": cnt, "bpf_run_time_ns": ns} if found else None


def parse_stats(lines):
    for line in reversed(lines):
        m = re.match(r"^\s*[\w.-]+: stats (\{.*\})\s*$", line)
        if m:
            try:
                return json.loads(m.group(1))
            except json.JSONDecodeError:
                return None
    return None


def count_key(row):
    return [k for k in row if k.lower().startswith("count(")]


def row_fd(row):
    """The row's fd column: `fd`, or a qualified `<alias>.fd` (joins)."""
    if "fd" in row:
        return row["fd"]
    return next((v for k, v in row.items() if k.endswith(".fd")), None)


def counted_rows(lines):
    """(row, its count(...) column names) of each NDJSON row that has a count column."""
    for line in lines:
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        keys = count_key(row)
        if keys:
            yield row, keys


def histogram_mismatches(lines):
    """Rows whose histogram column (a list of {lo, hi, count} buckets) does not sum to the row's count.

    (approx_top_k's {value, count, error} lists are no histograms: they hold k values only.)"""
    bad = 0
    for row, keys in counted_rows(lines):
        n = row[keys[0]]
        for v in row.values():
            if isinstance(v, list) and v and all(isinstance(b, dict) and "count" in b and "lo" in b for b in v):
                if sum(int(b["count"]) for b in v) != n:
                    bad += 1
    return bad


def parse_ndjson_rows(lines):
    """Per-fd totals of the count(...) columns of NDJSON rows."""
    per_fd, rows = {}, 0
    for row, keys in counted_rows(lines):
        rows += 1
        fd = row_fd(row)
        try:
            fd = int(fd)
        except (TypeError, ValueError):
            pass
        per_fd[fd] = per_fd.get(fd, 0) + sum(int(row[k]) for k in keys if row[k] is not None)
    return per_fd, rows


def parse_bpftrace_rows(lines):
    per_fd, prints = {}, 0
    for line in lines:
        try:
            obj = json.loads(line)
        except json.JSONDecodeError:
            continue
        if not isinstance(obj, dict):
            continue
        data = obj.get("data") or {}
        if obj.get("type") == "map" and "@count" in data:
            prints += 1
            for key, n in data["@count"].items():
                fd = int(str(key).split(",")[0])
                per_fd[fd] = per_fd.get(fd, 0) + int(n)
        elif obj.get("type") == "hist" and "@lat" in data:
            # the pair script: its pair count is the sum of the histogram's buckets
            prints += 1
            for key, buckets in data["@lat"].items():
                fd = int(str(key).split(",")[0])
                per_fd[fd] = per_fd.get(fd, 0) + sum(int(b["count"]) for b in buckets)
    return per_fd, prints


# --------------------------------------------------------------------------
# variants
# --------------------------------------------------------------------------

def ebql_available():
    return EBQL.is_file() and os.access(EBQL, os.X_OK)


def manager_argv(variant, pid, duration, where=None):
    """(argv, attached regex, kind) for a probe-managing process filtering to `pid`."""
    if variant == "empty":
        return [LOADER, "empty", "--pid", pid], r"attached", "loader"
    if variant == "standard":
        return [LOADER, "standard", "--pid", pid, "--rb-bytes", STANDARD_RB], r"attached", "loader"
    if variant == "standard-nw":
        return ([LOADER, "standard", "--pid", pid, "--rb-bytes", STANDARD_NW_RB, "--no-wakeup"],
                r"attached", "loader")
    if variant == "hand":
        return [LOADER, "hand", "--pid", pid], r"attached", "loader"
    if variant == "hand-f4":
        return [LOADER, "hand-f4", "--pid", pid], r"attached", "loader"
    if variant == "bpftrace":
        return (["bpftrace", "-f", "json", "-e", BPFTRACE_SCRIPT.format(pid=pid)],
                r"bench: attached", "bpftrace")
    if variant == "hand-pair":
        return [LOADER, "pair-ts", "--pid", pid], r"attached", "loader"
    if variant == "hand-pair-hash":
        return [LOADER, "pair-hash", "--pid", pid], r"attached", "loader"
    if variant == "bpftrace-pair":
        return (["bpftrace", "-f", "json", "-e", BPFTRACE_PAIR_SCRIPT.format(pid=pid)],
                r"bench: attached", "bpftrace")
    if variant in PAIR_QUERIES or variant in SKETCH_QUERIES:
        sql = {**PAIR_QUERIES, **SKETCH_QUERIES}[variant].format(pid=pid)
        # --bpf-stats: the probe ns/event columns come from the query's own bpf_stats line
        return ([EBQL, "query", "--bpf-stats", "--format", "json", "--duration", str(int(math.ceil(duration))), sql],
                r"ebql: attached", "ebql")
    if variant in ("ebql", "ebql-f4"):
        where = where or (FILTER4.format(pid=pid) if variant == "ebql-f4" else f"pid == {pid}")
        return ([EBQL, "query", "--bpf-stats", "--format", "json", "--duration", str(int(math.ceil(duration))),
                 FIG12.format(where=where)], r"ebql: attached", "ebql")
    raise ValueError(variant)


_SUPPORT: dict = {}
# A part of the plan `explain` says runs in user space (the query then streams every event).
_USER_SPACE_RE = re.compile(r"^(?=\S)[^\n]*?\b(?:Aggregate|Join|Filter)\b[^\n]*\bin user space\b[^\n]*", re.M)
_MAP_RE = re.compile(r"^map (\S+): (\w+) key (\d+) B, value (\d+) B, (\d+) entries", re.M)


def ebql_support(variant):
    """Whether this ebql build runs `variant`'s query (PAIR_QUERIES, SKETCH_QUERIES) in the kernel.

    Returns {"ok": bool, "why": str, "maps": [(name, type, key B, value B, entries)]}, from
    `ebql explain` (cached): exit code 2 (a query this build rejects) or a plan part that
    `explain` places in user space means "not supported by this build"; any other failure
    is reported as an error of the variant."""
    if variant in _SUPPORT:
        return _SUPPORT[variant]
    sql = {**PAIR_QUERIES, **SKETCH_QUERIES}[variant].format(pid=1)
    try:
        out = subprocess.run([EBQL, "explain", sql], capture_output=True, text=True, timeout=120)
        code, text, err = out.returncode, out.stdout, out.stderr
    except (OSError, subprocess.TimeoutExpired) as e:
        code, text, err = -1, "", str(e)
    res = {"ok": False, "why": "", "maps": [(m[0], m[1], int(m[2]), int(m[3]), int(m[4]))
                                             for m in _MAP_RE.findall(text)]}
    first_err = next((ln.strip() for ln in err.splitlines() if "error" in ln.lower()), err.strip()[:200])
    if code == 2 or re.search(r"not supported|unsupported|invalid function|not implemented", err, re.I):
        res["why"] = f"not supported by this build: {first_err}"
    elif code != 0:
        res["why"] = f"ebql explain failed (exit {code}): {first_err}"
        res["error"] = True
    elif (m := _USER_SPACE_RE.search(text)):
        res["why"] = f"not supported by this build in the kernel (explain: {m.group(0).strip()[:240]})"
    else:
        res["ok"] = True
    _SUPPORT[variant] = res
    return res


class Gate:
    def __init__(self, tmp):
        self.path = Path(tmp) / "gate"
        if self.path.exists():
            self.path.unlink()
        os.mkfifo(self.path)

    def open(self, timeout=30.0):
        # Opening the write end blocks until the workload has the read end open.
        res = {}

        def _w():
            try:
                fd = os.open(self.path, os.O_WRONLY)
                os.write(fd, b"x")
                os.close(fd)
                res["ok"] = True
            except OSError as e:
                res["err"] = e

        t = threading.Thread(target=_w, daemon=True)
        t.start()
        t.join(timeout)
        if not res.get("ok"):
            raise RuntimeError(f"gate: workload never opened the FIFO ({res.get('err')})")


# --------------------------------------------------------------------------
# workloads
# --------------------------------------------------------------------------

class PreadMicro:
    name = "pread"

    def __init__(self, seconds, threads=2, size=128):
        self.seconds, self.threads, self.size = seconds, threads, size

    def argv(self, gate):
        return [WORKLOAD, "pread-loop", "--threads", self.threads, "--seconds", self.seconds,
                "--size", self.size, "--gate", gate]

    def describe(self):
        return (f"ebql-workload pread-loop --threads {self.threads} --seconds {self.seconds} "
                f"--size {self.size} --gate FIFO")

    def prepare_round(self):
        pass

    def expected_seconds(self):
        return self.seconds

    def parse(self, lines):
        per_fd, tot = {}, None
        for line in lines:
            m = re.match(r"^fd (\d+) ops (\d+) bytes (\d+)$", line)
            if m:
                per_fd[int(m.group(1))] = int(m.group(2))
            m = re.match(r"^total_ops (\d+) seconds ([\d.]+) ops_per_sec ([\d.]+)$", line)
            if m:
                tot = (int(m.group(1)), float(m.group(2)), float(m.group(3)))
        if tot is None:
            raise RuntimeError("workload printed no total_ops line")
        return {"ops": tot[0], "seconds": tot[1], "throughput": tot[2], "ref_per_fd": per_fd,
                "ref_total": tot[0], "events_per_sec": tot[2], "threads": self.threads}


class RocksDB:
    name = "rocksdb"

    def __init__(self, num, reads, threads=2, value_size=128, quick=False):
        self.num, self.reads, self.threads, self.value_size = num, reads, threads, value_size
        self.dir = CACHE / f"rocksdb-{num}-{value_size}"
        self.db = self.dir / "db"
        self.reference = None
        self.cal_seconds = None
        self.quick = quick

    def common(self):
        return ["--db=" + str(self.db), f"--num={self.num}", "--key_size=16",
                f"--value_size={self.value_size}", "--compression_type=none", "--seed=42"]

    def read_args(self):
        # cache_size=0: no block cache, every Get reads its data block with pread64
        # from the page cache; with a fixed seed the pread64 sequence is deterministic.
        return ["db_bench", "--benchmarks=readrandom", "--use_existing_db=1", f"--threads={self.threads}",
                f"--reads={self.reads}", "--cache_size=0", "--stats_dump_period_sec=0"] + self.common()

    def argv(self, gate):
        return [WORKLOAD, "gate-exec", "--gate", gate, "--"] + self.read_args()

    def describe(self):
        return "ebql-workload gate-exec --gate FIFO -- " + " ".join(self.read_args())

    def warm(self):
        for f in sorted(self.db.iterdir()):
            if f.is_file():
                with open(f, "rb") as fh:
                    while fh.read(1 << 20):
                        pass

    def prepare(self):
        ok = self.dir / "prepared.ok"
        if not ok.exists():
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir.mkdir(parents=True)
            log(f"rocksdb: preparing DB ({self.num} keys, fillrandom+compact) in {self.db}")
            t = time.monotonic()
            with open(self.dir / "prepare.log", "w") as logf:
                subprocess.run(["db_bench", "--benchmarks=fillrandom,compact", "--disable_wal=1", "--threads=1"]
                               + self.common(), check=True, stdout=logf, stderr=subprocess.STDOUT)
            ok.write_text("ok\n")
            log(f"rocksdb: prepared in {time.monotonic() - t:.1f} s")
        key = f"reads={self.reads} threads={self.threads} cache_size=0 seed=42"
        ref = self.dir / "reference.json"
        data = json.loads(ref.read_text()) if ref.exists() else {}
        if key not in data:
            log(f"rocksdb: counting the reference pread64 calls with strace ({key})")
            self.warm()
            with tempfile.NamedTemporaryFile("r", suffix=".strace") as out:
                t = time.monotonic()
                subprocess.run(["strace", "-f", "-c", "-e", "trace=pread64", "-o", out.name] + self.read_args(),
                               check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                text = open(out.name).read()
                m = re.search(r"^\s*[\d.]+\s+[\d.]+\s+\d+\s+(\d+)\s+(?:\d+\s+)?pread64\s*$", text, re.M)
                if not m:
                    raise RuntimeError("could not parse strace -c output:\n" + text)
                data[key] = {"pread64": int(m.group(1)), "strace_seconds": time.monotonic() - t}
            ref.write_text(json.dumps(data, indent=1))
        self.reference = data[key]["pread64"]

    def prepare_round(self):
        self.warm()  # keep the DB files resident (the VM evicts idle page cache)

    def expected_seconds(self):
        return self.cal_seconds or 10.0

    def parse(self, lines):
        for line in lines:
            m = re.match(r"^readrandom\s*:\s*([\d.]+) micros/op (\d+) ops/sec\s+([\d.]+) seconds\s+(\d+) operations",
                         line)
            if m:
                secs = float(m.group(3))
                return {"ops": int(m.group(4)), "seconds": secs, "throughput": float(m.group(2)),
                        "ref_per_fd": None, "ref_total": self.reference,
                        "events_per_sec": self.reference / secs if secs > 0 else 0.0, "threads": self.threads}
        raise RuntimeError("db_bench printed no readrandom result: " + " | ".join(lines[-5:]))


# --------------------------------------------------------------------------
# one measurement
# --------------------------------------------------------------------------

def run_once(workload, variant, tmp, filter_pid=None, where=None, ebql_stop="sigint"):
    """Runs `workload` with `variant` attached; returns a result dict.

    ebql_stop: "duration" (ebql's --duration spans the run and ebql exits by
    itself) or "sigint" (--duration is an upper bound; ebql is interrupted
    once the workload is done and must flush its open window)."""
    r = {"variant": variant, "workload": workload.name, "error": None}
    if ebql_stop == "duration" and workload.name != "pread":
        ebql_stop = "sigint"  # no fixed length to cover
    gate = Gate(tmp)
    workload.prepare_round()
    wl = Proc(workload.argv(gate.path), "workload")
    mgr = None
    try:
        if not wl.ready.wait(60):
            raise RuntimeError("workload did not print 'ready <pid>': " + wl.stderr_tail())
        pid = int(wl.ready_line.split()[1])
        target = filter_pid if filter_pid is not None else pid
        if variant != "none":
            # ebql's --duration: the whole run for the micro-workload (ebql then ends by itself);
            # an upper bound for RocksDB, where ebql is interrupted once db_bench is done.
            if ebql_stop == "duration":
                dur = math.ceil(workload.expected_seconds() + 2)
            else:
                dur = workload.expected_seconds() * 4 + 20
            argv, attached_re, kind = manager_argv(variant, target, dur, where)
            r["manager_argv"] = " ".join(shlex.quote(str(a)) for a in argv)
            mgr = Proc(argv, variant, attached_re)
            deadline = time.monotonic() + 60
            while not mgr.attached.wait(0.05):
                if mgr.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"{variant}: probe not attached (exit {mgr.returncode}): {mgr.stderr_tail()}")
            r["startup_s"] = mgr.attached_at - mgr.t_start
        gate.open()
        budget = workload.expected_seconds() * 6 + 60
        if wl.wait(budget) is None:
            raise RuntimeError(f"workload did not finish within {budget:.0f} s")
        if wl.returncode != 0:
            raise RuntimeError(f"workload exited {wl.returncode}: {wl.stderr_tail()}")
        r.update(workload.parse(wl.lines["out"] + wl.lines["err"]))
        if mgr is not None:
            snap = prog_stats_from_fdinfo(mgr.pid)
            if kind == "ebql" and ebql_stop == "duration":
                # --duration covers the run: let ebql end by itself (flushing the last window)
                if mgr.wait(workload.expected_seconds() + 30) is None:
                    mgr.stop()
            else:
                if kind == "ebql":
                    time.sleep(0.2)
                mgr.stop(signal.SIGINT)  # must flush the open window and print stats
            r["manager_exit"] = mgr.returncode
            r["manager_cpu_s"] = mgr.cpu_seconds()
            stats = parse_stats(mgr.lines["err"]) or {}
            r["stats"] = stats
            if kind == "bpftrace":
                per_fd, nrows = parse_bpftrace_rows(mgr.lines["out"])
            else:
                per_fd, nrows = parse_ndjson_rows(mgr.lines["out"])
            r["per_fd"] = {str(k): v for k, v in sorted(per_fd.items(), key=lambda kv: str(kv[0]))}
            r["counted"] = sum(per_fd.values())
            r["rows"] = nrows
            r["dropped"] = int(stats.get("events_dropped", 0) or 0)
            cnt, ns = stats.get("bpf_run_cnt"), stats.get("bpf_run_time_ns")
            if not cnt and snap:
                cnt, ns = snap["bpf_run_cnt"], snap["bpf_run_time_ns"]
            r["bpf_run_cnt"], r["bpf_run_time_ns"] = cnt, ns
            r["ns_per_event"] = (ns / cnt) if cnt else None
            if is_pair(variant):
                # both programs' run time per counted pair (foreign pread64 calls included: see runs/pair)
                pairs = r["counted"]
                r["ns_per_pair"] = (ns / pairs) if (pairs and ns) else None
                r["runs_per_pair"] = (cnt / pairs) if (pairs and cnt) else None
                um = [v for k, v in stats.items() if ("unmatched" in k or k in ("replaced_starts", "pending_starts"))
                      and isinstance(v, int) and v >= 0]
                if kind == "ebql" and stats:
                    # ebql's stats line carries the pair_* counters only when one is non-zero
                    um = [int(stats.get(k, 0) or 0) for k in
                          ("pair_ends_without_start", "pair_starts_left", "pair_starts_overwritten")]
                r["unmatched"] = sum(um) if um else None
            if kind != "bpftrace":
                r["hist_bad_rows"] = histogram_mismatches(mgr.lines["out"])
            # CPU the query costs the machine: time in the probe plus the managing process.
            r["total_cpu_s"] = (ns or 0) / 1e9 + (r["manager_cpu_s"] or 0)
            if kind != "bpftrace" and not stats:
                r["warning"] = f"{variant}: no stats line on stderr (exit {mgr.returncode}): {mgr.stderr_tail()}"
            judge_exactness(r, variant, filter_pid is not None)
    except Exception as e:  # noqa: BLE001 - reported per run
        r["error"] = str(e)
    finally:
        for p in (mgr, wl):
            if p is not None and p.returncode is None:
                p.stop(signal.SIGKILL, 5)
    return r


def is_pair(variant):
    return variant.endswith("-pair") or "-pair-" in variant


def judge_exactness(r, variant, untraced):
    """Sets r['exact'] (per-fd totals equal the workload's own counts) and r['check']."""
    counted, ref = r["counted"], r.get("ref_total")
    if variant == "empty" or variant.endswith("-empty"):
        # Hooks with programs that count nothing (`empty`, `ebql … --attach-only`): no result to judge.
        r["exact"], r["check"] = None, "ok"
        return
    if untraced:
        r["exact"] = counted == 0
        r["check"] = "ok" if counted == 0 else f"counted {counted} events of an untraced process"
        return
    ref_fd = r.get("ref_per_fd")
    got = {int(k) if str(k).lstrip("-").isdigit() else k: v for k, v in r["per_fd"].items()}
    if ref_fd is not None:
        exact = got == {k: v for k, v in ref_fd.items() if v}
    else:
        exact = counted == ref
    r["exact"] = exact
    if variant.startswith("standard"):
        ok = counted + r["dropped"] == ref
        r["check"] = "ok" if ok else f"received {counted} + dropped {r['dropped']} != {ref}"
    elif variant.startswith("bpftrace"):
        # bpftrace's clear() deletes keys one by one while the probe keeps updating them: a key
        # it misses is printed again in the next window (seen: +5% and +44% of a 1 s run), and
        # events between a print and its clear are lost. So its totals are inexact by design;
        # what this checks is our parser of its output: every fd found, and a total no lower
        # than the lost window switches allow and no higher than every event counted twice.
        fds_ok = ref_fd is None or set(got) == {k for k, v in ref_fd.items() if v}
        ok = bool(ref) and fds_ok and 0.9 * ref <= counted <= 2 * ref
        r["check"] = "ok" if ok else (f"counted {counted} on fds {sorted(map(str, got))} vs {ref} "
                                      f"on {sorted(map(str, ref_fd or {}))} (parser broken?)")
    else:
        r["check"] = "ok" if exact else f"counted {counted} {r['per_fd']} != reference {ref} {ref_fd or ''}"
    if r.get("hist_bad_rows"):
        r["check"] = f"{r['hist_bad_rows']} rows whose histogram buckets do not sum to their count"


# --------------------------------------------------------------------------
# experiments
# --------------------------------------------------------------------------

def interleaved(workload, variants, rounds, tmp, label, **kw):
    results = []
    for rd in range(rounds):
        order = variants[rd % len(variants):] + variants[:rd % len(variants)]
        for v in order:
            r = run_once(workload, v, tmp, **kw)
            r["round"] = rd
            r["experiment"] = label
            results.append(r)
            log(f"[{label} round {rd + 1}/{rounds}] {short(r)}")
    return results


def short(r):
    if r.get("error"):
        return f"{r['variant']:<12} ERROR {r['error']}"
    s = f"{r['variant']:<12} {r['throughput']:>12,.0f} ops/s"
    if r["variant"] != "none":
        ns = r.get("ns_per_event")
        s += f"  {ns:6.1f} ns/ev" if ns else "        - ns/ev"
        if r.get("ns_per_pair"):
            s += f"  {r['ns_per_pair']:6.1f} ns/pair"
        cpu = r.get("manager_cpu_s")
        s += f"  mgr {cpu:5.2f} s" if cpu is not None else ""
        s += f"  counted {r['counted']:,}/{r['ref_total']:,}  dropped {r['dropped']:,}  {r['check']}"
    return s


def measure_startup(tool, n, tmp):
    """Seconds from spawning the tool with the query text to 'attached' (pid filter: ours)."""
    out = []
    pid = os.getpid()
    for _ in range(n):
        argv, attached_re, _ = manager_argv(tool, pid, 30)
        p = Proc(argv, tool, attached_re)
        ok = p.attached.wait(60)
        if ok:
            out.append(p.attached_at - p.t_start)
        p.stop(signal.SIGINT)
        if not ok:
            return out, f"{tool}: not attached: {p.stderr_tail()}"
    return out, None


def stat(vals):
    vals = [v for v in vals if v is not None]
    if not vals:
        return None
    return {"median": statistics.median(vals), "min": min(vals), "max": max(vals), "n": len(vals)}


def summarize(results, variants, unsupported=None, order=None):
    """Per-variant medians; `unsupported` ({variant: why}) adds rows for variants not run."""
    base = stat([r["throughput"] for r in results if r["variant"] == "none" and not r.get("error")])
    base_rate = stat([r["events_per_sec"] for r in results if r["variant"] == "none" and not r.get("error")])
    rows = []
    for v, why in (unsupported or {}).items():
        rows.append({"variant": v, "runs": 0, "unsupported": why, "errors": []})
    for v in variants:
        rs = [r for r in results if r["variant"] == v]
        good = [r for r in rs if not r.get("error")]
        row = {"variant": v, "runs": len(rs), "errors": [r["error"] for r in rs if r.get("error")]}
        row["throughput"] = stat([r["throughput"] for r in good])
        row["events_per_sec"] = stat([r.get("events_per_sec") for r in good])
        if base and row["throughput"]:
            row["overhead_pct"] = stat([100.0 * (1 - r["throughput"] / base["median"]) for r in good])
        row["ns_per_event"] = stat([r.get("ns_per_event") for r in good])
        row["ns_per_pair"] = stat([r.get("ns_per_pair") for r in good])
        row["runs_per_pair"] = stat([r.get("runs_per_pair") for r in good])
        row["unmatched"] = stat([r.get("unmatched") for r in good])
        if base_rate and base_rate["median"]:
            # wall-clock ns each workload call got slower by (threads run in parallel)
            row["added_ns_per_op"] = stat([1e9 * r.get("threads", 1) * (1 / r["events_per_sec"] - 1 / base_rate["median"])
                                           for r in good if r.get("events_per_sec")])
        row["manager_cpu_s"] = stat([r.get("manager_cpu_s") for r in good])
        row["total_cpu_s"] = stat([r.get("total_cpu_s") for r in good])
        row["dropped"] = stat([r.get("dropped") for r in good])
        row["exact"] = [r.get("exact") for r in good]
        row["checks"] = [r.get("check") for r in good]
        row["warnings"] = [r["warning"] for r in good if r.get("warning")]
        rows.append(row)
    rank = {v: i for i, v in enumerate(order or [])}
    rows.sort(key=lambda row: rank.get(row["variant"], len(rank)))
    return rows


# --------------------------------------------------------------------------
# report
# --------------------------------------------------------------------------

def fmt(s, f="{:,.0f}", rng=True):
    if not s:
        return "-"
    m = f.format(s["median"])
    if rng and s["n"] > 1:
        return f"{m} ({f.format(s['min'])}–{f.format(s['max'])})"
    return m


def exact_cell(row):
    ex = [e for e in row["exact"] if e is not None]
    if row["variant"] == "none":
        return "ref"
    if not ex:
        return "n/a" if row["variant"] == "empty" else "-"
    n = sum(1 for e in ex if e)
    return f"{'yes' if n == len(ex) else 'NO'} ({n}/{len(ex)})"


def table(rows, throughput_label="ops/s", extra_rate=False):
    hdr = f"| variant | {throughput_label} | overhead vs none % |"
    if extra_rate:
        hdr += " pread64/s |"
    hdr += " probe ns/event | manager CPU s | probe+manager CPU s | dropped | exact |"
    lines = [hdr, "|" + "---|" * (hdr.count("|") - 1)]
    for row in rows:
        if row["runs"] and not row["throughput"]:
            lines.append(f"| {row['variant']} | failed: {row['errors'][0][:120] if row['errors'] else '?'} |")
            continue
        if not row["runs"]:
            continue
        cells = [row["variant"], fmt(row["throughput"]),
                 "0 (baseline)" if row["variant"] == "none" else fmt(row.get("overhead_pct"), "{:.1f}")]
        if extra_rate:
            cells.append(fmt(row["events_per_sec"]))
        cells += ["-" if row["variant"] == "none" else fmt(row["ns_per_event"], "{:.0f}"),
                  "-" if row["variant"] == "none" else fmt(row["manager_cpu_s"], "{:.2f}"),
                  "-" if row["variant"] == "none" else fmt(row.get("total_cpu_s"), "{:.2f}"),
                  "-" if row["variant"] == "none" else fmt(row["dropped"]),
                  exact_cell(row)]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def unsupported_or_failed(row):
    """The table row of a variant that produced no numbers, or None."""
    if row.get("unsupported"):
        return f"| {row['variant']} | {row['unsupported'][:200]} |"
    if row["runs"] and not row["throughput"]:
        return f"| {row['variant']} | failed: {row['errors'][0][:120] if row['errors'] else '?'} |"
    return None


def pair_table(rows, throughput_label="ops/s"):
    """The pairing scenario: cost per pair (both programs) and pair-count exactness."""
    hdr = (f"| variant | {throughput_label} | overhead vs none % | added ns per pread64 | probe ns/pair | "
           "probe runs/pair | manager CPU s | unmatched | exact pairs |")
    lines = [hdr, "|" + "---|" * (hdr.count("|") - 1)]
    for row in rows:
        bad = unsupported_or_failed(row)
        if bad:
            lines.append(bad)
        if bad or not row["runs"]:
            continue
        none = row["variant"] == "none"
        cells = [row["variant"], fmt(row["throughput"]),
                 "0 (baseline)" if none else fmt(row.get("overhead_pct"), "{:.1f}"),
                 "-" if none else fmt(row.get("added_ns_per_op"), "{:.0f}"),
                 "-" if none else fmt(row.get("ns_per_pair"), "{:.0f}"),
                 "-" if none else fmt(row.get("runs_per_pair"), "{:.2f}"),
                 "-" if none else fmt(row["manager_cpu_s"], "{:.2f}"),
                 "-" if none else (fmt(row.get("unmatched")) if row.get("unmatched") is not None else "n/a"),
                 exact_cell(row)]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def state_cell(variant):
    """Bytes per group per CPU of the variant's group map(s), from `ebql explain`."""
    maps = _SUPPORT.get(variant, {}).get("maps") or []
    cells = [f"{name} {vb} B" for name, typ, kb, vb, n in maps if typ.lower().startswith("percpu")]
    return ", ".join(cells) or "-"


def sketch_table(rows):
    """Update cost per event of each in-kernel sketch next to a plain COUNT(*)."""
    cnt = next((r["ns_per_event"]["median"] for r in rows
                if r["variant"] == "ebql-count" and r.get("ns_per_event")), None)
    hdr = ("| variant | ops/s | overhead vs none % | added ns per pread64 | probe ns/event | "
           "− ebql-count ns/event | group value per CPU | exact counts |")
    lines = [hdr, "|" + "---|" * (hdr.count("|") - 1)]
    for row in rows:
        bad = unsupported_or_failed(row)
        if bad:
            lines.append(bad)
        if bad or not row["runs"]:
            continue
        none = row["variant"] == "none"
        ns = row.get("ns_per_event")
        cells = [row["variant"], fmt(row["throughput"]),
                 "0 (baseline)" if none else fmt(row.get("overhead_pct"), "{:.1f}"),
                 "-" if none else fmt(row.get("added_ns_per_op"), "{:.0f}"),
                 "-" if none else fmt(ns, "{:.0f}"),
                 "-" if none or not (ns and cnt) else f"{ns['median'] - cnt:+.0f}",
                 "-" if none else state_cell(row["variant"]),
                 exact_cell(row)]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def machine_info():
    cpu = "?"
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = "?"
    try:
        for line in open("/proc/meminfo"):
            if line.startswith("MemTotal"):
                mem = f"{int(line.split()[1]) / 1048576:.1f} GiB"
    except OSError:
        pass

    def ver(argv):
        try:
            out = subprocess.run(argv, capture_output=True, text=True, timeout=10)
            return (out.stdout or out.stderr).strip().splitlines()[0]
        except Exception:  # noqa: BLE001
            return "not available"

    os_name = "?"
    try:
        for line in open("/etc/os-release"):
            if line.startswith("PRETTY_NAME="):
                os_name = line.split("=", 1)[1].strip().strip('"')
    except OSError:
        pass
    return {
        "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "host": platform.node(), "os": os_name, "kernel": platform.release(), "cpu": cpu,
        "cores": os.cpu_count(), "memory": mem,
        "clang": ver(["clang", "--version"]), "bpftool": ver(["bpftool", "version"]),
        "bpftrace": ver(["bpftrace", "--version"]),
        "rocksdb": "rocksdb-tools " + ver(["dpkg-query", "-W", "-f=${Version}", "rocksdb-tools"]),
        "ebql": (f"{EBQL} ({ver([EBQL, '--version'])})" if ebql_available() else f"{EBQL} (missing)"),
        "ebql_note": EBQL_NOTE if ebql_available() else None,
    }


def targets(all_res):
    """The Evaluation issue's targets, checked against this run's medians."""
    def med(key, variant, field):
        for row in all_res.get(key, {}).get("summary", []):
            if row["variant"] == variant and row.get(field):
                return row[field]["median"]
        return None

    rows = []

    def check(what, value, limit, ok, fmt_v="{:.2f}", fmt_l="{:.2f}"):
        if value is None or limit is None:
            return
        rows.append(f"| {what} | {fmt_v.format(value)} | {fmt_l.format(limit)} | {'yes' if ok(value, limit) else '**NO**'} |")

    le = lambda v, l: v <= l  # noqa: E731
    for key, label in (("pread", "pread micro"), ("rocksdb", "RocksDB")):
        e, h, z = med(key, "ebql", "ns_per_event"), med(key, "hand", "ns_per_event"), med(key, "empty", "ns_per_event")
        if e and h:
            check(f"{label}: ebql ns/event ÷ hand ns/event", e / h, 1.05, le)
        if e and h and z and h > z:
            check(f"{label}: (ebql − empty) ÷ (hand − empty) ns/event", (e - z) / (h - z), 1.10, le)
        te, ts, tb = (med(key, v, "total_cpu_s") for v in ("ebql", "standard", "bpftrace"))
        if te and ts:
            check(f"{label}: ebql probe+manager CPU ÷ standard's", te / ts, 0.25, le)
        if te and tb:
            check(f"{label}: ebql probe+manager CPU ÷ bpftrace's", te / tb, 0.5, le)
    st = all_res.get("startup", {}).get("tools", {})
    se, sb = st.get("ebql"), st.get("bpftrace")
    if isinstance(se, dict):
        check("startup: ebql median ms", se["median"] * 1, 50, le, "{:.0f}", "{:.0f}")
        if isinstance(sb, dict):
            check("startup: ebql ÷ bpftrace", se["median"] / sb["median"], 1.0, lambda v, l: v < l)
    e, z = med("untraced", "ebql", "ns_per_event"), med("untraced", "empty", "ns_per_event")
    if e and z:
        check("untraced: ebql − empty ns/event", e - z, 10, le, "{:.1f}", "{:.0f}")
    e4, h4 = med("filter", "ebql-f4", "ns_per_event"), med("filter", "hand-f4", "ns_per_event")
    if e4 and h4:
        check("filter (4 terms): ebql-f4 ÷ hand-f4 ns/event", e4 / h4, 1.05, le)
    for key, label in (("pair", "pair, pread micro"), ("pair-rocksdb", "pair, RocksDB")):
        summ = {row["variant"]: row for row in all_res.get(key, {}).get("summary", [])}
        if not summ:
            continue
        e, h, b = (med(key, v, "ns_per_pair") for v in ("ebql-pair", "hand-pair", "bpftrace-pair"))
        if summ.get("ebql-pair", {}).get("unsupported"):
            rows.append(f"| {label}: ebql-pair | {summ['ebql-pair']['unsupported'][:120]} | - | not measured |")
            continue
        if e and h:
            check(f"{label}: ebql-pair ÷ hand-pair probe ns/pair", e / h, 1.10, le)
        if e and b:
            check(f"{label}: ebql-pair ÷ bpftrace-pair probe ns/pair", e / b, 1 / 3, le)
        ex = [x for x in summ.get("ebql-pair", {}).get("exact", []) if x is not None]
        if ex:
            n = sum(1 for x in ex if x)
            rows.append(f"| {label}: ebql-pair exact pair counts | {n}/{len(ex)} runs | all | "
                        f"{'yes' if n == len(ex) else '**NO**'} |")
    if not rows:
        return []
    return ["## Targets (from the Evaluation issue and issue 7), checked on this run's medians\n",
            "| target | measured | limit | met |", "|---|---|---|---|", *rows, ""]


def report(all_res, args, info, elapsed):
    L = []
    L.append("# eBQL benchmarks\n")
    L.append("Generated by `bench/run.sh" + (" --quick" if args.quick else "") + "` (bench/runner.py); "
             "do not edit by hand. Method and variants: [bench/README.md](bench/README.md).\n")
    L.append("## Machine\n")
    for k in ("date", "os", "kernel", "cpu", "cores", "memory", "clang", "bpftool", "bpftrace", "rocksdb", "ebql"):
        L.append(f"- {k}: {info[k]}")
    if info.get("ebql_note"):
        L.append(f"- **note**: {info['ebql_note']}")
    L.append(f"- suite wall time: {elapsed:.0f} s; kernel.bpf_stats_enabled=1 during all runs "
             "(every variant, including `none`, runs with BPF run-time statistics on)\n")
    L.append("Cells are medians with (min–max) over interleaved rounds (variant order rotated each round). "
             "*probe ns/event* = bpf_stats run_time_ns / run_cnt of the probe's program(s) "
             "(all pread64 calls on the machine, not only the workload's); *manager CPU s* = user+system CPU "
             "of the process that loads the probe and produces the results (getrusage of the child); "
             "*probe+manager CPU s* = bpf_stats run_time_ns of the probe plus the manager CPU, per run; "
             "*exact* = the variant's per-fd totals equal the workload's own counts, in k of n runs.\n")

    def section(title, key, text_before, **tk):
        if key not in all_res:
            return
        L.append(f"## {title}\n")
        L.append(text_before + "\n")
        L.append(table(all_res[key]["summary"], **tk) + "\n")
        notes = all_res[key].get("notes")
        if notes:
            L.extend(f"- {n}" for n in notes)
            L.append("")

    if "pread" in all_res:
        p = all_res["pread"]
        section("pread64 micro-workload", "pread",
                f"`{p['command']}` ({p['rounds']} rounds). Throughput = the workload's own pread64 calls/s. "
                "Query: Figure 12 (`" + FIG12.format(where="pid == <PID>") + "`).")
    if "rocksdb" in all_res:
        p = all_res["rocksdb"]
        section("RocksDB point reads (db_bench readrandom)", "rocksdb",
                f"`{p['command']}` ({p['rounds']} rounds) over a DB made once with "
                f"`fillrandom,compact` ({p['num']} keys, 16-byte keys, 128-byte values, no compression). "
                "No block cache (`--cache_size=0`), so every Get reads its data block with pread64 from the "
                "page cache (DB files re-read right before each run); with the fixed seed the pread64 sequence "
                f"is deterministic: reference = {p['reference']:,} pread64 calls counted once with "
                "`strace -f -c`. Throughput = db_bench Gets/s; pread64/s = reference / db_bench seconds.",
                throughput_label="Gets/s", extra_rate=True)
    if "startup" in all_res:
        s = all_res["startup"]
        L.append("## Startup\n")
        L.append("Time from spawning the tool with the query text to its probes being attached "
                 "(`ebql: attached` on stderr; bpftrace: its BEGIN probe's printf, which runs after "
                 f"attachment), {s['n']} runs each.\n")
        L.append("| tool | median ms (min–max) |\n|---|---|")
        for tool, st in s["tools"].items():
            L.append(f"| {tool} | {fmt(st, '{:.0f}') if isinstance(st, dict) else st} |")
        L.append("")
    section("Untraced overhead", "untraced",
            "The pread micro-workload while the probe's pid filter names another (idle) process: the cost "
            "put on processes a query does not trace (cf. paper 004). *exact* = the variant counted 0 events.")
    section("Filter cost", "filter",
            "The pread micro-workload with a 4-term filter `" + FILTER4.format(pid="<PID>") + "` "
            "(every event passes it): ebql's generated probe vs the same filter hand-written in C "
            "(`hand-f4`, hand.bpf.c built with -DFILTER4); `hand` and `ebql` with the 1-term filter run "
            "in the same rounds for comparison.")
    pair_text = ("Enter/exit pairing (issue 7): the latency histogram of pread64 per fd, `sys_enter_pread64` "
                 "joined to `sys_exit_pread64` on the thread. ebql-pair: `" + PAIR_QUERIES["ebql-pair"]
                 .format(pid="<PID>") + "`; ebql-pair-sum: the same join with `COUNT(*), SUM(x.time - e.time)` "
                 "(the join's cost without HIST); hand-pair / hand-pair-hash: probes/pair.bpf.c (the start in "
                 "task-local storage / in a hash map keyed by tid, bpftrace hist() buckets per fd in a per-CPU hash); "
                 "bpftrace-pair: `@start[tid]`/`@fd[tid]` and `hist(nsecs - @start[tid])`, print-and-clear "
                 "every second (its pair count = the sum of its buckets). *probe ns/pair* = bpf_stats "
                 "run_time_ns of both programs ÷ pairs counted; *probe runs/pair* = run_cnt ÷ pairs "
                 "(2.00 when only the workload calls pread64; more when other processes do); *added ns per "
                 "pread64* = threads × (1/rate − 1/rate of none), the wall-clock time each call got slower; "
                 "*unmatched* = exits without a start plus starts without an exit; *exact pairs* = pairs per "
                 "fd (RocksDB: in total) equal the workload's calls, and every histogram sums to its count.")
    for key, title in (("pair", "Pairing: pread64 latency histogram, pread micro-workload"),
                       ("pair-rocksdb", "Pairing: pread64 latency histogram, RocksDB readrandom")):
        if key in all_res:
            p = all_res[key]
            L.append(f"## {title}\n")
            text = pair_text
            if key == "pair-rocksdb":
                text = ("RocksDB as in its section above (throughput = Gets/s, pread64 rate = reference ÷ "
                        "db_bench seconds). " + ("Variants and columns as in the section above."
                                                 if "pair" in all_res else pair_text))
            L.append(f"`{p['command']}` ({p['rounds']} rounds). " + text + "\n")
            L.append(pair_table(p["summary"], "Gets/s" if key == "pair-rocksdb" else "ops/s") + "\n")
    if "sketch" in all_res:
        p = all_res["sketch"]
        L.append("## Sketch update cost vs COUNT(*)\n")
        L.append(f"`{p['command']}` ({p['rounds']} rounds). Each query groups like the COUNT(*) one and also "
                 "counts (for exactness): " + "; ".join(f"{v}: `{q.format(pid='<PID>')}`"
                                                         for v, q in SKETCH_QUERIES.items()) +
                 ". *− ebql-count* = the sketch's update cost per event over the plain count; *group value "
                 "per CPU* = the per-CPU map value sizes `ebql explain` reports (bytes per group per CPU).\n")
        L.append(sketch_table(p["summary"]) + "\n")
    L.extend(targets(all_res))
    L.append("## Reference figures (this machine, pread micro, medians, from the Evaluation issue)\n")
    L.append("| variant | probe ns/event | overhead |\n|---|---|---|\n| empty | 34 | 20% |\n"
             "| hand (per-CPU) | 67 | 25% |\n| bpftrace | 356 | 42% (print-and-clear lost/double-counted "
             "in some runs) |\n| standard (ring buffer) | 696 | 68% |\n| standard, BPF_RB_NO_WAKEUP | 253 | - |\n")
    L.append("## Commands\n")
    L.append("```\nbench/setup.sh            # apt-get: clang llvm libbpf-dev bpftool bpftrace rocksdb-tools ...\n"
             "bench/run.sh              # full suite (< 15 min), writes BENCHMARKS.md\n"
             "bench/run.sh --quick      # smoke test (~20 s), checks every variant's totals\n```\n")
    L.append("Per-variant probe managers (`<PID>` = the gated workload's pid):\n")
    L.append("```")
    for v in ALL_VARIANTS[1:] + ["hand-f4", "ebql-f4"] + PAIR_VARIANTS[1:] + SKETCH_VARIANTS[1:]:
        argv, _, _ = manager_argv(v, "<PID>", 8)
        L.append(f"{v:<12} " + " ".join(shlex.quote(str(a)).replace(str(HOME), "~") for a in argv))
    L.append("```\n")
    return "\n".join(L)


# --------------------------------------------------------------------------
# main
# --------------------------------------------------------------------------

def runnable(spec, failures):
    """(variants to run, {variant: why not}) of a comma-separated list of pair/sketch variants."""
    run, unsup = [], {}
    for v in [v for v in spec.split(",") if v]:
        if v.startswith("bpftrace") and not shutil.which("bpftrace"):
            unsup[v] = "bpftrace not installed (bench/setup.sh)"
        elif v in PAIR_QUERIES or v in SKETCH_QUERIES:
            if not ebql_available():
                unsup[v] = f"no ebql executable at {EBQL} (set EBQL=/path/to/ebql)"
                continue
            sup = ebql_support(v)
            if sup["ok"]:
                run.append(v)
            else:
                unsup[v] = sup["why"]
                if sup.get("error"):
                    failures.append(f"{v}: {sup['why']}")
        else:
            run.append(v)
    for v, why in unsup.items():
        log(f"bench: {v}: {why}")
    return run, unsup


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="smoke mode: 1 short round, checks totals")
    ap.add_argument("--only", default="pread,rocksdb,startup,untraced,filter,pair,sketch",
                    help="comma-separated experiments (default: all; pair = pread micro and RocksDB)")
    ap.add_argument("--variants", default=",".join(ALL_VARIANTS))
    ap.add_argument("--pair-variants", default=",".join(PAIR_VARIANTS), help="variants of the pair experiment")
    ap.add_argument("--sketch-variants", default=",".join(SKETCH_VARIANTS),
                    help="variants of the sketch experiment")
    ap.add_argument("--rounds", type=int, help="rounds of the pread micro-workload (default 5, quick 1)")
    ap.add_argument("--seconds", type=float, help="pread micro-workload seconds per run (default 5, quick 1)")
    ap.add_argument("--output", help="report path (default: BENCHMARKS.md at the repo root; quick: cache dir)")
    args = ap.parse_args()

    if os.geteuid() != 0:
        sys.exit("bench: must run as root (loads BPF programs)")
    for tool, path in (("ebql-workload", WORKLOAD), ("bench_loader", LOADER)):
        if not Path(path).is_file():
            sys.exit(f"bench: {tool} missing at {path}: run bench/run.sh (it builds them)")
    exps = [e for e in args.only.split(",") if e]
    variants = [v for v in args.variants.split(",") if v]
    if not ebql_available() and "ebql" in variants:
        log(f"bench: SKIPPING variant ebql: no executable at {EBQL} (set EBQL=/path/to/ebql)")
        variants.remove("ebql")
    if not shutil.which("bpftrace") and "bpftrace" in variants:
        log("bench: SKIPPING variant bpftrace: not installed (bench/setup.sh)")
        variants.remove("bpftrace")

    q = args.quick
    rounds = args.rounds or (1 if q else 5)
    seconds = args.seconds or (1.0 if q else 5.0)
    pair_rounds = args.rounds or (1 if q else 3)
    if ebql_available() and EBQL_NOTE:
        log(f"bench: {EBQL}: {EBQL_NOTE}")
    t_suite = time.monotonic()
    stats_path = Path("/proc/sys/kernel/bpf_stats_enabled")
    old_stats = stats_path.read_text().strip()
    stats_path.write_text("1\n")
    if not Path("/sys/kernel/tracing/events").exists():
        subprocess.run(["mount", "-t", "tracefs", "nodev", "/sys/kernel/tracing"], check=False)
    all_res, raw, failures = {}, [], []
    idle = subprocess.Popen(["sleep", "100000"], preexec_fn=_die_with_parent)  # "another pid" for untraced runs
    rocksdb = []

    def rocks():
        """The RocksDB workload, its DB prepared once for all experiments."""
        if not rocksdb:
            wl = RocksDB(num=20000 if q else 1000000, reads=5000 if q else 250000)
            wl.prepare()
            rocksdb.append(wl)
        return rocksdb[0]

    try:
        with tempfile.TemporaryDirectory(prefix="ebql-bench-") as tmp:
            if "pread" in exps:
                wl = PreadMicro(seconds)
                res = interleaved(wl, variants, rounds, tmp, "pread",
                                  ebql_stop=os.environ.get("EBQL_STOP", "duration"))
                raw += res
                all_res["pread"] = {"summary": summarize(res, variants), "command": wl.describe(),
                                    "rounds": rounds}
            if "rocksdb" in exps:
                if not shutil.which("db_bench"):
                    log("bench: SKIPPING rocksdb: db_bench missing (bench/setup.sh installs rocksdb-tools)")
                else:
                    wl = rocks()
                    rv = ["none", "hand"] + (["ebql"] if "ebql" in variants else []) if q else variants
                    res = interleaved(wl, rv, 1 if q else 3, tmp, "rocksdb")
                    raw += res
                    all_res["rocksdb"] = {"summary": summarize(res, rv), "command": wl.describe(),
                                          "rounds": 1 if q else 3, "num": wl.num, "reference": wl.reference}
            if "pair" in exps:
                pv, unsup = runnable(args.pair_variants, failures)
                wl = PreadMicro(seconds)
                res = interleaved(wl, pv, pair_rounds, tmp, "pair",
                                  ebql_stop=os.environ.get("EBQL_STOP", "duration"))
                raw += res
                all_res["pair"] = {"summary": summarize(res, pv, unsup, PAIR_VARIANTS), "command": wl.describe(),
                                   "rounds": pair_rounds}
                if shutil.which("db_bench"):
                    wl = rocks()
                    res = interleaved(wl, pv, pair_rounds, tmp, "pair-rocksdb")
                    raw += res
                    all_res["pair-rocksdb"] = {"summary": summarize(res, pv, unsup, PAIR_VARIANTS),
                                               "command": wl.describe(), "rounds": pair_rounds}
            if "sketch" in exps:
                sv, unsup = runnable(args.sketch_variants, failures)
                wl = PreadMicro(0.5 if q else seconds)
                res = interleaved(wl, sv, 1 if q else 3, tmp, "sketch",
                                  ebql_stop=os.environ.get("EBQL_STOP", "duration"))
                raw += res
                all_res["sketch"] = {"summary": summarize(res, sv, unsup, SKETCH_VARIANTS), "command": wl.describe(),
                                     "rounds": 1 if q else 3}
            if "startup" in exps:
                n = 1 if q else 10
                tools = {}
                for tool in [t for t in ("ebql", "bpftrace") if t in variants]:
                    vals, err = measure_startup(tool, n, tmp)
                    tools[tool] = stat([v * 1000 for v in vals]) if not err else f"failed: {err}"
                    if err:
                        failures.append(err)
                    log(f"[startup] {tool}: {tools[tool]}")
                all_res["startup"] = {"tools": tools, "n": n}
            if "untraced" in exps:
                uv = [v for v in ("none", "empty", "hand", "ebql") if v in variants]
                wl = PreadMicro(0.5 if q else seconds)
                res = interleaved(wl, uv, 1 if q else 3, tmp, "untraced", filter_pid=idle.pid)
                raw += res
                all_res["untraced"] = {"summary": summarize(res, uv)}
            if "filter" in exps:
                fv = ["none", "hand", "hand-f4"] + (["ebql", "ebql-f4"] if "ebql" in variants else [])
                wl = PreadMicro(0.5 if q else seconds)
                res = interleaved(wl, fv, 1 if q else 3, tmp, "filter")
                raw += res
                all_res["filter"] = {"summary": summarize(res, fv)}
    finally:
        stats_path.write_text(old_stats + "\n")
        idle.kill()
        idle.wait()
    elapsed = time.monotonic() - t_suite

    for r in raw:
        if r.get("error"):
            failures.append(f"{r['experiment']}/{r['variant']}: {r['error']}")
        elif r.get("check") not in (None, "ok"):
            failures.append(f"{r['experiment']}/{r['variant']}: {r['check']}")
        if r.get("warning"):
            log("bench: warning: " + r["warning"])
    inexact = sorted({f"{r['experiment']}/{r['variant']}" for r in raw
                      if r.get("exact") is False and r.get("check") == "ok"})
    info = machine_info()
    text = report(all_res, args, info, elapsed)
    if inexact:
        text += ("\nInexact but not broken (lossy by design: ring-buffer drops are counted, bpftrace's "
                 "print-and-clear races): " + ", ".join(inexact) + "\n")
    out = Path(args.output) if args.output else (CACHE / "BENCHMARKS.quick.md" if q else REPO / "BENCHMARKS.md")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    rawp = CACHE / ("results.quick.json" if q else "results.json")
    rawp.write_text(json.dumps({"machine": info, "results": raw, "summary": all_res}, indent=1, default=str))
    print(text)
    log(f"bench: report written to {out}; raw results in {rawp}; {elapsed:.0f} s")
    if failures:
        log("bench: FAILED checks:\n  " + "\n  ".join(failures))
        sys.exit(1)
    log("bench: all variant checks passed")


if __name__ == "__main__":
    main()
