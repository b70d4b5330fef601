//! The window types every part of the engine shares: what one closed window
//! carries ([`WindowBatch`]: rows, typed [`WindowBounds`], [`WindowDrops`]),
//! a query's counters ([`QueryStats`]), the schema metadata keys that carry
//! bounds and drops on plain record batches (`META_*`), the clock time
//! windows are measured in ([`monotonic_ns`]), the run's wall clock they are
//! shown in ([`WallClock`]) and the columns bounds are ([`bound_fields`]).
//!
//! A window whose evaluation failed (an exact SUM that does not fit its
//! result type, a DataFusion error in the user-space remainder) is still a
//! [`WindowBatch`]: no rows, and a [`WindowError`] saying why; the run goes
//! on and [`QueryStats::windows_failed`] counts it.
//!
//! A leaf: the executor produces these, panes merge them, the oracle and
//! the sinks consume them; nothing here imports another module of eBQL.

use std::collections::HashMap;
use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, TimestampNanosecondArray, UInt64Array};
use datafusion::arrow::datatypes::{DataType, Field, Schema, TimeUnit};
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
/// Schema metadata key of every windowed batch: strings of this window the
/// probe could not read (decimal); each is NULL in a row that was kept.
pub const META_STR_READ_FAILED: &str = "ebql.str_read_failed";
/// Schema metadata key: a wire relation's captured calls not decoded in the
/// window ([`WindowDrops::wire_not_decoded`]).
pub const META_WIRE_NOT_DECODED: &str = "ebql.wire_not_decoded";

/// Schema metadata key of every time-windowed batch: `k/n`, the window holds
/// k of the n = size/step panes of a full window (`1/1` when tumbling). k < n
/// only for the partial windows emitted during the query's first `size`.
pub const META_WINDOW_PANES: &str = "ebql.window_panes";

/// Schema metadata key of a batch whose window failed: the cause, as text.
/// Such a batch has no rows (see [`WindowBatch::error`]).
pub const META_WINDOW_ERROR: &str = "ebql.window_error";

/// Why a window's rows could not be computed: the window fails, the run goes on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WindowError {
    /// What went wrong, for people (the aggregate or expression and the value).
    pub cause: String,
    /// Which part of the evaluation failed.
    pub kind: WindowErrorKind,
}

/// Where a window's evaluation failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WindowErrorKind {
    /// An exact aggregate of the kernel (SUM's 128-bit sum) does not fit
    /// its result type (the user-space SUM, `ebql_compiler::checked_sum`,
    /// fails as an evaluation error instead).
    Overflow,
    /// The user-space remainder failed (DataFusion: a CAST that cannot hold
    /// its value, a division by zero, …).
    Evaluation,
}

impl WindowError {
    /// The text of a failed window's [`META_WINDOW_ERROR`]: the cause, as text.
    pub fn to_metadata(&self) -> String {
        self.cause.clone()
    }

    /// The error a batch carries in its schema metadata, if its window failed.
    /// (The kind is not kept in the metadata: it reads back as [`WindowErrorKind::Evaluation`].)
    pub fn of_batch(batch: &RecordBatch) -> Option<WindowError> {
        batch
            .schema_ref()
            .metadata()
            .get(META_WINDOW_ERROR)
            .map(|cause| WindowError {
                cause: cause.clone(),
                kind: WindowErrorKind::Evaluation,
            })
    }
}

impl std::fmt::Display for WindowError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.cause)
    }
}

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
    /// Not a loss: strings the probe could not read (a bad address, or a
    /// user page not resident), each NULL in its row, which was kept
    /// ([`DropCause::StrReadFailed`]). Not in the totals of losses.
    pub str_read_failed: u64,
    /// A wire relation's captured socket calls its decoder could not
    /// decode in this window: calls skipped while a connection's framing
    /// was lost (or not yet found), TLS calls, and responses to requests
    /// not seen (the stats' `wire` member has each cause). Statements, not
    /// events, are what they may hide: not in the totals of losses.
    pub wire_not_decoded: u64,
}

