//! Event sources: one module per family of hooks (bpftrace's "providers",
//! aya's one module per program type), each implementing [`Source`].
//!
//! Every kind answers the same questions, through its [`Source`]:
//!
//! * **names** — its spellings after `FROM` and how the rest of the name
//!   reads ([`Source::spellings`], [`Source::parse_rest`]);
//! * **listing** — `ebql events` ([`Source::list`]);
//! * **schema** — its columns, each saying how it is read ([`Access`]), and
//!   the system attributes its program type may call helpers for
//!   ([`Source::schema`]);
//! * **attach** — the BPF program type ([`Source::program_type`]), the
//!   attach description ([`Attach`], in the schema) the runtime turns into
//!   a link, and the kernel features it needs ([`Feature`]), which the
//!   runtime probes before loading anything.
//!
//! [`registry::SOURCES`] is the one list naming them all; [`EventKind`]'s
//! methods delegate to it. Shared types live in leaves that depend on no
//! other `source` module: [`kind`] (EventKind, ProgType, Feature),
//! [`attach`](mod@attach) (Attach), [`access`] (Access and its parts),
//! [`interface`] (the trait).
//!
//! Sources: [`tracepoint`] (tracefs tracepoints), [`btf_tp`] (`tp_btf` and
//! raw tracepoints), [`kprobe`] (kprobes and fentry/fexit), [`uprobe`],
//! [`usdt`], [`profile`] (perf CPU-clock sampling), [`tc`] (the traffic
//! control hook).

pub mod access;
pub mod attach;
pub mod interface;
pub mod kind;
pub mod registry;

pub mod btf_tp;
pub mod kprobe;
pub mod profile;
pub mod pt_regs;
pub mod tc;
pub mod tracepoint;
pub mod uprobe;
pub mod usdt;

pub use access::{struct_fields_hint, Access, BtfStep, PacketField, UsdtArg};
pub use attach::Attach;
pub use interface::Source;
pub use kind::{EventKind, Feature, ProgType};
pub use registry::{field_path, source_of, SOURCES};
