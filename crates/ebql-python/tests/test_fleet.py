"""Issue 23: per-host partial aggregates merged fleet-wide by Spark.

Three eBQL agents (`ebql query --partial`, separate processes with host ids
h1, h2, h3), each tracing its own scripted workload (filtered by its pid),
produce to one real Kafka broker (KRaft), one query as JSON rows and one
as Arrow IPC windows; one real Spark session
(Structured Streaming, local[2]) merges their windows with `ebql.spark`.
The workloads make known calls in known windows, so every merged window
has an exact truth. h3's agents stop after the second round: its last
window counts what it saw and is marked partial, and the window after it
shows h3 missing, never a wrong total."""

import glob
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time

import ebql
import ebql.spark
from conftest import Workload, ebql_binary

EV = "tracepoint/syscalls/sys_enter_pread64"
WINDOW_S = 2
# Exact aggregates and a quantile sketch (about 31 KiB of state per group).
SQL_EXACT = (
    "SELECT fd, COUNT(*) AS calls, SUM(count) AS bytes, AVG(count) AS mean, MIN(count) AS smallest, "
    f"MAX(count) AS largest, HIST(count) AS sizes, QUANTILE(count, 0.9) AS p90 FROM {EV} "
    f"WHERE count > 1 GROUP BY fd WINDOW(time, {WINDOW_S * 1000}, {WINDOW_S * 1000})"
)
# A HyperLogLog sketch of the 1-byte reads' positions (a global aggregate).
SQL_DISTINCT = (
    f"SELECT approx_distinct(pos) AS positions FROM {EV} WHERE count = 1 "
    f"WINDOW(time, {WINDOW_S * 1000}, {WINDOW_S * 1000})"
)
# The exact distinct count: each host writes its set of positions as rows.
SQL_SETS = (
    f"SELECT COUNT(DISTINCT pos) AS positions FROM {EV} WHERE count = 1 "
    f"WINDOW(time, {WINDOW_S * 1000}, {WINDOW_S * 1000})"
)
HOSTS = ["h1", "h2", "h3"]
# Per host: the pread size, calls in round r = base + r, the first 1-byte position.
PLAN = {"h1": (512, 100, 0), "h2": (4096, 50, 500), "h3": (100, 30, 1000)}
POSITIONS = 1000  # 1-byte preads per host per round, at first .. first + 999
HLL_BOUND = 3 * 1.04 / 64  # 3 standard errors of 2^12 registers


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Broker:
    """A single-node KRaft broker from the jars scripts/setup.sh fetched."""

    def __init__(self):
        jars = os.path.expanduser("~/.cache/ebql/kafka-jars")
        assert glob.glob(f"{jars}/kafka_2.13-*.jar"), f"{jars} lacks Kafka's jars: run scripts/setup.sh"
        self.dir = tempfile.mkdtemp(prefix="ebql-fleet-kafka-")
        self.port, controller = free_port(), free_port()
        props = os.path.join(self.dir, "server.properties")
        with open(props, "w") as f:
            f.write(
                f"process.roles=broker,controller\nnode.id=1\ncontroller.quorum.voters=1@127.0.0.1:{controller}\n"
                f"listeners=PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{controller}\n"
                f"advertised.listeners=PLAINTEXT://127.0.0.1:{self.port}\ncontroller.listener.names=CONTROLLER\n"
                "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT\n"
                f"log.dirs={self.dir}/data\nnum.partitions=1\nauto.create.topics.enable=true\n"
                "offsets.topic.replication.factor=1\ntransaction.state.log.replication.factor=1\n"
                "transaction.state.log.min.isr=1\ngroup.initial.rebalance.delay.ms=0\n"
            )
        java = ["java", "-Xmx384m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-cp", f"{jars}/*"]
        subprocess.run(java + ["kafka.tools.StorageTool", "format", "-t", "ZWJxbC10ZXN0LWNsdXN0ZQ", "-c", props],
                       check=True, capture_output=True)
        self.log = open(os.path.join(self.dir, "broker.log"), "w")
        self.proc = subprocess.Popen(java + ["kafka.Kafka", props], stdout=self.log, stderr=self.log)
        deadline = time.time() + 90
        while True:
            assert self.proc.poll() is None, open(self.log.name).read()[-3000:]
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", self.port)) == 0:
                    break
            assert time.time() < deadline, "the broker did not listen within 90 s"
            time.sleep(0.2)

    def address(self):
        return f"127.0.0.1:{self.port}"

    def close(self):
        self.proc.terminate()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