impl WindowDrops {
    /// Each loss counter with its cause. Every counter is named here (the
    /// destructuring is exhaustive, so a new field does not compile until it
    /// is listed): totals, sums and warnings iterate over this.
    fn counters_mut(&mut self) -> [(DropCause, &mut u64); 4] {
        let WindowDrops {
            groups_full,
            ringbuf_full,
            tap_full,
            distinct_full,
            // Not a loss: the row was kept, the string is NULL (see `add`, `unread_note`).
            str_read_failed: _,
            // Calls, not events: shown apart (see `add`, `wire_note`).
            wire_not_decoded: _,
        } = self;
        [
            (DropCause::GroupsFull, groups_full),
            (DropCause::RingbufFull, ringbuf_full),
            (DropCause::DistinctFull, distinct_full),
            (DropCause::TapFull, tap_full),
        ]
    }

    /// Each loss counter with its cause, zero or not.
    pub fn causes(&self) -> [(DropCause, u64); 4] {
        let mut d = *self;
        d.counters_mut().map(|(c, n)| (c, *n))
    }

    /// The causes of the query's own losses (the tap's excluded).
    pub fn query_causes(&self) -> Vec<(DropCause, u64)> {
        self.causes()
            .into_iter()
            .filter(|(c, _)| *c != DropCause::TapFull)
            .collect()
    }

    /// Events of the query itself lost in this window (the tap excluded).
    pub fn query_total(&self) -> u64 {
        self.query_causes().iter().map(|(_, n)| n).sum()
    }

    /// Adds `other`'s counts to these (every counter).
    pub fn add(&mut self, other: &WindowDrops) {
        for ((_, mine), (_, theirs)) in self.counters_mut().into_iter().zip(other.causes()) {
            *mine += theirs;
        }
        self.str_read_failed += other.str_read_failed;
        self.wire_not_decoded += other.wire_not_decoded;
    }

    /// `12 captured socket calls not decoded (…)` when some were not, else `None`.
    pub fn wire_note(&self) -> Option<String> {
        (self.wire_not_decoded > 0).then(|| {
            format!(
                "{} captured socket calls not decoded (framing lost, TLS, or responses to requests not seen: see `wire` in the stats)",
                self.wire_not_decoded
            )
        })
    }

    /// `3 strings could not be read (…)` when some could not, else `None`.
    pub fn unread_note(&self) -> Option<String> {
        DropCause::StrReadFailed.note(self.str_read_failed)
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
            str_read_failed: get(META_STR_READ_FAILED),
            wire_not_decoded: get(META_WIRE_NOT_DECODED),
        }
    }
}

/// Why an event (or, for COUNT(DISTINCT), its value) was not recorded: one
/// cause per loss counter of [`QueryStats`] and [`WindowDrops`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DropCause {
    /// The group table was full: the event's new group was not created.
    GroupsFull,
    /// The ring buffer was full: user space read the rows too slowly.
    RingbufFull,
    /// The COUNT(DISTINCT) set was full: the event was counted, its value not.
    DistinctFull,
    /// The kernel skipped a probe run because another BPF program was running on that CPU.
    RecursionMiss,
    /// A pairing's start was not stored (its start map full, or no task-storage slot).
    PairStartMapFull,
    /// The differential oracle's tap ring buffer was full (`ebql check`).
    TapFull,
    /// Not a loss: a string the probe could not read is NULL in its row,
    /// which is kept (counted apart from the losses).
    StrReadFailed,
}

