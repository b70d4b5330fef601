//! The calibration workload: one thread of this process making system calls
//! in a loop (`pread64` of a page-cached file, or `getppid`), counting them,
//! so the calibration can read the call rate at any moment and attach
//! programs that select this process.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

/// Bytes per `pread64`: `str(buf, n)` up to this size reads a full string
/// (the buffer holds the file's non-NUL bytes from the previous call).
pub const READ_SIZE: usize = 1024;

/// File size: `READ_SIZE`-aligned offsets over it give `FILE_BYTES / READ_SIZE` distinct positions.
pub const FILE_BYTES: usize = 1 << 20;

/// Which system call the loop makes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Call {
    /// `pread64(fd, buf, READ_SIZE, off)` on a page-cached file.
    Pread,
    /// `getppid()`: a system call no probe of the calibration selects.
    Getppid,
}

struct Shared {
    stop: AtomicBool,
    call: AtomicU8,
    calls: AtomicU64,
    tid: AtomicU64,
}

/// A thread making one kind of system call as fast as it can.
pub struct Spinner {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
    /// The loop thread's CPU-time clock (readable from any thread of the process).
    clock: libc::clockid_t,
    _file: Arc<OwnedFd>,
}

impl Spinner {
    /// Starts the loop with `call`. The file is unlinked (`O_TMPFILE` in
    /// /var/tmp or /tmp) and filled with `0x5a` bytes, so it is in the page cache.
    pub fn start(call: Call) -> std::io::Result<Spinner> {
        let dir = ["/var/tmp", "/tmp"]
            .into_iter()
            .find(|d| std::path::Path::new(d).is_dir())
            .unwrap_or("/tmp");
        let cdir = std::ffi::CString::new(dir).expect("no NUL");
        // SAFETY: open(2) with a valid path.
        let fd = unsafe {
            libc::open(
                cdir.as_ptr(),
                libc::O_TMPFILE | libc::O_RDWR | libc::O_CLOEXEC,
                0o600 as libc::c_uint,
            )
        };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: fresh descriptor owned by us.
        let file = Arc::new(unsafe { OwnedFd::from_raw_fd(fd) });
        let chunk = vec![0x5au8; FILE_BYTES];
        // SAFETY: writing our buffer to our descriptor.
        let n = unsafe {
            libc::write(
                file.as_raw_fd(),
                chunk.as_ptr() as *const libc::c_void,
                chunk.len(),
            )
        };
        if n != chunk.len() as isize {
            return Err(std::io::Error::other("could not fill the calibration file"));
        }
        let shared = Arc::new(Shared {
            stop: AtomicBool::new(false),
            call: AtomicU8::new(call as u8),
            calls: AtomicU64::new(0),
            tid: AtomicU64::new(0),
        });
        let (s, f) = (shared.clone(), file.clone());
        let thread = std::thread::Builder::new()
            .name("ebql-calibrate".into())
            .spawn(move || {
                // SAFETY: plain syscall.
                s.tid
                    .store(unsafe { libc::gettid() } as u64, Ordering::Release);
                let mut buf = vec![0u8; READ_SIZE];
                let slots = (FILE_BYTES / READ_SIZE) as u64;
                let mut k = 0u64;
                while !s.stop.load(Ordering::Relaxed) {
                    for _ in 0..64 {
                        if s.call.load(Ordering::Relaxed) == Call::Pread as u8 {
                            // Offsets walk the file with a stride coprime to its slots.
                            let off = ((k * 389) % slots) * READ_SIZE as u64;
                            // SAFETY: buf has READ_SIZE writable bytes.
                            unsafe {
                                libc::pread64(
                                    f.as_raw_fd(),
                                    buf.as_mut_ptr() as *mut libc::c_void,
                                    READ_SIZE,
                                    off as i64,
                                )
                            };
                        } else {
                            // SAFETY: plain syscall.
                            unsafe { libc::syscall(libc::SYS_getppid) };
                        }
                        k += 1;
                    }
                    s.calls.fetch_add(64, Ordering::Relaxed);
                }
            })?;
        while shared.tid.load(Ordering::Acquire) == 0 {
            std::thread::yield_now();
        }
        let mut clock: libc::clockid_t = 0;
        // SAFETY: the thread is alive (it stops only when we say so); out-pointer valid.
        let r = unsafe {
            libc::pthread_getcpuclockid(
                std::os::unix::thread::JoinHandleExt::as_pthread_t(&thread),
                &mut clock,
            )
        };
        if r != 0 {
            return Err(std::io::Error::from_raw_os_error(r));
        }
        Ok(Spinner {
            shared,
            thread: Some(thread),
            clock,
            _file: file,
        })
    }

    /// Switches the system call the loop makes.
    pub fn set_call(&self, call: Call) {
        self.shared.call.store(call as u8, Ordering::Relaxed);
    }

    /// Calls made so far (in steps of 64).
    pub fn calls(&self) -> u64 {
        self.shared.calls.load(Ordering::Relaxed)
    }

    /// The loop thread's CPU time so far (user + system), ns.
    pub fn cpu_ns(&self) -> u64 {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: valid out-pointer; the clock belongs to our live thread.
        unsafe { libc::clock_gettime(self.clock, &mut ts) };
        ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
    }

    /// CPU ns per call over `d` of wall time: the loop thread's CPU time
    /// over its calls, so time it spent preempted (a busy machine) does not count.
    pub fn ns_per_call(&self, d: std::time::Duration) -> f64 {
        let (c0, t0) = (self.calls(), self.cpu_ns());
        std::thread::sleep(d);
        let (c1, t1) = (self.calls(), self.cpu_ns());
        (t1 - t0) as f64 / (c1 - c0).max(1) as f64
    }
}

impl Drop for Spinner {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
