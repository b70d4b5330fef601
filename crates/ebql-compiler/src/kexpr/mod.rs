//! Kernel expressions: the subset of DataFusion expressions our BPF backend compiles.
//!
//! Translation from a DataFusion [`Expr`] either succeeds or says, in words, why
//! the expression has to run in user space. The rule: a translated expression
//! computes exactly what DataFusion 55 computes on the same row, else it is
//! not translated. Integer values live in 64-bit registers; results of
//! narrower types are wrapped to their width after every operation, which
//! matches DataFusion's wrapping arithmetic (`add_wrapping`, `neg_wrapping`,
//! shift amounts modulo the width as in `wrapping_shl`). Kernel values are
//! never NULL; casts that could fail or give NULL (narrowing, sign-changing)
//! and signed division stay in user space.
//!
//! [`ir`] defines the expressions, [`translate`] builds them.

pub mod ir;
pub mod translate;

pub use ir::*;
pub use translate::*;