impl DropCause {
    /// What happened, for people: `group table full`.
    pub fn what(self) -> &'static str {
        match self {
            DropCause::GroupsFull => "group table full",
            DropCause::RingbufFull => "ring buffer full",
            DropCause::DistinctFull => "COUNT(DISTINCT) set full (event counted, value not)",
            DropCause::RecursionMiss => {
                "skipped by the kernel while another BPF program ran on the CPU"
            }
            DropCause::PairStartMapFull => {
                "pairing starts not stored: start map full (their ends find no start)"
            }
            DropCause::TapFull => "reference tap ring buffer full",
            DropCause::StrReadFailed => {
                "string reads failed (each value is NULL, its row kept: a bad address, or a user page not resident)"
            }
        }
    }

    /// What the user can do about it, if anything.
    pub fn remedy(self) -> Option<&'static str> {
        match self {
            DropCause::GroupsFull => Some("raise --max-groups"),
            DropCause::RingbufFull => Some("user space read too slowly: filter more in the kernel"),
            DropCause::DistinctFull => Some("raise --max-distinct"),
            DropCause::RecursionMiss | DropCause::TapFull => None,
            DropCause::StrReadFailed => {
                Some("tracepoint probes cannot fault pages in (uprobes and USDT do unless --no-faulting-reads): `WHERE str(…) IS NOT NULL` skips such rows")
            }
            DropCause::PairStartMapFull => {
                Some("too many unmatched starts at once: filter the start event more")
            }
        }
    }

    /// `3 string reads failed (…)` for a count that is not zero.
    pub fn note(self, n: u64) -> Option<String> {
        (n > 0).then(|| Self::describe(&[(self, n)]))
    }

    /// `10 group table full (raise --max-groups), 2 ring buffer full (…)`:
    /// every non-zero count of `causes` with what it means.
    pub fn describe(causes: &[(DropCause, u64)]) -> String {
        causes
            .iter()
            .filter(|(_, n)| *n > 0)
            .map(|(c, n)| match c.remedy() {
                Some(r) => format!("{n} {} ({r})", c.what()),
                None => format!("{n} {}", c.what()),
            })
            .collect::<Vec<_>>()
            .join(", ")
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
    /// Windows closed and emitted (failed ones included).
    pub windows_emitted: u64,
    /// Windows (without a WINDOW clause: emissions) whose evaluation failed:
    /// sent as a [`WindowError`] instead of rows, the run went on.
    pub windows_failed: u64,
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
    /// Strings the probes could not read (`ebql_compiler::contract::ctl::STR_READ_FAILED`):
    /// each is NULL in its row, which was kept. Not a loss.
    pub str_read_failed: u64,
    /// Time windows: events whose probe lost the race to settle a window
    /// cut ([`ebql_compiler::contract::ctl::CUT_RACES`]), so their time may
    /// lie past their window's end (each still counted once). Never
    /// expected: it takes several CPUs swapping the same cut in one instant.
    pub window_cut_races: u64,
    /// A wire relation (`postgres.statements`, …): statements decoded.
    pub wire_statements: u64,
    /// A wire relation: the decoder's counts of what it could not decode
    /// (framing lost, calls skipped, responses to requests not seen, TLS
    /// connections, …; [`ebql_wire::Counters`]). Statements never guessed.
    pub wire: ebql_wire::Counters,
}

impl QueryStats {
    /// Each loss counter with its cause. The destructuring is exhaustive: a
    /// new field does not compile until it is sorted here as a loss or not,
    /// so [`QueryStats::events_dropped`] and the warnings cannot miss it.
    fn drop_counters_mut(&mut self) -> [(DropCause, &mut u64); 5] {
        let QueryStats {
            events_seen: _,
            events_matched: _,
            rows_emitted: _,
            windows_emitted: _,
            // Not losses: the window's events were recorded, its result failed.
            windows_failed: _,
            dropped_groups_full,
            dropped_ringbuf_full,
            dropped_distinct_full,
            bpf_recursion_misses,
            bpf_stats: _,
            bpf_run_cnt: _,
            bpf_run_time_ns: _,
            pair_starts_seen: _,
            pair_starts_matched: _,
            // Not losses: a newer start of the key replaced it (the query pairs the latest).
            pair_starts_overwritten: _,
            // Not losses: the start was before the attach, or lost (counted in pair_start_map_full).
            pair_ends_without_start: _,
            pair_start_map_full,
            // Not losses: starts whose end had not come when the query stopped.
            pair_starts_left: _,
            // Not losses: the string is NULL, its row kept (the warning names them apart).
            str_read_failed: _,
            // Not losses: bounds that may be inexact at one instant.
            window_cut_races: _,
            // Not events: what a decoder made of the recorded calls (its own warning).
            wire_statements: _,
            wire: _,
        } = self;
        [
            (DropCause::GroupsFull, dropped_groups_full),
            (DropCause::RingbufFull, dropped_ringbuf_full),
            (DropCause::DistinctFull, dropped_distinct_full),
            (DropCause::RecursionMiss, bpf_recursion_misses),
            (DropCause::PairStartMapFull, pair_start_map_full),
        ]
    }

