//! Parser of tracefs `format` files and the resulting event schemas.
//!
//! A format file looks like (kernel `Documentation/trace/events.rst` §5):
//!
//! ```text
//! name: sys_enter_pread64
//! ID: 838
//! format:
//!     field:unsigned short common_type;    offset:0;    size:2;    signed:0;
//!     ...
//!     field:unsigned int fd;    offset:16;    size:8;    signed:0;
//!
//! print fmt: "fd: 0x%08lx, ...", ...
//! ```

use crate::{closest, Access, Attach, CatalogError, EventName, SystemAttr};

/// How a tracepoint field's bytes are to be read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FieldKind {
    /// An integer of `size` bytes (1, 2, 4 or 8), little-endian as the host;
    /// includes bool, enums, `size_t`, `pid_t`, ... . `signed` is the format
    /// file's `signed:` flag, or true when the C type is a well-known signed
    /// integer type: syscall tracepoints declare every argument `size:8;
    /// signed:0` (they are stored as `unsigned long`), so `int dfd` would
    /// otherwise read -100 as 18446744073709551516.
    Int {
        /// Sign-extend (true) or zero-extend (false) to 64 bits.
        signed: bool,
    },
    /// Any `T *`: the pointer value itself, exposed as an unsigned 64-bit
    /// integer (the pointee is not read).
    Pointer,
    /// A fixed `char name[len]` array holding a string, NUL-terminated within
    /// `len` bytes (or exactly `len` bytes long), e.g. `prev_comm[16]`.
    CharArray {
        /// Array length in bytes (= the field's size).
        len: u32,
    },
    /// `__data_loc char[] name`: the field is a u32 at `offset` whose low 16
    /// bits are the string's offset from the start of the record and whose
    /// high 16 bits are its length in bytes (including the NUL).
    DataLocString,
    /// Anything else (non-char arrays, `__data_loc` of non-char, `__rel_loc`,
    /// odd sizes). Listed when describing an event, but not queryable.
    Unsupported {
        /// Why, for people (shown by describe / in errors).
        reason: String,
    },
}

/// One field of a tracepoint record, as declared in its format file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TraceField {
    /// Field name, e.g. `fd`.
    pub name: String,
    /// C type as declared, without the name but with any array suffix and
    /// without `__attribute__((...))`, e.g. `unsigned int`, `char[16]`,
    /// `__data_loc char[]`, `const char *`.
    pub c_type: String,
    /// Byte offset from the start of the context ([`Access::Ctx`],
    /// [`Access::DataLoc`]); 0 for other accesses, which carry their own path.
    pub offset: u32,
    /// Size in bytes occupied in the record.
    pub size: u32,
    /// What its bytes mean.
    pub kind: FieldKind,
    /// How the probe reaches it.
    pub access: Access,
}

/// The relation of one event: its own fields (for tracefs tracepoints the
/// `common_*` fields are left out: eBQL exposes pid etc. as [`SystemAttr`]s
/// instead), the system attributes its program type can read, and where its
/// program attaches.
#[derive(Clone, Debug)]
pub struct EventSchema {
    /// Which event.
    pub event: EventName,
    /// Where and how its program attaches.
    pub attach: Attach,
    /// Fields in record (or argument) order.
    pub fields: Vec<TraceField>,
    /// The system attributes available on this event ([`SystemAttr::ALL`]
    /// for every kind that runs in a task's context).
    pub attrs: Vec<SystemAttr>,
}

/// What a column name in a query refers to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Column {
    /// A field of the tracepoint record.
    Field(TraceField),
    /// A system attribute available on every event.
    Attr(SystemAttr),
}

impl EventSchema {
    /// The tracepoint field with exactly this name.
    pub fn field(&self, name: &str) -> Option<&TraceField> {
        self.fields.iter().find(|f| f.name == name)
    }

