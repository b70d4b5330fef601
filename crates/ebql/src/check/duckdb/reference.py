# The second reference of `ebql check`: DuckDB evaluates the query's SQL over
# each window's tap rows. Run by crates/ebql/src/check/duckdb/engine.rs as
# `python3 -c <this file>`; it speaks a framed protocol on stdin/stdout:
#
#   request 0 (once):  u32 length + JSON {"sql": ..., "table": ..., "branches":
#                      [{"table", "index", "columns": [[tap column, name], ...]}]}
#                      (branches: a query over several events, one table each)
#   answer:            u8 status + u64 length + payload (0: DuckDB's version, 1: error text)
#   request n (per window): u64 length + an Arrow IPC stream of the window's rows
#   answer:            u8 status + u64 length + payload (0: an Arrow IPC stream
#                      of the result, 1: DuckDB's error text)
#
# Integers little-endian. The session follows eBQL's semantics where DuckDB
# lets it (integer `/` truncates); signed()/unsigned() are eBQL's functions,
# defined here from their definition (two's complement at the same width),
# not from eBQL's code.
import json
import os
import struct
import sys

# The framing owns the process's real stdout; fd 1 then points at stderr, so
# whatever a library prints (DuckDB's progress bar for a query slower than
# 2 s, a warning) cannot corrupt an answer.
inp, out = sys.stdin.buffer, os.fdopen(os.dup(1), "wb")
os.dup2(2, 1)


def read_exact(n):
    buf = bytearray()
    while len(buf) < n:
        chunk = inp.read(n - len(buf))
        if not chunk:
            sys.exit(0)
        buf += chunk
    return bytes(buf)


def answer(status, payload):
    out.write(struct.pack("<BQ", status, len(payload)))
    out.write(payload)
    out.flush()


try:
    import duckdb
    import pyarrow as pa
    import pyarrow.compute
    import pyarrow.ipc as ipc
except Exception as e:  # reported to the user as "DuckDB unavailable"
    (n,) = struct.unpack("<I", read_exact(4))
    read_exact(n)
    answer(1, f"cannot import duckdb and pyarrow in {sys.executable}: {e}".encode())
    sys.exit(0)

# Widths of DuckDB's integer types, for signed()/unsigned().
WIDTHS = {
    "TINYINT": 8, "SMALLINT": 16, "INTEGER": 32, "BIGINT": 64,
    "UTINYINT": 8, "USMALLINT": 16, "UINTEGER": 32, "UBIGINT": 64,
}


def cases(cond):
    return " ".join(
        f"WHEN typeof(x) = '{t}' AND {cond(bits)} THEN CAST({2**bits} AS HUGEINT)"
        for t, bits in WIDTHS.items()
        if t.startswith("U") == (cond is unsigned_cond)
    )


def unsigned_cond(bits):
    return f"CAST(x AS HUGEINT) >= {2**(bits - 1)}"


def signed_cond(bits):
    return "CAST(x AS HUGEINT) < 0"


SETUP = [
    "SET integer_division = true",
    "SET enable_progress_bar = false",
    f"CREATE MACRO signed(x) AS CAST(x AS HUGEINT) - CASE {cases(unsigned_cond)} ELSE CAST(0 AS HUGEINT) END",
    f"CREATE MACRO unsigned(x) AS CAST(x AS HUGEINT) + CASE {cases(signed_cond)} ELSE CAST(0 AS HUGEINT) END",
]

(n,) = struct.unpack("<I", read_exact(4))
request = json.loads(read_exact(n))
con = duckdb.connect()
try:
    for s in SETUP:
        con.execute(s)
except Exception as e:
    answer(1, f"setting up DuckDB {duckdb.__version__}: {e}".encode())
    sys.exit(0)
answer(0, duckdb.__version__.encode())


def tables(rows):
    """The tables the query reads: the tap's rows under the request's
    table, or, over several events, each event's branch of them: the rows
    of its `__branch` index, its columns under the event's names."""
    if not request.get("branches"):
        return {request["table"]: rows}
    out = {}
    for b in request["branches"]:
        mine = rows.filter(pa.compute.equal(rows["__branch"], b["index"]))
        mine = mine.select([tap for tap, _ in b["columns"]])
        out[b["table"]] = mine.rename_columns([name for _, name in b["columns"]])
    return out


while True:
    (n,) = struct.unpack("<Q", read_exact(8))
    rows = ipc.open_stream(pa.py_buffer(read_exact(n))).read_all()
    registered = []
    try:
        for name, table in tables(rows).items():
            con.register(name, table)
            registered.append(name)
        result = con.sql(request["sql"]).to_arrow_table()
        sink = pa.BufferOutputStream()
        with ipc.new_stream(sink, result.schema) as w:
            w.write_table(result)
        answer(0, sink.getvalue().to_pybytes())
    except Exception as e:
        answer(1, str(e).encode())
    finally:
        for name in registered:
            con.unregister(name)
