//! The tracepoints queries are generated over, with their columns as
//! `ebql describe` reports them on Linux 6.x (fields from tracefs `format`
//! files, plus eBQL's system attributes).

/// SQL type of a column, as eBQL maps it (integers by size and sign, `char[N]` as strings).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ColType {
    /// Unsigned integer of this many bits.
    Unsigned(u8),
    /// Signed integer of this many bits.
    Signed(u8),
    /// A `char[N]` array or `comm` (UTF-8 string).
    Str,
}

/// A column of an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Column {
    /// Name as written in queries.
    pub name: &'static str,
    /// Its type.
    pub ty: ColType,
    /// Whether it makes a sensible GROUP BY key (a few distinct values per run, not a timestamp or pointer).
    pub key: bool,
}

const fn col(name: &'static str, ty: ColType, key: bool) -> Column {
    Column { name, ty, key }
}

use ColType::{Signed as S, Str, Unsigned as U};

/// System attributes every event has (README "Columns"); `pid` is left out:
/// every query filters on it already.
const SYSTEM: &[Column] = &[
    col("tid", U(32), true),
    col("cpu", U(32), true),
    col("uid", U(32), true),
    col("gid", U(32), true),
    col("comm", Str, true),
    col("time", U(64), false),
    col("cgroup", U(64), true),
];

const ENTER_PREAD: &[Column] = &[
    col("fd", U(32), true),
    col("count", U(64), true),
    col("pos", S(64), true),
    col("buf", U(64), false),
    col("__syscall_nr", S(32), true),
];
const EXIT_PREAD: &[Column] = &[col("ret", S(64), true), col("__syscall_nr", S(32), true)];
const SCHED_SWITCH: &[Column] = &[
    col("prev_comm", Str, true),
    col("prev_pid", S(32), true),
    col("prev_prio", S(32), true),
    col("prev_state", S(64), true),
    col("next_comm", Str, true),
    col("next_pid", S(32), true),
    col("next_prio", S(32), true),
];

const ENTER_OPENAT: &[Column] = &[
    col("dfd", S(32), true),
    col("flags", S(32), true),
    col("mode", U(16), true),
    // The path the pointer points to, read by the probe (a string "column").
    col("str(filename)", Str, true),
    col("__syscall_nr", S(32), true),
];
/// `raw_syscalls:sys_enter`: the array elements `args[N]` as columns.
const RAW_ENTER: &[Column] = &[
    col("id", S(64), true),
    col("args[0]", U(64), true),
    col("args[1]", U(64), true),
    col("args[2]", U(64), true),
    col("args[3]", U(64), false),
    col("args[5]", U(64), false),
];

/// A pairing's start (`e`, pread64 entries) columns, qualified.
const PAIR_START: &[Column] = &[
    col("e.fd", U(32), true),
    col("e.count", U(64), true),
    col("e.pos", S(64), true),
    col("e.tid", U(32), true),
    col("e.cpu", U(32), true),
    col("e.comm", Str, true),
    col("e.time", U(64), false),
];
/// A pairing's end (`x`, pread64 exits) columns, qualified.
const PAIR_END: &[Column] = &[
    col("x.ret", S(64), true),
    col("x.tid", U(32), true),
    col("x.cpu", U(32), true),
    col("x.comm", Str, true),
    col("x.time", U(64), false),
];

/// The key a pairing's ON clause pairs by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PairKey {
    /// `e.tid = x.tid`: a start and its end on one thread.
    Tid,
    /// `e.pid = x.pid`: the process (its pread64 calls run on one thread of the workload).
    Pid,
    /// `e.tid = x.tid AND e.pid = x.pid`: two keys (issue 19: a condition the
    /// optimizer derives from them must not be refused).
    TidPid,
}

/// A tracepoint queries are generated over, or a pairing of two.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// `syscalls:sys_enter_pread64`: fd (unsigned int), buf (pointer), count (size_t), pos (loff_t, signed).
    EnterPread,
    /// `syscalls:sys_exit_pread64`: ret (long: bytes read, or -errno).
    ExitPread,
    /// `sched:sched_switch`: prev/next comm (char[16]), pid, prio, prev_state.
    SchedSwitch,
    /// `syscalls:sys_enter_openat`: its path as `str(filename)`.
    EnterOpenat,
    /// `raw_syscalls:sys_enter`: every system call, `id` and `args[0..6]`.
    RawEnter,
    /// pread64 entries (`e`) paired with exits (`x`): `[LEFT] JOIN … ON` the key.
    PairPread {
        /// `LEFT JOIN`: unmatched starts are rows; conditions only on `e`.
        outer: bool,
        /// The ON clause.
        key: PairKey,
    },
    /// The start side of [`Event::PairPread`] alone: what a LEFT JOIN's WHERE may read.
    PairStart,
}

