//! The window types every part of the engine shares: what one closed window
//! carries ([`WindowBatch`]: rows, typed [`WindowBounds`], [`WindowDrops`]),
//! a query's counters ([`QueryStats`]), the schema metadata keys that carry
//! bounds and drops on plain record batches (`META_*`), and the clock time
//! windows are measured in ([`monotonic_ns`]).
//!
//! A leaf: the executor produces these, panes merge them, the oracle and
//! the sinks consume them; nothing here imports another module of eBQL.

use std::collections::HashMap;
use std::sync::Arc;

use datafusion::arrow::record_batch::RecordBatch;

/// Schema metadata key of every windowed batch: window start (same unit as the column).
pub const META_WINDOW_START: &str = "ebql.window_start";
/// Schema metadata key of every windowed batch: window end.
pub const META_WINDOW_END: &str = "ebql.window_end";
/// Schema metadata key of every windowed batch: events of this window the
/// kernel could not record because the group table was full (decimal).
pub const META_DROPPED_GROUPS_FULL: &str = "ebql.dropped_groups_full";
/// Schema metadata key of every windowed batch: events of this window the
/// kernel could not record because the ring buffer was full (decimal).
pub const META_DROPPED_RINGBUF_FULL: &str = "ebql.dropped_ringbuf_full";
/// Schema metadata key of every windowed batch: events of this window whose
/// value COUNT(DISTINCT) could not record because the distinct set was full (decimal).
pub const META_DROPPED_DISTINCT_FULL: &str = "ebql.dropped_distinct_full";

/// Schema metadata key of every time-windowed batch: `k/n`, the window holds
/// k of the n = size/step panes of a full window (`1/1` when tumbling). k < n
/// only for the partial windows emitted during the query's first `size`.
pub const META_WINDOW_PANES: &str = "ebql.window_panes";

/// Events of one window (or one emission) the kernel could not record.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WindowDrops {
    /// Group table full (raise --max-groups).
    pub groups_full: u64,
    /// Ring buffer full (user space drained too slowly).
    pub ringbuf_full: u64,
    /// The differential oracle's tap ring buffer was full (`ebql check` only).
    pub tap_full: u64,
    /// COUNT(DISTINCT) set full: the event was counted, its value not (raise --max-distinct).
    pub distinct_full: u64,
}

impl WindowDrops {
    /// Events of the query itself lost in this window (the tap excluded).
    pub fn query_total(&self) -> u64 {
        self.groups_full + self.ringbuf_full + self.distinct_full
    }

    /// The drops of the window a batch carries (zero if it carries none).
    pub fn of_batch(batch: &RecordBatch) -> WindowDrops {
        let md = batch.schema_ref().metadata();
        let get = |k: &str| md.get(k).and_then(|v| v.parse().ok()).unwrap_or(0);
        WindowDrops {
            groups_full: get(META_DROPPED_GROUPS_FULL),
            ringbuf_full: get(META_DROPPED_RINGBUF_FULL),
            tap_full: 0,
            distinct_full: get(META_DROPPED_DISTINCT_FULL),
        }
    }
}

