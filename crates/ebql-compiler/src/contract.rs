//! The kernel↔user-space contract: what a program and the user-space
//! runtime agree on, with no code generation in it. The code generator
//! writes to these layouts, the runtime creates the maps and the decoder
//! reads the layouts; neither side assumes anything else about the other.
//!
//! - the control map's value ([`ctl`]): window generation, sequence, drops;
//! - each program's own per-CPU event counters ([`counters`]): events seen, events matched;
//! - the maps a program declares ([`MapSpec`]), referenced by index;
//! - where each value lies in group-table keys, map values and ring-buffer
//!   records ([`OutputLayout`], [`Stored`]); the map value's aggregate
//!   states are laid out by [`crate::agg`];
//! - the values user space assembles into Arrow columns ([`Cell`]).

/// Width and signedness of an integer value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct IntType {
    /// Width in bits: 8, 16, 32 or 64.
    pub bits: u8,
    /// Two's complement (sign-extended to 64 bits in registers) if true.
    pub signed: bool,
}

impl IntType {
    /// Unsigned 64-bit (Arrow `UInt64`).
    pub const U64: IntType = IntType {
        bits: 64,
        signed: false,
    };
    /// Signed 64-bit (Arrow `Int64`).
    pub const I64: IntType = IntType {
        bits: 64,
        signed: true,
    };

    /// Smallest value of the type, as i128.
    pub fn min(self) -> i128 {
        if self.signed {
            -(1i128 << (self.bits - 1))
        } else {
            0
        }
    }

    /// Largest value of the type, as i128.
    pub fn max(self) -> i128 {
        if self.signed {
            (1i128 << (self.bits - 1)) - 1
        } else {
            (1i128 << self.bits) - 1
        }
    }

    /// Every value of `self` is a value of `wider` (casting cannot fail or change it).
    pub fn fits_in(self, wider: IntType) -> bool {
        wider.min() <= self.min() && self.max() <= wider.max()
    }
}

/// Layout of the control map's single value (a mmapable array shared with user space).
///
/// Drop counters come in pairs: a time-windowed probe counts a drop in the
/// counter of its generation's parity (`offset + 8 * (gen & 1)`), so when
/// user space closes generation g (after the grace period) that counter holds
/// exactly the drops of window g; it reads and zeroes it before g+2 opens.
/// Other probes use the first counter of the pair.
pub mod ctl {
    /// Current time-window generation (u64), written by user space.
    pub const GEN: u32 = 0;
    /// Sequence number of events past the filter (u64), for count windows.
    pub const SEQ: u32 = 8;
    /// Events not recorded because the group table was full (2 × u64).
    pub const DROP_GROUPS_FULL: u32 = 16;
    /// Events not recorded because the ring buffer was full (2 × u64).
    pub const DROP_RINGBUF_FULL: u32 = 32;
    /// Events the differential oracle's tap could not record (2 × u64).
    pub const DROP_TAP_FULL: u32 = 48;
    /// Pairing: unmatched starts a newer start of the same key overwrote (u64, all windows).
    pub const PAIR_OVERWRITTEN: u32 = 64;
    // 72: unused (ends without a start are counted per CPU:
    // counters::ENDS_WITHOUT_START, off this often-read cache line).
    /// Pairing: starts not stored (u64, all windows): the hash start map was
    /// full, or the thread's task-local storage could not be allocated.
    pub const PAIR_START_FULL: u32 = 80;
    /// Events whose value COUNT(DISTINCT) could not record because the distinct set was full (2 × u64).
    pub const DROP_DISTINCT_FULL: u32 = 88;
    /// Strings a `bpf_probe_read_*_str` helper could not read (2 × u64):
    /// the helper returned a negative errno (a bad address, or a user page
    /// that is not resident), so the value is SQL NULL. Not a loss: the
    /// event is counted and its row kept. One per failed read of a filter,
    /// a group key or a row (the oracle's tap does not count its own).
    pub const STR_READ_FAILED: u32 = 104;
    /// Time windows: the instant each generation opened (its window's
    /// start, CLOCK_MONOTONIC ns as `bpf_ktime_get_ns`), generation g at
    /// [`cut_slot`]`(g)` (4 × u64). A slot whose top bit is set holds a
    /// cut not chosen yet, `!floor`: the cut, once chosen, will be later
    /// than `floor` ([`NOT_CHOSEN`] is floor 0).
    ///
    /// A probe puts its event in the generation whose window its `time`
    /// falls in, not merely the one it read: with g = [`GEN`], an event
    /// timed before g's cut goes to g − 1, one timed at or after g + 1's cut
    /// to g + 1. When g + 1's cut is not chosen yet, the probe keeps g and
    /// makes sure the cut will be later than its time: if the floor is not
    /// already past it, it raises the floor to `time` + [`FLOOR_AHEAD_NS`]
    /// with a compare-and-swap (a lost swap is retried with the value
    /// seen, [`CUT_ATTEMPTS`] times, then counted in [`CUT_RACES`]).
    ///
    /// User space chooses g + 1's cut c with a compare-and-swap too, later
    /// than the floor it replaces, once g − 1's state is drained
    /// ([`NOT_CHOSEN`] to g + 2's slot first), and stores g + 1 to [`GEN`]
    /// once c has passed. Each move is then safe: an event timed before c
    /// was running before that store, so the grace period that precedes
    /// draining g waits for it; g + 1's state (g − 1's parity) was drained
    /// and zeroed before c was chosen; and an event timed at or after c
    /// either read c or had its time below the floor c exceeds, however
    /// long user space stalled while choosing. So `time` lies in
    /// `[window_start, window_end)` exactly, even for a probe preempted
    /// across a cut (`ebql::executor::cuts`).
    pub const CUT: u32 = 120;
    /// Time windows: events whose probe lost the race to raise a cut's
    /// floor [`CUT_ATTEMPTS`] times in a row (u64, all windows). Such an
    /// event keeps the generation it read, so its `time` may lie past its
    /// window's end; it is still counted once. Never expected: each lost
    /// swap means another CPU raised the floor in the same instant.
    pub const CUT_RACES: u32 = 152;
    /// Value size in bytes.
    pub const SIZE: u32 = 160;

