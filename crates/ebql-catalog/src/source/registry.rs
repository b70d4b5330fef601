//! The registry: the one place that names every [`Source`]. The methods of
//! [`EventKind`] and the catalog's per-kind entry points (parse, list,
//! schema, field paths) look the kind's source up here.
//!
//! Adding a kind: its variant in [`EventKind`] (`kind.rs`), its file under
//! `source/` implementing [`Source`], and one line in [`SOURCES`] (plus a
//! module under `ebql_runtime::attach` when it attaches in a new way).

use super::interface::Source;
use super::kind::{EventKind, Feature, ProgType};
use super::{btf_tp, kprobe, profile, tc, tracepoint, uprobe, usdt};
use crate::{Catalog, CatalogError, EventName, EventSchema, TraceField};

/// Every source, in listing order (their kinds, concatenated, are
/// [`EventKind::ALL`]).
pub static SOURCES: &[&dyn Source] = &[
    &tracepoint::Tracepoints,
    &btf_tp::BtfTracepoints,
    &kprobe::KernelFunctions,
    &uprobe::Uprobes,
    &usdt::Usdt,
    &profile::Profile,
    &tc::Tc,
];

/// The source that reads `kind`.
pub fn source_of(kind: EventKind) -> &'static dyn Source {
    *SOURCES
        .iter()
        .find(|s| s.kinds().contains(&kind))
        .expect("every kind is registered in SOURCES")
}

impl EventKind {
    /// The canonical prefix used in table names, e.g. `"tracepoint"`, `"tp_btf"`.
    pub fn prefix(self) -> &'static str {
        source_of(self).prefix(self)
    }

    /// Every accepted spelling, canonical first.
    pub fn spellings(self) -> &'static [&'static str] {
        source_of(self).spellings(self)
    }

    /// The kind spelled `word` (case-insensitive), if any.
    pub fn from_prefix(word: &str) -> Option<EventKind> {
        let w = word.to_ascii_lowercase();
        EventKind::ALL
            .into_iter()
            .find(|k| k.spellings().contains(&w.as_str()))
    }

    /// All spellings of all kinds (for "did you mean").
    pub fn all_spellings() -> impl Iterator<Item = &'static str> {
        EventKind::ALL
            .into_iter()
            .flat_map(|k| k.spellings().iter().copied())
    }

    /// The BPF program type of this kind's programs.
    pub fn program_type(self) -> ProgType {
        source_of(self).program_type(self)
    }

    /// Kernel features this kind needs; the runtime probes each before
    /// loading a program (`ebql_runtime::features`), never guessing from
    /// error text.
    pub fn features(self) -> &'static [Feature] {
        source_of(self).features(self)
    }

    /// What to use instead when this kernel lacks the kind, for error hints.
    pub fn alternative(self) -> &'static str {
        source_of(self).alternative(self)
    }

    /// True for kinds whose events happen in a task's context, so the
    /// task-related system attributes (pid, tid, comm, uid, cgroup) mean
    /// "the task that caused the event". False for the TC hook.
    pub fn in_task_context(self) -> bool {
        source_of(self).in_task_context(self)
    }

    /// Whether this kind's programs may be sleepable ([`Source::may_sleep`]):
    /// uprobes and USDT.
    pub fn may_sleep(self) -> bool {
        source_of(self).may_sleep(self)
    }

    /// What this kind's programs return (TC: `TCX_NEXT`, the packet goes
    /// on untouched; elsewhere 0).
    pub fn exit_value(self) -> i32 {
        source_of(self).exit_value(self)
    }
}

impl EventName {
    /// Whether this event's pointers point into user memory when a query
    /// does not say (`str` rather than `ustr`/`kstr`): arguments of system
    /// call tracepoints and of the raw syscall hooks (the kernel has not
    /// copied them yet), of uprobes and of USDT probes; every other event's
    /// pointers are kernel addresses.
    pub fn pointers_are_user(&self) -> bool {
        source_of(self.kind).pointers_are_user(self)
    }
}

/// Parses the part of a name after `<kind>:` (the kind's source reads it).
pub(crate) fn parse_rest(
    kind: EventKind,
    rest: &str,
    input: &str,
) -> Result<EventName, CatalogError> {
    source_of(kind).parse_rest(kind, rest, input)
}

/// The canonical table name of `name` (the kind's source spells it).
pub(crate) fn table_name(name: &EventName) -> String {
    source_of(name.kind).table_name(name)
}

/// The schema of `name` (the kind's source reads it).
pub(crate) fn schema(cat: &Catalog, name: &EventName) -> Result<EventSchema, CatalogError> {
    source_of(name.kind).schema(cat, name)
}

/// Events of `kind` matching `pattern` (the part of the glob after `<kind>:`;
/// `None` = all that can be listed without a target).
pub(crate) fn list(
    cat: &Catalog,
    kind: EventKind,
    pattern: Option<&str>,
) -> Result<Vec<EventName>, CatalogError> {
    source_of(kind).list(cat, kind, pattern)
}

