//! The traffic-control hook (`tc:<interface>:ingress|egress`).
//!
//! * **TCX** (Linux 6.6+): a link (`bpf_link_create` with
//!   `BPF_TCX_INGRESS`/`BPF_TCX_EGRESS`). Closing it (drop, Ctrl-C, the
//!   process dying) detaches the program; nothing else is created.
//! * **clsact** (older kernels, or forced with [`FORCE_CLSACT_ENV`]): a
//!   direct-action `cls_bpf` filter on the interface's clsact qdisc, through
//!   libbpf's netlink calls (`bpf_tc_hook_create`, `bpf_tc_attach`). The
//!   kernel picks the filter's handle and priority, so several queries can
//!   share a hook. The qdisc is created only if the interface has none, and
//!   on drop (or when attaching fails) exactly what was created is removed:
//!   the filter, then the qdisc if eBQL created it. A filter outlives a
//!   process killed with SIGKILL (netlink objects are not fds); `tc filter
//!   show dev <if> ingress|egress` lists it as `ebql_…`.
//!
//! Known limit: when two eBQL queries use clsact on one interface, the one
//! that created the qdisc removes it (and the other's filter) when it stops.

use super::link::Link;
use super::tcx::{dir, ifindex, tcx_link};
use crate::{Program, Result, RuntimeError};

/// Environment variable that, set to `1`, makes eBQL attach TC programs
/// through a clsact qdisc even where TCX links exist. For tests of the
/// fallback path; not needed otherwise.
pub const FORCE_CLSACT_ENV: &str = "EBQL_TC_CLSACT";

/// True when TC programs go through clsact: forced by [`FORCE_CLSACT_ENV`],
/// or this kernel has no TCX links (the feature probe's answer).
fn use_clsact() -> bool {
    std::env::var(FORCE_CLSACT_ENV).is_ok_and(|v| v == "1") || !crate::features::tcx_links()
}

/// Attaches `prog` to the `ingress` or `egress` hook of `ifname`.
pub(crate) fn attach(prog: &Program, ifname: &str, egress: bool) -> Result<Link> {
    let ifindex = ifindex(ifname)?;
    if use_clsact() {
        return clsact_attach(prog, ifname, ifindex, egress);
    }
    let link = tcx_link(prog, ifindex, egress)?;
    Ok(Link::new(vec![link], Vec::new()))
}

/// The clsact hook of `ifindex`; `both` names the qdisc itself (destroying
/// it with both points removes the qdisc, with one it would flush filters).
fn hook(ifindex: u32, egress: bool, both: bool) -> libbpf_sys::bpf_tc_hook {
    let point = match (both, egress) {
        (true, _) => libbpf_sys::BPF_TC_INGRESS | libbpf_sys::BPF_TC_EGRESS,
        (false, true) => libbpf_sys::BPF_TC_EGRESS,
        (false, false) => libbpf_sys::BPF_TC_INGRESS,
    };
    libbpf_sys::bpf_tc_hook {
        sz: std::mem::size_of::<libbpf_sys::bpf_tc_hook>() as _,
        ifindex: ifindex as i32,
        attach_point: point,
        ..Default::default()
    }
}

/// Removes the clsact qdisc of `ifindex` (with any filter left on it).
fn destroy_qdisc(ifindex: u32) -> i32 {
    let mut h = hook(ifindex, false, true);
    // SAFETY: a valid hook description.
    unsafe { libbpf_sys::bpf_tc_hook_destroy(&mut h) }
}

/// Attaches `prog` as a direct-action filter on the clsact qdisc of
/// `ifindex`, creating the qdisc if there is none.
fn clsact_attach(prog: &Program, ifname: &str, ifindex: u32, egress: bool) -> Result<Link> {
    let mut h = hook(ifindex, egress, false);
    // SAFETY: a valid hook description.
    let created = match unsafe { libbpf_sys::bpf_tc_hook_create(&mut h) } {
        0 => true,
        r if r == -libc::EEXIST => false,
        r => {
            return Err(RuntimeError::from_ret(
                format!("creating a clsact qdisc on {ifname} (bpf_tc_hook_create)"),
                r,
            ))
        }
    };
    let mut opts = libbpf_sys::bpf_tc_opts {
        sz: std::mem::size_of::<libbpf_sys::bpf_tc_opts>() as _,
        prog_fd: prog.fd(),
        ..Default::default()
    };
    // SAFETY: valid hook and options; handle and priority 0: the kernel picks them and libbpf writes them back.
    let r = unsafe { libbpf_sys::bpf_tc_attach(&h, &mut opts) };
    if r < 0 {
        if created {
            destroy_qdisc(ifindex);
        }
        return Err(RuntimeError::from_ret(
            format!(
                "attaching {} as a clsact {} filter of {ifname} (bpf_tc_attach)",
                prog.name,
                dir(egress)
            ),
            r,
        ));
    }
    let (handle, priority) = (opts.handle, opts.priority);
    Ok(Link::new(Vec::new(), Vec::new()).with_cleanup(move || {
        let h = hook(ifindex, egress, false);
        let opts = libbpf_sys::bpf_tc_opts {
            sz: std::mem::size_of::<libbpf_sys::bpf_tc_opts>() as _,
            handle,
            priority,
            ..Default::default()
        };
        // SAFETY: valid hook and options naming the filter attached above.
        unsafe { libbpf_sys::bpf_tc_detach(&h, &opts) };
        if created {
            destroy_qdisc(ifindex);
        }
    }))
}