    /// A cut not chosen yet, with no floor (`!0`, see [`CUT`]).
    pub const NOT_CHOSEN: u64 = u64::MAX;
    /// How far past its own time a probe raises a cut's floor (ns): at
    /// most one compare-and-swap per this much time while a cut is open.
    pub const FLOOR_AHEAD_NS: i32 = 1_000_000;
    /// Swaps a probe tries before it counts a race ([`CUT_RACES`]). A
    /// first swap is lost when another CPU raised the floor in the same
    /// instant, past this probe's time unless that CPU stalled for
    /// [`FLOOR_AHEAD_NS`] between its clock read and its swap; so a second
    /// swap is almost never tried, and a third would be lost only to a
    /// second such stall.
    pub const CUT_ATTEMPTS: usize = 2;

    /// Offset of the cut of generation `gen` ([`CUT`]).
    pub fn cut_slot(gen: u64) -> u32 {
        CUT + 8 * (gen & 3) as u32
    }

    /// Offset of the drop counter of `pair` for generation `gen` (time windows).
    pub fn drop_slot(pair: u32, gen: u64) -> u32 {
        pair + 8 * (gen & 1) as u32
    }
}

/// Each program's own event counters: one [`MapKind::PercpuArray`] (name
/// `ebql_counts`, at index `Compiled::counters` in `Compiled::maps`) whose
/// key is the program's index in `Compiled::programs` and whose value, per
/// CPU, is `[seen u64][matched u64]`. A program increments its own CPU's
/// slots without atomics (a CPU runs one tracing BPF program at a time);
/// user space sums the CPUs. Whole-run totals, never reset.
///
/// They replace the kernel's global `bpf_stats` (about 70–120 ns on every
/// run of every BPF program of the host while on) for counting. The array
/// lookup with a constant key is inlined by the verifier (Linux ≥ 6.10 on
/// x86-64: no helper call remains); seen + matched cost about 2 ns per
/// counted event on the 2-core test VM, but counting *seen* first thing at
/// the hook cost every event about 7 ns (program run time with and without
/// the counters; BENCHMARKS.md, "Issue 11: bpf_stats"), as much as the
/// whole difference between eBQL's probe and an empty one for the
/// processes a query does not select. So *seen* is counted after the
/// program's leading pid/tid tests: those processes pay nothing for it.
/// The hook's own run count, every process included, is the kernel's
/// `bpf_stats` `run_cnt`, when asked for.
pub mod counters {
    /// Map name as `bpftool map show` prints it.
    pub const MAP_NAME: &str = "ebql_counts";
    /// Events seen (u64): runs of the program at its hook that passed its
    /// leading pid/tid tests, i.e. the events of the processes and threads
    /// the query selects (every run when it has no such test, or when its
    /// WHERE is always false). Counted before any other filter and, for a
    /// pairing's end program, before the lookup of the start.
    pub const SEEN: i16 = 0;
    /// Events matched (u64): runs that passed all of the program's kernel
    /// filters, counted right after them, before any aggregation or
    /// ring-buffer work (so an event dropped for a full table or ring buffer
    /// is matched and dropped). A pairing's end program counts the ends that
    /// found their start and passed the end's filters; its start program,
    /// the starts that passed the start's filters (stored or not).
    pub const MATCHED: i16 = 8;
    /// A pairing's end program: ends that found no start of their key
    /// (u64, all windows); 0 in other programs. Per CPU because every end
    /// of another thread's call at a busy hook (a client's `recvfrom`
    /// while the server is traced) counts here.
    pub const ENDS_WITHOUT_START: i16 = 16;
    /// Value size per CPU in bytes.
    pub const SIZE: u32 = 24;
}

