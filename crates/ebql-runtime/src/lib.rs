#![warn(missing_docs)]
//! eBQL's runtime: the only crate that makes BPF syscalls (through libbpf).
//!
//! Every kernel object is owned by a Rust value that releases it on drop:
//! [`Map`], [`Program`], [`attach::Link`] (detaching the probe), [`RingBuffer`],
//! [`StatsGuard`]. A process that dies detaches everything, since links and
//! perf events are file descriptors.

pub mod attach;
mod btf;
pub mod features;
mod grace;
mod kfunc;
mod map;
mod privilege;
mod prog;
mod ringbuf;
mod shared;
mod sys;

pub use attach::{attach, AttachOptions, Link};
pub use grace::{
    grace_period_method, membarrier_global, membarrier_global_supported, wait_for_probes,
    GracePeriod, GracePeriodMethod, FORCE_GRACE_PERIOD_ENV,
};
pub use kfunc::faulting_reads;
pub use map::{Map, MapType, MmapArray};
pub use prog::{LoadTarget, ProgStats, Program, VerifierRejection};
pub use ringbuf::RingBuffer;
pub use shared::{HookShare, SharedHooks, MAX_CHUNKS};
pub use sys::{
    bpf_object_exists, loaded_program_names, loaded_programs, num_possible_cpus, prog_stats_by_id,
    task_storage_supported, BpfObject, StatsGuard,
};

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
    /// The kernel refused a bpf() or perf_event_open() call for lack of
    /// privileges (EPERM/EACCES outside the verifier).
    #[error("{what}: permission denied{}", missing_text(.missing))]
    Permission {
        /// What we were doing.
        what: String,
        /// The OS error (EPERM or EACCES).
        source: std::io::Error,
        /// Needed capabilities this process lacks (`CAP_BPF`, `CAP_PERFMON`),
        /// read when the error happened; empty if it has them all.
        missing: Vec<&'static str>,
    },
    /// The verifier rejected a program we generated: an eBQL bug.
    #[error("{0}")]
    Verifier(Box<VerifierRejection>),
    /// Something the kernel does not support.
    #[error("{0}")]
    Unsupported(String),
}

fn missing_text(missing: &[&str]) -> String {
    match missing {
        [] => String::new(),
        caps => format!(" (this process lacks {})", caps.join(" and ")),
    }
}

impl RuntimeError {
    /// A syscall error from a negative libbpf return value (libbpf 1.0 returns -errno).
    pub(crate) fn from_ret(what: impl Into<String>, ret: i32) -> RuntimeError {
        Self::from_io(what.into(), std::io::Error::from_raw_os_error(-ret))
    }
    pub(crate) fn last_os(what: impl Into<String>) -> RuntimeError {
        Self::from_io(what.into(), std::io::Error::last_os_error())
    }
    /// EPERM/EACCES become [`RuntimeError::Permission`] (naming the missing
    /// capabilities), everything else [`RuntimeError::Sys`].
    fn from_io(what: String, source: std::io::Error) -> RuntimeError {
        match source.raw_os_error() {
            Some(libc::EPERM | libc::EACCES) => RuntimeError::Permission {
                what,
                source,
                missing: privilege::missing_bpf_caps(),
            },
            _ => RuntimeError::Sys { what, source },
        }
    }
    /// True when the kernel found a program too large: more than 64 maps
    /// (`MAX_USED_MAPS`) or beyond the verifier's budget (E2BIG).
    pub fn is_too_big(&self) -> bool {
        match self {
            RuntimeError::Sys { source, .. } => source.raw_os_error() == Some(libc::E2BIG),
            RuntimeError::Verifier(v) => v.errno == libc::E2BIG,
            _ => false,
        }
    }
    /// True when the caller lacks privileges ([`RuntimeError::Permission`]).
    pub fn is_permission(&self) -> bool {
        matches!(self, RuntimeError::Permission { .. })
    }
    /// What to do about this error, for people, when we can tell.
    pub fn hint(&self) -> Option<String> {
        match self {
            RuntimeError::Permission { missing, .. } if missing.is_empty() => Some(
                "this process has CAP_BPF and CAP_PERFMON (or CAP_SYS_ADMIN), yet the kernel refused: kernel lockdown \
                 (/sys/kernel/security/lockdown), an LSM policy (SELinux, AppArmor) or a seccomp filter (containers) \
                 may forbid bpf() or perf_event_open()"
                    .into(),
            ),
            RuntimeError::Permission { .. } => Some(
                "eBQL loads and attaches BPF programs, which needs CAP_BPF and CAP_PERFMON (or CAP_SYS_ADMIN): \
                 run it as root with its full capabilities; in a container, add them \
                 (e.g. `docker run --cap-add BPF --cap-add PERFMON ...`)"
                    .into(),
            ),
            _ => None,
        }
    }
}

/// Result of a runtime operation.
pub type Result<T> = std::result::Result<T, RuntimeError>;
