//! Kernel functions (kfuncs) the generated code calls, by name.
//!
//! A kfunc call is `call` with `src` = [`crate::insn::BPF_PSEUDO_KFUNC_CALL`]
//! and `imm` = the function's BTF id in vmlinux, which differs between
//! kernel builds. The code generator, being pure, writes a [`Kfunc`]'s
//! index in `imm`; the loader replaces it by the id it finds by name in the
//! running kernel's BTF (`Documentation/bpf/kfuncs.rst`).

/// A kernel function the generated code may call.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kfunc {
    /// `int bpf_copy_from_user_str(void *dst, u32 dst__sz, const void *unsafe_ptr__ign, u64 flags)`:
    /// like `bpf_probe_read_user_str`, but may fault the pages in (and so
    /// sleep): sleepable programs only (Linux 6.12, kernel/bpf/helpers.c).
    /// Returns the bytes copied including the NUL, or a negative errno.
    CopyFromUserStr,
    /// `void bpf_rcu_read_lock(void)`: an RCU read-side section in a
    /// sleepable program; no sleeping call until the unlock (Linux 6.2).
    RcuReadLock,
    /// `void bpf_rcu_read_unlock(void)`: ends [`Kfunc::RcuReadLock`]'s section.
    RcuReadUnlock,
}

impl Kfunc {
    /// Every kfunc, in index order.
    pub const ALL: [Kfunc; 3] = [
        Kfunc::CopyFromUserStr,
        Kfunc::RcuReadLock,
        Kfunc::RcuReadUnlock,
    ];

    /// The function's name in kernel BTF.
    pub fn name(self) -> &'static str {
        match self {
            Kfunc::CopyFromUserStr => "bpf_copy_from_user_str",
            Kfunc::RcuReadLock => "bpf_rcu_read_lock",
            Kfunc::RcuReadUnlock => "bpf_rcu_read_unlock",
        }
    }

    /// The placeholder the code generator writes in `imm`.
    pub fn index(self) -> i32 {
        Kfunc::ALL
            .iter()
            .position(|&k| k == self)
            .expect("every kfunc is in ALL") as i32
    }

    /// The kfunc whose placeholder is `imm`, if any.
    pub fn from_index(imm: i32) -> Option<Kfunc> {
        usize::try_from(imm)
            .ok()
            .and_then(|i| Kfunc::ALL.get(i).copied())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn indexes_round_trip() {
        for k in Kfunc::ALL {
            assert_eq!(Kfunc::from_index(k.index()), Some(k));
        }
        assert_eq!(Kfunc::from_index(3), None);
        assert_eq!(Kfunc::from_index(-1), None);
    }
}