/// Per-CPU group values larger than this are preallocated
/// ([`MapKind::PercpuHashPrealloc`]): measured on 6.18, inserting a 30 KiB
/// per-CPU value from the probe fails after the first group (-ENOMEM).
pub const PREALLOC_ABOVE_BYTES: u32 = 4096;

/// Memory per CPU a preallocated group table may take: its entries are
/// capped at this divided by the value size (a full table counts drops).
pub const PREALLOC_BUDGET_BYTES: u32 = 16 << 20;

/// Index of the control map in `Compiled::maps`.
pub const MAP_CTL: usize = 0;
/// Index of the output map (group table or ring buffer) in `Compiled::maps`.
pub const MAP_OUT: usize = 1;
/// Index of the differential oracle's tap ring buffer in `Compiled::maps`, if tapped.
pub const MAP_TAP: usize = 2;
/// Index of the start map of a paired query in `Compiled::maps` (paired queries have no tap).
pub const MAP_PAIR: usize = 2;
/// Index of the per-CPU count of unmatched starts in `Compiled::maps`, when
/// the start map is task storage ([`MapKind::TaskStorage`]): user space cannot
/// list task storage, so the starts left at stop are this count's sum over
/// CPUs (a [`MapKind::PercpuArray`] of one i64, +1 per start stored over no
/// unmatched start, −1 per end that takes its start; a CPU's value alone may be negative).
pub const MAP_PAIR_LIVE: usize = 3;

/// Layout of a task-storage start value (`[valid u64][stored column u64 …][stored strings …]`:
/// after the `valid` word, the value as a pairing's hash holds it, `crate::pair::PairPlan::str_offset`).
pub mod task_start {
    /// Offset of the `valid` word: 1 while the thread has an unmatched start, else 0.
    pub const VALID: i16 = 0;
    /// Offset of stored column `i`: `COLUMNS + 8 * i`.
    pub const COLUMNS: i16 = 8;
}

/// Kind of a BPF map the program needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MapKind {
    /// BPF_MAP_TYPE_PERCPU_HASH (elements allocated on insert).
    PercpuHash,
    /// BPF_MAP_TYPE_PERCPU_HASH with every element allocated at creation:
    /// for values above [`PREALLOC_ABOVE_BYTES`], which the probe's insert
    /// cannot allocate (per-CPU memory is not populated in atomic context).
    PercpuHashPrealloc,
    /// BPF_MAP_TYPE_ARRAY with BPF_F_MMAPABLE.
    MmapArray,
    /// BPF_MAP_TYPE_ARRAY: the all-zero value new groups start from (read-only
    /// to the program), a sleepable program's fault-in buffer (written, never read).
    Array,
    /// BPF_MAP_TYPE_RINGBUF; `max_entries` is its size in bytes (power of two).
    RingBuf,
    /// BPF_MAP_TYPE_HASH, preallocated (the start map of a pairing: one
    /// insert and one delete per pair, no allocation on the probe's path).
    Hash,
    /// BPF_MAP_TYPE_HASH shared by all CPUs, elements allocated on insert
    /// (the COUNT(DISTINCT) set: sized for the worst window, mostly empty).
    SharedHash,
    /// BPF_MAP_TYPE_TASK_STORAGE: one value per thread, allocated at the
    /// thread's first start and freed with the thread (or the map). The start
    /// map of a pairing keyed by the thread: no key, no entry limit, no delete.
    /// `key_size` is 4 (a pidfd, for syscalls), `max_entries` 0; the runtime
    /// describes key and value in BTF, as the kernel requires.
    TaskStorage,
    /// BPF_MAP_TYPE_PERCPU_ARRAY (key u32): per-CPU counters the program
    /// updates without atomics (one CPU runs one of our programs at a time).
    PercpuArray,
    /// BPF_MAP_TYPE_STACK_TRACE: key u32 stack id, value `STACK_DEPTH` u64
    /// instruction pointers (innermost first, zero after the last frame),
    /// written by `bpf_get_stackid`, read by user space to symbolize.
    StackTrace,
}

