//! User-space statically defined tracepoints: `usdt:<binary>:<provider>:<probe>`.
//!
//! Read from the binary's `.note.stapsdt` (systemtap SDT v3 notes, as
//! `sys/sdt.h` and DTrace-compatible providers such as PostgreSQL's emit
//! them): every site of the probe (a probe used in several places, or
//! inlined, has one note per site) becomes one uprobe at the site's file
//! offset; a probe with a semaphore has it incremented by the kernel while
//! attached (uprobe `ref_ctr_offset`), so the program's `if (PROBE_ENABLED())`
//! code runs only then.
//!
//! Columns `arg0..argN` ([`Access::Usdt`]) from the operand specs
//! `[-]size@operand`: `-4@%eax` (register; a negative size is signed),
//! `8@-8(%rbp)` (memory at register + displacement, read with
//! `bpf_probe_read_user`), `-4@$5` (constant). An argument whose sites
//! disagree on where it is, or with an operand eBQL cannot read
//! (`%rip`-relative, indexed), is listed but not queryable.

use super::access::{Access, UsdtArg};
use super::attach::Attach;
use super::interface::Source;
use super::kind::{EventKind, Feature, ProgType};
use super::pt_regs;
use crate::elf::{resolve_binary, Elf, UsdtNote};
use crate::{
    glob_match, Catalog, CatalogError, EventName, EventSchema, FieldKind, SystemAttr, TraceField,
};

/// The USDT source: `usdt:<binary>:<provider>:<probe>`.
pub struct Usdt;

impl Source for Usdt {
    fn kinds(&self) -> &'static [EventKind] {
        &[EventKind::Usdt]
    }

    fn spellings(&self, _: EventKind) -> &'static [&'static str] {
        &["usdt"]
    }

    fn parse_rest(&self, _: EventKind, rest: &str, input: &str) -> Result<EventName, CatalogError> {
        parse_rest(rest, input)
    }

    fn list(
        &self,
        _: &Catalog,
        _: EventKind,
        pattern: Option<&str>,
    ) -> Result<Vec<EventName>, CatalogError> {
        list(pattern)
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

/// `<binary>:<provider>:<probe>`.
fn parse_rest(rest: &str, input: &str) -> Result<EventName, CatalogError> {
    let bad = || {
        CatalogError::BadEventName {
        input: input.to_string(),
        hint: "expected `usdt:<binary or library>:<provider>:<probe>`, e.g. usdt:/usr/lib/postgresql/15/bin/postgres:postgresql:query__start".into(),
    }
    };
    let (binary, probe) = rest.split_once(':').ok_or_else(bad)?;
    match probe.split_once(':') {
        Some((p, n))
            if !binary.is_empty() && !p.is_empty() && !n.is_empty() && !n.contains(':') =>
        {
            Ok(EventName::new(EventKind::Usdt, binary, probe))
        }
        _ => Err(bad()),
    }
}

/// One parsed operand spec: its value's size in bytes, signedness and location.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ArgSpec {
    /// Bytes (1, 2, 4 or 8).
    pub size: u32,
    /// Sign-extend to 64 bits.
    pub signed: bool,
    /// Where the value is.
    pub arg: UsdtArg,
}

/// Parses `[-]size@operand` (a missing size means 8 unsigned, as in old notes).
/// Errors: why the operand cannot be read, for people.
pub fn parse_arg(spec: &str) -> Result<ArgSpec, String> {
    let (size, operand) = match spec.split_once('@') {
        Some((n, op)) => (
            n.parse::<i32>()
                .map_err(|_| format!("bad operand size in `{spec}`"))?,
            op,
        ),
        None => (8, spec),
    };
    let (bytes, signed) = (size.unsigned_abs(), size < 0);
    if ![1, 2, 4, 8].contains(&bytes) {
        return Err(format!(
            "operand size {size} in `{spec}` is not 1, 2, 4 or 8 bytes"
        ));
    }
    let reg = |r: &str| {
        let name = r
            .strip_prefix('%')
            .ok_or_else(|| format!("expected a register in `{spec}`"))?;
        pt_regs::offset_of(name)
            .ok_or_else(|| format!("register `%{name}` in `{spec}` cannot be read from pt_regs"))
    };
    let arg = if let Some(imm) = operand.strip_prefix('$') {
        UsdtArg::Const(imm.parse::<i64>().map_err(|_| {
            format!("constant `{imm}` in `{spec}` is not an integer (a symbol address?)")
        })?)
    } else if operand.starts_with('%') {
        UsdtArg::Reg {
            pt_regs: reg(operand)?,
        }
    } else if let Some((disp, rest)) = operand.split_once('(') {
        let base = rest
            .strip_suffix(')')
            .ok_or_else(|| format!("unclosed `(` in `{spec}`"))?;
        if base.contains(',') {
            return Err(format!(
                "indexed memory operand `{operand}` is not supported"
            ));
        }
        if base == "%rip" {
            return Err(format!(
                "`%rip`-relative operand `{operand}` (a global variable) is not supported"
            ));
        }
        let disp = if disp.is_empty() {
            0
        } else {
            disp.parse::<i32>()
                .map_err(|_| format!("displacement `{disp}` in `{spec}` is not an integer"))?
        };
        UsdtArg::Mem {
            pt_regs: reg(base)?,
            disp,
        }
    } else {
        return Err(format!(
            "operand `{operand}` is neither a register, a constant nor a memory reference"
        ));
    };
    Ok(ArgSpec {
        size: bytes,
        signed,
        arg,
    })
}

