//! Workload processes for eBQL kernel tests and benchmarks.
//!
//! Two modes, both issuing `pread64` system calls that a tracer attached to
//! `tracepoint/syscalls/sys_enter_pread64` can count exactly:
//!
//! * [`run_script`]: a line-oriented command protocol on stdin/stdout, for
//!   exact tests ("do exactly N preads of S bytes on fd F").
//! * [`run_pread_loop`]: a timed micro-benchmark (threads doing random
//!   `pread64`s on a page-cached file), optionally gated on a FIFO so that
//!   the tracer can attach, knowing the pid, before the first event.
//!
//! [`wait_gate`] is the FIFO gate on its own (used by `ebql-workload
//! gate-exec` to start another program, e.g. RocksDB's `db_bench`, with a
//! pid known in advance).
//!
//! The library is free of argument parsing so that the `ebql` CLI can expose
//! it as hidden subcommands.

pub mod cli;
mod cold;
mod pread_loop;

pub use pread_loop::{run_pread_loop, FdReport, LoopReport, PreadLoop};

use std::collections::HashMap;
use std::ffi::CString;
use std::fs::File;
use std::io::{self, BufRead, Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::os::unix::io::{AsRawFd, FromRawFd, RawFd};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Environment variable naming the directory that holds the workload's
/// (unlinked) data files. Defaults to `/var/tmp`, then `/tmp`.
pub const DIR_ENV: &str = "EBQL_WORKLOAD_DIR";

/// Directory for the workload's unlinked data files: `$EBQL_WORKLOAD_DIR`,
/// else `/var/tmp`, else `/tmp`. These are normally disk-backed file systems,
/// so `pread64` goes through the regular page cache read path.
pub fn data_dir() -> PathBuf {
    if let Some(d) = std::env::var_os(DIR_ENV) {
        if !d.is_empty() {
            return PathBuf::from(d);
        }
    }
    for d in ["/var/tmp", "/tmp"] {
        if Path::new(d).is_dir() {
            return PathBuf::from(d);
        }
    }
    std::env::temp_dir()
}

fn cstring(p: &Path) -> io::Result<CString> {
    CString::new(p.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path contains a NUL byte"))
}

/// Creates an unlinked file of `bytes` bytes filled by `fill` in `dir`
/// (`O_TMPFILE` where supported, else create + unlink). The data is written
/// (not a sparse hole), so every page of it is in the page cache afterwards.
pub fn create_unlinked_file(dir: &Path, bytes: u64, fill: u8) -> io::Result<File> {
    let file = open_unlinked(dir)?;
    let chunk = vec![fill; 1 << 20];
    let mut left = bytes;
    let mut w = &file;
    while left > 0 {
        let n = left.min(chunk.len() as u64) as usize;
        w.write_all(&chunk[..n])?;
        left -= n as u64;
    }
    Ok(file)
}

fn open_unlinked(dir: &Path) -> io::Result<File> {
    let cdir = cstring(dir)?;
    // SAFETY: plain open(2) with a valid NUL-terminated path.
    let fd = unsafe {
        libc::open(
            cdir.as_ptr(),
            libc::O_TMPFILE | libc::O_RDWR | libc::O_CLOEXEC,
            0o600 as libc::c_uint,
        )
    };
    if fd >= 0 {
        // SAFETY: fd is a freshly opened, owned descriptor.
        return Ok(unsafe { File::from_raw_fd(fd) });
    }
    // Fallback for file systems without O_TMPFILE: create a unique name, unlink it.
    let pid = std::process::id();
    for i in 0..1000u32 {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0)
            ^ i.wrapping_mul(0x9E37_79B9);
        let path = dir.join(format!(".ebql-workload-{pid}-{i}-{nanos:x}"));
        match std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)
        {
            Ok(f) => {
                std::fs::remove_file(&path)?;
                return Ok(f);
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
    Err(io::Error::other("could not create a temporary file"))
}

/// Opens a second, independent open file description for `file` (through
/// `/proc/self/fd`, falling back to `dup`), read-only. Separate descriptions
/// keep threads from sharing one `struct file` reference count.
fn reopen_read_only(file: &File) -> io::Result<File> {
    let link = format!("/proc/self/fd/{}\0", file.as_raw_fd());
    // SAFETY: NUL-terminated path literal.
    let fd = unsafe {
        libc::open(
            link.as_ptr() as *const libc::c_char,
            libc::O_RDONLY | libc::O_CLOEXEC,
        )
    };
    let fd = if fd >= 0 {
        fd
    } else {
        // SAFETY: dup of a valid descriptor we own.
        let d = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 0) };
        if d < 0 {
            return Err(io::Error::last_os_error());
        }
        d
    };
    // SAFETY: fd is a freshly opened, owned descriptor.
    Ok(unsafe { File::from_raw_fd(fd) })
}

/// Moves `file` to descriptor `fd` (close-on-exec), failing if `fd` is already open.
fn move_to_fd(file: File, fd: RawFd) -> io::Result<File> {
    // SAFETY: F_GETFD only queries the descriptor table.
    if unsafe { libc::fcntl(fd, libc::F_GETFD) } >= 0 {
        return Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            format!("descriptor {fd} is already open"),
        ));
    }
    // SAFETY: dup3 onto a descriptor we just checked is free; the new fd is owned below.
    let r = unsafe { libc::dup3(file.as_raw_fd(), fd, libc::O_CLOEXEC) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: r == fd is a freshly created, owned descriptor; `file` is closed on drop.
    Ok(unsafe { File::from_raw_fd(r) })
}

