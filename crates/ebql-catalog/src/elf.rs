//! ELF facts for user-space probes (the `object` crate): where a binary or
//! library is, its function symbols (C++ names also by their demangled
//! form), virtual address → file offset, and the USDT notes of
//! `.note.stapsdt`.
//!
//! Sources of facts: the System V ABI (program headers: a `PT_LOAD` segment
//! maps `[p_offset, p_offset + p_filesz)` of the file at `p_vaddr`), the
//! kernel's uprobe interface (probes are placed at a *file offset* of an
//! inode, Documentation/trace/uprobetracer.rst), and systemtap's SDT note
//! format v3 (<https://sourceware.org/systemtap/wiki/UserSpaceProbeImplementation>).

use std::path::{Path, PathBuf};

use object::read::elf::{ElfFile64, SectionHeader};
use object::{Object, ObjectSection, ObjectSegment, ObjectSymbol, SymbolKind};

use crate::CatalogError;

/// Directories searched for a library named without a path, after
/// ldconfig's cache (Debian's multiarch layout first).
const LIB_DIRS: &[&str] = &[
    "/lib/x86_64-linux-gnu",
    "/usr/lib/x86_64-linux-gnu",
    "/lib64",
    "/usr/lib64",
    "/lib",
    "/usr/lib",
    "/usr/local/lib",
];

/// Where the binary or library `spec` is, absolute and with symlinks
/// resolved (uprobes attach to the inode). The rule, in order:
///
/// 1. `spec` containing `/` is a path (relative to the working directory);
/// 2. a library in ldconfig's cache (`ldconfig -p`) named exactly `spec`,
///    `spec.so` or `spec.so.<version>` (so `libc`, `libc.so.6` both work),
///    the x86-64 entry when there are several;
/// 3. the same names in the standard library directories ([`LIB_DIRS`]);
/// 4. an executable of that name in `$PATH` (`bash`).
///
/// Errors: [`CatalogError::BadBinary`] naming what was searched.
pub fn resolve_binary(spec: &str) -> Result<PathBuf, CatalogError> {
    let bad = |reason: String| CatalogError::BadBinary {
        path: PathBuf::from(spec),
        reason,
    };
    if spec.contains('/') {
        return std::fs::canonicalize(spec).map_err(|e| bad(format!("{e}")));
    }
    let matches_name = |file: &str| {
        file == spec || file == format!("{spec}.so") || file.starts_with(&format!("{spec}.so."))
    };
    if let Some(p) = ldconfig_cache()
        .into_iter()
        .find(|(name, _)| matches_name(name))
        .map(|(_, p)| p)
    {
        return std::fs::canonicalize(&p).map_err(|e| bad(format!("{}: {e}", p.display())));
    }
    for dir in LIB_DIRS {
        let Ok(rd) = std::fs::read_dir(dir) else {
            continue;
        };
        let mut names: Vec<String> = rd
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|n| matches_name(n))
            .collect();
        names.sort();
        if let Some(n) = names.first() {
            return std::fs::canonicalize(Path::new(dir).join(n)).map_err(|e| bad(format!("{e}")));
        }
    }
    if let Some(path) = std::env::var_os("PATH") {
        for dir in std::env::split_paths(&path) {
            let p = dir.join(spec);
            if p.is_file() {
                return std::fs::canonicalize(&p).map_err(|e| bad(format!("{e}")));
            }
        }
    }
    Err(bad(format!("not a path, and no library or executable of that name in ldconfig's cache, {} or $PATH; give the file's path", LIB_DIRS.join(", "))))
}

/// `(file name, path)` of every x86-64 (or unqualified) entry of `ldconfig -p`.
fn ldconfig_cache() -> Vec<(String, PathBuf)> {
    let out = ["/sbin/ldconfig", "/usr/sbin/ldconfig", "ldconfig"]
        .iter()
        .find_map(|c| std::process::Command::new(c).arg("-p").output().ok());
    let Some(out) = out.filter(|o| o.status.success()) else {
        return Vec::new();
    };
    let text = String::from_utf8_lossy(&out.stdout);
    // Lines: "\tlibc.so.6 (libc6,x86-64) => /lib/x86_64-linux-gnu/libc.so.6"
    let mut v: Vec<(bool, String, PathBuf)> = text
        .lines()
        .filter_map(|l| {
            let (lhs, path) = l.trim().split_once(" => ")?;
            let (name, flags) = lhs.split_once(' ').unwrap_or((lhs, ""));
            let foreign =
                flags.contains("32") || (flags.contains(',') && !flags.contains("x86-64"));
            Some((foreign, name.to_string(), PathBuf::from(path)))
        })
        .collect();
    v.sort_by_key(|(foreign, ..)| *foreign);
    v.into_iter().map(|(_, n, p)| (n, p)).collect()
}

