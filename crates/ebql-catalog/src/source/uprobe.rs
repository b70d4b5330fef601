//! User-space function probes: `uprobe:<binary>:<symbol>` and
//! `uretprobe:<binary>:<symbol>` (perf uprobe PMU).
//!
//! * **binary**: a path, or a library/executable name resolved like the
//!   dynamic loader would ([`crate::elf::resolve_binary`]: `libc`, `libc.so.6`, `bash`).
//! * **symbol**: a function of `.symtab` or `.dynsym`, by its stored name or,
//!   for C++, by its demangled name with or without parameters
//!   (`uprobe:/usr/sbin/mariadbd:dispatch_command`; an overloaded name must be
//!   given in full inside a quoted table name:
//!   `FROM "uprobe:/x:ns::f(int, char*)"`).
//! * **columns**: `arg0..arg5` (u64, the System V integer argument registers
//!   rdi, rsi, rdx, rcx, r8, r9 read from `pt_regs`) for uprobes, `retval`
//!   (s64, rax: C functions return errors as negative ints; cast a pointer
//!   to BIGINT UNSIGNED) for uretprobes, plus every system attribute.
//! * **attach**: the file offset of the symbol's address in its `PT_LOAD`
//!   segment (PIE executables and shared libraries alike).

use super::access::Access;
use super::attach::Attach;
use super::interface::Source;
use super::kind::{EventKind, Feature, ProgType};
use super::pt_regs;
use crate::elf::{resolve_binary, Elf};
use crate::{
    glob_match, Catalog, CatalogError, EventName, EventSchema, FieldKind, SystemAttr, TraceField,
};

/// The user-space function source: `uprobe:` and `uretprobe:`.
pub struct Uprobes;

impl Source for Uprobes {
    fn kinds(&self) -> &'static [EventKind] {
        &[EventKind::Uprobe, EventKind::Uretprobe]
    }

    fn spellings(&self, kind: EventKind) -> &'static [&'static str] {
        match kind {
            EventKind::Uretprobe => &["uretprobe", "ur"],
            _ => &["uprobe", "u"],
        }
    }

    fn parse_rest(
        &self,
        kind: EventKind,
        rest: &str,
        input: &str,
    ) -> Result<EventName, CatalogError> {
        parse_rest(kind, self.prefix(kind), rest, input)
    }

    fn list(
        &self,
        _: &Catalog,
        kind: EventKind,
        pattern: Option<&str>,
    ) -> Result<Vec<EventName>, CatalogError> {
        list(kind, self.prefix(kind), pattern)
    }

    fn schema(&self, _: &Catalog, name: &EventName) -> Result<EventSchema, CatalogError> {
        schema(name)
    }

    fn program_type(&self, _: EventKind) -> ProgType {
        ProgType::Kprobe
    }

    fn features(&self, _: EventKind) -> &'static [Feature] {
        &[Feature::Uprobes]
    }

    fn alternative(&self, _: EventKind) -> &'static str {
        "this kernel cannot probe user space; trace the syscalls the program makes instead"
    }

    /// Arguments of a user-space probe point into the traced process.
    fn pointers_are_user(&self, _: &EventName) -> bool {
        true
    }

    /// Uprobe programs (and so USDT's) may be sleepable: the uprobe handler
    /// runs them where page faults are allowed.
    fn may_sleep(&self, _: EventKind) -> bool {
        true
    }
}

/// `<binary>:<symbol>`: the binary is everything up to the first `:`.
fn parse_rest(
    kind: EventKind,
    prefix: &str,
    rest: &str,
    input: &str,
) -> Result<EventName, CatalogError> {
    match rest.split_once(':') {
        Some((binary, symbol)) if !binary.is_empty() && !symbol.is_empty() => {
            Ok(EventName::new(kind, binary, symbol))
        }
        _ => Err(CatalogError::BadEventName {
            input: input.to_string(),
            hint: format!(
                "expected `{prefix}:<binary or library>:<symbol>`, e.g. {prefix}:/usr/bin/bash:readline"
            ),
        }),
    }
}

/// A 64-bit integer read from the `pt_regs` slot at `offset` (a register).
pub(crate) fn register_field(name: &str, offset: u32, signed: bool) -> TraceField {
    let c_type = if signed { "s64" } else { "u64" };
    TraceField {
        name: name.to_string(),
        c_type: c_type.into(),
        offset,
        size: 8,
        kind: FieldKind::Int { signed },
        access: Access::Ctx,
    }
}

/// The schema of a uprobe or uretprobe.
///
/// Errors: [`CatalogError::BadBinary`] (no such file, not ELF),
/// [`CatalogError::NotInBinary`] (no such function, or an ambiguous C++ name).
fn schema(name: &EventName) -> Result<EventSchema, CatalogError> {
    let path = resolve_binary(&name.category)?;
    let elf = Elf::open(&path)?;
    let sym = elf.function(&name.name)?;
    let offset = elf.file_offset(sym.address)?;
    let retprobe = name.kind == EventKind::Uretprobe;
    let fields = if retprobe {
        vec![register_field("retval", pt_regs::RETVAL, true)]
    } else {
        pt_regs::ARGS
            .iter()
            .enumerate()
            .map(|(i, &o)| register_field(&format!("arg{i}"), o, false))
            .collect()
    };
    Ok(EventSchema {
        event: name.clone(),
        attach: Attach::Uprobe {
            binary: path,
            offsets: vec![offset],
            retprobe,
            semaphore: None,
        },
        fields,
        attrs: SystemAttr::ALL.to_vec(),
    })
}

/// Functions of a binary matching `pattern` (`<binary>:<symbol glob>`, the
/// glob tried on the stored and the demangled name). C++ functions are
/// listed by their demangled name without parameters when that is unique.
fn list(
    kind: EventKind,
    prefix: &str,
    pattern: Option<&str>,
) -> Result<Vec<EventName>, CatalogError> {
    let Some((binary, glob)) = pattern.and_then(|p| p.split_once(':')) else {
        return Err(CatalogError::BadEventName {
            input: pattern.unwrap_or("").to_string(),
            hint: format!(
                "{prefix} events are listed per binary: `ebql events '{prefix}:<binary>:<glob>'`"
            ),
        });
    };
    let elf = Elf::open(&resolve_binary(binary)?)?;
    let funcs = elf.functions()?;
    let mut shorts: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
    for d in funcs.iter().filter_map(|f| f.short_demangled()) {
        *shorts.entry(d).or_default() += 1;
    }
    let short_count = |s: &str| shorts.get(s).copied().unwrap_or(0);
    let mut out: Vec<EventName> = funcs
        .iter()
        .filter(|f| {
            glob_match(glob, &f.name) || f.short_demangled().is_some_and(|d| glob_match(glob, d))
        })
        .map(|f| {
            let shown = f
                .short_demangled()
                .filter(|d| short_count(d) == 1)
                .unwrap_or(&f.name);
            EventName::new(kind, binary, shown)
        })
        .collect();
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out.dedup();
    Ok(out)
}
