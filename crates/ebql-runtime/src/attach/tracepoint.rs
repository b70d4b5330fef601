//! tracefs tracepoints: a perf event (PERF_TYPE_TRACEPOINT, pid -1, cpu 0;
//! the program still runs on every CPU) plus a BPF link.

use super::link::Link;
use super::perf;
use crate::{Program, Result};

/// Attaches `prog` to the tracepoint with this tracefs id.
pub(crate) fn attach(prog: &Program, tracepoint_id: u32) -> Result<Link> {
    let attr = perf::PerfAttr {
        kind: libbpf_sys::PERF_TYPE_TRACEPOINT,
        config: tracepoint_id as u64,
        sample: 1,
        ..Default::default()
    };
    let pfd = perf::open(&attr, -1, 0, &format!("tracepoint id {tracepoint_id}"))?;
    let link = perf::link(prog, &pfd)?;
    Ok(Link::new(vec![link], vec![pfd]))
}
