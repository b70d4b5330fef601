//! The tracefs-backed catalog: finding tracefs, listing and loading events.

use std::ffi::CString;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use crate::source::registry;
use crate::source::tracepoint::SKIPPED_CATEGORIES;
use crate::{CatalogError, EventKind, EventName, EventSchema};

/// Where tracefs usually is: its own mount point (Linux >= 4.1), then the
/// legacy location inside debugfs.
const TRACEFS_DIRS: [&str; 2] = ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"];
/// `TRACEFS_MAGIC` from `include/uapi/linux/magic.h`.
const TRACEFS_MAGIC: i64 = 0x7472_6163;

/// The catalog of kernel events, backed by a tracefs directory tree
/// (`<root>/events/<category>/<name>/format`).
#[derive(Clone, Debug)]
pub struct Catalog {
    root: PathBuf,
}

impl Catalog {
    /// Finds tracefs (`/sys/kernel/tracing`, then `/sys/kernel/debug/tracing`,
    /// the first with an `events/` directory), mounting tracefs at
    /// `/sys/kernel/tracing` when neither has one.
    ///
    /// Errors: [`CatalogError::Mount`] when mount(2) fails (needs root /
    /// CAP_SYS_ADMIN); [`CatalogError::NoTracefs`] when the kernel has no
    /// tracefs or event tracing.
    pub fn open() -> Result<Catalog, CatalogError> {
        let searched: Vec<PathBuf> = TRACEFS_DIRS.iter().map(PathBuf::from).collect();
        if let Some(root) = searched.iter().find(|d| d.join("events").is_dir()) {
            return Ok(Catalog::with_root(root));
        }
        let target = &searched[0];
        let no_tracefs = |hint: &str| CatalogError::NoTracefs {
            searched: searched.clone(),
            hint: hint.to_string(),
        };
        if !target.is_dir() {
            return Err(no_tracefs(
                "this kernel has no tracefs mount point (built without CONFIG_TRACING, \
                 or /sys is not mounted)",
            ));
        }
        if fs_magic(target) != Some(TRACEFS_MAGIC) {
            mount_tracefs(target)?;
        }
        let events = target.join("events");
        if events.is_dir() {
            Ok(Catalog::with_root(target))
        } else if let Err(e) = std::fs::metadata(&events).and(std::fs::read_dir(target).map(|_| ()))
        {
            // tracefs is root-only (mode 0700): without CAP_DAC_READ_SEARCH this
            // process cannot read it, but the kinds that need no tracefs
            // (BTF tracepoints, uprobes, USDT, profile, TC) still work: each
            // tracepoint lookup then fails with this error.
            if e.kind() == std::io::ErrorKind::PermissionDenied {
                return Ok(Catalog::with_root(target));
            }
            Err(CatalogError::Io {
                path: events,
                source: e,
            })
        } else {
            Err(no_tracefs(
                "tracefs is mounted but has no events/ directory \
                 (kernel built without CONFIG_EVENT_TRACING?)",
            ))
        }
    }

    /// A catalog over any directory laid out like tracefs (for tests).
    pub fn with_root(path: impl Into<PathBuf>) -> Catalog {
        Catalog { root: path.into() }
    }

    /// The tracefs root, e.g. `/sys/kernel/tracing`.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Events of every kind that can be listed. Without `glob`: all tracefs
    /// tracepoints, sorted by category then name. A glob (`*` = any run of
    /// characters, `?` = one character) that starts with a kind
    /// (`tp_btf:sched:*`, `uprobe:/usr/bin/x:*`, `usdt:/usr/bin/x:*`) lists
    /// that kind's events; any other glob keeps the tracepoints for which it
    /// matches `category:name`, the table name (`tracepoint/category/name`),
    /// or, for a glob without `:` or `/`, the name alone (`sys_enter_open*`).
    pub fn list(&self, glob: Option<&str>) -> Result<Vec<EventName>, CatalogError> {
        if let Some((kind, rest)) = glob.and_then(split_kind) {
            if kind != EventKind::Tracepoint {
                return registry::list(self, kind, Some(rest));
            }
        }
        let mut all = registry::list(self, EventKind::Tracepoint, None)?;
        if let Some(g) = glob {
            all.retain(|ev| {
                glob_match(g, &format!("{}:{}", ev.category, ev.name))
                    || glob_match(g, &ev.table_name())
                    || (!g.contains([':', '/']) && glob_match(g, &ev.name))
            });
        }
        Ok(all)
    }