/// Frames kept per stack in the stack-trace map (the kernel's default
/// `perf_event_max_stack`); a value is this many u64 addresses.
pub const STACK_DEPTH: u32 = 127;

/// Name of the Arrow field metadata key marking a stack column: its values
/// are stack ids in the kernel and symbolized frames in user space. Value
/// `"user"` or `"kernel"`.
pub const STACK_METADATA: &str = "ebql.stack";

/// A map to create before loading the program.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MapSpec {
    /// Map name as `bpftool map show` prints it (≤ 15 chars, `ebql_` prefix).
    pub name: String,
    /// Map type.
    pub kind: MapKind,
    /// Key size in bytes (0 for the ring buffer).
    pub key_size: u32,
    /// Value size in bytes, per CPU for the per-CPU hash (0 for the ring buffer).
    pub value_size: u32,
    /// Maximum number of entries; for [`MapKind::RingBuf`], the buffer size in
    /// bytes; 0 for [`MapKind::TaskStorage`] (one value per thread).
    pub max_entries: u32,
}

/// How a value is stored in keys and records.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stored {
    /// `bytes` little-endian bytes (1, 2, 4 or 8) holding a value of type `ty`.
    Int {
        /// Width and signedness of the value (user space wraps what it reads to it).
        ty: IntType,
        /// Bytes stored: 1, 2, 4 or 8 (always 8 in ring-buffer records).
        bytes: u32,
    },
    /// NUL-padded bytes of this length (rounded up to 8 in the layout).
    Str(u32),
    /// A string a `bpf_probe_read_*_str` helper read with a buffer of `n`
    /// bytes (`str(p, n)`) into `n + 1` bytes, followed by its NULL flag
    /// byte (`n + 2` bytes, rounded up to 8 in records): the helper copied
    /// `min(length, n)` bytes and a NUL, so the text is the bytes before the
    /// first NUL cut to `n - 1` bytes ([`str_text`]); byte `n + 1` is 1 when
    /// the helper failed (the value is SQL NULL, [`str_null`]), else 0.
    ReadStr(u32),
    /// Whether the [`Stored::ReadStr`]`(n)` at the same offset was cut: its
    /// first NUL is at byte `n` ([`str_truncated`]); NULL when the string is.
    /// Shares the string's bytes.
    Truncated(u32),
    /// A string a `_str` helper read into a group key of `n` bytes, zeroed
    /// before the read: a string read keeps its NUL within the `n` bytes, so
    /// the last byte is 0 for every value; it is 1 when the read failed (SQL
    /// NULL, a group of its own, apart from the empty string): [`key_str_null`].
    ReadKey(u32),
    /// `bytes(p, len, n)` read into `BYTES_HEADER + n` bytes
    /// ([`BYTES_HEADER`]): the u32 count of bytes read at
    /// offset 0, the NULL flag at 4 (the read failed), the cut flag at 5
    /// (`len` was above `n`), the data from 8 ([`bytes_value`]).
    ReadBytes(u32),
    /// Whether the [`Stored::ReadBytes`]`(n)` at the same offset was cut
    /// ([`bytes_truncated`]); NULL when the value is. Shares its bytes.
    BytesTruncated(u32),
}

/// Bytes before the data of a `bytes()` value in a record
/// ([`Stored::ReadBytes`]): the u32 count of bytes read, the NULL flag
/// byte, the cut flag byte, two bytes of padding (the data starts 8-byte
/// aligned).
pub const BYTES_HEADER: u32 = 8;

/// The value of a [`Stored::ReadBytes`]`(n)` whose bytes are `b`: `None`
/// when the read failed (SQL NULL), else the bytes read (at most `n`).
pub fn bytes_value(b: &[u8], n: u32) -> Option<&[u8]> {
    if b.get(4).is_some_and(|&f| f != 0) {
        return None;
    }
    let read = (uint_at(b, 0, 4) as usize).min(n as usize);
    let data = BYTES_HEADER as usize;
    b.get(data..data + read)
}