/// One `pread64(fd, buf, buf.len(), offset)` system call.
#[inline]
pub fn pread64(fd: RawFd, buf: &mut [u8], offset: u64) -> io::Result<usize> {
    // SAFETY: buf is valid for buf.len() bytes of writes. On 64-bit Linux
    // libc's pread is the pread64 system call.
    let r = unsafe {
        libc::pread(
            fd,
            buf.as_mut_ptr() as *mut libc::c_void,
            buf.len(),
            offset as libc::off_t,
        )
    };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r as usize)
    }
}

fn file_len(fd: RawFd) -> u64 {
    // SAFETY: fstat into a zeroed, properly sized struct.
    unsafe {
        let mut st: libc::stat = std::mem::zeroed();
        if libc::fstat(fd, &mut st) == 0 && (st.st_mode & libc::S_IFMT) == libc::S_IFREG {
            st.st_size.max(0) as u64
        } else {
            0
        }
    }
}

/// The tracer's side of a workload gate: a FIFO the workload blocks on (see
/// [`wait_gate`]) until the tracer has attached its probe. Removed on drop.
pub struct Gate {
    path: PathBuf,
}

impl Gate {
    /// Creates a fresh FIFO at `path` (replacing a stale one).
    pub fn create(path: impl Into<PathBuf>) -> io::Result<Gate> {
        let path = path.into();
        let _ = std::fs::remove_file(&path);
        let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes())
            .map_err(io::Error::other)?;
        // SAFETY: valid NUL-terminated path.
        if unsafe { libc::mkfifo(c.as_ptr(), 0o600) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Gate { path })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Lets the workload start: writes the one byte it waits for.
    pub fn open(&self) -> io::Result<()> {
        std::fs::OpenOptions::new()
            .write(true)
            .open(&self.path)?
            .write_all(b"g")
    }
}

