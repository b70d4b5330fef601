//! Kernel function probes: `kprobe:<function>`, `kretprobe:<function>`
//! (perf kprobe PMU, arguments from `pt_regs`) and `fentry:<function>`,
//! `fexit:<function>` (BPF trampolines, arguments typed from BTF).
//!
//! kprobe arguments are the x86-64 calling convention's registers as
//! unsigned 64-bit values (`arg0` = rdi … `arg5` = r9, `retval` = rax of a
//! kretprobe); fentry/fexit arguments are the function's typed BTF
//! parameters (struct pointers are roots of field paths, as for tp_btf),
//! plus `retval` for fexit (the context slot after the arguments).

use super::access::Access;
use super::attach::Attach;
use super::interface::Source;
use super::kind::{EventKind, Feature, ProgType};
use crate::btf::{self, Btf};
use crate::{Catalog, CatalogError, EventName, EventSchema, FieldKind, SystemAttr, TraceField};

/// The kernel function source: `kprobe:`, `kretprobe:` (perf kprobe PMU),
/// `fentry:`, `fexit:` (BPF trampolines).
pub struct KernelFunctions;

impl Source for KernelFunctions {
    fn kinds(&self) -> &'static [EventKind] {
        &[
            EventKind::Kprobe,
            EventKind::Kretprobe,
            EventKind::Fentry,
            EventKind::Fexit,
        ]
    }

    fn spellings(&self, kind: EventKind) -> &'static [&'static str] {
        match kind {
            EventKind::Kprobe => &["kprobe", "k"],
            EventKind::Kretprobe => &["kretprobe", "kr"],
            EventKind::Fentry => &["fentry", "f"],
            _ => &["fexit", "fr"],
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
        list(kind, pattern)
    }

    fn schema(&self, _: &Catalog, name: &EventName) -> Result<EventSchema, CatalogError> {
        schema(name)
    }

    /// Only fentry/fexit have typed arguments with struct fields.
    fn field_path(
        &self,
        name: &EventName,
        path: &[String],
    ) -> Result<Option<TraceField>, CatalogError> {
        match name.kind {
            EventKind::Fentry | EventKind::Fexit => field_path(name, path),
            _ => Ok(None),
        }
    }

    fn program_type(&self, kind: EventKind) -> ProgType {
        match kind {
            EventKind::Fentry | EventKind::Fexit => ProgType::Tracing,
            _ => ProgType::Kprobe,
        }
    }

    fn features(&self, kind: EventKind) -> &'static [Feature] {
        match kind {
            EventKind::Fentry | EventKind::Fexit => &[Feature::KernelBtf, Feature::Trampolines],
            _ => &[Feature::Kprobes],
        }
    }

    fn alternative(&self, _: EventKind) -> &'static str {
        "use a tracepoint of the same subsystem (`ebql events 'syscalls:*'`), or `tp_btf:<category>:<name>` \
         for its typed arguments and struct fields"
    }
}

/// Byte offsets in x86-64 `struct pt_regs` (arch/x86/include/asm/ptrace.h)
/// of the argument registers rdi, rsi, rdx, rcx, r8, r9.
pub const PT_REGS_ARGS: [u32; 6] = [112, 104, 96, 88, 72, 64];
/// Byte offset of rax (a kretprobe's return value) in x86-64 `struct pt_regs`.
pub const PT_REGS_RAX: u32 = 80;

/// `<function>` (optionally `<module>:<function>`).
fn parse_rest(
    kind: EventKind,
    prefix: &str,
    rest: &str,
    input: &str,
) -> Result<EventName, CatalogError> {
    let (module, function) = rest.rsplit_once([':', '/']).unwrap_or(("", rest));
    let ident = |s: &str| {
        !s.is_empty()
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'.')
    };
    if !ident(function) || !(module.is_empty() || ident(module)) {
        return Err(CatalogError::BadEventName {
            input: input.to_string(),
            hint: format!("expected `{prefix}:<kernel function>`, e.g. {prefix}:vfs_read"),
        });
    }
    Ok(EventName::new(kind, module, function))
}

