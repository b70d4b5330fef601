//! Integration tests of `ebql-runtime`, one binary (issue 18: one test binary per
//! crate links the dependencies once instead of once per file).
//! Run one file's tests with `cargo test -p ebql-runtime --test it MODULE::`.

mod grace;
mod verifier;
