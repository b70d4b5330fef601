//! Integration tests of `ebql-compiler`, one binary (issue 18: one test binary per
//! crate links the dependencies once instead of once per file).
//! Run one file's tests with `cargo test -p ebql-compiler --test it MODULE::`.

mod bad_queries;
mod btf_codegen;
mod compile;
mod corpus;
mod cost;
mod fuzz;
mod partial;
mod physical;
