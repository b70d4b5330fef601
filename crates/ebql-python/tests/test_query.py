"""`ebql.query` against real pread64 events of our workload: exact counts from
pyarrow batches, pandas and polars over the same batches, stop/with/duration/
Ctrl-C detaching the probe, and bad queries raising QueryError."""

import os
import subprocess
import sys
import time

import polars as pl
import pyarrow as pa
import pytest

import ebql
from conftest import EV, interrupted, prog_loaded, unloaded


def by_fd(batches):
    """{fd: (n, bytes)} summed over every window's rows."""
    out = {}
    for b in batches:
        for fd, n, bytes_ in zip(b.column("fd").to_pylist(), b.column("n").to_pylist(), b.column("bytes").to_pylist()):
            prev = out.get(fd, (0, 0))
            out[fd] = (prev[0] + n, prev[1] + bytes_)
    return out


def grouped_sql(pid):
    return f"SELECT fd, COUNT(*) AS n, SUM(count) AS bytes FROM {EV} WHERE pid = {pid} GROUP BY fd WINDOW(time, 200, 200)"


def test_windowed_batches_count_exactly(workload):
    fd = workload.file()
    with ebql.query(grouped_sql(workload.pid)) as q:
        assert q.schema.names == ["window_start", "window_end", "window_start_mono_ns", "window_end_mono_ns", "fd", "n", "bytes"]
        assert q.schema.field("window_start").type == pa.timestamp("ns", tz="UTC")
        assert q.schema.field("window_start_mono_ns").type == pa.uint64()
        workload.pread(fd, 512, 300)
        workload.pread_bad_fd(999, 64, 40)
        workload.pread(fd, 512, 25)
        stats = q.stop()
        batches = list(q)  # the windows not consumed yet, the last one emitted at stop
    assert batches, "windows were emitted"
    for b in batches:
        assert isinstance(b, pa.RecordBatch)
        assert b.schema.names == q.schema.names
        start, end = (b.column(c).cast(pa.int64()).to_pylist() for c in ("window_start", "window_end"))
        mono_start, mono_end = (b.column(c).to_pylist() for c in ("window_start_mono_ns", "window_end_mono_ns"))
        assert all(s < e for s, e in zip(start, end))
        # One offset (wall clock - CLOCK_MONOTONIC) for every bound of the run.
        assert len({w - m for w, m in zip(start + end, mono_start + mono_end)}) == (1 if b.num_rows else 0)
    assert by_fd(batches) == {fd: (325, 325 * 512), 999: (40, 40 * 64)}
    assert stats["events_matched"] == 365
    assert stats["events_dropped"] == 0
    assert stats["windows_emitted"] == q.stats()["windows_emitted"]
    assert q.stats() == stats
    assert q.stop() == stats, "a second stop returns the same counters"


def test_pandas_and_polars_from_the_same_batches(workload):
    fd = workload.file()
    with ebql.query(grouped_sql(workload.pid)) as q:
        workload.pread(fd, 100, 70)
        workload.pread_bad_fd(777, 8, 13)
        q.stop()
        batches = list(q)
    table = pa.Table.from_batches(batches, schema=q.schema)

    df = table.to_pandas()
    sums = df.groupby("fd")[["n", "bytes"]].sum()
    assert sums.loc[fd].tolist() == [70, 7000]
    assert sums.loc[777].tolist() == [13, 104]

    pdf = pl.from_arrow(table).group_by("fd").agg(pl.col("n").sum(), pl.col("bytes").sum()).sort("fd")
    assert pdf.rows() == sorted([(fd, 70, 7000), (777, 13, 104)])


def test_with_block_detaches_and_yields_the_last_window(workload):
    fd = workload.file()
    with ebql.query(f"SELECT COUNT(*) AS n FROM {EV} WHERE pid = {workload.pid}") as q:
        ids = q.prog_ids
        assert ids and all(prog_loaded(i) for i in ids)
        assert q.running
        workload.pread(fd, 1, 123)
    assert not q.running
    assert unloaded(ids), "leaving the with block detached and unloaded the program"
    rows = [r for b in q for r in b.to_pylist()]
    assert rows == [{"n": 123}]


def test_duration_ends_iteration(workload):
    fd = workload.file()
    q = ebql.query(grouped_sql(workload.pid), duration=1.5)
    workload.pread(fd, 16, 58)
    batches = list(q)  # ends by itself once the duration has run out
    assert not q.running
    assert unloaded(q.prog_ids)
    assert by_fd(batches) == {fd: (58, 58 * 16)}


