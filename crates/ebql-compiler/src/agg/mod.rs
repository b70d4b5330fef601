//! In-kernel aggregates: one module per synopsis, DataFusion's `Accumulator`
//! split in two halves that meet in the map value.
//!
//! A group's map value (one per CPU, per-CPU hash) is
//! `[event count u64][state 0][state 1]…`, each state a multiple of 8 bytes
//! at [`crate::split::GroupSpec::slot_offset`]. The count is the group's
//! COUNT(*) and tells user space whether a CPU's (or a pane's) value holds
//! anything: a value whose count is 0 is all zeroes (the kernel zeroes the
//! other CPUs' values of a new element, and the probe creates groups from an
//! all-zero value), which is also the state every [`Synopsis`] starts from.
//!
//! A module owns, for its synopsis:
//! - the SQL functions it serves and their arguments ([`resolve`]);
//! - the state layout ([`Synopsis::bytes`]) and what `explain` says of it,
//!   including the error bound of an approximate one ([`Synopsis::describe`]);
//! - the BPF that folds one event into the state ([`Synopsis::emit_update`]);
//! - how two states combine, across CPUs and across the panes of a hopping
//!   window ([`Synopsis::merge`]);
//! - how a state becomes the output value ([`Func::evaluate`]).
//!
//! Adding an aggregate: a module with a [`Synopsis`] type, a [`State`]
//! variant, a [`Func`] variant and a line in [`resolve`].

pub mod count;
pub mod distinct;
pub mod hist;
pub mod hll;
pub mod min_max;
pub mod moments;
pub mod quantile;
pub mod sum;

use crate::contract::Cell;
use crate::kexpr::{IntType, KExpr, KPred};
use crate::CompileError;
use datafusion::arrow::datatypes::DataType;
use ebql_bpf::{Assembler, Reg};

/// What a synopsis' update code may use. The caller has evaluated the
/// argument into `value` and guards the update with the slot's predicate.
pub struct UpdateCx<'a> {
    /// The program being emitted.
    pub asm: &'a mut Assembler,
    /// Pointer to the group's map value (callee-saved: survives helper calls).
    pub value_ptr: Reg,
    /// Byte offset of this state in the map value.
    pub off: i16,
    /// The argument for this event (`None` for argument-less states).
    pub arg: Option<(Reg, IntType)>,
    /// Caller-saved registers free for the update (neither `value_ptr` nor the argument's).
    pub scratch: &'a [Reg],
}

impl UpdateCx<'_> {
    /// The argument register and type; an internal error for argument-less states.
    pub fn arg(&self) -> Result<(Reg, IntType), CompileError> {
        self.arg
            .ok_or_else(|| CompileError::Internal("aggregate update without its argument".into()))
    }

    /// Scratch register `i`; an internal error if there are not enough.
    pub fn scratch(&self, i: usize) -> Result<Reg, CompileError> {
        self.scratch.get(i).copied().ok_or_else(|| {
            CompileError::Internal("aggregate update: out of scratch registers".into())
        })
    }
}

/// The kernel state of an aggregate and its user-space combination.
pub trait Synopsis {
    /// Bytes of state per group per CPU: a multiple of 8.
    fn bytes(&self) -> u32;
    /// One line for `explain`: the layout and, if approximate, the error bound.
    fn describe(&self) -> String;
    /// Emits the BPF folding one event into the state. `first`: this is the
    /// CPU's first event of the group, the state is all zeroes.
    fn emit_update(&self, cx: &mut UpdateCx, first: bool) -> Result<(), CompileError>;
    /// Combines `from` into `into`; both are states of groups that saw at
    /// least one event (count > 0), `into` possibly a copy of another state.
    fn merge(&self, into: &mut [u8], from: &[u8]);
}

/// A synopsis kept in the map value, with its parameters.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum State {
    /// Exact 128-bit sum (SUM, AVG).
    Sum(sum::Sum),
    /// Minimum or maximum (MIN, MAX).
    Extreme(min_max::Extreme),
    /// Number of events satisfying the slot's predicate (COUNT(x) of a nullable x).
    CountWhen(count::CountWhen),
    /// Sum and sum of squares (VARIANCE, STDDEV).
    Moments(moments::Moments),
    /// HyperLogLog sketch (approx_distinct).
    Hll(hll::Hll),
    /// Number of values this window first inserted into the shared distinct set (COUNT(DISTINCT)).
    Distinct(distinct::Distinct),
    /// Power-of-two histogram (HIST).
    Log2Hist(hist::Log2Hist),
    /// Linear histogram (LHIST).
    LinearHist(hist::LinearHist),
    /// Log-linear quantile sketch (QUANTILE, approx_percentile_cont, approx_median).
    Sketch(quantile::Sketch),
}

