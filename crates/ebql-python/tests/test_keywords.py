"""`ebql.query()`'s keywords, the options of `ebql query`: `pid` and `command`
(`-p`, `-c`) on real processes with exact counts, `help()` documenting each,
and wrong keywords or values refused with a message naming them."""

import pydoc
import time

import pyarrow as pa
import pytest

import ebql
from conftest import EV, unloaded


def opens(q):
    """Total of column n over every window until the query ends."""
    return sum(r["n"] for b in q for r in b.to_pylist())


def test_pid_selects_one_process(workload):
    fd = workload.file()
    with ebql.query(f"SELECT COUNT(*) AS n FROM {EV}", pid=workload.pid) as q:  # no WHERE: -p alone
        workload.pread(fd, 4, 61)
        ids = q.prog_ids
    assert opens(q) == 61
    assert unloaded(ids)


def test_command_is_traced_from_its_exec_to_its_exit(tmp_path):
    path = tmp_path / "opened"
    path.write_text("ebql\n")
    sql = f"SELECT COUNT(*) AS n FROM tracepoint:syscalls:sys_enter_openat WHERE str(filename) = '{path}'"
    q = ebql.query(sql, command=["cat", path, path])  # ends when cat exits
    assert opens(q) == 2
    assert q.returncode == 0 and q.command_pid > 0
    assert not q.running

    # A string is split as a shell would (not run by one); --follow sees the shell's children.
    q = ebql.query(sql, command=f"sh -c 'cat {path}; cat {path} {path}; true'", follow=True)
    assert opens(q) == 3
    q = ebql.query(sql, command=f"sh -c 'cat {path}; true'")
    assert opens(q) == 0, "without follow, the shell alone"

    with pytest.raises(ebql.KernelError, match="cannot run the command"):
        ebql.query(sql, command=[str(tmp_path / "no-such-program")])


@pytest.mark.parametrize(
    "kwargs, error, text",
    [
        ({"durtion": 1}, TypeError, "unexpected keyword argument 'durtion' (did you mean 'duration'?)"),
        ({"max_group": 10}, TypeError, "did you mean 'max_groups'?"),
        ({"duration": "5s"}, TypeError, "duration must be a number of seconds (int or float), got str"),
        ({"follow": "yes", "command": ["true"]}, TypeError, "follow must be True or False, got str"),
        ({"max_groups": "10"}, TypeError, "max_groups must be an int, got str"),
        ({"hook": 3}, TypeError, "hook must be a str, got int"),
        ({"duration": -1}, ValueError, "duration must be a finite number of seconds >= 0, got -1"),
        ({"hook": "fast"}, ValueError, "hook must be one of 'auto', 'tracefs', 'raw', 'raw-tp', got \"fast\""),
        ({"optimize": "speed"}, ValueError, "optimize must be one of 'total', 'traced', 'host'"),
        ({"aggregate": "gpu"}, ValueError, "aggregate must be one of 'auto', 'kernel', 'user'"),
        ({"group_map": "tree"}, ValueError, "group_map must be one of 'auto', 'hash', 'array'"),
        ({"max_groups": 0}, ValueError, "max_groups must be between 1 and 4294967295, got 0"),
        ({"sample_ms": -5}, ValueError, "sample_ms must be >= 0"),
        ({"pid": -3}, ValueError, "pid must be a process id >= 1"),
        ({"pid": 1, "command": ["true"]}, ValueError, "pid and command cannot be given together"),
        ({"command": ["true"], "cgroup": "x"}, ValueError, "command and cgroup cannot be given together"),
        ({"follow": True}, ValueError, "follow=True needs command="),
        ({"command": []}, ValueError, "command is empty"),
        ({"command": 42}, TypeError, "command must be a list of arguments or a string, got int"),
        ({"command": "cat 'unclosed"}, ValueError, "command: cannot split"),
    ],
)
def test_bad_keywords_raise_before_anything_starts(kwargs, error, text):
    with pytest.raises(error) as info:
        ebql.query(f"SELECT COUNT(*) FROM {EV}", **kwargs)
    assert text in str(info.value)
    assert not isinstance(info.value, ebql.Error)


