//! tracefs tracepoints (`tracepoint:<category>:<name>`): listing from
//! `<tracefs>/events`, schemas from `events/<category>/<name>/format`
//! (kernel `Documentation/trace/events.rst`), attach by tracefs id.
//!
//! The name syntax `<category>:<name>` is shared with `raw_tp` and `tp_btf`
//! (same tracepoints, other program types: [`super::btf_tp`]).

use std::fs;
use std::io;

use super::interface::Source;
use super::kind::{EventKind, Feature, ProgType};
use crate::{closest, is_ident, parse_format, Catalog, CatalogError, EventName, EventSchema};

/// The tracefs tracepoint source (`tracepoint:<category>:<name>`).
pub struct Tracepoints;

impl Source for Tracepoints {
    fn kinds(&self) -> &'static [EventKind] {
        &[EventKind::Tracepoint]
    }

    fn spellings(&self, _: EventKind) -> &'static [&'static str] {
        &["tracepoint", "tp", "t"]
    }

    fn parse_rest(
        &self,
        kind: EventKind,
        rest: &str,
        input: &str,
    ) -> Result<EventName, CatalogError> {
        parse_category_name(kind, self.prefix(kind), rest, input)
    }

    /// `tracepoint/<category>/<name>`: the one kind spelled with slashes.
    fn table_name(&self, name: &EventName) -> String {
        format!("{}/{}/{}", self.prefix(name.kind), name.category, name.name)
    }

    fn list(
        &self,
        cat: &Catalog,
        _: EventKind,
        pattern: Option<&str>,
    ) -> Result<Vec<EventName>, CatalogError> {
        list(cat, pattern)
    }

    fn schema(&self, cat: &Catalog, name: &EventName) -> Result<EventSchema, CatalogError> {
        schema(cat, name)
    }

    fn program_type(&self, _: EventKind) -> ProgType {
        ProgType::Tracepoint
    }

    fn features(&self, _: EventKind) -> &'static [Feature] {
        &[Feature::Tracefs]
    }

    /// System call arguments (`syscalls:sys_enter_*`, and
    /// `raw_syscalls:sys_enter`'s `args[]`) are the caller's user
    /// addresses: the kernel has not copied them yet.
    fn pointers_are_user(&self, name: &EventName) -> bool {
        name.category == "syscalls" || name.category == "raw_syscalls"
    }
}

/// Categories that have format files but are ftrace-internal records, not
/// tracepoints a BPF program can attach to.
pub(crate) const SKIPPED_CATEGORIES: [&str; 1] = ["ftrace"];

/// `<category>(:|/)<name>` for a tracepoint-named kind spelled `prefix`
/// (shared with raw_tp and tp_btf).
pub(crate) fn parse_category_name(
    kind: EventKind,
    prefix: &str,
    rest: &str,
    input: &str,
) -> Result<EventName, CatalogError> {
    let shape =
        format!("expected `{prefix}/<category>/<name>`, e.g. {prefix}/syscalls/sys_enter_pread64");
    let bad = |hint: String| CatalogError::BadEventName {
        input: input.to_string(),
        hint,
    };
    let parts: Vec<&str> = rest.split(['/', ':']).collect();
    if parts.len() != 2 {
        return Err(bad(format!(
            "a tracepoint name has three parts, got {}; {shape}",
            parts.len() + 1
        )));
    }
    for (what, p) in [("category", parts[0]), ("event name", parts[1])] {
        if p.is_empty() {
            return Err(bad(format!("the {what} is empty; {shape}")));
        }
        if !is_ident(p) {
            return Err(bad(format!(
                "the {what} `{p}` may only contain letters, digits and `_`; {shape}"
            )));
        }
    }
    Ok(EventName::new(kind, parts[0], parts[1]))
}

/// Reads and parses `events/<category>/<name>/format`.
///
/// Errors: [`CatalogError::UnknownEvent`] when there is no such format
/// file (or the category is the non-attachable `ftrace`), with a
/// suggestion: the same event name in another category, else the closest
/// event in the same category, else the closest event of the closest
/// category; only close matches. [`CatalogError::Io`] /
/// [`CatalogError::BadFormat`] when it cannot be read or parsed.
pub(crate) fn schema(cat: &Catalog, name: &EventName) -> Result<EventSchema, CatalogError> {
    let path = cat.event_dir(&name.category, &name.name).join("format");
    let skipped = SKIPPED_CATEGORIES.contains(&name.category.as_str());
    match fs::read_to_string(&path) {
        _ if skipped => Err(CatalogError::UnknownEvent {
            name: name.table_name(),
            suggestion: None,
        }),
        Ok(text) => parse_format(name.clone(), &text),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Err(CatalogError::UnknownEvent {
            name: name.table_name(),
            suggestion: suggest(cat, name).map(|n| n.table_name()),
        }),
        Err(source) => Err(CatalogError::Io { path, source }),
    }
}

/// All tracepoints (directories `events/<category>/<name>/` with a `format`
/// file; the ftrace-internal `ftrace` category is left out), sorted by
/// category then name, keeping those whose `category:name` matches `pattern`.
pub(crate) fn list(cat: &Catalog, pattern: Option<&str>) -> Result<Vec<EventName>, CatalogError> {
    let mut out = Vec::new();
    for category in cat.categories()? {
        for name in cat.names_in(&category)? {
            if pattern.is_none_or(|g| crate::glob_match(g, &format!("{category}:{name}"))) {
                out.push(EventName::tracepoint(category.clone(), name));
            }
        }
    }
    out.sort_by(|a, b| (&a.category, &a.name).cmp(&(&b.category, &b.name)));
    Ok(out)
}

/// The closest existing tracepoint to `want` (same kind), if one is close.
pub(crate) fn suggest(cat: &Catalog, want: &EventName) -> Option<EventName> {
    let categories = cat.categories().ok()?;
    let found = |category: &str, name: &str| Some(EventName::new(want.kind, category, name));
    for c in &categories {
        if cat.event_dir(c, &want.name).join("format").is_file() {
            return found(c, &want.name);
        }
    }
    if categories.contains(&want.category) {
        let names = cat.names_in(&want.category).ok()?;
        return closest(&want.name, names.iter().map(String::as_str))
            .and_then(|n| found(&want.category, n));
    }
    let c = closest(&want.category, categories.iter().map(String::as_str))?;
    let names = cat.names_in(c).ok()?;
    if names.contains(&want.name) {
        return found(c, &want.name);
    }
    closest(&want.name, names.iter().map(String::as_str)).and_then(|n| found(c, n))
}