/// Counters of a running or finished query.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QueryStats {
    /// Events of the processes and threads the query selects at its hook:
    /// runs of the output program that passed its leading pid/tid tests
    /// (every run when the query has none), counted by the program itself
    /// (`ebql_compiler::contract::counters::SEEN`). Other processes' events
    /// run the hook too but are not counted, so that they pay nothing for
    /// the count; [`QueryStats::bpf_run_cnt`] (with bpf_stats) counts every
    /// run. For a pairing: the end event's (the start's are
    /// [`QueryStats::pair_starts_seen`]).
    pub events_seen: u64,
    /// Events that passed the kernel filter, counted by the program right
    /// after it (`counters::MATCHED`): recorded plus dropped. For a pairing:
    /// ends that found their start and passed the end's filters.
    pub events_matched: u64,
    /// Rows sent to the consumer.
    pub rows_emitted: u64,
    /// Windows closed and emitted.
    pub windows_emitted: u64,
    /// Events not recorded because the group table was full (raise --max-groups).
    pub dropped_groups_full: u64,
    /// Events not recorded because the ring buffer was full.
    pub dropped_ringbuf_full: u64,
    /// Events whose value COUNT(DISTINCT) could not record because the distinct set was full (raise --max-distinct).
    pub dropped_distinct_full: u64,
    /// Probe runs the kernel skipped because another BPF program was running
    /// on that CPU (the kernel counts these whether or not bpf_stats is on).
    pub bpf_recursion_misses: u64,
    /// The query held the kernel's bpf_stats on for its whole run
    /// ([`crate::executor::ExecutorOptions::bpf_stats`]): `bpf_run_cnt`/`bpf_run_time_ns` are valid.
    pub bpf_stats: bool,
    /// bpf_stats: runs of all the query's programs (0 unless the query asked
    /// for bpf_stats; another process's bpf_stats, on for part of the run
    /// only, is not reported).
    pub bpf_run_cnt: u64,
    /// bpf_stats: total ns spent in the query's programs (0 unless the query asked for bpf_stats).
    pub bpf_run_time_ns: u64,
    /// Pairing: start events of the selected processes and threads (as [`QueryStats::events_seen`]).
    pub pair_starts_seen: u64,
    /// Pairing: start events that passed the start's filters (stored, overwriting, or refused: full).
    pub pair_starts_matched: u64,
    /// Pairing: unmatched starts a newer start of the same key replaced.
    pub pair_starts_overwritten: u64,
    /// Pairing: ends (that passed the thread filters) which found no start of their key.
    pub pair_ends_without_start: u64,
    /// Pairing: starts not stored: the hash start map was full (raise
    /// `max_pending`), or a thread's task-storage slot could not be allocated.
    pub pair_start_map_full: u64,
    /// Pairing: unmatched starts still in the start map when the query stopped
    /// (known at stop; with task storage, the probes' per-CPU count of them).
    pub pair_starts_left: u64,
}

impl QueryStats {
    /// All events lost, for any reason.
    pub fn events_dropped(&self) -> u64 {
        self.dropped_groups_full
            + self.dropped_ringbuf_full
            + self.dropped_distinct_full
            + self.bpf_recursion_misses
            + self.pair_start_map_full
    }

    /// Mean ns per probe run, if bpf_stats was on.
    pub fn ns_per_event(&self) -> Option<f64> {
        (self.bpf_run_cnt > 0).then(|| self.bpf_run_time_ns as f64 / self.bpf_run_cnt as f64)
    }

    /// One JSON object (the CLI prints it as `ebql: stats {…}`).
    pub fn to_json(&self) -> String {
        format!(
            "{{\"events_seen\":{},\"events_matched\":{},\"rows_emitted\":{},\"windows_emitted\":{},\"events_dropped\":{},\"dropped_groups_full\":{},\"dropped_ringbuf_full\":{},\"dropped_distinct_full\":{},\"bpf_recursion_misses\":{},\"bpf_run_cnt\":{},\"bpf_run_time_ns\":{}{}}}",
            self.events_seen, self.events_matched, self.rows_emitted, self.windows_emitted, self.events_dropped(), self.dropped_groups_full, self.dropped_ringbuf_full, self.dropped_distinct_full, self.bpf_recursion_misses, self.bpf_run_cnt, self.bpf_run_time_ns,
            self.pair_json()
        )
    }

    /// The pairing counters as JSON members (empty when nothing was paired or counted).
    fn pair_json(&self) -> String {
        let any = self.pair_starts_seen
            + self.pair_starts_overwritten
            + self.pair_ends_without_start
            + self.pair_start_map_full
            + self.pair_starts_left
            > 0;
        if !any {
            return String::new();
        }
        format!(
            ",\"pair_starts_seen\":{},\"pair_starts_matched\":{},\"pair_starts_overwritten\":{},\"pair_ends_without_start\":{},\"pair_start_map_full\":{},\"pair_starts_left\":{}",
            self.pair_starts_seen, self.pair_starts_matched, self.pair_starts_overwritten, self.pair_ends_without_start, self.pair_start_map_full, self.pair_starts_left
        )
    }
}

