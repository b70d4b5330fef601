//! The executor (thesis §3.1): compiles a query, loads and attaches its probe,
//! and runs a thread that closes windows, drains the kernel's state, runs the
//! user-space remainder of the plan on DataFusion and sends record batches.
//!
//! Window protocol (exact at boundaries): the probe tags every update with
//! the generation it read from the shared control map. To close a window,
//! user space stores generation g+1, waits for a grace period (membarrier(MEMBARRIER_CMD_GLOBAL), or a fallback)
//! (a synchronize_rcu(): every probe run that could have read g has
//! finished), then drains and deletes generation g. An event is therefore in
//! exactly one window, and a window closes on time even when no event comes.
//! Which window is decided by the event's time: each window's end is
//! written where the probes read it before it passes (`cuts`), and a probe
//! moves an event timed across a cut to the window its time falls in.
//!
//! Time windows flip every *step*: each generation is a pane, and every step
//! emits the window of the last size/step panes ([`crate::panes`]); a
//! tumbling window is one pane. An event is then in exactly one pane, hence
//! in exactly size/step windows.
//!
//! The module by job: [`Executor`] and [`RunningQuery`] are the public API
//! (`api`, `running`, `options`); `plan` holds the planning feedback run
//! before a query starts (rate samples, placement); `load` creates the maps,
//! loads and attaches the programs; the query thread (`worker`) drains the
//! kernel's state (`drain`), cuts windows (`windows`) and emits them
//! (`emit`) through a `Side`: the user-space plan
//! (`userplan`, with `passthrough` for plans that only name columns,
//! `cutter`) and the channel of one of the query's outputs,
//! the main plan's or the oracle tap's. The window types themselves are in
//! [`crate::window`]. Queries of one process whose kernel part compiles the
//! same share it (`synopsis`): one query thread, a hub, evaluates each
//! one's plan (`reader`) on the same drained rows.

mod api;
mod cuts;
mod cutter;
mod drain;
mod emit;
mod load;
mod options;
mod passthrough;
mod peers;
mod plan;
mod reader;
mod recorder;
mod running;
mod side;
mod synopsis;
mod userplan;
mod windows;
mod wire;
mod worker;

pub use crate::window::{
    monotonic_ns, QueryStats, WindowDrops, META_DROPPED_DISTINCT_FULL, META_DROPPED_GROUPS_FULL,
    META_DROPPED_RINGBUF_FULL, META_WINDOW_END, META_WINDOW_PANES, META_WINDOW_START,
};
pub use api::{Executor, LoadReport};
pub use options::ExecutorOptions;
pub use running::{result_schema, RunningQuery};
pub use synopsis::SharedSynopses;