impl Event {
    /// Every single event, in a fixed order.
    pub const ALL: [Event; 5] = [
        Event::EnterPread,
        Event::ExitPread,
        Event::SchedSwitch,
        Event::EnterOpenat,
        Event::RawEnter,
    ];

    /// What is written after FROM: the event name, or a pairing's join.
    pub fn table(self) -> String {
        match self {
            Event::EnterPread | Event::PairStart => "tracepoint/syscalls/sys_enter_pread64".into(),
            Event::ExitPread => "tracepoint/syscalls/sys_exit_pread64".into(),
            Event::SchedSwitch => "tracepoint/sched/sched_switch".into(),
            Event::EnterOpenat => "tracepoint/syscalls/sys_enter_openat".into(),
            Event::RawEnter => "tracepoint/raw_syscalls/sys_enter".into(),
            Event::PairPread { outer, key } => format!(
                "tracepoint/syscalls/sys_enter_pread64 AS e {}JOIN tracepoint/syscalls/sys_exit_pread64 AS x ON {}",
                if outer { "LEFT " } else { "" },
                match key {
                    PairKey::Tid => "e.tid = x.tid",
                    PairKey::Pid => "e.pid = x.pid",
                    PairKey::TidPid => "e.tid = x.tid AND e.pid = x.pid",
                }
            ),
        }
    }

    /// The pid column every query filters on (`e.pid` in a pairing).
    pub fn pid(self) -> &'static str {
        match self {
            Event::PairPread { .. } | Event::PairStart => "e.pid",
            _ => "pid",
        }
    }

    /// Whether this is a pairing of two events.
    pub fn paired(self) -> bool {
        matches!(self, Event::PairPread { .. })
    }

    /// The event's own fields (not the system attributes).
    pub fn fields(self) -> &'static [Column] {
        match self {
            Event::EnterPread => ENTER_PREAD,
            Event::ExitPread => EXIT_PREAD,
            Event::SchedSwitch => SCHED_SWITCH,
            Event::EnterOpenat => ENTER_OPENAT,
            Event::RawEnter => RAW_ENTER,
            Event::PairPread { .. } | Event::PairStart => &[],
        }
    }

    /// Fields, then system attributes (a pairing: each side's, qualified).
    pub fn columns(self) -> Vec<Column> {
        match self {
            Event::PairPread { .. } => PAIR_START.iter().chain(PAIR_END).copied().collect(),
            Event::PairStart => PAIR_START.to_vec(),
            _ => self.fields().iter().chain(SYSTEM).copied().collect(),
        }
    }

    /// Integer columns.
    pub fn int_columns(self) -> Vec<Column> {
        self.columns().into_iter().filter(|c| c.ty != Str).collect()
    }

    /// String columns (`char[N]` fields and `comm`).
    pub fn str_columns(self) -> Vec<Column> {
        self.columns().into_iter().filter(|c| c.ty == Str).collect()
    }
}

/// Every column of every generated event, pairings' too.
fn every_column() -> impl Iterator<Item = Column> {
    let pair = Event::PairPread {
        outer: false,
        key: PairKey::Tid,
    };
    Event::ALL
        .into_iter()
        .chain([pair])
        .flat_map(|e| e.columns())
}

/// Whether the column `name` (of any generated event) is an unsigned 64-bit integer.
pub fn is_u64(name: &str) -> bool {
    every_column().any(|c| c.name == name && c.ty == U(64))
}

/// Whether the column `name` (of any generated event) is a signed 64-bit integer.
pub fn is_i64(name: &str) -> bool {
    every_column().any(|c| c.name == name && c.ty == S(64))
}

/// Whether the column `name` (of any generated event) is an unsigned integer.
pub fn is_unsigned(name: &str) -> bool {
    every_column().any(|c| c.name == name && matches!(c.ty, U(_)))
}
