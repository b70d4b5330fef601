//! Kernel function probes: `kprobe:<function>`, `kretprobe:<function>`
//! (perf kprobe PMU, arguments from `pt_regs`) and `fentry:<function>`,
//! `fexit:<function>` (BPF trampolines, arguments typed from BTF).
//!
//! Not built yet: schemas report [`CatalogError::UnsupportedKind`].

use super::EventKind;
use crate::{CatalogError, EventName, EventSchema};

/// `<function>` (optionally `<module>:<function>`).
pub(crate) fn parse_rest(kind: EventKind, rest: &str, input: &str) -> Result<EventName, CatalogError> {
    let (module, function) = rest.rsplit_once([':', '/']).unwrap_or(("", rest));
    let ident = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'.');
    if !ident(function) || !(module.is_empty() || ident(module)) {
        return Err(CatalogError::BadEventName {
            input: input.to_string(),
            hint: format!("expected `{}:<kernel function>`, e.g. {}:vfs_read", kind.prefix(), kind.prefix()),
        });
    }
    Ok(EventName::new(kind, module, function))
}

/// The schema of a kernel function probe.
pub(crate) fn schema(name: &EventName) -> Result<EventSchema, CatalogError> {
    Err(super::not_built(name.kind))
}

/// Kernel functions that can be probed, matching `pattern`.
pub(crate) fn list(kind: EventKind, _pattern: Option<&str>) -> Result<Vec<EventName>, CatalogError> {
    Err(super::not_built(kind))
}