    /// The schema of an event of any kind (the kind's catalog module reads it).
    ///
    /// Errors: [`CatalogError::UnknownEvent`] (with a close suggestion when
    /// there is one), [`CatalogError::BadBinary`] / [`CatalogError::NotInBinary`]
    /// for uprobe and USDT targets, [`CatalogError::Unavailable`] when kernel
    /// BTF is missing, [`CatalogError::Io`] / [`CatalogError::BadFormat`] when
    /// the description cannot be read or parsed.
    pub fn event(&self, name: &EventName) -> Result<EventSchema, CatalogError> {
        registry::schema(self, name)
    }

    pub(crate) fn event_dir(&self, category: &str, name: &str) -> PathBuf {
        self.root.join("events").join(category).join(name)
    }

    /// tracefs categories with attachable tracepoints, unsorted.
    pub(crate) fn categories(&self) -> Result<Vec<String>, CatalogError> {
        let mut c = read_dir_names(&self.root.join("events"))?;
        c.retain(|c| !SKIPPED_CATEGORIES.contains(&c.as_str()));
        Ok(c)
    }

    /// Event names of one category (directories holding a `format` file).
    pub(crate) fn names_in(&self, category: &str) -> Result<Vec<String>, CatalogError> {
        let names = read_dir_names(&self.root.join("events").join(category))?;
        Ok(names
            .into_iter()
            .filter(|n| self.event_dir(category, n).join("format").is_file())
            .collect())
    }
}

/// `<kind>:<rest>` or `<kind>/<rest>` when the first word is a kind's spelling.
fn split_kind(glob: &str) -> Option<(EventKind, &str)> {
    let i = glob.find(['/', ':'])?;
    Some((EventKind::from_prefix(&glob[..i])?, &glob[i + 1..]))
}

/// Names of the subdirectories of `dir`, unsorted.
fn read_dir_names(dir: &Path) -> Result<Vec<String>, CatalogError> {
    let io_err = |source| CatalogError::Io {
        path: dir.to_path_buf(),
        source,
    };
    let mut out = Vec::new();
    for entry in fs::read_dir(dir).map_err(io_err)? {
        let entry = entry.map_err(io_err)?;
        if entry.file_type().map_err(io_err)?.is_dir() {
            if let Some(n) = entry.file_name().to_str() {
                out.push(n.to_string());
            }
        }
    }
    Ok(out)
}

/// Filesystem magic of the mount holding `path` (statfs(2)), if readable.
fn fs_magic(path: &Path) -> Option<i64> {
    let c = CString::new(path.as_os_str().as_encoded_bytes()).ok()?;
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is a valid NUL-terminated path and `st` a writable statfs.
    let rc = unsafe { libc::statfs(c.as_ptr(), &mut st) };
    #[allow(clippy::unnecessary_cast)]
    (rc == 0).then_some(st.f_type as i64)
}

