//! The raw syscall hook as an alternative for syscall tracepoints.
//!
//! `tracepoint:syscalls:sys_enter_<name>` can run on its tracefs tracepoint
//! or on the raw hook `raw_syscalls:sys_enter` (`tp_btf`, or `raw_tp`
//! without kernel BTF for trampolines; arguments `struct pt_regs *regs,
//! long id`), which fires for every system call; `sys_exit_<name>` likewise
//! on `raw_syscalls:sys_exit` (`regs, long ret`). On the raw hook the
//! program begins with a guard ([`RawHook`], emitted by codegen before
//! anything else, the oracle's tap included): the syscall number must be
//! `__NR_<name>` ([`ebql_catalog::syscalls`]) and the call must not be a
//! 32-bit (ia32) one, which the tracefs tracepoints skip. Then come the
//! query's filters and output unchanged.
//!
//! The lowering is a schema: the event keeps its name, columns, types and
//! system attributes, and only how each field is read changes
//! ([`lower`]): `__syscall_nr` is the hook's `id` (enter) or
//! `regs->orig_ax` (exit), argument `i` is `regs-><ARG_REGS[i]>` (the
//! x86-64 syscall ABI, as the kernel fills the tracefs record), `ret` is
//! the hook's `ret`; all through BTF paths resolved by the catalog (direct
//! loads on tp_btf, `bpf_probe_read_kernel` on raw_tp). The planner sees
//! the lowered schema through [`HookedSource`], so everything downstream
//! is the single-event (or pairing) code as for any BTF-typed event.

use crate::choose::{choose_hook, Hook, HookChoice, HookDecision, PlanChoices};
use crate::error::CompileError;
use crate::kexpr::{field_expr, KExpr};
use crate::planner::EventSource;
use ebql_bpf::{helper, AluOp, Assembler, JmpCond, Label, Reg, Size, Src, StackAlloc};
use ebql_catalog::syscalls::{tracefs_syscall, SyscallSide, ARG_REGS, NR_REG, TS_COMPAT};
use ebql_catalog::{Attach, CatalogError, EventKind, EventName, EventSchema, TraceField};
use std::sync::Mutex;

/// How a syscall tracepoint runs on the raw hook: what codegen emits first
/// and where the program attaches.
#[derive(Clone, Debug, PartialEq)]
pub struct RawHook {
    /// The tracefs event the query names (`syscalls:sys_enter_pread64`).
    pub tracefs: EventName,
    /// The event the program is loaded and attached as
    /// (`tp_btf:raw_syscalls:sys_enter` or `raw_tp:…`).
    pub program_event: EventName,
    /// Where it attaches (the catalog's description of the raw hook).
    pub attach: Attach,
    /// Enter or exit.
    pub side: SyscallSide,
    /// The x86-64 syscall number the guard lets through.
    pub nr: u32,
    /// The call's name as tracefs spells it (`pread64`), for messages.
    pub name: String,
    /// How the program reads the syscall number (`id`, or `regs->orig_ax` at exit).
    pub id: KExpr,
    /// Byte offset of `thread_info.status` in `task_struct` ([`TS_COMPAT`] lives there).
    pub compat_status_offset: u32,
    /// tp_btf: the current task is read with direct loads; raw_tp: with `bpf_probe_read_kernel`.
    pub direct: bool,
}

impl RawHook {
    /// The `TS_COMPAT` bit the guard tests.
    pub const TS_COMPAT: u32 = TS_COMPAT;
}

/// What the planner decided for the query's syscall tracepoints, for `explain`.
#[derive(Clone, Debug, PartialEq)]
pub struct HookReport {
    /// The rule's decision ([`choose_hook`]).
    pub decision: HookDecision,
    /// Each syscall tracepoint of the query: its name, its number if known,
    /// and its raw hook when it runs there, else why not.
    pub events: Vec<HookedEvent>,
}

impl HookReport {
    /// Whether the automatic rule would use sampled rates that are missing:
    /// the executor then samples and compiles again.
    pub fn wants_rates(&self, choices: &PlanChoices) -> bool {
        choices.hook == HookChoice::Auto
            && choices.optimize == crate::choose::Optimize::Total
            && choices.rates.is_none()
            && self.events.iter().any(|e| e.nr.is_some())
    }

