//! User addresses to frame texts through a process's snapshot
//! ([`super::process`]): each address becomes a file offset in the file its
//! mapping maps, symbolized by blazesym's `Elf` source on the held file (a
//! vDSO address: through this process's own vDSO, the same image), so it
//! does not matter whether the process still lives. A frame no symbol
//! covers says why ([`Why`]): `0x7f3a1c0042a0 [/usr/lib/libfoo.so +0x42a0
//! (build id 1a2b…): stripped: no dynamic symbol covers it]`.

use super::process::{Object, Processes, Snapshot};
use blazesym::symbolize::source::{Elf, Process, Source};
use blazesym::symbolize::{Input, Reason, Symbolized, Symbolizer};
use blazesym::Pid;
use std::collections::BTreeMap;
use std::ops::Range;
use std::sync::OnceLock;

thread_local! {
    /// blazesym's symbolizer (not `Send`; one per query thread, caching the
    /// parsed ELF files and kallsyms it has read).
    pub(super) static SYMBOLIZER: Symbolizer = Symbolizer::new();
}

/// Why an address has no symbol: the bracketed text after it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Why {
    /// The stack's process id is 0 (no process to read).
    NoProcess,
    /// The process had exited when its first stack was seen.
    Exited,
    /// `/proc/<pid>/maps` could not be read.
    MapsUnreadable(String),
    /// No executable mapping of the process holds the address.
    NotMapped,
    /// Memory no file backs: anonymous (JIT code) or a named region.
    NoFile(Option<String>),
    /// In a file (or the vDSO) at `offset`, where the symbolizer found no
    /// symbol or could not read it (`what`).
    InFile {
        /// The file's path, or `[vdso]`.
        name: String,
        /// Its GNU build id in hex, when it has one.
        build_id: Option<String>,
        /// The file offset (vDSO: the offset in it).
        offset: u64,
        /// What went wrong.
        what: String,
    },
}

impl std::fmt::Display for Why {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Why::NoProcess => write!(f, "no process id"),
            Why::Exited => write!(f, "process exited before its mappings were read"),
            Why::MapsUnreadable(e) => write!(f, "process mappings unreadable: {e}"),
            Why::NotMapped => write!(f, "not in an executable mapping of the process"),
            Why::NoFile(None) => write!(f, "anonymous memory: no file to read symbols from"),
            Why::NoFile(Some(region)) => write!(f, "in {region}: no file to read symbols from"),
            Why::InFile {
                name,
                build_id,
                offset,
                what,
            } => {
                write!(f, "{name} +{offset:#x}")?;
                if let Some(id) = build_id {
                    write!(f, " (build id {id})")?;
                }
                write!(f, ": {what}")
            }
        }
    }
}

/// The frame text of an address that has no symbol: `0x… [why]`, with no
/// `;` (the frame separator) inside.
pub(super) fn unsymbolized(addr: u64, why: &Why) -> String {
    format!("{addr:#x} [{}]", why.to_string().replace(';', ","))
}

/// What blazesym's reason for an unknown address means here.
pub(super) fn reason_text(r: Reason) -> String {
    match r {
        Reason::MissingSyms => "stripped: no dynamic symbol covers it".into(),
        Reason::UnknownAddr => "no symbol covers it".into(),
        Reason::InvalidFileOffset => "not in a loaded segment of the file".into(),
        other => other.to_string(),
    }
}

/// A symbolized frame as `function+0xoffset`, or why not.
pub(super) fn own(s: Symbolized<'_>) -> Result<String, Reason> {
    match s {
        Symbolized::Sym(s) => Ok(format!("{}+{:#x}", s.name, s.offset)),
        Symbolized::Unknown(r) => Err(r),
    }
}

