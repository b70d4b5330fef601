#![warn(missing_docs)]
//! eBQL's query compiler: from query text to a BPF program plus the user-space
//! remainder of the plan. Pure: it makes no syscalls (the runtime crate is the
//! only one that talks to the kernel).
//!
//! Passes, in order:
//! 1. [`prepass`]: thesis syntax → standard SQL, with a map back to the user's text;
//! 2. [`planner`]: sqlparser + DataFusion bind and optimize (predicate/projection
//!    pushdown, constant folding), each event a table;
//! 3. [`split`]: kernel part vs user-space remainder;
//! 4. [`codegen`]: BPF instructions for the kernel part;
//! 5. [`explain`]: all of the above as text; [`cost`] predicts what the
//!    generated programs cost per event.
//!
//! The planner's alternatives (the hook of a syscall tracepoint, the group
//! table's kind, the filter order, where an aggregate runs) and the rules choosing between them are in
//! [`choose`]; [`syscall_hook`] and [`groupmap`] build the alternatives.
//!
//! [`check`] compiles a query for the differential oracle: the plan under
//! test plus a reference that DataFusion evaluates on the same events.

pub mod agg;
pub mod attrs;
pub mod bytetext;
pub mod check;
pub mod checked_sum;
pub mod choose;
pub mod codegen;
pub mod coerce;
pub mod contract;
pub mod cost;
pub mod diag;
pub mod error;
pub mod explain;
pub mod groupmap;
pub mod intcast;
pub mod kexpr;
pub mod latest;
pub mod memfn;
pub mod multi;
pub mod names;
pub mod packet;
pub mod pair;
pub mod partial;
pub mod paths;
pub mod physical;
pub mod pipeline;
pub mod planner;
pub mod prepass;
pub mod refuse;
pub mod scope;
pub mod split;
pub mod stack;
pub mod strfn;
pub mod syscall_hook;
pub mod udaf;
pub mod uregs;
pub mod views;
pub mod walltime;
pub mod window_limits;
pub mod wire;

pub use codegen::{CodegenOptions, Compiled};
pub use diag::Diagnostic;
pub use error::CompileError;
pub use pipeline::{compile_query, CompiledQuery, WireCapture};
pub use planner::{EventSource, Planned};
pub use split::Split;