/// Whether the [`Stored::ReadBytes`] whose bytes are `b` was cut; `None` when it is NULL.
pub fn bytes_truncated(b: &[u8]) -> Option<bool> {
    match b.get(4) {
        Some(0) => Some(b.get(5).is_some_and(|&f| f != 0)),
        _ => None,
    }
}

/// Whether the [`Stored::ReadStr`]`(n)` whose bytes are `b` (`n + 2` of
/// them) could not be read: its flag byte `n + 1` is set (SQL NULL).
pub fn str_null(b: &[u8], n: u32) -> bool {
    b.get(n as usize + 1).is_some_and(|&f| f != 0)
}

/// Whether the [`Stored::ReadKey`]`(n)` whose bytes are `b` (`n` of them)
/// could not be read: its last byte is set (SQL NULL).
pub fn key_str_null(b: &[u8], n: u32) -> bool {
    n > 0 && b.get(n as usize - 1).is_some_and(|&f| f != 0)
}

/// The text of a [`Stored::ReadStr`]`(n)` whose bytes are `b` (`n + 1` of
/// them): up to the first NUL, at most `n - 1` bytes.
pub fn str_text(b: &[u8], n: u32) -> &[u8] {
    let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    &b[..end.min(n.saturating_sub(1) as usize)]
}

/// Whether the [`Stored::ReadStr`]`(n)` whose bytes are `b` was cut: the
/// string had at least `n` bytes (the helper filled the `n + 1`-byte
/// buffer), so keeping `n - 1` of them lost some.
pub fn str_truncated(b: &[u8], n: u32) -> bool {
    b.iter().position(|&c| c == 0).unwrap_or(b.len()) >= n as usize
}

/// Where user space finds each value in what the probe writes.
#[derive(Clone, Debug)]
pub enum OutputLayout {
    /// Group table: key = packed fields (see `emit_groups`), value = [count u64][slots …]
    /// per CPU, slot `i` at [`crate::split::GroupSpec::slot_offset`] (SUM slots are 128-bit: low, high).
    Groups {
        /// Key size in bytes: the packed fields, rounded up to a multiple of 4.
        key_size: u32,
        /// Value size in bytes per CPU ([`crate::split::GroupSpec::value_size`]).
        value_size: u32,
        /// (offset, bytes) of the window tag: the time-window generation (u32,
        /// wrapping) or the count-window number (u64).
        window_tag: Option<(u32, u32)>,
        /// Per group key, in plan order: `None` for the per-CPU `cpu` key, else (offset, storage).
        keys: Vec<Option<(u32, Stored)>>,
        /// Index in `Compiled::maps` of the COUNT(DISTINCT) set, if any: its
        /// keys are a group key (same layout, window tag included) followed by
        /// the u64 value; user space deletes a window's entries with its groups.
        distinct_set: Option<usize>,
        /// The table is a per-CPU array indexed by slot ([`crate::groupmap`]),
        /// not a hash: its map key is the u32 slot, and the key layout above
        /// is what [`ArrayIndex::slot_key`] rebuilds per slot.
        /// User space reads a closed window's slots (a group exists where a
        /// CPU's count is non-zero) and writes them back to zero.
        array: Option<ArrayIndex>,
        /// Index in `Compiled::maps` of the overflow hash of an array with a
        /// dense-range key ([`ArrayIndex::overflow`]): the
        /// groups whose key falls outside the array, keyed and drained like
        /// a hash group table. A group is in the array or here, never both.
        overflow: Option<usize>,
    },
    /// Ring-buffer records: [generation u64 if time-windowed][columns].
    Stream {
        /// Record size in bytes (at least 8).
        record_size: u32,
        /// The record starts with the u64 time-window generation (time windows only).
        gen_in_record: bool,
        /// Per output column, in plan order: (offset in the record, storage).
        columns: Vec<(u32, Stored)>,
        /// A `LEFT JOIN` pairing: rows of unmatched starts, whose end columns are NULL.
        outer: Option<Outer>,
        /// `DISTINCT ON`: the records are not in a ring buffer but in the
        /// latest-record table, one per window, key and CPU.
        latest: Option<LatestTable>,
    },
}