def test_help_documents_every_keyword():
    text = pydoc.render_doc(ebql.query, renderer=pydoc.plaintext)  # what help(ebql.query) shows
    keywords = ["duration", "pid", "command", "follow", "cgroup", "max_groups", "max_distinct", "hook", "optimize",
                "group_map", "aggregate", "sample_ms", "sample_first", "no_faulting_reads", "bpf_stats", "attach_only",
                "align_windows", "partial", "host_id", "query_id"]
    signature = text.splitlines()[2]
    assert signature.startswith("query(sql, duration=None, *, pid=None, command=None, follow=False"), signature
    assert "**" not in signature, "the catch-all for unknown keywords is not shown"
    for k in keywords:
        assert f"{k}=" in signature, k
        assert f"\n    {k}: " in text, f"{k} has its paragraph"
    assert "duration: seconds" in text
    assert "sample_ms: milliseconds" in text


def test_align_windows_ends_windows_on_wall_clock_multiples(workload):
    fd = workload.file()
    sql = f"SELECT COUNT(*) AS n FROM {EV} WHERE pid = {workload.pid} WINDOW(time, 200, 200)"
    with ebql.query(sql, align_windows=True) as q:
        for _ in range(4):
            workload.pread(fd, 4, 25)
            time.sleep(0.15)
        q.stop()
        batches = [b for b in q if b.num_rows]
    ends = [b.column("window_end").cast(pa.int64())[0].as_py() for b in batches]
    assert len(ends) >= 3, ends
    # Every end but the last (cut at the stop) is a multiple of 200 ms of UTC.
    assert all(e % 200_000_000 == 0 for e in ends[:-1]), ends
    assert sum(b.column("n")[0].as_py() for b in batches) == 100


def test_partial_yields_each_windows_states_and_a_window_row(workload):
    import datasketches

    fd = workload.file()
    sql = (f"SELECT fd, COUNT(*) AS n, AVG(count) AS mean, approx_distinct(pos) AS d FROM {EV} "
           f"WHERE pid = {workload.pid} GROUP BY fd WINDOW(time, 60000, 60000)")
    with ebql.query(sql, partial=True, host_id="h7", query_id="q7") as q:
        workload.pread(fd, 64, 30)  # offsets 0, 64, …, 1856: 30 distinct positions
        q.stop()
        table = pa.Table.from_batches([b for b in q])
    layout = ebql.partial_layout(sql, host_id="h7", query_id="q7")
    states = [c["name"] for a in layout["aggregates"] for c in a["columns"]]
    assert states == ["n[count]", "mean[count]", "mean[sum]", "d[hll]"]
    assert table.column_names[-5:] == ["fd"] + states
    rows = table.to_pylist()
    [window] = [r for r in rows if r["window_groups"] is not None]
    [group] = [r for r in rows if r["window_groups"] is None]
    assert window["window_groups"] == 1 and window["fd"] is None
    assert (group["host_id"], group["query_id"], group["partial_version"]) == ("h7", "q7", 1)
    assert group["query_hash"] == layout["query_hash"]
    assert (group["fd"], group["n[count]"], group["mean[count]"], group["mean[sum]"]) == (fd, 30, 30, 64 * 30)
    # The sketch is Apache DataSketches' HLL_8 serialization: their library reads it.
    assert abs(datasketches.hll_sketch.deserialize(group["d[hll]"]).get_estimate() - 30) < 1


def test_partial_refuses_what_cannot_merge():
    with pytest.raises(ebql.QueryError) as info:
        ebql.partial_layout(f"SELECT fd, COUNT(*) AS n FROM {EV} GROUP BY fd HAVING COUNT(*) > 2 WINDOW(time, 1000, 1000)")
    assert "HAVING cannot run on one host's states" in str(info.value)
    with pytest.raises(ebql.QueryError) as info:
        ebql.partial_layout(f"SELECT fd, COUNT(DISTINCT pos) AS n, COUNT(*) AS c FROM {EV} GROUP BY fd "
                            "WINDOW(time, 1000, 1000)")
    assert "approx_distinct(x)" in str(info.value)
    with pytest.raises(ebql.QueryError) as info:
        ebql.partial_layout(f"SELECT fd, COUNT(*) AS n FROM {EV} GROUP BY fd")
    assert "needs a time window" in str(info.value)
    with pytest.raises(ValueError):
        ebql.query(f"SELECT COUNT(*) FROM {EV} WINDOW(time, 1000, 1000)", host_id="h1")
