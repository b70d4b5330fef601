//! User-space statically defined tracepoints: `usdt:<binary>:<provider>:<probe>`
//! (`.note.stapsdt` notes; attached as uprobes, semaphores incremented while
//! attached; arguments `arg0..argN` from the note's operand specs).
//!
//! Not built yet: schemas report [`CatalogError::UnsupportedKind`].

use super::EventKind;
use crate::{CatalogError, EventName, EventSchema};

/// `<binary>:<provider>:<probe>`.
pub(crate) fn parse_rest(rest: &str, input: &str) -> Result<EventName, CatalogError> {
    let bad = || CatalogError::BadEventName {
        input: input.to_string(),
        hint: "expected `usdt:<binary or library>:<provider>:<probe>`, e.g. usdt:/usr/lib/postgresql/15/bin/postgres:postgresql:query__start".into(),
    };
    let (binary, probe) = rest.split_once(':').ok_or_else(bad)?;
    match probe.split_once(':') {
        Some((p, n)) if !binary.is_empty() && !p.is_empty() && !n.is_empty() && !n.contains(':') => Ok(EventName::new(EventKind::Usdt, binary, probe)),
        _ => Err(bad()),
    }
}

/// The schema of a USDT probe.
pub(crate) fn schema(name: &EventName) -> Result<EventSchema, CatalogError> {
    Err(super::not_built(name.kind))
}

/// USDT probes of a binary matching `pattern` (`<binary>:<provider:probe glob>`).
pub(crate) fn list(_pattern: Option<&str>) -> Result<Vec<EventName>, CatalogError> {
    Err(super::not_built(EventKind::Usdt))
}
