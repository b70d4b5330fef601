//! Timed sampling: `profile:hz:<N>` (perf software CPU-clock event on every
//! CPU; `kstack`/`ustack` columns are stack ids symbolized in user space).
//!
//! Not built yet: schemas report [`CatalogError::UnsupportedKind`].

use super::EventKind;
use crate::{CatalogError, EventName, EventSchema};

/// `hz:<N>` with 1 <= N.
pub(crate) fn parse_rest(rest: &str, input: &str) -> Result<EventName, CatalogError> {
    match rest.split_once([':', '/']) {
        Some(("hz", n)) if n.parse::<u64>().is_ok_and(|n| n > 0) => Ok(EventName::new(EventKind::Profile, "hz", n)),
        _ => Err(CatalogError::BadEventName { input: input.to_string(), hint: "expected `profile:hz:<samples per second>`, e.g. profile:hz:99".into() }),
    }
}

/// The schema of a sampling event.
pub(crate) fn schema(_name: &EventName) -> Result<EventSchema, CatalogError> {
    Err(super::not_built(EventKind::Profile))
}

/// The sampling event (there is one shape: `profile:hz:<N>`).
pub(crate) fn list(_pattern: Option<&str>) -> Result<Vec<EventName>, CatalogError> {
    Err(super::not_built(EventKind::Profile))
}