impl State {
    /// The synopsis behind this state.
    pub fn synopsis(&self) -> &dyn Synopsis {
        match self {
            State::Sum(s) => s,
            State::Extreme(s) => s,
            State::CountWhen(s) => s,
            State::Moments(s) => s,
            State::Hll(s) => s,
            State::Distinct(s) => s,
            State::Log2Hist(s) => s,
            State::LinearHist(s) => s,
            State::Sketch(s) => s,
        }
    }

    /// Bytes of state per group per CPU.
    pub fn bytes(&self) -> u32 {
        self.synopsis().bytes()
    }

    /// Whether the update reads the slot's argument.
    pub fn needs_arg(&self) -> bool {
        !matches!(self, State::CountWhen(_))
    }

    /// Whether the states of two panes of a hopping window merge into the
    /// window's state. A COUNT(DISTINCT) counter does not (a value seen in
    /// both panes would count twice): such a window needs the panes' sets.
    pub fn merges_across_panes(&self) -> bool {
        !matches!(self, State::Distinct(_))
    }
}

/// One state in the map value: which synopsis, of which argument, under which predicate.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Slot {
    /// The synopsis and its parameters.
    pub state: State,
    /// The aggregate's argument, evaluated per event (a constant for argument-less states).
    pub expr: KExpr,
    /// Fold the event only when this holds (COUNT of a nullable value).
    pub when: Option<KPred>,
}

/// How an output column is computed from the group's count and its states.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Func {
    /// COUNT of a never-NULL value: the group's event count.
    Count,
    /// COUNT(x) of a nullable x: the value of this [`count::CountWhen`] slot.
    CountWhen(usize),
    /// SUM: this slot's exact sum, checked against the result type.
    Sum(usize),
    /// AVG: this sum slot divided once by the count, as Float64.
    Avg(usize),
    /// MIN or MAX: this slot.
    Extreme(usize),
    /// VARIANCE / STDDEV (sample or population) from this moments slot and the count.
    Moments(usize, moments::Moment),
    /// approx_distinct: the HyperLogLog estimate of this slot.
    ApproxDistinct(usize),
    /// COUNT(DISTINCT x): this slot's counter, summed over CPUs.
    CountDistinct(usize),
    /// HIST or LHIST: this histogram slot's non-empty buckets.
    Hist(usize),
    /// A quantile of this sketch slot; the quantile q as `f64::to_bits`.
    Quantile(usize, u64),
}

impl Func {
    /// The slot the function reads, if any.
    pub fn slot(&self) -> Option<usize> {
        match *self {
            Func::Count => None,
            Func::CountWhen(i)
            | Func::Sum(i)
            | Func::Avg(i)
            | Func::Extreme(i)
            | Func::Moments(i, _)
            | Func::ApproxDistinct(i)
            | Func::CountDistinct(i)
            | Func::Hist(i)
            | Func::Quantile(i, _) => Some(i),
        }
    }

    /// The output of a group: `count` events (> 0), `state` this function's
    /// slot's merged state (empty for [`Func::Count`]), `dt` the result type,
    /// `text` the plan text (for error messages).
    pub fn evaluate(
        &self,
        slots: &[Slot],
        count: u64,
        state: &[u8],
        dt: &DataType,
        text: &str,
    ) -> Cell {
        match *self {
            Func::Count => Cell::Int(count, IntType::I64),
            Func::CountWhen(_) => count::evaluate(state),
            Func::Sum(_) => sum::evaluate_sum(state, dt, text),
            Func::Avg(_) => sum::evaluate_avg(state, count),
            Func::Extreme(i) => min_max::evaluate(state, slots[i].expr.ty()),
            Func::Moments(_, what) => moments::evaluate(state, count, what),
            Func::ApproxDistinct(_) => hll::evaluate(state),
            Func::CountDistinct(_) => count::evaluate(state),
            Func::Hist(i) => match &slots[i].state {
                State::LinearHist(h) => hist::evaluate_linear(h, state, slots[i].expr.ty()),
                _ => hist::evaluate_log2(state, slots[i].expr.ty()),
            },
            Func::Quantile(i, q) => {
                quantile::evaluate(state, f64::from_bits(q), slots[i].expr.ty())
            }
        }
    }

    /// The output over no events (a global aggregate's empty window): SQL says
    /// COUNT is 0 and the others NULL.
    pub fn evaluate_empty(&self) -> Cell {
        match self {
            Func::Count | Func::CountWhen(_) | Func::CountDistinct(_) => Cell::Int(0, IntType::I64),
            Func::ApproxDistinct(_) => Cell::Int(0, IntType::U64),
            _ => Cell::Null,
        }
    }