    /// Resolves a column name. Rule, in order:
    /// 1. `sys_<attr>` (e.g. `sys_pid`) always means the system attribute;
    /// 2. an exact tracepoint field name (so a tracepoint's own `pid` field,
    ///    as in sched/sched_process_exec, shadows the `pid` attribute);
    /// 3. a system attribute name (`time`, `pid`, `tid`, ...).
    ///
    /// Names are case-sensitive. `None` when nothing matches (see [`suggest`](Self::suggest)).
    pub fn resolve(&self, name: &str) -> Option<Column> {
        if let Some(a) = name
            .strip_prefix("sys_")
            .and_then(SystemAttr::from_name)
            .filter(|a| self.attrs.contains(a))
        {
            return Some(Column::Attr(a));
        }
        if let Some(f) = self.field(name) {
            return Some(Column::Field(f.clone()));
        }
        SystemAttr::from_name(name)
            .filter(|a| self.attrs.contains(a))
            .map(Column::Attr)
    }

    /// The closest field or system attribute name to a name that did not
    /// resolve, if one is close (Jaro-Winkler >= 0.8 or edit distance <= 2).
    /// A shadowed attribute is suggested as `sys_<name>`.
    pub fn suggest(&self, name: &str) -> Option<String> {
        let attrs = self.attrs.iter().map(|a| {
            if self.field(a.name()).is_some() {
                format!("sys_{}", a.name())
            } else {
                a.name().to_string()
            }
        });
        let names: Vec<String> = self
            .fields
            .iter()
            .map(|f| f.name.clone())
            .chain(attrs)
            .collect();
        closest(name, names.iter().map(String::as_str)).map(str::to_string)
    }
}

impl Column {
    /// The column's name (field name or attribute name).
    pub fn name(&self) -> &str {
        match self {
            Column::Field(f) => &f.name,
            Column::Attr(a) => a.name(),
        }
    }
}

/// Parses the text of a tracefs `format` file for `event` (pure; no I/O).
/// Returns the schema without `common_*` fields.
///
/// Errors: [`CatalogError::BadFormat`] when the `ID:` line is missing or a
/// `field:` line lacks a readable name, `offset:` or `size:`.
pub fn parse_format(event: EventName, text: &str) -> Result<EventSchema, CatalogError> {
    let bad = |line: usize, reason: String| CatalogError::BadFormat {
        event: event.table_name(),
        line,
        reason,
    };
    let mut id = None;
    let mut fields = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if let Some(v) = line.strip_prefix("ID:") {
            let v = v.trim();
            id = Some(
                v.parse::<u32>()
                    .map_err(|_| bad(i + 1, format!("bad ID `{v}`")))?,
            );
        } else if line.starts_with("field:") || line.starts_with("field ") {
            let f = parse_field_line(line).map_err(|r| bad(i + 1, r))?;
            fields.extend(f.into_iter().filter(|f| !f.name.starts_with("common_")));
        } else if line.starts_with("print fmt:") {
            break;
        }
    }
    let id = id.ok_or_else(|| bad(0, "no `ID:` line (is this a tracefs format file?)".into()))?;
    Ok(EventSchema {
        event,
        attach: Attach::Tracepoint { id },
        fields,
        attrs: SystemAttr::ALL.to_vec(),
    })
}

/// One `field:<decl>;\toffset:N;\tsize:N;\tsigned:N;` line: its field, or
/// the elements of an integer array ([`int_array_elements`]).
fn parse_field_line(line: &str) -> Result<Vec<TraceField>, String> {
    let mut parts = line.split(';').map(str::trim);
    let decl = parts.next().unwrap_or("");
    let decl = decl.split_once(':').map_or("", |(_, d)| d.trim());
    let (mut offset, mut size, mut signed) = (None, None, false);
    for p in parts {
        let Some((k, v)) = p.split_once(':') else {
            continue;
        };
        let num = || {
            v.trim()
                .parse::<u32>()
                .map_err(|_| format!("bad {k} `{}`", v.trim()))
        };
        match k.trim() {
            "offset" => offset = Some(num()?),
            "size" => size = Some(num()?),
            "signed" => signed = num()? != 0,
            _ => {}
        }
    }
    let (name, c_type, array) =
        split_decl(decl).ok_or(format!("cannot read declaration `{decl}`"))?;
    let offset = offset.ok_or("missing offset")?;
    let size = size.ok_or("missing size")?;
    if let Some(elements) = array
        .as_deref()
        .and_then(|len| int_array_elements(&name, &c_type, len, offset, size, signed))
    {
        return Ok(elements);
    }
    let kind = classify(&c_type, array.as_deref(), size, signed);
    let c_type = match array {
        Some(len) => format!("{c_type}[{len}]"),
        None => c_type,
    };
    let access = if kind == FieldKind::DataLocString {
        Access::DataLoc
    } else {
        Access::Ctx
    };
    Ok(vec![TraceField {
        name,
        c_type,
        offset,
        size,
        kind,
        access,
    }])
}