/// This process's vDSO, where another process's vDSO addresses are looked up.
fn own_vdso() -> Option<Range<u64>> {
    static VDSO: OnceLock<Option<Range<u64>>> = OnceLock::new();
    VDSO.get_or_init(|| {
        let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
        maps.lines()
            .filter_map(super::process::parse_maps_line)
            .find(|l| l.path == "[vdso]")
            .map(|l| l.range)
    })
    .clone()
}

/// Symbolizes `offsets` of one object with `src`: each a frame or why not.
fn symbolize(
    src: &Source<'_>,
    input: Input<&[u64]>,
) -> Result<Vec<Result<String, Reason>>, String> {
    SYMBOLIZER.with(|s| {
        s.symbolize(src, input)
            .map(|v| v.into_iter().map(own).collect())
            .map_err(|e| e.to_string())
    })
}

/// What the symbolizer answered for one object
/// (`syms[k]` for the `k`th of `at`: frame index, offset), into `out`.
fn fill(
    out: &mut [Option<String>],
    addrs: &[u64],
    at: &[(usize, u64)],
    syms: &Result<Vec<Result<String, Reason>>, String>,
    mut why: impl FnMut(u64, String) -> Why,
) {
    for (k, &(i, offset)) in at.iter().enumerate() {
        let what = match syms {
            Ok(v) => match v.get(k) {
                Some(Ok(frame)) => {
                    out[i] = Some(frame.clone());
                    continue;
                }
                Some(Err(r)) => reason_text(*r),
                None => "no answer from the symbolizer".into(),
            },
            Err(e) => format!("unreadable: {e}"),
        };
        out[i] = Some(unsymbolized(addrs[i], &why(offset, what)));
    }
}

