//! Kernel BTF (/sys/kernel/btf/vmlinux) through libbpf's BTF API: the
//! typed arguments of raw tracepoints (`btf_trace_<name>` typedefs) and
//! kernel functions, and field paths through structs (`prev.comm`,
//! `rq.q.disk.first_minor`) resolved to [`Access::Btf`] steps.
//!
//! The type encoding is the kernel's `Documentation/bpf/btf.rst`: a
//! `struct btf_type` (name offset, `info` = kind << 24 | vlen, size or
//! type) followed by kind-specific data (members, parameters, array info).

use std::ffi::{CStr, CString};
use std::sync::OnceLock;

use crate::{Access, BtfStep, CatalogError, FieldKind, TraceField};

const KIND_INT: u32 = libbpf_sys::BTF_KIND_INT;
const KIND_PTR: u32 = libbpf_sys::BTF_KIND_PTR;
const KIND_ARRAY: u32 = libbpf_sys::BTF_KIND_ARRAY;
const KIND_STRUCT: u32 = libbpf_sys::BTF_KIND_STRUCT;
const KIND_UNION: u32 = libbpf_sys::BTF_KIND_UNION;
const KIND_ENUM: u32 = libbpf_sys::BTF_KIND_ENUM;
const KIND_TYPEDEF: u32 = libbpf_sys::BTF_KIND_TYPEDEF;
const KIND_FUNC: u32 = libbpf_sys::BTF_KIND_FUNC;
const KIND_FUNC_PROTO: u32 = libbpf_sys::BTF_KIND_FUNC_PROTO;
const KIND_ENUM64: u32 = libbpf_sys::BTF_KIND_ENUM64;

/// The kernel's BTF, loaded once per process and never freed (read-only).
pub(crate) struct Btf(*mut libbpf_sys::btf);

// SAFETY: libbpf's `struct btf` is only read after loading (lookups do not mutate it).
unsafe impl Send for Btf {}
// SAFETY: as above.
unsafe impl Sync for Btf {}

/// One type, decoded from its `struct btf_type` header.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Type {
    id: u32,
    raw: *const libbpf_sys::btf_type,
    kind: u32,
    vlen: u32,
    kflag: bool,
    /// `size` (int, struct, union, enum) or `type` (ptr, typedef, modifiers, func).
    size_or_type: u32,
}

/// A member of a struct or union.
pub(crate) struct Member {
    pub name: String,
    pub ty: u32,
    /// Offset from the struct start in bits.
    pub bit_offset: u32,
    /// Non-zero for a bitfield.
    pub bitfield: u32,
}

/// The vmlinux BTF of the running kernel.
///
/// Errors: [`CatalogError::Unavailable`] when the kernel has no BTF
/// (CONFIG_DEBUG_INFO_BTF off).
pub(crate) fn vmlinux() -> Result<&'static Btf, CatalogError> {
    static BTF: OnceLock<Result<Btf, String>> = OnceLock::new();
    let loaded = BTF.get_or_init(|| {
        // SAFETY: plain libbpf call; returns NULL (errno set) on failure.
        let p = unsafe { libbpf_sys::btf__load_vmlinux_btf() };
        if p.is_null() {
            Err(format!(
                "cannot load kernel BTF (/sys/kernel/btf/vmlinux): {}",
                std::io::Error::last_os_error()
            ))
        } else {
            Ok(Btf(p))
        }
    });
    loaded.as_ref().map_err(|why| CatalogError::Unavailable {
        kind: "BTF".into(),
        why: why.clone(),
        hint: "use `tracepoint:<category>:<name>` (tracefs) for the same event".into(),
    })
}

/// A kernel function in BTF: its `FUNC` type id, its parameters (name,
/// type id) and its return type id.
pub(crate) type FunctionSig = (u32, Vec<(String, u32)>, u32);

impl Btf {
    /// The id of the type named `name` of kind `kind`.
    pub(crate) fn find(&self, name: &str, kind: u32) -> Option<u32> {
        let c = CString::new(name).ok()?;
        // SAFETY: valid btf and NUL-terminated name.
        let id = unsafe { libbpf_sys::btf__find_by_name_kind(self.0, c.as_ptr(), kind) };
        (id > 0).then_some(id as u32)
    }