/// A function symbol of an ELF file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Symbol {
    /// The name as stored (mangled for C++).
    pub name: String,
    /// The demangled C++ name with its parameter list (`ns::f(int)`), when
    /// the name is a mangled C++ name.
    pub demangled: Option<String>,
    /// Virtual address (`st_value`).
    pub address: u64,
}

impl Symbol {
    /// The demangled name without parameters (`ns::f`), if C++.
    pub fn short_demangled(&self) -> Option<&str> {
        let d = self.demangled.as_deref()?;
        // The parameter list is the last top-level `(`; templates may nest.
        let mut depth = 0i32;
        for (i, c) in d.char_indices() {
            match c {
                '<' => depth += 1,
                '>' => depth -= 1,
                '(' if depth == 0 => return Some(&d[..i]),
                _ => {}
            }
        }
        Some(d)
    }

    /// True if `spec` names this symbol: the stored name, the full demangled
    /// name, or the demangled name without parameters.
    pub fn is_named(&self, spec: &str) -> bool {
        self.name == spec
            || self.demangled.as_deref() == Some(spec)
            || self.short_demangled() == Some(spec)
    }
}

/// One USDT probe site from `.note.stapsdt`, addresses already adjusted
/// for prelinking (the note's `base` against `.stapsdt.base`'s address).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UsdtNote {
    /// Provider, e.g. `postgresql`.
    pub provider: String,
    /// Probe name, e.g. `query__start`.
    pub name: String,
    /// Virtual address of the probe's `nop`.
    pub pc: u64,
    /// Virtual address of the semaphore (a u16), 0 when none.
    pub semaphore: u64,
    /// Argument specs as written (`-4@%eax`, `8@-8(%rbp)`, `-4@$5`).
    pub args: Vec<String>,
}

/// An ELF file read into memory.
pub struct Elf {
    /// The file (absolute).
    pub path: PathBuf,
    data: Vec<u8>,
}

impl Elf {
    /// Reads `path`. Errors: [`CatalogError::Io`], or [`CatalogError::BadBinary`]
    /// when it is not a 64-bit ELF file.
    pub fn open(path: &Path) -> Result<Elf, CatalogError> {
        let data = std::fs::read(path).map_err(|source| CatalogError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        let elf = Elf {
            path: path.to_path_buf(),
            data,
        };
        elf.file()?;
        Ok(elf)
    }

    fn bad(&self, reason: impl Into<String>) -> CatalogError {
        CatalogError::BadBinary {
            path: self.path.clone(),
            reason: reason.into(),
        }
    }

    fn file(&self) -> Result<ElfFile64<'_>, CatalogError> {
        ElfFile64::parse(self.data.as_slice())
            .map_err(|e| self.bad(format!("not a 64-bit ELF file ({e})")))
    }

    /// True when the file has no `.symtab`: only the exported functions of
    /// `.dynsym` are named (Debian strips its packages; their symbols are in
    /// separate debug files).
    pub fn is_stripped(&self) -> Result<bool, CatalogError> {
        Ok(self.file()?.section_by_name(".symtab").is_none())
    }

    /// The GNU build id (`.note.gnu.build-id`), as lowercase hex.
    pub fn build_id(&self) -> Result<Option<String>, CatalogError> {
        let f = self.file()?;
        let id = f
            .build_id()
            .map_err(|e| self.bad(format!("bad build id note ({e})")))?;
        Ok(id.map(|b| b.iter().map(|x| format!("{x:02x}")).collect()))
    }