# A script of its own, as a user's would be: the signal goes to a process
# whose SIGINT handler is Python's, whatever the test process imported.
INTERRUPTED_SCRIPT = r"""
import json, sys, ebql
q = ebql.query(sys.argv[1])
try:
    print("iterating", flush=True)
    for _ in q:  # an unwindowed query yields nothing until stopped: Ctrl-C arrives while waiting
        pass
    print(json.dumps({"interrupted": False}))
except KeyboardInterrupt:
    rows = [r for b in q for r in b.to_pylist()]
    print(json.dumps({"interrupted": True, "running": q.running, "prog_ids": list(q.prog_ids), "rows": rows}))
"""


def test_keyboard_interrupt_stops_cleanly(workload):
    fd = workload.file()

    def meanwhile():
        workload.pread(fd, 1, 9)
        time.sleep(0.3)  # inside the loop, waiting for a batch

    r = interrupted(INTERRUPTED_SCRIPT, [f"SELECT COUNT(*) AS n FROM {EV} WHERE pid = {workload.pid}"], "iterating", meanwhile)
    assert (r["interrupted"], r["running"]) == (True, False), r
    assert unloaded(r["prog_ids"]), "the probe is detached"
    assert r["rows"] == [{"n": 9}], "the result emitted at the interrupt is still there"


def test_bad_query_raises_query_error_with_position_and_hint():
    sql = f"SELECT fd, COUNT(*), MAX(cnt) FROM {EV}"
    with pytest.raises(ebql.QueryError) as info:
        ebql.query(sql)
    e = info.value
    start = sql.index("cnt")
    assert e.position == (1, start + 1, start + 3)
    assert e.span == (start, start + 3)
    assert "count" in e.hint
    assert "cnt" in e.message
    assert e.query == sql
    text = str(e)
    assert text.startswith(f"query:1:{start + 1}-{start + 3}: error: ")
    assert " " * start + "~~~" in text.splitlines()
    assert isinstance(e, ebql.Error)

    with pytest.raises(ebql.QueryError) as info:
        ebql.explain(sql)
    assert info.value.position == e.position


def test_query_error_position_on_a_later_line():
    sql = f"SELECT fd\nFROM {EV}\nGROUP BY fd WINDOW(time, 1000, 300)"
    with pytest.raises(ebql.QueryError) as info:
        ebql.query(sql)
    line, first, last = info.value.position
    assert line == 3
    assert sql.splitlines()[2][first - 1:last] == "1000, 300"


def test_explain_shows_the_kernel_program():
    text = ebql.explain(f"SELECT fd, COUNT(*) FROM {EV} WHERE count > 10 AND pid = 42 GROUP BY fd")
    assert ";; Filter: " in text
    assert ";; Aggregate: update" in text
    assert "0x2a" in text, "pid 42 is compared in the kernel"


def test_kernel_refusal_raises_kernel_error_with_hint():
    # Root without capabilities (bounding set cleared for the child): the kernel refuses the BPF map.
    script = (
        "import ebql\n"
        "try:\n"
        f"    ebql.query('SELECT COUNT(*) FROM {EV}')\n"
        "except ebql.KernelError as e:\n"
        "    assert isinstance(e, ebql.Error) and not isinstance(e, ebql.QueryError)\n"
        "    print(str(e).splitlines()[0]); print(e.hint)\n"
    )
    r = subprocess.run(["setpriv", "--bounding-set=-all", sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    message, hint = r.stdout.splitlines()
    assert message.startswith("error: ") and "permission denied" in message, message
    assert "CAP_BPF" in hint, hint


def bpf_stats_fds_held():
    """Descriptors of this process holding the kernel's bpf_stats on (what
    other BPF users on the machine cannot change, unlike the global sysctl)."""
    fds = os.listdir("/proc/self/fd")
    return sum(1 for fd in fds if _readlink(f"/proc/self/fd/{fd}") == "anon_inode:bpf-stats")


def _readlink(path):
    try:
        return os.readlink(path)
    except OSError:
        return None


def test_bpf_stats_only_when_asked(workload):
    fd = workload.file()
    for asked in (False, True):
        with ebql.query(f"SELECT COUNT(*) AS n FROM {EV} WHERE pid = {workload.pid}", bpf_stats=asked) as q:
            held = bpf_stats_fds_held()
            workload.pread(fd, 8, 50)
            s = q.stop()
        assert held == (1 if asked else 0), f"bpf_stats={asked}"
        assert bpf_stats_fds_held() == 0, "released with the query"
        assert s["events_seen"] == s["events_matched"] == 50
        if asked:  # every run at the hook, other processes' pread64 calls too
            assert s["bpf_run_cnt"] >= s["events_seen"] and s["bpf_run_time_ns"] > 0, s
        else:
            assert s["bpf_run_cnt"] == 0 and s["bpf_run_time_ns"] == 0, s