impl std::fmt::Display for UsdtArg {
    /// AT&T syntax: `%rax`, `-8(%rbp)`, `$5` (registers by their 64-bit name).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let name = |o: u32| {
            pt_regs::REGS
                .iter()
                .find(|r| r.1 == o & !7)
                .map_or("?", |r| r.0)
        };
        match self {
            UsdtArg::Const(v) => write!(f, "${v}"),
            UsdtArg::Reg { pt_regs } if pt_regs % 8 == 1 => {
                write!(f, "%{}h", &name(*pt_regs)[1..2])
            }
            UsdtArg::Reg { pt_regs } => write!(f, "%{}", name(*pt_regs)),
            UsdtArg::Mem { pt_regs, disp } => write!(f, "{disp}(%{})", name(*pt_regs)),
        }
    }
}

/// The column of argument `i` over all sites of a probe.
fn arg_field(i: usize, sites: &[&UsdtNote]) -> TraceField {
    let name = format!("arg{i}");
    let specs: Vec<&str> = sites
        .iter()
        .map(|s| s.args.get(i).map_or("", String::as_str))
        .collect();
    let unsupported = |reason: String| TraceField {
        name: name.clone(),
        c_type: specs.join(" | "),
        offset: 0,
        size: 8,
        kind: FieldKind::Unsupported { reason },
        access: Access::Ctx,
    };
    let parsed: Result<Vec<ArgSpec>, String> = specs.iter().map(|s| parse_arg(s)).collect();
    match parsed {
        Err(reason) => unsupported(reason),
        Ok(p) if p.windows(2).any(|w| w[0] != w[1]) => {
            unsupported(format!("the probe's {} sites keep this argument in different places ({}); per-site reads are not built yet", p.len(), specs.join(", ")))
        }
        Ok(p) => {
            let a = &p[0];
            let c_type = format!("{}{}", if a.signed { "s" } else { "u" }, a.size * 8);
            TraceField { name, c_type, offset: 0, size: a.size, kind: FieldKind::Int { signed: a.signed }, access: Access::Usdt(a.arg.clone()) }
        }
    }
}

/// The schema of a USDT probe: one column per argument, attached at every site.
///
/// Errors: [`CatalogError::BadBinary`], [`CatalogError::NotInBinary`] (no
/// such probe; the hint names the closest one).
fn schema(name: &EventName) -> Result<EventSchema, CatalogError> {
    let path = resolve_binary(&name.category)?;
    let elf = Elf::open(&path)?;
    let notes = elf.usdt_notes()?;
    let sites: Vec<&UsdtNote> = notes
        .iter()
        .filter(|n| format!("{}:{}", n.provider, n.name) == name.name)
        .collect();
    let Some(first) = sites.first() else {
        let names: Vec<String> = notes
            .iter()
            .map(|n| format!("{}:{}", n.provider, n.name))
            .collect();
        let hint = match crate::closest(&name.name, names.iter().map(String::as_str)) {
            Some(c) => format!("did you mean `{c}`?"),
            None if notes.is_empty() => "this file has no USDT probes (.note.stapsdt)".to_string(),
            None => format!("`ebql events 'usdt:{}:*'` lists its probes", path.display()),
        };
        return Err(CatalogError::NotInBinary {
            binary: path,
            what: format!("USDT probe `{}`", name.name),
            hint,
        });
    };
    let offsets = sites
        .iter()
        .map(|s| elf.file_offset(s.pc))
        .collect::<Result<Vec<u64>, _>>()?;
    let semaphore = match first.semaphore {
        0 => None,
        vaddr => Some(elf.file_offset(vaddr)?),
    };
    let argc = sites.iter().map(|s| s.args.len()).max().unwrap_or(0);
    let fields = (0..argc).map(|i| arg_field(i, &sites)).collect();
    Ok(EventSchema {
        event: name.clone(),
        attach: Attach::Uprobe {
            binary: path,
            offsets,
            retprobe: false,
            semaphore,
        },
        fields,
        attrs: SystemAttr::ALL.to_vec(),
    })
}

