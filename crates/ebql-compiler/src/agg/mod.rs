//! In-kernel aggregates: one file per aggregate, DataFusion's `Accumulator`
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
//! An aggregate's file owns:
//! - its [`Aggregate`]: the SQL names it serves, the argument types it
//!   accepts and the states it needs ([`Aggregate::resolve`]), its docs;
//! - the state layout ([`Synopsis::bytes`]) and what `explain` says of it,
//!   including the error bound of an approximate one ([`Synopsis::describe`]);
//! - the BPF that folds one event into the state ([`Synopsis::emit_update`]);
//! - how two states combine, across CPUs and across the panes of a hopping
//!   window ([`Synopsis::merge`]);
//! - how a state becomes the output value, the value over no events and its
//!   `explain` text ([`Output`]).
//!
//! Adding an aggregate: its file here (a `mod` line below) and one line in
//! [`registry::AGGREGATES`]. The shared types are in [`synopsis`] (kernel
//! half) and [`function`] (user-space half, the registry's trait).

pub mod count;
pub mod distinct;
pub mod function;
pub mod hist;
pub mod hll;
pub mod hll_datasketches;
pub mod min_max;
pub mod moments;
pub mod quantile;
pub mod registry;
pub mod sum;
pub mod synopsis;
pub mod topk;

pub use function::{Aggregate, Call, Func, Output, StatePart};
pub use registry::{resolve, AGGREGATES};
pub use synopsis::{put_u64, u64_at, Slot, State, Synopsis, UpdateCx};