    /// Ids of every type of `kind` whose name starts with `prefix`, with their names.
    pub(crate) fn names_with_prefix(&self, prefix: &str, kind: u32) -> Vec<(u32, String)> {
        // SAFETY: valid btf.
        let n = unsafe { libbpf_sys::btf__type_cnt(self.0) };
        (1..n)
            .filter_map(|id| {
                let t = self.ty(id);
                (t.kind == kind)
                    .then(|| self.name(t))
                    .filter(|s| s.starts_with(prefix))
                    .map(|s| (id, s))
            })
            .collect()
    }

    pub(crate) fn ty(&self, id: u32) -> Type {
        // SAFETY: ids come from this BTF; libbpf returns a pointer into its data.
        let raw = unsafe { libbpf_sys::btf__type_by_id(self.0, id) };
        assert!(!raw.is_null(), "BTF type id {id} out of range");
        // SAFETY: non-null pointer to a btf_type.
        let t = unsafe { *raw };
        // SAFETY: both union fields are u32.
        let size_or_type = unsafe { t.__bindgen_anon_1.size };
        Type {
            id,
            raw,
            kind: (t.info >> 24) & 0x1f,
            vlen: t.info & 0xffff,
            kflag: t.info >> 31 == 1,
            size_or_type,
        }
    }

    fn str_at(&self, off: u32) -> String {
        // SAFETY: offsets come from this BTF's types; libbpf returns a C string or NULL.
        let p = unsafe { libbpf_sys::btf__name_by_offset(self.0, off) };
        if p.is_null() {
            return String::new();
        }
        // SAFETY: NUL-terminated string inside the BTF data.
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }

    pub(crate) fn name(&self, t: Type) -> String {
        // SAFETY: t.raw points to a live btf_type.
        self.str_at(unsafe { (*t.raw).name_off })
    }

    /// The kind-specific data right after the header, as `n` values of `T`.
    fn trailing<T: Copy>(&self, t: Type, n: usize) -> Vec<T> {
        // SAFETY: BTF lays out `n` records of T right after the 12-byte header.
        let first = unsafe { t.raw.add(1) } as *const T;
        (0..n)
            .map(|i| unsafe { first.add(i).read_unaligned() })
            .collect()
    }

    /// Follows typedefs and qualifiers (const, volatile, restrict, type tags).
    pub(crate) fn strip(&self, mut id: u32) -> Type {
        loop {
            let t = self.ty(id);
            match t.kind {
                KIND_TYPEDEF | 9 | 10 | 11 | 18 => id = t.size_or_type,
                _ => return t,
            }
        }
    }

    pub(crate) fn members(&self, t: Type) -> Vec<Member> {
        self.trailing::<libbpf_sys::btf_member>(t, t.vlen as usize)
            .into_iter()
            .map(|m| {
                let (bit_offset, bitfield) = if t.kflag {
                    (m.offset & 0xff_ffff, m.offset >> 24)
                } else {
                    (m.offset, 0)
                };
                Member {
                    name: self.str_at(m.name_off),
                    ty: m.type_,
                    bit_offset,
                    bitfield,
                }
            })
            .collect()
    }

    /// Parameters of a function prototype: (name, type id).
    pub(crate) fn params(&self, t: Type) -> Vec<(String, u32)> {
        self.trailing::<libbpf_sys::btf_param>(t, t.vlen as usize)
            .into_iter()
            .map(|p| (self.str_at(p.name_off), p.type_))
            .collect()
    }

    fn int_signed(&self, t: Type) -> bool {
        // The u32 after an INT header: encoding bits 24..28 (bit 0 = signed).
        let enc = self.trailing::<u32>(t, 1)[0];
        (enc >> 24) & 1 == 1
    }

