"""eBQL: streaming SQL over Linux kernel events, compiled to eBPF; results as
pyarrow record batches.

    import ebql
    with ebql.query("SELECT fd, COUNT(*) AS n FROM tracepoint/syscalls/sys_enter_pread64 "
                    "GROUP BY fd WINDOW(time, 1000, 1000)", duration=5) as q:
        for batch in q:          # one pyarrow.RecordBatch per closed window
            print(batch.to_pandas())

The engine is the native module `ebql._native`; `ebql.spark` merges many
hosts' partial windows (`ebql query --partial`) on Spark.
"""

import json as _json

from ._native import (  # noqa: F401 (re-exported)
    Error,
    KernelError,
    Query,
    QueryError,
    WindowFailed,
    __version__,
    explain,
    query,
)
from ._native import partial_layout as _partial_layout


def partial_layout(sql, host_id=None, query_id=None):
    """The layout of `sql`'s partial rows (`ebql query --partial`) as a dict:
    `version`, `host_id`, `query_id`, `query_hash`, `window_ns` ([size, step]),
    `keys` ([{name, type}]) and `aggregates` ([{name, function, params,
    result_type, columns: [{name, type}]}]). Nothing is loaded. Raises
    `QueryError` for a bad query or one without a partial form."""
    return _json.loads(_partial_layout(sql, host_id, query_id))


__all__ = [
    "Error",
    "KernelError",
    "Query",
    "QueryError",
    "WindowFailed",
    "explain",
    "partial_layout",
    "query",
]