    /// The places GDB looks for this file's separate debug file, in its
    /// order: `/usr/lib/debug/.build-id/xx/yyyy.debug` by build id, then the
    /// `.gnu_debuglink` name next to the file, in its `.debug/`
    /// subdirectory, and under `/usr/lib/debug/` + the file's directory
    /// (<https://sourceware.org/gdb/current/onlinedocs/gdb.html/Separate-Debug-Files.html>).
    pub fn debug_file_candidates(&self) -> Result<Vec<PathBuf>, CatalogError> {
        let mut out = Vec::new();
        if let Some(id) = self.build_id()?.filter(|id| id.len() > 2) {
            out.push(PathBuf::from(format!(
                "/usr/lib/debug/.build-id/{}/{}.debug",
                &id[..2],
                &id[2..]
            )));
        }
        let f = self.file()?;
        if let Some((name, _crc)) = f
            .gnu_debuglink()
            .map_err(|e| self.bad(format!("bad .gnu_debuglink ({e})")))?
        {
            let name = String::from_utf8_lossy(name).into_owned();
            let dir = self.path.parent().unwrap_or(Path::new("/"));
            out.push(dir.join(&name));
            out.push(dir.join(".debug").join(&name));
            out.push(
                Path::new("/usr/lib/debug")
                    .join(dir.strip_prefix("/").unwrap_or(dir))
                    .join(&name),
            );
        }
        Ok(out)
    }

    /// The separate debug file of a stripped file: the first candidate
    /// ([`Elf::debug_file_candidates`]) that is an ELF file with a `.symtab`
    /// and, when both have one, the same build id. Its symbols have the
    /// addresses of this file.
    pub fn debug_file(&self) -> Result<Option<Elf>, CatalogError> {
        let mine = self.build_id()?;
        for p in self.debug_file_candidates()? {
            if p == self.path || !p.is_file() {
                continue;
            }
            let Ok(d) = Elf::open(&p) else { continue };
            let same = match (&mine, d.build_id().ok().flatten()) {
                (Some(a), Some(b)) => *a == b,
                _ => true,
            };
            if same && !d.is_stripped()? {
                return Ok(Some(d));
            }
        }
        Ok(None)
    }

    /// Defined function symbols of `.symtab` and `.dynsym` (with, for a
    /// stripped file, the `.symtab` of its separate debug file when one is
    /// installed: [`Elf::debug_file`]), one per address and name, sorted by name.
    pub fn functions(&self) -> Result<Vec<Symbol>, CatalogError> {
        self.symbols(&|_| true)
    }

    /// Like [`Elf::functions`], but only the C++ names `demangle` accepts
    /// are demangled (the others keep `demangled: None`): demangling every
    /// one of a large server's ~20,000 names costs most of a lookup.
    fn symbols(&self, demangle: &dyn Fn(&str) -> bool) -> Result<Vec<Symbol>, CatalogError> {
        let mut v = self.own_symbols(demangle)?;
        if self.is_stripped()? {
            if let Some(d) = self.debug_file()? {
                v.extend(d.own_symbols(demangle)?);
                v.sort_by(|a, b| (&a.name, a.address).cmp(&(&b.name, b.address)));
                v.dedup();
            }
        }
        Ok(v)
    }

    /// [`Elf::symbols`] of this file alone.
    fn own_symbols(&self, demangle: &dyn Fn(&str) -> bool) -> Result<Vec<Symbol>, CatalogError> {
        let f = self.file()?;
        let mut v: Vec<Symbol> = f
            .symbols()
            .chain(f.dynamic_symbols())
            .filter(|s| s.kind() == SymbolKind::Text && s.is_definition() && s.address() != 0)
            .filter_map(|s| {
                let name = s.name().ok()?.to_string();
                // Versioned dynamic names (`malloc@@GLIBC_2.2.5`) are the same function.
                let name = name.split('@').next().unwrap_or(&name).to_string();
                let demangled = (name.starts_with("_Z") && demangle(&name))
                    .then(|| {
                        cpp_demangle::Symbol::new(name.as_bytes())
                            .ok()
                            .and_then(|d| d.demangle().ok())
                    })
                    .flatten();
                Some(Symbol {
                    name,
                    demangled,
                    address: s.address(),
                })
            })
            .collect();
        v.sort_by(|a, b| (&a.name, a.address).cmp(&(&b.name, b.address)));
        v.dedup();
        Ok(v)
    }

