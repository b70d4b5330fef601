//! Packets at the traffic-control hook: `tc:<interface>:ingress|egress`
//! (program type SCHED_CLS, attached with TCX or a clsact qdisc, read-only:
//! every packet passes).
//!
//! Not built yet: schemas report [`CatalogError::UnsupportedKind`].

use super::EventKind;
use crate::{CatalogError, EventName, EventSchema};

/// `<interface>:ingress|egress`.
pub(crate) fn parse_rest(rest: &str, input: &str) -> Result<EventName, CatalogError> {
    match rest.split_once([':', '/']) {
        Some((ifname, dir @ ("ingress" | "egress"))) if !ifname.is_empty() && ifname.len() < 16 => Ok(EventName::new(EventKind::Tc, ifname, dir)),
        _ => Err(CatalogError::BadEventName { input: input.to_string(), hint: "expected `tc:<interface>:ingress` or `tc:<interface>:egress`, e.g. tc:eth0:ingress".into() }),
    }
}

/// The schema of the packet table.
pub(crate) fn schema(_name: &EventName) -> Result<EventSchema, CatalogError> {
    Err(super::not_built(EventKind::Tc))
}

/// TC hooks of the machine's interfaces matching `pattern`.
pub(crate) fn list(_pattern: Option<&str>) -> Result<Vec<EventName>, CatalogError> {
    Err(super::not_built(EventKind::Tc))
}
