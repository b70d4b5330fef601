#![warn(missing_docs)]
//! eBQL's runtime: the only crate that makes BPF syscalls (through libbpf).
//!
//! Every kernel object is owned by a Rust value that releases it on drop:
//! [`Map`], [`Program`], [`TracepointLink`] (detaching the probe), [`RingBuffer`],
//! [`StatsGuard`]. A process that dies detaches everything, since links and
//! perf events are file descriptors.

mod map;
mod prog;
mod ringbuf;
mod sys;

pub use map::{Map, MapType, MmapArray};
pub use prog::{Program, ProgStats, TracepointLink, VerifierRejection};
pub use ringbuf::RingBuffer;
pub use sys::{loaded_program_names, membarrier_global, num_possible_cpus, probe_features, Features, StatsGuard};

/// Kernel-facing failures.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// A syscall failed: what we were doing, and errno.
    #[error("{what}: {source}")]
    Sys {
        /// What we were doing, e.g. `creating BPF map ebql_groups (PercpuHash, 20480 entries)`.
        what: String,
        /// The OS error (errno).
        source: std::io::Error,
    },
    /// The verifier rejected a program we generated: an eBQL bug.
    #[error("{0}")]
    Verifier(Box<VerifierRejection>),
    /// Something the kernel does not support.
    #[error("{0}")]
    Unsupported(String),
}

impl RuntimeError {
    /// A syscall error from a negative libbpf return value (libbpf 1.0 returns -errno).
    pub(crate) fn from_ret(what: impl Into<String>, ret: i32) -> RuntimeError {
        RuntimeError::Sys { what: what.into(), source: std::io::Error::from_raw_os_error(-ret) }
    }
    pub(crate) fn last_os(what: impl Into<String>) -> RuntimeError {
        RuntimeError::Sys { what: what.into(), source: std::io::Error::last_os_error() }
    }
    /// True for EPERM/EACCES outside the verifier: the caller lacks privileges.
    pub fn is_permission(&self) -> bool {
        matches!(self, RuntimeError::Sys { source, .. } if matches!(source.raw_os_error(), Some(libc::EPERM) | Some(libc::EACCES)))
    }
}

/// Result of a runtime operation.
pub type Result<T> = std::result::Result<T, RuntimeError>;
