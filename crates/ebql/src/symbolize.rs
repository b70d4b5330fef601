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
//!   `;`**, each `function+0xoffset` (or the hex address when no symbol
//!   covers it), e.g. `main;run;ebql_workload_spin+0x4f`: the convention of
//!   flame-graph "folded" lines, so `--format folded` only drops the
//!   offsets and appends the count. A sample without a stack reads
//!   `[no stack: <why> (<errno>)]`: counted in its own group, never merged
//!   into another stack.
//!
//! Ids stay valid while the query runs (the map is never cleared), so a
//! symbolized id is cached: frames of a process that exited after being
//! symbolized once stay readable.

use std::collections::HashMap;

use blazesym::symbolize::source::{Kernel, Process, Source};
use blazesym::symbolize::{Input, Symbolized, Symbolizer};
use datafusion::arrow::datatypes::SchemaRef;
use ebql_compiler::contract::{Cell, STACK_DEPTH, STACK_METADATA};
use ebql_runtime::Map;

thread_local! {
    /// blazesym's symbolizer (not `Send`; one per query thread, caching the
    /// parsed ELF files and kallsyms it has read).
    static SYMBOLIZER: Symbolizer = Symbolizer::new();
}

/// Symbolizes stack column values, with a cache per (user, value).
#[derive(Default)]
pub struct Stacks {
    cache: HashMap<(bool, u64), String>,
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

    fn lookup(&self, map: &Map, user: bool, pid: u32, id: u32) -> String {
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
        let src: Source = if user {
            Source::Process(Process::new(pid.into()))
        } else {
            Source::Kernel(Kernel::default())
        };
        // pid 0 would mean "this process" to blazesym; the idle task has no user stack anyway.
        let syms = if user && pid == 0 {
            Vec::new()
        } else {
            SYMBOLIZER.with(|s| {
                s.symbolize(&src, Input::AbsAddr(&addrs))
                    .map(|v| v.into_iter().map(own).collect())
                    .unwrap_or_default()
            })
        };
        let mut frames: Vec<String> = addrs
            .iter()
            .enumerate()
            .map(|(i, a)| {
                syms.get(i)
                    .cloned()
                    .flatten()
                    .unwrap_or_else(|| format!("{a:#x}"))
            })
            .collect();
        frames.reverse();
        frames.join(";")
    }
}

/// A symbolized frame as `function+0xoffset`, if a symbol covers it.
fn own(s: Symbolized<'_>) -> Option<String> {
    match s {
        Symbolized::Sym(s) => Some(format!("{}+{:#x}", s.name, s.offset)),
        Symbolized::Unknown(_) => None,
    }
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