    /// The one function named `spec` (see [`Symbol::is_named`]).
    ///
    /// Errors: [`CatalogError::NotInBinary`] when none matches (with the
    /// closest name) or when `spec` names several functions at different
    /// addresses (C++ overloads: the hint lists their full names to quote).
    pub fn function(&self, spec: &str) -> Result<Symbol, CatalogError> {
        // Only mangled names spelling the function's own identifier can demangle to `spec`.
        let all = match mangled_identifier(spec) {
            Some(id) => self.symbols(&|mangled: &str| mangled.contains(id))?,
            None => self.functions()?,
        };
        let mut found: Vec<&Symbol> = all.iter().filter(|s| s.is_named(spec)).collect();
        found.sort_by_key(|s| s.address);
        found.dedup_by_key(|s| s.address);
        match found.as_slice() {
            [one] => Ok((*one).clone()),
            [] => {
                let all = self.functions()?;
                let names = all
                    .iter()
                    .flat_map(|s| [Some(s.name.as_str()), s.short_demangled()])
                    .flatten();
                let closest = crate::closest(spec, names);
                if self.is_stripped()? && self.debug_file()?.is_none() {
                    // A static function of a stripped binary (named nowhere we can read), or a typo.
                    let looked: Vec<String> = self
                        .debug_file_candidates()?
                        .iter()
                        .map(|p| p.display().to_string())
                        .collect();
                    let usdt = if self.usdt_notes()?.is_empty() {
                        String::new()
                    } else {
                        format!(
                            "; or use its USDT probes (`ebql events 'usdt:{}:*'`)",
                            self.path.display()
                        )
                    };
                    let typo = closest
                        .map(|c| format!("did you mean `{c}`? If not, "))
                        .unwrap_or_default();
                    return Err(CatalogError::NotInBinary {
                        binary: self.path.clone(),
                        what: format!("function `{spec}` (the binary is stripped: only its {} exported functions are named, and no debug-symbols file was found{})", all.len(), if looked.is_empty() { String::new() } else { format!(" at {}", looked.join(", ")) }),
                        hint: format!("{typo}install the package's debug symbols (Debian: its -dbgsym package), which puts them at one of those paths{usdt}; `ebql events 'uprobe:{}:*'` lists the named functions", self.path.display()),
                    });
                }
                let hint = match closest {
                    Some(c) => format!("did you mean `{c}`?"),
                    None => format!(
                        "`ebql events 'uprobe:{}:*'` lists its functions",
                        self.path.display()
                    ),
                };
                Err(CatalogError::NotInBinary {
                    binary: self.path.clone(),
                    what: format!("function `{spec}`"),
                    hint,
                })
            }
            many => {
                // A name two candidates share (a destructor's complete and deleting
                // variants) does not tell them apart: show their stored names too.
                let demangled = |s: &Symbol| s.demangled.clone().unwrap_or_else(|| s.name.clone());
                let shared =
                    |s: &Symbol| many.iter().filter(|o| demangled(o) == demangled(s)).count() > 1;
                let spelling = |s: &Symbol| {
                    if shared(s) {
                        s.name.clone()
                    } else {
                        demangled(s)
                    }
                };
                const SHOWN: usize = 8;
                let mut names: Vec<String> = many
                    .iter()
                    .take(SHOWN)
                    .map(|s| {
                        if shared(s) {
                            format!("`{}` (= {})", s.name, demangled(s))
                        } else {
                            format!("`{}`", demangled(s))
                        }
                    })
                    .collect();
                if many.len() > SHOWN {
                    names.push(format!(
                        "and {} more (`ebql events 'uprobe:{}:{spec}'`)",
                        many.len() - SHOWN,
                        self.path.display()
                    ));
                }
                Err(CatalogError::NotInBinary {
                    binary: self.path.clone(),
                    what: format!("single function `{spec}` ({} overloads)", many.len()),
                    hint: format!(
                        "name one in a quoted table name, e.g. FROM \"uprobe:{}:{}\"; the candidates: {}",
                        self.path.display(),
                        spelling(many[0]),
                        names.join(", ")
                    ),
                })
            }
        }
    }

    /// The file offset where virtual address `vaddr` is stored (the
    /// `PT_LOAD` segment containing it), as uprobes need. Works the same for
    /// fixed-address executables, PIE executables and shared libraries.
    pub fn file_offset(&self, vaddr: u64) -> Result<u64, CatalogError> {
        let f = self.file()?;
        f.segments()
            .find_map(|seg| {
                let (off, size) = seg.file_range();
                (vaddr >= seg.address() && vaddr < seg.address() + size.max(seg.size()))
                    .then(|| vaddr - seg.address() + off)
            })
            .ok_or_else(|| self.bad(format!("address {vaddr:#x} is in no loadable segment")))
    }