    /// The syscall numbers of the query's syscall events (one per event).
    pub fn traced_nrs(&self) -> Vec<u32> {
        self.events.iter().filter_map(|e| e.nr).collect()
    }

    /// The explicit [`HookChoice`] that compiles the query onto the hook
    /// this report chose (`asked`: the choice it was compiled with, whose
    /// `raw_tp` form is kept), so another plan of the same query (its
    /// sample, its other aggregate placement) runs on the same hook.
    pub fn pinned(&self, asked: HookChoice) -> HookChoice {
        // Where the events went, not only the rule's decision: a kernel
        // without the raw hook keeps them on tracefs although the rule said raw.
        let raw = self.decision.chosen == Hook::Raw && self.events.iter().any(|e| e.raw.is_some());
        match (raw, asked) {
            (_, HookChoice::RawTp) => HookChoice::RawTp,
            (true, _) => HookChoice::Raw,
            (false, _) => HookChoice::Tracefs,
        }
    }
}

/// One syscall tracepoint of a query and the hook it runs on.
#[derive(Clone, Debug, PartialEq)]
pub struct HookedEvent {
    /// The tracefs event.
    pub event: EventName,
    /// Its x86-64 syscall number, if [`ebql_catalog::syscalls`] knows it.
    pub nr: Option<u32>,
    /// The raw hook it runs on, or `None` (tracefs).
    pub raw: Option<RawHook>,
    /// Why it stays on tracefs although the decision was raw.
    pub note: Option<String>,
}

/// An [`EventSource`] that gives syscall tracepoints their raw-hook schema
/// when the hook decision says so, and records what it did.
pub struct HookedSource<'a> {
    inner: &'a dyn EventSource,
    choices: PlanChoices,
    decision: HookDecision,
    seen: Mutex<Vec<HookedEvent>>,
}

impl<'a> HookedSource<'a> {
    /// Wraps `inner`, deciding the hook from `choices`.
    pub fn new(inner: &'a dyn EventSource, choices: &PlanChoices) -> HookedSource<'a> {
        HookedSource {
            inner,
            choices: *choices,
            decision: choose_hook(choices),
            seen: Mutex::new(Vec::new()),
        }
    }

    /// The raw hooks of the events planned so far (codegen emits their guards).
    pub fn hooks(&self) -> Vec<RawHook> {
        self.seen
            .lock()
            .expect("not poisoned")
            .iter()
            .filter_map(|e| e.raw.clone())
            .collect()
    }

    /// What was decided, when the query has a syscall tracepoint.
    pub fn report(&self) -> Option<HookReport> {
        let events = self.seen.lock().expect("not poisoned").clone();
        (!events.is_empty()).then(|| HookReport {
            decision: self.decision.clone(),
            events,
        })
    }

    fn record(&self, e: HookedEvent) {
        let mut seen = self.seen.lock().expect("not poisoned");
        if !seen.iter().any(|s| s.event == e.event) {
            seen.push(e);
        }
    }

    /// The raw-hook schema of `tracefs`, or why it has none.
    fn raw_schema(
        &self,
        tracefs: &EventSchema,
        side: SyscallSide,
        nr: u32,
    ) -> Result<(EventSchema, RawHook), String> {
        let hook_name = match side {
            SyscallSide::Enter => "sys_enter",
            SyscallSide::Exit => "sys_exit",
        };
        // tp_btf (direct loads) where the kernel has it and raw_tp is not asked for, else raw_tp.
        let btf = (self.choices.hook != HookChoice::RawTp).then(|| {
            self.inner
                .event(&EventName::new(EventKind::TpBtf, "raw_syscalls", hook_name))
        });
        let raw = match btf {
            Some(Ok(s)) => s,
            _ => self
                .inner
                .event(&EventName::new(
                    EventKind::RawTracepoint,
                    "raw_syscalls",
                    hook_name,
                ))
                .map_err(|e| format!("no raw syscall hook on this kernel: {e}"))?,
        };
        let status = ebql_catalog::syscalls::compat_status_offset().map_err(|e| e.to_string())?;
        lower(self.inner, tracefs, &raw, side, nr, status)
    }
}

impl EventSource for HookedSource<'_> {
    fn event(&self, name: &EventName) -> Result<EventSchema, CatalogError> {
        let schema = self.inner.event(name)?;
        if name.kind != EventKind::Tracepoint {
            return Ok(schema);
        }
        let side = match (
            name.category.as_str(),
            name.name.starts_with("sys_enter_"),
            name.name.starts_with("sys_exit_"),
        ) {
            ("syscalls", true, _) => SyscallSide::Enter,
            ("syscalls", _, true) => SyscallSide::Exit,
            _ => return Ok(schema),
        };
        let nr = tracefs_syscall(&name.category, &name.name).map(|(_, nr)| nr);
        let mut seen = HookedEvent {
            event: name.clone(),
            nr,
            raw: None,
            note: None,
        };
        if self.decision.chosen == Hook::Tracefs {
            self.record(seen);
            return Ok(schema);
        }
        let lowered = match nr {
            Some(nr) => self.raw_schema(&schema, side, nr),
            None => Err(format!(
                "`{}` is not in eBQL's x86-64 syscall table (a call newer than Linux 6.18?)",
                name.name
            )),
        };
        match lowered {
            Ok((raw_schema, hook)) => {
                seen.raw = Some(hook);
                self.record(seen);
                Ok(raw_schema)
            }
            Err(why) if matches!(self.choices.hook, HookChoice::Raw | HookChoice::RawTp) => {
                Err(CatalogError::Unavailable {
                    kind: "raw syscall hook".into(),
                    why: format!(
                        "{} cannot run on the raw syscall hook: {why}",
                        name.table_name()
                    ),
                    hint: "use --hook tracefs (or auto)".into(),
                })
            }
            Err(why) => {
                seen.note = Some(why);
                self.record(seen);
                Ok(schema)
            }
        }
    }

