//! What the split produces: the kernel part of a query ([`KernelPlan`]: its
//! event, filters, output, window, pairing) and the user-space remainder
//! ([`Split`]). A leaf of the split: the pass and the pairing fill it in,
//! codegen and the executor read it.

use crate::agg::{Func, Slot};
use crate::kexpr::{KExpr, KPred, StrSrc};
use crate::planner::WindowInput;
use crate::prepass::WindowSpec;
use datafusion::arrow::datatypes::{DataType, SchemaRef};
use datafusion::logical_expr::LogicalPlan;
use ebql_catalog::EventSchema;
use std::sync::Arc;

/// Table name of the placeholder scan the user-space plan reads kernel rows from.
pub const KERNEL_INPUT: &str = "__ebql_kernel";

/// A value the kernel produces per event: an integer expression or a string.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum ValueSrc {
    /// An integer expression.
    Int(KExpr),
    /// A string (`comm`, a char-array field, `str()`…).
    Str(StrSrc),
    /// Whether a string a `_str` helper reads was cut (`truncated(s)`,
    /// [`crate::strfn`]): the record holds the string (shared with a column
    /// of the same string, if any) and user space decides from its bytes.
    Truncated(StrSrc),
}

impl ValueSrc {
    /// True when producing it reads the task's user registers
    /// ([`KExpr::reads_user_regs`]).
    pub fn reads_user_regs(&self) -> bool {
        match self {
            ValueSrc::Int(e) => e.reads_user_regs(),
            ValueSrc::Str(s) | ValueSrc::Truncated(s) => s.reads_user_regs(),
        }
    }

    /// The value can be SQL NULL: a string a `_str` helper reads (and its
    /// `truncated()`) is NULL when the read fails
    /// ([`crate::contract::ctl::STR_READ_FAILED`]); every other kernel value is not.
    pub fn nullable(&self) -> bool {
        match self {
            ValueSrc::Int(_) => false,
            ValueSrc::Str(s) | ValueSrc::Truncated(s) => s.helper_buffer().is_some(),
        }
    }
}

/// A group key of an in-kernel aggregate.
#[derive(Clone, Debug)]
pub struct GroupKey {
    /// How the kernel computes the key.
    pub value: ValueSrc,
    /// The key is `cpu`: it is not stored in the map key, the per-CPU map already
    /// separates CPUs and user space reads the CPU index instead.
    pub per_cpu: bool,
    /// Type of the output column.
    pub data_type: DataType,
    /// The key as the plan shows it.
    pub text: String,
}

/// An aggregate computed in the kernel: one map value holds all aggregates of a group.
#[derive(Clone, Debug)]
pub struct GroupSpec {
    /// GROUP BY keys, in plan order.
    pub keys: Vec<GroupKey>,
    /// Aggregate states, deduplicated (SUM(x) and AVG(x) share one); at most 32,
    /// laid out after the count at [`GroupSpec::slot_offset`] (see [`crate::agg`]).
    pub slots: Vec<Slot>,
    /// Output aggregates in plan order: how each is computed, its type, its plan text.
    pub aggs: Vec<(Func, DataType, String)>,
}

impl GroupSpec {
    /// Byte offset of slot `i` in a map value: after the u64 count and the slots before it.
    pub fn slot_offset(&self, i: usize) -> u32 {
        8 + self.slots[..i].iter().map(|s| s.state.bytes()).sum::<u32>()
    }

    /// Size of a map value (one CPU's share) in bytes: the count and every slot.
    pub fn value_size(&self) -> u32 {
        self.slot_offset(self.slots.len())
    }
}

/// Largest map value of a per-CPU map in bytes (the kernel's
/// PCPU_MIN_UNIT_SIZE, kernel/bpf/hashtab.c): the count and every state.
pub const MAX_VALUE_BYTES: u32 = 32 * 1024;

/// What the kernel program emits.
#[derive(Clone, Debug)]
pub enum KernelOutput {
    /// One ring-buffer record per event that passed the filters, holding these columns.
    Stream {
        /// (output name, value, Arrow type) per column, in plan order.
        columns: Vec<(String, ValueSrc, DataType)>,
        /// `DISTINCT ON (keys)` keeping the most recent event
        /// ([`crate::latest`]): instead of one record per event, the kernel
        /// keeps the latest record per window and key, overwritten in a
        /// per-CPU hash; user space drains it when the window closes and
        /// its plan still picks the latest of the CPUs' records.
        latest: Option<Vec<GroupKey>>,
    },
    /// Per-group partial aggregates in a per-CPU hash map.
    Groups(GroupSpec),
}

/// The kernel half of a query.
#[derive(Clone, Debug)]
pub struct KernelPlan {
    /// The traced event.
    pub event: EventSchema,
    /// Conjuncts in emission order (cheapest, pid first), each with its SQL text.
    pub filters: Vec<(KPred, String)>,
    /// What the program writes for each event that passes the filters.
    pub output: KernelOutput,
    /// The WINDOW clause, if any.
    pub window: Option<WindowSpec>,
    /// For a join of two events: the start event and its program; `event`,
    /// `filters` and `output` are then the end event's program.
    pub pair: Option<PairPlan>,
    /// Syscall tracepoints of the plan that run on the raw syscall hook
    /// ([`crate::syscall_hook`]): their programs begin with the hook's guard
    /// and attach to it. Set after the split ([`crate::compile_query`]).
    pub hooks: Vec<crate::syscall_hook::RawHook>,
    /// In a query over several events that is not a pairing
    /// ([`crate::multi`]): the columns of the shared output this plan's
    /// program writes.
    pub branch: Option<Branch>,
    /// The query's other events, one plan (and program) each, writing the
    /// same output as this one ([`crate::multi`]); their `hooks` and
    /// `window` are this plan's.
    pub branches: Vec<KernelPlan>,
}

