//! A program's *shared test*: the first of its filter's conjuncts that
//! reads only the event's own fields (cost class 1: no helper, no string,
//! no map), compiled alone as a subprogram. A shared hook's chunk
//! (`ebql_runtime::SharedHooks`) calls it once for every run of its members
//! that begin with the same test, and skips the run when it fails: a
//! predicate common to several queries is evaluated once per event. The
//! members still test it themselves, so the chunk only skips calls whose
//! outcome is known.

use super::gen::{maps_of, Gen, SharedTest, CTX};
use super::maps::LateMaps;
use crate::error::CompileError;
use crate::kexpr::KPred;
use crate::syscall_hook::RawHook;
use ebql_bpf::{Reg, Src};

/// The shared test of a program on `event` (at `hook`) whose conjuncts
/// are `filters`, in emission order; `None` when none qualifies or the
/// program's kind cannot share a hook.
pub(super) fn shared_test(
    event: &ebql_catalog::EventSchema,
    hook: Option<&RawHook>,
    filters: &[(KPred, &str)],
) -> Result<Option<SharedTest>, CompileError> {
    let loaded_as = hook.map_or(event.event.kind, |h| h.program_event.kind);
    if !loaded_as.shares_hook() {
        return Ok(None);
    }
    let Some((pred, text)) = filters
        .iter()
        .find(|(p, _)| p.cost_class() == 1 && *p != KPred::Const(true))
    else {
        return Ok(None);
    };
    let mut g = Gen::new(
        vec![Reg::R8, Reg::R7],
        None,
        0,
        LateMaps::after(0, false, false),
    );
    g.asm
        .origin("shared test: the conjunct the chunk tests once for its run");
    g.asm.mov64(CTX, Src::Reg(Reg::R1));
    g.take_event_cache(loaded_as, true)?;
    g.emit_hook_guard(hook)?;
    let fails = g.exit;
    g.jump_if(pred, false, fails)?;
    g.asm.mov64(Reg::R0, Src::Imm(1));
    g.asm.exit();
    g.asm.bind(fails);
    g.asm.mov64(Reg::R0, Src::Imm(0));
    g.asm.exit();
    let program = g
        .asm
        .finish()
        .map_err(|e| CompileError::Internal(format!("code generation: {e}")))?;
    if !maps_of(&program).is_empty() {
        return Ok(None);
    }
    let at = hook.map(|h| h.program_event.to_string());
    Ok(Some(SharedTest {
        key: format!("{}|{at:?}|{pred:?}", event.event),
        text: text.to_string(),
        code: program.bytes(),
    }))
}
