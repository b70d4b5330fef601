//! A query over several events ([`crate::multi`]): each branch is compiled
//! as a query of its own, then its programs join the first branch's
//! `Compiled`. Maps of one name are one map (the control map, the shared
//! output, the tap, the stack traces, the event counters, which get an
//! entry per program), so every branch writes the same stream under the
//! same window clock; a map only one branch uses is added.

use super::gen::{maps_of, ProgramSpec};
use crate::contract::{counters, MapSpec};
use crate::CompileError;
use ebql_bpf::Program;

/// Adds a branch's `programs` to those of the first (`into`), their map
/// placeholders renumbered from the branch's `maps` into `into_maps`.
///
/// Errors: `Internal` when two maps of one name differ (the split gives
/// every branch the same output).
pub(super) fn merge(
    into: &mut Vec<ProgramSpec>,
    into_maps: &mut Vec<MapSpec>,
    programs: Vec<ProgramSpec>,
    maps: &[MapSpec],
) -> Result<(), CompileError> {
    let mut index = Vec::with_capacity(maps.len());
    for m in maps {
        let at = match into_maps.iter().position(|x| x.name == m.name) {
            Some(k) if m.name == counters::MAP_NAME => {
                into_maps[k].max_entries += m.max_entries;
                k
            }
            Some(k) if into_maps[k] == *m => k,
            Some(_) => {
                return Err(CompileError::Internal(format!(
                    "the branches' maps {} differ",
                    m.name
                )))
            }
            None => {
                into_maps.push(m.clone());
                into_maps.len() - 1
            }
        };
        index.push(at);
    }
    for mut p in programs {
        renumber_maps(&mut p.program, &index);
        p.maps = maps_of(&p.program);
        into.push(p);
    }
    Ok(())
}

/// Rewrites `program`'s map placeholders (`ld_imm64` of a map fd or value):
/// map `i` becomes `index[i]`.
fn renumber_maps(program: &mut Program, index: &[usize]) {
    for insn in program
        .insns
        .iter_mut()
        .filter(|i| i.code == 0x18 && (i.src == 1 || i.src == 2))
    {
        insn.imm = index[insn.imm as usize] as i32;
    }
}
