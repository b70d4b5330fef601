//! Small syscalls: bpf_stats, CPU count, feature probes, object lookups by id.

use crate::{Result, RuntimeError};
use std::os::fd::{FromRawFd, OwnedFd};

/// Number of possible CPUs: the stride of per-CPU map values.
pub fn num_possible_cpus() -> Result<usize> {
    // SAFETY: no arguments.
    let n = unsafe { libbpf_sys::libbpf_num_possible_cpus() };
    if n <= 0 {
        return Err(RuntimeError::from_ret("counting possible CPUs", n));
    }
    Ok(n as usize)
}

/// Keeps BPF run-time statistics (run_cnt, run_time_ns per program) enabled
/// while alive (BPF_ENABLE_STATS; stats cost ~20 ns per run, so they are
/// opt-in where the caller does not need them).
pub struct StatsGuard {
    _fd: OwnedFd,
}

impl StatsGuard {
    /// Turns run-time stats on (BPF_ENABLE_STATS, BPF_STATS_RUN_TIME); EPERM
    /// without CAP_SYS_ADMIN (kernel/bpf/syscall.c).
    pub fn enable() -> Result<StatsGuard> {
        // SAFETY: plain syscall wrapper.
        let fd = unsafe { libbpf_sys::bpf_enable_stats(libbpf_sys::BPF_STATS_RUN_TIME) };
        if fd < 0 {
            return Err(RuntimeError::from_ret(
                "enabling bpf_stats (BPF_ENABLE_STATS)",
                fd,
            ));
        }
        // SAFETY: fd was just returned to us and is owned by nobody else.
        Ok(StatsGuard {
            _fd: unsafe { OwnedFd::from_raw_fd(fd) },
        })
    }
}

/// Whether this kernel can keep a pairing's starts in task-local storage:
/// a `BPF_MAP_TYPE_TASK_STORAGE` map can be created (Linux 5.11+; with the
/// BTF the kernel requires) *and* kernel BTF exists (`/sys/kernel/btf/vmlinux`:
/// the verifier types `bpf_get_current_task_btf`'s result with it). Decided
/// by trying, never from error text; the answer is cached for the process.
///
/// Errors: [`RuntimeError::Permission`] when this process may not create
/// maps (the answer is then unknown); other failures mean "not supported".
pub fn task_storage_supported() -> Result<bool> {
    static ANSWER: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    if let Some(&a) = ANSWER.get() {
        return Ok(a);
    }
    let answer = match crate::Map::create("ebql_probe_ts", crate::MapType::TaskStorage, 4, 8, 0) {
        Ok(_probe) => std::path::Path::new("/sys/kernel/btf/vmlinux").exists(),
        Err(e) if e.is_permission() => return Err(e),
        Err(_) => false,
    };
    Ok(*ANSWER.get_or_init(|| answer))
}

/// Names of all BPF programs loaded on the machine (BPF_PROG_GET_NEXT_ID walk),
/// e.g. to check that nothing of ours is left attached.
pub fn loaded_program_names() -> Result<Vec<String>> {
    Ok(loaded_programs()?
        .into_iter()
        .map(|(_, name)| name)
        .collect())
}

/// `(id, name)` of every BPF program loaded on the machine, ids ascending.
/// Program ids are never reused while the kernel runs, so "loaded after
/// id N" identifies programs created since N was the newest.
pub fn loaded_programs() -> Result<Vec<(u32, String)>> {
    let mut names = Vec::new();
    let mut id = 0u32;
    loop {
        // SAFETY: out-pointer to a u32.
        let r = unsafe { libbpf_sys::bpf_prog_get_next_id(id, &mut id) };
        if r == -libc::ENOENT {
            return Ok(names);
        }
        if r < 0 {
            return Err(RuntimeError::from_ret("listing BPF programs", r));
        }
        // SAFETY: plain syscall wrapper.
        let fd = unsafe { libbpf_sys::bpf_prog_get_fd_by_id(id) };
        if fd < 0 {
            continue; // unloaded meanwhile
        }
        // SAFETY: fresh fd owned by us.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let mut info = libbpf_sys::bpf_prog_info::default();
        let mut len = std::mem::size_of::<libbpf_sys::bpf_prog_info>() as u32;
        // SAFETY: sized, zeroed struct.
        let r = unsafe {
            libbpf_sys::bpf_prog_get_info_by_fd(
                std::os::fd::AsRawFd::as_raw_fd(&fd),
                &mut info,
                &mut len,
            )
        };
        if r == 0 {
            let name: Vec<u8> = info
                .name
                .iter()
                .take_while(|&&c| c != 0)
                .map(|&c| c as u8)
                .collect();
            names.push((id, String::from_utf8_lossy(&name).into_owned()));
        }
    }
}

/// Kinds of BPF objects the kernel numbers with ids (as `bpftool prog|map|link show id N`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BpfObject {
    /// A loaded program (`prog_id` in /proc/PID/fdinfo).
    Program,
    /// A map (`map_id`).
    Map,
    /// A link (`link_id`).
    Link,
}

/// Whether the kernel still has the object with this id (BPF_*_GET_FD_BY_ID:
/// ENOENT means gone). Ids are allocated cyclically, so a freed id is not
/// reused soon. Errors: other failures, e.g. EPERM without CAP_SYS_ADMIN.
pub fn bpf_object_exists(kind: BpfObject, id: u32) -> Result<bool> {
    // SAFETY: plain syscall wrappers.
    let fd = unsafe {
        match kind {
            BpfObject::Program => libbpf_sys::bpf_prog_get_fd_by_id(id),
            BpfObject::Map => libbpf_sys::bpf_map_get_fd_by_id(id),
            BpfObject::Link => libbpf_sys::bpf_link_get_fd_by_id(id),
        }
    };
    if fd == -libc::ENOENT {
        return Ok(false);
    }
    if fd < 0 {
        return Err(RuntimeError::from_ret(
            format!("looking up BPF {kind:?} id {id}"),
            fd,
        ));
    }
    // SAFETY: fresh fd owned by us; closing it is all we do with it.
    drop(unsafe { OwnedFd::from_raw_fd(fd) });
    Ok(true)
}

/// run_cnt / run_time_ns / recursion_misses of the program with this id
/// (BPF_PROG_GET_FD_BY_ID + BPF_OBJ_GET_INFO_BY_FD), e.g. per program of a
/// running query. run_time_ns only grows while bpf_stats is on ([`StatsGuard`]).
pub fn prog_stats_by_id(id: u32) -> Result<crate::ProgStats> {
    // SAFETY: plain syscall wrapper.
    let fd = unsafe { libbpf_sys::bpf_prog_get_fd_by_id(id) };
    if fd < 0 {
        return Err(RuntimeError::from_ret(
            format!("opening BPF program id {id}"),
            fd,
        ));
    }
    // SAFETY: fresh fd owned by us.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let mut info = libbpf_sys::bpf_prog_info::default();
    let mut len = std::mem::size_of::<libbpf_sys::bpf_prog_info>() as u32;
    // SAFETY: sized, zeroed struct.
    let r = unsafe {
        libbpf_sys::bpf_prog_get_info_by_fd(
            std::os::fd::AsRawFd::as_raw_fd(&fd),
            &mut info,
            &mut len,
        )
    };
    if r < 0 {
        return Err(RuntimeError::from_ret(
            format!("reading BPF program id {id}"),
            r,
        ));
    }
    Ok(crate::ProgStats {
        run_cnt: info.run_cnt,
        run_time_ns: info.run_time_ns,
        recursion_misses: info.recursion_misses,
    })
}
