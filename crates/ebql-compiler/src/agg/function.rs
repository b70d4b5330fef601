//! The user-space half of an aggregate and its entry in the registry: the
//! call the planner offers ([`Call`]), the function computing an output
//! column from a group's states ([`Output`], held as a [`Func`]) and the
//! aggregate itself ([`Aggregate`]: names, signature, states, docs).

use super::synopsis::Slot;
use crate::contract::Cell;
use crate::kexpr::{KExpr, KPred};
use datafusion::arrow::datatypes::DataType;
use std::any::Any;
use std::fmt::Debug;
use std::sync::Arc;

/// An aggregate function of SQL with a kernel implementation: one per file
/// under `agg/`, listed in [`super::registry::AGGREGATES`].
pub trait Aggregate: Sync {
    /// The SQL names it serves, lower case, aliases included.
    fn names(&self) -> &'static [&'static str];
    /// Whether it serves `f(DISTINCT …)` calls (and only those) of its names.
    fn distinct(&self) -> bool {
        false
    }
    /// Whether DataFusion casts the integer argument of a call of `name` to
    /// Float64 (AVG, the variance functions) and the kernel reads the
    /// integer under the cast instead: its state is exact on integers, user
    /// space divides.
    fn reads_through_float_cast(&self, _name: &str) -> bool {
        false
    }
    /// What it computes and how, for the documentation.
    fn doc(&self) -> &'static str;
    /// Checks the call's arguments, adds the states it needs through `slot`
    /// (which deduplicates: SUM(x) and AVG(x) share one) and returns the
    /// function computing its output. `name` is one of [`Aggregate::names`].
    /// `Err` says why the call has no kernel implementation (it then runs in
    /// user space).
    fn resolve(
        &self,
        name: &str,
        call: &mut dyn Call,
        slot: &mut dyn FnMut(Slot) -> usize,
    ) -> Result<Func, String>;
}

/// How an output column is computed from a group's count and its states.
pub trait Output: Debug + Any + Send + Sync {
    /// The slot the function reads, if any.
    fn slot(&self) -> Option<usize>;
    /// The output of a group: `count` events (> 0), `state` the merged state
    /// of [`Output::slot`] (empty when it has none), `slots` the spec's
    /// slots, `dt` the result type, `text` the plan text (for error messages).
    fn evaluate(&self, slots: &[Slot], count: u64, state: &[u8], dt: &DataType, text: &str)
        -> Cell;
    /// The output over no events (a global aggregate's empty window): SQL
    /// says COUNT is 0 and the others NULL.
    fn evaluate_empty(&self) -> Cell {
        Cell::Null
    }
    /// How `explain` describes the function.
    fn describe(&self) -> String;
    /// For an approximate aggregate, the relative difference from the exact
    /// value the differential oracle accepts; `None`: exact.
    fn oracle_bound(&self) -> Option<f64> {
        None
    }
    /// The aggregate's mergeable state as output columns (`--partial`,
    /// [`crate::partial`]): where DataFusion has the aggregate, the columns
    /// of its accumulator's `state()` in order, type and name suffix, so
    /// DataFusion's Final mode merges them; else eBQL's documented
    /// encoding. `slots` are the spec's slots, `dt` the result type. `Err`
    /// says why the aggregate has no state that merges across hosts.
    fn state(&self, _slots: &[Slot], _dt: &DataType) -> Result<Vec<StatePart>, String> {
        Err(format!(
            "{} has no state that merges across hosts",
            self.describe()
        ))
    }
}

/// One column of an aggregate's partial state ([`Output::state`]).
#[derive(Clone, Debug)]
pub struct StatePart {
    /// The column's name after the aggregate's: `{output name}[{suffix}]`,
    /// DataFusion's `format_state_name`.
    pub suffix: &'static str,
    /// The column's Arrow type.
    pub data_type: DataType,
    /// Computes the column from the group's count and merged state, as an
    /// aggregate's output is computed.
    pub func: Func,
}

