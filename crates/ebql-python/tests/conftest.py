"""Shared fixtures: a scripted workload process of ours (`ebql workload script`)
that makes exactly the pread64 calls we ask for, and a check for loaded BPF programs.

Kernel tests run as root against real tracepoints and filter by the workload's pid,
so other BPF users on the machine do not disturb them."""

import json
import os
import signal
import subprocess
import sys

import pytest

EV = "tracepoint/syscalls/sys_enter_pread64"


def ebql_binary():
    """The CLI that runs the workload: $EBQL, else the dev build in $CARGO_TARGET_DIR."""
    path = os.environ.get("EBQL")
    if not path:
        target = os.environ.get("CARGO_TARGET_DIR") or os.path.join(os.path.dirname(__file__), "..", "..", "..", "target")
        path = os.path.join(target, "debug", "ebql")
    if not os.access(path, os.X_OK):
        pytest.fail(f"no ebql binary at {path}: run `cargo build -p ebql` or set EBQL")
    return path


class Workload:
    """`ebql workload script`: one command per line on stdin, one answer line on stdout."""

    def __init__(self):
        self.proc = subprocess.Popen([ebql_binary(), "workload", "script"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        ready = self.proc.stdout.readline().strip()
        assert ready.startswith("ready "), ready
        self.pid = int(ready.split()[1])

    def cmd(self, line):
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        return self.proc.stdout.readline().strip()

    def file(self):
        """A fresh page-cached 64 KiB file; its fd in the workload."""
        answer = self.cmd("tmpfile 65536")
        assert answer.startswith("fd "), answer
        return int(answer.split()[1])

    def pread(self, fd, size, count):
        """Exactly `count` pread64 calls of `size` bytes on `fd`."""
        assert self.cmd(f"pread {fd} {size} {count}") == f"ok {count}"

    def pread_bad_fd(self, fd, size, count):
        """Exactly `count` pread64 calls on an fd that is not open (each fails with EBADF)."""
        answer = self.cmd(f"pread {fd} {size} {count}")
        assert answer.startswith("err pread") and f"({count} of {count} calls failed)" in answer, answer

    def close(self):
        try:
            self.proc.stdin.write("exit\n")
            self.proc.stdin.flush()
        except BrokenPipeError:
            pass
        self.proc.wait(timeout=10)


@pytest.fixture(scope="session", autouse=True)
def require_root():
    assert os.geteuid() == 0, "the Python tests load BPF programs and must run as root (CI runs them as root)"


@pytest.fixture
def workload():
    w = Workload()
    yield w
    w.close()


def prog_loaded(prog_id):
    """True while the kernel holds BPF program `prog_id` (checked with bpftool)."""
    r = subprocess.run(["bpftool", "prog", "show", "id", str(prog_id)], capture_output=True, text=True)
    return r.returncode == 0


def unloaded(prog_ids, within=5.0):
    """True once none of `prog_ids` is loaded, waiting up to `within` s: the
    kernel frees a detached BTF-tracepoint (TRACING) program only after an
    RCU tasks-trace grace period (some 100 ms), a raw or tracefs one at once."""
    import time
    deadline = time.monotonic() + within
    while any(prog_loaded(i) for i in prog_ids):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def interrupted(script, args, ready, meanwhile):
    """Runs the Python `script` (with `args`) in a process of its own, whose
    SIGINT handler is Python's; once it prints the line `ready`, calls
    `meanwhile()`, sends SIGINT and returns the JSON object it prints last."""
    child = subprocess.Popen([sys.executable, "-c", script, *args], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == ready
        meanwhile()
        child.send_signal(signal.SIGINT)
        out, _ = child.communicate(timeout=60)
    finally:
        child.kill()
    return json.loads(out)
