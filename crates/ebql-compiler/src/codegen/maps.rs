//! Map numbering: the maps a query's programs reference, by index into
//! [`super::Compiled::maps`].

use super::gen::{
    maps_of, ProgramSpec, COUNTERS_MAP_PENDING, SCRATCH_MAP_PENDING, STACK_MAP_PENDING,
};
use super::pairing::scratch;
use crate::contract::{counters, MapKind, MapSpec, STACK_DEPTH};

/// Appends the event counters map ([`counters`], one entry per program) to
/// `maps`, patches [`COUNTERS_MAP_PENDING`] into its index and returns it.
pub(super) fn add_counters_map(programs: &mut [ProgramSpec], maps: &mut Vec<MapSpec>) -> usize {
    maps.push(MapSpec {
        name: counters::MAP_NAME.into(),
        kind: MapKind::PercpuArray,
        key_size: 4,
        value_size: counters::SIZE,
        max_entries: programs.len() as u32,
    });
    let index = maps.len() - 1;
    for p in programs {
        for i in p
            .program
            .insns
            .iter_mut()
            .filter(|i| i.code == 0x18 && i.src == 1 && i.imm == COUNTERS_MAP_PENDING)
        {
            i.imm = index as i32;
        }
        p.maps = maps_of(&p.program);
    }
    index
}

/// When a program uses the scratch values ([`SCRATCH_MAP_PENDING`]):
/// appends the map (`value_size` bytes per entry) and patches the placeholder.
pub(super) fn add_scratch_map(
    programs: &mut [ProgramSpec],
    maps: &mut Vec<MapSpec>,
    value_size: u32,
) {
    let pending = |i: &ebql_bpf::Insn| i.code == 0x18 && i.src == 1 && i.imm == SCRATCH_MAP_PENDING;
    if !programs.iter().any(|p| p.program.insns.iter().any(pending)) {
        return;
    }
    maps.push(MapSpec {
        name: "ebql_scratch".into(),
        kind: MapKind::PercpuArray,
        key_size: 4,
        value_size,
        max_entries: scratch::ENTRIES,
    });
    let index = (maps.len() - 1) as i32;
    for p in programs {
        for i in p.program.insns.iter_mut().filter(|i| pending(i)) {
            i.imm = index;
        }
        p.maps = maps_of(&p.program);
    }
}

/// Entries of the stack-trace map (each `STACK_DEPTH` u64 frames,
/// preallocated: 8 MiB). A sample whose stack hashes to a bucket holding
/// another stack gets `-EEXIST`, shown as such (no stack is overwritten).
pub const STACK_MAP_ENTRIES: u32 = 8192;

/// When a program reads a stack column: appends the stack-trace map
/// ([`MapKind::StackTrace`]) to `maps` and patches [`STACK_MAP_PENDING`]
/// into its index.
pub(super) fn add_stack_map(programs: &mut [ProgramSpec], maps: &mut Vec<MapSpec>) {
    let pending = |i: &ebql_bpf::Insn| i.code == 0x18 && i.src == 1 && i.imm == STACK_MAP_PENDING;
    if !programs.iter().any(|p| p.program.insns.iter().any(pending)) {
        return;
    }
    maps.push(MapSpec {
        name: "ebql_stacks".into(),
        kind: MapKind::StackTrace,
        key_size: 4,
        value_size: 8 * STACK_DEPTH,
        max_entries: STACK_MAP_ENTRIES,
    });
    let index = (maps.len() - 1) as i32;
    for p in programs {
        for i in p.program.insns.iter_mut().filter(|i| pending(i)) {
            i.imm = index;
        }
        p.maps = maps_of(&p.program);
    }
}
