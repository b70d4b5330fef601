"""The whole machine's CPU over a run, from /proc/stat (proc(5)): busy time
(user, nice, system, irq, softirq) and the time the VM's host took (steal),
in seconds.

Busy CPU per transaction is what a scenario costs the machine, the load
generator's share included (the same in every scenario), whatever the host
takes: on this noisy VM, where one scenario's TPS ranges over ±30% from run
to run, it separates scenarios that TPS medians cannot. On a CPU-bound run,
TPS falls as cost per transaction rises: a scenario costing c against the
baseline's b loses 1 - b/c of the TPS the CPUs allow."""
import os

HZ = os.sysconf("SC_CLK_TCK")


def snapshot():
    """The machine's CPU counters now, in clock ticks."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:9]]
    user, nice, system, idle, iowait, irq, softirq, steal = v
    return {"busy": user + nice + system + irq + softirq, "steal": steal, "all": sum(v)}


def between(a, b, transactions):
    """The run from snapshot `a` to `b`: busy CPU µs per transaction, and steal's share of all CPU time, %."""
    d = {k: b[k] - a[k] for k in a}
    return {"cpu_us_per_txn": d["busy"] / HZ * 1e6 / transactions if transactions else None,
            "steal_pct": 100.0 * d["steal"] / d["all"] if d["all"] else 0.0}
