//! Shared synopses (thesis §6, future work: "sharing synopses across
//! queries"): queries of one process whose kernel part compiles to the same
//! programs, maps and output (same events, filter, group keys, aggregates
//! and time window) run it once. One program's map update per event feeds
//! every one of them; each keeps its own user-space plan (HAVING, ORDER BY,
//! LIMIT, projections), channel and counters.
//!
//! The first such query starts a *hub*: an ordinary query run whose query
//! thread evaluates no plan of its own but every [`Reader`]'s, window by
//! window, from the same drained rows. A query of the same kernel part joins
//! the hub instead of loading anything, and reads the windows that start
//! after it joined. A reader that leaves while others stay ends with the
//! window open when it left, delivered whole when it closes (every event of
//! its last window is counted, none after its end); the last one to leave
//! stops the hub, which ends as a query alone ends (detach, then the
//! partial window up to now).

use super::options::ExecutorOptions;
use super::reader::{Emitted, Membership, Reader, Readers};
use super::running::RunningQuery;
use super::userplan::UserPlan;
use crate::error::Result;
use crate::window::{monotonic_ns, QueryStats};
use datafusion::arrow::datatypes::SchemaRef;
use ebql_compiler::prepass::WindowSpec;
use ebql_compiler::split::KernelOutput;
use ebql_compiler::CompiledQuery;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex};

/// The synopses of one process's queries, keyed by their kernel part
/// ([`ExecutorOptions::shared_synopses`](super::ExecutorOptions::shared_synopses));
/// clones share them.
#[derive(Clone, Default)]
pub struct SharedSynopses {
    hubs: Arc<Mutex<HashMap<String, Hub>>>,
}

impl std::fmt::Debug for SharedSynopses {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let hubs = self.hubs.lock().unwrap_or_else(|e| e.into_inner());
        f.debug_struct("SharedSynopses")
            .field("synopses", &hubs.len())
            .finish()
    }
}

/// One running kernel part and the queries reading it.
struct Hub {
    /// Tells hubs apart across a replacement under one key.
    id: u64,
    /// The kernel part: a query run whose windows go to its readers only.
    query: RunningQuery,
    /// Where new readers are sent to the query thread.
    joins: Sender<Reader>,
    /// Queries holding a [`Membership`] of this hub.
    members: usize,
}

/// A query's place in a hub, held by its [`RunningQuery`].
struct HubMembership {
    synopses: SharedSynopses,
    key: String,
    hub: u64,
    leave_ns: Arc<AtomicU64>,
    done: Receiver<()>,
    failed: Arc<Mutex<Option<crate::Error>>>,
}

impl Membership for HubMembership {
    fn is_finished(&self) -> bool {
        matches!(
            self.done.try_recv(),
            Err(std::sync::mpsc::TryRecvError::Disconnected)
        )
    }

    fn counter(&self) -> Box<dyn Fn() -> usize + Send + Sync> {
        let (synopses, key, hub) = (self.synopses.clone(), self.key.clone(), self.hub);
        Box::new(move || {
            let hubs = synopses.lock();
            hubs.get(&key)
                .filter(|h| h.id == hub)
                .map_or(1, |h| h.members)
        })
    }

