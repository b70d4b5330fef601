//! Raw tracepoints (`bpf_raw_tracepoint_open(name)`) and BTF-typed tracing
//! programs (tp_btf, fentry, fexit: loaded with `attach_btf_id`, so the
//! link needs no target: `bpf_link_create(prog, 0, attach type)`).

use std::ffi::CString;
use std::os::fd::{FromRawFd, OwnedFd};

use ebql_catalog::EventKind;

use super::link::Link;
use crate::{Program, Result, RuntimeError};

/// Attaches a RAW_TRACEPOINT program to the tracepoint `name` (e.g. `sched_switch`).
pub(crate) fn attach_raw_tp(prog: &Program, name: &str) -> Result<Link> {
    let c = CString::new(name)
        .map_err(|_| RuntimeError::Unsupported(format!("raw tracepoint name {name:?}")))?;
    // SAFETY: valid NUL-terminated name and program fd.
    let fd = unsafe { libbpf_sys::bpf_raw_tracepoint_open(c.as_ptr(), prog.fd()) };
    if fd < 0 {
        return Err(RuntimeError::from_ret(
            format!(
                "attaching {} to raw tracepoint {name} (bpf_raw_tracepoint_open)",
                prog.name
            ),
            fd,
        ));
    }
    // SAFETY: fresh fd owned by us.
    Ok(Link::new(vec![unsafe { OwnedFd::from_raw_fd(fd) }], vec![]))
}

/// The attach type of a BTF-typed program of `kind`: its
/// `expected_attach_type` at load ([`crate::LoadTarget::of`]) and its
/// tracing link's type; `None` for kinds that are not BTF-typed.
pub(crate) fn attach_type(kind: EventKind) -> Option<libbpf_sys::bpf_attach_type> {
    match kind {
        EventKind::TpBtf => Some(libbpf_sys::BPF_TRACE_RAW_TP),
        EventKind::Fentry => Some(libbpf_sys::BPF_TRACE_FENTRY),
        EventKind::Fexit => Some(libbpf_sys::BPF_TRACE_FEXIT),
        _ => None,
    }
}

/// Attaches a TRACING program (its target was fixed at load by `attach_btf_id`).
pub(crate) fn attach_tracing(prog: &Program, kind: EventKind, what: &str) -> Result<Link> {
    let t = attach_type(kind).ok_or_else(|| {
        RuntimeError::Unsupported(format!("{} programs are not BTF-typed", kind.prefix()))
    })?;
    // SAFETY: valid program fd, no target, NULL opts.
    let fd = unsafe { libbpf_sys::bpf_link_create(prog.fd(), 0, t, std::ptr::null()) };
    if fd < 0 {
        return Err(RuntimeError::from_ret(
            format!(
                "attaching {} to {}:{what} (bpf_link_create)",
                prog.name,
                kind.prefix()
            ),
            fd,
        ));
    }
    // SAFETY: fresh fd owned by us.
    Ok(Link::new(vec![unsafe { OwnedFd::from_raw_fd(fd) }], vec![]))
}
