//! Integration tests of `ebql`, one binary (issue 18: one test binary per
//! crate links the dependencies once instead of once per file).
//! Run one file's tests with `cargo test -p ebql --test it MODULE::`.

mod bad_input;
mod btf;
mod buffers;
mod bytes;
mod choices;
mod cli;
mod common;
#[path = "../../../ebql-compiler/tests/it/corpus/mod.rs"]
mod corpus;
mod cost;
mod counters;
mod distinct;
mod faults;
mod files;
mod flight;
mod generated;
mod kafka;
mod kernel;
mod mariadb;
mod mywire;
mod oracle;
mod partial;
mod pgwire;
mod postgres;
mod privilege;
mod profile;
mod prometheus;
mod readme;
mod replay;
mod semantics;
mod shared;
mod sketches;
mod strings;
mod synopses;
mod target;
mod tc;
mod topk;
mod unread;
mod uprobe;
mod views;
mod wallclock;
