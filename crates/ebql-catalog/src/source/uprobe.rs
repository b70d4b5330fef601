//! User-space function probes: `uprobe:<binary>:<symbol>` and
//! `uretprobe:<binary>:<symbol>` (perf uprobe PMU; symbols resolved from the
//! ELF file; arguments `arg0..arg5` and `retval` from `pt_regs`).
//!
//! Not built yet: schemas report [`CatalogError::UnsupportedKind`].

use super::EventKind;
use crate::{CatalogError, EventName, EventSchema};

/// `<binary>:<symbol>`: the binary is everything up to the first `:`.
pub(crate) fn parse_rest(kind: EventKind, rest: &str, input: &str) -> Result<EventName, CatalogError> {
    match rest.split_once(':') {
        Some((binary, symbol)) if !binary.is_empty() && !symbol.is_empty() => Ok(EventName::new(kind, binary, symbol)),
        _ => Err(CatalogError::BadEventName {
            input: input.to_string(),
            hint: format!("expected `{}:<binary or library>:<symbol>`, e.g. {}:/usr/bin/bash:readline", kind.prefix(), kind.prefix()),
        }),
    }
}

/// The schema of a uprobe.
pub(crate) fn schema(name: &EventName) -> Result<EventSchema, CatalogError> {
    Err(super::not_built(name.kind))
}

/// Functions of a binary matching `pattern` (`<binary>:<symbol glob>`).
pub(crate) fn list(kind: EventKind, _pattern: Option<&str>) -> Result<Vec<EventName>, CatalogError> {
    Err(super::not_built(kind))
}