    /// Every USDT probe site of the file (empty when it has no `.note.stapsdt`).
    pub fn usdt_notes(&self) -> Result<Vec<UsdtNote>, CatalogError> {
        let f = self.file()?;
        let endian = f.endian();
        // `.stapsdt.base`'s address now vs. the one recorded in each note: prelink may have moved it.
        let base_now = f.section_by_name(".stapsdt.base").map(|s| s.address());
        let mut out = Vec::new();
        for section in f.elf_section_table().iter() {
            let Some(mut notes) = section
                .notes(endian, self.data.as_slice())
                .map_err(|e| self.bad(format!("bad note section ({e})")))?
            else {
                continue;
            };
            while let Some(note) = notes
                .next()
                .map_err(|e| self.bad(format!("bad note ({e})")))?
            {
                // NT_STAPSDT = 3, owner "stapsdt".
                if note.name() != b"stapsdt" || note.n_type(endian) != 3 {
                    continue;
                }
                out.push(
                    parse_stapsdt(note.desc(), base_now)
                        .ok_or_else(|| self.bad("a truncated .note.stapsdt entry"))?,
                );
            }
        }
        Ok(out)
    }
}

/// The identifier a mangled name must contain to demangle to `spec`: the
/// last `::` component of the name before its parameters, without template
/// arguments or a destructor's `~` (the Itanium ABI spells every source name
/// as `<length><identifier>`; a constructor or destructor repeats its class
/// name). `None` when that is not a plain identifier (operators, lambdas):
/// then every name is demangled.
fn mangled_identifier(spec: &str) -> Option<&str> {
    let mut depth = 0i32;
    let mut end = spec.len();
    let mut start = 0;
    for (i, c) in spec.char_indices() {
        match c {
            '<' => {
                if depth == 0 {
                    end = i;
                }
                depth += 1
            }
            '>' => depth -= 1,
            '(' if depth == 0 => {
                end = end.min(i);
                break;
            }
            ':' if depth == 0 && spec[i..].starts_with("::") => {
                start = i + 2;
                end = spec.len();
            }
            _ => {}
        }
    }
    let id = spec.get(start..end)?.trim_start_matches('~');
    let plain = !id.is_empty()
        && id.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !id.starts_with("operator");
    plain.then_some(id)
}

