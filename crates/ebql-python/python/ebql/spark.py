"""Merging many hosts' partial windows on Spark (Structured Streaming or batch).

Each host runs `ebql query --partial --host-id NAME -f json -o kafka://BROKER/TOPIC "…"`:
one JSON row per group and window holding the aggregates' *states*, and one
window row per window (see README.md, "Fleet-wide: --partial, merged by Spark"). Here:

    import ebql, ebql.spark
    layout = ebql.partial_layout(sql)                 # the same query text
    rows = ebql.spark.read_kafka(spark, "broker:9092", "topic", layout)
    merged = ebql.spark.merge(rows, layout, delay="10 seconds")
    hosts = ebql.spark.hosts(rows, layout, expected=["h1", "h2", "h3"])
    merged.writeStream.outputMode("append").format("console").start()

`merge` gives one row per window and key with the fleet's values: COUNT, SUM,
MIN, MAX and AVG exact; the variances from exact per-host moments (Chan's
pairwise formula, in floating point); HIST/LHIST as the summed bucket counters
(exact; bucket i as in eBQL's HIST/LHIST); quantiles from the summed sketch
buckets (the middle of the bucket holding the nearest-rank value: within
1/128 of it, as on one host); approx_distinct by `hll_union_agg` over the
DataSketches HLL sketches (relative standard error 1.63%); COUNT(DISTINCT)
exact, from the union of the hosts' sets. Each row also lists the hosts
that had the group.

Windows are matched by their nominal wall-clock bounds: a host's first window
(from its attach) and its last (to its stop) cover part of a window of the
query's size; their rows count in that window, and `hosts` reports them in
`partial_hosts`. A window is final once the watermark (the latest window end
seen, minus `delay`) passes its end: a host later than that is missing from
it, never added to a later window.

Needs Spark 3.5 (for `hll_union_agg`) and, for Kafka, its connector
(org.apache.spark:spark-sql-kafka-0-10_2.12).
"""

from pyspark.sql import functions as F
from pyspark.sql import types as T

# The identity and window columns every partial row has (schema version 1).
_IDENTITY = [
    ("window_start", T.StringType()),
    ("window_end", T.StringType()),
    ("window_start_mono_ns", T.LongType()),
    ("window_end_mono_ns", T.LongType()),
    ("host_id", T.StringType()),
    ("query_id", T.StringType()),
    ("query_hash", T.StringType()),
    ("partial_version", T.LongType()),
    ("clock_error_ns", T.LongType()),
    ("window_groups", T.LongType()),
]

# The quantile sketch's sub-buckets per power of two, log2 (ebql-compiler agg/quantile.rs: K).
_SKETCH_K = 6


def _spark_type(name):
    """The Spark type of a layout type name (JSON rows: binaries are hex text)."""
    if name.startswith("list<"):
        return T.ArrayType(_spark_type(name[5:-1]))
    return {
        "int8": T.LongType(), "int16": T.LongType(), "int32": T.LongType(), "int64": T.LongType(),
        "uint8": T.LongType(), "uint16": T.LongType(), "uint32": T.LongType(),
        # Counts and sums of one window fit in 63 bits; a larger one would fail to parse, not wrap.
        "uint64": T.LongType(),
        "float32": T.DoubleType(), "float64": T.DoubleType(),
        "utf8": T.StringType(), "binary": T.StringType(), "boolean": T.BooleanType(),
    }.get(name, T.StringType())


def schema(layout):
    """The Spark schema of the JSON rows of `layout` (`ebql.partial_layout`)."""
    fields = [T.StructField(n, t) for n, t in _IDENTITY]
    fields += [T.StructField(k["name"], _spark_type(k["type"])) for k in layout["keys"]]
    for a in layout["aggregates"]:
        fields += [T.StructField(c["name"], _spark_type(c["type"])) for c in a["columns"]]
    return T.StructType(fields)


def _with_nominal_window(rows, layout):
    """`rows` with the nominal window: `nominal_start`, `nominal_end`, the
    window of the query's size ending at the first multiple of its step at
    or after `window_end` (a host's first and last windows are shorter)."""
    size_us = layout["window_ns"][0] // 1000
    step_us = layout["window_ns"][1] // 1000
    end_us = F.expr(f"ceil(unix_micros(window_end) / {step_us}) * {step_us}")
    return rows.withColumn("nominal_end", F.timestamp_micros(end_us)).withColumn(
        "nominal_start", F.timestamp_micros(end_us - F.lit(size_us))
    )


