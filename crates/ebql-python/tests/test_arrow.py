"""`ebql.query()` as an Arrow stream (the PyCapsule interface: `pa.table(q)`,
`pa.RecordBatchReader.from_stream(q)`, polars) and `read_all()`/`to_pandas()`/
`to_polars()`: exact counts of our own workload's pread64 calls (selected with
`pid=`), each reader ending with the query (duration, LIMIT, closing it, Ctrl-C)."""

import time

import polars as pl
import pyarrow as pa
import pytest

import ebql
from conftest import EV, interrupted, unloaded

GROUPED = f"SELECT fd, COUNT(*) AS n, SUM(count) AS bytes FROM {EV} GROUP BY fd WINDOW(time, 200, 200)"


def totals(table):
    """{fd: (n, bytes)} summed over a pyarrow.Table's rows (every window)."""
    out = {}
    for r in table.to_pylist():
        n, b = out.get(r["fd"], (0, 0))
        out[r["fd"]] = (n + r["n"], b + r["bytes"])
    return out


def test_pa_table_reads_the_stream_to_the_end_of_the_duration(workload):
    fd = workload.file()
    other = workload.file()
    q = ebql.query(GROUPED, duration=1.5, pid=workload.pid)  # pid=: the CLI's -p
    workload.pread(fd, 512, 210)
    workload.pread(other, 64, 7)
    table = pa.table(q)  # blocks until the duration has run out
    assert not q.running
    assert unloaded(q.prog_ids)
    assert table.schema == q.schema
    assert table.column_names == ["window_start", "window_end", "window_start_mono_ns", "window_end_mono_ns", "fd", "n", "bytes"]
    assert table.schema.field("window_start").type == pa.timestamp("ns", tz="UTC")
    assert totals(table) == {fd: (210, 210 * 512), other: (7, 7 * 64)}
    assert q.stats()["events_matched"] == 217


def test_record_batch_reader_yields_windows_as_they_close_and_closing_it_stops_the_query(workload):
    fd = workload.file()
    q = ebql.query(GROUPED, pid=workload.pid)  # no end of its own
    reader = pa.RecordBatchReader.from_stream(q)
    assert reader.schema == q.schema
    seen = {}

    def read_until(n):
        for _ in range(100):  # 200 ms windows: at most ~20 s
            b = reader.read_next_batch()
            for r in b.to_pylist():
                seen[r["fd"]] = seen.get(r["fd"], 0) + r["n"]
            if seen.get(fd, 0) >= n:
                return
        pytest.fail(f"no window brought {n} calls: {seen}")

    workload.pread(fd, 8, 40)
    read_until(40)
    assert q.running, "the windows came while the query runs"
    workload.pread(fd, 8, 11)
    read_until(51)
    assert seen == {fd: 51}
    ids = q.prog_ids
    reader.close()  # the consumer stops early: the query stops
    assert not q.running
    assert unloaded(ids)
    assert q.stats()["events_matched"] == 51


def test_polars_reads_the_stream(workload):
    fd = workload.file()
    q = ebql.query(GROUPED, duration=1, pid=workload.pid)
    workload.pread(fd, 100, 33)
    df = pl.DataFrame(q)  # polars' own PyCapsule support
    assert df.columns == q.schema.names
    assert df.group_by("fd").agg(pl.col("n").sum(), pl.col("bytes").sum()).rows() == [(fd, 33, 3300)]

    q = ebql.query(GROUPED, duration=1, pid=workload.pid)
    workload.pread(fd, 10, 12)
    s = pl.from_arrow(q)  # a stream object gives polars' struct Series, one field per column
    df = s.struct.unnest()
    assert df.group_by("fd").agg(pl.col("n").sum(), pl.col("bytes").sum()).rows() == [(fd, 12, 120)]


def test_read_all_to_pandas_and_to_polars(workload):
    fd = workload.file()
    q = ebql.query(GROUPED, duration=1, pid=workload.pid)
    workload.pread(fd, 256, 90)
    workload.pread_bad_fd(555, 4, 6)
    df = q.to_pandas()
    sums = df.groupby("fd")[["n", "bytes"]].sum()
    assert sums.loc[fd].tolist() == [90, 90 * 256]
    assert sums.loc[555].tolist() == [6, 24]
    assert q.read_all().num_rows == 0, "every window was read once"

    q = ebql.query(GROUPED, duration=1, pid=workload.pid)
    workload.pread(fd, 2, 17)
    df = q.to_polars()
    assert isinstance(df, pl.DataFrame)
    assert df.select(pl.col("n").sum(), pl.col("bytes").sum()).row(0) == (17, 34)

    q = ebql.query(GROUPED, duration=1, pid=workload.pid)
    workload.pread(fd, 3, 5)
    table = q.read_all()
    assert isinstance(table, pa.Table) and table.schema == q.schema
    assert totals(table) == {fd: (5, 15)}


def test_limit_ends_the_stream(workload):
    fd = workload.file()
    q = ebql.query(f"SELECT fd, count FROM {EV} LIMIT 4", pid=workload.pid)
    workload.pread(fd, 9, 20)
    table = pa.table(q)  # ends by itself at the LIMIT
    assert table.to_pylist() == [{"fd": fd, "count": 9}] * 4
    assert not q.running


# A script of its own, as a user's would be (see test_query.py): Ctrl-C while
# pyarrow waits in the stream's get_next.
INTERRUPTED_STREAM = r"""
import json, sys, ebql, pyarrow as pa
import pandas  # pa.table() imports it on first use: not while the signal comes
q = ebql.query(sys.argv[1], pid=int(sys.argv[2]))
try:
    print("reading", flush=True)
    pa.table(q)
    print(json.dumps({"interrupted": False}))
except KeyboardInterrupt:
    print(json.dumps({"interrupted": True, "running": q.running, "prog_ids": list(q.prog_ids)}))
"""


def test_keyboard_interrupt_in_a_stream_consumer_stops_the_query(workload):
    # time.sleep: inside pa.table, waiting in get_next.
    r = interrupted(INTERRUPTED_STREAM, [f"SELECT COUNT(*) AS n FROM {EV}", str(workload.pid)], "reading", lambda: time.sleep(1))
    assert (r["interrupted"], r["running"]) == (True, False), r
    assert unloaded(r["prog_ids"]), "the probe is detached"
