#!/usr/bin/env python3
"""What a probe costs the traced call: hook types (issue 8) and bpf_stats (issue 11).

For each configuration, an `ebql query` with an empty-ish program
(`SELECT COUNT(*) FROM <event> WHERE pid = 1`: the hook, one helper call and
one compare; pid 1 never preads, so the program's event counters, which
come after the pid test, are never reached) runs while `ebql workload
pread-loop` (1 thread, pread64 of 128 bytes from the page cache, started
behind a FIFO gate once the probe is attached) counts its calls per second.
With `--traced` the query selects the workload instead (`pid = <its pid>`):
every call is counted (seen, matched) and aggregated. Configurations are
interleaved round by round; medians are printed, with the added ns per
pread64 call against the run without a probe.

Modes:
  hooks (default)  tracefs tracepoints vs raw/BTF tracepoints (issue 8);
                   `--bpf-stats` runs them with bpf_stats on, as before issue 11.
  --stats          bpf_stats off (the default since issue 11) vs `--bpf-stats`,
                   on `tracepoint:syscalls:sys_enter_pread64`. With
                   `--baseline OLD_EBQL` (a build from before the programs
                   counted their own events, which takes `--no-bpf-stats`), also
                   that build without and with bpf_stats: the difference is
                   what the per-CPU event counter costs. The stats-on runs also
                   report the program's own run time per event (bpf_stats
                   run_time_ns / run_cnt, from the query's stats line): the
                   precise measure of the counter's cost, which is below the
                   throughput noise.

bpf_stats is global: if another process turns it on while a stats-off run is
measured, that run is not what it claims. During each run a sampler checks
/proc/sys/kernel/bpf_stats_enabled (which shows only the sysctl's own
setting) and whether any process holds a BPF_ENABLE_STATS descriptor (every
ebql query did before issue 11); stats-off runs during which either was on
are left out, and the table says how many runs were kept.

usage: bench/hook_cost.py EBQL_BINARY [ROUNDS] [SECONDS] [--traced] [--bpf-stats | --stats [--baseline OLD_EBQL]]
"""
import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import tempfile
import threading
import time

STATS_SYSCTL = "/proc/sys/kernel/bpf_stats_enabled"
PREAD = "tracepoint:syscalls:sys_enter_pread64"

ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
ap.add_argument("ebql")
ap.add_argument("rounds", nargs="?", type=int, default=5)
ap.add_argument("seconds", nargs="?", default="2")
ap.add_argument("--stats", action="store_true", help="bpf_stats off vs on (issue 11)")
ap.add_argument("--baseline", help="--stats: an older ebql whose programs do not count events (takes --no-bpf-stats)")
ap.add_argument("--bpf-stats", action="store_true", help="hooks mode: run the queries with --bpf-stats (as every query had it before issue 11)")
ap.add_argument("--traced", action="store_true", help="the query selects the workload (pid = its pid) instead of pid 1")
args = ap.parse_args()

# (name, binary, event, extra query flags, measured only while bpf_stats is off?)
if args.stats:
    CONFIGS = [("no probe", None, None, [], False),
               ("ebql (default: bpf_stats off)", args.ebql, PREAD, [], True),
               ("ebql --bpf-stats", args.ebql, PREAD, ["--bpf-stats"], False)]
    if args.baseline:
        CONFIGS += [("baseline, no counters, bpf_stats off", args.baseline, PREAD, ["--no-bpf-stats"], True),
                    ("baseline, no counters, bpf_stats on", args.baseline, PREAD, [], False)]
else:
    CONFIGS = [("no probe", None, None, [], False)] + [
        (e, args.ebql, e, ["--bpf-stats"] if args.bpf_stats else [], not args.bpf_stats) for e in (
            PREAD, "tp_btf:raw_syscalls:sys_enter", "tracepoint:raw_syscalls:sys_enter", "raw_tp:raw_syscalls:sys_enter")]


def stats_enabled():
    """bpf_stats is on: set by the sysctl (which shows only its own setting), or
    held by some process through BPF_ENABLE_STATS (an anon_inode:bpf-stats fd)."""
    with open(STATS_SYSCTL) as f:
        if f.read().strip() == "1":
            return True
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                if os.readlink(f"/proc/{pid}/fd/{fd}") == "anon_inode:bpf-stats":
                    return True
        except OSError:
            continue
    return False


