//! The kernel half of an aggregate: a synopsis (state layout, BPF update,
//! merge), the handle codegen and the decoder hold ([`State`]) and a state's
//! place in the group's map value ([`Slot`]). A leaf: the aggregate files
//! import it, it imports none of them.

use crate::error::CompileError;
use crate::kexpr::{IntType, KExpr, KPred};
use ebql_bpf::{Assembler, Reg};
use std::any::Any;
use std::fmt::Debug;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

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
    /// The slot's weight for this event ([`Slot::weight`]; `None`: unweighted).
    pub weight: Option<(Reg, IntType)>,
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
///
/// Two synopses are the same state (one slot serves both, as SUM(x) and
/// AVG(x) share a sum) when they are of the same type and their `Debug`
/// texts, which show every parameter, are equal.
pub trait Synopsis: Debug + Any + Send + Sync {
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
    /// Whether the update reads the slot's argument (a conditional count does not).
    fn needs_arg(&self) -> bool {
        true
    }
}

/// A synopsis kept in the map value, with its parameters, as codegen folds it.
#[derive(Clone, Debug)]
pub enum State {
    /// Folded into the group's value on every event that passes the slot's predicate.
    Fold(Arc<dyn Synopsis>),
    /// COUNT(DISTINCT)'s counter: codegen folds it only when the event's value
    /// was new to the shared distinct set, and it does not merge across the
    /// panes of a hopping window (a value seen in two panes would count twice).
    Distinct(Arc<dyn Synopsis>),
}

impl State {
    /// A state folded on every event.
    pub fn fold(s: impl Synopsis) -> State {
        State::Fold(Arc::new(s))
    }

    /// The synopsis behind this state.
    pub fn synopsis(&self) -> &dyn Synopsis {
        match self {
            State::Fold(s) | State::Distinct(s) => s.as_ref(),
        }
    }

    /// Whether the synopsis is a `T` (tests and the oracle ask which aggregate a slot serves).
    pub fn is<T: Synopsis>(&self) -> bool {
        (self.synopsis() as &dyn Any).is::<T>()
    }

    /// Bytes of state per group per CPU.
    pub fn bytes(&self) -> u32 {
        self.synopsis().bytes()
    }

    /// Whether the update reads the slot's argument.
    pub fn needs_arg(&self) -> bool {
        self.synopsis().needs_arg()
    }

    /// Whether the states of two panes of a hopping window merge into the
    /// window's state. A COUNT(DISTINCT) counter does not (a value seen in
    /// both panes would count twice): such a window needs the panes' sets.
    pub fn merges_across_panes(&self) -> bool {
        !matches!(self, State::Distinct(_))
    }

    /// The identity of the state: its kind, its synopsis' type and parameters.
    fn identity(&self) -> (bool, std::any::TypeId, String) {
        let s = self.synopsis();
        (
            matches!(self, State::Distinct(_)),
            (s as &dyn Any).type_id(),
            format!("{s:?}"),
        )
    }
}

impl PartialEq for State {
    fn eq(&self, other: &State) -> bool {
        self.identity() == other.identity()
    }
}

impl Eq for State {}

impl Hash for State {
    fn hash<H: Hasher>(&self, h: &mut H) {
        self.identity().hash(h)
    }
}

/// One state in the map value: which synopsis, of which argument (and
/// weight), under which predicate.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Slot {
    /// The synopsis and its parameters.
    pub state: State,
    /// The aggregate's argument, evaluated per event (a constant for argument-less states).
    pub expr: KExpr,
    /// Fold the event only when this holds (COUNT of a nullable value).
    pub when: Option<KPred>,
    /// A second per-event argument, evaluated after `expr` into its own
    /// register ([`UpdateCx::weight`]): approx_top_k(x, k, w)'s weight.
    pub weight: Option<KExpr>,
}

impl Slot {
    /// The expressions the update evaluates per event: the argument and the weight.
    pub fn exprs(&self) -> impl Iterator<Item = &KExpr> {
        std::iter::once(&self.expr).chain(self.weight.as_ref())
    }
}

/// Little-endian u64 at `off` of a state.
pub fn u64_at(b: &[u8], off: usize) -> u64 {
    u64::from_le_bytes(b[off..off + 8].try_into().expect("8 bytes"))
}

/// Stores a little-endian u64 at `off` of a state.
pub fn put_u64(b: &mut [u8], off: usize, v: u64) {
    b[off..off + 8].copy_from_slice(&v.to_le_bytes());
}
