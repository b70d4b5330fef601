//! BTF tracepoints (`tp_btf:<category>:<name>`) and raw tracepoints
//! (`raw_tp:<category>:<name>`): the tracepoint's C arguments, typed from
//! kernel BTF (`btf_trace_<name>` in /sys/kernel/btf/vmlinux).
//!
//! Not built yet: schemas report [`CatalogError::UnsupportedKind`].

use super::EventKind;
use crate::{Catalog, CatalogError, EventName, EventSchema};

/// The schema of a tp_btf or raw tracepoint.
pub(crate) fn schema(_cat: &Catalog, name: &EventName) -> Result<EventSchema, CatalogError> {
    Err(super::not_built(name.kind))
}

/// tp_btf or raw tracepoints whose `category:name` matches `pattern`.
pub(crate) fn list(_cat: &Catalog, kind: EventKind, _pattern: Option<&str>) -> Result<Vec<EventName>, CatalogError> {
    Err(super::not_built(kind))
}