    /// The C spelling of a type, e.g. `struct task_struct *`, `pid_t`, `char[16]`.
    pub(crate) fn c_name(&self, id: u32) -> String {
        if id == 0 {
            return "void".into();
        }
        let t = self.ty(id);
        let name = self.name(t);
        match t.kind {
            KIND_PTR => format!("{} *", self.c_name(t.size_or_type)).replace("* *", "**"),
            KIND_STRUCT => format!("struct {name}"),
            KIND_UNION => format!("union {name}"),
            KIND_ENUM | KIND_ENUM64 => format!("enum {name}"),
            KIND_ARRAY => {
                let a = self.trailing::<libbpf_sys::btf_array>(t, 1)[0];
                format!("{}[{}]", self.c_name(a.type_), a.nelems)
            }
            10 => format!("const {}", self.c_name(t.size_or_type)),
            9 | 11 | 18 => self.c_name(t.size_or_type),
            KIND_FUNC_PROTO => "function pointer".into(),
            _ => name,
        }
    }

    /// What a value of type `id` is for a query, and its size in bytes.
    pub(crate) fn classify(&self, id: u32) -> (FieldKind, u32) {
        let t = self.strip(id);
        match t.kind {
            KIND_INT if matches!(t.size_or_type, 1 | 2 | 4 | 8) => (
                FieldKind::Int {
                    signed: self.int_signed(t),
                },
                t.size_or_type,
            ),
            KIND_ENUM | KIND_ENUM64 if matches!(t.size_or_type, 1 | 2 | 4 | 8) => {
                (FieldKind::Int { signed: t.kflag }, t.size_or_type)
            }
            KIND_PTR => (FieldKind::Pointer, 8),
            KIND_ARRAY => {
                let a = self.trailing::<libbpf_sys::btf_array>(t, 1)[0];
                let elem = self.strip(a.type_);
                if elem.kind == KIND_INT && elem.size_or_type == 1 {
                    (FieldKind::CharArray { len: a.nelems }, a.nelems)
                } else {
                    (
                        FieldKind::Unsupported {
                            reason: "an array of non-char elements".into(),
                        },
                        0,
                    )
                }
            }
            KIND_STRUCT | KIND_UNION => (
                FieldKind::Unsupported {
                    reason: "a struct: select its fields as `<name>.<field>`".into(),
                },
                t.size_or_type,
            ),
            _ => (
                FieldKind::Unsupported {
                    reason: format!("a {} value", self.c_name(id)),
                },
                0,
            ),
        }
    }

    /// The struct or union a value of type `id` is or points to, with
    /// whether reaching it dereferences a pointer.
    fn record_of(&self, id: u32) -> Option<(Type, bool)> {
        let t = self.strip(id);
        match t.kind {
            KIND_STRUCT | KIND_UNION => Some((t, false)),
            KIND_PTR => {
                let p = self.strip(t.size_or_type);
                matches!(p.kind, KIND_STRUCT | KIND_UNION).then_some((p, true))
            }
            _ => None,
        }
    }

    /// The member `name` of record `t`, looking into anonymous struct and
    /// union members: (byte offset from `t`'s start, member).
    fn member(&self, t: Type, name: &str) -> Option<(u32, Member)> {
        for m in self.members(t) {
            if m.name == name {
                return Some((m.bit_offset / 8, m));
            }
            if m.name.is_empty() {
                if let Some((inner, false)) = self.record_of(m.ty) {
                    if let Some((off, found)) = self.member(inner, name) {
                        return Some((m.bit_offset / 8 + off, found));
                    }
                }
            }
        }
        None
    }

    /// Byte offset of the member path `path` (embedded structs, no pointers)
    /// inside the struct named `record`, e.g. `task_struct` + `thread_info.status`.
    pub(crate) fn member_offset(&self, record: &str, path: &[&str]) -> Option<u32> {
        let mut t = self.strip(self.find(record, KIND_STRUCT)?);
        let mut off = 0;
        for (i, part) in path.iter().enumerate() {
            let (o, m) = self.member(t, part)?;
            off += o;
            if i + 1 < path.len() {
                t = match self.record_of(m.ty)? {
                    (inner, false) => inner,
                    (_, true) => return None,
                };
            }
        }
        Some(off)
    }