    fn field_path(
        &self,
        event: &EventSchema,
        path: &[String],
    ) -> Result<Option<TraceField>, CatalogError> {
        self.inner.field_path(event, path)
    }
}

/// The raw-hook schema of the tracefs syscall event `tracefs`: same name,
/// columns, types and attributes; fields read from the raw hook `raw`
/// (`raw_syscalls:sys_enter`/`sys_exit`, tp_btf or raw_tp) through the
/// catalog's BTF paths of `source`; attach = the raw hook's. With the guard
/// codegen emits first. `status_offset`: where `TS_COMPAT` is in `task_struct`.
///
/// Errors (why the event stays on tracefs): a record field that is not
/// `__syscall_nr`, an argument in its ABI register, or `ret`.
pub fn lower(
    source: &dyn EventSource,
    tracefs: &EventSchema,
    raw: &EventSchema,
    side: SyscallSide,
    nr: u32,
    status_offset: u32,
) -> Result<(EventSchema, RawHook), String> {
    let path = |parts: &[&str]| -> Result<TraceField, String> {
        let p: Vec<String> = parts.iter().map(|s| s.to_string()).collect();
        source
            .field_path(raw, &p)
            .map_err(|e| e.to_string())?
            .ok_or_else(|| format!("{} has no `{}`", raw.event, parts.join(".")))
    };
    // The hooks' arguments, by position: (struct pt_regs *regs, long id) at
    // entry, (struct pt_regs *regs, long ret) at exit.
    let (regs, second) = match raw.fields.as_slice() {
        [regs, second] => (regs.name.clone(), second.clone()),
        other => {
            return Err(format!(
                "{} has {} arguments, expected (regs, id|ret)",
                raw.event,
                other.len()
            ))
        }
    };
    let direct = matches!(raw.attach, Attach::Btf { .. });
    let mut fields = Vec::new();
    let mut args = 0usize;
    for f in &tracefs.fields {
        let source = match (side, f.name.as_str()) {
            (SyscallSide::Enter, "__syscall_nr") => second.clone(),
            (SyscallSide::Exit, "__syscall_nr") => path(&[&regs, NR_REG])?,
            (SyscallSide::Exit, "ret") => second.clone(),
            (SyscallSide::Enter, _) => {
                let reg = ARG_REGS
                    .get(args)
                    .ok_or_else(|| format!("`{}` is a 7th argument", f.name))?;
                if f.offset != 16 + 8 * args as u32 || f.size != 8 {
                    return Err(format!(
                        "`{}` is not argument {} of the syscall record (offset {}, size {})",
                        f.name,
                        args + 1,
                        f.offset,
                        f.size
                    ));
                }
                args += 1;
                path(&[&regs, reg])?
            }
            (SyscallSide::Exit, other) => {
                return Err(format!("`{other}` is not a field of a syscall exit"))
            }
        };
        // The tracefs field's name, type and kind; the raw hook's way of reading it.
        fields.push(TraceField {
            access: source.access,
            offset: 0,
            ..f.clone()
        });
    }
    let id_field = match side {
        SyscallSide::Enter => second.clone(),
        SyscallSide::Exit => path(&[&regs, NR_REG])?,
    };
    let id = field_expr(&id_field)
        .ok_or_else(|| format!("{} `{}` is not an integer", raw.event, id_field.name))?;
    debug_assert!(
        id.ty().bits == 64,
        "the syscall number is read at its full width"
    );
    let hook = RawHook {
        tracefs: tracefs.event.clone(),
        program_event: raw.event.clone(),
        attach: raw.attach.clone(),
        side,
        nr,
        name: tracefs
            .event
            .name
            .trim_start_matches("sys_enter_")
            .trim_start_matches("sys_exit_")
            .to_string(),
        id,
        compat_status_offset: status_offset,
        direct,
    };
    Ok((
        EventSchema {
            event: tracefs.event.clone(),
            attach: raw.attach.clone(),
            fields,
            attrs: tracefs.attrs.clone(),
        },
        hook,
    ))
}