/// The frames of user addresses `addrs` of process `pid` (in their order),
/// each `function+0xoffset` or `0x… [why]`.
pub(super) fn user_frames(procs: &mut Processes, pid: u32, addrs: &[u64]) -> Vec<String> {
    if pid == 0 {
        return addrs
            .iter()
            .map(|&a| unsymbolized(a, &Why::NoProcess))
            .collect();
    }
    procs.follow_exec(pid);
    // An address outside the snapshot: the process may have mapped more since.
    if addrs
        .iter()
        .any(|&a| procs.snapshot(pid).mapping(a).is_none())
    {
        procs.refresh(pid);
    }
    let snap = procs.snapshot(pid);
    let whole = match snap {
        Snapshot::Gone => Some(Why::Exited),
        Snapshot::Unreadable(e) => Some(Why::MapsUnreadable(e.clone())),
        Snapshot::Taken { .. } => None,
    };
    if let Some(why) = whole {
        return addrs.iter().map(|&a| unsymbolized(a, &why)).collect();
    }
    let mut out: Vec<Option<String>> = vec![None; addrs.len()];
    // Per object, the (frame index, offset) pairs in it.
    let mut by_file: BTreeMap<usize, Vec<(usize, u64)>> = BTreeMap::new();
    let mut vdso: Vec<(usize, u64)> = Vec::new();
    for (i, &a) in addrs.iter().enumerate() {
        match snap.mapping(a) {
            None => out[i] = Some(unsymbolized(a, &Why::NotMapped)),
            Some(m) => match &m.object {
                Object::File(f) => by_file
                    .entry(*f)
                    .or_default()
                    .push((i, a - m.range.start + m.offset)),
                Object::Vdso => vdso.push((i, a - m.range.start)),
                Object::Anon(region) => {
                    out[i] = Some(unsymbolized(a, &Why::NoFile(region.clone())))
                }
            },
        }
    }
    for (f, at) in by_file {
        let file = procs.file(f);
        let offsets: Vec<u64> = at.iter().map(|&(_, o)| o).collect();
        let syms = symbolize(
            &Source::Elf(Elf::new(file.path())),
            Input::FileOffset(&offsets),
        );
        fill(&mut out, addrs, &at, &syms, |offset, what| Why::InFile {
            name: file.name.clone(),
            build_id: file.build_id().map(str::to_string),
            offset,
            what,
        });
    }
    if !vdso.is_empty() {
        // The vDSO is one image per kernel: ours holds the same code at our addresses.
        let syms = match own_vdso() {
            Some(ours) => {
                let abs: Vec<u64> = vdso.iter().map(|&(_, o)| ours.start + o).collect();
                symbolize(
                    &Source::Process(Process::new(Pid::Slf)),
                    Input::AbsAddr(&abs),
                )
            }
            None => Err("this process has no vDSO".into()),
        };
        fill(&mut out, addrs, &vdso, &syms, |offset, what| Why::InFile {
            name: "[vdso]".into(),
            build_id: None,
            offset,
            what,
        });
    }
    out.into_iter()
        .zip(addrs)
        .map(|(f, &a)| f.unwrap_or_else(|| unsymbolized(a, &Why::NotMapped)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every reason a frame has no symbol is said, after the address.
    #[test]
    fn unsymbolized_frames_say_why() {
        let a = 0x7f3a_1c00_42a0;
        assert_eq!(
            unsymbolized(a, &Why::Exited),
            "0x7f3a1c0042a0 [process exited before its mappings were read]"
        );
        assert_eq!(
            unsymbolized(a, &Why::NoProcess),
            "0x7f3a1c0042a0 [no process id]"
        );
        assert_eq!(
            unsymbolized(a, &Why::NotMapped),
            "0x7f3a1c0042a0 [not in an executable mapping of the process]"
        );
        assert_eq!(
            unsymbolized(a, &Why::NoFile(None)),
            "0x7f3a1c0042a0 [anonymous memory: no file to read symbols from]"
        );
        assert_eq!(
            unsymbolized(a, &Why::NoFile(Some("[stack]".into()))),
            "0x7f3a1c0042a0 [in [stack]: no file to read symbols from]"
        );
        assert_eq!(
            unsymbolized(
                a,
                &Why::MapsUnreadable("Permission denied (os error 13)".into())
            ),
            "0x7f3a1c0042a0 [process mappings unreadable: Permission denied (os error 13)]"
        );
        assert_eq!(
            unsymbolized(
                a,
                &Why::InFile {
                    name: "/usr/lib/libfoo.so".into(),
                    build_id: Some("1a2b".into()),
                    offset: 0x42a0,
                    what: reason_text(Reason::MissingSyms),
                }
            ),
            "0x7f3a1c0042a0 [/usr/lib/libfoo.so +0x42a0 (build id 1a2b): stripped: no dynamic symbol covers it]"
        );
        assert_eq!(
            unsymbolized(
                a,
                &Why::InFile {
                    name: "/x".into(),
                    build_id: None,
                    offset: 0x10,
                    what: "unreadable: a; b".into(),
                }
            ),
            "0x7f3a1c0042a0 [/x +0x10: unreadable: a, b]",
            "no frame separator inside a frame"
        );
        assert_eq!(reason_text(Reason::UnknownAddr), "no symbol covers it");
        assert_eq!(
            reason_text(Reason::InvalidFileOffset),
            "not in a loaded segment of the file"
        );
    }

    #[inline(never)]
    fn marker() -> u64 {
        std::hint::black_box(7)
    }

    /// This process's addresses: a function of ours by name, an address in
    /// no mapping and a process that does not exist, each said.
    #[test]
    fn own_addresses_symbolize_and_the_rest_say_why() {
        let mut p = Processes::default();
        let here = marker as *const () as usize as u64 + 1;
        let f = user_frames(&mut p, std::process::id(), &[here, 8]);
        assert!(f[0].contains("marker+0x1"), "{f:?}");
        assert_eq!(f[1], "0x8 [not in an executable mapping of the process]");
        let gone = user_frames(&mut p, u32::MAX - 1, &[here]);
        assert_eq!(
            gone,
            [format!(
                "{here:#x} [process exited before its mappings were read]"
            )]
        );
    }
}
