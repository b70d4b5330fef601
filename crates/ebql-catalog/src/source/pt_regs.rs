//! x86-64 `struct pt_regs` (arch/x86/include/asm/ptrace.h): the context of
//! kprobe-type programs (kprobes, uprobes, USDT). One place for the register
//! offsets so every kind reads arguments the same way.

/// Byte offset of each register in `struct pt_regs`, by its 64-bit name.
pub const REGS: [(&str, u32); 21] = [
    ("r15", 0),
    ("r14", 8),
    ("r13", 16),
    ("r12", 24),
    ("rbp", 32),
    ("rbx", 40),
    ("r11", 48),
    ("r10", 56),
    ("r9", 64),
    ("r8", 72),
    ("rax", 80),
    ("rcx", 88),
    ("rdx", 96),
    ("rsi", 104),
    ("rdi", 112),
    ("orig_rax", 120),
    ("rip", 128),
    ("cs", 136),
    ("eflags", 144),
    ("rsp", 152),
    ("ss", 160),
];

/// Offsets of the integer argument registers of the System V x86-64 calling
/// convention, in order: rdi, rsi, rdx, rcx, r8, r9.
pub const ARGS: [u32; 6] = [112, 104, 96, 88, 72, 64];

/// Offset of rax: a function's integer return value.
pub const RETVAL: u32 = 80;

/// The pt_regs byte offset of a register named in AT&T syntax without `%`,
/// any width (`rax`, `eax`, `ax`, `al`, `ah`, `r8d`, `r8w`, `r8b`, `sil`):
/// the low bytes of the 64-bit slot (little-endian), `ah`-style high bytes
/// one byte in. `None` for unknown names (and `rip`-relative operands are
/// not registers the probe can read).
pub fn offset_of(reg: &str) -> Option<u32> {
    let at = |name: &str| REGS.iter().find(|(n, _)| *n == name).map(|(_, o)| *o);
    if let Some(o) = at(reg).filter(|_| reg != "rip") {
        return Some(o);
    }
    // r8..r15 with a d/w/b suffix.
    if let Some(n) = reg.strip_prefix('r') {
        let n = n.trim_end_matches(['d', 'w', 'b']);
        if n.parse::<u8>().is_ok_and(|n| (8..=15).contains(&n)) {
            return at(&format!("r{n}"));
        }
    }
    let legacy = [
        ("ax", "rax"),
        ("bx", "rbx"),
        ("cx", "rcx"),
        ("dx", "rdx"),
        ("si", "rsi"),
        ("di", "rdi"),
        ("bp", "rbp"),
        ("sp", "rsp"),
    ];
    for (short, full) in legacy {
        let letter = &short[..1];
        let matches_low = reg == format!("e{short}")
            || reg == short
            || (short.ends_with('x') && reg == format!("{letter}l"))
            || (!short.ends_with('x') && reg == format!("{short}l"));
        if matches_low {
            return at(full);
        }
        if short.ends_with('x') && reg == format!("{letter}h") {
            return at(full).map(|o| o + 1);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn register_names_of_every_width() {
        for (name, off) in [
            ("rax", 80),
            ("eax", 80),
            ("ax", 80),
            ("al", 80),
            ("ah", 81),
            ("r14d", 8),
            ("r8", 72),
            ("r8b", 72),
            ("sil", 104),
            ("dil", 112),
            ("ebx", 40),
            ("rbp", 32),
            ("esp", 152),
        ] {
            assert_eq!(offset_of(name), Some(off), "{name}");
        }
        assert_eq!(offset_of("rip"), None);
        assert_eq!(offset_of("xmm0"), None);
        assert_eq!(
            ARGS.map(|o| REGS.iter().find(|r| r.1 == o).unwrap().0),
            ["rdi", "rsi", "rdx", "rcx", "r8", "r9"]
        );
    }
}