    /// Each loss counter with its cause, zero or not.
    pub fn drop_causes(&self) -> [(DropCause, u64); 5] {
        let mut s = *self;
        s.drop_counters_mut().map(|(c, n)| (c, *n))
    }

    /// All events lost, for any reason.
    pub fn events_dropped(&self) -> u64 {
        self.drop_causes().iter().map(|(_, n)| n).sum()
    }

    /// `12 events were not recorded: 10 group table full (raise
    /// --max-groups), 2 …` naming every non-zero cause, or `None` when
    /// nothing was lost.
    /// Strings that could not be read are named after the losses (`…; 3
    /// string reads failed (each value is NULL, its row kept: …)`), or alone.
    pub fn drop_warning(&self) -> Option<String> {
        let n = self.events_dropped();
        let lost = (n > 0).then(|| {
            format!(
                "{n} events were not (fully) recorded: {}",
                DropCause::describe(&self.drop_causes())
            )
        });
        let unread = DropCause::StrReadFailed.note(self.str_read_failed);
        match (lost, unread) {
            (Some(l), Some(u)) => Some(format!("{l}; {u}")),
            (l, u) => l.or(u),
        }
    }

    /// `2 windows failed (their rows are replaced by the error)`, or `None`
    /// when every window was computed.
    /// Also names window cut races ([`QueryStats::window_cut_races`]).
    pub fn failure_warning(&self) -> Option<String> {
        let failed = (self.windows_failed > 0).then(|| {
            format!(
                "{} window(s) failed: their rows were replaced by the error shown with each (the run went on)",
                self.windows_failed
            )
        });
        let late = (self.window_cut_races > 0).then(|| {
            format!(
                "{} event(s) lost the race to settle a window cut: their time may lie past \
                 their window's end, each still counted once",
                self.window_cut_races
            )
        });
        let parts: Vec<String> = [failed, late, self.wire_warning()]
            .into_iter()
            .flatten()
            .collect();
        (!parts.is_empty()).then(|| parts.join("; "))
    }

    /// What a wire relation's decoder could not decode, or `None`.
    fn wire_warning(&self) -> Option<String> {
        let w = &self.wire;
        let parts: Vec<String> = [
            (w.desyncs, "time(s) a connection's framing was lost (a header not captured, or bytes that are no message)"),
            (w.chunks_skipped, "captured call(s) skipped until the framing was found again (connections opened before the query count here)"),
            (w.responses_unmatched, "response(s) to requests not seen"),
            (w.unknown_prepared, "execution(s) of statements prepared before the query (query NULL)"),
            (w.unfinished, "request(s) without a response when their connection closed"),
            (w.tls_connections, "TLS connection(s), not decodable at system calls"),
        ]
        .into_iter()
        .filter(|(n, _)| *n > 0)
        .map(|(n, what)| format!("{n} {what}"))
        .collect();
        (!parts.is_empty()).then(|| {
            format!(
                "{} statements decoded; not decoded: {} (never guessed: see `wire` in the stats)",
                self.wire_statements,
                parts.join(", ")
            )
        })
    }

    /// Mean ns per probe run, if bpf_stats was on.
    pub fn ns_per_event(&self) -> Option<f64> {
        (self.bpf_run_cnt > 0).then(|| self.bpf_run_time_ns as f64 / self.bpf_run_cnt as f64)
    }

