//! Attaching loaded programs: one module per kind of hook (aya's one module
//! per program type). Every attachment is a [`Link`]: dropping it (or the
//! process dying) detaches the probe and releases what attaching set up.

pub(crate) mod btf;
mod kprobe;
mod link;
mod options;
pub(crate) mod perf;
mod profile;
mod tc;
pub(crate) mod tcx;
mod tracepoint;
mod uprobe;

pub use link::Link;
pub use options::AttachOptions;
pub use tc::FORCE_CLSACT_ENV;

use ebql_catalog::{Attach, EventKind};

use crate::{Program, Result};

/// Attaches `prog` (loaded for `kind`) at `attach`.
///
/// Errors: syscall errors (perf_event_open, bpf_link_create, netlink for a
/// clsact qdisc) naming what was being attached; whatever a kind attached
/// before failing is released.
pub fn attach(
    prog: &Program,
    kind: EventKind,
    attach: &Attach,
    opts: &AttachOptions,
) -> Result<Link> {
    match attach {
        Attach::Tracepoint { id } => tracepoint::attach(prog, *id),
        Attach::Profile { hz } => profile::attach(prog, *hz),
        Attach::Tc { ifname, egress } => tc::attach(prog, ifname, *egress),
        Attach::RawTracepoint { name } => btf::attach_raw_tp(prog, name),
        Attach::Btf { name, .. } => btf::attach_tracing(prog, kind, name),
        Attach::Kprobe { function, retprobe } => kprobe::attach(prog, function, *retprobe),
        Attach::Uprobe {
            binary,
            offsets,
            retprobe,
            semaphore,
        } => uprobe::attach(prog, binary, offsets, *retprobe, *semaphore, opts),
    }
}
