//! Timed sampling: `profile:hz:<N>` (perf software CPU-clock event on every
//! online CPU in frequency mode, program type PERF_EVENT).
//!
//! Columns: `kstack` and `ustack`, the kernel and user stack of the
//! interrupted task as ids from `bpf_get_stackid` into the query's stack
//! map ([`Access::StackId`]); the system attributes describe the interrupted
//! task (pid 0 is the idle task). The kernel groups and filters on the id;
//! user space symbolizes it (see the `ebql` crate's `symbolize` module).

use super::access::Access;
use super::attach::Attach;
use super::interface::Source;
use super::kind::{EventKind, Feature, ProgType};
use crate::{Catalog, CatalogError, EventName, EventSchema, FieldKind, SystemAttr, TraceField};

/// The timed sampling source: `profile:hz:<N>`.
pub struct Profile;

impl Source for Profile {
    fn kinds(&self) -> &'static [EventKind] {
        &[EventKind::Profile]
    }

    fn spellings(&self, _: EventKind) -> &'static [&'static str] {
        &["profile", "p"]
    }

    fn parse_rest(&self, _: EventKind, rest: &str, input: &str) -> Result<EventName, CatalogError> {
        parse_rest(rest, input)
    }

    fn list(
        &self,
        _: &Catalog,
        _: EventKind,
        pattern: Option<&str>,
    ) -> Result<Vec<EventName>, CatalogError> {
        list(pattern)
    }

    fn schema(&self, _: &Catalog, name: &EventName) -> Result<EventSchema, CatalogError> {
        schema(name, max_sample_rate())
    }

    fn program_type(&self, _: EventKind) -> ProgType {
        ProgType::PerfEvent
    }

    fn features(&self, _: EventKind) -> &'static [Feature] {
        &[Feature::PerfCpuClock]
    }
}

/// `hz:<N>` with 1 <= N.
fn parse_rest(rest: &str, input: &str) -> Result<EventName, CatalogError> {
    match rest.split_once([':', '/']) {
        Some(("hz", n)) if n.parse::<u64>().is_ok_and(|n| n > 0) => {
            Ok(EventName::new(EventKind::Profile, "hz", n))
        }
        _ => Err(CatalogError::BadEventName {
            input: input.to_string(),
            hint: "expected `profile:hz:<samples per second>`, e.g. profile:hz:99".into(),
        }),
    }
}

/// The two stack columns, each an 8-byte id read with `bpf_get_stackid`.
fn stack_field(name: &str, user: bool) -> TraceField {
    TraceField {
        name: name.into(),
        c_type: "frames (root first, `;`-separated) of".into(),
        offset: 0,
        size: 8,
        kind: FieldKind::Int { signed: false },
        access: Access::StackId { user },
    }
}

/// Where the kernel publishes the highest sampling frequency perf_event_open
/// accepts (it lowers the value itself when sampling interrupts take too long).
pub const MAX_SAMPLE_RATE_FILE: &str = "/proc/sys/kernel/perf_event_max_sample_rate";

/// This machine's highest perf sampling rate now, from
/// [`MAX_SAMPLE_RATE_FILE`]; `None` when it cannot be read.
pub fn max_sample_rate() -> Option<u64> {
    std::fs::read_to_string(MAX_SAMPLE_RATE_FILE)
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// The schema of a sampling event: `kstack`, `ustack`, every system
/// attribute. `max_rate`: the highest rate perf accepts (perf_event_open
/// fails with EINVAL above it), checked so that the query is refused
/// before anything is loaded; `None`: not checked.
pub fn schema(name: &EventName, max_rate: Option<u64>) -> Result<EventSchema, CatalogError> {
    let hz: u64 = name.name.parse().map_err(|_| CatalogError::BadEventName {
        input: name.table_name(),
        hint: "the sampling rate must be a positive integer".into(),
    })?;
    if let Some(max) = max_rate.filter(|&max| hz > max) {
        return Err(CatalogError::BadParameter {
            input: name.table_name(),
            why: format!("{hz} samples a second is more than perf allows on this machine"),
            hint: format!(
                "at most profile:hz:{max} (kernel.perf_event_max_sample_rate; the kernel lowers it when sampling takes too long); 99 is the usual rate"
            ),
        });
    }
    Ok(EventSchema {
        event: name.clone(),
        attach: Attach::Profile { hz },
        fields: vec![stack_field("kstack", false), stack_field("ustack", true)],
        attrs: SystemAttr::ALL.to_vec(),
    })
}

/// The sampling event (one shape; listed at 99 Hz, the usual rate that
/// avoids lockstep with timer ticks).
fn list(pattern: Option<&str>) -> Result<Vec<EventName>, CatalogError> {
    let ev = EventName::new(EventKind::Profile, "hz", "99");
    Ok(if pattern.is_none_or(|g| crate::glob_match(g, "hz:99")) {
        vec![ev]
    } else {
        vec![]
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schema_has_stacks_and_rate() {
        let name = EventName::parse("profile:hz:99").unwrap();
        let s = schema(&name, Some(100_000)).unwrap();
        assert_eq!(s.attach, Attach::Profile { hz: 99 });
        assert_eq!(
            s.field("ustack").unwrap().access,
            Access::StackId { user: true }
        );
        assert_eq!(
            s.field("kstack").unwrap().access,
            Access::StackId { user: false }
        );
        assert!(EventName::parse("profile:hz:0").is_err());
        let fast = EventName::parse("profile:hz:100001").unwrap();
        assert!(matches!(
            schema(&fast, Some(100_000)),
            Err(CatalogError::BadParameter { .. })
        ));
        assert!(schema(&fast, None).is_ok());
        assert_eq!(list(None).unwrap(), vec![name]);
    }
}
