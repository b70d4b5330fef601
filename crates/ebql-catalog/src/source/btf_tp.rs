//! BTF tracepoints (`tp_btf:<category>:<name>`) and raw tracepoints
//! (`raw_tp:<category>:<name>`): the tracepoint's C arguments, typed from
//! kernel BTF (`btf_trace_<name>` in /sys/kernel/btf/vmlinux), with struct
//! fields reachable as dotted paths (`prev.comm`, `rq.q.disk.first_minor`).
//!
//! Both kinds read the same arguments (the `u64 args[]` context); tp_btf
//! programs follow pointers with direct loads (the verifier tracks
//! `PTR_TO_BTF_ID`), raw tracepoint programs with `bpf_probe_read_kernel`.

use std::collections::HashSet;

use super::attach::Attach;
use super::interface::Source;
use super::kind::{EventKind, Feature, ProgType};
use super::tracepoint;
use crate::btf::{self, Btf};
use crate::{Catalog, CatalogError, EventName, EventSchema, SystemAttr, TraceField};

/// The BTF-typed tracepoint source: `raw_tracepoint:` and `tp_btf:`.
pub struct BtfTracepoints;

impl Source for BtfTracepoints {
    fn kinds(&self) -> &'static [EventKind] {
        &[EventKind::RawTracepoint, EventKind::TpBtf]
    }

    fn spellings(&self, kind: EventKind) -> &'static [&'static str] {
        match kind {
            EventKind::TpBtf => &["tp_btf", "btf_tp"],
            _ => &["raw_tracepoint", "raw_tp", "rawtracepoint", "rawtp"],
        }
    }

    fn parse_rest(
        &self,
        kind: EventKind,
        rest: &str,
        input: &str,
    ) -> Result<EventName, CatalogError> {
        tracepoint::parse_category_name(kind, self.prefix(kind), rest, input)
    }

    fn list(
        &self,
        cat: &Catalog,
        kind: EventKind,
        pattern: Option<&str>,
    ) -> Result<Vec<EventName>, CatalogError> {
        list(cat, kind, pattern)
    }

    fn schema(&self, cat: &Catalog, name: &EventName) -> Result<EventSchema, CatalogError> {
        schema(cat, name)
    }

    fn field_path(
        &self,
        name: &EventName,
        path: &[String],
    ) -> Result<Option<TraceField>, CatalogError> {
        field_path(name, path)
    }

    /// The raw syscall hooks' registers (`regs.di`, `regs.si`, …) hold the
    /// caller's arguments, user addresses as at the tracefs syscall events.
    fn pointers_are_user(&self, name: &EventName) -> bool {
        name.category == "raw_syscalls"
    }

    fn program_type(&self, kind: EventKind) -> ProgType {
        match kind {
            EventKind::TpBtf => ProgType::Tracing,
            _ => ProgType::RawTracepoint,
        }
    }

    fn features(&self, kind: EventKind) -> &'static [Feature] {
        match kind {
            EventKind::TpBtf => &[Feature::KernelBtf],
            _ => &[],
        }
    }

    fn alternative(&self, kind: EventKind) -> &'static str {
        match kind {
            EventKind::TpBtf => "use `tracepoint:<category>:<name>` (tracefs) for the same event",
            _ => "no alternative hook gives the same events",
        }
    }
}

/// The typed arguments of the tracepoint `name`, or an unknown-event error
/// with the closest raw tracepoint.
fn args_of(btf: &Btf, name: &EventName) -> Result<(u32, Vec<(String, u32)>), CatalogError> {
    btf.tracepoint_args(&name.name).ok_or_else(|| {
        let names: Vec<String> = btf
            .names_with_prefix("btf_trace_", libbpf_sys::BTF_KIND_TYPEDEF)
            .into_iter()
            .map(|(_, n)| n["btf_trace_".len()..].to_string())
            .collect();
        let suggestion = crate::closest(&name.name, names.iter().map(String::as_str))
            .map(|n| EventName::new(name.kind, &name.category, n).table_name());
        CatalogError::UnknownEvent {
            name: name.table_name(),
            suggestion,
        }
    })
}

/// The schema of a tp_btf or raw tracepoint: one column per argument of its
/// C prototype (integers, enums and pointers; struct pointers are also
/// roots of field paths, see [`field_path`]).
///
/// Errors: [`CatalogError::Unavailable`] without kernel BTF;
/// [`CatalogError::UnknownEvent`] when there is no such raw tracepoint, or
/// tracefs has it under another category (suggested).
pub(crate) fn schema(cat: &Catalog, name: &EventName) -> Result<EventSchema, CatalogError> {
    let btf = btf::vmlinux()?;
    let (typedef, args) = args_of(btf, name)?;
    if !cat.event_dir(&name.category, &name.name).is_dir() {
        // Bare tracepoints (no tracefs event) are accepted under any category;
        // a tracefs event must be named by its own category.
        if let Some(found) = tracepoint::suggest(cat, name).filter(|s| s.name == name.name) {
            return Err(CatalogError::UnknownEvent {
                name: name.table_name(),
                suggestion: Some(found.table_name()),
            });
        }
    }
    let direct = name.kind == EventKind::TpBtf;
    let attach = match name.kind {
        EventKind::TpBtf => Attach::Btf {
            name: name.name.clone(),
            btf_id: typedef,
        },
        _ => Attach::RawTracepoint {
            name: name.name.clone(),
        },
    };
    Ok(EventSchema {
        event: name.clone(),
        attach,
        fields: btf::arg_fields(btf, &args, direct),
        attrs: SystemAttr::ALL.to_vec(),
    })
}

/// The field `path` (`["prev", "comm"]`) of a tp_btf or raw tracepoint,
/// named `prev.comm`; `Ok(None)` when `path[0]` is not one of its arguments.
///
/// Errors: [`CatalogError::UnknownField`] (with the fields that exist).
pub(crate) fn field_path(
    name: &EventName,
    path: &[String],
) -> Result<Option<TraceField>, CatalogError> {
    let btf = btf::vmlinux()?;
    let (_, args) = args_of(btf, name)?;
    btf::resolve_path(
        btf,
        &name.table_name(),
        &args,
        path,
        name.kind == EventKind::TpBtf,
    )
}

/// tp_btf or raw tracepoints whose `category:name` matches `pattern`: the
/// tracefs tracepoints that have a `btf_trace_<name>` type in kernel BTF.
pub(crate) fn list(
    cat: &Catalog,
    kind: EventKind,
    pattern: Option<&str>,
) -> Result<Vec<EventName>, CatalogError> {
    let btf = btf::vmlinux()?;
    let typed: HashSet<String> = btf
        .names_with_prefix("btf_trace_", libbpf_sys::BTF_KIND_TYPEDEF)
        .into_iter()
        .map(|(_, n)| n["btf_trace_".len()..].to_string())
        .collect();
    Ok(tracepoint::list(cat, pattern)?
        .into_iter()
        .filter(|e| typed.contains(&e.name))
        .map(|e| EventName::new(kind, e.category, e.name))
        .collect())
}
