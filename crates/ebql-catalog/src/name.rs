//! Event names as written after `FROM`: `<kind>/<category>/<name>`.

use std::fmt;

use crate::{closest, CatalogError};

/// Which kernel hook an event is. Only [`EventKind::Tracepoint`] is
/// implemented; raw tracepoints, kprobes, uprobes, USDT etc. will be added as
/// further variants (not `#[non_exhaustive]`: adding one should break
/// exhaustive matches so every consumer gets revisited).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum EventKind {
    /// A static kernel tracepoint, described by
    /// `<tracefs>/events/<category>/<name>/format`.
    Tracepoint,
}

impl EventKind {
    /// The canonical prefix used in table names, e.g. `"tracepoint"`.
    pub fn prefix(&self) -> &'static str {
        match self {
            EventKind::Tracepoint => "tracepoint",
        }
    }
}

/// The name of one kernel event, e.g. `tracepoint/syscalls/sys_enter_pread64`
/// (kind, tracefs category, tracefs event name).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct EventName {
    /// The hook kind.
    pub kind: EventKind,
    /// The tracefs category (subsystem), e.g. `syscalls`.
    pub category: String,
    /// The event name within the category, e.g. `sys_enter_pread64`.
    pub name: String,
}

/// Spellings of the tracepoint kind (`t` as in bpftrace).
const TRACEPOINT_KINDS: [&str; 3] = ["tracepoint", "tp", "t"];

/// Known hook kinds that eBQL does not support yet, with a hint each.
const UNSUPPORTED_KINDS: [(&str, &str); 14] = [
    ("raw_tracepoint", RAW_TP_HINT),
    ("raw_tp", RAW_TP_HINT),
    ("rawtracepoint", RAW_TP_HINT),
    ("rawtp", RAW_TP_HINT),
    ("kprobe", KPROBE_HINT),
    ("kretprobe", KPROBE_HINT),
    ("k", KPROBE_HINT),
    ("kr", KPROBE_HINT),
    ("fentry", KPROBE_HINT),
    ("fexit", KPROBE_HINT),
    ("uprobe", UPROBE_HINT),
    ("uretprobe", UPROBE_HINT),
    ("u", UPROBE_HINT),
    ("usdt", UPROBE_HINT),
];
const RAW_TP_HINT: &str = "only `tracepoint/<category>/<name>` events are supported; \
     the same event is available as a tracepoint, e.g. tracepoint/sched/sched_switch";
const KPROBE_HINT: &str = "only `tracepoint/<category>/<name>` events are supported; \
     look for a tracepoint of the same subsystem instead, e.g. tracepoint/syscalls/sys_enter_openat";
const UPROBE_HINT: &str =
    "only kernel tracepoints (`tracepoint/<category>/<name>`) are supported; \
     user-space probes are not yet";
const SHAPE_HINT: &str =
    "expected `tracepoint/<category>/<name>`, e.g. tracepoint/syscalls/sys_enter_pread64";

impl EventName {
    /// A tracepoint name from its category and event name.
    pub fn tracepoint(category: impl Into<String>, name: impl Into<String>) -> EventName {
        EventName {
            kind: EventKind::Tracepoint,
            category: category.into(),
            name: name.into(),
        }
    }

    /// Parses `<kind><sep><category><sep><name>` where `sep` is `/` or `:`
    /// and kind is `tracepoint`, `tp` or `t` (kind case-insensitive; category
    /// and name are case-sensitive and must be `[A-Za-z0-9_]+`, as in tracefs).
    /// Surrounding whitespace is ignored.
    ///
    /// Errors: [`CatalogError::UnsupportedKind`] for known but unimplemented
    /// kinds (`kprobe:`, `uprobe:`, `usdt:`, `raw_tracepoint:`, ...);
    /// [`CatalogError::BadEventName`] for anything else malformed, including
    /// a missing kind (`syscalls:sys_enter_pread64`), with a hint.
    pub fn parse(s: &str) -> Result<EventName, CatalogError> {
        let input = s.trim();
        let bad = |hint: String| CatalogError::BadEventName {
            input: input.to_string(),
            hint,
        };
        if input.is_empty() {
            return Err(bad(format!("the name is empty; {SHAPE_HINT}")));
        }
        let parts: Vec<&str> = input.split(['/', ':']).collect();
        let kind = parts[0].to_ascii_lowercase();
        if let Some((k, hint)) = UNSUPPORTED_KINDS.iter().find(|(k, _)| *k == kind) {
            return Err(CatalogError::UnsupportedKind {
                kind: k.to_string(),
                hint: hint.to_string(),
            });
        }
        if !TRACEPOINT_KINDS.contains(&kind.as_str()) {
            let hint = match parts.len() {
                2 if parts.iter().all(|p| is_ident(p)) => format!(
                    "the kind prefix is missing; did you mean `tracepoint/{}/{}`?",
                    parts[0], parts[1]
                ),
                3 => match closest(&kind, TRACEPOINT_KINDS) {
                    Some(_) => format!("unknown kind `{}`; did you mean `tracepoint`?", parts[0]),
                    None => format!("unknown kind `{}`; {SHAPE_HINT}", parts[0]),
                },
                _ => SHAPE_HINT.to_string(),
            };
            return Err(bad(hint));
        }
        if parts.len() != 3 {
            return Err(bad(format!(
                "a tracepoint name has three parts, got {}; {SHAPE_HINT}",
                parts.len()
            )));
        }
        for (what, p) in [("category", parts[1]), ("event name", parts[2])] {
            if p.is_empty() {
                return Err(bad(format!("the {what} is empty; {SHAPE_HINT}")));
            }
            if !is_ident(p) {
                return Err(bad(format!(
                    "the {what} `{p}` may only contain letters, digits and `_`; {SHAPE_HINT}"
                )));
            }
        }
        Ok(EventName::tracepoint(parts[1], parts[2]))
    }