    /// How `explain` describes the function.
    pub fn describe(&self) -> String {
        match *self {
            Func::Count => "the group's event count".into(),
            Func::CountWhen(i) => format!("slot {i}"),
            Func::Sum(i) => format!("slot {i}"),
            Func::Avg(i) => format!("slot {i} / count, divided in user space"),
            Func::Extreme(i) => format!("slot {i}"),
            Func::Moments(i, what) => format!("{what:?} of slot {i} and the count: n·Σx² − (Σx)² exact in 256 bits, divided once in user space"),
            Func::ApproxDistinct(i) => format!("HyperLogLog estimate of slot {i} (relative standard error {:.2}%)", 100.0 * hll::standard_error()),
            Func::CountDistinct(i) => format!("slot {i} summed over CPUs"),
            Func::Hist(i) => format!("slot {i}'s non-empty buckets as [{{lo, hi, count}}], bounds inclusive"),
            Func::Quantile(i, q) => format!(
                "quantile {} of slot {i}: the middle of the bucket holding the nearest-rank value, within {:.2}% of it",
                f64::from_bits(q),
                quantile::RELATIVE_ERROR * 100.0
            ),
        }
    }
}

/// An aggregate call as the planner sees it, with access to its translated arguments.
pub trait Call {
    /// The function name, lower case.
    fn name(&self) -> &str;
    /// Argument `k` as an in-kernel integer expression (the error says why not).
    fn int_arg(&mut self, k: usize) -> Result<KExpr, String>;
    /// Argument `k` when it is never NULL: `Ok(None)`; when it can be NULL,
    /// the predicate under which it is not.
    fn nullable_arg(&mut self, k: usize) -> Result<Option<KPred>, String>;
    /// Result type DataFusion gave the call.
    fn result_type(&self) -> &DataType;
    /// The call is `f(DISTINCT …)`.
    fn distinct(&self) -> bool {
        false
    }

    /// Argument `k` as a constant (after DataFusion's constant folding); the error says why not.
    fn literal(&mut self, k: usize) -> Result<datafusion::common::ScalarValue, String>;

    /// Argument `k` as an integer constant.
    fn int_literal(&mut self, k: usize) -> Result<i64, String> {
        let v = self.literal(k)?;
        v.cast_to(&DataType::Int64)
            .ok()
            .and_then(|c| {
                if let datafusion::common::ScalarValue::Int64(Some(i)) = c {
                    Some(i)
                } else {
                    None
                }
            })
            .filter(|_| v.data_type().is_integer())
            .ok_or_else(|| format!("argument {} must be an integer constant, got {v}", k + 1))
    }

    /// Argument `k` as a numeric constant.
    fn float_literal(&mut self, k: usize) -> Result<f64, String> {
        let v = self.literal(k)?;
        v.cast_to(&DataType::Float64)
            .ok()
            .and_then(|c| {
                if let datafusion::common::ScalarValue::Float64(Some(f)) = c {
                    Some(f)
                } else {
                    None
                }
            })
            .filter(|_| v.data_type().is_numeric())
            .ok_or_else(|| format!("argument {} must be a numeric constant, got {v}", k + 1))
    }
}

/// Resolves an aggregate call to its output function, adding the states it
/// needs through `slot` (which deduplicates: SUM(x) and AVG(x) share one).
/// `Err` says why the call has no kernel implementation (it then runs in user space).
pub fn resolve(call: &mut dyn Call, slot: &mut dyn FnMut(Slot) -> usize) -> Result<Func, String> {
    let name = call.name().to_string();
    if call.distinct() {
        return distinct::resolve(&name, call, slot);
    }
    if let Some(f) = count::resolve(&name, call, slot)? {
        return Ok(f);
    }
    if let Some(f) = sum::resolve(&name, call, slot)? {
        return Ok(f);
    }
    if let Some(f) = min_max::resolve(&name, call, slot)? {
        return Ok(f);
    }
    if let Some(f) = moments::resolve(&name, call, slot)? {
        return Ok(f);
    }
    if let Some(f) = hll::resolve(&name, call, slot)? {
        return Ok(f);
    }
    if let Some(f) = hist::resolve(&name, call, slot)? {
        return Ok(f);
    }
    if let Some(f) = quantile::resolve(&name, call, slot)? {
        return Ok(f);
    }
    Err(format!("aggregate `{name}` has no kernel implementation"))
}

/// Little-endian u64 at `off` of a state.
pub fn u64_at(b: &[u8], off: usize) -> u64 {
    u64::from_le_bytes(b[off..off + 8].try_into().expect("8 bytes"))
}

/// Stores a little-endian u64 at `off` of a state.
pub fn put_u64(b: &mut [u8], off: usize, v: u64) {
    b[off..off + 8].copy_from_slice(&v.to_le_bytes());
}