/// The field `path` of `event` (a dotted path such as `prev.comm` split at
/// the dots) for kinds with BTF-typed arguments (tp_btf, raw tracepoints,
/// fentry, fexit): `Ok(None)` for other kinds, one-part paths and paths
/// whose first part is no argument. The field is named `prev.comm`.
///
/// Errors: [`CatalogError::UnknownField`] when a part names no field (the
/// hint lists those that exist); [`CatalogError::Unavailable`] without kernel BTF.
pub fn field_path(event: &EventName, path: &[String]) -> Result<Option<TraceField>, CatalogError> {
    if path.len() < 2 {
        return Ok(None);
    }
    source_of(event.kind).field_path(event, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The registry's kinds are exactly `EventKind::ALL`, in order, and no
    /// spelling names two kinds.
    #[test]
    fn registry_covers_every_kind_once() {
        let kinds: Vec<EventKind> = SOURCES
            .iter()
            .flat_map(|s| s.kinds().iter().copied())
            .collect();
        assert_eq!(kinds, EventKind::ALL.to_vec());
        let mut spellings: Vec<&str> = EventKind::all_spellings().collect();
        let n = spellings.len();
        spellings.sort();
        spellings.dedup();
        assert_eq!(spellings.len(), n, "a spelling names two kinds");
        for k in EventKind::ALL {
            assert_eq!(EventKind::from_prefix(k.prefix()), Some(k));
            assert_eq!(EventKind::from_prefix(&k.prefix().to_uppercase()), Some(k));
        }
    }

    /// The facts the match tables held before the registry, kind by kind.
    #[test]
    fn kinds_keep_their_program_types_and_features() {
        use EventKind::*;
        let want: [(EventKind, &str, ProgType, &[Feature]); 12] = [
            (
                Tracepoint,
                "tracepoint",
                ProgType::Tracepoint,
                &[Feature::Tracefs],
            ),
            (
                RawTracepoint,
                "raw_tracepoint",
                ProgType::RawTracepoint,
                &[],
            ),
            (TpBtf, "tp_btf", ProgType::Tracing, &[Feature::KernelBtf]),
            (Kprobe, "kprobe", ProgType::Kprobe, &[Feature::Kprobes]),
            (
                Kretprobe,
                "kretprobe",
                ProgType::Kprobe,
                &[Feature::Kprobes],
            ),
            (
                Fentry,
                "fentry",
                ProgType::Tracing,
                &[Feature::KernelBtf, Feature::Trampolines],
            ),
            (
                Fexit,
                "fexit",
                ProgType::Tracing,
                &[Feature::KernelBtf, Feature::Trampolines],
            ),
            (Uprobe, "uprobe", ProgType::Kprobe, &[Feature::Uprobes]),
            (
                Uretprobe,
                "uretprobe",
                ProgType::Kprobe,
                &[Feature::Uprobes],
            ),
            (Usdt, "usdt", ProgType::Kprobe, &[Feature::Uprobes]),
            (
                Profile,
                "profile",
                ProgType::PerfEvent,
                &[Feature::PerfCpuClock],
            ),
            (Tc, "tc", ProgType::SchedCls, &[Feature::TcHook]),
        ];
        for (k, prefix, prog, features) in want {
            assert_eq!(k.prefix(), prefix);
            assert_eq!(k.program_type(), prog, "{k:?}");
            assert_eq!(k.features(), features, "{k:?}");
            assert_eq!(k.in_task_context(), k != Tc, "{k:?}");
            assert_eq!(k.exit_value(), if k == Tc { -1 } else { 0 }, "{k:?}");
        }
    }

    /// User pointers: system call arguments (tracefs or the raw syscall
    /// hooks' registers), uprobes and USDT probes only.
    #[test]
    fn pointers_are_user_where_the_source_says() {
        use EventKind::*;
        let cases = [
            (Tracepoint, "syscalls", "sys_enter_openat", true),
            (Tracepoint, "sched", "sched_switch", false),
            // The raw syscall hooks' registers are the caller's arguments.
            (TpBtf, "raw_syscalls", "sys_enter", true),
            (RawTracepoint, "raw_syscalls", "sys_exit", true),
            (TpBtf, "sched", "sched_switch", false),
            (RawTracepoint, "sched", "sched_switch", false),
            (Kprobe, "", "do_sys_openat2", false),
            (Uprobe, "/bin/bash", "readline", true),
            (Uretprobe, "/bin/bash", "readline", true),
            (Usdt, "/usr/bin/postgres", "query__start", true),
            (Profile, "hz", "99", false),
            (Tc, "lo", "ingress", false),
        ];
        for (kind, category, name, user) in cases {
            let e = EventName::new(kind, category, name);
            assert_eq!(e.pointers_are_user(), user, "{e:?}");
        }
    }
}