    /// The canonical table name, e.g. `tracepoint/syscalls/sys_enter_pread64`
    /// (same as `Display`).
    pub fn table_name(&self) -> String {
        format!("{}/{}/{}", self.kind.prefix(), self.category, self.name)
    }
}

impl fmt::Display for EventName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.table_name())
    }
}

impl std::str::FromStr for EventName {
    type Err = CatalogError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        EventName::parse(s)
    }
}

fn is_ident(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepted_spellings() {
        let want = EventName::tracepoint("syscalls", "sys_enter_pread64");
        for s in [
            "tracepoint/syscalls/sys_enter_pread64",
            "tracepoint:syscalls:sys_enter_pread64",
            "tp:syscalls:sys_enter_pread64",
            "tp/syscalls/sys_enter_pread64",
            "t:syscalls:sys_enter_pread64",
            "TRACEPOINT/syscalls/sys_enter_pread64",
            "  tracepoint:syscalls/sys_enter_pread64 ",
        ] {
            assert_eq!(EventName::parse(s).unwrap(), want, "{s}");
        }
        assert_eq!(want.table_name(), "tracepoint/syscalls/sys_enter_pread64");
        assert_eq!(want.to_string(), want.table_name());
        assert_eq!(
            "tp:sched:sched_switch".parse::<EventName>().unwrap().name,
            "sched_switch"
        );
    }

    #[test]
    fn missing_kind_suggests_the_full_name() {
        let e = EventName::parse("syscalls:sys_enter_pread64").unwrap_err();
        assert!(matches!(e, CatalogError::BadEventName { .. }));
        assert!(
            e.to_string()
                .contains("did you mean `tracepoint/syscalls/sys_enter_pread64`"),
            "{e}"
        );
    }

    #[test]
    fn unsupported_kinds() {
        for (s, k) in [
            ("kprobe:do_sys_openat2", "kprobe"),
            ("uprobe:/bin/bash:readline", "uprobe"),
            ("usdt:/usr/lib/libc.so.6:libc:setjmp", "usdt"),
            ("raw_tracepoint/sched_switch", "raw_tracepoint"),
            ("kretprobe:vfs_read", "kretprobe"),
        ] {
            match EventName::parse(s) {
                Err(CatalogError::UnsupportedKind { kind, hint }) => {
                    assert_eq!(kind, k);
                    assert!(hint.contains("tracepoint"), "{hint}");
                }
                other => panic!("{s}: {other:?}"),
            }
        }
    }

    #[test]
    fn malformed_names() {
        for (s, needle) in [
            ("", "empty"),
            ("sys_enter_pread64", "expected"),
            ("tracepoint/syscalls", "three parts"),
            ("tracepoint/syscalls/a/b", "three parts"),
            ("tracepoint//sys_enter_read", "category is empty"),
            ("tracepoint/syscalls/", "event name is empty"),
            ("tracepoint/sys-calls/x", "letters, digits"),
            (
                "tracepiont/syscalls/sys_enter_read",
                "did you mean `tracepoint`",
            ),
            ("bogus/syscalls/sys_enter_read", "unknown kind `bogus`"),
        ] {
            match EventName::parse(s) {
                Err(e @ CatalogError::BadEventName { .. }) => {
                    assert!(e.to_string().contains(needle), "{s}: {e}")
                }
                other => panic!("{s}: {other:?}"),
            }
        }
    }
}
