//! Low-level TC pieces shared by the TC attach module and the feature
//! probes (`crate::features`): interface lookup and the TCX link
//! (`bpf_link_create` with `BPF_TCX_INGRESS`/`BPF_TCX_EGRESS`, Linux 6.6+).
//! A leaf: it depends on nothing else in `attach` nor on the probes.

use std::ffi::CString;
use std::os::fd::{FromRawFd, OwnedFd};

use crate::{Program, Result, RuntimeError};

/// The index of interface `ifname` in this network namespace.
pub(crate) fn ifindex(ifname: &str) -> Result<u32> {
    let c = CString::new(ifname)
        .map_err(|_| RuntimeError::Unsupported(format!("bad interface name {ifname:?}")))?;
    // SAFETY: c is a valid NUL-terminated string.
    match unsafe { libc::if_nametoindex(c.as_ptr()) } {
        0 => Err(RuntimeError::last_os(format!("finding interface {ifname}"))),
        i => Ok(i),
    }
}

pub(crate) fn dir(egress: bool) -> &'static str {
    if egress {
        "egress"
    } else {
        "ingress"
    }
}

/// Links `prog` (SCHED_CLS) to the TCX hook of `ifindex`.
pub(crate) fn tcx_link(prog: &Program, ifindex: u32, egress: bool) -> Result<OwnedFd> {
    let ty = if egress {
        libbpf_sys::BPF_TCX_EGRESS
    } else {
        libbpf_sys::BPF_TCX_INGRESS
    };
    // SAFETY: valid program fd; NULL opts (append after the programs already attached).
    let fd =
        unsafe { libbpf_sys::bpf_link_create(prog.fd(), ifindex as i32, ty, std::ptr::null()) };
    if fd < 0 {
        return Err(RuntimeError::from_ret(
            format!(
                "attaching {} to the TCX {} hook of interface {ifindex} (bpf_link_create)",
                prog.name,
                dir(egress)
            ),
            fd,
        ));
    }
    // SAFETY: fresh fd owned by us.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}
