#![warn(missing_docs)]
//! eBQL: streaming SQL over Linux kernel events, compiled to eBPF.
//!
//! ```no_run
//! let mut ex = ebql::Executor::new();
//! let (schema, batches) = ex.execute_query(
//!     "SELECT fd, COUNT(*) FROM tracepoint/syscalls/sys_enter_pread64 GROUP BY fd WINDOW(time, 1000, 1000)".into())?;
//! for batch in batches.iter().take(3) { println!("{} rows", batch.num_rows()); }
//! # Ok::<(), ebql::Error>(())
//! ```
//!
//! The crates underneath: `ebql-catalog` (tracefs events as tables),
//! `ebql-compiler` (pre-pass, DataFusion planning, kernel/user split, BPF
//! codegen; no syscalls), `ebql-bpf` (instruction layer), `ebql-runtime`
//! (the only crate that talks to the kernel).

pub mod check;
pub mod clock_sync;
pub mod command;
pub mod cost;
pub mod decode;
pub mod duration;
pub mod error;
pub mod executor;
pub mod panes;
pub mod partial;
#[cfg(feature = "replay")]
pub mod replay;
pub mod sampler;
#[cfg(feature = "flight")]
pub mod service;
pub mod sink;
pub mod symbolize;
pub mod window;

pub use datafusion::arrow;
pub use error::{Error, Result};
pub use executor::{
    monotonic_ns, Executor, ExecutorOptions, LoadReport, QueryStats, RunningQuery, SharedSynopses,
    WindowDrops,
};
