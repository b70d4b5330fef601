//! The user-space half of the stack columns (`kstack`, `ustack` of
//! `profile:` events): the probe stores a stack id from `bpf_get_stackid`
//! (the key of the query's stack-trace map), user space reads the frames'
//! addresses from that map and symbolizes them with blazesym.
//!
//! What a stack column holds:
//!
//! * in the kernel (group keys, ring-buffer records): a u64, the stack id as
//!   a u32 in the low half (a negative errno when the kernel recorded no
//!   stack) and, for `ustack`, the process id in the high half (a user
//!   address means something only in its process; not for an errno, so
//!   every process's samples without a stack for one reason are one group);
//! * in SQL and in the output: Utf8, the frames **root first, separated by
//!   `;`**, each `function+0xoffset` (or, when no symbol covers it, the
//!   address and why: `0x7f3a1c0042a0 [/usr/lib/libfoo.so +0x42a0: no
//!   symbol covers it]`, [`frames::Why`]), e.g. `main;run;ebql_workload_spin+0x4f`: the convention of
//!   flame-graph "folded" lines, so `--format folded` only drops the
//!   offsets and appends the count. A sample without a stack reads
//!   `[no stack: <why> (<errno>)]`: counted in its own group, never merged
//!   into another stack.
//!
//! Ids stay valid while the query runs (the map is never cleared), so a
//! symbolized id is cached.
//!
//! **A process that exits before its window closes** is symbolized all
//! the same: the first time a stack of a process id is seen, what its
//! addresses need is kept ([`process`]: its executable mappings and the
//! mapped files held open), and user stacks are always symbolized from that
//! snapshot, never from `/proc/<pid>` at window close ([`frames`]). The
//! executor looks for new process ids in the kernel's output at every drain
//! of a ring buffer and, for group tables, in the table's keys every
//! [`SCAN_INTERVAL`] (longer for tables so large that a scan takes over 5 ms), before windows
//! close. What remains: a process whose whole life falls between two such
//! looks (under one interval, ~100 ms) is gone when first seen; its frames
//! read `0x… [process exited before its mappings were read]`. Every frame
//! without a symbol says why (`0x… [why]`, [`frames::Why`]), never a bare
//! address.

mod frames;
mod process;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use blazesym::symbolize::source::{Kernel, Source};
use blazesym::symbolize::Input;
use datafusion::arrow::datatypes::SchemaRef;
use ebql_compiler::contract::{uint_at, Cell, OutputLayout, Stored, STACK_DEPTH, STACK_METADATA};
use ebql_runtime::Map;
use frames::SYMBOLIZER;

/// Group tables are scanned for new process ids at most this often.
pub const SCAN_INTERVAL: Duration = Duration::from_millis(100);

/// Symbolizes stack column values, with a cache per (user, value), and
/// keeps each process's mappings from its first stack on.
pub struct Stacks {
    cache: HashMap<(bool, u64), String>,
    procs: process::Processes,
    /// When the group table may be scanned for new process ids again.
    next_scan: Instant,
}

impl Default for Stacks {
    fn default() -> Self {
        Stacks {
            cache: HashMap::new(),
            procs: process::Processes::default(),
            next_scan: Instant::now(),
        }
    }
}

impl std::fmt::Debug for Stacks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stacks")
            .field("cached", &self.cache.len())
            .finish_non_exhaustive()
    }
}

/// Text for a negative `bpf_get_stackid` result.
fn no_stack(errno: i32) -> String {
    let why = match errno {
        libc::EFAULT => {
            "none recorded, e.g. no user stack in a kernel thread or no kernel frames (EFAULT)"
        }
        libc::EEXIST => "its hash bucket in the stack map holds another stack (EEXIST)",
        libc::ENOMEM => "the stack map is full (ENOMEM)",
        libc::EINVAL => "bad flags (EINVAL)",
        _ => return format!("[no stack: error {errno}]"),
    };
    format!("[no stack: {why}]")
}

impl Stacks {
    /// The frames of stack column value `value` (see the module docs),
    /// reading the addresses from `map`, the query's stack-trace map.
    pub fn frames(&mut self, map: &Map, user: bool, value: u64) -> String {
        if let Some(s) = self.cache.get(&(user, value)) {
            return s.clone();
        }
        let id = value as u32 as i32;
        let pid = (value >> 32) as u32;
        let text = if id < 0 {
            no_stack(-id)
        } else {
            self.lookup(map, user, pid, id as u32)
        };
        self.cache.insert((user, value), text.clone());
        text
    }

    /// Notes the process of user stack column value `value`: the first
    /// time a process id is seen, its mappings are read while it (likely)
    /// still lives, for symbolizing its stacks later.
    pub fn note(&mut self, value: u64) {
        let (id, pid) = (value as u32 as i32, (value >> 32) as u32);
        if id >= 0 && pid != 0 && !self.procs.seen(pid) {
            self.procs.snapshot(pid);
        }
    }