/// The elements of a fixed integer or pointer array field (`unsigned long
/// args[6]` of `raw_syscalls:sys_enter`, `__u8 saddr[4]` of
/// `sock:inet_sock_set_state`) as fields of their own, `args[0]` …
/// `args[5]`: C's indexing from 0, at `offset + i × size / N`. `signed` is
/// the format's flag, which for an array is its element type's. `None` for
/// any other field (`char[N]` is a string; flexible and odd-sized arrays
/// stay unsupported).
fn int_array_elements(
    name: &str,
    c_type: &str,
    len: &str,
    offset: u32,
    size: u32,
    signed: bool,
) -> Option<Vec<TraceField>> {
    let n: u32 = len.trim().parse().ok().filter(|&n| n > 0)?;
    let elem = size / n;
    if !size.is_multiple_of(n) || c_type.trim_start_matches("const ") == "char" {
        return None;
    }
    let kind = match classify(c_type, None, elem, signed) {
        FieldKind::Pointer if elem == 8 => FieldKind::Pointer,
        k @ FieldKind::Int { .. } => k,
        _ => return None,
    };
    Some(
        (0..n)
            .map(|i| TraceField {
                name: format!("{name}[{i}]"),
                c_type: c_type.to_string(),
                offset: offset + i * elem,
                size: elem,
                kind: kind.clone(),
                access: Access::Ctx,
            })
            .collect(),
    )
}