class Agent:
    """`ebql query --partial` of one host into a Kafka topic, attached when built."""

    def __init__(self, host, pid, sql, url, fmt="json"):
        self.proc = subprocess.Popen(
            [ebql_binary(), "query", "--partial", "--host-id", host, "-p", str(pid), "-f", fmt,
             "-o", url, sql],
            stderr=subprocess.PIPE, text=True)
        lines = []
        while True:
            line = self.proc.stderr.readline()
            assert line, f"the {host} agent exited before attaching: {''.join(lines)}"
            lines.append(line)
            if line.startswith("ebql: attached"):
                break

    def stop(self):
        self.proc.send_signal(signal.SIGINT)
        _, err = self.proc.communicate(timeout=30)
        assert self.proc.returncode == 0, err


def shut_down(agents, spark, workloads, broker):
    """Stops what a fleet run started: agents still running, Spark's streams
    and session, the workloads, the broker."""
    for a in agents:
        if a.proc.poll() is None:
            a.stop()
    if spark is not None:
        for s in spark.streams.active:
            s.stop()
        spark.stop()
    for w in workloads.values():
        w.close()
    broker.close()


def spark_session():
    from pyspark.sql import SparkSession

    jars = glob.glob(os.path.expanduser("~/.cache/ebql/spark-jars/*.jar"))
    assert any("spark-sql-kafka" in j for j in jars), "no Spark Kafka connector: run scripts/setup.sh"
    return (SparkSession.builder.master("local[2]").appName("ebql-fleet-test")
            .config("spark.jars", ",".join(jars))
            .config("spark.sql.shuffle.partitions", "2")
            .config("spark.ui.enabled", "false")
            .config("spark.driver.memory", "1g")
            .getOrCreate())


