//! `ebql events` and `ebql describe`: the event catalog listed, one
//! event's columns, attach point and access shown.

use super::common::Failure;
use ebql::{Error, Executor};

/// Prints the events whose `category:name` matches `glob` (all without one).
pub(super) fn events(glob: Option<String>) -> Result<(), Error> {
    let mut ex = Executor::new();
    for e in ex
        .catalog()?
        .list(glob.as_deref())
        .map_err(Error::Catalog)?
    {
        println!("{e}");
    }
    Ok(())
}

/// Prints `event`'s columns, attach point and how each is read. An event
/// that does not exist, or cannot run on this kernel, is a usage error
/// (exit 2, as a query naming it is refused).
pub(super) fn describe(event: &str) -> Result<(), Failure> {
    let name = ebql_catalog::EventName::parse(event).map_err(catalog_failure)?;
    let mut ex = Executor::new();
    let schema = ex.event(&name).map_err(|e| match e {
        Error::Catalog(c) => catalog_failure(c),
        e => Failure::Engine(e),
    })?;
    let arrow = ebql_compiler::planner::event_arrow_schema(&schema);
    println!("{name} ({})", describe_attach(&schema.attach));
    println!("{:<24} {:<10} source", "column", "type");
    for f in arrow.fields() {
        let source = match schema.resolve(f.name()) {
            Some(ebql_catalog::Column::Field(t)) => {
                format!("field {} {}", t.c_type, describe_access(&t))
            }
            Some(ebql_catalog::Column::Attr(a)) => format!("system attribute: {}", a.description()),
            None => String::new(),
        };
        println!(
            "{:<24} {:<10} {}",
            f.name(),
            f.data_type().to_string(),
            source
        );
    }
    for t in &schema.fields {
        if let ebql_catalog::FieldKind::Unsupported { .. } = &t.kind {
            println!(
                "{:<24} {:<10} field {} (not queryable yet: {:?})",
                t.name, "-", t.c_type, t.kind
            );
        }
    }
    let structs: Vec<String> = schema
        .fields
        .iter()
        .filter_map(ebql_catalog::source::struct_fields_hint)
        .collect();
    if !structs.is_empty() {
        println!("\nstruct arguments (a dotted path reads a field, through pointers too):");
        for h in structs {
            println!("  {h}");
        }
    }
    Ok(())
}

/// A catalog error of `describe`: the name's fault (exit 2) or the
/// system's (tracefs missing or unreadable: exit 1).
fn catalog_failure(e: ebql_catalog::CatalogError) -> Failure {
    use ebql_catalog::CatalogError as C;
    match e {
        C::NoTracefs { .. } | C::Mount { .. } | C::BadFormat { .. } | C::Io { .. } => {
            Failure::Engine(Error::Catalog(e))
        }
        e => Failure::usage(e.to_string(), None),
    }
}

/// Where a program for this event attaches, for `describe`.
fn describe_attach(a: &ebql_catalog::Attach) -> String {
    use ebql_catalog::Attach;
    match a {
        Attach::Tracepoint { id } => format!("tracefs tracepoint id {id}"),
        Attach::RawTracepoint { name } => format!("raw tracepoint {name}"),
        Attach::Btf { name, btf_id } => format!("{name}, vmlinux BTF id {btf_id}"),
        Attach::Kprobe { function, retprobe } => format!(
            "{} on {function}",
            if *retprobe { "kretprobe" } else { "kprobe" }
        ),
        Attach::Uprobe {
            binary,
            offsets,
            retprobe,
            semaphore,
        } => format!(
            "{} at {}+{}{}",
            if *retprobe { "uretprobe" } else { "uprobe" },
            binary.display(),
            offsets
                .iter()
                .map(|o| format!("{o:#x}"))
                .collect::<Vec<_>>()
                .join(","),
            semaphore
                .map(|s| format!(", semaphore at {s:#x}"))
                .unwrap_or_default()
        ),
        Attach::Profile { hz } => format!("perf CPU clock, {hz} Hz on every CPU"),
        Attach::Tc { ifname, egress } => format!(
            "TC {} of {ifname}",
            if *egress { "egress" } else { "ingress" }
        ),
    }
}

/// How the probe reads a field, for `describe`.
fn describe_access(t: &ebql_catalog::TraceField) -> String {
    use ebql_catalog::Access;
    match &t.access {
        Access::Ctx => format!("at offset {}, {} bytes", t.offset, t.size),
        Access::DataLoc => format!("__data_loc at offset {}", t.offset),
        Access::Btf { arg, steps, direct } => format!(
            "argument {arg}{}{}",
            steps
                .iter()
                .map(|s| format!("{}+{}", if s.deref { "->" } else { "." }, s.offset))
                .collect::<String>(),
            if *direct {
                " (direct loads)"
            } else {
                " (probe reads)"
            }
        ),
        Access::Usdt(a) => format!("USDT operand {a}, {} bytes", t.size),
        Access::Packet(f) => format!("parsed from the packet ({f:?})"),
        Access::StackId { user } => format!("{} stack id", if *user { "user" } else { "kernel" }),
    }
}
