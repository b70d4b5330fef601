//! The [`Source`] trait: everything eBQL needs to know about a kind of
//! event, answered by one implementation per hook family (one file each
//! under `source/`), registered once in [`super::registry::SOURCES`].

use super::kind::{EventKind, Feature, ProgType};
use crate::{Catalog, CatalogError, EventName, EventSchema, TraceField};

/// One family of event kinds (bpftrace's "provider"): its spellings after
/// `FROM`, how the rest of a name reads, what `ebql events` lists, the
/// schema (whose [`crate::Attach`] is the attach description the runtime
/// turns into a link), the BPF program type and the kernel features the
/// runtime probes before loading.
///
/// Every method taking a `kind` is only called with one of [`Source::kinds`].
/// Implementations are stateless unit structs (`&'static dyn Source`).
pub trait Source: Sync {
    /// The kinds this source reads, in listing order (e.g. kprobe,
    /// kretprobe, fentry, fexit for the kernel function source).
    fn kinds(&self) -> &'static [EventKind];

    /// Every spelling of `kind` after `FROM` (matched case-insensitively),
    /// canonical first (the canonical one prefixes table names).
    fn spellings(&self, kind: EventKind) -> &'static [&'static str];

    /// The canonical prefix of `kind`, e.g. `"tp_btf"`.
    fn prefix(&self, kind: EventKind) -> &'static str {
        self.spellings(kind)[0]
    }

    /// Parses the part of a name after `<kind>:` (`rest`); `input` is the
    /// whole name as written, for messages.
    ///
    /// Errors: [`CatalogError::BadEventName`] with the expected shape.
    fn parse_rest(
        &self,
        kind: EventKind,
        rest: &str,
        input: &str,
    ) -> Result<EventName, CatalogError>;

    /// The canonical table name of `name`: `<prefix>:<name>` when the
    /// category is empty, else `<prefix>:<category>:<name>`.
    fn table_name(&self, name: &EventName) -> String {
        let prefix = self.prefix(name.kind);
        if name.category.is_empty() {
            format!("{prefix}:{}", name.name)
        } else {
            format!("{prefix}:{}:{}", name.category, name.name)
        }
    }

    /// Events of `kind` for `ebql events`, keeping those matching `pattern`
    /// (the glob after `<kind>:`; `None` = all that can be listed without
    /// naming a target binary).
    ///
    /// Errors: as the kind's description can fail to be read (tracefs,
    /// kernel BTF, an ELF file), or [`CatalogError::BadEventName`] when the
    /// kind is listed per binary and `pattern` names none.
    fn list(
        &self,
        cat: &Catalog,
        kind: EventKind,
        pattern: Option<&str>,
    ) -> Result<Vec<EventName>, CatalogError>;

    /// The schema of `name` (its columns, each saying how it is read, the
    /// system attributes, and the resolved [`crate::Attach`]).
    ///
    /// Errors: [`CatalogError::UnknownEvent`] (with a suggestion when one is
    /// close) and whatever reading the kind's description can raise.
    fn schema(&self, cat: &Catalog, name: &EventName) -> Result<EventSchema, CatalogError>;

    /// The struct field `path` (two or more parts, `["prev", "comm"]`) of
    /// `name` for kinds with BTF-typed arguments; `Ok(None)` when the kind
    /// has none or `path[0]` is no argument.
    ///
    /// Errors: [`CatalogError::UnknownField`], [`CatalogError::Unavailable`].
    fn field_path(
        &self,
        name: &EventName,
        path: &[String],
    ) -> Result<Option<TraceField>, CatalogError> {
        let _ = (name, path);
        Ok(None)
    }

    /// The BPF program type of `kind`'s programs.
    fn program_type(&self, kind: EventKind) -> ProgType;

    /// Kernel features `kind` needs (probed by `ebql_runtime::features`).
    fn features(&self, kind: EventKind) -> &'static [Feature];

    /// What to use instead when this kernel lacks `kind`, for error hints.
    fn alternative(&self, kind: EventKind) -> &'static str {
        let _ = kind;
        "no alternative hook gives the same events"
    }

    /// Whether `kind`'s events happen in a task's context (so pid, tid,
    /// comm, uid and cgroup mean the task that caused the event).
    fn in_task_context(&self, kind: EventKind) -> bool {
        let _ = kind;
        true
    }

    /// Whether pointers of `name` point into user memory when a query does
    /// not say (`str` rather than `ustr`/`kstr`). Kernel addresses by
    /// default.
    fn pointers_are_user(&self, name: &EventName) -> bool {
        let _ = name;
        false
    }

    /// Whether `kind`'s programs may be loaded sleepable (`BPF_F_SLEEPABLE`),
    /// so that they may fault user pages in (`bpf_copy_from_user_str`).
    /// Linux 6.18's verifier allows it for uprobes (and fentry, LSM, iter,
    /// struct_ops), not tracepoints: `can_be_sleepable` in kernel/bpf/verifier.c.
    fn may_sleep(&self, kind: EventKind) -> bool {
        let _ = kind;
        false
    }

    /// What a program of `kind` returns. 0 by default (tracing programs'
    /// return value is ignored, a perf event's 0 keeps the sample).
    fn exit_value(&self, kind: EventKind) -> i32 {
        let _ = kind;
        0
    }
}
