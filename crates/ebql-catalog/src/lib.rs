//! The eBQL catalog of kernel events (thesis §3.3.1, "Relational Model").
//!
//! Every kernel event is a streaming relation with a fixed set of attributes:
//! the event's own fields, read from the tracefs `format` file
//! (`<tracefs>/events/<category>/<name>/format`, see the kernel's
//! `Documentation/trace/events.rst`), plus the [`SystemAttr`]s available on
//! every event (time, pid, tid, uid, gid, cpu, comm, cgroup).
//!
//! * [`EventName`] parses the names users write after `FROM`
//!   (`tracepoint/syscalls/sys_enter_pread64`, `tp:sched:sched_switch`, ...).
//! * [`Catalog`] finds (or mounts) tracefs, lists events and loads schemas.
//! * [`parse_format`] is the pure parser of a `format` file's text.
//! * [`EventSchema::resolve`] maps a column name to a tracepoint field or a
//!   system attribute (see there for the shadowing rule).

#![warn(missing_docs)]

mod attr;
mod btf;
mod catalog;
pub mod elf;
mod format;
mod name;
pub mod source;
pub mod syscalls;

use std::path::PathBuf;

pub mod samples;

pub use attr::{task_comm_offset, user_register_offset, SystemAttr};
pub use btf::kernel_member_offset;
pub use catalog::{glob_match, Catalog};
pub use format::{parse_format, Column, EventSchema, FieldKind, TraceField};
pub use name::EventName;
pub use source::{Access, Attach, BtfStep, EventKind, Feature, ProgType, Source, UsdtArg};

/// Everything that can go wrong in the catalog. Each message says what is
/// wrong and, where we can tell, what to do about it.
#[derive(Debug, thiserror::Error)]
pub enum CatalogError {
    /// No tracefs with an `events/` directory was found and none could be
    /// mounted. `searched` lists the directories looked at; `hint` says why.
    #[error("tracefs not found (looked in {}): {hint}", show_paths(.searched))]
    NoTracefs {
        /// Directories looked at.
        searched: Vec<PathBuf>,
        /// Why none was usable, for people.
        hint: String,
    },

    /// tracefs was not mounted and mount(2) of it at `path` failed; the
    /// message says why (no CAP_SYS_ADMIN, no tracefs in the kernel, ...).
    #[error("tracefs is not mounted, and mounting it at {} failed: {}; hint: {}", path.display(), os_text(source), mount_hint(source, path))]
    Mount {
        /// The mount point tried (`/sys/kernel/tracing`).
        path: PathBuf,
        /// The errno from mount(2).
        source: std::io::Error,
    },

    /// The event name is not of the form `tracepoint/<category>/<name>`.
    #[error("bad event name `{input}`: {hint}")]
    BadEventName {
        /// The name as given (trimmed).
        input: String,
        /// What is wrong and the expected shape, or a corrected name.
        hint: String,
    },

    /// The event exists but a parameter of its name is beyond what the
    /// kernel accepts here (`profile:hz:N` above perf's maximum rate).
    #[error("`{input}`: {why}; hint: {hint}")]
    BadParameter {
        /// The name as given.
        input: String,
        /// What is wrong, for people.
        why: String,
        /// What to write instead.
        hint: String,
    },

    /// This kernel lacks a feature the event's kind needs (found by the
    /// runtime's feature probes, `ebql_runtime::features`).
    #[error("{kind} events are not available on this kernel: {why}")]
    Unavailable {
        /// The kind's canonical prefix, e.g. `kprobe`.
        kind: String,
        /// What is missing and how it was found, for people.
        why: String,
        /// What to use instead.
        hint: String,
    },

    /// A uprobe/USDT target is missing, unreadable or not a 64-bit ELF file.
    #[error("cannot probe `{}`: {reason}", path.display())]
    BadBinary {
        /// The binary as named or resolved.
        path: PathBuf,
        /// What is wrong, for people.
        reason: String,
    },

    /// A binary has no function or USDT probe of that name (or the name is
    /// ambiguous: C++ overloads).
    #[error("no {what} in {}; hint: {hint}", binary.display())]
    NotInBinary {
        /// The binary (resolved path).
        binary: PathBuf,
        /// What was looked for, e.g. "function `foo`".
        what: String,
        /// The closest name, or how to list them.
        hint: String,
    },