def quiet(spark):
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def next_round_start():
    """Sleeps to 300 ms after the next window boundary; returns that window's end (unix s)."""
    now = time.time()
    start = (int(now // WINDOW_S) + 1) * WINDOW_S
    time.sleep(start + 0.3 - now)
    return start + WINDOW_S


def log2_bucket(v):
    return 1 if v == 0 else 2 + v.bit_length() - 1


def sketch_value(v):
    """What eBQL's quantile sketch reports for a value of its bucket (agg/quantile.rs)."""
    if v < 64:
        return v
    e = v.bit_length() - 1
    lo = (v >> (e - 6)) << (e - 6)
    return lo + ((1 << (e - 6)) - 1) // 2


def test_three_hosts_merge_on_spark_exactly(tmp_path):
    broker = Broker()
    workloads = {h: Workload() for h in HOSTS}
    agents, spark = [], None
    try:
        fds = {h: w.file() for h, w in workloads.items()}
        for h, w in workloads.items():
            # JSON rows for one query, Arrow IPC windows for the other.
            for topic, sql, fmt in (("exact", SQL_EXACT, "json"), ("distinct", SQL_DISTINCT, "arrow"),
                                    ("sets", SQL_SETS, "json")):
                agents.append((h, Agent(h, w.pid, sql, f"kafka://{broker.address()}/{topic}", fmt)))
        spark = quiet(spark_session())
        layouts = {"exact": ebql.partial_layout(SQL_EXACT), "distinct": ebql.partial_layout(SQL_DISTINCT),
                   "sets": ebql.partial_layout(SQL_SETS)}
        streams = []
        for topic, layout in layouts.items():
            payload = "arrow" if topic == "distinct" else "json"
            rows = ebql.spark.read_kafka(spark, broker.address(), topic, layout, payload=payload)
            merged = ebql.spark.merge(rows, layout, delay="2 seconds")
            hosts = ebql.spark.hosts(rows, layout, expected=HOSTS, delay="2 seconds")
            for name, df in ((f"{topic}_merged", merged), (f"{topic}_hosts", hosts)):
                streams.append(df.writeStream.outputMode("append").format("memory").queryName(name)
                               .option("checkpointLocation", str(tmp_path / name))
                               .trigger(processingTime="1 second").start())
        # Three rounds, one window each: all hosts, all hosts then h3 stops, h1 and h2.
        truth = []
        for r in range(3):
            end = next_round_start()
            seen = HOSTS if r < 2 else ["h1", "h2"]
            for h in HOSTS:
                size, base, first = PLAN[h]
                workloads[h].pread(fds[h], size, base + r)
                assert workloads[h].cmd(f"preadpos {fds[h]} {first} {POSITIONS} 1").startswith("ok")
            if r == 1:
                for h, a in agents:
                    if h == "h3":
                        a.stop()
            truth.append((end, seen))
        deadline = time.time() + 180
        last_end = truth[-1][0]
        while time.time() < deadline:
            done = [spark.sql(f"SELECT * FROM {n} WHERE unix_timestamp(window_end) = {last_end}").count()
                    for n in ("exact_merged", "exact_hosts", "distinct_merged", "distinct_hosts",
                              "sets_merged", "sets_hosts")]
            if all(done):
                break
            for s in streams:
                assert s.exception() is None, s.exception()
            time.sleep(1)
        else:
            state = {n: [r.asDict() for r in spark.sql(f"SELECT * FROM {n}").collect()]
                     for n in ("exact_hosts", "distinct_hosts")}
            progress = [s.lastProgress for s in streams]
            raise AssertionError(f"Spark did not close the last window ({last_end}) within 180 s: {state} {progress}")

        # Kafka's key is <host id>/<query hash>: one partition order per host and query.
        for topic, layout in layouts.items():
            keys = {r["key"].decode() for r in spark.read.format("kafka")
                    .option("kafka.bootstrap.servers", broker.address()).option("subscribe", topic)
                    .load().select("key").distinct().collect()}
            assert keys == {f"{h}/{layout['query_hash']}" for h in HOSTS}, (topic, keys)
        for r, (end, seen) in enumerate(truth):
            at = f"unix_timestamp(window_end) = {end}"
            # Exact aggregates: per fd, the sum of the hosts' truths.
            rows = spark.sql(f"SELECT * FROM exact_merged WHERE {at}").collect()
            want = {}
            for h in seen:
                size, base, _ = PLAN[h]
                want.setdefault(fds[h], []).extend([size] * (base + r))
            assert sorted(row["fd"] for row in rows) == sorted(want), (r, rows)
            for row in rows:
                sizes = sorted(want[row["fd"]])
                assert row["calls"] == len(sizes), (r, row)
                assert row["bytes"] == sum(sizes), (r, row)
                assert row["mean"] == sum(sizes) / len(sizes), (r, row)
                assert (row["smallest"], row["largest"]) == (sizes[0], sizes[-1]), (r, row)
                hist = [0] * 66
                for v in sizes:
                    hist[log2_bucket(v)] += 1
                assert list(row["sizes"]) == hist, (r, row)
                exact_p90 = sizes[max(1, -(-9 * len(sizes) // 10)) - 1]
                assert row["p90"] == sketch_value(exact_p90), (r, row, exact_p90)
                assert abs(row["p90"] - exact_p90) <= exact_p90 / 128
                assert row["hosts"] == sorted(h for h in seen if fds[h] == row["fd"]), (r, row)
            # The HyperLogLog union within its bound of the true union of positions.
            [d] = spark.sql(f"SELECT * FROM distinct_merged WHERE {at}").collect()
            union = len({p for h in seen for p in range(PLAN[h][2], PLAN[h][2] + POSITIONS)})
            assert abs(d["positions"] - union) <= HLL_BOUND * union, (r, d, union)
            # COUNT(DISTINCT) exactly: the union of the hosts' sets.
            [e] = spark.sql(f"SELECT * FROM sets_merged WHERE {at}").collect()
            assert e["positions"] == union, (r, e, union)
            # Which hosts closed the window: h3 partial in round 1, missing in round 2.
            for n in ("exact_hosts", "distinct_hosts", "sets_hosts"):
                [w] = spark.sql(f"SELECT * FROM {n} WHERE {at}").collect()
                assert list(w["hosts_seen"]) == seen, (n, r, w)
                assert list(w["hosts_missing"]) == sorted(set(HOSTS) - set(seen)), (n, r, w)
                assert list(w["partial_hosts"]) == (["h3"] if r == 1 else []), (n, r, w)
                # One machine, one clock: every host says the same of it (an error
                # when an NTP daemon keeps it, else unsynchronized).
                unsync = list(w["unsynchronized_hosts"])
                assert unsync in (seen, []), (n, r, w)
                assert (w["max_clock_error_ns"] is None) == (unsync == seen), (n, r, w)
    finally:
        shut_down([a for _, a in agents], spark, workloads, broker)