/// Emits the raw hook's guard after the syscall number was loaded into
/// `id`: other syscall numbers exit, then 32-bit (ia32) calls exit (the
/// current task's `thread_info.status & TS_COMPAT`, read with a direct load
/// on tp_btf, `bpf_probe_read_kernel` on raw_tp). Clobbers r0–r5.
pub(crate) fn emit_guard(
    asm: &mut Assembler,
    stack: &mut StackAlloc,
    id: Reg,
    h: &RawHook,
    exit: Label,
) -> Result<(), CompileError> {
    let nr = i32::try_from(h.nr)
        .map_err(|_| CompileError::Internal(format!("syscall number {}", h.nr)))?;
    asm.jmp(JmpCond::Ne, id, Src::Imm(nr), exit);
    asm.origin("Hook: not a 32-bit (ia32) system call, which the tracefs tracepoint skips (current->thread_info.status & TS_COMPAT)");
    let off = i16::try_from(h.compat_status_offset).map_err(|_| {
        CompileError::Internal(format!("thread_info.status at {}", h.compat_status_offset))
    })?;
    if h.direct {
        asm.call(helper::GET_CURRENT_TASK_BTF);
        asm.ldx(Size::W, Reg::R1, Reg::R0, off);
    } else {
        let slot = stack
            .alloc(8, 8)
            .map_err(|e| CompileError::Internal(format!("BPF stack: {e}")))?;
        asm.call(helper::GET_CURRENT_TASK);
        asm.mov64(Reg::R3, Src::Reg(Reg::R0));
        asm.alu64(AluOp::Add, Reg::R3, Src::Imm(i32::from(off)));
        asm.mov64(Reg::R1, Src::Reg(Reg::R10));
        asm.alu64(AluOp::Add, Reg::R1, Src::Imm(i32::from(slot)));
        asm.mov64(Reg::R2, Src::Imm(4));
        asm.call(helper::PROBE_READ_KERNEL);
        asm.ldx(Size::W, Reg::R1, Reg::R10, slot);
    }
    asm.jmp(JmpCond::Set, Reg::R1, Src::Imm(TS_COMPAT as i32), exit);
    Ok(())
}

/// Slots of the syscall-rate sampler's per-CPU array: one per syscall number
/// below the last, which counts every other number (x32 calls, numbers no
/// table has, -1).
pub const SAMPLER_SLOTS: u32 = 512;