    /// Member names of the struct named `record` (none when there is no
    /// such struct), for hints.
    pub(crate) fn record_member_names(&self, record: &str) -> Vec<String> {
        self.find(record, KIND_STRUCT)
            .map(|id| self.member_names(self.strip(id)))
            .unwrap_or_default()
    }

    /// Member names of record `t` (anonymous members flattened), for hints.
    fn member_names(&self, t: Type) -> Vec<String> {
        let mut out = Vec::new();
        for m in self.members(t) {
            match self.record_of(m.ty) {
                _ if !m.name.is_empty() => out.push(m.name),
                Some((inner, false)) => out.extend(self.member_names(inner)),
                _ => {}
            }
        }
        out
    }

    /// Arguments of a raw tracepoint (`btf_trace_<name>`: a typedef of a
    /// pointer to a prototype whose first parameter is the `void *` data
    /// pointer, skipped) or of a kernel function (`FUNC` → prototype):
    /// (typedef or function id, [(name, type id)]).
    pub(crate) fn tracepoint_args(&self, name: &str) -> Option<(u32, Vec<(String, u32)>)> {
        let id = self.find(&format!("btf_trace_{name}"), KIND_TYPEDEF)?;
        let ptr = self.strip(id);
        if ptr.kind != KIND_PTR {
            return None;
        }
        let proto = self.strip(ptr.size_or_type);
        if proto.kind != KIND_FUNC_PROTO {
            return None;
        }
        let mut args: Vec<(String, u32)> = self.params(proto).into_iter().skip(1).collect();
        // The typedef's prototype has no parameter names; the tracepoint's
        // probe function `__bpf_trace_<template>` has the same types, named.
        let types: Vec<u32> = args.iter().map(|a| a.1).collect();
        let named = self
            .function(&format!("__bpf_trace_{name}"))
            .filter(|(_, p, _)| p.iter().skip(1).map(|a| a.1).eq(types.iter().copied()))
            .or_else(|| {
                self.names_with_prefix("__bpf_trace_", KIND_FUNC)
                    .into_iter()
                    .find_map(|(_, f)| {
                        self.function(&f).filter(|(_, p, _)| {
                            p.iter().skip(1).map(|a| a.1).eq(types.iter().copied())
                        })
                    })
            });
        if let Some((_, params, _)) = named {
            for (a, (n, _)) in args.iter_mut().zip(params.into_iter().skip(1)) {
                a.0 = n;
            }
        }
        Some((id, args))
    }

    /// A kernel function's id and typed parameters, and its return type id.
    pub(crate) fn function(&self, name: &str) -> Option<FunctionSig> {
        let id = self.find(name, KIND_FUNC)?;
        let proto = self.strip(self.ty(id).size_or_type);
        (proto.kind == KIND_FUNC_PROTO).then(|| (id, self.params(proto), proto.size_or_type))
    }
}

/// The fields of typed arguments: one column per argument, read as the
/// `index`-th u64 of the context (`direct`: loads through BTF pointers
/// allowed, else probe reads).
pub(crate) fn arg_fields(btf: &Btf, args: &[(String, u32)], direct: bool) -> Vec<TraceField> {
    args.iter()
        .enumerate()
        .map(|(i, (name, ty))| {
            let (kind, size) = btf.classify(*ty);
            let name = if name.is_empty() {
                format!("arg{i}")
            } else {
                name.clone()
            };
            TraceField {
                name,
                c_type: btf.c_name(*ty),
                offset: 8 * i as u32,
                size,
                kind,
                access: Access::Btf {
                    arg: i as u32,
                    steps: vec![],
                    direct,
                },
            }
        })
        .collect()
}

/// Byte offset of the member path `path` (embedded structs and unions,
/// no pointers) in the kernel's `struct record`, from kernel BTF:
/// `("sock", ["__sk_common", "skc_v6_daddr"])` is where a socket keeps its
/// peer's IPv6 address. `None` without kernel BTF or without such a member
/// (a kernel built without the option that adds it).
pub fn kernel_member_offset(record: &str, path: &[&str]) -> Option<u32> {
    vmlinux().ok()?.member_offset(record, path)
}

