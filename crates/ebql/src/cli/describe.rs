//! `ebql events` and `ebql describe`: the event catalog listed (with the
//! wire relations and built-in views), one event's columns, attach point
//! and access shown, or a relation's columns and capture, or a view's SELECT.

use super::common::Failure;
use ebql::{Error, Executor};
use ebql_catalog::EventKind;

/// The forms of the kinds that are not listed one by one (their events
/// need a target: a binary, an interface, a rate, a kernel function).
const FORMS: &[(EventKind, &str, &str)] = &[
    (
        EventKind::Profile,
        "profile:hz:<N>",
        "N samples a second on every CPU (kstack, ustack)",
    ),
    (
        EventKind::Tc,
        "tc:<interface>:ingress|egress",
        "packets at the traffic-control hook",
    ),
    (
        EventKind::Uprobe,
        "uprobe:<binary>:<function>",
        "entry of a user-space function (uretprobe: its return)",
    ),
    (
        EventKind::Usdt,
        "usdt:<binary>:<provider>:<probe>",
        "a USDT probe (ebql events 'usdt:<binary>:*' lists them)",
    ),
    (
        EventKind::TpBtf,
        "tp_btf:<tracepoint>",
        "a tracepoint's typed arguments (BTF)",
    ),
    (
        EventKind::RawTracepoint,
        "raw_tracepoint:<tracepoint>",
        "a tracepoint's raw arguments",
    ),
    (
        EventKind::Kprobe,
        "kprobe:<function>",
        "entry of a kernel function (kretprobe: its return)",
    ),
    (
        EventKind::Fentry,
        "fentry:<function>",
        "entry of a kernel function by trampoline (fexit: its return)",
    ),
];

/// Prints the events matching `glob`: any kind by its prefix
/// (`usdt:/usr/bin/x:*`), or tracepoints by `category:name` or by name
/// alone (`sys_enter_open*`); without a glob, every tracepoint and then the
/// forms of the other kinds, marked when this kernel lacks them. A kind
/// this kernel lacks is said so instead of listed; a glob that matches
/// nothing is an error (exit 1), as grep's.
pub(super) fn events(glob: Option<String>) -> Result<(), Failure> {
    let mut ex = Executor::new();
    let catalog = ex.catalog()?;
    let kind = glob.as_deref().and_then(|g| {
        g.find([':', '/'])
            .and_then(|i| EventKind::from_prefix(&g[..i]))
    });
    if let Some((_, why)) = kind.and_then(ebql_runtime::features::missing) {
        return Err(Failure::Engine(Error::Unavailable(format!(
            "{} events are not available here: {why}",
            kind.map_or("", |k| k.prefix())
        ))));
    }
    let found = catalog.list(glob.as_deref()).map_err(Error::Catalog)?;
    for e in &found {
        println!("{e}");
    }
    match glob {
        None => {
            for rel in &ebql_compiler::wire::RELATIONS {
                println!("{:<36} {}", rel.name, rel.doc);
            }
            for v in &ebql_compiler::views::BUILTIN {
                println!("{:<36} view: {}", v.name, v.doc);
            }
            for (k, form, what) in FORMS {
                match ebql_runtime::features::missing(*k) {
                    None => println!("{form:<36} {what}"),
                    Some((_, why)) => println!("{form:<36} {what} [not on this kernel: {why}]"),
                }
            }
            Ok(())
        }
        Some(g) if found.is_empty() => Err(Failure::Engine(Error::Unavailable(format!(
            "no event matches '{g}' (tracepoints match by category:name or name: 'syscalls:sys_enter_open*', 'sched_switch'; other kinds by their prefix: 'usdt:/path/to/binary:*'; `ebql events` lists every form)"
        )))),
        Some(_) => Ok(()),
    }
}

/// Prints `event`'s columns, attach point and how each is read. An event
/// that does not exist, or cannot run on this kernel, is a usage error
/// (exit 2, as a query naming it is refused).
pub(super) fn describe(event: &str) -> Result<(), Failure> {
    if describe_relation(event) {
        return Ok(());
    }
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

/// `describe` of a wire relation (its columns and its capture) or of a
/// built-in view (its SELECT); false when `name` is neither.
fn describe_relation(name: &str) -> bool {
    let lower = name.to_ascii_lowercase();
    if let Some(rel) = ebql_compiler::wire::RELATIONS
        .iter()
        .find(|r| r.name == lower)
    {
        println!("{} ({})", rel.name, rel.doc);
        println!("{:<16} {:<8} meaning", "column", "type");
        let schema = ebql_compiler::wire::statement_schema();
        for (f, (_, doc)) in schema.fields().iter().zip(ebql_compiler::wire::COLUMN_DOCS) {
            println!("{:<16} {:<8} {doc}", f.name(), f.data_type().to_string());
        }
        // The hook a query on it would run on here (the catalog decides, as at compile time).
        let mut ex = Executor::new();
        let hook =
            ebql_compiler::wire::CaptureHook::choose(Default::default(), |e| ex.event(e).is_ok());
        println!(
            "\ncaptured by: {}",
            ebql_compiler::wire::capture_sql(
                rel,
                None,
                hook,
                ebql_compiler::wire::PeerColumns::Read
            )
        );
        if hook == ebql_compiler::wire::CaptureHook::Sockets {
            let also = &ebql_compiler::wire::SOCKET_EVENTS[1..];
            println!("and the same query over tp_btf:{}", also.join(", tp_btf:"));
        }
        return true;
    }
    if let Some(v) = ebql_compiler::views::BUILTIN
        .iter()
        .find(|v| v.name == lower)
    {
        println!("{} (built-in view: {})", v.name, v.doc);
        println!("{}", v.sql);
        return true;
    }
    false
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
        Access::TaskRegs { offset } => format!("task register at pt_regs+{offset}"),
        Access::StackId { user } => format!("{} stack id", if *user { "user" } else { "kernel" }),
    }
}
