//! [`Link`]: an attached program; dropping it detaches the probe.

use std::os::fd::OwnedFd;

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