/// The latest-record table of a `DISTINCT ON` stream ([`crate::latest`]): a
/// per-CPU hash at [`MAP_OUT`] keyed like a hash group table (window tag,
/// keys), whose value per CPU is a stream record (the layout's) followed by
/// the u64 count of the events that wrote it there (0: the key has no
/// event on that CPU). User space reads a closed window's entries, keeps
/// each CPU's record whose count is not 0 and deletes the entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LatestTable {
    /// Key size in bytes: the packed fields, rounded up to a multiple of 4.
    pub key_size: u32,
    /// (offset, bytes) of the window tag in the key: the time-window
    /// generation's low 32 bits (only time windows keep a latest table).
    pub window_tag: Option<(u32, u32)>,
    /// Bytes per CPU: the record, then the count.
    pub value_size: u32,
}

impl OutputLayout {
    /// A stream's record size (bytes) and columns (offset, storage), when
    /// every record is one event's (no `LEFT JOIN` pairing, whose unmatched
    /// starts' records hold start-map copies); `None` for other layouts.
    pub fn inner_stream(&self) -> Option<(u32, &[(u32, Stored)])> {
        match self {
            OutputLayout::Stream {
                record_size,
                columns,
                outer: None,
                ..
            } => Some((*record_size, columns)),
            _ => None,
        }
    }
}

/// Bytes a value of `stored` takes in a ring-buffer record (values are
/// 8-byte aligned there).
fn record_bytes(stored: Stored) -> u32 {
    let round8 = |n: u32| n.div_ceil(8) * 8;
    match stored {
        Stored::Int { .. } => 8,
        Stored::Str(len) | Stored::ReadKey(len) => round8(len),
        Stored::ReadStr(n) | Stored::Truncated(n) => round8(n + 2),
        Stored::ReadBytes(n) | Stored::BytesTruncated(n) => round8(BYTES_HEADER + n),
    }
}

/// Where a stream's record ends in a `bytes()` value, when it does: the
/// offset and bound `n` of the [`Stored::ReadBytes`] after every other
/// value (no `LEFT JOIN` pairing, whose start-map copies could follow).
/// The probe writes only the bytes it read of it, so a record's first
/// [`BytesTail::used_len`] bytes are all it holds: the probe outputs only
/// those to the ring buffer (a sleepable program reserves the whole record,
/// whose rest is whatever the ring buffer held before), never read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BytesTail {
    /// Offset of the value's header in the record.
    pub offset: u32,
    /// The value's bound `n` (bytes of data after the header).
    pub n: u32,
}

impl BytesTail {
    /// The tail of `layout`'s records, if they end in one `bytes()` value.
    pub fn of(layout: &OutputLayout) -> Option<BytesTail> {
        let (record_size, columns) = layout.inner_stream()?;
        // The last bytes() value of the record (a capture may hold others before it).
        let (offset, n) = columns
            .iter()
            .filter_map(|&(off, st)| match st {
                Stored::ReadBytes(n) => Some((off, n)),
                _ => None,
            })
            .max_by_key(|&(off, _)| off)?;
        let before = columns.iter().all(|&(off, st)| match st {
            Stored::ReadBytes(_) | Stored::BytesTruncated(_) if off == offset => true,
            other => off + record_bytes(other) <= offset,
        });
        (before && offset + record_bytes(Stored::ReadBytes(n)) == record_size)
            .then_some(BytesTail { offset, n })
    }

    /// Bytes of `rec` that hold values: up to the last byte the `bytes()`
    /// value read (its count, at most `n`, from its header).
    pub fn used_len(&self, rec: &[u8]) -> usize {
        let at = self.offset as usize;
        let read = (uint_at(rec, at, 4) as usize).min(self.n as usize);
        (at + BYTES_HEADER as usize + read).min(rec.len())
    }
}

/// The rows of a `LEFT JOIN` pairing ([`crate::pair`]): a pair's row as
/// usual, and a row for each unmatched start, written by the start program
/// when a newer start of its key replaces it, or by user space from the
/// entries left in the hash start map at stop ([`Outer::unmatched_row`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outer {
    /// Offset of the u64 that is 1 in a pair's row, 0 in an unmatched start's.
    pub matched_at: u32,
    /// Columns (indexes into the layout's columns) of the end event: NULL in
    /// an unmatched start's row.
    pub end_columns: Vec<usize>,
    /// How an unmatched start's row is made from its start-map value:
    /// (offset in the row, offset in the value, bytes) copies, one per
    /// start column or string the row holds.
    pub from_start: Vec<(u32, u32, u32)>,
    /// Bytes of a start-map value (a lookup's buffer).
    pub value_size: u32,
}

