//! Attaching loaded programs: one module per kind of hook (aya's one module
//! per program type). Every attachment is a [`Link`]: dropping it (or the
//! process dying) detaches the probe and releases what attaching set up.

mod btf;
mod kprobe;
mod perf;
pub(crate) mod profile;
pub(crate) mod tc;
mod tracepoint;
mod uprobe;

use std::os::fd::OwnedFd;

pub use tc::FORCE_CLSACT_ENV;

use ebql_catalog::{Attach, EventKind};

use crate::{Program, Result};

/// Options that narrow where a probe fires.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AttachOptions {
    /// For uprobes/USDT: trap only in this process (perf_event pid), so
    /// other processes running the same binary never pay for the probe.
    /// Other kinds ignore it (their programs test the pid themselves).
    pub pid: Option<u32>,
}

/// An attached program. Field order is drop order: the BPF links, then
/// the perf events they were made from, then `on_drop` (e.g. deleting a
/// qdisc eBQL created).
pub struct Link {
    links: Vec<OwnedFd>,
    perf: Vec<OwnedFd>,
    on_drop: Option<Box<dyn FnOnce() + Send>>,
}

impl std::fmt::Debug for Link {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Link")
            .field("links", &self.links)
            .field("perf", &self.perf)
            .finish_non_exhaustive()
    }
}

impl Link {
    /// A link made of BPF link fds and the perf event fds behind them.
    pub(crate) fn new(links: Vec<OwnedFd>, perf: Vec<OwnedFd>) -> Link {
        Link {
            links,
            perf,
            on_drop: None,
        }
    }

    /// Runs `f` after the link's fds are closed.
    pub(crate) fn with_cleanup(mut self, f: impl FnOnce() + Send + 'static) -> Link {
        self.on_drop = Some(Box::new(f));
        self
    }

    /// File descriptors of the BPF links (`bpftool link show` lists them).
    pub fn link_fds(&self) -> Vec<std::os::fd::RawFd> {
        use std::os::fd::AsRawFd;
        self.links.iter().map(|f| f.as_raw_fd()).collect()
    }
}

impl Drop for Link {
    fn drop(&mut self) {
        self.links.clear();
        self.perf.clear();
        if let Some(f) = self.on_drop.take() {
            f();
        }
    }
}

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

/// perf_event_open(2) of one event, for feature probes.
pub(crate) fn perf_open(attr: &perf::PerfAttr, pid: i32, cpu: i32, what: &str) -> Result<OwnedFd> {
    perf::open(attr, pid, cpu, what)
}
