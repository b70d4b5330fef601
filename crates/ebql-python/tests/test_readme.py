"""Every Python example of README.md runs, and shows what its comments say
(README "Testing the README"; the Rust test `readme::` runs the shell and
SQL blocks).

A ```python block runs in a fresh directory with the `<!-- ebql-test: … -->`
marker's `sub=OLD=>NEW` replacements applied (shorter durations, a real pid);
`skip: WHY` skips it. A block that reads a file made by the shell block
before it (its `-o NAME`) first runs that `ebql` command there, for 2 s as
the Rust test does. Each block then meets the checks kept for it below, by a
line of its text: a new example fails until it has some."""

import os
import pathlib
import shlex
import subprocess

import pytest

from conftest import ebql_binary

ROOT = pathlib.Path(__file__).resolve().parents[3]
MARKER = "<!-- ebql-test:"


def _tz_ns(series):
    return str(series.dtype) == "datetime64[ns, UTC]"


# What each example must show, by a line of its text: (claim, check) pairs.
CHECKS = {
    'df = pd.read_csv("opens.csv"': [
        ("rows", lambda ns: len(ns["df"]) > 0),
        ("`at` is datetime64[ns, UTC]", lambda ns: _tz_ns(ns["df"]["at"])),
        ("ls opened files", lambda ns: "ls" in set(ns["df"]["comm"])),
    ],
    'df = pa.ipc.open_file("reads.arrow")': [
        ("rows", lambda ns: len(ns["df"]) > 0),
        ("window_start is datetime64[ns, UTC]", lambda ns: _tz_ns(ns["df"]["window_start"])),
        ("the query's columns", lambda ns: {"comm", "reads", "bytes"} <= set(ns["df"].columns)),
    ],
    'df = ebql.query("SELECT comm': [
        ("columns comm, n", lambda ns: list(ns["df"].columns) == ["comm", "n"]),
        ("system calls counted", lambda ns: ns["df"]["n"].sum() > 0),
    ],
    "table = pa.table(ebql.query(sql": [
        (
            "the schema printed",
            lambda ns: ns["table"].schema.names
            == ["window_start", "window_end", "window_start_mono_ns", "window_end_mono_ns", "fd", "n", "bytes"],
        ),
        (
            "window_start is timestamp[ns, tz=UTC]",
            lambda ns: str(ns["table"].schema.field("window_start").type) == "timestamp[ns, tz=UTC]",
        ),
        ("df is a polars DataFrame", lambda ns: type(ns["df"]).__module__.startswith("polars")),
        ("pdf has the query's columns", lambda ns: list(ns["pdf"].columns)[-3:] == ["fd", "n", "bytes"]),
        ("nothing dropped", lambda ns: ns["q"].stats()["events_dropped"] == 0),
    ],
}


def _marker(body):
    items, _, reason = body.partition(": ")
    m = {"skip": None, "subs": []}
    for item in (i.strip() for i in items.split(",")):
        if item == "skip":
            m["skip"] = reason.strip()
        elif item.startswith("sub="):
            old, new = item[4:].split("=>", 1)
            m["subs"].append((old, new))
    return m


def _blocks():
    """(line, lang, text, marker) of each fenced block of README.md."""
    lines = (ROOT / "README.md").read_text().splitlines()
    out, pending, i = [], None, 0
    while i < len(lines):
        line = lines[i].strip()
        if line.startswith(MARKER):
            pending = _marker(line[len(MARKER):].removesuffix("-->").strip())
        elif line.startswith("```"):
            start, lang, body = i + 1, line[3:].strip(), []
            i += 1
            while i < len(lines) and lines[i].strip() != "```":
                body.append(lines[i])
                i += 1
            out.append((start, lang, "\n".join(body), pending or _marker("")))
            pending = None
        elif line:
            pending = None
        i += 1
    return out


def _examples():
    blocks = _blocks()
    for k, (line, lang, text, marker) in enumerate(blocks):
        if lang != "python":
            continue
        before = next((b for b in reversed(blocks[:k]) if b[1] in ("sh", "")), None)
        marks = [pytest.mark.skip(reason=marker["skip"])] if marker["skip"] else []
        yield pytest.param(text, marker, before, id=f"README.md:{line}", marks=marks)


def _run_shell_block(block, cwd):
    """The `ebql` command of a shell block, for 2 s, in `cwd`."""
    _, _, text, marker = block
    for old, new in marker["subs"]:
        text = text.replace(old, new)
    args = shlex.split(text.strip().removeprefix("$ "))
    assert args[0] == "ebql", text
    for i, a in enumerate(args):
        if a in ("-d", "--duration"):
            args[i + 1] = "2s"
    if not {"-d", "--duration", "-c", "--command"} & set(args):
        args[2:2] = ["-d", "2s"]
    # The query is the last word: options go before it.
    argv = [ebql_binary(), *args[1:-1], "-q", args[-1]]
    subprocess.run(argv, cwd=cwd, check=True, timeout=60)


@pytest.mark.parametrize("text,marker,before", list(_examples()))
def test_readme_python_example_runs(text, marker, before, tmp_path, monkeypatch):
    check = next((c for key, c in CHECKS.items() if key in text), None)
    assert check is not None, f"no checks for this example in {__file__}:\n{text}"
    for old, new in marker["subs"]:
        assert old in text, f"sub={old}=>… matches nothing"
        text = text.replace(old, new)
    monkeypatch.chdir(tmp_path)
    if before is not None and any(
        f"-o {name}" in before[2] and name in text
        for name in shlex.split(before[2].replace("\\\n", " "))
    ):
        _run_shell_block(before, tmp_path)
    ns = {"os": os, "__name__": "readme_example"}
    exec(compile(text, "README.md example", "exec"), ns)
    failed = [claim for claim, holds in check if not holds(ns)]
    assert not failed, f"the example ran but does not show: {failed}"
