//! What symbolizing a process's user addresses needs, kept from when its
//! first stack was seen, so that its stacks are symbolized after it exited:
//! its executable mappings (address range, file offset, what is mapped) from
//! `/proc/<pid>/maps`, and each mapped file held open
//! (`/proc/<pid>/map_files/<range>`, else its path), so the file stays
//! readable through `/proc/self/fd/<n>` after the process is gone or the file
//! was deleted or replaced. Files are shared by every process that maps them
//! (by device and inode) and at most [`Processes::max_open`] are held; past
//! that a file is named by its path only.
//!
//! A snapshot is taken once per process id and refreshed while the process
//! lives (same start time) when an address falls outside it (a library
//! loaded later) or the process has exec'd another program since.

use std::collections::HashMap;
use std::fs::File;
use std::ops::Range;
use std::os::fd::AsRawFd;
use std::path::PathBuf;

/// What an executable mapping maps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Object {
    /// A file: index into [`Processes::file`].
    File(usize),
    /// The vDSO (the same image in every process of this kernel).
    Vdso,
    /// Memory no file backs: anonymous (`None`, e.g. JIT code) or a named
    /// region such as `[stack]`.
    Anon(Option<String>),
}

/// One executable mapping of a process.
#[derive(Debug, Clone)]
pub(super) struct Mapping {
    /// Its addresses.
    pub(super) range: Range<u64>,
    /// The file offset mapped at `range.start`.
    pub(super) offset: u64,
    /// What it maps.
    pub(super) object: Object,
}

/// A file some process mapped.
#[derive(Debug)]
pub(super) struct MappedFile {
    /// Its path as `/proc/<pid>/maps` gave it (it may end in ` (deleted)`).
    pub(super) name: String,
    /// The file, held open; `None` when it could not be opened or too many are.
    open: Option<File>,
    /// Its GNU build id in hex, read when a frame in it could not be symbolized.
    build_id: Option<Option<String>>,
}

impl MappedFile {
    /// The path the symbolizer opens: the held descriptor, else the name.
    pub(super) fn path(&self) -> PathBuf {
        match &self.open {
            Some(f) => PathBuf::from(format!("/proc/self/fd/{}", f.as_raw_fd())),
            None => PathBuf::from(&self.name),
        }
    }

    /// The file's build id in hex, if it has one (read once).
    pub(super) fn build_id(&mut self) -> Option<&str> {
        if self.build_id.is_none() {
            let id = blazesym::helper::read_elf_build_id(&self.path())
                .ok()
                .flatten()
                .map(|b| b.iter().map(|x| format!("{x:02x}")).collect());
            self.build_id = Some(id);
        }
        self.build_id.as_ref().and_then(|b| b.as_deref())
    }
}

/// What is known of a process's mappings.
#[derive(Debug)]
pub(super) enum Snapshot {
    /// Read while the process lived.
    Taken {
        /// Its start time (`/proc/<pid>/stat` field 22), to tell a reused pid.
        start_time: u64,
        /// The program it ran ([`exe_id`]), to tell an exec since (which
        /// keeps the pid and the start time).
        exe: Option<(u64, u64)>,
        /// Its executable mappings, by address.
        maps: Vec<Mapping>,
    },
    /// The process was gone (or a zombie without memory) when first looked at.
    Gone,
    /// `/proc/<pid>/maps` could not be read for another reason.
    Unreadable(String),
}

impl Snapshot {
    /// The mapping that holds `addr`.
    pub(super) fn mapping(&self, addr: u64) -> Option<&Mapping> {
        let Snapshot::Taken { maps, .. } = self else {
            return None;
        };
        let i = maps.partition_point(|m| m.range.end <= addr);
        maps.get(i).filter(|m| m.range.contains(&addr))
    }
}

/// One line of `/proc/<pid>/maps`.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct MapsLine<'a> {
    /// `start-end` as written (the name of its `map_files` entry).
    pub(super) range_text: &'a str,
    pub(super) range: Range<u64>,
    pub(super) executable: bool,
    pub(super) offset: u64,
    /// `major:minor` of the file's device.
    pub(super) dev: &'a str,
    pub(super) inode: u64,
    /// The path or region name; empty for anonymous memory.
    pub(super) path: &'a str,
}

/// Parses one line of `/proc/<pid>/maps` (the path may contain spaces).
pub(super) fn parse_maps_line(line: &str) -> Option<MapsLine<'_>> {
    let mut rest = line;
    let mut field = || {
        let t = rest.trim_start();
        let end = t.find(' ').unwrap_or(t.len());
        let (f, r) = t.split_at(end);
        rest = r;
        f
    };
    let range_text = field();
    let perms = field();
    let offset = u64::from_str_radix(field(), 16).ok()?;
    let dev = field();
    let inode = field().parse().ok()?;
    let path = rest.trim_start();
    let (start, end) = range_text.split_once('-')?;
    Some(MapsLine {
        range_text,
        range: u64::from_str_radix(start, 16).ok()?..u64::from_str_radix(end, 16).ok()?,
        executable: perms.as_bytes().get(2) == Some(&b'x'),
        offset,
        dev,
        inode,
        path,
    })
}