def parse(values, layout):
    """Typed partial rows from a DataFrame whose `value` column holds the JSON
    rows (`-f json`: Kafka's value, or text lines): window bounds as
    timestamps, the nominal window (`nominal_start`, `nominal_end`),
    HLL sketches as binary."""
    rows = values.select(F.from_json(F.col("value").cast("string"), schema(layout)).alias("r")).select("r.*")
    ts = "yyyy-MM-dd'T'HH:mm:ss.SSSSSSSSSX"
    rows = rows.withColumn("window_start", F.to_timestamp("window_start", ts)).withColumn(
        "window_end", F.to_timestamp("window_end", ts)
    )
    for a in layout["aggregates"]:
        for c in a["columns"]:
            if c["type"] == "binary":
                rows = rows.withColumn(c["name"], F.unhex(F.col(f"`{c['name']}`")))
    return _with_nominal_window(rows, layout)


def _typed_schema(layout):
    """[`schema`] with the types the Arrow payload keeps: timestamps, binaries."""
    fields = []
    for f in schema(layout).fields:
        if f.name in ("window_start", "window_end"):
            f = T.StructField(f.name, T.TimestampType())
        fields.append(f)
    binaries = {c["name"] for a in layout["aggregates"] for c in a["columns"] if c["type"] == "binary"}
    return T.StructType([T.StructField(f.name, T.BinaryType()) if f.name in binaries else f for f in fields])


def parse_arrow(values, layout):
    """Typed partial rows from a DataFrame whose `value` column holds Arrow
    IPC streams (`-f arrow`: one message per host and window), decoded with
    pyarrow in `mapInArrow`; as [`parse`] gives them."""
    import pyarrow as pa
    import pyarrow.ipc as ipc
    from pyspark.sql.pandas.types import to_arrow_schema

    spark_schema = _typed_schema(layout)
    target = to_arrow_schema(spark_schema)

    def decode(batches):
        for b in batches:
            for v in b.column("value").to_pylist():
                table = ipc.open_stream(v).read_all()
                if table.num_rows == 0:  # a failed window: its cause is in the schema's metadata
                    continue
                cols = [table.column(f.name).cast(f.type, safe=False) for f in target]
                yield from pa.Table.from_arrays(cols, schema=target).to_batches()

    return _with_nominal_window(values.select("value").mapInArrow(decode, spark_schema), layout)


def read_kafka(spark, bootstrap, topic, layout, starting_offsets="earliest", payload="json"):
    """A streaming DataFrame of the partial rows the hosts produced to
    `topic`: `ebql query --partial -f json -o kafka://…` (`payload="json"`,
    [`parse`]) or `-f arrow` (`payload="arrow"`, [`parse_arrow`]: about a
    third of the bytes on Kafka)."""
    values = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", starting_offsets)
        .load()
    )
    if payload == "arrow":
        return parse_arrow(values, layout)
    if payload != "json":
        raise ValueError(f"payload must be 'json' or 'arrow', got {payload!r}")
    return parse(values, layout)


def _col(name):
    return F.col(f"`{name}`")


def _merged(a):
    """The Spark aggregate expression of aggregate `a`'s fleet value."""
    fn, cols, name = a["function"], [c["name"] for c in a["columns"]], a["name"]
    part = {c.rsplit("[", 1)[1][:-1]: c for c in cols}
    if fn == "count":
        return F.sum(_col(part["count"]))
    if fn == "sum":
        return F.sum(_col(part["sum"]))
    if fn == "min":
        return F.min(_col(part["min"]))
    if fn == "max":
        return F.max(_col(part["max"]))
    if fn in ("avg", "mean"):
        return F.sum(_col(part["sum"])) / F.sum(_col(part["count"]))
    if "var" in fn or "std" in fn:
        n, mean, m2 = _col(part["count"]), _col(part["mean"]), _col(part["m2"])
        total = F.sum(n)
        # Chan et al.: M2 = Σ m2_i + Σ n_i·mean_i² − n·mean², mean = Σ n_i·mean_i / n.
        s1 = F.sum(n * mean)
        m2_all = F.sum(m2 + n * mean * mean) - s1 * s1 / total
        pop = fn in ("var_pop", "var_population", "variance_pop", "stddev_pop")
        var = m2_all / (total if pop else (total - F.lit(1)))
        var = F.when(total > (0 if pop else 1), var)
        return F.sqrt(var) if "std" in fn else var
    if fn in ("hist", "lhist"):
        c = part["counts"]
        return F.expr(
            f"aggregate(collect_list(`{c}`), cast(null as array<bigint>), "
            f"(acc, x) -> CASE WHEN acc IS NULL THEN x ELSE zip_with(acc, x, (p, q) -> p + q) END)"
        )
    if fn in ("quantile", "approx_percentile_cont", "approx_median"):
        q = float(a["params"][0]) if a["params"] else 0.5
        b, n = part["buckets"], part["counts"]
        bins = f"array_sort(flatten(collect_list(arrays_zip(`{b}`, `{n}`))))"
        total = f"aggregate({bins}, 0L, (s, x) -> s + x['{n}'])"
        rank = f"greatest(1L, least({total}, cast(ceil({q} * {total}) as bigint)))"
        found = (
            f"aggregate({bins}, named_struct('seen', 0L, 'b', -1L), "
            f"(acc, x) -> CASE WHEN acc.seen >= {rank} THEN acc "
            f"ELSE named_struct('seen', acc.seen + x['{n}'], 'b', cast(x['{b}'] as bigint)) END).b"
        )
        return F.expr(_representative(found))
    if fn == "count_distinct":
        # The rows are the hosts' sets: one row per group and value.
        return F.size(F.collect_set(_col(part["value"])))
    if fn == "approx_distinct":
        return F.expr(f"hll_sketch_estimate(hll_union_agg(`{part['hll']}`))")
    raise ValueError(f"{name}: no merge for {fn}")