/// The bounds of one window, typed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WindowBounds {
    /// First instant (time: CLOCK_MONOTONIC ns) or ordinal (count) in the window.
    pub start: u64,
    /// End, exclusive, in the same unit.
    pub end: u64,
    /// Hopping windows: panes present / panes of a full window (the first
    /// windows of a run are partial), `None` for tumbling and count windows.
    pub panes: Option<(u32, u32)>,
}

/// One closed window: rows, bounds, losses.
#[derive(Debug, Clone)]
pub struct WindowBatch {
    /// The rows (the query's result schema, [`crate::sink::QueryInfo::schema`]).
    pub batch: RecordBatch,
    /// Bounds, for windowed queries.
    pub bounds: Option<WindowBounds>,
    /// Events of this window the kernel could not record.
    pub drops: WindowDrops,
}

impl WindowBatch {
    /// The window a batch from [`crate::executor::RunningQuery`]'s receiver carries (its
    /// bounds and drops are in its schema metadata until the executor
    /// sends [`WindowBatch`]es itself).
    pub fn from_batch(batch: RecordBatch) -> WindowBatch {
        let md = batch.schema_ref().metadata();
        let num = |k: &str| md.get(k).and_then(|v| v.parse::<u64>().ok());
        let panes = md.get(META_WINDOW_PANES).and_then(|v| {
            let (have, full) = v.split_once('/')?;
            Some((have.parse().ok()?, full.parse().ok()?))
        });
        let bounds = match (num(META_WINDOW_START), num(META_WINDOW_END)) {
            (Some(start), Some(end)) => Some(WindowBounds { start, end, panes }),
            _ => None,
        };
        let drops = WindowDrops::of_batch(&batch);
        WindowBatch {
            batch,
            bounds,
            drops,
        }
    }

    /// The rows with the bounds and drops in their schema metadata
    /// (`META_*`): the encoding [`crate::executor::RunningQuery::take_receiver`]'s
    /// batches keep for compatibility; [`WindowBatch::from_batch`] reads it back.
    pub fn to_batch_with_metadata(&self) -> RecordBatch {
        let Some(WindowBounds { start, end, panes }) = self.bounds else {
            return self.batch.clone();
        };
        let d = &self.drops;
        let mut md = HashMap::from([
            (META_WINDOW_START.to_string(), start.to_string()),
            (META_WINDOW_END.to_string(), end.to_string()),
            (
                META_DROPPED_GROUPS_FULL.to_string(),
                d.groups_full.to_string(),
            ),
            (
                META_DROPPED_RINGBUF_FULL.to_string(),
                d.ringbuf_full.to_string(),
            ),
            (
                META_DROPPED_DISTINCT_FULL.to_string(),
                d.distinct_full.to_string(),
            ),
        ]);
        if let Some((have, full)) = panes {
            md.insert(META_WINDOW_PANES.to_string(), format!("{have}/{full}"));
        }
        let schema = Arc::new(self.batch.schema_ref().as_ref().clone().with_metadata(md));
        self.batch
            .clone()
            .with_schema(schema)
            .expect("only the metadata differs")
    }

    /// The rows without the window columns (`window_start`, `window_end`)
    /// when the window has bounds: what tables show under the window's heading.
    pub fn rows_without_bounds(&self) -> RecordBatch {
        match self.bounds {
            Some(_) if self.batch.num_columns() >= 2 => self
                .batch
                .project(&(2..self.batch.num_columns()).collect::<Vec<_>>())
                .expect("columns in range"),
            _ => self.batch.clone(),
        }
    }
}

/// Current CLOCK_MONOTONIC time in ns (the clock of bpf_ktime_get_ns and the `time` column).
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: valid out-pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}
