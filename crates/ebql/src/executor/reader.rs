//! What a shared synopsis's query thread needs of the queries reading it
//! ([`super::synopsis`]): each one's [`Reader`], and the [`Membership`] its
//! handle holds. A leaf: the worker and the handle import it, not the hub.

use super::userplan::UserPlan;
use crate::error::Result;
use crate::window::{QueryStats, WindowBatch};
use datafusion::arrow::datatypes::SchemaRef;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, Sender};
use std::sync::{Arc, Mutex};

/// One query's user-space part, evaluated by a hub's query thread on each
/// window it reads.
pub(super) struct Reader {
    /// The query's user-space plan.
    pub(super) plan: UserPlan,
    /// Schema of the query's batches (window bounds first).
    pub(super) out_schema: SchemaRef,
    /// Where the query's windows go.
    pub(super) tx: Sender<WindowBatch>,
    /// The query's counters: the hub's kernel counters, its own emissions.
    pub(super) stats: Arc<Mutex<QueryStats>>,
    /// Rows, windows and failed windows this query emitted.
    pub(super) emitted: Emitted,
    /// CLOCK_MONOTONIC ns when it joined: windows starting earlier hold
    /// events from before it, and are not its.
    pub(super) from_ns: u64,
    /// CLOCK_MONOTONIC ns when it left (0: it has not): the first window
    /// ending at or after it is its last.
    pub(super) leave_ns: Arc<AtomicU64>,
    /// Why the hub stopped evaluating it, if it failed: its plan's fatal
    /// error, or the hub's own ([`Readers::fail`]). Its handle's stop returns it.
    pub(super) failed: Arc<Mutex<Option<crate::Error>>>,
    /// Dropped with the reader: its handle waits on the other end.
    pub(super) _done: Sender<()>,
}

/// A reader's own emission counters.
#[derive(Default, Clone, Copy)]
pub(super) struct Emitted {
    pub(super) rows: u64,
    pub(super) windows: u64,
    pub(super) failed: u64,
}

impl Reader {
    /// Whether the window starting at `start` (CLOCK_MONOTONIC ns) is this reader's.
    pub(super) fn reads(&self, start: u64) -> bool {
        start >= self.from_ns
    }

    /// Whether the window ending at `end` is this reader's last.
    pub(super) fn last_at(&self, end: u64) -> bool {
        let leave = self.leave_ns.load(Ordering::SeqCst);
        leave != 0 && end >= leave
    }

    /// The hub's counters `kernel`, with this reader's own emissions.
    pub(super) fn publish(&self, kernel: &QueryStats) {
        let mut s = *kernel;
        s.rows_emitted = self.emitted.rows;
        s.windows_emitted = self.emitted.windows;
        s.windows_failed = self.emitted.failed;
        *self.stats.lock().unwrap_or_else(|e| e.into_inner()) = s;
    }
}

/// A hub's readers: those admitted and those sent but not yet seen.
pub(super) struct Readers {
    pub(super) joins: Receiver<Reader>,
    pub(super) list: Vec<Reader>,
}

impl Readers {
    /// Takes in the readers that joined since last asked.
    pub(super) fn admit(&mut self) {
        self.list.extend(self.joins.try_iter());
    }

    /// The hub's query thread failed with `e`: every reader's stop says so.
    pub(super) fn fail(&mut self, e: &crate::Error) {
        self.admit();
        for r in &self.list {
            let mut failed = r.failed.lock().unwrap_or_else(|p| p.into_inner());
            failed.get_or_insert_with(|| {
                crate::Error::Execution(format!(
                    "the query thread of its shared synopsis stopped: {}",
                    e.render()
                ))
            });
        }
    }
}

/// A query's place in a shared synopsis, as its [`super::RunningQuery`] sees it.
pub(super) trait Membership: Send {
    /// True once the hub no longer evaluates this query (it left, its
    /// consumer is gone, or the hub's query thread ended).
    fn is_finished(&self) -> bool;
    /// A reader of how many queries read the synopsis, this one included.
    fn counter(&self) -> Box<dyn Fn() -> usize + Send + Sync>;
    /// Leaves the hub: the last member stops it (and gets its error, if
    /// the query thread failed); another waits for its last window.
    fn leave(self: Box<Self>) -> Result<()>;
}
