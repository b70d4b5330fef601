//! A program the verifier refuses comes back as a `VerifierRejection` with the
//! log tail and the failing instruction, which callers map to a plan node.

use ebql_bpf::{Assembler, Reg, Size, Src};
use ebql_runtime::{Program, RuntimeError};

#[test]
fn verifier_rejection_names_the_instruction() {
    assert_eq!(
        unsafe { libc::geteuid() },
        0,
        "loading BPF programs needs root (CI runs as root)"
    );
    let mut asm = Assembler::new();
    asm.origin("prologue");
    asm.mov64(Reg::R0, Src::Imm(0));
    asm.origin("Filter: deliberately broken");
    asm.ldx(Size::DW, Reg::R0, Reg::R2, 0); // r2 is not initialized
    asm.exit();
    let prog = asm.finish().unwrap();
    let err = Program::load_tracepoint("ebql_broken", &prog.bytes(), &[]).unwrap_err();
    let RuntimeError::Verifier(v) = err else {
        panic!("not a verifier rejection: {err}")
    };
    assert_eq!(v.pc, Some(1), "log:\n{}", v.log_tail);
    assert_eq!(prog.origin_of(1), Some("Filter: deliberately broken"));
    assert!(v.log_tail.contains("R2 !read_ok"), "{}", v.log_tail);
}
