//! `ebql query -c CMD`: the command eBQL traces, started stopped before its
//! `exec` so that the query attaches before the command's first event, then
//! released. Its pid is known before it runs (the query is compiled with
//! `-p` semantics, [`ebql_compiler::scope::ProcessScope::Pid`]); with
//! `follow`, it first moves itself into a new cgroup v2 directory, so the
//! query sees it and every descendant ([`ProcessScope::Cgroup`]).
//!
//! The child waits in a `pre_exec` hook: it writes its pid to one pipe and
//! reads one byte from another (async-signal-safe calls only). Dropping an
//! unreleased command closes the gate: the child exits without running it.

use crate::error::{Error, Result};
use ebql_compiler::scope::ProcessScope;
use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::{Child, ExitStatus};
use std::sync::mpsc::{Receiver, TryRecvError};
use std::time::{Duration, Instant};

/// Where the cgroup v2 hierarchy is mounted: the first `cgroup2` mount
/// (`/sys/fs/cgroup`, or `/sys/fs/cgroup/unified` on hybrid systems).
fn cgroup_root() -> Result<std::path::PathBuf> {
    let mounts = std::fs::read_to_string("/proc/self/mounts").map_err(failed)?;
    mounts
        .lines()
        .find_map(|l| {
            let mut f = l.split_whitespace();
            let (_, at, kind) = (f.next()?, f.next()?, f.next()?);
            (kind == "cgroup2").then(|| std::path::PathBuf::from(at))
        })
        .ok_or_else(|| failed("no cgroup v2 hierarchy is mounted (cgroup2 in /proc/self/mounts)"))
}

/// A command started stopped before its `exec`.
pub struct GatedCommand {
    pid: u32,
    /// Write end of the gate: one byte lets the child exec, closing it ends the child.
    gate: Option<OwnedFd>,
    spawned: Option<Receiver<std::io::Result<Child>>>,
    child: Option<Child>,
    cgroup: Option<Cgroup>,
}

/// A cgroup v2 directory made for one command, removed when it is empty.
struct Cgroup {
    path: std::path::PathBuf,
    id: u64,
}

fn pipe() -> std::io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: out-pointer to two ints.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: two fresh fds we own.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

fn failed(what: impl std::fmt::Display) -> Error {
    Error::Command(what.to_string())
}