    /// No such event in tracefs; `suggestion` is the table name of the
    /// closest existing event, when one is close.
    #[error(
        "unknown event `{name}`{}",
        match suggestion {
            Some(s) => format!("; did you mean `{s}`?"),
            None => "; no such tracepoint in tracefs (events/<category>/<name>/format)".to_string(),
        }
    )]
    UnknownEvent {
        /// Table name of the event asked for.
        name: String,
        /// Table name of the closest existing event, if any is close.
        suggestion: Option<String>,
    },

    /// A dotted field path (`prev.comm`) of a BTF-typed event names no
    /// field; `hint` says what exists there.
    #[error("`{event}` has no field `{field}`: {hint}")]
    UnknownField {
        /// Table name of the event.
        event: String,
        /// The path as written, e.g. `prev.comn`.
        field: String,
        /// What is wrong and the fields that exist.
        hint: String,
    },

    /// The tracefs format file of `event` could not be parsed; `line` is
    /// 1-based, 0 when the problem is not tied to one line.
    #[error("cannot parse the tracefs format of `{event}` (line {line}): {reason}")]
    BadFormat {
        /// Table name of the event.
        event: String,
        /// 1-based line in the format file; 0 for the file as a whole.
        line: usize,
        /// What could not be parsed.
        reason: String,
    },

    /// Reading `path` failed.
    #[error("cannot read {}: {source}{}", path.display(), io_hint(source))]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
}

fn show_paths(paths: &[PathBuf]) -> String {
    let v: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
    v.join(", ")
}

/// The OS error without std's " (os error N)" suffix.
fn os_text(e: &std::io::Error) -> String {
    let s = e.to_string();
    s.split(" (os error").next().unwrap_or(&s).to_string()
}

/// Does this process have CAP_SYS_ADMIN (`CapEff` of /proc/self/status)?
fn has_cap_sys_admin() -> bool {
    const CAP_SYS_ADMIN: u32 = 21;
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("CapEff:"))
                .and_then(|h| u64::from_str_radix(h.trim(), 16).ok())
        })
        .is_some_and(|eff| eff & (1 << CAP_SYS_ADMIN) != 0)
}

fn mount_hint(e: &std::io::Error, path: &std::path::Path) -> String {
    let yourself = format!(
        "mount it once yourself with `mount -t tracefs nodev {}`",
        path.display()
    );
    match e.raw_os_error() {
        Some(libc::EPERM | libc::EACCES) if !has_cap_sys_admin() => format!(
            "mounting needs CAP_SYS_ADMIN, which this process lacks: run eBQL as root with its full \
             capabilities, or {yourself} (in a container: bind-mount the host's /sys/kernel/tracing)"
        ),
        Some(libc::EPERM | libc::EACCES) => format!(
            "the kernel refused although this process has CAP_SYS_ADMIN (a user namespace cannot mount \
             tracefs; an LSM may forbid it): {yourself} from the initial namespace"
        ),
        Some(libc::ENODEV) => "this kernel has no tracefs (built without CONFIG_TRACING)".to_string(),
        _ => yourself,
    }
}

fn io_hint(e: &std::io::Error) -> &'static str {
    if e.kind() == std::io::ErrorKind::PermissionDenied {
        "; hint: tracefs (mode 0700) needs root or CAP_DAC_READ_SEARCH; without it, tp_btf:, uprobe:, usdt:, profile: and tc: events work with CAP_BPF and CAP_PERFMON (tc: CAP_NET_ADMIN)"
    } else {
        ""
    }
}

/// True for a non-empty word of ASCII letters, digits and `_` (a tracefs
/// category or event name).
pub(crate) fn is_ident(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

/// Closest candidate to `word` if it is close enough to be a useful
/// "did you mean": Jaro-Winkler similarity >= 0.8, or edit distance <= 2 for
/// words longer than 3 characters. Among close candidates, completions of
/// `word` (candidates starting with it) win, then the smallest edit distance,
/// then the highest Jaro-Winkler similarity; ties keep the first candidate.
pub(crate) fn closest<'a>(
    word: &str,
    candidates: impl IntoIterator<Item = &'a str>,
) -> Option<&'a str> {
    let mut best: Option<(&str, (bool, usize, f64))> = None;
    for c in candidates {
        let jw = strsim::jaro_winkler(word, c);
        let lev = strsim::levenshtein(word, c);
        if c == word || !(jw >= 0.8 || (word.len() > 3 && lev <= 2)) {
            continue;
        }
        let key = (!c.starts_with(word), lev, -jw);
        if best.is_none_or(|(_, b)| key.partial_cmp(&b) == Some(std::cmp::Ordering::Less)) {
            best = Some((c, key));
        }
    }
    best.map(|(c, _)| c)
}