    /// Notes the processes of the user stack columns `fields` (offsets and
    /// storage, [`user_stack_fields`]) of the records or keys in `data`,
    /// `size` bytes each.
    pub fn note_records(&mut self, fields: &[(u32, Stored)], size: usize, data: &[u8]) {
        if fields.is_empty() || size == 0 {
            return;
        }
        for rec in data.chunks_exact(size) {
            for &(off, st) in fields {
                if let Stored::Int { bytes, .. } = st {
                    self.note(uint_at(rec, off as usize, bytes as usize));
                }
            }
        }
    }

    /// Whether a group table may be scanned for new process ids now.
    pub fn scan_due(&self) -> bool {
        Instant::now() >= self.next_scan
    }

    /// A scan took `took`: the next one is due after 20 times that (at
    /// most 5% of a CPU), and never sooner than [`SCAN_INTERVAL`].
    pub fn scanned(&mut self, took: Duration) {
        self.next_scan = Instant::now() + SCAN_INTERVAL.max(took * 20);
    }

    fn lookup(&mut self, map: &Map, user: bool, pid: u32, id: u32) -> String {
        let mut raw = vec![0u8; 8 * STACK_DEPTH as usize];
        match map.lookup(&id.to_ne_bytes(), &mut raw) {
            Ok(true) => {}
            Ok(false) => return format!("[stack id {id} not in the stack map]"),
            Err(e) => return format!("[stack id {id} unreadable: {e}]"),
        }
        let addrs: Vec<u64> = raw
            .chunks_exact(8)
            .map(|c| u64::from_ne_bytes(c.try_into().expect("8 bytes")))
            .take_while(|&a| a != 0)
            .collect();
        let mut frames = if user {
            frames::user_frames(&mut self.procs, pid, &addrs)
        } else {
            kernel_frames(&addrs)
        };
        frames.reverse();
        frames.join(";")
    }
}

/// Kernel addresses to frames (kallsyms), each `function+0xoffset` or `0x… [why]`.
fn kernel_frames(addrs: &[u64]) -> Vec<String> {
    let syms = SYMBOLIZER.with(|s| {
        s.symbolize(&Source::Kernel(Kernel::default()), Input::AbsAddr(addrs))
            .map(|v| v.into_iter().map(frames::own).collect::<Vec<_>>())
            .map_err(|e| e.to_string())
    });
    addrs
        .iter()
        .enumerate()
        .map(|(i, &a)| match &syms {
            Ok(v) => match v.get(i) {
                Some(Ok(frame)) => frame.clone(),
                Some(Err(r)) => format!("{a:#x} [kernel: {}]", frames::reason_text(*r)),
                None => format!("{a:#x} [kernel: no answer from the symbolizer]"),
            },
            Err(e) => format!(
                "{a:#x} [kernel symbols unreadable: {}]",
                e.replace(';', ",")
            ),
        })
        .collect()
}

/// Where the user stack columns of `schema` are in `layout`'s group keys
/// or stream records: (offset, storage) of each.
pub fn user_stack_fields(layout: &OutputLayout, schema: &SchemaRef) -> Vec<(u32, Stored)> {
    stack_columns(schema)
        .into_iter()
        .filter(|&(_, user)| user)
        .filter_map(|(i, _)| match layout {
            OutputLayout::Groups { keys, .. } => keys.get(i).copied().flatten(),
            OutputLayout::Stream { columns, .. } => columns.get(i).copied(),
        })
        .collect()
}

/// The stack columns of `schema` (index, user stack), from their field metadata.
pub fn stack_columns(schema: &SchemaRef) -> Vec<(usize, bool)> {
    schema
        .fields()
        .iter()
        .enumerate()
        .filter_map(|(i, f)| f.metadata().get(STACK_METADATA).map(|k| (i, k == "user")))
        .collect()
}

/// Replaces the stack ids in `rows` (cells of `schema`) by their frames.
pub fn symbolize_rows(
    stacks: &mut Stacks,
    map: Option<&Map>,
    schema: &SchemaRef,
    mut rows: Vec<Vec<Cell>>,
) -> Vec<Vec<Cell>> {
    let (cols, Some(map)) = (stack_columns(schema), map) else {
        return rows;
    };
    for row in &mut rows {
        for &(i, user) in &cols {
            if let Some(Cell::Int(v, _)) = row.get(i) {
                let text = stacks.frames(map, user, *v);
                row[i] = Cell::Str(text);
            }
        }
    }
    rows
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_are_named() {
        assert!(no_stack(libc::EFAULT).contains("EFAULT"));
        assert!(no_stack(libc::EEXIST).contains("EEXIST"));
        assert_eq!(no_stack(99), "[no stack: error 99]");
    }
}