    fn leave(self: Box<Self>) -> Result<()> {
        let last = {
            let mut hubs = self.synopses.lock();
            match hubs.get_mut(&self.key) {
                Some(h) if h.id == self.hub => {
                    h.members -= 1;
                    if h.members == 0 {
                        hubs.remove(&self.key)
                    } else {
                        None
                    }
                }
                _ => None,
            }
        };
        match last {
            // Still a reader: it gets the partial window at the hub's stop.
            Some(hub) => {
                hub.query.stop()?;
            }
            None => {
                self.leave_ns.store(monotonic_ns().max(1), Ordering::SeqCst);
                // Returns when the reader is dropped: after its last window, or with the hub.
                let _ = self.done.recv();
            }
        };
        match self.failed.lock().unwrap_or_else(|p| p.into_inner()).take() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

/// Runs `compiled` alone, or on its shared synopsis when `options` share
/// them and its kernel part can be shared ([`key`]); a checked run, an
/// attach-only run and bpf_stats (which times a query's own program) stay alone.
pub(super) fn start(compiled: CompiledQuery, options: &ExecutorOptions) -> Result<RunningQuery> {
    let synopses = options
        .shared_synopses
        .as_ref()
        .filter(|_| !options.attach_only && !options.bpf_stats);
    // Cut on the same clock too.
    let key = |c: &CompiledQuery| Some(format!("{}|align={}", key(c)?, options.align_windows));
    match synopses.and_then(|s| Some((s, key(&compiled)?))) {
        Some((synopses, key)) => synopses.run(key, compiled, |compiled, readers| {
            RunningQuery::start_hub(compiled, options, readers)
        }),
        None => RunningQuery::start(compiled, None, options),
    }
}

/// The key of `compiled`'s kernel part when it can be shared: a group table
/// in time windows (what a later reader's windows can be cut from), and no
/// wire relation (its decoder keeps per-connection state). Two queries with
/// the same key load the same programs and maps and read the same rows.
pub(super) fn key(compiled: &CompiledQuery) -> Option<String> {
    let kernel = &compiled.split.kernel;
    let groups = matches!(kernel.output, KernelOutput::Groups(_));
    let time = matches!(kernel.window, Some(WindowSpec::Time { .. }));
    if !groups || !time || compiled.wire.is_some() || compiled.code.tap.is_some() {
        return None;
    }
    // Instructions (maps by index), maps, attach points, layouts, the
    // kernel rows' schema, how they are decoded and the window (cut by
    // user space, in no instruction): everything the kernel part is made of.
    Some(format!(
        "{:?}|{:?}|{:?}|{:?}|{:?}|{:?}",
        compiled.code.programs,
        compiled.code.maps,
        compiled.code.layout,
        compiled.split.kernel_schema,
        kernel.output,
        kernel.window,
    ))
}

impl SharedSynopses {
    /// No synopses yet.
    pub fn new() -> SharedSynopses {
        SharedSynopses::default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Hub>> {
        self.hubs.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Runs `compiled` (of kernel part `key`) on its synopsis: joins the
    /// hub of that key, or starts one (`start` runs the kernel part and
    /// returns its query, fed by the readers it is given).
    ///
    /// The registry stays locked while a hub starts, so two queries of one
    /// key never start two hubs.
    pub(super) fn run(
        &self,
        key: String,
        compiled: CompiledQuery,
        start: impl FnOnce(CompiledQuery, Readers) -> Result<RunningQuery>,
    ) -> Result<RunningQuery> {
        static HUB_IDS: AtomicU64 = AtomicU64::new(1);
        let mut hubs = self.lock();
        if let Some(hub) = hubs.get_mut(&key) {
            let (reader, member) = Member::new(UserPart::of(&compiled), &hub.query, monotonic_ns());
            match hub.joins.send(reader) {
                Ok(()) => {
                    hub.members += 1;
                    return Ok(member.into_query(self, &key, hub.id));
                }
                // The hub's query thread has ended (its error went to its readers): replace it.
                Err(_) => {
                    if let Some(dead) = hubs.remove(&key) {
                        let _ = dead.query.stop();
                    }
                }
            }
        }
        let (joins, rx) = channel();
        let part = UserPart::of(&compiled);
        let query = start(
            compiled,
            Readers {
                joins: rx,
                list: Vec::new(),
            },
        )?;
        // The first reader reads from the first window.
        let (reader, member) = Member::new(part, &query, 0);
        if joins.send(reader).is_err() {
            // The query thread ended at once: its error is the query's.
            query.stop()?;
            return Err(crate::error::Error::Internal(
                "a shared synopsis's query thread ended as it started".into(),
            ));
        }
        let id = HUB_IDS.fetch_add(1, Ordering::Relaxed);
        let query_of_member = member.into_query(self, &key, id);
        hubs.insert(
            key,
            Hub {
                id,
                query,
                joins,
                members: 1,
            },
        );
        Ok(query_of_member)
    }
}

/// A query about to read a hub: its handle, and what its membership needs.
struct Member {
    query: RunningQuery,
    leave_ns: Arc<AtomicU64>,
    done: Receiver<()>,
    failed: Arc<Mutex<Option<crate::Error>>>,
}

impl Member {
    /// The reader of a query's user-space part on `hub`'s windows
    /// starting at or after `from_ns`, and its query's handle.
    fn new(part: UserPart, hub: &RunningQuery, from_ns: u64) -> (Reader, Member) {
        let leave_ns = Arc::new(AtomicU64::new(0));
        let (done_tx, done) = channel();
        let (tx, rx) = channel();
        let stats = Arc::new(Mutex::new(QueryStats::default()));
        let failed = Arc::new(Mutex::new(None));
        let out_schema = part.out_schema.clone();
        let placement = part.placement.clone();
        let plan = part.into_plan(hub.wall_clock());
        let reader = Reader {
            plan,
            out_schema: out_schema.clone(),
            tx,
            stats: stats.clone(),
            emitted: Emitted::default(),
            from_ns,
            leave_ns: leave_ns.clone(),
            failed: failed.clone(),
            _done: done_tx,
        };
        let query = hub.reader_handle(out_schema, rx, stats, placement);
        (
            reader,
            Member {
                query,
                leave_ns,
                done,
                failed,
            },
        )
    }

    fn into_query(self, synopses: &SharedSynopses, key: &str, hub: u64) -> RunningQuery {
        self.query.with_membership(Box::new(HubMembership {
            synopses: synopses.clone(),
            key: key.to_string(),
            hub,
            leave_ns: self.leave_ns,
            done: self.done,
            failed: self.failed,
        }))
    }
}

/// What a query reading a hub brings of its own: its user-space plan,
/// before it is set to the hub's clock.
struct UserPart {
    input: Arc<ebql_compiler::planner::WindowInput>,
    remainder: datafusion::logical_expr::LogicalPlan,
    ctx: datafusion::prelude::SessionContext,
    out_schema: SchemaRef,
    placement: Option<ebql_compiler::cost::PlacementDecision>,
}

impl UserPart {
    fn of(compiled: &CompiledQuery) -> UserPart {
        UserPart {
            input: compiled.split.input.clone(),
            remainder: compiled.split.remainder.clone(),
            ctx: compiled.planned.ctx.clone(),
            out_schema: super::result_schema(compiled),
            placement: compiled.physical.placement.clone(),
        }
    }

    /// The plan, its `walltime()` on the hub's clock (window bounds are the hub's).
    fn into_plan(self, clock: crate::window::WallClock) -> UserPlan {
        ebql_compiler::walltime::set_wall_offset(&self.ctx, clock.offset_ns());
        UserPlan::new(self.input, self.remainder, self.ctx)
    }
}
