//! The cost model: what a compiled query costs per event, in nanoseconds,
//! predicted from the BPF it actually generated.
//!
//! Three parts:
//!
//! * [`CostModel`]: per-operation costs on one machine (hook entry per hook
//!   type, BPF instructions, helper calls by id, map operations by map type,
//!   ring-buffer records, user-space work per row, per window and per group).
//!   [`CostModel::built_in`] holds defaults measured on the project's 2-core
//!   VM (Linux 6.18; sources on each field); `ebql calibrate` measures them on
//!   the machine at hand and caches them as JSON (see `ebql::calibrate`).
//! * [`profile_program`]: walks one generated [`ebql_bpf::Program`] and
//!   weighs every instruction by the probability that an event executes it:
//!   the filter regions (instruction ranges whose origin is a `Filter:`)
//!   pass with the filter's selectivity, a test of a helper's result takes
//!   the success branch (a group exists, a record was reserved: failures are
//!   counted drops, not the steady state), a branch into code that counts an
//!   anomaly (an atomic add to a counter: a drop, an overwritten
//!   start, an end without a start) is not taken, and other data-dependent
//!   branches are taken half the time. Helper calls are priced by id and by what they
//!   act on (the map an `r1 = map_fd(i)` before the call names, the size an
//!   `r2 = n` gives), so the prediction follows the code, not the SQL.
//! * [`predict`]: the programs of a query plus the [`Rates`] of their events
//!   give a [`Prediction`]: ns per event at the hook, per matched event, the
//!   cost put on work the query does not trace, and user-space CPU.
//!
//! Pure: no syscalls. Rates and calibration come from the caller.
//!
//! Files: [`model`] (costs, rates, predictions), [`profile`] (one
//! program's walk), [`predict`] (a query's cost, the placement choice),
//! [`placement`] (the decision `explain` shows).

pub mod model;
pub mod placement;
pub mod predict;
pub mod profile;

pub use model::*;
pub use placement::*;
pub use predict::*;
pub use profile::*;