def _representative(b):
    """SQL of the value eBQL reports for quantile-sketch bucket `b` (agg/quantile.rs:
    bounds(), representative()); NULL for no bucket (an empty sketch)."""
    k = _SKETCH_K
    shift = f"(shiftright({b}, {k}) + {k - 1} - {k})"
    lo = f"shiftleft({(1 << k)} + ({b} & {(1 << k) - 1}), {shift})"
    width = f"shiftleft(1L, {shift})"
    return (
        f"CASE WHEN {b} < 0 THEN NULL WHEN {b} < {1 << k} THEN {b} "
        f"ELSE {lo} + ({width} - 1) div 2 END"
    )


def merge(rows, layout, delay="10 seconds"):
    """One row per nominal window and key: `window_start`, `window_end`
    (nominal), `query_id`, the keys, each aggregate's fleet value under its
    name, and `hosts` (the hosts that had the group). `rows`: parsed partial
    rows ([`read_kafka`], [`parse`]), streaming or not; `delay`: how late a
    host's window may arrive (the watermark's delay; streaming only)."""
    keys = [k["name"] for k in layout["keys"]]
    # Every row feeds the watermark: the window rows advance it when no group
    # does. So they are not filtered out before (Spark would push the filter
    # below the watermark); their states are NULL, which every merge skips.
    if rows.isStreaming:
        rows = rows.withWatermark("nominal_end", delay)
    group_row = F.col("window_groups").isNull()
    out = rows.groupBy("nominal_start", "nominal_end", "query_id", *[_col(k) for k in keys]).agg(
        *[_merged(a).alias(a["name"]) for a in layout["aggregates"]],
        F.array_sort(F.collect_set(F.when(group_row, F.col("host_id")))).alias("hosts"),
        F.sum(F.when(group_row, 1).otherwise(0)).alias("_group_rows"),
    )
    out = out.where(F.col("_group_rows") > 0).drop("_group_rows")
    return out.withColumnRenamed("nominal_start", "window_start").withColumnRenamed("nominal_end", "window_end")


def hosts(rows, layout, expected=None, delay="10 seconds"):
    """One row per nominal window: `hosts_seen` (the hosts that closed it,
    from their window rows), `hosts_expected`, `hosts_missing` (expected but
    not seen: stopped, or later than the watermark), `partial_hosts` (seen,
    but attached after its start or stopped before its end), `groups`
    (the group rows all hosts wrote), `max_clock_error_ns` (the largest
    estimated clock error of the hosts seen) and `unsynchronized_hosts`
    (hosts whose clock no NTP daemon keeps: their windows line up with the
    others' only as well as their clocks were set)."""
    if rows.isStreaming:
        rows = rows.withWatermark("nominal_end", delay)
    win = rows.where(F.col("window_groups").isNotNull())
    partial = (F.col("window_start") > F.col("nominal_start")) | (F.col("window_end") < F.col("nominal_end"))
    out = win.groupBy("nominal_start", "nominal_end", "query_id").agg(
        F.array_sort(F.collect_set("host_id")).alias("hosts_seen"),
        F.array_sort(F.collect_set(F.when(partial, F.col("host_id")))).alias("partial_hosts"),
        F.sum("window_groups").alias("groups"),
        F.max("clock_error_ns").alias("max_clock_error_ns"),
        F.array_sort(F.collect_set(F.when(F.col("clock_error_ns").isNull(), F.col("host_id")))).alias(
            "unsynchronized_hosts"
        ),
    )
    expected = sorted(expected or [])
    out = out.withColumn("hosts_expected", F.array(*[F.lit(h) for h in expected]).cast("array<string>"))
    out = out.withColumn("hosts_missing", F.array_except("hosts_expected", "hosts_seen"))
    return out.withColumnRenamed("nominal_start", "window_start").withColumnRenamed("nominal_end", "window_end")