/// `mount("nodev", target, "tracefs", 0, NULL)`.
fn mount_tracefs(target: &Path) -> Result<(), CatalogError> {
    let err = |source| CatalogError::Mount {
        path: target.to_path_buf(),
        source,
    };
    let c_target = CString::new(target.as_os_str().as_encoded_bytes())
        .map_err(|e| err(io::Error::new(io::ErrorKind::InvalidInput, e)))?;
    // SAFETY: all pointers are valid NUL-terminated strings; data may be NULL.
    let rc = unsafe {
        libc::mount(
            c"nodev".as_ptr(),
            c_target.as_ptr(),
            c"tracefs".as_ptr(),
            0,
            std::ptr::null(),
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(err(io::Error::last_os_error()))
    }
}

/// Shell-style glob match of the whole `text`: `*` matches any run of
/// characters (including none), `?` exactly one; everything else literally.
pub fn glob_match(pattern: &str, text: &str) -> bool {
    let (p, t): (Vec<char>, Vec<char>) = (pattern.chars().collect(), text.chars().collect());
    let (mut pi, mut ti) = (0, 0);
    let mut star: Option<(usize, usize)> = None; // (pattern index after '*', text index)
    while ti < t.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == t[ti]) {
            pi += 1;
            ti += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some((pi + 1, ti));
            pi += 1;
        } else if let Some((sp, st)) = star {
            pi = sp;
            ti = st + 1;
            star = Some((sp, st + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == '*')
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{FieldKind, SystemAttr};

    #[test]
    fn globs() {
        assert!(glob_match("*", ""));
        assert!(glob_match(
            "syscalls:sys_enter_*",
            "syscalls:sys_enter_pread64"
        ));
        assert!(glob_match(
            "*pread*",
            "tracepoint/syscalls/sys_exit_pread64"
        ));
        assert!(glob_match("sched:sched_?witch", "sched:sched_switch"));
        assert!(glob_match("a*b*c", "axxbyyc"));
        assert!(!glob_match("a*b*c", "axxbyy"));
        assert!(!glob_match("sys_enter_*", "syscalls:sys_enter_read"));
        assert!(!glob_match("?", ""));
        assert!(glob_match("exact", "exact") && !glob_match("exact", "exactly"));
    }

    /// A throwaway tracefs-like tree under the temp dir.
    struct FakeTree(PathBuf);
    impl FakeTree {
        fn new(tag: &str, events: &[&str]) -> FakeTree {
            let root =
                std::env::temp_dir().join(format!("ebql-catalog-{tag}-{}", std::process::id()));
            let _ = fs::remove_dir_all(&root);
            for ev in events {
                let (c, n) = ev.split_once(':').unwrap();
                let dir = root.join("events").join(c).join(n);
                fs::create_dir_all(&dir).unwrap();
                let text = format!(
                    "name: {n}\nID: 1\nformat:\n\tfield:int x;\toffset:8;\tsize:4;\tsigned:1;\n"
                );
                fs::write(dir.join("format"), text).unwrap();
            }
            // A category-level file and a directory without format are ignored.
            fs::write(root.join("events/enable"), "0").unwrap();
            fs::create_dir_all(root.join("events/syscalls/not_an_event")).unwrap();
            FakeTree(root)
        }
    }
    impl Drop for FakeTree {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    const EVENTS: [&str; 6] = [
        "syscalls:sys_enter_pread64",
        "syscalls:sys_exit_pread64",
        "syscalls:sys_enter_read",
        "sched:sched_switch",
        "sched:sched_process_exec",
        "ftrace:function",
    ];

    #[test]
    fn list_fake_tree() {
        let t = FakeTree::new("list", &EVENTS);
        let cat = Catalog::with_root(&t.0);
        let all: Vec<String> = cat
            .list(None)
            .unwrap()
            .iter()
            .map(|e| e.table_name())
            .collect();
        assert_eq!(
            all,
            [
                "tracepoint/sched/sched_process_exec",
                "tracepoint/sched/sched_switch",
                "tracepoint/syscalls/sys_enter_pread64",
                "tracepoint/syscalls/sys_enter_read",
                "tracepoint/syscalls/sys_exit_pread64",
            ]
        );
        let names = |g| -> Vec<String> {
            cat.list(Some(g))
                .unwrap()
                .into_iter()
                .map(|e| e.name)
                .collect()
        };
        assert_eq!(
            names("syscalls:sys_enter_*"),
            ["sys_enter_pread64", "sys_enter_read"]
        );
        assert_eq!(
            names("tracepoint/*/*pread64"),
            ["sys_enter_pread64", "sys_exit_pread64"]
        );
        assert!(names("nothing*").is_empty());
    }

    #[test]
    fn unknown_event_suggestions() {
        let t = FakeTree::new("suggest", &EVENTS);
        let cat = Catalog::with_root(&t.0);
        let suggestion = |s: &str| match cat.event(&EventName::parse(s).unwrap()) {
            Err(CatalogError::UnknownEvent { suggestion, .. }) => suggestion,
            other => panic!("{s}: {other:?}"),
        };
        assert_eq!(
            suggestion("tp:syscalls:sys_enter_pread").as_deref(),
            Some("tracepoint/syscalls/sys_enter_pread64")
        );
        assert_eq!(
            suggestion("tp:sched:sys_enter_read").as_deref(),
            Some("tracepoint/syscalls/sys_enter_read")
        );
        assert_eq!(
            suggestion("tp:schde:sched_swich").as_deref(),
            Some("tracepoint/sched/sched_switch")
        );
        assert_eq!(suggestion("tp:net:xyzzy"), None);
        assert_eq!(suggestion("tp:ftrace:function"), None);
        assert_eq!(suggestion("tp:sched:function"), None);
        let e = cat
            .event(&EventName::parse("tp:syscalls:sys_enter_pread").unwrap())
            .unwrap_err();
        assert!(
            e.to_string()
                .contains("did you mean `tracepoint/syscalls/sys_enter_pread64`?"),
            "{e}"
        );
        let s = cat
            .event(&EventName::tracepoint("sched", "sched_switch"))
            .unwrap();
        assert_eq!(s.field("x").unwrap().kind, FieldKind::Int { signed: true });
    }

    /// Runs against the real kernel (tests run as root here: mounts tracefs
    /// when needed, so this must pass, not skip).
    #[test]
    fn live_tracefs() {
        let cat = Catalog::open().expect("open tracefs");
        assert!(cat.root().join("events").is_dir());
        let name = EventName::parse("tracepoint/syscalls/sys_enter_pread64").unwrap();
        let s = cat.event(&name).unwrap();
        let fd = s.field("fd").unwrap();
        assert_eq!((fd.offset, fd.size), (16, 8));
        let count = s.field("count").unwrap();
        assert_eq!((count.offset, count.size), (32, 8));
        assert_eq!(s.resolve("cpu"), Some(crate::Column::Attr(SystemAttr::Cpu)));
        let listed = cat.list(Some("syscalls:sys_enter_pread*")).unwrap();
        assert!(listed.contains(&name), "{listed:?}");
        assert!(cat.list(None).unwrap().len() > 100);
        for ev in cat.list(None).unwrap() {
            cat.event(&ev).unwrap_or_else(|e| panic!("{e}"));
        }
        let sw = cat
            .event(&EventName::tracepoint("sched", "sched_switch"))
            .unwrap();
        assert_eq!(
            sw.field("prev_comm").unwrap().kind,
            FieldKind::CharArray { len: 16 }
        );
        let e = cat
            .event(&EventName::tracepoint("syscalls", "sys_enter_pread"))
            .unwrap_err();
        // sys_enter_pread64 or sys_enter_preadv: both complete the name.
        assert!(
            matches!(e, CatalogError::UnknownEvent { suggestion: Some(ref s), .. }
            if s.starts_with("tracepoint/syscalls/sys_enter_pread")),
            "{e}"
        );
    }

    /// The mount path of [`Catalog::open`], exercised on a private directory
    /// so the shared /sys/kernel/tracing mount is left alone.
    #[test]
    fn mount_tracefs_on_temp_dir() {
        let dir = std::env::temp_dir().join(format!("ebql-catalog-mnt-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        assert_ne!(fs_magic(&dir), Some(TRACEFS_MAGIC));
        mount_tracefs(&dir).expect("mount tracefs (tests run as root)");
        let magic = fs_magic(&dir);
        let has_events = dir
            .join("events/syscalls/sys_enter_pread64/format")
            .is_file();
        let c = CString::new(dir.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: valid NUL-terminated path.
        assert_eq!(unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) }, 0);
        fs::remove_dir(&dir).unwrap();
        assert_eq!(magic, Some(TRACEFS_MAGIC));
        assert!(has_events);
    }
}