def one(binary, event, flags):
    """(pread64/s, CPU ns per pread64, bpf_stats seen on during the workload, ns per program run or None)."""
    gate = os.path.join(tempfile.mkdtemp(prefix="hook-cost-"), "gate")
    os.mkfifo(gate)
    workload = subprocess.Popen([args.ebql, "workload", "pread-loop", "--threads", "1", "--seconds", args.seconds, "--gate", gate],
                                stdout=subprocess.PIPE, text=True)
    pid = int(workload.stdout.readline().split()[1])  # "ready <pid>"
    q = None
    if event:
        q = subprocess.Popen([binary, "query", *flags, f"SELECT COUNT(*) FROM {event} WHERE pid = {pid if args.traced else 1}"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        time.sleep(1.0)  # compiled, loaded and attached
        assert q.poll() is None, f"query on {event} exited: {q.stderr.read()}"
    seen_on, done = [False], threading.Event()

    def sample():  # bpf_stats is global: note whether anyone had it on during the run
        while not done.is_set():
            seen_on[0] |= stats_enabled()
            time.sleep(0.2)  # a scan of /proc takes CPU from the workload: not too often

    sampler = threading.Thread(target=sample)
    sampler.start()
    with open(gate, "w") as g:
        g.write("go")
    out = workload.stdout.read()
    # The workload's own CPU time (the probe runs in its syscalls): unlike its
    # calls per second, it does not depend on the CPU share it got.
    _, status, usage = os.wait4(workload.pid, 0)
    workload.returncode = os.waitstatus_to_exitcode(status)
    assert workload.returncode == 0, out
    os.unlink(gate)
    os.rmdir(os.path.dirname(gate))
    done.set()
    sampler.join()
    ns = None
    if q:
        q.send_signal(signal.SIGINT)  # prints its stats line, then detaches
        _, err = q.communicate()
        m = re.search(r"ebql: stats (\{.*\})", err)
        s = json.loads(m.group(1)) if m else {}
        if s.get("bpf_run_cnt"):
            ns = s["bpf_run_time_ns"] / s["bpf_run_cnt"]
    ops = int(out.split("total_ops")[1].split()[0])
    cpu_ns = (usage.ru_utime + usage.ru_stime) * 1e9 / ops
    return float(out.split("ops_per_sec")[1].split()[0]), cpu_ns, seen_on[0], ns


results = {c[0]: [] for c in CONFIGS}
for r in range(args.rounds):
    for name, binary, event, flags, _ in CONFIGS:
        results[name].append(one(binary, event, flags))


def clean(name, stats_off):
    """Runs of `name` that ran as configured: stats-off runs during which bpf_stats stayed off."""
    return [v for v in results[name] if not (stats_off and v[2])]


base = statistics.median(v[0] for v in results["no probe"])
base_cpu = statistics.median(v[1] for v in results["no probe"])
print(f"{'configuration':40} {'runs':>5} {'pread64/s':>10} {'added ns/call':>13} {'CPU ns/call':>11} {'(min-max)':>15} {'added CPU ns':>12} {'prog ns/run':>11}")
for name, _, _, _, stats_off in CONFIGS:
    runs = clean(name, stats_off)
    ns = [v[3] for v in results[name] if v[3] is not None]
    prog = f"{statistics.median(ns):11.1f}" if ns else f"{'-':>11}"
    if not runs:
        print(f"{name:40} {0:>5} {'(bpf_stats was on in every run)':>69} {prog}")
        continue
    m = statistics.median(v[0] for v in runs)
    cpu = [v[1] for v in runs]
    mc = statistics.median(cpu)
    print(f"{name:40} {len(runs):>5} {m:10.0f} {1e9 / m - 1e9 / base:13.1f} {mc:11.1f} {f'({min(cpu):.0f}-{max(cpu):.0f})':>15} {mc - base_cpu:12.1f} {prog}")
print("CPU ns/call: the workload's user+system CPU time / its calls (the probe runs in its syscalls; "
      "independent of the CPU share a loaded machine gives it, unlike pread64/s). "
      "runs: for the ebql stats-off configurations, only runs during which /proc/sys/kernel/bpf_stats_enabled "
      "stayed 0 (another process may turn it on); prog ns/run: bpf_stats run_time_ns / run_cnt of the "
      "query's program, wherever stats were on and the query reports them")
