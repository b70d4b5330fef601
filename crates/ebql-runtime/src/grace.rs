//! Waiting for probe runs in flight: an RCU grace period started from user space.
//!
//! Tracepoint BPF programs run inside `rcu_read_lock()` (`trace_call_bpf` in
//! kernel/trace/bpf_trace.c), so once a full RCU grace period has elapsed
//! after user space stored a new window generation, no probe run that read
//! the old generation is still running. Two ways to wait for one:
//!
//! 1. `membarrier(MEMBARRIER_CMD_GLOBAL)`, which is `synchronize_rcu()`
//!    (kernel/sched/membarrier.c). Refused with EINVAL on `nohz_full`
//!    kernels and ENOSYS without CONFIG_MEMBARRIER.
//! 2. Replacing the inner map of a one-slot `BPF_MAP_TYPE_ARRAY_OF_MAPS`
//!    from user space: `bpf(BPF_MAP_UPDATE_ELEM)` on a map-in-map returns
//!    only after `synchronize_rcu()` (`maybe_wait_bpf_programs` in
//!    kernel/bpf/syscall.c, there since Linux 4.20: "wait for any running
//!    non-sleepable BPF programs to complete so that userspace, when we
//!    return to it, knows that all non-sleepable programs that could be
//!    running use the new map value"). It works on every kernel eBQL runs on.
//!
//! A sleep is not used: no sleep shorter than the RCU stall timeout (21 s by
//! default) is guaranteed to cover a preempted reader.

use crate::map::{Map, MapType};
use crate::{Result, RuntimeError};
use std::sync::OnceLock;

/// Environment variable that forces a method: `membarrier`, or `map-in-map`
/// (alias `fallback`). Unset: membarrier when the kernel offers
/// MEMBARRIER_CMD_GLOBAL, else map-in-map.
pub const FORCE_GRACE_PERIOD_ENV: &str = "EBQL_FORCE_GRACE_PERIOD";

/// How [`wait_for_probes`] waits for an RCU grace period.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GracePeriodMethod {
    /// `membarrier(MEMBARRIER_CMD_GLOBAL)` (= `synchronize_rcu()`).
    Membarrier,
    /// Update of a one-slot BPF array-of-maps (the kernel runs
    /// `synchronize_rcu()` before the syscall returns).
    MapInMap,
}

impl GracePeriodMethod {
    /// Short name, as accepted by [`FORCE_GRACE_PERIOD_ENV`]: `membarrier` or `map-in-map`.
    pub fn name(self) -> &'static str {
        match self {
            GracePeriodMethod::Membarrier => "membarrier",
            GracePeriodMethod::MapInMap => "map-in-map",
        }
    }
}

impl std::fmt::Display for GracePeriodMethod {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            GracePeriodMethod::Membarrier => "membarrier(MEMBARRIER_CMD_GLOBAL)",
            GracePeriodMethod::MapInMap => "BPF array-of-maps update (synchronize_rcu in bpf())",
        })
    }
}

/// The method chosen for this process, with what it needs.
enum Waiter {
    Membarrier,
    /// The outer map and the map its slot 0 is set to on every wait.
    MapInMap { outer: Map, inner: Map },
}

const MEMBARRIER_CMD_QUERY: libc::c_int = 0;
const MEMBARRIER_CMD_GLOBAL: libc::c_int = 1;

/// Does this kernel offer MEMBARRIER_CMD_GLOBAL? (MEMBARRIER_CMD_QUERY leaves
/// it out of the mask on nohz_full kernels.)
fn membarrier_global_supported() -> bool {
    // SAFETY: membarrier takes no pointers.
    let mask = unsafe { libc::syscall(libc::SYS_membarrier, MEMBARRIER_CMD_QUERY, 0, 0) };
    mask >= 0 && mask & MEMBARRIER_CMD_GLOBAL as libc::c_long != 0
}

fn map_in_map() -> Result<Waiter> {
    let inner = Map::create("ebql_grace_in", MapType::Array, 4, 4, 1)?;
    let outer = Map::create("ebql_grace", MapType::ArrayOfMaps { inner_map_fd: inner.fd() }, 4, 4, 1)?;
    Ok(Waiter::MapInMap { outer, inner })
}

fn choose() -> std::result::Result<Waiter, String> {
    let forced = std::env::var(FORCE_GRACE_PERIOD_ENV).ok();
    let waiter = match forced.as_deref() {
        Some("membarrier") => Ok(Waiter::Membarrier),
        Some("map-in-map" | "fallback") => map_in_map(),
        Some(other) => {
            return Err(format!("{FORCE_GRACE_PERIOD_ENV}={other}: expected `membarrier` or `map-in-map` (alias `fallback`)"));
        }
        None if membarrier_global_supported() => Ok(Waiter::Membarrier),
        None => map_in_map(),
    };
    waiter.map_err(|e| format!("preparing the grace-period wait (BPF array-of-maps): {e}"))
}

fn waiter() -> Result<&'static Waiter> {
    static WAITER: OnceLock<std::result::Result<Waiter, String>> = OnceLock::new();
    WAITER.get_or_init(choose).as_ref().map_err(|e| RuntimeError::Unsupported(e.clone()))
}

/// The method this process uses (chosen at the first call, see
/// [`FORCE_GRACE_PERIOD_ENV`]). Errors: a bad value of the variable, or the
/// fallback's maps could not be created.
pub fn grace_period_method() -> Result<GracePeriodMethod> {
    Ok(match waiter()? {
        Waiter::Membarrier => GracePeriodMethod::Membarrier,
        Waiter::MapInMap { .. } => GracePeriodMethod::MapInMap,
    })
}

/// Waits until every BPF program run that started before the call has
/// finished (an RCU grace period; see the module docs). Used at window flips
/// so that a closed window's generation receives no more updates before it
/// is drained, and after detaching. Takes milliseconds; safe to call from
/// several threads at once.
pub fn wait_for_probes() -> Result<()> {
    match waiter()? {
        Waiter::Membarrier => {
            // SAFETY: membarrier takes no pointers.
            let r = unsafe { libc::syscall(libc::SYS_membarrier, MEMBARRIER_CMD_GLOBAL, 0, 0) };
            if r < 0 {
                return Err(RuntimeError::last_os("membarrier(MEMBARRIER_CMD_GLOBAL)"));
            }
            Ok(())
        }
        Waiter::MapInMap { outer, inner } => outer.update(&0u32.to_ne_bytes(), &inner.fd().to_ne_bytes()),
    }
}

/// Same as [`wait_for_probes`] (its former name, from when membarrier was the only method).
pub fn membarrier_global() -> Result<()> {
    wait_for_probes()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The fallback's maps can be created and updated repeatedly (root only;
    /// the exactness of windows with it is tested in crates/ebql/tests/faults.rs).
    #[test]
    fn map_in_map_wait_runs() {
        let Waiter::MapInMap { outer, inner } = map_in_map().expect("create array-of-maps (tests run as root)") else {
            unreachable!()
        };
        for _ in 0..3 {
            outer.update(&0u32.to_ne_bytes(), &inner.fd().to_ne_bytes()).unwrap();
        }
        let mut slot = [0u8; 4];
        // From user space a map-in-map lookup returns the inner map's id.
        assert!(outer.lookup(&0u32.to_ne_bytes(), &mut slot).unwrap());
        assert_ne!(u32::from_ne_bytes(slot), 0);
    }
}