    /// One JSON object (the CLI prints it as `ebql: stats {…}`).
    pub fn to_json(&self) -> String {
        let late = match self.window_cut_races {
            0 => String::new(),
            n => format!(",\"window_cut_races\":{n}"),
        };
        format!(
            "{{\"events_seen\":{},\"events_matched\":{},\"rows_emitted\":{},\"windows_emitted\":{},\"windows_failed\":{},\"events_dropped\":{},\"dropped_groups_full\":{},\"dropped_ringbuf_full\":{},\"dropped_distinct_full\":{},\"bpf_recursion_misses\":{},\"bpf_run_cnt\":{},\"bpf_run_time_ns\":{},\"str_read_failed\":{}{}{late}{}}}",
            self.events_seen, self.events_matched, self.rows_emitted, self.windows_emitted, self.windows_failed, self.events_dropped(), self.dropped_groups_full, self.dropped_ringbuf_full, self.dropped_distinct_full, self.bpf_recursion_misses, self.bpf_run_cnt, self.bpf_run_time_ns, self.str_read_failed,
            self.pair_json(),
            self.wire_json()
        )
    }

    /// A wire relation's counters as one JSON member (empty for other queries).
    fn wire_json(&self) -> String {
        let w = &self.wire;
        if w.chunks == 0 {
            return String::new();
        }
        format!(
            ",\"wire\":{{\"statements\":{},\"calls\":{},\"bytes_not_captured\":{},\"desyncs\":{},\"calls_skipped\":{},\"responses_unmatched\":{},\"unknown_prepared\":{},\"unfinished\":{},\"tls_connections\":{},\"tls_calls\":{}}}",
            self.wire_statements, w.chunks, w.bytes_not_captured, w.desyncs, w.chunks_skipped, w.responses_unmatched, w.unknown_prepared, w.unfinished, w.tls_connections, w.tls_chunks
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
    /// The window failed: `batch` has no rows, this says why.
    pub error: Option<WindowError>,
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
        let error = WindowError::of_batch(&batch);
        WindowBatch {
            batch,
            bounds,
            drops,
            error,
        }
    }

    /// The rows with the bounds and drops in their schema metadata
    /// (`META_*`): the encoding [`crate::executor::RunningQuery::take_receiver`]'s
    /// batches keep for compatibility; [`WindowBatch::from_batch`] reads it back.
    /// A failed window's batch has no rows and its cause under [`META_WINDOW_ERROR`].
    pub fn to_batch_with_metadata(&self) -> RecordBatch {
        let mut md = HashMap::new();
        if let Some(e) = &self.error {
            md.insert(META_WINDOW_ERROR.to_string(), e.to_metadata());
        }
        let Some(WindowBounds { start, end, panes }) = self.bounds else {
            return self.with_metadata(md);
        };
        let d = &self.drops;
        md.extend([
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
            (
                META_STR_READ_FAILED.to_string(),
                d.str_read_failed.to_string(),
            ),
            (
                META_WIRE_NOT_DECODED.to_string(),
                d.wire_not_decoded.to_string(),
            ),
        ]);
        if let Some((have, full)) = panes {
            md.insert(META_WINDOW_PANES.to_string(), format!("{have}/{full}"));
        }
        self.with_metadata(md)
    }

    /// The rows with `md` as their schema's metadata (unchanged when `md` is empty).
    fn with_metadata(&self, md: HashMap<String, String>) -> RecordBatch {
        if md.is_empty() {
            return self.batch.clone();
        }
        let schema = Arc::new(self.batch.schema_ref().as_ref().clone().with_metadata(md));
        self.batch
            .clone()
            .with_schema(schema)
            .expect("only the metadata differs")
    }

    /// The rows without the window columns ([`bound_fields`]) when the
    /// window has bounds: what tables show under the window's heading.
    pub fn rows_without_bounds(&self) -> RecordBatch {
        let skip = bound_columns(self.batch.schema_ref());
        match self.bounds {
            Some(_) if skip > 0 => self
                .batch
                .project(&(skip..self.batch.num_columns()).collect::<Vec<_>>())
                .expect("columns in range"),
            _ => self.batch.clone(),
        }
    }
}

/// Name of a windowed result's first column: the window's start. Time
/// windows: wall-clock time, Arrow `Timestamp(Nanosecond, "UTC")` (ns since
/// the Unix epoch); count windows: the ordinal of its first event (UInt64).
pub const WINDOW_START: &str = "window_start";
/// Name of a windowed result's second column: the window's end, exclusive,
/// typed as [`WINDOW_START`].
pub const WINDOW_END: &str = "window_end";
/// Name of a time-windowed result's third column: the window's start as
/// CLOCK_MONOTONIC ns (UInt64), the clock of the `time` column.
pub const WINDOW_START_MONO: &str = "window_start_mono_ns";
/// Name of a time-windowed result's fourth column: the window's end,
/// exclusive, as CLOCK_MONOTONIC ns (UInt64).
pub const WINDOW_END_MONO: &str = "window_end_mono_ns";

/// The type of wall-clock instants in results: ns since the Unix epoch, UTC
/// (`Timestamp(Nanosecond, "UTC")`), as the time-window bounds and
/// `walltime(time)` give them.
pub fn wall_time_type() -> DataType {
    DataType::Timestamp(TimeUnit::Nanosecond, Some("UTC".into()))
}

/// The leading columns of a windowed result: for time windows (`time`)
/// `window_start`, `window_end` ([`wall_time_type`]) then
/// `window_start_mono_ns`, `window_end_mono_ns` (UInt64, CLOCK_MONOTONIC
/// ns); for count windows `window_start`, `window_end` (UInt64 event
/// ordinals).
pub fn bound_fields(time: bool) -> Vec<Field> {
    if time {
        vec![
            Field::new(WINDOW_START, wall_time_type(), false),
            Field::new(WINDOW_END, wall_time_type(), false),
            Field::new(WINDOW_START_MONO, DataType::UInt64, false),
            Field::new(WINDOW_END_MONO, DataType::UInt64, false),
        ]
    } else {
        vec![
            Field::new(WINDOW_START, DataType::UInt64, false),
            Field::new(WINDOW_END, DataType::UInt64, false),
        ]
    }
}

/// The values of [`bound_fields`] for `n` rows of the window `[start, end)`:
/// with the run's `clock` (time windows, `start`/`end` CLOCK_MONOTONIC ns)
/// its four columns, without (count windows, ordinals) its two.
pub fn bound_arrays(start: u64, end: u64, clock: Option<&WallClock>, n: usize) -> Vec<ArrayRef> {
    let mono = |v: u64| Arc::new(UInt64Array::from(vec![v; n])) as ArrayRef;
    match clock {
        Some(c) => {
            let wall = |v: u64| {
                Arc::new(
                    TimestampNanosecondArray::from(vec![c.timestamp_ns(v); n]).with_timezone("UTC"),
                ) as ArrayRef
            };
            vec![wall(start), wall(end), mono(start), mono(end)]
        }
        None => vec![mono(start), mono(end)],
    }
}

/// How many leading columns of a windowed result are its bounds: 4 when
/// the first is a wall-clock `window_start` (time windows), 2 when it is an
/// ordinal one (count windows), 0 without one.
pub fn bound_columns(schema: &Schema) -> usize {
    match schema.fields().first() {
        Some(f) if f.name() == WINDOW_START && matches!(f.data_type(), DataType::Timestamp(..)) => {
            4
        }
        Some(f) if f.name() == WINDOW_START => 2,
        _ => 0,
    }
}

/// The run's wall clock: CLOCK_REALTIME − CLOCK_MONOTONIC (ns), read once
/// when a query starts ([`WallClock::now`]) and used for every conversion of
/// that run (window bounds in every sink, `walltime(time)`), so the
/// instants of one run are consistent with each other: the wall-clock
/// difference of two instants is exactly their CLOCK_MONOTONIC difference.
/// The offset is not read again: if the wall clock is stepped during a run
/// (`date -s`, an NTP step; slewing moves both clocks alike), the run's
/// wall-clock times stay on the clock as it was at the start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WallClock {
    /// CLOCK_REALTIME − CLOCK_MONOTONIC, ns.
    offset_ns: i64,
}