/// The syscall-rate sampler: a program for `raw_syscalls:sys_enter` (tp_btf
/// or raw_tp: both see `u64 args[] = {regs, id}`) that adds one to the
/// per-CPU counter of the call's number in map 0, a
/// [`crate::contract::MapKind::PercpuArray`] of [`SAMPLER_SLOTS`] u64 (no
/// atomics: one CPU runs one tracing program at a time). The executor runs
/// it for a moment before planning to learn the machine's system call rate
/// and the traced call's ([`crate::choose::SyscallRates`]).
pub fn rate_sampler() -> Result<ebql_bpf::Program, CompileError> {
    let mut asm = Assembler::new();
    let (exit, count) = (asm.new_label(), asm.new_label());
    asm.origin("syscall-rate sampler: counts[min(id, 511)] += 1 (per CPU)");
    asm.ldx(Size::DW, Reg::R1, Reg::R1, 8);
    let last = (SAMPLER_SLOTS - 1) as i32;
    asm.comment("unsigned: a negative id is a huge number, and lands in the last slot too");
    asm.jmp(JmpCond::Lt, Reg::R1, Src::Imm(last), count);
    asm.mov64(Reg::R1, Src::Imm(last));
    asm.bind(count);
    asm.stx(Size::W, Reg::R10, -4, Reg::R1);
    asm.ld_map_fd(Reg::R1, 0);
    asm.mov64(Reg::R2, Src::Reg(Reg::R10));
    asm.alu64(AluOp::Add, Reg::R2, Src::Imm(-4));
    asm.call(helper::MAP_LOOKUP_ELEM);
    asm.jmp(JmpCond::Eq, Reg::R0, Src::Imm(0), exit);
    asm.ldx(Size::DW, Reg::R1, Reg::R0, 0);
    asm.alu64(AluOp::Add, Reg::R1, Src::Imm(1));
    asm.stx(Size::DW, Reg::R0, 0, Reg::R1);
    asm.bind(exit);
    asm.mov64(Reg::R0, Src::Imm(0));
    asm.exit();
    asm.finish()
        .map_err(|e| CompileError::Internal(format!("sampler: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::choose::HookChoice;
    use ebql_catalog::samples::{SYS_ENTER_PREAD64, SYS_EXIT_PREAD64};
    use ebql_catalog::source::pt_regs::REGS;
    use ebql_catalog::{parse_format, Access, BtfStep, FieldKind};

    /// The tracefs pread64 events, and hand-made raw syscall hooks whose
    /// `regs.<reg>` paths are the x86-64 `pt_regs` offsets (what kernel BTF gives).
    struct Source {
        raw: bool,
    }

    fn btf(arg: u32, steps: Vec<BtfStep>) -> Access {
        Access::Btf {
            arg,
            steps,
            direct: true,
        }
    }

    impl EventSource for Source {
        fn event(&self, name: &EventName) -> Result<EventSchema, CatalogError> {
            let second = if name.name == "sys_enter" {
                "id"
            } else {
                "ret"
            };
            match (name.kind, name.category.as_str(), name.name.as_str()) {
                (EventKind::Tracepoint, "syscalls", "sys_enter_pread64") => {
                    parse_format(name.clone(), SYS_ENTER_PREAD64)
                }
                (EventKind::Tracepoint, "syscalls", "sys_exit_pread64") => {
                    parse_format(name.clone(), SYS_EXIT_PREAD64)
                }
                (EventKind::TpBtf, "raw_syscalls", _) if self.raw => Ok(EventSchema {
                    event: name.clone(),
                    attach: Attach::Btf {
                        name: name.name.clone(),
                        btf_id: 1,
                    },
                    fields: vec![
                        TraceField {
                            name: "regs".into(),
                            c_type: "struct pt_regs *".into(),
                            offset: 0,
                            size: 8,
                            kind: FieldKind::Pointer,
                            access: btf(0, vec![]),
                        },
                        TraceField {
                            name: second.into(),
                            c_type: "long int".into(),
                            offset: 8,
                            size: 8,
                            kind: FieldKind::Int { signed: true },
                            access: btf(1, vec![]),
                        },
                    ],
                    attrs: vec![],
                }),
                _ => Err(CatalogError::UnknownEvent {
                    name: name.table_name(),
                    suggestion: None,
                }),
            }
        }

        fn field_path(
            &self,
            _event: &EventSchema,
            path: &[String],
        ) -> Result<Option<TraceField>, CatalogError> {
            let reg = format!("r{}", path[1]).replace("rr", "r");
            let offset = REGS
                .iter()
                .find(|(n, _)| *n == reg || *n == "orig_rax" && path[1] == "orig_ax")
                .map(|(_, o)| *o)
                .expect("a pt_regs member");
            Ok(Some(TraceField {
                name: path.join("."),
                c_type: "long unsigned int".into(),
                offset: 0,
                size: 8,
                kind: FieldKind::Int { signed: false },
                access: btf(
                    0,
                    vec![BtfStep {
                        offset,
                        deref: false,
                    }],
                ),
            }))
        }
    }

    fn schema(source: &dyn EventSource, event: &str) -> EventSchema {
        source
            .event(&EventName::tracepoint("syscalls", event))
            .unwrap()
    }

    #[test]
    fn arguments_come_from_the_syscall_registers() {
        let src = Source { raw: true };
        let raw = |n: &str| {
            src.event(&EventName::new(EventKind::TpBtf, "raw_syscalls", n))
                .unwrap()
        };
        let (enter, hook) = lower(
            &src,
            &schema(&src, "sys_enter_pread64"),
            &raw("sys_enter"),
            SyscallSide::Enter,
            17,
            16,
        )
        .unwrap();
        let access = |s: &EventSchema, f: &str| s.field(f).unwrap().access.clone();
        let reg = |offset| {
            btf(
                0,
                vec![BtfStep {
                    offset,
                    deref: false,
                }],
            )
        };
        // fd, buf, count, pos: rdi, rsi, rdx, r10.
        assert_eq!(
            ["fd", "buf", "count", "pos"].map(|f| access(&enter, f)),
            [reg(112), reg(104), reg(96), reg(56)]
        );
        assert_eq!(
            access(&enter, "__syscall_nr"),
            btf(1, vec![]),
            "the hook's id"
        );
        assert_eq!(
            enter.field("fd").unwrap().c_type,
            "unsigned int",
            "names and C types stay the tracefs ones"
        );
        assert_eq!(
            (enter.event.kind, &enter.attach),
            (
                EventKind::Tracepoint,
                &Attach::Btf {
                    name: "sys_enter".into(),
                    btf_id: 1
                }
            )
        );
        assert_eq!(
            (hook.nr, hook.direct, hook.program_event.kind),
            (17, true, EventKind::TpBtf)
        );
        let (exit, hook) = lower(
            &src,
            &schema(&src, "sys_exit_pread64"),
            &raw("sys_exit"),
            SyscallSide::Exit,
            17,
            16,
        )
        .unwrap();
        assert_eq!(
            (access(&exit, "ret"), access(&exit, "__syscall_nr")),
            (btf(1, vec![]), reg(120))
        );
        assert_eq!(
            hook.id,
            field_expr(
                &src.field_path(&exit, &["regs".into(), "orig_ax".into()])
                    .unwrap()
                    .unwrap()
            )
            .unwrap(),
            "the exit's number is regs->orig_ax"
        );
    }

    #[test]
    fn automatic_choice_without_rates_keeps_tracefs_and_reports_the_call() {
        let src = Source { raw: true };
        let hooked = HookedSource::new(&src, &PlanChoices::new());
        let s = hooked
            .event(&EventName::tracepoint("syscalls", "sys_enter_pread64"))
            .unwrap();
        assert!(matches!(s.attach, Attach::Tracepoint { .. }));
        let report = hooked.report().unwrap();
        assert_eq!(
            (report.decision.chosen, report.traced_nrs()),
            (Hook::Tracefs, vec![17])
        );
        assert!(
            report.wants_rates(&PlanChoices::new()),
            "the executor may sample and plan again"
        );
        assert!(hooked.hooks().is_empty());
    }

    #[test]
    fn raw_asked_where_there_is_no_raw_hook_is_an_error() {
        let src = Source { raw: false };
        let choices = PlanChoices {
            hook: HookChoice::Raw,
            ..PlanChoices::new()
        };
        let err = HookedSource::new(&src, &choices)
            .event(&EventName::tracepoint("syscalls", "sys_enter_pread64"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("tracepoint/syscalls/sys_enter_pread64 cannot run on the raw syscall hook: no raw syscall hook on this kernel"), "{err}");
    }
}
