//! Event names as written after `FROM`: `<kind>/<category>/<name>`.

use std::fmt;

use crate::source::registry;
use crate::{closest, is_ident, CatalogError, EventKind};

/// The name of one event: its kind, where it is (`category`) and what it
/// is (`name`). What the two strings mean depends on the kind:
///
/// | kind | `category` | `name` | table name |
/// |---|---|---|---|
/// | tracepoint, raw_tp, tp_btf | tracefs category (`sched`) | event (`sched_switch`) | `tracepoint/sched/sched_switch`, `tp_btf:sched:sched_switch` |
/// | kprobe, kretprobe, fentry, fexit | empty | kernel function | `kprobe:vfs_read` |
/// | uprobe, uretprobe | binary or library path | symbol | `uprobe:/usr/bin/x:main` |
/// | usdt | binary or library path | `provider:probe` | `usdt:/usr/bin/x:prov:probe` |
/// | profile | `hz` | samples per second | `profile:hz:99` |
/// | tc | interface | `ingress` or `egress` | `tc:eth0:ingress` |
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct EventName {
    /// The hook kind.
    pub kind: EventKind,
    /// Where the event is (see the table above).
    pub category: String,
    /// Which event it is there (see the table above).
    pub name: String,
}

const SHAPE_HINT: &str =
    "expected `<kind>:<event>`, e.g. tracepoint:syscalls:sys_enter_pread64, tp_btf:sched:sched_switch, \
     uprobe:/usr/bin/bash:readline, usdt:/path/binary:provider:probe, profile:hz:99, tc:eth0:ingress";

impl EventName {
    /// A tracepoint name from its category and event name.
    pub fn tracepoint(category: impl Into<String>, name: impl Into<String>) -> EventName {
        EventName::new(EventKind::Tracepoint, category, name)
    }

    /// An event of any kind from its parts (no validation).
    pub fn new(kind: EventKind, category: impl Into<String>, name: impl Into<String>) -> EventName {
        EventName {
            kind,
            category: category.into(),
            name: name.into(),
        }
    }

    /// Parses `<kind><sep><rest>` where `sep` is `:` or `/` and kind is one
    /// of [`EventKind`]'s spellings (case-insensitive); the kind's module
    /// reads the rest (tracefs categories and names are `[A-Za-z0-9_]+`;
    /// uprobe paths are taken up to the next `:`). Surrounding whitespace is
    /// ignored.
    ///
    /// Errors: [`CatalogError::BadEventName`] for anything malformed,
    /// including a missing or unknown kind (`syscalls:sys_enter_pread64`),
    /// with a hint.
    pub fn parse(s: &str) -> Result<EventName, CatalogError> {
        let input = s.trim();
        let bad = |hint: String| CatalogError::BadEventName {
            input: input.to_string(),
            hint,
        };
        if input.is_empty() {
            return Err(bad(format!("the name is empty; {SHAPE_HINT}")));
        }
        let (head, rest) = match input.find(['/', ':']) {
            Some(i) => (&input[..i], &input[i + 1..]),
            None => (input, ""),
        };
        let Some(kind) = EventKind::from_prefix(head) else {
            let parts: Vec<&str> = input.split(['/', ':']).collect();
            let hint = match parts.len() {
                2 if parts.iter().all(|p| is_ident(p)) => format!(
                    "the kind prefix is missing; did you mean `tracepoint/{}/{}`?",
                    parts[0], parts[1]
                ),
                n if n >= 2 => {
                    match closest(&head.to_ascii_lowercase(), EventKind::all_spellings())
                        .and_then(EventKind::from_prefix)
                    {
                        Some(k) => format!("unknown kind `{head}`; did you mean `{}`?", k.prefix()),
                        None => format!("unknown kind `{head}`; {SHAPE_HINT}"),
                    }
                }
                _ => SHAPE_HINT.to_string(),
            };
            return Err(bad(hint));
        };
        registry::parse_rest(kind, rest, input)
    }

    /// The canonical table name, e.g. `tracepoint/syscalls/sys_enter_pread64`
    /// (same as `Display`).
    pub fn table_name(&self) -> String {
        registry::table_name(self)
    }

    /// A short SQL identifier for the event: its name with every character
    /// other than letters, digits and `_` replaced by `_` (`query__start`
    /// for `usdt:…:postgresql:query__start`).
    pub fn short_name(&self) -> String {
        let last = self.name.rsplit(':').next().unwrap_or(&self.name);
        last.chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '_' {
                    c
                } else {
                    '_'
                }
            })
            .collect()
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
    fn every_kind_parses() {
        for (s, table) in [
            ("kprobe:do_sys_openat2", "kprobe:do_sys_openat2"),
            ("kretprobe:vfs_read", "kretprobe:vfs_read"),
            ("fentry/vfs_read", "fentry:vfs_read"),
            ("uprobe:/bin/bash:readline", "uprobe:/bin/bash:readline"),
            (
                "ur:/usr/lib/libc.so.6:malloc",
                "uretprobe:/usr/lib/libc.so.6:malloc",
            ),
            (
                "usdt:/usr/lib/libc.so.6:libc:setjmp",
                "usdt:/usr/lib/libc.so.6:libc:setjmp",
            ),
            (
                "raw_tracepoint/sched/sched_switch",
                "raw_tracepoint:sched:sched_switch",
            ),
            ("tp_btf:sched:sched_switch", "tp_btf:sched:sched_switch"),
            ("profile:hz:99", "profile:hz:99"),
            ("tc:veth0:ingress", "tc:veth0:ingress"),
        ] {
            let e = EventName::parse(s).unwrap_or_else(|e| panic!("{s}: {e}"));
            assert_eq!(e.table_name(), table, "{s}");
            assert_eq!(
                EventName::parse(&e.table_name()).unwrap(),
                e,
                "{s} round trip"
            );
        }
        assert_eq!(
            EventName::parse("usdt:/bin/postgres:postgresql:query__start")
                .unwrap()
                .short_name(),
            "query__start"
        );
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