/// Parses one stapsdt note's descriptor: pc, base, semaphore (u64 each),
/// then NUL-terminated provider, name and argument string.
fn parse_stapsdt(desc: &[u8], base_now: Option<u64>) -> Option<UsdtNote> {
    let u64_at = |i: usize| {
        desc.get(i..i + 8)
            .map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes")))
    };
    let (mut pc, base, mut semaphore) = (u64_at(0)?, u64_at(8)?, u64_at(16)?);
    let mut strings = desc
        .get(24..)?
        .split(|&b| b == 0)
        .map(|s| String::from_utf8_lossy(s).into_owned());
    let (provider, name, args) = (
        strings.next()?,
        strings.next()?,
        strings.next().unwrap_or_default(),
    );
    if let Some(now) = base_now.filter(|_| base != 0) {
        let delta = now.wrapping_sub(base);
        pc = pc.wrapping_add(delta);
        if semaphore != 0 {
            semaphore = semaphore.wrapping_add(delta);
        }
    }
    Some(UsdtNote {
        provider,
        name,
        pc,
        semaphore,
        args: args.split_whitespace().map(str::to_string).collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stapsdt_descriptor_with_prelink_delta() {
        let mut d = Vec::new();
        for v in [0x1000u64, 0x2000, 0x3000] {
            d.extend_from_slice(&v.to_le_bytes());
        }
        d.extend_from_slice(b"prov\0probe\0-4@%eax 8@-8(%rbp)\0");
        let n = parse_stapsdt(&d, Some(0x2010)).unwrap();
        assert_eq!((n.pc, n.semaphore), (0x1010, 0x3010));
        assert_eq!((n.provider.as_str(), n.name.as_str()), ("prov", "probe"));
        assert_eq!(n.args, vec!["-4@%eax", "8@-8(%rbp)"]);
        assert!(parse_stapsdt(&d[..20], None).is_none());
    }

    #[test]
    fn demangled_names_match_with_and_without_parameters() {
        let s = Symbol {
            name: "_Z16dispatch_command19enum_server_commandP3THDPcjb".into(),
            demangled: None,
            address: 1,
        };
        let s = Symbol {
            demangled: cpp_demangle::Symbol::new(s.name.as_bytes())
                .ok()
                .and_then(|d| d.demangle().ok()),
            ..s
        };
        assert!(s.is_named("dispatch_command"));
        assert!(
            s.is_named("dispatch_command(enum_server_command, THD*, char*, unsigned int, bool)")
        );
        assert!(!s.is_named("dispatch"));
    }

    #[test]
    fn the_identifier_a_mangled_name_spells() {
        assert_eq!(
            mangled_identifier("dispatch_command"),
            Some("dispatch_command")
        );
        assert_eq!(
            mangled_identifier(
                "dispatch_command(enum_server_command, THD*, char*, unsigned int, bool)"
            ),
            Some("dispatch_command")
        );
        assert_eq!(
            mangled_identifier("THD::raise_condition(Sql_condition const*)"),
            Some("raise_condition")
        );
        assert_eq!(
            mangled_identifier("std::vector<int, std::allocator<int> >::push_back(int const&)"),
            Some("push_back")
        );
        assert_eq!(
            mangled_identifier("ns::f<std::map<int, int>::iterator>"),
            Some("f")
        );
        assert_eq!(mangled_identifier("THD::~THD()"), Some("THD"));
        assert_eq!(mangled_identifier("Item::operator==(Item const&)"), None);
        assert_eq!(mangled_identifier("malloc"), Some("malloc"));
    }

    #[test]
    fn libc_resolves_like_the_loader() {
        let p = resolve_binary("libc").unwrap();
        assert!(
            p.file_name()
                .unwrap()
                .to_str()
                .unwrap()
                .starts_with("libc.so"),
            "{p:?}"
        );
        assert_eq!(resolve_binary("libc.so.6").unwrap(), p);
        let libc = Elf::open(&p).unwrap();
        let malloc = libc.function("malloc").unwrap();
        // A shared library's text segment: file offset and address agree modulo the page.
        assert_eq!(
            libc.file_offset(malloc.address).unwrap() % 4096,
            malloc.address % 4096
        );
        assert!(matches!(
            libc.function("no_such_function_xyz"),
            Err(CatalogError::NotInBinary { .. })
        ));
    }
    /// A stripped binary names only its exported functions; with its debug
    /// file installed at its `.gnu_debuglink` name next to it, a static
    /// function resolves to the address the unstripped build has, and
    /// without it the error says the binary is stripped. Builds a small C
    /// program with gcc, objcopy and strip (skipped without them).
    #[test]
    fn stripped_binaries_use_their_debug_file() {
        let dir = std::env::temp_dir().join(format!("ebql-debuglink-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("t.c"), "static int __attribute__((noinline)) hidden_work(int x) { return x * 3; }\nint main(int c, char **v) { return hidden_work(c); }\n").unwrap();
        let run = |args: &[&str]| {
            std::process::Command::new(args[0])
                .args(&args[1..])
                .current_dir(&dir)
                .status()
                .map(|s| s.success())
                .unwrap_or(false)
        };
        if !run(&["gcc", "-O1", "-g", "-o", "full", "t.c"]) {
            eprintln!("skipped: no gcc");
            return;
        }
        assert!(run(&["cp", "full", "prog"]));
        assert!(
            run(&["objcopy", "--only-keep-debug", "prog", "prog.debug"]),
            "objcopy"
        );
        assert!(run(&["strip", "--strip-all", "prog"]), "strip");
        assert!(
            run(&["objcopy", "--add-gnu-debuglink=prog.debug", "prog"]),
            "debuglink"
        );
        let want = Elf::open(&dir.join("full"))
            .unwrap()
            .function("hidden_work")
            .unwrap()
            .address;
        let prog = Elf::open(&dir.join("prog")).unwrap();
        assert!(prog.is_stripped().unwrap());
        assert_eq!(prog.function("hidden_work").unwrap().address, want);
        std::fs::remove_file(dir.join("prog.debug")).unwrap();
        match prog.function("hidden_work") {
            Err(CatalogError::NotInBinary { what, hint, .. }) => {
                assert!(
                    what.contains("stripped") && what.contains("prog.debug"),
                    "{what}"
                );
                assert!(hint.contains("debug symbols"), "{hint}");
            }
            other => panic!("{other:?}"),
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}
