//! Sampling the machine's system-call rates before planning: the input of
//! the automatic hook choice for syscall tracepoints
//! ([`ebql_compiler::choose::choose_hook`]).
//!
//! One program on `raw_syscalls:sys_enter` ([`ebql_compiler::syscall_hook::rate_sampler`])
//! counts calls per syscall number in a per-CPU array for a short while;
//! the counts give all calls per second and the traced calls' rate. The
//! program is ours alone (its own map), so other BPF users and other
//! queries do not change what it counts, and it is detached before the
//! query's own program is loaded.

use crate::{Error, Result};
use ebql_catalog::{EventKind, EventName};
use ebql_compiler::choose::SyscallRates;
use ebql_compiler::planner::EventSource;
use ebql_compiler::syscall_hook::SAMPLER_SLOTS;
use ebql_runtime::{AttachOptions, LoadTarget, Map, MapType, Program};
use std::time::{Duration, Instant};

/// Counts system calls by number for `duration` and returns the rate of
/// all of them and the mean rate of `traced` (syscall numbers, one per
/// syscall event of the query).
///
/// Errors: as [`count_syscalls`].
pub fn sample_syscall_rates(
    catalog: &dyn EventSource,
    traced: &[u32],
    duration: Duration,
) -> Result<SyscallRates> {
    Ok(count_syscalls(catalog, duration, || {})?.rates(traced))
}

/// System calls of the whole machine counted by number ([`SAMPLER_SLOTS`]
/// counters; the last one counts every number beyond the others).
#[derive(Clone, Debug, PartialEq)]
pub struct SyscallCounts {
    /// Calls per syscall number.
    pub per_nr: Vec<u64>,
    /// How long the counting program was attached.
    pub elapsed: Duration,
}

impl SyscallCounts {
    /// All calls per second, and the mean calls per second of `traced` (one number per syscall event).
    pub fn rates(&self, traced: &[u32]) -> SyscallRates {
        let secs = self.elapsed.as_secs_f64().max(1e-9);
        let all = self.per_nr.iter().sum::<u64>() as f64;
        let traced_calls: u64 = traced
            .iter()
            .map(|&nr| self.per_nr.get(nr as usize).copied().unwrap_or(0))
            .sum();
        let events = traced.len().max(1) as f64;
        SyscallRates {
            all_per_sec: all / secs,
            traced_per_sec: traced_calls as f64 / events / secs,
            sampled_ms: self.elapsed.as_millis() as u64,
        }
    }
}

/// Counts the machine's system calls by number while `during` runs and for
/// at least `duration` in all.
///
/// Errors: the raw syscall hook is missing from `catalog` (no kernel BTF),
/// or a bpf() call fails (loading, attaching, reading the map).
pub fn count_syscalls(
    catalog: &dyn EventSource,
    duration: Duration,
    during: impl FnOnce(),
) -> Result<SyscallCounts> {
    let hook = catalog
        .event(&EventName::new(
            EventKind::TpBtf,
            "raw_syscalls",
            "sys_enter",
        ))
        .or_else(|_| {
            catalog.event(&EventName::new(
                EventKind::RawTracepoint,
                "raw_syscalls",
                "sys_enter",
            ))
        })
        .map_err(Error::Catalog)?;
    let counts = Map::create("ebql_rates", MapType::PercpuArray, 4, 8, SAMPLER_SLOTS)?;
    let program =
        ebql_compiler::syscall_hook::rate_sampler().map_err(|e| Error::Internal(e.to_string()))?;
    let prog = Program::load(
        "ebql_rates",
        LoadTarget::of(hook.event.kind, &hook.attach),
        &program.bytes(),
        &[counts.fd()],
    )?;
    let started = Instant::now();
    let link = ebql_runtime::attach(
        &prog,
        hook.event.kind,
        &hook.attach,
        &AttachOptions::default(),
    )?;
    during();
    std::thread::sleep(duration.saturating_sub(started.elapsed()));
    drop(link);
    let elapsed = started.elapsed();
    // The link is gone: after a grace period no program run is in flight.
    ebql_runtime::wait_for_probes()?;
    let cpus = ebql_runtime::num_possible_cpus()?;
    let mut values = vec![0u8; 8 * cpus];
    let mut per_nr = vec![0u64; SAMPLER_SLOTS as usize];
    for (nr, total) in per_nr.iter_mut().enumerate() {
        if counts.lookup(&(nr as u32).to_ne_bytes(), &mut values)? {
            *total = values
                .chunks_exact(8)
                .map(|c| u64::from_ne_bytes(c.try_into().expect("8 bytes")))
                .sum();
        }
    }
    Ok(SyscallCounts { per_nr, elapsed })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_are_per_second_and_per_event() {
        let mut per_nr = vec![0u64; 512];
        per_nr[17] = 600;
        per_nr[0] = 300;
        per_nr[511] = 100;
        let r = SyscallCounts {
            per_nr,
            elapsed: Duration::from_millis(500),
        }
        .rates(&[17, 17]);
        assert_eq!(
            (r.all_per_sec, r.traced_per_sec, r.sampled_ms),
            (2000.0, 1200.0, 500)
        );
    }
}