/// Splits `unsigned char foo[6]` into (`foo`, `unsigned char`, Some("6")).
/// `__attribute__((...))` groups are dropped from the type.
fn split_decl(decl: &str) -> Option<(String, String, Option<String>)> {
    let mut rest = decl.trim_end();
    let mut array = None;
    if rest.ends_with(']') {
        let open = rest.rfind('[')?;
        array = Some(rest[open + 1..rest.len() - 1].trim().to_string());
        rest = rest[..open].trim_end();
    }
    let start = rest
        .rfind(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .map_or(0, |i| i + 1);
    let name = &rest[start..];
    let ty = strip_attributes(&rest[..start]);
    if name.is_empty() || ty.is_empty() || name.starts_with(|c: char| c.is_ascii_digit()) {
        return None;
    }
    Some((name.to_string(), ty, array))
}

/// Removes `__attribute__((...))` (balanced parentheses) and collapses spaces.
fn strip_attributes(ty: &str) -> String {
    let mut out = String::new();
    let mut rest = ty;
    while let Some(i) = rest.find("__attribute__") {
        out.push_str(&rest[..i]);
        let after = &rest[i + "__attribute__".len()..];
        let mut depth = 0usize;
        let mut end = after.len();
        for (j, c) in after.char_indices() {
            match c {
                '(' => depth += 1,
                ')' => {
                    depth = depth.saturating_sub(1);
                    if depth == 0 {
                        end = j + 1;
                        break;
                    }
                }
                c if depth == 0 && !c.is_whitespace() => {
                    end = j;
                    break;
                }
                _ => {}
            }
        }
        rest = &after[end..];
    }
    out.push_str(rest);
    out.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// C integer types that are signed even where the format says `signed:0`
/// (syscall tracepoints store every argument as an `unsigned long`). Kernel
/// typedefs from include/linux/types.h and include/uapi/asm-generic/posix_types.h.
const SIGNED_TYPES: &[&str] = &[
    "int",
    "signed",
    "signed int",
    "long",
    "long int",
    "signed long",
    "long signed int",
    "long long",
    "long long int",
    "signed long long",
    "short",
    "short int",
    "signed short",
    "signed char",
    "s8",
    "s16",
    "s32",
    "s64",
    "__s8",
    "__s16",
    "__s32",
    "__s64",
    "int8_t",
    "int16_t",
    "int32_t",
    "int64_t",
    "pid_t",
    "loff_t",
    "ssize_t",
    "off_t",
    "time_t",
    "time64_t",
    "ktime_t",
    "clock_t",
    "clockid_t",
    "timer_t",
    "mqd_t",
    "key_t",
    "key_serial_t",
    "rwf_t",
    "ptrdiff_t",
    "suseconds_t",
    "__kernel_off_t",
    "__kernel_loff_t",
    "__kernel_ssize_t",
    "__kernel_pid_t",
    "__kernel_time64_t",
    "__kernel_clockid_t",
    "__kernel_timer_t",
    "__kernel_key_t",
    "__kernel_mqd_t",
    "__kernel_rwf_t",
];

fn classify(c_type: &str, array: Option<&str>, size: u32, signed: bool) -> FieldKind {
    let unsupported = |reason: String| FieldKind::Unsupported { reason };
    let base = c_type
        .trim_start_matches("const ")
        .trim_start_matches("volatile ");
    if let Some(elem) = c_type.strip_prefix("__data_loc ") {
        return match elem.trim_start_matches("const ") {
            "char[]" => FieldKind::DataLocString,
            _ => unsupported(format!(
                "dynamic array `{elem}` (__data_loc) is not supported"
            )),
        };
    }
    if c_type.starts_with("__rel_loc ") {
        return unsupported("__rel_loc dynamic fields are not supported".into());
    }
    if let Some(len) = array {
        return if base == "char" && size > 0 {
            FieldKind::CharArray { len: size }
        } else if size == 0 || len.is_empty() {
            unsupported(format!("flexible array `{c_type}[]` is not supported"))
        } else {
            unsupported(format!(
                "array of `{c_type}` is not supported (only char[N] strings)"
            ))
        };
    }
    if c_type.contains('*') {
        return FieldKind::Pointer;
    }
    if matches!(size, 1 | 2 | 4 | 8) {
        return FieldKind::Int {
            signed: signed || SIGNED_TYPES.contains(&base),
        };
    }
    unsupported(format!(
        "`{c_type}` of {size} bytes is not an integer, pointer or string"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::samples::{SCHED_SWITCH, SYS_ENTER_PREAD64 as PREAD64};

    const PROCESS_EXEC: &str = "name: sched_process_exec
ID: 365
format:
\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;
\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;

\tfield:__data_loc char[] filename;\toffset:8;\tsize:4;\tsigned:0;
\tfield:pid_t pid;\toffset:12;\tsize:4;\tsigned:1;
\tfield:pid_t old_pid;\toffset:16;\tsize:4;\tsigned:1;

print fmt: \"filename=%s pid=%d old_pid=%d\", __get_str(filename), REC->pid, REC->old_pid
";

    /// Lines seen on Linux 6.18 in other events (net, xfs, ftrace, dma, ...),
    /// plus an attribute-annotated type.
    const ODD: &str = "name: odd
ID: 7
format:
\tfield:unsigned char mac[6];\toffset:8;\tsize:6;\tsigned:0;
\tfield:const char * filename;\toffset:16;\tsize:8;\tsigned:0;
\tfield:bool ok;\toffset:24;\tsize:1;\tsigned:0;
\tfield:int dfd;\toffset:32;\tsize:8;\tsigned:0;
\tfield:__data_loc u64[] addrs;\toffset:40;\tsize:4;\tsigned:0;
\tfield:unsigned long args[];\toffset:48;\tsize:0;\tsigned:0;
\tfield:u64 __attribute__((btf_type_tag(\"user\"))) uaddr;\toffset:48;\tsize:8;\tsigned:0;
\tfield:const char *const * argv;\toffset:56;\tsize:8;\tsigned:0;
\tfield:enum zone_type zone;\toffset:64;\tsize:4;\tsigned:0;
\tfield:__data_loc cpumask_t mask;\toffset:68;\tsize:4;\tsigned:0;
";

    /// Syscall arguments as Linux 6.18 declares them: every one `size:8;
    /// signed:0`, whatever its C type.
    const SYSCALL_TYPES: &str = "name: sys_enter_typedefs
ID: 9
format:
\tfield:int __syscall_nr;\toffset:8;\tsize:4;\tsigned:1;
\tfield:const clockid_t which_clock;\toffset:16;\tsize:8;\tsigned:0;
\tfield:timer_t timer_id;\toffset:24;\tsize:8;\tsigned:0;
\tfield:mqd_t mqdes;\toffset:32;\tsize:8;\tsigned:0;
\tfield:key_serial_t key;\toffset:40;\tsize:8;\tsigned:0;
\tfield:rwf_t flags;\toffset:48;\tsize:8;\tsigned:0;
\tfield:key_t ipc_key;\toffset:56;\tsize:8;\tsigned:0;
\tfield:off_t offset;\toffset:64;\tsize:8;\tsigned:0;
\tfield:const int dfd;\toffset:72;\tsize:8;\tsigned:0;
\tfield:__s32 s;\toffset:80;\tsize:8;\tsigned:0;
\tfield:qid_t id;\toffset:88;\tsize:8;\tsigned:0;
\tfield:aio_context_t ctx_id;\toffset:96;\tsize:8;\tsigned:0;
\tfield:umode_t mode;\toffset:104;\tsize:8;\tsigned:0;
\tfield:size_t count;\toffset:112;\tsize:8;\tsigned:0;
\tfield:long long ll;\toffset:120;\tsize:8;\tsigned:0;
\tfield:time64_t t;\toffset:128;\tsize:8;\tsigned:0;
";

    #[test]
    fn signed_c_typedefs_are_signed_although_the_format_says_unsigned() {
        let s = parse_format(tp("syscalls", "sys_enter_typedefs"), SYSCALL_TYPES).unwrap();
        for f in [
            "which_clock",
            "timer_id",
            "mqdes",
            "key",
            "flags",
            "ipc_key",
            "offset",
            "dfd",
            "s",
            "ll",
            "t",
        ] {
            assert_eq!(kind(&s, f), FieldKind::Int { signed: true }, "{f}");
        }
        for f in ["id", "ctx_id", "mode", "count"] {
            assert_eq!(kind(&s, f), FieldKind::Int { signed: false }, "{f}");
        }
    }

    fn tp(c: &str, n: &str) -> EventName {
        EventName::tracepoint(c, n)
    }

    fn kind(s: &EventSchema, name: &str) -> FieldKind {
        s.field(name)
            .unwrap_or_else(|| panic!("no field {name}"))
            .kind
            .clone()
    }

    #[test]
    fn pread64() {
        let s = parse_format(tp("syscalls", "sys_enter_pread64"), PREAD64).unwrap();
        assert_eq!(s.attach, Attach::Tracepoint { id: 838 });
        let names: Vec<_> = s.fields.iter().map(|f| f.name.as_str()).collect();
        assert_eq!(names, ["__syscall_nr", "fd", "buf", "count", "pos"]);
        let fd = s.field("fd").unwrap();
        assert_eq!(
            (fd.offset, fd.size, fd.c_type.as_str()),
            (16, 8, "unsigned int")
        );
        assert_eq!(fd.kind, FieldKind::Int { signed: false });
        assert_eq!(kind(&s, "buf"), FieldKind::Pointer);
        assert_eq!(s.field("count").unwrap().offset, 32);
        assert_eq!(kind(&s, "count"), FieldKind::Int { signed: false });
        assert_eq!(kind(&s, "pos"), FieldKind::Int { signed: true });
        assert!(s.field("common_pid").is_none());
    }

    #[test]
    fn sched_switch() {
        let s = parse_format(tp("sched", "sched_switch"), SCHED_SWITCH).unwrap();
        let comm = s.field("prev_comm").unwrap();
        assert_eq!(comm.kind, FieldKind::CharArray { len: 16 });
        assert_eq!(
            (comm.c_type.as_str(), comm.offset, comm.size),
            ("char[16]", 8, 16)
        );
        assert_eq!(kind(&s, "prev_pid"), FieldKind::Int { signed: true });
        assert_eq!(kind(&s, "prev_state"), FieldKind::Int { signed: true });
        assert_eq!(s.field("next_prio").unwrap().offset, 60);
    }

    #[test]
    fn process_exec_and_shadowing() {
        let s = parse_format(tp("sched", "sched_process_exec"), PROCESS_EXEC).unwrap();
        let f = s.field("filename").unwrap();
        assert_eq!(
            (f.c_type.as_str(), f.offset, f.size),
            ("__data_loc char[]", 8, 4)
        );
        assert_eq!(f.kind, FieldKind::DataLocString);
        // The tracepoint's own `pid` shadows the attribute; `sys_pid` reaches it.
        assert!(matches!(s.resolve("pid"), Some(Column::Field(f)) if f.offset == 12));
        assert_eq!(s.resolve("sys_pid"), Some(Column::Attr(SystemAttr::Pid)));
        assert_eq!(s.resolve("cpu"), Some(Column::Attr(SystemAttr::Cpu)));
        assert_eq!(s.resolve("sys_filename"), None);
        assert_eq!(s.resolve("nope"), None);
        assert_eq!(s.resolve("pid").unwrap().name(), "pid");
    }

    #[test]
    fn odd_fields() {
        let s = parse_format(tp("x", "odd"), ODD).unwrap();
        // An integer array is its elements, indexed from 0 as in C.
        assert!(s.field("mac").is_none());
        let last = s.field("mac[5]").unwrap();
        assert_eq!(
            (
                last.c_type.as_str(),
                last.offset,
                last.size,
                last.kind.clone()
            ),
            ("unsigned char", 13, 1, FieldKind::Int { signed: false })
        );
        assert!(s.field("mac[6]").is_none());
        assert_eq!(kind(&s, "filename"), FieldKind::Pointer);
        assert_eq!(s.field("filename").unwrap().c_type, "const char *");
        assert_eq!(kind(&s, "ok"), FieldKind::Int { signed: false });
        assert_eq!(kind(&s, "dfd"), FieldKind::Int { signed: true });
        assert!(matches!(kind(&s, "addrs"), FieldKind::Unsupported { .. }));
        assert!(
            matches!(kind(&s, "args"), FieldKind::Unsupported { reason } if reason.contains("flexible"))
        );
        let u = s.field("uaddr").unwrap();
        assert_eq!(
            (u.c_type.as_str(), u.kind.clone()),
            ("u64", FieldKind::Int { signed: false })
        );
        assert_eq!(kind(&s, "argv"), FieldKind::Pointer);
        assert_eq!(kind(&s, "zone"), FieldKind::Int { signed: false });
        assert!(matches!(kind(&s, "mask"), FieldKind::Unsupported { .. }));
    }

    #[test]
    fn raw_syscall_arguments_are_six_columns() {
        let s = parse_format(
            tp("raw_syscalls", "sys_enter"),
            crate::samples::RAW_SYS_ENTER,
        )
        .unwrap();
        let names: Vec<&str> = s.fields.iter().map(|f| f.name.as_str()).collect();
        assert_eq!(
            names,
            ["id", "args[0]", "args[1]", "args[2]", "args[3]", "args[4]", "args[5]"]
        );
        let a3 = s.field("args[3]").unwrap();
        assert_eq!(
            (a3.offset, a3.size, a3.kind.clone(), a3.c_type.as_str()),
            (40, 8, FieldKind::Int { signed: false }, "unsigned long")
        );
        assert_eq!(kind(&s, "id"), FieldKind::Int { signed: true });
    }

    #[test]
    fn bad_formats() {
        let e = parse_format(tp("a", "b"), "name: b\nformat:\n").unwrap_err();
        assert!(matches!(e, CatalogError::BadFormat { line: 0, .. }), "{e}");
        let e = parse_format(tp("a", "b"), "ID: 1\n\tfield:int x;\tsize:4;\n").unwrap_err();
        assert!(
            e.to_string().contains("line 2") && e.to_string().contains("offset"),
            "{e}"
        );
        let e = parse_format(tp("a", "b"), "ID: x\n").unwrap_err();
        assert!(e.to_string().contains("bad ID"), "{e}");
    }

    #[test]
    fn suggestions() {
        let s = parse_format(tp("syscalls", "sys_enter_pread64"), PREAD64).unwrap();
        assert_eq!(s.suggest("cout").as_deref(), Some("count"));
        assert_eq!(s.suggest("fdd").as_deref(), Some("fd"));
        assert_eq!(s.suggest("cgrop").as_deref(), Some("cgroup"));
        assert_eq!(s.suggest("xyzzy"), None);
        let s = parse_format(tp("sched", "sched_process_exec"), PROCESS_EXEC).unwrap();
        assert_eq!(s.suggest("filenme").as_deref(), Some("filename"));
        assert_eq!(s.suggest("sys_pdi").as_deref(), Some("sys_pid"));
    }
}