/// Resolves `path` (`["prev", "comm"]`) against the typed arguments
/// `args`: `Ok(None)` when `path[0]` is no argument or `path` has one part;
/// the field named `prev.comm` otherwise.
///
/// Errors: [`CatalogError::UnknownField`] when a part names no member (the
/// hint lists the members that exist), or the value reached so far is not
/// a struct or a pointer to one, or the member is a bitfield.
pub(crate) fn resolve_path(
    btf: &Btf,
    event: &str,
    args: &[(String, u32)],
    path: &[String],
    direct: bool,
) -> Result<Option<TraceField>, CatalogError> {
    let Some(arg) = args.iter().position(|(n, _)| *n == path[0]) else {
        return Ok(None);
    };
    if path.len() < 2 {
        return Ok(None);
    }
    let mut ty = args[arg].1;
    let mut steps: Vec<BtfStep> = Vec::new();
    for (i, part) in path[1..].iter().enumerate() {
        let so_far = path[..=i].join(".");
        let Some((record, through_ptr)) = btf.record_of(ty) else {
            return Err(CatalogError::UnknownField {
                event: event.into(),
                field: path.join("."),
                hint: format!(
                    "`{so_far}` is a {}, not a struct or a pointer to one",
                    btf.c_name(ty)
                ),
            });
        };
        if through_ptr {
            // The value reached so far is a pointer: follow it (the argument itself when there is no step yet).
            if let Some(last) = steps.last_mut() {
                last.deref = true;
            }
        } else if i == 0 {
            return Err(CatalogError::UnknownField {
                event: event.into(),
                field: path.join("."),
                hint: "a struct argument passed by value cannot be read".into(),
            });
        }
        let Some((off, m)) = btf.member(record, part) else {
            let names = btf.member_names(record);
            let close = crate::closest(part, names.iter().map(String::as_str))
                .map(|c| format!("did you mean `{so_far}.{c}`? "))
                .unwrap_or_default();
            return Err(CatalogError::UnknownField {
                event: event.into(),
                field: path.join("."),
                hint: format!(
                    "{close}{} has no field `{part}`; its fields: {}{}",
                    btf.c_name(record.id),
                    names
                        .iter()
                        .take(12)
                        .cloned()
                        .collect::<Vec<_>>()
                        .join(", "),
                    if names.len() > 12 {
                        format!(", … ({} in all)", names.len())
                    } else {
                        String::new()
                    }
                ),
            });
        };
        if m.bitfield != 0 || m.bit_offset % 8 != 0 {
            return Err(CatalogError::UnknownField {
                event: event.into(),
                field: path.join("."),
                hint: format!("`{part}` is a bitfield, which eBQL cannot read yet"),
            });
        }
        match steps.last_mut() {
            // An embedded struct: its field is further into the same object.
            Some(last) if !last.deref && !through_ptr => last.offset += off,
            _ => steps.push(BtfStep {
                offset: off,
                deref: false,
            }),
        }
        ty = m.ty;
    }
    let (kind, size) = btf.classify(ty);
    let name = path.join(".");
    Ok(Some(TraceField {
        name,
        c_type: btf.c_name(ty),
        offset: 0,
        size,
        kind,
        access: Access::Btf {
            arg: arg as u32,
            steps,
            direct,
        },
    }))
}

/// How to reach the fields of a struct-pointer column of C type `c_type`
/// (e.g. `struct task_struct *`), for `describe`: "fields as prev.<field>
/// (…)", or `None` when it is not a pointer to a known struct.
pub(crate) fn fields_hint(btf: &Btf, column: &str, c_type: &str) -> Option<String> {
    let tag = c_type.strip_suffix('*')?.trim();
    let (kind, name) = tag.split_once(' ')?;
    let kind = match kind {
        "struct" => KIND_STRUCT,
        "union" => KIND_UNION,
        _ => return None,
    };
    let record = btf.strip(btf.find(name, kind)?);
    let names = btf.member_names(record);
    let shown: Vec<&str> = names.iter().take(8).map(String::as_str).collect();
    Some(format!(
        "fields as {column}.<field>: {}{}",
        shown.join(", "),
        if names.len() > 8 { ", …" } else { "" }
    ))
}