impl Outer {
    /// The row of an unmatched start whose start-map value is `value`, in
    /// generation `gen` (time windows), `record_size` bytes as the probe
    /// writes them: end columns zero (NULL by `matched_at`).
    pub fn unmatched_row(&self, record_size: u32, gen: Option<u64>, value: &[u8]) -> Vec<u8> {
        let mut row = vec![0u8; record_size as usize];
        if let Some(g) = gen {
            row[0..8].copy_from_slice(&g.to_le_bytes());
        }
        for &(at, from, bytes) in &self.from_start {
            let (at, from, bytes) = (at as usize, from as usize, bytes as usize);
            row[at..at + bytes].copy_from_slice(&value[from..from + bytes]);
        }
        row
    }

    /// Whether the row `rec` is a pair's (else an unmatched start's).
    pub fn matched(&self, rec: &[u8]) -> bool {
        uint_at(rec, self.matched_at as usize, 8) != 0
    }
}

/// One value before it becomes part of an Arrow column.
#[derive(Clone, Debug, PartialEq)]
pub enum Cell {
    /// An integer as 64-bit two's complement (wrapped to its type), and its type.
    Int(u64, IntType),
    /// A string: the bytes before the first NUL, as text (`crate::bytetext`:
    /// lossless, invalid UTF-8 bytes as `\xHH` escapes).
    Str(String),
    /// A float (AVG).
    Float(f64),
    /// A nested value (a histogram's list of buckets), already of the column's Arrow type.
    Scalar(datafusion::common::ScalarValue),
    /// SQL NULL (SUM/MIN/MAX/AVG of a window without events).
    Null,
    /// A SUM whose exact value does not fit its output type: building the
    /// batch fails with this message (DataFusion would wrap silently); the
    /// executor fails that window only, with this message as its cause.
    Overflow(String),
}

/// Little-endian unsigned integer of `bytes` (1..=8) bytes at `off`.
/// Panics when `b` is shorter than `off + bytes` or `bytes` is above 8.
#[inline]
pub fn uint_at(b: &[u8], off: usize, bytes: usize) -> u64 {
    // One load, not a byte loop or a memcpy call: user space reads every
    // integer of every record through this, and records hold whole words.
    fn word<const N: usize>(b: &[u8], off: usize) -> [u8; N] {
        b[off..off + N].try_into().expect("a slice of N bytes")
    }
    match bytes {
        8 => u64::from_le_bytes(word(b, off)),
        4 => u64::from(u32::from_le_bytes(word(b, off))),
        2 => u64::from(u16::from_le_bytes(word(b, off))),
        1 => u64::from(b[off]),
        _ => {
            let mut le = [0u8; 8];
            le[..bytes].copy_from_slice(&b[off..off + bytes]);
            u64::from_le_bytes(le)
        }
    }
}

// Array group tables' layout ([`OutputLayout::Groups`]'s `array`): chosen
// by `crate::groupmap`, written by the probe, read back by user space.

/// One bounded key of an array group table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ArrayDim {
    /// Index of the key in `GroupSpec::keys` (crate::split).
    pub key: usize,
    /// Smallest value of the key.
    pub lo: i64,
    /// Number of values, `hi − lo + 1`.
    pub count: u32,
    /// Slots between consecutive values of this key.
    pub stride: u32,
    /// Where the bound comes from, for `explain`.
    pub why: String,
    /// A dense range, not a bound: the key can take values outside it,
    /// whose groups go to the overflow hash.
    pub partial: bool,
}

/// How an array group table is indexed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ArrayIndex {
    /// The bounded keys (the per-CPU `cpu` key has none), outermost last.
    pub dims: Vec<ArrayDim>,
    /// Slots of one window: the product of the counts.
    pub slots: u32,
    /// Windows the table holds: 2 for time windows (generation parity), else 1.
    pub windows: u32,
}

impl ArrayIndex {
    /// Entries of the array map.
    pub fn entries(&self) -> u32 {
        self.slots * self.windows
    }

    /// Whether some groups can fall outside the array (a dense-range key):
    /// the program then keeps those in an overflow hash.
    pub fn overflow(&self) -> bool {
        self.dims.iter().any(|d| d.partial)
    }

