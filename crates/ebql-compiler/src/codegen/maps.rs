//! Map numbering: the maps a query's programs reference, by index into
//! [`super::Compiled::maps`]. The control map, the output map, the tap or
//! the start map(s) and the plan's own maps come first
//! ([`crate::contract::MAP_CTL`], [`crate::contract::MAP_OUT`], …); the maps every program may share come last and are
//! numbered before any program is emitted ([`LateMaps`]), so every map
//! reference is final when it is emitted.

use crate::contract::{counters, MapKind, MapSpec, STACK_DEPTH};
use crate::CompileError;

/// Entries of the stack-trace map (each `STACK_DEPTH` u64 frames,
/// preallocated: 8 MiB). A sample whose stack hashes to a bucket holding
/// another stack gets `-EEXIST`, shown as such (no stack is overwritten).
pub const STACK_MAP_ENTRIES: u32 = 8192;

/// The scratch values of a pairing with stored strings, one start value
/// each (per CPU, [`MapKind::PercpuArray`]): too large for the 512-byte
/// stack. A CPU runs one tracing program at a time, and each use has its own entry.
pub(super) mod scratch {
    /// The start program builds the value it inserts into the hash here.
    pub const START: i32 = 0;
    /// The end program copies the stored strings here before deleting the hash entry.
    pub const END: i32 = 1;
    /// A `LEFT JOIN`'s start program copies the start it replaces here before deleting it.
    pub const OLD: i32 = 2;
    /// Entries.
    pub const ENTRIES: u32 = 3;
}

/// Indexes of the maps after the plan's own: the stack-trace map (when a
/// program reads a stack column), a pairing's per-CPU scratch values (when
/// a start value holds strings, or a `LEFT JOIN` start program takes the
/// start it replaces) and the event counters ([`counters`], always last).
/// Numbered from what the plan reads before the programs are emitted;
/// [`LateMaps::append`] checks the programs agree.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct LateMaps {
    /// The stack-trace map ([`MapKind::StackTrace`]).
    pub(super) stack: Option<usize>,
    /// The scratch values ([`scratch`]).
    pub(super) scratch: Option<usize>,
    /// The event counters.
    pub(super) counters: usize,
    /// The fault-in buffer of sleepable programs ([`super::fault_in`]):
    /// right after the counters, created only when a program writes it.
    pub(super) fault_in: usize,
}

impl LateMaps {
    /// The late maps numbered after the first `before` maps.
    pub(super) fn after(before: usize, stack: bool, scratch: bool) -> LateMaps {
        let stack = stack.then_some(before);
        let scratch = scratch.then_some(before + stack.is_some() as usize);
        let counters = before + stack.is_some() as usize + scratch.is_some() as usize;
        LateMaps {
            stack,
            scratch,
            counters,
            fault_in: counters + 1,
        }
    }

    /// Appends the late maps' specs to `maps` (which holds the first
    /// `before` maps), given the maps each program references
    /// ([`super::ProgramSpec::maps`]): the counters with one entry per program and the
    /// scratch values `scratch_value_size` bytes each, and after them the
    /// fault-in buffer of `fault_in_bytes` when a program writes it. An internal error
    /// when the numbering and the emitted programs disagree: a map numbered
    /// but not referenced, a reference past the last map, or `maps` not
    /// holding the maps numbered before the late ones.
    pub(super) fn append(
        &self,
        programs: &[&[usize]],
        maps: &mut Vec<MapSpec>,
        scratch_value_size: u32,
        fault_in_bytes: u32,
    ) -> Result<(), CompileError> {
        let first = self.stack.or(self.scratch).unwrap_or(self.counters);
        if maps.len() != first {
            return Err(CompileError::Internal(format!(
                "map numbering: {} maps before the late ones, numbered from {first}",
                maps.len()
            )));
        }
        if self.stack.is_some() {
            maps.push(MapSpec {
                name: "ebql_stacks".into(),
                kind: MapKind::StackTrace,
                key_size: 4,
                value_size: 8 * STACK_DEPTH,
                max_entries: STACK_MAP_ENTRIES,
            });
        }
        if self.scratch.is_some() {
            maps.push(MapSpec {
                name: "ebql_scratch".into(),
                kind: MapKind::PercpuArray,
                key_size: 4,
                value_size: scratch_value_size,
                max_entries: scratch::ENTRIES,
            });
        }
        maps.push(MapSpec {
            name: counters::MAP_NAME.into(),
            kind: MapKind::PercpuArray,
            key_size: 4,
            value_size: counters::SIZE,
            max_entries: programs.len() as u32,
        });
        let used: Vec<usize> = programs.iter().flat_map(|p| p.iter().copied()).collect();
        if used.contains(&self.fault_in) {
            // One value every CPU writes and none reads: only its faults matter.
            maps.push(MapSpec {
                name: "ebql_faultin".into(),
                kind: MapKind::Array,
                key_size: 4,
                value_size: fault_in_bytes.max(8),
                max_entries: 1,
            });
        }
        if let Some(&past) = used.iter().find(|&&i| i >= maps.len()) {
            return Err(CompileError::Internal(format!(
                "map numbering: a program references map {past} of {}",
                maps.len()
            )));
        }
        for (what, index) in [("stack-trace", self.stack), ("scratch", self.scratch)] {
            if let Some(i) = index.filter(|i| !used.contains(i)) {
                return Err(CompileError::Internal(format!(
                    "map numbering: the {what} map (index {i}) was numbered but no program reads it"
                )));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{compile, listing, PREAD};
    use super::LateMaps;
    use crate::contract::{MapKind, MapSpec};

    #[test]
    fn late_maps_are_numbered_after_the_plan_maps_in_order() {
        let all = LateMaps::after(5, true, true);
        assert_eq!(
            (all.stack, all.scratch, all.counters),
            (Some(5), Some(6), 7)
        );
        let counters_only = LateMaps::after(3, false, false);
        assert_eq!(
            (
                counters_only.stack,
                counters_only.scratch,
                counters_only.counters
            ),
            (None, None, 3)
        );
    }

    #[test]
    fn a_numbered_map_no_program_reads_is_an_internal_error() {
        let late = LateMaps::after(1, true, false);
        let mut maps = vec![MapSpec {
            name: "ebql_ctl".into(),
            kind: MapKind::MmapArray,
            key_size: 4,
            value_size: 8,
            max_entries: 1,
        }];
        let program: &[usize] = &[0, 2];
        let err = late.append(&[program], &mut maps, 0, 0).unwrap_err();
        assert!(
            err.to_string().contains("stack-trace map (index 1)"),
            "{err}"
        );
    }

    #[test]
    fn the_counters_map_is_last_and_its_index_is_emitted_directly() {
        let q = compile(&format!("SELECT fd, count FROM {PREAD} WHERE pid = 7"));
        assert_eq!(q.code.counters, q.code.maps.len() - 1);
        assert_eq!(q.code.maps[q.code.counters].kind, MapKind::PercpuArray);
        let l = listing(&q, 0);
        assert!(
            l.contains(&format!("r1 = map_fd({})", q.code.counters)),
            "{l}"
        );
        assert_eq!(q.code.programs[0].maps, [0, 1, q.code.counters]);
    }
}