/// The (device, inode) of the program process `pid` runs, if it lives
/// and `/proc/<pid>/exe` can be read.
fn exe_id(pid: u32) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(format!("/proc/{pid}/exe")).ok()?;
    Some((m.dev(), m.ino()))
}

/// The start time of process `pid` (clock ticks after boot), if it lives.
fn start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Field 2 (the name) is in parentheses and may hold anything: count after the last ')'.
    let after = &stat[stat.rfind(')')? + 1..];
    after.split_ascii_whitespace().nth(19)?.parse().ok()
}

/// The snapshots of every process seen and the files they map.
#[derive(Debug, Default)]
pub(super) struct Processes {
    procs: HashMap<u32, Snapshot>,
    files: Vec<MappedFile>,
    /// Files by (device, inode), shared by all processes that map them.
    by_inode: HashMap<(String, u64), usize>,
    /// Files held open.
    open: usize,
}

impl Processes {
    /// At most this many files are held open (a quarter of the descriptor
    /// limit, at most 1024); others are read by path.
    fn max_open() -> usize {
        let mut lim = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit writes the struct we pass.
        let cur = if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } == 0 {
            lim.rlim_cur as usize
        } else {
            1024
        };
        (cur / 4).min(1024)
    }

    /// Whether process `pid` has been looked at.
    pub(super) fn seen(&self, pid: u32) -> bool {
        self.procs.contains_key(&pid)
    }

    /// The snapshot of `pid`, taken now if it is the first time.
    pub(super) fn snapshot(&mut self, pid: u32) -> &Snapshot {
        if !self.procs.contains_key(&pid) {
            let s = self.take(pid);
            self.procs.insert(pid, s);
        }
        &self.procs[&pid]
    }

    /// Reads the mappings of `pid` again if it is the process of its
    /// snapshot, still alive (e.g. it loaded a library since).
    pub(super) fn refresh(&mut self, pid: u32) {
        if let Some(Snapshot::Taken { start_time: t, .. }) = self.procs.get(&pid) {
            let t = *t;
            // The same process (not a reused pid), still alive: keep what it maps now.
            if let s @ Snapshot::Taken { start_time: t2, .. } = self.take(pid) {
                if t2 == t {
                    self.procs.insert(pid, s);
                }
            }
        }
    }

    /// Takes the snapshot of `pid` again if the process has since exec'd
    /// another program: `-c` starts its command as a fork of eBQL that
    /// execs once the probes are attached, and a sample of the fork would
    /// otherwise leave the new program's addresses read against eBQL's
    /// mappings.
    pub(super) fn follow_exec(&mut self, pid: u32) {
        if let Some(Snapshot::Taken { exe: Some(was), .. }) = self.procs.get(&pid) {
            if exe_id(pid).is_some_and(|now| now != *was) {
                self.refresh(pid);
            }
        }
    }

    /// A mapped file.
    pub(super) fn file(&mut self, i: usize) -> &mut MappedFile {
        &mut self.files[i]
    }

    fn take(&mut self, pid: u32) -> Snapshot {
        let Some(t) = start_time(pid) else {
            return Snapshot::Gone;
        };
        let exe = exe_id(pid);
        let text = match std::fs::read_to_string(format!("/proc/{pid}/maps")) {
            Ok(text) => text,
            Err(e)
                if e.raw_os_error() == Some(libc::ENOENT)
                    || e.raw_os_error() == Some(libc::ESRCH) =>
            {
                return Snapshot::Gone
            }
            Err(e) => return Snapshot::Unreadable(e.to_string()),
        };
        let mut maps = Vec::new();
        for line in text.lines().filter_map(parse_maps_line) {
            if !line.executable {
                continue;
            }
            let object = if line.inode != 0 {
                Object::File(self.file_of(pid, &line))
            } else if line.path == "[vdso]" {
                Object::Vdso
            } else {
                Object::Anon((!line.path.is_empty()).then(|| line.path.to_string()))
            };
            maps.push(Mapping {
                range: line.range,
                offset: line.offset,
                object,
            });
        }
        if maps.is_empty() {
            // A zombie's maps are empty: its memory is gone.
            return Snapshot::Gone;
        }
        maps.sort_by_key(|m| m.range.start);
        Snapshot::Taken {
            start_time: t,
            exe,
            maps,
        }
    }

    /// The file a mapping line maps, opened the first time any process maps it.
    fn file_of(&mut self, pid: u32, line: &MapsLine<'_>) -> usize {
        let key = (line.dev.to_string(), line.inode);
        if let Some(&i) = self.by_inode.get(&key) {
            return i;
        }
        let open = if self.open < Self::max_open() {
            File::open(format!("/proc/{pid}/map_files/{}", line.range_text))
                .or_else(|_| File::open(line.path))
                .ok()
        } else {
            None
        };
        self.open += usize::from(open.is_some());
        self.files.push(MappedFile {
            name: line.path.to_string(),
            open,
            build_id: None,
        });
        self.by_inode.insert(key, self.files.len() - 1);
        self.files.len() - 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_lines_parse_with_spaces_in_paths() {
        let l = parse_maps_line(
            "7f3a1c000000-7f3a1c021000 r-xp 00002000 fe:00 247026                     /tmp/a dir/x (deleted)",
        )
        .unwrap();
        assert_eq!(l.range, 0x7f3a1c000000..0x7f3a1c021000);
        assert_eq!(l.range_text, "7f3a1c000000-7f3a1c021000");
        assert!(l.executable);
        assert_eq!((l.offset, l.dev, l.inode), (0x2000, "fe:00", 247026));
        assert_eq!(l.path, "/tmp/a dir/x (deleted)");
        let anon = parse_maps_line("7ffd1000-7ffd3000 rw-p 00000000 00:00 0 ").unwrap();
        assert!(!anon.executable);
        assert_eq!((anon.inode, anon.path), (0, ""));
        assert!(parse_maps_line("garbage").is_none());
    }

    /// The names of the files `pid`'s snapshot maps.
    fn mapped_names(p: &mut Processes, pid: u32) -> Vec<String> {
        let files: Vec<usize> = match p.snapshot(pid) {
            Snapshot::Taken { maps, .. } => maps
                .iter()
                .filter_map(|m| match m.object {
                    Object::File(f) => Some(f),
                    _ => None,
                })
                .collect(),
            other => panic!("no snapshot of {pid}: {other:?}"),
        };
        files.into_iter().map(|f| p.file(f).name.clone()).collect()
    }

    /// A process snapshot taken before the process exec'd another program
    /// (as `-c`'s command is, a fork of eBQL until the probes attach) is
    /// taken again once it has: the new program's addresses are not read
    /// against the old program's mappings.
    #[test]
    fn a_snapshot_follows_the_process_through_exec() {
        use std::io::{BufRead, Write};
        let mut child = std::process::Command::new("/bin/sh")
            .args(["-c", "echo ready; read x; exec /bin/sleep 30"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let pid = child.id();
        // spawn returns once the exec began, maybe before the shell is mapped.
        let mut ready = String::new();
        std::io::BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut ready)
            .unwrap();
        assert_eq!(ready, "ready\n");
        let mut p = Processes::default();
        let runs =
            |p: &mut Processes, prog: &str| mapped_names(p, pid).iter().any(|n| n.ends_with(prog));
        assert!(
            runs(&mut p, "/dash") || runs(&mut p, "/sh"),
            "{:?}",
            mapped_names(&mut p, pid)
        );
        p.follow_exec(pid);
        assert!(!runs(&mut p, "/sleep"), "nothing to follow before the exec");
        child.stdin.take().unwrap().write_all(b"go\n").unwrap();
        let sleep = std::fs::canonicalize("/bin/sleep").unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        // The exe link changes before the exec maps the program: wait until sleep sleeps.
        let asleep = || {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            stat.rsplit_once(") ")
                .is_some_and(|(_, rest)| rest.starts_with('S'))
        };
        while std::fs::read_link(format!("/proc/{pid}/exe")).ok() != Some(sleep.clone())
            || !asleep()
        {
            assert!(
                std::time::Instant::now() < deadline,
                "the shell did not exec sleep"
            );
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        p.follow_exec(pid);
        let names = mapped_names(&mut p, pid);
        let _ = child.kill();
        let _ = child.wait();
        assert!(names.iter().any(|n| n.ends_with("/sleep")), "{names:?}");
        assert!(!names.iter().any(|n| n.ends_with("/dash")), "{names:?}");
    }

    /// This process's own snapshot: its code is in a file mapping held
    /// open, the vDSO is known, and a pid that does not exist is gone.
    #[test]
    fn own_process_snapshot_holds_its_code() {
        let mut p = Processes::default();
        let here = own_process_snapshot_holds_its_code as *const () as usize as u64;
        let pid = std::process::id();
        let m = p
            .snapshot(pid)
            .mapping(here)
            .cloned()
            .expect("our code is mapped");
        let Object::File(f) = m.object else {
            panic!("{m:?}")
        };
        assert!(p.file(f).path().starts_with("/proc/self/fd/"));
        assert!(matches!(p.snapshot(u32::MAX - 1), Snapshot::Gone));
    }
}
