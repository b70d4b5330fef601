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

/// A tracepoint queries are generated over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// `syscalls:sys_enter_pread64`: fd (unsigned int), buf (pointer), count (size_t), pos (loff_t, signed).
    EnterPread,
    /// `syscalls:sys_exit_pread64`: ret (long: bytes read, or -errno).
    ExitPread,
    /// `sched:sched_switch`: prev/next comm (char[16]), pid, prio, prev_state.
    SchedSwitch,
}

impl Event {
    /// Every event, in a fixed order.
    pub const ALL: [Event; 3] = [Event::EnterPread, Event::ExitPread, Event::SchedSwitch];

    /// The event name as written after FROM.
    pub fn table(self) -> &'static str {
        match self {
            Event::EnterPread => "tracepoint/syscalls/sys_enter_pread64",
            Event::ExitPread => "tracepoint/syscalls/sys_exit_pread64",
            Event::SchedSwitch => "tracepoint/sched/sched_switch",
        }
    }

    /// The event's own fields (not the system attributes).
    pub fn fields(self) -> &'static [Column] {
        match self {
            Event::EnterPread => ENTER_PREAD,
            Event::ExitPread => EXIT_PREAD,
            Event::SchedSwitch => SCHED_SWITCH,
        }
    }

    /// Fields, then system attributes.
    pub fn columns(self) -> Vec<Column> {
        self.fields().iter().chain(SYSTEM).copied().collect()
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

/// Whether the column `name` (of any generated event) is an unsigned 64-bit integer.
pub fn is_u64(name: &str) -> bool {
    Event::ALL
        .iter()
        .flat_map(|e| e.columns())
        .any(|c| c.name == name && c.ty == U(64))
}

/// Whether the column `name` (of any generated event) is a signed 64-bit integer.
pub fn is_i64(name: &str) -> bool {
    Event::ALL
        .iter()
        .flat_map(|e| e.columns())
        .any(|c| c.name == name && c.ty == S(64))
}

/// Whether the column `name` (of any generated event) is an unsigned integer.
pub fn is_unsigned(name: &str) -> bool {
    Event::ALL
        .iter()
        .flat_map(|e| e.columns())
        .any(|c| c.name == name && matches!(c.ty, U(_)))
}