impl StatePart {
    /// A part named `suffix` of type `data_type` computed by `f`.
    pub fn new(suffix: &'static str, data_type: DataType, f: impl Output) -> StatePart {
        StatePart {
            suffix,
            data_type,
            func: Func::new(f),
        }
    }
}

/// An output function, as the split records it per aggregate column. Two are
/// equal when of the same type with equal `Debug` texts (every parameter).
#[derive(Clone, Debug)]
pub struct Func(Arc<dyn Output>);

impl Func {
    /// Wraps an aggregate's output function.
    pub fn new(f: impl Output) -> Func {
        Func(Arc::new(f))
    }

    /// Whether the function is a `T` (for tests).
    pub fn is<T: Output>(&self) -> bool {
        (self.0.as_ref() as &dyn Any).is::<T>()
    }

    /// The slot the function reads, if any.
    pub fn slot(&self) -> Option<usize> {
        self.0.slot()
    }

    /// See [`Output::evaluate`].
    pub fn evaluate(
        &self,
        slots: &[Slot],
        count: u64,
        state: &[u8],
        dt: &DataType,
        text: &str,
    ) -> Cell {
        self.0.evaluate(slots, count, state, dt, text)
    }

    /// See [`Output::evaluate_empty`].
    pub fn evaluate_empty(&self) -> Cell {
        self.0.evaluate_empty()
    }

    /// See [`Output::describe`].
    pub fn describe(&self) -> String {
        self.0.describe()
    }

    /// See [`Output::oracle_bound`].
    pub fn oracle_bound(&self) -> Option<f64> {
        self.0.oracle_bound()
    }

    /// See [`Output::state`].
    pub fn state(&self, slots: &[Slot], dt: &DataType) -> Result<Vec<StatePart>, String> {
        self.0.state(slots, dt)
    }
}

impl Func {
    /// The same function over a group value whose slots start `by` slots
    /// later: a query over several events keeps each event's aggregates in
    /// one value, one event's slots after the other's ([`crate::multi`]).
    pub fn shifted(&self, by: usize) -> Func {
        match by {
            0 => self.clone(),
            _ => Func::new(Shifted {
                inner: self.clone(),
                by,
            }),
        }
    }
}

/// [`Func::shifted`]: `inner` reading its slots `by` later.
#[derive(Debug)]
struct Shifted {
    inner: Func,
    by: usize,
}

impl Output for Shifted {
    fn slot(&self) -> Option<usize> {
        self.inner.slot().map(|s| s + self.by)
    }

    fn evaluate(
        &self,
        slots: &[Slot],
        count: u64,
        state: &[u8],
        dt: &DataType,
        text: &str,
    ) -> Cell {
        self.inner
            .evaluate(&slots[self.by..], count, state, dt, text)
    }

    fn evaluate_empty(&self) -> Cell {
        self.inner.evaluate_empty()
    }

    fn describe(&self) -> String {
        format!("{} (slots counted from {})", self.inner.describe(), self.by)
    }

    fn oracle_bound(&self) -> Option<f64> {
        self.inner.oracle_bound()
    }

    fn state(&self, _slots: &[Slot], _dt: &DataType) -> Result<Vec<StatePart>, String> {
        Err("--partial of a query over several events is not supported".into())
    }
}

impl PartialEq for Func {
    fn eq(&self, other: &Func) -> bool {
        let (a, b) = (self.0.as_ref(), other.0.as_ref());
        (a as &dyn Any).type_id() == (b as &dyn Any).type_id()
            && format!("{a:?}") == format!("{b:?}")
    }
}

/// An aggregate call as the planner sees it, with access to its translated arguments.
pub trait Call {
    /// The function name, lower case.
    fn name(&self) -> &str;
    /// How many arguments the call has.
    fn arg_count(&self) -> usize;
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