impl Drop for Gate {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Blocks until one byte can be read from the FIFO (or file) at `path`.
/// Opening a FIFO read-only blocks until a writer opens it.
pub fn wait_gate(path: &Path) -> io::Result<()> {
    let mut f = File::open(path)?;
    let mut b = [0u8; 1];
    loop {
        match f.read(&mut b) {
            Ok(1) => return Ok(()),
            Ok(_) => {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    format!("gate {} closed without a byte", path.display()),
                ))
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
    }
}

// ---------------------------------------------------------------------------
// Scripted mode
// ---------------------------------------------------------------------------

struct ScriptFile {
    file: Option<File>,
    len: u64,
    cursor: u64,
}

extern "C" fn resume_handler(_: libc::c_int) {}

/// A busy loop of `iterations` rounds of integer arithmetic with no calls,
/// never inlined, under a name a CPU profile can look for. Returns a value
/// derived from every round so the loop cannot be optimized away.
#[inline(never)]
#[no_mangle]
pub extern "C" fn ebql_workload_spin(iterations: u64) -> u64 {
    // Plain operators only: unoptimized builds turn even `wrapping_mul` or
    // iterator steps into calls, and a sample in a callee would show it as
    // the leaf instead of this function.
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut i: u64 = 0;
    while i < iterations {
        x = (x ^ i) ^ (x >> 3) ^ (x << 5);
        i += 1;
    }
    x
}

/// Runs [`ebql_workload_spin`] in a thread named `ebql_spin`, waits for it; returns its tid.
fn spin_thread(iterations: u64) -> io::Result<u32> {
    let t = std::thread::Builder::new()
        .name("ebql_spin".into())
        .spawn(move || {
            // SAFETY: gettid has no preconditions.
            let tid = unsafe { libc::gettid() } as u32;
            std::hint::black_box(ebql_workload_spin(iterations));
            tid
        })?;
    t.join()
        .map_err(|_| io::Error::other("the spin thread panicked"))
}

/// `openat <path> <n>`: `n` openat calls on `path`, each opened file closed again.
/// The bytes of a path word of the script: `\xHH` (two hex digits) is the
/// byte HH, `\\` one backslash, any other character itself, so a script
/// line (text) can name a file whose name is not UTF-8 (`x-\x80`).
fn script_path(word: &str) -> Vec<u8> {
    let b = word.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = b
            .get(i + 2..i + 4)
            .filter(|h| h.iter().all(u8::is_ascii_hexdigit))
            .and_then(|h| u8::from_str_radix(std::str::from_utf8(h).ok()?, 16).ok());
        match (b[i], b.get(i + 1), hex) {
            (b'\\', Some(b'x'), Some(byte)) => {
                out.push(byte);
                i += 4;
            }
            (b'\\', Some(b'\\'), _) => {
                out.push(b'\\');
                i += 2;
            }
            (c, _, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    out
}

fn script_openat(path: &str, n: u64) -> String {
    let Ok(c) = CString::new(script_path(path)) else {
        return format!("err bad path: {path}");
    };
    for _ in 0..n {
        // SAFETY: openat(2) with a valid NUL-terminated path; the fd is closed right away.
        let fd =
            unsafe { libc::openat(libc::AT_FDCWD, c.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
        if fd >= 0 {
            // SAFETY: fd was just opened by us.
            unsafe { libc::close(fd) };
        } else {
            let e = io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::ENOENT) {
                return format!("err openat {path}: {e}");
            }
        }
    }
    format!("ok {n}")
}

/// `readwrite <n>`: `n` 1-byte reads of /dev/zero, then `n` 1-byte writes to /dev/null.
fn script_readwrite(n: u64) -> io::Result<String> {
    let mut zero = File::open("/dev/zero")?;
    let mut null = std::fs::OpenOptions::new().write(true).open("/dev/null")?;
    let mut byte = [0u8; 1];
    for _ in 0..n {
        zero.read_exact(&mut byte)?;
    }
    for _ in 0..n {
        null.write_all(&byte)?;
    }
    Ok(format!("ok {n}"))
}

/// `spawn <program> <n>`: `n` children running `program`, one after the other.
fn script_spawn(program: &str, n: u64) -> io::Result<String> {
    let mut pids = Vec::new();
    for _ in 0..n {
        let mut child = std::process::Command::new(program)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .spawn()?;
        pids.push(child.id().to_string());
        child.wait()?;
    }
    Ok(format!("ok spawn {}", pids.join(" ")))
}

/// `pagecache <pages>`: a new unlinked file written one page per call.
fn script_pagecache(pages: u64) -> io::Result<String> {
    const PAGE: usize = 4096;
    let file = open_unlinked(&data_dir())?;
    let buf = vec![0x5au8; PAGE];
    for i in 0..pages {
        // SAFETY: pwrite64 from a live buffer of PAGE bytes.
        let r = unsafe {
            libc::pwrite64(
                file.as_raw_fd(),
                buf.as_ptr().cast(),
                PAGE,
                (i * PAGE as u64) as i64,
            )
        };
        if r != PAGE as isize {
            return Err(io::Error::last_os_error());
        }
    }
    let ino = file.metadata()?.ino();
    Ok(format!("ok pagecache {pages} ino {ino}"))
}

/// Scripted mode for exact tests: reads commands line by line from `input`,
/// answers each on `output` with one line, and flushes after every answer.
///
/// Before reading the first command it prints `ready <pid>`.
///
/// | command | effect | answer |
/// |---|---|---|
/// | `open <path>` | opens the file read-only | `fd <n>` |
/// | `tmpfile <bytes>` | creates an unlinked, zero-filled temp file of that size | `fd <n>` |
/// | `tmpfile <bytes> <fd>` | the same, placed at descriptor `<fd>` (which must be free), so tests see the same fd numbers on every run | `fd <fd>` |
/// | `pread <fd> <size> <count>` | exactly `<count>` `pread64(fd, buf, size, offset)` calls; the offset advances by `size` and wraps so reads stay within the file (offset 0 if the file is smaller than `size`) | `ok <count>` (or `err ...` if a call failed; all `<count>` calls are still made) |
/// | `preadpos <fd> <first> <n> <reps>` | `<reps>` rounds of `n` 1-byte `pread64` calls at offsets `first`, `first+1`, … `first+n-1` (offsets past the end read 0 bytes): `pos` takes exactly `n` distinct values, each `reps` times | `ok <n*reps>` (or `err ...`; all calls are still made) |
/// | `cpu <n>` | pins the thread to CPU `n` (`sched_setaffinity`), so a test can hit one group from two CPUs | `ok cpu` |
/// | `close <fd>` | closes a descriptor opened by `open`/`tmpfile` | `ok` |
/// | `socket <size> <n>` | over a new Unix stream socket pair, exactly `<n>` `send(2)`s of `<size>` bytes (byte `j` is `j % 256`: NULs and all), each taken by one `recv(2)` into a 4,096-byte buffer (`recvfrom`/`sendto` system calls; a `<size>` of 0 is sent and not received); `<size>` at most 4,096 | `ok <n>` (or `err …`) |
/// | `lseek <fd> <offset> <n>` | exactly `<n>` `lseek(fd, offset, SEEK_END)` calls; `<offset>` may be negative (the syscall's `unsigned long` argument then holds its two's complement) | `ok <n>` (or `err …`; all calls are still made) |
/// | `pause <ms>` | sleeps that many milliseconds | `ok pause` |
/// | `comm <name>` | renames the thread (`prctl(PR_SET_NAME)`; the kernel keeps 15 bytes), so `comm` and sched_switch's `prev_comm` change; `<name>` spells bytes as `openat`'s path does | `ok comm` |
/// | `pause` | answers first, then idles (no system calls) until SIGUSR1 arrives, then reads the next command | `paused` |
/// | `nanosleep <ns> <n>` | exactly `<n>` `clock_nanosleep(CLOCK_MONOTONIC, 0, <ns>)` system calls, one after the other | `ok <n>` |
/// | `nosys <nr> <n>` | exactly `<n>` `syscall(<nr>)` calls of a number no kernel implements (below 0 or from 1024), each refused with `ENOSYS`: events of `raw_syscalls:sys_enter` with that `id` | `ok <n>` |
/// | `sleeper <ms>` | starts a thread that makes one `clock_nanosleep` of `<ms>` ms; answers once that thread is inside the system call (so a probe attached after the answer sees only its exit) | `ok sleeper <tid>` |
/// | `join` | waits for every `sleeper` thread to return | `ok join <n>` (threads joined) |
/// | `spin <iterations>` | runs [`ebql_workload_spin`] for that many loop iterations in a new thread named `ebql_spin` (no calls inside the loop, so every CPU sample of that thread lands in the function) and waits for it | `ok spin <tid>` |
/// | `openat <path> <n>` | exactly `<n>` `openat(AT_FDCWD, path, O_RDONLY)` system calls (each opened file is closed again; a missing file still makes the call); in `<path>`, `\xHH` is the byte HH and `\\` a backslash, so a name need not be UTF-8 | `ok <n>` (or `err …` if a call failed for another reason than ENOENT) |
/// | `openat-cold <path> <n>` | exactly `<n>` `openat` calls of `<path>` (spelled as for `openat`), each from a fresh mapping of a page never touched by this process, so a probe's non-faulting read of the path fails at the call's entry (the call itself faults it in) | `ok <n>` (or `err …`) |
/// | `readwrite <n>` | exactly `<n>` 1-byte `read(2)` calls on `/dev/zero`, then `<n>` 1-byte `write(2)` calls on `/dev/null` | `ok <n>` |
/// | `spawn <program> <n>` | runs `<program>` (no arguments) `<n>` times, one after the other, each a fork and an exec of this process | `ok spawn <pid> …` (the children's pids, in order) |
/// | `pagecache <pages>` | creates an unlinked file in the data directory and writes it one 4 KiB page per `pwrite64` call, so exactly `<pages>` pages of that file are added to the page cache by this thread | `ok pagecache <pages> ino <inode>` |
/// | `exit` | stops | `bye` |
///
/// Unknown or malformed commands answer `err <reason>` and the script goes
/// on; blank lines and lines starting with `#` are ignored without an
/// answer. End of input ends the script like `exit` (without an answer).
pub fn run_script(input: impl BufRead, mut output: impl Write) -> io::Result<()> {
    writeln!(output, "ready {}", std::process::id())?;
    output.flush()?;
    let mut files: HashMap<RawFd, ScriptFile> = HashMap::new();
    let mut buf: Vec<u8> = Vec::new();
    let mut sleepers: Vec<std::thread::JoinHandle<()>> = Vec::new();
    for line in input.lines() {
        let line = line?;
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let words: Vec<&str> = line.split_whitespace().collect();
        let answer = match words.as_slice() {
            ["open", path] => match File::open(path) {
                Ok(f) => {
                    let fd = f.as_raw_fd();
                    let len = file_len(fd);
                    files.insert(
                        fd,
                        ScriptFile {
                            file: Some(f),
                            len,
                            cursor: 0,
                        },
                    );
                    format!("fd {fd}")
                }
                Err(e) => format!("err open {path}: {e}"),
            },
            ["tmpfile", bytes, ..] if words.len() <= 3 => match (
                bytes.parse::<u64>(),
                words.get(2).map(|w| w.parse::<RawFd>()).transpose(),
            ) {
                (Ok(_), Err(_)) => format!("err bad fd: {}", words[2]),
                (Ok(n), Ok(at)) => {
                    match create_unlinked_file(&data_dir(), n, 0).and_then(|f| match at {
                        Some(fd) => move_to_fd(f, fd),
                        None => Ok(f),
                    }) {
                        Ok(f) => {
                            let fd = f.as_raw_fd();
                            files.insert(
                                fd,
                                ScriptFile {
                                    file: Some(f),
                                    len: n,
                                    cursor: 0,
                                },
                            );
                            format!("fd {fd}")
                        }
                        Err(e) => format!("err tmpfile: {e}"),
                    }
                }
                (Err(_), _) => format!("err bad size: {bytes}"),
            },
            ["pread", fd, size, count] => {
                match (
                    fd.parse::<RawFd>(),
                    size.parse::<usize>(),
                    count.parse::<u64>(),
                ) {
                    (Ok(fd), Ok(size), Ok(count)) => {
                        let entry = files.entry(fd).or_insert_with(|| ScriptFile {
                            file: None,
                            len: file_len(fd),
                            cursor: 0,
                        });
                        if buf.len() < size {
                            buf.resize(size, 0);
                        }
                        let mut first_err: Option<io::Error> = None;
                        let mut errors = 0u64;
                        for _ in 0..count {
                            let off = if entry.len < size as u64 || size == 0 {
                                0
                            } else {
                                if entry.cursor + size as u64 > entry.len {
                                    entry.cursor = 0;
                                }
                                let o = entry.cursor;
                                entry.cursor += size as u64;
                                o
                            };
                            if let Err(e) = pread64(fd, &mut buf[..size], off) {
                                errors += 1;
                                first_err.get_or_insert(e);
                            }
                        }
                        match first_err {
                            None => format!("ok {count}"),
                            Some(e) => format!("err pread: {e} ({errors} of {count} calls failed)"),
                        }
                    }
                    _ => format!("err bad pread arguments: {line}"),
                }
            }
            ["preadpos", fd, first, n, reps] => match (
                fd.parse::<RawFd>(),
                first.parse::<u64>(),
                n.parse::<u64>(),
                reps.parse::<u64>(),
            ) {
                (Ok(fd), Ok(first), Ok(n), Ok(reps)) => {
                    let mut byte = [0u8; 1];
                    let mut errors = 0u64;
                    let mut first_err: Option<io::Error> = None;
                    for _ in 0..reps {
                        for off in first..first + n {
                            if let Err(e) = pread64(fd, &mut byte, off) {
                                errors += 1;
                                first_err.get_or_insert(e);
                            }
                        }
                    }
                    match first_err {
                        None => format!("ok {}", n * reps),
                        Some(e) => {
                            format!("err pread: {e} ({errors} of {} calls failed)", n * reps)
                        }
                    }
                }
                _ => format!("err bad preadpos arguments: {line}"),
            },
            ["cpu", n] => match n.parse::<usize>() {
                Ok(n) if n < libc::CPU_SETSIZE as usize => {
                    // SAFETY: a zeroed cpu_set_t is an empty set; CPU_SET writes inside it (n < CPU_SETSIZE).
                    let r = unsafe {
                        let mut set: libc::cpu_set_t = std::mem::zeroed();
                        libc::CPU_SET(n, &mut set);
                        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set)
                    };
                    if r == 0 {
                        "ok cpu".to_string()
                    } else {
                        format!("err cpu {n}: {}", io::Error::last_os_error())
                    }
                }
                _ => format!("err bad cpu: {n}"),
            },
            ["close", fd] => match fd.parse::<RawFd>() {
                Ok(fd) => match files.remove(&fd) {
                    Some(ScriptFile { file: Some(_), .. }) => "ok".to_string(),
                    _ => format!("err fd {fd} was not opened by the script"),
                },
                Err(_) => format!("err bad fd: {fd}"),
            },
            ["socket", size, n] => match (size.parse::<usize>(), n.parse::<u64>()) {
                (Ok(size), Ok(n)) if size <= 4096 => match socket_round_trips(size, n) {
                    Ok(()) => format!("ok {n}"),
                    Err(e) => format!("err socket: {e}"),
                },
                _ => format!("err bad socket arguments: {size} {n}"),
            },
            ["lseek", fd, offset, n] => {
                match (fd.parse::<RawFd>(), offset.parse::<i64>(), n.parse::<u64>()) {
                    (Ok(fd), Ok(offset), Ok(n)) => {
                        let mut failed = None;
                        for _ in 0..n {
                            // SAFETY: lseek on a descriptor number; a bad one fails with EBADF.
                            if unsafe { libc::lseek(fd, offset, libc::SEEK_END) } < 0 {
                                failed = Some(std::io::Error::last_os_error());
                            }
                        }
                        match failed {
                            None => format!("ok {n}"),
                            Some(e) => format!("err lseek: {e}"),
                        }
                    }
                    _ => format!("err bad lseek arguments: {fd} {offset} {n}"),
                }
            }
            ["pause", ms] => match ms.parse::<u64>() {
                Ok(ms) => {
                    std::thread::sleep(Duration::from_millis(ms));
                    "ok pause".to_string()
                }
                Err(_) => format!("err bad pause duration: {ms}"),
            },
            ["comm", name] => match CString::new(script_path(name)) {
                // SAFETY: PR_SET_NAME reads a NUL-terminated string (the kernel copies at most 16 bytes).
                Ok(c) if unsafe { libc::prctl(libc::PR_SET_NAME, c.as_ptr()) } == 0 => {
                    "ok comm".to_string()
                }
                Ok(_) => format!("err comm: {}", io::Error::last_os_error()),
                Err(_) => format!("err comm {name}: a NUL byte"),
            },
            ["pause"] => {
                writeln!(output, "paused")?;
                output.flush()?;
                // SAFETY: installs a no-op handler so that SIGUSR1 interrupts pause().
                unsafe {
                    let mut sa: libc::sigaction = std::mem::zeroed();
                    sa.sa_sigaction = resume_handler as *const () as usize;
                    libc::sigemptyset(&mut sa.sa_mask);
                    libc::sigaction(libc::SIGUSR1, &sa, std::ptr::null_mut());
                    libc::pause();
                }
                continue;
            }
            ["nanosleep", ns, n] => match (ns.parse::<u64>(), n.parse::<u64>()) {
                (Ok(ns), Ok(n)) => {
                    let failed = (0..n).filter(|_| clock_nanosleep_ns(ns).is_err()).count();
                    if failed == 0 {
                        format!("ok {n}")
                    } else {
                        format!("err nanosleep: {failed} of {n} calls failed")
                    }
                }
                _ => format!("err bad nanosleep arguments: {line}"),
            },
            ["sleeper", ms] => match ms.parse::<u64>() {
                Ok(ms) => match start_sleeper(ms * 1_000_000) {
                    Ok((tid, handle)) => {
                        sleepers.push(handle);
                        format!("ok sleeper {tid}")
                    }
                    Err(e) => format!("err sleeper: {e}"),
                },
                Err(_) => format!("err bad sleeper duration: {ms}"),
            },
            ["join"] => {
                let n = sleepers.len();
                for t in sleepers.drain(..) {
                    let _ = t.join();
                }
                format!("ok join {n}")
            }
            ["spin", n] => match n.parse::<u64>() {
                Ok(n) => match spin_thread(n) {
                    Ok(tid) => format!("ok spin {tid}"),
                    Err(e) => format!("err spin: {e}"),
                },
                Err(_) => format!("err bad spin iteration count: {n}"),
            },
            ["nosys", nr, n] => match (nr.parse::<libc::c_long>(), n.parse::<u64>()) {
                // Only numbers no x86-64 kernel implements: the calls do nothing but enter and leave.
                (Ok(nr), Ok(n)) if !(0..1024).contains(&nr) => {
                    // SAFETY: the kernel refuses an unknown number with ENOSYS before reading any argument.
                    let refused = (0..n).filter(|_| unsafe { libc::syscall(nr) } == -1 && io::Error::last_os_error().raw_os_error() == Some(libc::ENOSYS)).count();
                    if refused as u64 == n {
                        format!("ok {n}")
                    } else {
                        format!(
                            "err nosys {nr}: {} of {n} calls were not refused with ENOSYS",
                            n - refused as u64
                        )
                    }
                }
                _ => format!(
                    "err bad nosys arguments (a number below 0 or from 1024, a count): {line}"
                ),
            },
            ["openat", path, n] => match n.parse::<u64>() {
                Ok(n) => script_openat(path, n),
                Err(_) => format!("err bad openat count: {n}"),
            },
            ["openat-cold", path, n] => match n.parse::<u64>() {
                Ok(n) => cold::openat_cold(&script_path(path), n),
                Err(_) => format!("err bad openat-cold count: {n}"),
            },
            ["readwrite", n] => match n.parse::<u64>() {
                Ok(n) => script_readwrite(n).unwrap_or_else(|e| format!("err readwrite: {e}")),
                Err(_) => format!("err bad readwrite count: {n}"),
            },
            ["spawn", program, n] => match n.parse::<u64>() {
                Ok(n) => {
                    script_spawn(program, n).unwrap_or_else(|e| format!("err spawn {program}: {e}"))
                }
                Err(_) => format!("err bad spawn count: {n}"),
            },
            ["pagecache", pages] => match pages.parse::<u64>() {
                Ok(n) => script_pagecache(n).unwrap_or_else(|e| format!("err pagecache: {e}")),
                Err(_) => format!("err bad page count: {pages}"),
            },
            ["exit"] => {
                writeln!(output, "bye")?;
                output.flush()?;
                return Ok(());
            }
            _ => format!("err unknown command: {line}"),
        };
        writeln!(output, "{answer}")?;
        output.flush()?;
    }
    Ok(())
}

/// One `clock_nanosleep(CLOCK_MONOTONIC, 0, ns)` system call (not libc's
/// wrapper loop: exactly one call, whose enter and exit tracepoints fire once).
fn clock_nanosleep_ns(ns: u64) -> io::Result<()> {
    let ts = libc::timespec {
        tv_sec: (ns / 1_000_000_000) as libc::time_t,
        tv_nsec: (ns % 1_000_000_000) as libc::c_long,
    };
    // SAFETY: `ts` is a valid timespec; no remainder is requested.
    let r = unsafe {
        libc::syscall(
            libc::SYS_clock_nanosleep,
            libc::CLOCK_MONOTONIC,
            0,
            &ts as *const libc::timespec,
            std::ptr::null_mut::<libc::timespec>(),
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Starts a thread that sleeps `ns` in one `clock_nanosleep` call; returns
/// once the kernel shows it inside that call (`/proc/self/task/<tid>/syscall`).
fn start_sleeper(ns: u64) -> io::Result<(i64, std::thread::JoinHandle<()>)> {
    let (tx, rx) = std::sync::mpsc::channel();
    let handle = std::thread::Builder::new()
        .name("sleeper".into())
        .spawn(move || {
            // SAFETY: gettid has no preconditions.
            let tid = unsafe { libc::syscall(libc::SYS_gettid) };
            let _ = tx.send(tid);
            let _ = clock_nanosleep_ns(ns);
        })?;
    let tid = rx
        .recv()
        .map_err(|_| io::Error::other("the sleeper thread died"))?;
    let path = format!("/proc/self/task/{tid}/syscall");
    let want = libc::SYS_clock_nanosleep.to_string();
    // The thread is between gettid and the sleep for microseconds; poll without sleeping
    // (a sleep of ours would be a clock_nanosleep the test counts).
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        let now = std::fs::read_to_string(&path).unwrap_or_default();
        if now.split_whitespace().next() == Some(want.as_str()) {
            return Ok((tid, handle));
        }
        if std::time::Instant::now() > deadline {
            return Err(io::Error::other(format!(
                "thread {tid} did not enter clock_nanosleep (syscall: {})",
                now.trim()
            )));
        }
        std::thread::yield_now();
    }
}

/// `n` messages of `size` bytes (byte `j` is `j % 256`) sent over a Unix
/// stream socket pair, each received by one `recv` of up to 4,096 bytes.
fn socket_round_trips(size: usize, n: u64) -> io::Result<()> {
    use std::os::unix::net::UnixStream;
    let (a, b) = UnixStream::pair()?;
    let message: Vec<u8> = (0..size).map(|j| (j % 256) as u8).collect();
    let mut buf = vec![0u8; 4096];
    for _ in 0..n {
        // SAFETY: send/recv on sockets this function owns, with buffers of the lengths given.
        let sent = unsafe { libc::send(a.as_raw_fd(), message.as_ptr().cast(), size, 0) };
        if sent != size as isize {
            return Err(io::Error::last_os_error());
        }
        if size == 0 {
            continue; // nothing to receive: a recv would wait forever
        }
        // SAFETY: as above; a stream socket pair delivers the whole message to one recv.
        let got = unsafe { libc::recv(b.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
        if got != size as isize {
            return Err(io::Error::other(format!("recv took {got} of {size} bytes")));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Cursor;

    fn script(input: &str) -> Vec<String> {
        let mut out = Vec::new();
        run_script(Cursor::new(input.as_bytes()), &mut out).unwrap();
        String::from_utf8(out)
            .unwrap()
            .lines()
            .map(str::to_string)
            .collect()
    }

    /// A path word names any bytes: `\xHH` is one byte, `\\` one backslash.
    #[test]
    fn script_paths_spell_bytes() {
        assert_eq!(script_path("/tmp/x-\\x80"), b"/tmp/x-\x80");
        assert_eq!(script_path("x-\\xEF\\xbf\\xbd"), "x-\u{fffd}".as_bytes());
        assert_eq!(script_path("x-\\\\x80"), b"x-\\x80");
        assert_eq!(script_path("a\\b\\x+8\\"), b"a\\b\\x+8\\");
    }

    /// `comm` renames the thread running the script (what `comm` and
    /// sched_switch's `prev_comm` report), truncated to 15 bytes by the kernel.
    #[test]
    fn script_comm_renames_the_thread() {
        let (lines, comm) = std::thread::spawn(|| {
            let lines = script("comm ebqlgen-a\ncomm abcdefghijklmnopq\n");
            (
                lines,
                std::fs::read_to_string("/proc/thread-self/comm").unwrap(),
            )
        })
        .join()
        .unwrap();
        assert_eq!(lines[1..], ["ok comm".to_string(), "ok comm".to_string()]);
        assert_eq!(comm.trim_end(), "abcdefghijklmno");
    }

    /// Drives `run_script` interactively over in-memory socket pairs, so the
    /// fd numbers it answers can be used in the following commands.
    #[test]
    fn script_protocol() {
        use std::io::BufReader;
        use std::os::unix::net::UnixStream;
        std::env::set_var(DIR_ENV, std::env::temp_dir());
        let (mut cmd_w, cmd_r) = UnixStream::pair().unwrap();
        let (ans_w, ans_r) = UnixStream::pair().unwrap();
        let worker = std::thread::spawn(move || run_script(BufReader::new(cmd_r), ans_w));
        let mut answers = BufReader::new(ans_r).lines();
        // "ready <pid>" comes before the first command is read.
        assert_eq!(
            answers.next().unwrap().unwrap(),
            format!("ready {}", std::process::id())
        );
        let mut ask = |cmd: &str| -> String {
            writeln!(cmd_w, "{cmd}").unwrap();
            answers.next().expect("an answer").unwrap()
        };
        let tmp_fd: i32 = ask("tmpfile 1000")
            .strip_prefix("fd ")
            .expect("fd answer")
            .parse()
            .unwrap();
        // Comments and blank lines get no answer.
        let stat = ask("# comment\n\nopen /proc/self/stat");
        let stat_fd: i32 = stat
            .strip_prefix("fd ")
            .expect("fd answer")
            .parse()
            .unwrap();
        assert!(tmp_fd > 2 && stat_fd > 2 && tmp_fd != stat_fd);
        // 20 preads of 128 bytes wrap around inside the 1000-byte file.
        assert_eq!(
            ask("tmpfile 100 777"),
            "fd 777",
            "placed at the requested descriptor"
        );
        assert!(
            ask("tmpfile 100 777").starts_with("err tmpfile:"),
            "777 is taken now"
        );
        assert!(ask("tmpfile 100 x").starts_with("err bad fd"));
        assert_eq!(ask("pread 777 10 3"), "ok 3");
        assert_eq!(ask(&format!("pread {tmp_fd} 128 20")), "ok 20");
        assert_eq!(ask(&format!("pread {stat_fd} 16 5")), "ok 5");
        assert_eq!(ask(&format!("pread {tmp_fd} 4096 2")), "ok 2"); // larger than the file: offset 0
        assert_eq!(ask("pread 1 1 0"), "ok 0");
        assert!(ask("frobnicate").starts_with("err unknown command"));
        assert!(ask("pread x y z").starts_with("err bad pread arguments"));
        assert_eq!(ask(&format!("close {tmp_fd}")), "ok");
        assert_eq!(ask("pause 1"), "ok pause");
        assert_eq!(ask("exit"), "bye");
        worker.join().unwrap().unwrap();
    }

    #[test]
    fn script_answers_in_order() {
        let lines = script("pread 0 0 0\nclose 12345\npause 0\nexit\npread 0 0 1\n");
        assert_eq!(
            lines,
            vec![
                format!("ready {}", std::process::id()),
                "ok 0".to_string(),
                "err fd 12345 was not opened by the script".to_string(),
                "ok pause".to_string(),
                "bye".to_string(),
            ]
        );
    }

    #[test]
    fn script_pread_errors_are_reported() {
        // fd 1_000_000 is not open: every call fails with EBADF but is made.
        let lines = script("pread 1000000 8 3\n");
        assert!(lines[1].starts_with("err pread:"), "{lines:?}");
        assert!(lines[1].contains("3 of 3"), "{lines:?}");
    }

    #[test]
    fn script_ends_at_eof() {
        let lines = script("");
        assert_eq!(lines.len(), 1);
        assert!(lines[0].starts_with("ready "));
    }

    #[test]
    fn pread_loop_counts() {
        std::env::set_var(DIR_ENV, std::env::temp_dir());
        let cfg = PreadLoop {
            threads: 2,
            seconds: 0.05,
            size: 64,
            file_bytes: 1 << 16,
            gate: None,
            rate: None,
        };
        let mut out = Vec::new();
        let rep = run_pread_loop(&cfg, &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(text.starts_with(&format!("ready {}\n", std::process::id())));
        assert_eq!(rep.per_fd.len(), 2);
        assert!(rep.total_ops > 0);
        assert_eq!(rep.errors, 0);
        assert_eq!(rep.total_bytes, rep.total_ops * 64);
        for r in &rep.per_fd {
            assert!(text.contains(&format!("fd {} ops {} bytes {}\n", r.fd, r.ops, r.bytes)));
        }
        assert!(text.contains(&format!("total_ops {} seconds ", rep.total_ops)));
    }
}