fn clock_ns(clock: libc::clockid_t) -> i128 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: valid out-pointer.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    ts.tv_sec as i128 * 1_000_000_000 + ts.tv_nsec as i128
}

impl WallClock {
    /// The offset between the two clocks now (CLOCK_REALTIME read between
    /// two CLOCK_MONOTONIC reads, against their mean).
    pub fn now() -> WallClock {
        let before = clock_ns(libc::CLOCK_MONOTONIC);
        let real = clock_ns(libc::CLOCK_REALTIME);
        let after = clock_ns(libc::CLOCK_MONOTONIC);
        WallClock::from_offset_ns((real - (before + after) / 2) as i64)
    }

    /// A clock with this offset (CLOCK_REALTIME − CLOCK_MONOTONIC, ns).
    pub fn from_offset_ns(offset_ns: i64) -> WallClock {
        WallClock { offset_ns }
    }

    /// CLOCK_REALTIME − CLOCK_MONOTONIC, ns, as read when the run started.
    pub fn offset_ns(&self) -> i64 {
        self.offset_ns
    }

    /// A CLOCK_MONOTONIC instant (ns) as CLOCK_REALTIME ns since the Unix epoch.
    pub fn unix_ns(&self, monotonic_ns: u64) -> i128 {
        monotonic_ns as i128 + self.offset_ns as i128
    }