/// Whether the kernel has a function `name` (kernel BTF, else /proc/kallsyms).
fn function_exists(name: &str) -> bool {
    if let Ok(b) = btf::vmlinux() {
        if b.function(name).is_some() {
            return true;
        }
    }
    std::fs::read_to_string("/proc/kallsyms")
        .is_ok_and(|s| s.lines().any(|l| l.split_whitespace().nth(2) == Some(name)))
}

fn unknown(btf: Option<&Btf>, name: &EventName) -> CatalogError {
    let names: Vec<String> = btf
        .map(|b| {
            b.names_with_prefix("", libbpf_sys::BTF_KIND_FUNC)
                .into_iter()
                .map(|(_, n)| n)
                .collect()
        })
        .unwrap_or_default();
    let suggestion = crate::closest(&name.name, names.iter().map(String::as_str))
        .map(|n| EventName::new(name.kind, &name.category, n).table_name());
    CatalogError::UnknownEvent {
        name: name.table_name(),
        suggestion,
    }
}

/// The typed arguments of `fentry:`/`fexit:` `name` (`retval` last for fexit) and the function's BTF id.
fn typed_args(btf: &Btf, name: &EventName) -> Result<(u32, Vec<(String, u32)>), CatalogError> {
    let (id, mut params, ret) = btf
        .function(&name.name)
        .ok_or_else(|| unknown(Some(btf), name))?;
    if name.kind == EventKind::Fexit {
        params.push(("retval".into(), ret));
    }
    Ok((id, params))
}

/// The schema of a kernel function probe.
///
/// Errors: [`CatalogError::UnknownEvent`] when the kernel has no such
/// function (with the closest BTF function name); for fentry/fexit also
/// [`CatalogError::Unavailable`] without kernel BTF.
fn schema(name: &EventName) -> Result<EventSchema, CatalogError> {
    match name.kind {
        EventKind::Kprobe | EventKind::Kretprobe => {
            if !function_exists(&name.name) {
                return Err(unknown(btf::vmlinux().ok(), name));
            }
            let reg = |name: String, offset: u32| TraceField {
                name,
                c_type: "u64".into(),
                offset,
                size: 8,
                kind: FieldKind::Int { signed: false },
                access: Access::Ctx,
            };
            let mut fields: Vec<TraceField> = PT_REGS_ARGS
                .iter()
                .enumerate()
                .map(|(i, &off)| reg(format!("arg{i}"), off))
                .collect();
            let retprobe = name.kind == EventKind::Kretprobe;
            if retprobe {
                fields.push(reg("retval".into(), PT_REGS_RAX));
            }
            Ok(EventSchema {
                event: name.clone(),
                attach: Attach::Kprobe {
                    function: name.name.clone(),
                    retprobe,
                },
                fields,
                attrs: SystemAttr::ALL.to_vec(),
            })
        }
        _ => {
            let b = btf::vmlinux()?;
            let (id, args) = typed_args(b, name)?;
            Ok(EventSchema {
                event: name.clone(),
                attach: Attach::Btf {
                    name: name.name.clone(),
                    btf_id: id,
                },
                fields: btf::arg_fields(b, &args, true),
                attrs: SystemAttr::ALL.to_vec(),
            })
        }
    }
}

/// The field `path` of an fentry/fexit probe (see [`Source::field_path`]).
fn field_path(name: &EventName, path: &[String]) -> Result<Option<TraceField>, CatalogError> {
    let b = btf::vmlinux()?;
    let (_, args) = typed_args(b, name)?;
    btf::resolve_path(b, &name.table_name(), &args, path, true)
}

/// Kernel functions (from kernel BTF) whose name matches `pattern`.
fn list(kind: EventKind, pattern: Option<&str>) -> Result<Vec<EventName>, CatalogError> {
    let b = btf::vmlinux()?;
    let mut names: Vec<String> = b
        .names_with_prefix("", libbpf_sys::BTF_KIND_FUNC)
        .into_iter()
        .map(|(_, n)| n)
        .filter(|n| pattern.is_none_or(|g| crate::glob_match(g, n)))
        .collect();
    names.sort();
    names.dedup();
    Ok(names
        .into_iter()
        .map(|n| EventName::new(kind, "", n))
        .collect())
}
