"""Starting `ebql query` for a bench and waiting until its probes are attached.

`ebql query` prints `ebql: attached ...` on stderr once every probe of the
query is attached (after compiling, loading and attaching); a bench starts its
workload only then, so every event of the workload is seen. Lines before it
(notes) are kept: they are the error when ebql exits before attaching.
"""
import subprocess
import threading


class Stderr:
    """A process's stderr, read to its end by a thread: a tracer that warns
    (a window that lost events, what the wire decoder skipped) must never
    block on a full pipe while it is measured."""

    def __init__(self, p, first=""):
        self.lines = [first]
        self.thread = threading.Thread(target=lambda: self.lines.extend(p.stderr), daemon=True)
        self.thread.start()

    def text(self):
        """All of stderr; waits for the process to close it (to exit)."""
        self.thread.join()
        return "".join(self.lines)


def start_attached(argv, what="ebql", stdout=subprocess.DEVNULL):
    """`argv` (an `ebql query …` command line) started, returned once it printed `ebql: attached`.

    Returns (the process, its `Stderr`, drained from then on). Raises
    SystemExit with what ebql printed and its exit status when it ends before
    attaching; `what` names the run in that message.
    """
    p = subprocess.Popen(argv, stdout=stdout, stderr=subprocess.PIPE, text=True)
    seen = []
    while not seen or not seen[-1].startswith("ebql: attached"):
        line = p.stderr.readline()
        if not line:
            p.wait()
            raise SystemExit(f"{what}: ebql did not attach (exit {p.returncode}): {''.join(seen).strip()}")
        seen.append(line)
    return p, Stderr(p, "".join(seen))
