//! `--partial`'s options and the identity its rows carry (the rows
//! themselves: [`ebql_compiler::partial`]); the layout a merge reads, as JSON.

use ebql_compiler::partial::{Identity, PartialLayout};
use std::hash::Hasher;

/// `--partial [--host-id NAME] [--query-id NAME]`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PartialOptions {
    /// The rows' `host_id`; `None`: this host's name ([`hostname`]).
    pub host_id: Option<String>,
    /// The rows' `query_id`; `None`: the query hash ([`query_hash`]).
    pub query_id: Option<String>,
}

impl PartialOptions {
    /// The rows' `host_id`: the one given, else [`hostname`].
    pub fn host(&self) -> String {
        self.host_id.clone().unwrap_or_else(hostname)
    }

    /// The identity the rows of `sql` carry (the clock's error read now,
    /// [`crate::clock_sync::ClockSync`]).
    pub fn identity(&self, sql: &str) -> Identity {
        let query_hash = query_hash(sql);
        Identity {
            host_id: self.host(),
            query_id: self.query_id.clone().unwrap_or_else(|| query_hash.clone()),
            query_hash,
            clock_error_ns: crate::clock_sync::ClockSync::read()
                .ok()
                .filter(|c| c.synchronized)
                .map(|c| c.est_error_ns),
        }
    }
}

/// This host's name (`/proc/sys/kernel/hostname`), or `unknown-host`.
pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "unknown-host".to_string())
}

/// A stable id of the query text: xxHash64 (seed 0), 16 hex digits.
pub fn query_hash(sql: &str) -> String {
    let mut h = twox_hash::XxHash64::with_seed(0);
    h.write(sql.as_bytes());
    format!("{:016x}", h.finish())
}

/// The layout as JSON, for merge jobs (`ebql.partial_layout` in Python):
/// `{"version", "host_id", "query_id", "query_hash", "window_ns": [size,
/// step], "keys": [{"name", "type"}], "aggregates": [{"name", "function",
/// "params", "result_type", "columns": [{"name", "type"}]}]}`; types are
/// Arrow's `Display` (`Int64`, `List(UInt64)`, …).
pub fn layout_json(layout: &PartialLayout) -> serde_json::Value {
    let field = |f: &datafusion::arrow::datatypes::Field| serde_json::json!({"name": f.name(), "type": type_name(f.data_type())});
    serde_json::json!({
        "version": layout.version,
        "host_id": layout.identity.host_id,
        "query_id": layout.identity.query_id,
        "query_hash": layout.identity.query_hash,
        "clock_error_ns": layout.identity.clock_error_ns,
        "window_ns": [layout.window_ns.0, layout.window_ns.1],
        "keys": layout.keys.iter().map(field).collect::<Vec<_>>(),
        "aggregates": layout.aggregates.iter().map(|a| serde_json::json!({
            "name": a.name,
            "function": a.function,
            "params": a.params,
            "result_type": type_name(&a.result_type),
            "columns": a.columns.iter().map(field).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
    })
}

/// An Arrow type as the layout names it: `int64`, `uint64`, `float64`,
/// `utf8`, `binary`, `list<uint64>`, a struct's fields in `struct<…>`.
pub fn type_name(dt: &datafusion::arrow::datatypes::DataType) -> String {
    use datafusion::arrow::datatypes::DataType;
    match dt {
        DataType::List(f) | DataType::LargeList(f) => format!("list<{}>", type_name(f.data_type())),
        DataType::Struct(fields) => format!(
            "struct<{}>",
            fields
                .iter()
                .map(|f| format!("{}: {}", f.name(), type_name(f.data_type())))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        other => other.to_string().to_lowercase(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_hash_is_xxhash64() {
        // xxHash64 of "" with seed 0 (the reference value of the algorithm).
        assert_eq!(query_hash(""), "ef46db3751d8e999");
        assert_ne!(query_hash("SELECT 1"), query_hash("SELECT 2"));
    }

    #[test]
    fn ids_default_to_the_host_and_the_hash() {
        let id = PartialOptions::default().identity("SELECT 1");
        assert_eq!(id.host_id, hostname());
        assert_eq!(id.query_id, id.query_hash);
        let named = PartialOptions {
            host_id: Some("h1".into()),
            query_id: Some("q".into()),
        }
        .identity("SELECT 1");
        assert_eq!(
            (named.host_id.as_str(), named.query_id.as_str()),
            ("h1", "q")
        );
    }
}