/// The first column of a query over several events' stream
/// ([`crate::multi`]): the index of the branch (the event scan, in plan
/// order) whose program wrote the row.
pub const BRANCH_COLUMN: &str = "__branch";

/// The group key, and the first column of the rows, that tells the events'
/// groups apart when each event of a query over several events is
/// aggregated on its own in one group table ([`crate::multi`]).
pub const SIDE_KEY: &str = "__side";

/// One event's part of a query over several events ([`crate::multi`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Branch {
    /// The value its program writes in the output's first column
    /// ([`crate::multi::BRANCH_COLUMN`]).
    pub index: u64,
    /// The output columns its program writes; it zeroes the others (an
    /// integer 0, an empty string).
    pub columns: std::ops::Range<usize>,
}

impl KernelPlan {
    /// This plan and its [`KernelPlan::branches`], in program order.
    pub fn all(&self) -> impl Iterator<Item = &KernelPlan> {
        std::iter::once(self).chain(&self.branches)
    }

    /// The raw hook `event` runs on, if it does.
    pub fn hook_of(
        &self,
        event: &ebql_catalog::EventName,
    ) -> Option<&crate::syscall_hook::RawHook> {
        self.hooks.iter().find(|h| h.tracefs == *event)
    }
}

/// A query split into kernel and user-space parts.
pub struct Split {
    /// The part compiled to BPF.
    pub kernel: KernelPlan,
    /// Schema of the rows the runtime hands to user space (one batch per window).
    pub kernel_schema: SchemaRef,
    /// Filled with the kernel's rows before each execution of `remainder`.
    pub input: Arc<WindowInput>,
    /// The user-space plan, reading from `input`; its output columns are the query's.
    pub remainder: LogicalPlan,
    /// What runs in user space and why, for `explain`.
    pub user_ops: Vec<String>,
    /// True when `remainder` is row-at-a-time (projection/filter): a raw stream
    /// without a window can be executed per drained batch instead of at the end.
    pub streamable: bool,
    /// LIMIT of a streamable query without window: stop after this many rows.
    pub stream_limit: Option<usize>,
}

/// The start side of a paired query (the end side is the [`KernelPlan`] itself).
#[derive(Clone, Debug)]
pub struct PairPlan {
    /// The start event (the join's left input).
    pub start: EventSchema,
    /// Conjuncts the start program tests before storing, cheapest first, with their SQL text.
    pub start_filters: Vec<(KPred, String)>,
    /// The start map's key: the start side's ON expressions, each stored as a u64.
    pub start_key: Vec<KExpr>,
    /// The end side's ON expressions, in the same order.
    pub end_key: Vec<KExpr>,
    /// Each key as the ON clause shows it.
    pub key_text: Vec<String>,
    /// Start columns stored in the map value, one u64 each, in value order:
    /// how the start program reads it and the column's name. The end program
    /// reads entry `i` as [`KExpr::Stored`] with `index: i`.
    pub stored: Vec<(KExpr, String)>,
    /// Start strings stored after the integer columns (at
    /// [`PairPlan::str_offset`]), [`StrSrc::record_bytes`] each rounded up to
    /// 8: how the start program reads it and the string as the query writes
    /// it. The end program reads entry `i` as [`StrSrc::Stored`] with `index: i`.
    pub stored_strs: Vec<(StrSrc, String)>,
    /// Conjuncts the end program tests before the lookup (thread filters, see the module doc).
    pub end_pre: Vec<(KPred, String)>,
    /// The key pairs `tid` with `tid` (a start and its end run on one thread).
    pub by_thread: bool,
    /// A `LEFT JOIN`: every start is a row, paired or not (see the module doc).
    pub outer: bool,
}

impl PairPlan {
    /// Start map key size in bytes (8 per key expression).
    pub fn key_size(&self) -> u32 {
        8 * self.start_key.len() as u32
    }

    /// Start map value size in bytes (8 per stored integer column, then the
    /// stored strings; at least 8: the kernel rejects empty values).
    pub fn value_size(&self) -> u32 {
        self.str_offset(self.stored_strs.len()).max(8)
    }

    /// Byte offset of stored string `i` in the start value (after the
    /// integer columns; `i == stored_strs.len()`: the end of the strings).
    pub fn str_offset(&self, i: usize) -> u32 {
        8 * self.stored.len() as u32
            + self.stored_strs[..i]
                .iter()
                .map(|(s, _)| s.record_bytes().div_ceil(8) * 8)
                .sum::<u32>()
    }

    /// The key is exactly the thread (`s.tid = e.tid` and nothing else): the
    /// start can live in the thread's task-local storage instead of a hash.
    pub fn keyed_by_thread_only(&self) -> bool {
        self.by_thread && self.start_key.len() == 1 && !self.outer
    }

    /// Task-storage value size in bytes: the `valid` word, then the value
    /// laid out as in the hash ([`crate::contract::task_start`]).
    pub fn task_value_size(&self) -> u32 {
        8 + self.str_offset(self.stored_strs.len())
    }
}
