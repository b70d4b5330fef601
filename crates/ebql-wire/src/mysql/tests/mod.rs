//! The MySQL decoder's tests: encoders, whole conversations, framing
//! (splits, cuts, losses, resync), and property tests.

mod basic;
mod enc;
pub mod framing;
mod props;
mod real;
mod uncaptured;