    /// The window parity of slot `index` (0 without time windows) and the
    /// value of each bounded key there: (key index, value).
    pub fn decode(&self, index: u32) -> (u32, Vec<(usize, i64)>) {
        let within = index % self.slots;
        let values = self
            .dims
            .iter()
            .map(|d| (d.key, d.lo + ((within / d.stride) % d.count) as i64))
            .collect();
        (index / self.slots, values)
    }

    /// The hash-table key of slot `index` in `layout`'s key layout (window
    /// tag = `tag_of(parity)`, each key value at its offset), so that user
    /// space decodes array slots and hash entries alike.
    pub fn slot_key(
        &self,
        index: u32,
        key_size: u32,
        keys: &[Option<(u32, Stored)>],
        window_tag: Option<(u32, u32)>,
        tag_of: impl Fn(u32) -> u64,
    ) -> Vec<u8> {
        let mut key = vec![0u8; key_size as usize];
        let (parity, values) = self.decode(index);
        let mut put = |off: u32, bytes: u32, v: u64| {
            key[off as usize..(off + bytes) as usize]
                .copy_from_slice(&v.to_le_bytes()[..bytes as usize])
        };
        if let Some((off, bytes)) = window_tag {
            put(off, bytes, tag_of(parity));
        }
        for (k, v) in values {
            if let Some(Some((off, Stored::Int { bytes, .. }))) = keys.get(k) {
                put(*off, *bytes, v as u64);
            }
        }
        key
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stream(record_size: u32, columns: Vec<(u32, Stored)>) -> OutputLayout {
        OutputLayout::Stream {
            record_size,
            gen_in_record: false,
            columns,
            outer: None,
            latest: None,
        }
    }

    /// Integers of every stored width read little-endian, the bytes around them ignored.
    #[test]
    fn integers_read_little_endian_at_their_width() {
        let b = [0xff, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x88, 0xff];
        assert_eq!(uint_at(&b, 1, 1), 0x01);
        assert_eq!(uint_at(&b, 1, 2), 0x0201);
        assert_eq!(uint_at(&b, 1, 4), 0x0403_0201);
        assert_eq!(uint_at(&b, 1, 8), 0x8807_0605_0403_0201);
        // Odd widths (a packed field) take the general path.
        assert_eq!(uint_at(&b, 1, 3), 0x03_0201);
    }

    /// A record that ends in `bytes(…, 64)` holds its values up to the
    /// last byte read; a count above the bound is cut to it.
    #[test]
    fn a_record_ending_in_bytes_is_used_up_to_the_bytes_read() {
        let int = Stored::Int {
            ty: IntType::U64,
            bytes: 8,
        };
        let layout = stream(
            16 + 8 + 64,
            vec![
                (0, int),
                (8, int),
                (16, Stored::ReadBytes(64)),
                (16, Stored::BytesTruncated(64)),
            ],
        );
        let tail = BytesTail::of(&layout).expect("ends in bytes()");
        assert_eq!(tail, BytesTail { offset: 16, n: 64 });
        let mut rec = vec![0u8; 88];
        rec[16..20].copy_from_slice(&5u32.to_le_bytes());
        assert_eq!(tail.used_len(&rec), 16 + 8 + 5);
        rec[16..20].copy_from_slice(&1000u32.to_le_bytes());
        assert_eq!(tail.used_len(&rec), 88);
        // Two bytes() values: the record ends in the second.
        let two = stream(
            24 + 72,
            vec![(0, Stored::ReadBytes(16)), (24, Stored::ReadBytes(64))],
        );
        assert_eq!(BytesTail::of(&two), Some(BytesTail { offset: 24, n: 64 }));
    }

    /// A value after the bytes, or a LEFT JOIN's rows, keep whole records.
    #[test]
    fn a_record_with_values_after_its_bytes_is_copied_whole() {
        let int = Stored::Int {
            ty: IntType::U64,
            bytes: 8,
        };
        assert_eq!(
            BytesTail::of(&stream(80, vec![(0, Stored::ReadBytes(64)), (72, int)])),
            None
        );
        assert_eq!(BytesTail::of(&stream(16, vec![(0, int), (8, int)])), None);
        let outer = OutputLayout::Stream {
            record_size: 72,
            gen_in_record: false,
            columns: vec![(0, Stored::ReadBytes(64))],
            outer: Some(Outer {
                matched_at: 0,
                end_columns: vec![],
                from_start: vec![],
                value_size: 8,
            }),
            latest: None,
        };
        assert_eq!(BytesTail::of(&outer), None);
    }
}
