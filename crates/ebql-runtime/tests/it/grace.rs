//! Both grace-period methods wait for a probe run that is in flight: a probe
//! on sys_enter_pread64 (filtered to this process) reads the generation,
//! raises a "started" counter, spins, then counts itself under the
//! generation it read. User space sees "started", stores a new generation
//! and waits: when the wait returns, the run must have counted itself under
//! the old generation. A wait that returned early finds the count at 0: the
//! probe run lasts 20-40 ms here, and with the wait replaced by nothing this
//! test failed in 3 runs out of 3.

use ebql_bpf::{AluOp, Assembler, JmpCond, Reg, Size, Src};
use ebql_catalog::{Attach, EventKind};
use ebql_runtime::{attach, AttachOptions, GracePeriod, GracePeriodMethod, MmapArray, Program};
use std::os::unix::fs::FileExt;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// Control value layout: generation, runs started, runs finished under generation 0, under 1.
const GEN: u32 = 0;
const STARTED: u32 = 8;
const DONE_GEN0: u32 = 16;
const DONE_GEN1: u32 = 24;
/// Iterations of the probe's slow loop, each a bpf_get_stack call (a kernel
/// stack walk, microseconds; the verifier walks each iteration: 7 insns,
/// within its 1M-instruction budget).
const SPIN: i32 = 20_000;
/// `long bpf_get_stack(ctx, buf, size, flags)` (include/uapi/linux/bpf.h).
const BPF_GET_STACK: i32 = 67;

fn slow_probe(tgid: u32) -> Vec<u8> {
    let mut asm = Assembler::new();
    let (out, gen1, spin) = (asm.new_label(), asm.new_label(), asm.new_label());
    asm.mov64(Reg::R9, Src::Reg(Reg::R1));
    asm.call(ebql_bpf::helper::GET_CURRENT_PID_TGID);
    asm.alu64(AluOp::Rsh, Reg::R0, Src::Imm(32));
    asm.jmp(JmpCond::Ne, Reg::R0, Src::Imm(tgid as i32), out);
    asm.ld_map_value(Reg::R6, 0, 0);
    asm.ldx(Size::DW, Reg::R7, Reg::R6, GEN as i16);
    asm.mov64(Reg::R1, Src::Imm(1));
    asm.atomic_add(Size::DW, Reg::R6, STARTED as i16, Reg::R1);
    asm.mov64(Reg::R8, Src::Imm(SPIN));
    asm.bind(spin);
    asm.mov64(Reg::R1, Src::Reg(Reg::R9));
    asm.mov64(Reg::R2, Src::Reg(Reg::R10));
    asm.alu64(AluOp::Add, Reg::R2, Src::Imm(-256));
    asm.mov64(Reg::R3, Src::Imm(256));
    asm.mov64(Reg::R4, Src::Imm(0));
    asm.call(BPF_GET_STACK);
    asm.alu64(AluOp::Sub, Reg::R8, Src::Imm(1));
    asm.jmp(JmpCond::Ne, Reg::R8, Src::Imm(0), spin);
    asm.mov64(Reg::R1, Src::Imm(1));
    asm.jmp(JmpCond::Ne, Reg::R7, Src::Imm(0), gen1);
    asm.atomic_add(Size::DW, Reg::R6, DONE_GEN0 as i16, Reg::R1);
    asm.ja(out);
    asm.bind(gen1);
    asm.atomic_add(Size::DW, Reg::R6, DONE_GEN1 as i16, Reg::R1);
    asm.bind(out);
    asm.mov64(Reg::R0, Src::Imm(0));
    asm.exit();
    asm.finish().expect("assemble").bytes()
}

fn check_waits_for_runs_in_flight(method: GracePeriodMethod) {
    let grace = GracePeriod::new(method).unwrap_or_else(|e| panic!("{method}: {e}"));
    let ctl = MmapArray::create("ebql_t_grace", 32).unwrap();
    let prog = Program::load_tracepoint(
        "ebql_t_grace",
        &slow_probe(std::process::id()),
        &[ctl.map().fd()],
    )
    .unwrap();
    let id: u32 =
        std::fs::read_to_string("/sys/kernel/tracing/events/syscalls/sys_enter_pread64/id")
            .expect("tracefs is mounted (run an ebql query once, or mount it)")
            .trim()
            .parse()
            .unwrap();
    let _link = attach(
        &prog,
        EventKind::Tracepoint,
        &Attach::Tracepoint { id },
        &AttachOptions::default(),
    )
    .unwrap();
    let path = std::env::temp_dir().join(format!(
        "ebql-grace-{}-{}",
        std::process::id(),
        method.name()
    ));
    std::fs::write(&path, [0u8; 64]).unwrap();
    let file = std::fs::File::open(&path).unwrap();
    let _ = std::fs::remove_file(&path);
    let at = |off| ctl.u64_at(off);
    // Several rounds: a round proves nothing when this thread was scheduled
    // out until the probe run had ended (the machine may be busy).
    for round in 0..10 {
        for off in [GEN, STARTED, DONE_GEN0, DONE_GEN1] {
            at(off).store(0, Ordering::SeqCst);
        }
        std::thread::scope(|s| {
            s.spawn(|| file.read_at(&mut [0u8; 8], 0).unwrap());
            let deadline = Instant::now() + Duration::from_secs(10);
            while at(STARTED).load(Ordering::SeqCst) == 0 {
                assert!(Instant::now() < deadline, "the probe never ran");
                std::hint::spin_loop();
            }
            at(GEN).store(1, Ordering::SeqCst);
            grace.wait().unwrap();
            let done = (
                at(DONE_GEN0).load(Ordering::SeqCst),
                at(DONE_GEN1).load(Ordering::SeqCst),
            );
            assert_eq!(done, (1, 0), "{method}, round {round}: the run in flight finished under generation 0 before the wait returned");
        });
    }
}

/// One test: both methods' probes would see each other's pread64 calls.
#[test]
fn both_methods_wait_for_probe_runs_in_flight() {
    assert_eq!(
        unsafe { libc::geteuid() },
        0,
        "loading BPF programs needs root (CI runs as root)"
    );
    check_waits_for_runs_in_flight(GracePeriodMethod::MapInMap);
    if ebql_runtime::membarrier_global_supported() {
        check_waits_for_runs_in_flight(GracePeriodMethod::Membarrier);
    } else {
        // nohz_full kernels: the fallback above is what runs there.
        eprintln!("membarrier(MEMBARRIER_CMD_GLOBAL) is not offered by this kernel: only map-in-map tested");
    }
}