impl GatedCommand {
    /// Starts `argv` (its first word looked up in PATH) stopped before its
    /// exec. With `follow`, the child first moves into a new cgroup v2
    /// directory `ebql-*` at the hierarchy's root (removed at drop once empty).
    ///
    /// Errors: [`Error::Command`] when `argv` is empty, the cgroup cannot be
    /// made (no cgroup v2, no permission), or the fork fails.
    pub fn spawn(argv: &[String], follow: bool) -> Result<GatedCommand> {
        let (program, args) = argv
            .split_first()
            .ok_or_else(|| failed("-c: the command is empty"))?;
        let cgroup = follow.then(Cgroup::make).transpose()?;
        let procs = match &cgroup {
            Some(c) => Some(
                CString::new(c.path.join("cgroup.procs").as_os_str().as_encoded_bytes())
                    .map_err(failed)?,
            ),
            None => None,
        };
        let (pid_r, pid_w) = pipe().map_err(failed)?;
        let (gate_r, gate_w) = pipe().map_err(failed)?;
        let (pid_fd, gate_fd) = (pid_w.as_raw_fd(), gate_r.as_raw_fd());
        // The child's copies of our ends (O_CLOEXEC closes them only at its
        // exec): with the gate's write end open in the child, its read
        // would never see eBQL go away, and it would wait forever.
        let (ours_pid, ours_gate) = (pid_r.as_raw_fd(), gate_w.as_raw_fd());
        let mut cmd = std::process::Command::new(program);
        cmd.args(args);
        // SAFETY: the hook only makes async-signal-safe calls (open, write,
        // close, getpid, read) on memory prepared before the fork.
        unsafe {
            cmd.pre_exec(move || {
                libc::close(ours_pid);
                libc::close(ours_gate);
                if let Some(p) = &procs {
                    let fd = libc::open(p.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
                    if fd < 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    let written = libc::write(fd, b"0".as_ptr().cast(), 1);
                    libc::close(fd);
                    if written != 1 {
                        return Err(std::io::Error::last_os_error());
                    }
                }
                let pid = libc::getpid();
                libc::write(pid_fd, (&pid as *const libc::pid_t).cast(), 4);
                let mut byte = 0u8;
                if libc::read(gate_fd, (&mut byte as *mut u8).cast(), 1) != 1 {
                    // eBQL did not attach: the command must not run untraced.
                    return Err(std::io::Error::from_raw_os_error(libc::ECANCELED));
                }
                Ok(())
            });
        }
        let (tx, rx) = std::sync::mpsc::channel();
        // `spawn` returns once the child has exec'd: after the gate opens.
        std::thread::spawn(move || {
            let _ = tx.send(cmd.spawn());
        });
        let pid = read_pid(&pid_r, &rx, program)?;
        drop((pid_w, gate_r));
        Ok(GatedCommand {
            pid,
            gate: Some(gate_w),
            spawned: Some(rx),
            child: None,
            cgroup,
        })
    }

    /// The command's pid (in this pid namespace, the one BPF reports when
    /// eBQL runs in the initial namespace).
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// What a query tracing this command sees: the process, or its cgroup
    /// when following descendants.
    pub fn scope(&self) -> ProcessScope {
        match &self.cgroup {
            Some(c) => ProcessScope::Cgroup(c.id),
            None => ProcessScope::Pid(self.pid),
        }
    }

    /// Lets the command exec, once the query is attached.
    ///
    /// Errors: [`Error::Command`] when it could not be run (not found, not
    /// executable: the error `exec` gave).
    pub fn release(&mut self) -> Result<()> {
        let gate = self.gate.take().ok_or_else(|| failed("released twice"))?;
        // SAFETY: one byte from a live buffer to our pipe.
        let n = unsafe { libc::write(gate.as_raw_fd(), b"1".as_ptr().cast(), 1) };
        if n != 1 {
            return Err(failed(std::io::Error::last_os_error()));
        }
        drop(gate);
        let rx = self
            .spawned
            .take()
            .ok_or_else(|| failed("released twice"))?;
        match rx.recv() {
            Ok(Ok(child)) => {
                self.child = Some(child);
                Ok(())
            }
            Ok(Err(e)) => Err(failed(format!("cannot run the command: {e}"))),
            Err(_) => Err(failed("the command's launcher ended")),
        }
    }

    /// The command's exit status, once it has exited (never blocks).
    pub fn try_wait(&mut self) -> Option<ExitStatus> {
        self.child.as_mut()?.try_wait().ok().flatten()
    }
}

/// The pid the child writes before waiting at the gate, or why it never did.
fn read_pid(
    pid_r: &OwnedFd,
    spawned: &Receiver<std::io::Result<Child>>,
    program: &str,
) -> Result<u32> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let mut p = libc::pollfd {
            fd: pid_r.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        if unsafe { libc::poll(&mut p, 1, 50) } > 0 {
            let mut pid: libc::pid_t = 0;
            // SAFETY: 4 bytes into a live i32.
            let n =
                unsafe { libc::read(pid_r.as_raw_fd(), (&mut pid as *mut libc::pid_t).cast(), 4) };
            if n == 4 && pid > 0 {
                return Ok(pid as u32);
            }
        }
        match spawned.try_recv() {
            Ok(Err(e)) => return Err(failed(format!("cannot start `{program}`: {e}"))),
            Ok(Ok(_)) | Err(TryRecvError::Disconnected) => {
                return Err(failed(format!("`{program}` ran before eBQL attached")))
            }
            Err(TryRecvError::Empty) if Instant::now() > deadline => {
                return Err(failed(format!("`{program}` did not start within 10 s")))
            }
            Err(TryRecvError::Empty) => {}
        }
    }
}

impl Drop for GatedCommand {
    fn drop(&mut self) {
        // Never released: closing the gate ends the child before its exec.
        self.gate.take();
        if let Some(rx) = self.spawned.take() {
            let _ = rx.recv();
        }
        if let Some(c) = self.child.as_mut() {
            let _ = c.wait();
        }
        if let Some(c) = self.cgroup.take() {
            // Fails while a descendant still runs there: left for it.
            let _ = std::fs::remove_dir(&c.path);
        }
    }
}

impl Cgroup {
    fn make() -> Result<Cgroup> {
        use std::os::unix::fs::MetadataExt;
        let root = cgroup_root().map_err(|e| failed(format!("--follow: {e}")))?;
        let path = root.join(format!("ebql-{}-{}", std::process::id(), next_id()));
        std::fs::create_dir(&path)
            .map_err(|e| failed(format!("--follow: cannot make {}: {e}", path.display())))?;
        let id = std::fs::metadata(&path).map_err(failed)?.ino();
        Ok(Cgroup { path, id })
    }
}

fn next_id() -> u64 {
    static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    N.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// The id of the cgroup v2 directory at `path` (its inode number, what
/// `bpf_get_current_cgroup_id` gives for tasks in it): `--cgroup PATH`,
/// relative paths taken under `/sys/fs/cgroup`.
///
/// Errors: [`Error::Command`] when there is no such directory.
pub fn cgroup_id(path: &str) -> Result<u64> {
    use std::os::unix::fs::MetadataExt;
    let p = std::path::Path::new(path);
    let full = if p.is_absolute() {
        p.to_path_buf()
    } else {
        cgroup_root()?.join(p)
    };
    let meta = std::fs::metadata(&full)
        .map_err(|e| failed(format!("--cgroup {}: {e}", full.display())))?;
    if !meta.is_dir() || !full.join("cgroup.procs").exists() {
        return Err(failed(format!(
            "--cgroup {}: not a cgroup v2 directory",
            full.display()
        )));
    }
    Ok(meta.ino())
}
