//! The pread micro-workload: threads doing pread64 calls of random sizes
//! on their own descriptors for a fixed time, counting their calls (the
//! benchmarks' traced workload and `ebql demo`'s).

use crate::{create_unlinked_file, data_dir, pread64, reopen_read_only, wait_gate};
use std::io::{self, Write};
use std::os::unix::io::{AsRawFd, RawFd};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

/// Configuration of [`run_pread_loop`].
#[derive(Debug, Clone)]
pub struct PreadLoop {
    /// Worker threads; each has its own file descriptor.
    pub threads: usize,
    /// How long the threads run after the gate opens.
    pub seconds: f64,
    /// Bytes per `pread64`.
    pub size: usize,
    /// Size of the page-cached data file.
    pub file_bytes: u64,
    /// FIFO to block on (after printing `ready <pid>`) before the first event.
    pub gate: Option<PathBuf>,
    /// Calls per second per thread (paced in 1 ms steps); `None` runs flat out.
    pub rate: Option<u64>,
}

impl Default for PreadLoop {
    fn default() -> Self {
        PreadLoop {
            threads: 2,
            seconds: 5.0,
            size: 128,
            file_bytes: 16 << 20,
            gate: None,
            rate: None,
        }
    }
}

/// Operations done on one file descriptor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FdReport {
    pub fd: RawFd,
    /// Number of `pread64` calls made (successful or not).
    pub ops: u64,
    /// Bytes returned by the successful calls.
    pub bytes: u64,
}

/// Result of [`run_pread_loop`]: the exactness reference for tracers.
#[derive(Debug, Clone)]
pub struct LoopReport {
    pub pid: u32,
    pub per_fd: Vec<FdReport>,
    pub total_ops: u64,
    pub total_bytes: u64,
    pub errors: u64,
    /// Wall time from releasing the threads to joining them.
    pub seconds: f64,
    pub ops_per_sec: f64,
}

#[inline]
fn xorshift(s: &mut u64) -> u64 {
    let mut x = *s;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    *s = x;
    x
}

/// Micro-workload: an unlinked, page-cached file in [`data_dir`] and
/// `threads` threads, each with its own descriptor, doing `pread64` of `size`
/// bytes at random `size`-aligned offsets for `seconds`.
///
/// Prints `ready <pid>` once the file is prepared; if `gate` is set it then
/// blocks until one byte arrives on the FIFO, so a tracer can attach before
/// any event. At the end it prints one line per fd, `fd <n> ops <count> bytes
/// <total>`, then `total_ops <n> seconds <s> ops_per_sec <r>`.
pub fn run_pread_loop(cfg: &PreadLoop, mut out: impl Write) -> io::Result<LoopReport> {
    let invalid = |m: &str| io::Error::new(io::ErrorKind::InvalidInput, m.to_string());
    if cfg.threads == 0 {
        return Err(invalid("threads must be at least 1"));
    }
    if cfg.size == 0 || (cfg.size as u64) > cfg.file_bytes {
        return Err(invalid("size must be in 1..=file_bytes"));
    }
    if !(cfg.seconds.is_finite() && cfg.seconds >= 0.0) {
        return Err(invalid("seconds must be a non-negative number"));
    }
    let file = create_unlinked_file(&data_dir(), cfg.file_bytes, 0x5a)?;
    file.sync_data()?; // no writeback I/O during the measurement
    let mut fds = Vec::with_capacity(cfg.threads);
    for _ in 0..cfg.threads {
        fds.push(reopen_read_only(&file)?);
    }
    drop(file);
    let slots = cfg.file_bytes / cfg.size as u64;
    let pid = std::process::id();

    writeln!(out, "ready {pid}")?;
    out.flush()?;
    if let Some(gate) = &cfg.gate {
        wait_gate(gate)?;
    }

    let stop = Arc::new(AtomicBool::new(false));
    let barrier = Arc::new(Barrier::new(cfg.threads + 1));
    let mut handles = Vec::with_capacity(cfg.threads);
    for (i, f) in fds.iter().enumerate() {
        let fd = f.as_raw_fd();
        let size = cfg.size;
        let stop = Arc::clone(&stop);
        let barrier = Arc::clone(&barrier);
        let rate = cfg.rate;
        handles.push(std::thread::spawn(move || {
            let mut buf = vec![0u8; size];
            let mut seed = 0x9E37_79B9_7F4A_7C15u64 ^ ((i as u64 + 1) << 32) ^ pid as u64;
            let (mut ops, mut bytes, mut errors) = (0u64, 0u64, 0u64);
            barrier.wait();
            let started = Instant::now();
            while !stop.load(Ordering::Relaxed) {
                if let Some(rate) = rate {
                    // Pace: the calls due by now, then sleep to the next millisecond.
                    let due = (started.elapsed().as_secs_f64() * rate as f64) as u64;
                    if ops >= due {
                        std::thread::sleep(Duration::from_millis(1));
                        continue;
                    }
                }
                let off = (xorshift(&mut seed) % slots) * size as u64;
                match pread64(fd, &mut buf, off) {
                    Ok(n) => bytes += n as u64,
                    Err(_) => errors += 1,
                }
                ops += 1;
            }
            (ops, bytes, errors)
        }));
    }
    barrier.wait();
    let start = Instant::now();
    std::thread::sleep(Duration::from_secs_f64(cfg.seconds));
    stop.store(true, Ordering::Relaxed);
    let mut per_fd = Vec::with_capacity(cfg.threads);
    let mut errors = 0;
    for (h, f) in handles.into_iter().zip(&fds) {
        let (ops, bytes, errs) = h.join().map_err(|_| io::Error::other("worker panicked"))?;
        errors += errs;
        per_fd.push(FdReport {
            fd: f.as_raw_fd(),
            ops,
            bytes,
        });
    }
    let seconds = start.elapsed().as_secs_f64();
    drop(fds);
    let total_ops: u64 = per_fd.iter().map(|r| r.ops).sum();
    let total_bytes: u64 = per_fd.iter().map(|r| r.bytes).sum();
    let ops_per_sec = if seconds > 0.0 {
        total_ops as f64 / seconds
    } else {
        0.0
    };
    for r in &per_fd {
        writeln!(out, "fd {} ops {} bytes {}", r.fd, r.ops, r.bytes)?;
    }
    if errors > 0 {
        writeln!(out, "errors {errors}")?;
    }
    writeln!(
        out,
        "total_ops {total_ops} seconds {seconds:.6} ops_per_sec {ops_per_sec:.1}"
    )?;
    out.flush()?;
    Ok(LoopReport {
        pid,
        per_fd,
        total_ops,
        total_bytes,
        errors,
        seconds,
        ops_per_sec,
    })
}