/// USDT probes of a binary matching `pattern` (`<binary>:<provider:probe glob>`).
fn list(pattern: Option<&str>) -> Result<Vec<EventName>, CatalogError> {
    let Some((binary, glob)) = pattern.and_then(|p| p.split_once(':')) else {
        return Err(CatalogError::BadEventName {
            input: pattern.unwrap_or("").to_string(),
            hint: "USDT probes are listed per binary: `ebql events 'usdt:<binary>:*'`".into(),
        });
    };
    let elf = Elf::open(&resolve_binary(binary)?)?;
    let mut out: Vec<EventName> = elf
        .usdt_notes()?
        .iter()
        .map(|n| format!("{}:{}", n.provider, n.name))
        .filter(|p| glob_match(glob, p))
        .map(|p| EventName::new(EventKind::Usdt, binary, p))
        .collect();
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out.dedup();
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operand_specs() {
        let reg = |r: &str| pt_regs::offset_of(r).unwrap();
        assert_eq!(
            parse_arg("-4@%eax").unwrap(),
            ArgSpec {
                size: 4,
                signed: true,
                arg: UsdtArg::Reg {
                    pt_regs: reg("rax")
                }
            }
        );
        assert_eq!(
            parse_arg("8@-8(%rbp)").unwrap(),
            ArgSpec {
                size: 8,
                signed: false,
                arg: UsdtArg::Mem {
                    pt_regs: reg("rbp"),
                    disp: -8
                }
            }
        );
        assert_eq!(
            parse_arg("4@60(%rax)").unwrap().arg,
            UsdtArg::Mem {
                pt_regs: reg("rax"),
                disp: 60
            }
        );
        assert_eq!(
            parse_arg("8@(%rdi)").unwrap().arg,
            UsdtArg::Mem {
                pt_regs: reg("rdi"),
                disp: 0
            }
        );
        assert_eq!(
            parse_arg("-4@$5").unwrap(),
            ArgSpec {
                size: 4,
                signed: true,
                arg: UsdtArg::Const(5)
            }
        );
        assert_eq!(
            parse_arg("1@%sil").unwrap(),
            ArgSpec {
                size: 1,
                signed: false,
                arg: UsdtArg::Reg {
                    pt_regs: reg("rsi")
                }
            }
        );
        assert_eq!(
            parse_arg("%rdi").unwrap(),
            ArgSpec {
                size: 8,
                signed: false,
                arg: UsdtArg::Reg {
                    pt_regs: reg("rdi")
                }
            }
        );
        assert!(parse_arg("8@counter(%rip)").unwrap_err().contains("rip"));
        assert!(parse_arg("8@(%rax,%rbx,8)")
            .unwrap_err()
            .contains("indexed"));
        assert!(parse_arg("3@%eax").is_err());
        assert!(parse_arg("4@%xmm0").is_err());
        assert_eq!(
            UsdtArg::Mem {
                pt_regs: reg("rbp"),
                disp: -8
            }
            .to_string(),
            "-8(%rbp)"
        );
        assert_eq!(UsdtArg::Reg { pt_regs: 81 }.to_string(), "%ah");
    }

    #[test]
    fn postgres_query_start_has_a_semaphore() {
        let pg = "/usr/lib/postgresql/15/bin/postgres";
        if !std::path::Path::new(pg).exists() {
            eprintln!("skipped: {pg} is not installed (scripts/setup.sh installs it)");
            return;
        }
        let s = schema(&EventName::new(
            EventKind::Usdt,
            pg,
            "postgresql:query__start",
        ))
        .unwrap();
        let Attach::Uprobe {
            offsets,
            semaphore,
            retprobe,
            ..
        } = &s.attach
        else {
            panic!("{:?}", s.attach)
        };
        assert!(!offsets.is_empty() && semaphore.is_some() && !retprobe);
        assert_eq!(s.fields.len(), 1);
        assert_eq!(
            s.fields[0].access,
            Access::Usdt(UsdtArg::Reg {
                pt_regs: pt_regs::offset_of("rbx").unwrap()
            })
        );
        let all = list(Some(&format!("{pg}:postgresql:query__*"))).unwrap();
        assert!(
            all.iter().any(|e| e.name == "postgresql:query__done"),
            "{all:?}"
        );
    }
}