    /// [`WallClock::unix_ns`] as an Arrow timestamp value (ns since the Unix
    /// epoch, UTC), saturated to `i64` (past the year 2262).
    pub fn timestamp_ns(&self, monotonic_ns: u64) -> i64 {
        self.unix_ns(monotonic_ns)
            .clamp(i64::MIN as i128, i64::MAX as i128) as i64
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Every loss counter of the stats, set alone: the total counts it and
    /// the warning names its cause and no other.
    #[test]
    fn the_stats_warning_names_every_cause() {
        let causes = QueryStats::default().drop_causes().map(|(c, _)| c);
        assert!(causes.contains(&DropCause::PairStartMapFull));
        assert_eq!(QueryStats::default().drop_warning(), None);
        for (i, cause) in causes.iter().enumerate() {
            let mut s = QueryStats::default();
            *s.drop_counters_mut()[i].1 = 7;
            assert_eq!(s.events_dropped(), 7, "{cause:?}");
            let warning = s.drop_warning().unwrap();
            assert!(
                warning.starts_with("7 events were not (fully) recorded: 7 "),
                "{warning}"
            );
            assert!(warning.contains(cause.what()), "{cause:?}: {warning}");
            for other in causes.iter().filter(|c| *c != cause) {
                assert!(!warning.contains(other.what()), "{other:?}: {warning}");
            }
        }
        let all = QueryStats {
            dropped_groups_full: 1,
            dropped_ringbuf_full: 2,
            dropped_distinct_full: 3,
            bpf_recursion_misses: 4,
            pair_start_map_full: 5,
            ..Default::default()
        };
        assert_eq!(
            all.drop_warning().unwrap(),
            "15 events were not (fully) recorded: 1 group table full (raise --max-groups), \
             2 ring buffer full (user space read too slowly: filter more in the kernel), \
             3 COUNT(DISTINCT) set full (event counted, value not) (raise --max-distinct), \
             4 skipped by the kernel while another BPF program ran on the CPU, \
             5 pairing starts not stored: start map full (their ends find no start) \
             (too many unmatched starts at once: filter the start event more)"
        );
    }

    /// Every loss counter of a window, set alone: totals, sums and
    /// descriptions count it (the tap's only where asked for).
    #[test]
    fn window_drops_count_and_name_every_cause() {
        let causes = WindowDrops::default().causes().map(|(c, _)| c);
        for (i, cause) in causes.iter().enumerate() {
            let mut d = WindowDrops::default();
            *d.counters_mut()[i].1 = 3;
            let mut sum = d;
            sum.add(&d);
            assert_eq!(sum.causes()[i], (*cause, 6), "{cause:?}");
            let tap = *cause == DropCause::TapFull;
            assert_eq!(d.query_total(), if tap { 0 } else { 3 }, "{cause:?}");
            let text = DropCause::describe(&d.causes());
            assert!(text.starts_with("3 "), "{text}");
            assert!(text.contains(cause.what()), "{cause:?}: {text}");
        }
    }
}
