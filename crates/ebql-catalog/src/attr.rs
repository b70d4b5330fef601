//! System attributes: columns available on every event (thesis §3.3.1).

/// A column that exists on every event, filled by a BPF helper at the time the
/// event fires rather than read from the tracepoint record.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SystemAttr {
    /// u64, nanoseconds since boot, CLOCK_MONOTONIC (`bpf_ktime_get_ns`).
    Time,
    /// u32, process id = kernel tgid (upper 32 bits of `bpf_get_current_pid_tgid`).
    Pid,
    /// u32, thread id = kernel pid (lower 32 bits of `bpf_get_current_pid_tgid`).
    Tid,
    /// u32, real user id (lower 32 bits of `bpf_get_current_uid_gid`).
    Uid,
    /// u32, real group id (upper 32 bits of `bpf_get_current_uid_gid`).
    Gid,
    /// u32, CPU the event fired on (`bpf_get_smp_processor_id`).
    Cpu,
    /// string, task command name, 16 bytes NUL-padded (`bpf_get_current_comm`).
    Comm,
    /// u64, cgroup v2 id of the task (`bpf_get_current_cgroup_id`).
    Cgroup,
}

impl SystemAttr {
    /// Every system attribute, in display order.
    pub const ALL: [SystemAttr; 8] = [
        SystemAttr::Time,
        SystemAttr::Pid,
        SystemAttr::Tid,
        SystemAttr::Uid,
        SystemAttr::Gid,
        SystemAttr::Cpu,
        SystemAttr::Comm,
        SystemAttr::Cgroup,
    ];

    /// The column name: `"time"`, `"pid"`, `"tid"`, `"uid"`, `"gid"`, `"cpu"`,
    /// `"comm"` or `"cgroup"`.
    pub fn name(self) -> &'static str {
        match self {
            SystemAttr::Time => "time",
            SystemAttr::Pid => "pid",
            SystemAttr::Tid => "tid",
            SystemAttr::Uid => "uid",
            SystemAttr::Gid => "gid",
            SystemAttr::Cpu => "cpu",
            SystemAttr::Comm => "comm",
            SystemAttr::Cgroup => "cgroup",
        }
    }

    /// The attribute with this exact column name (no `sys_` prefix; see
    /// [`crate::EventSchema::resolve`] for that).
    pub fn from_name(s: &str) -> Option<SystemAttr> {
        SystemAttr::ALL.into_iter().find(|a| a.name() == s)
    }

    /// One line for people: meaning, unit and the BPF helper that provides it.
    pub fn description(self) -> &'static str {
        match self {
            SystemAttr::Time => "ns since boot, CLOCK_MONOTONIC (bpf_ktime_get_ns)",
            SystemAttr::Pid => {
                "process id = kernel tgid (upper 32 bits of bpf_get_current_pid_tgid)"
            }
            SystemAttr::Tid => "thread id = kernel pid (lower 32 bits of bpf_get_current_pid_tgid)",
            SystemAttr::Uid => "real user id (lower 32 bits of bpf_get_current_uid_gid)",
            SystemAttr::Gid => "real group id (upper 32 bits of bpf_get_current_uid_gid)",
            SystemAttr::Cpu => "CPU number the event fired on (bpf_get_smp_processor_id)",
            SystemAttr::Comm => "task command name, 16 bytes NUL-padded (bpf_get_current_comm)",
            SystemAttr::Cgroup => "cgroup v2 id of the task (bpf_get_current_cgroup_id)",
        }
    }

    /// True for string-valued attributes (only [`SystemAttr::Comm`]); all
    /// others are unsigned integers.
    pub fn is_string(self) -> bool {
        self == SystemAttr::Comm
    }
}

/// Byte offset of `comm` (`char[16]`) in `struct task_struct`, from kernel
/// BTF; `None` without kernel BTF. A BTF-typed program reads the current
/// task's name there with direct loads from `bpf_get_current_task_btf()`
/// instead of calling `bpf_get_current_comm`.
///
/// Only the bytes up to the name's NUL are meaningful: a kernel whose
/// `__set_task_comm` does not zero-pad may leave an older, longer name's
/// bytes after it (the helper pads its copy), so such reads are fit for
/// comparisons with a literal, not for keys or outputs.
pub fn task_comm_offset() -> Option<u32> {
    crate::btf::vmlinux()
        .ok()?
        .member_offset("task_struct", &["comm"])
}

/// Byte offset of the register `name` (`di`, `orig_ax`, …) in `struct
/// pt_regs`, from kernel BTF ([`crate::Access::TaskRegs`]).
///
/// Errors: the registers there are, for a hint (empty without kernel BTF).
pub fn user_register_offset(name: &str) -> Result<u32, Vec<String>> {
    let Ok(btf) = crate::btf::vmlinux() else {
        return Err(vec![]);
    };
    match btf.member_offset("pt_regs", &[name]) {
        Some(off) => Ok(off),
        None => Err(btf.record_member_names("pt_regs")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for a in SystemAttr::ALL {
            assert_eq!(SystemAttr::from_name(a.name()), Some(a));
            assert!(!a.description().is_empty());
            assert_eq!(a.is_string(), a == SystemAttr::Comm);
        }
        assert_eq!(SystemAttr::from_name("sys_pid"), None);
        assert_eq!(SystemAttr::from_name("PID"), None);
    }

    /// x86-64's system call registers are members of `struct pt_regs`;
    /// a name that is not one lists those that are.
    #[test]
    fn user_registers_have_offsets_in_kernel_btf() {
        let di = user_register_offset("di").expect("pt_regs.di");
        let si = user_register_offset("si").expect("pt_regs.si");
        assert_ne!(di, si);
        assert!(user_register_offset("orig_ax").is_ok());
        let names = user_register_offset("xyz").unwrap_err();
        assert!(names.iter().any(|n| n == "orig_ax"), "{names:?}");
    }

    /// The machine's kernel has BTF (the project's VM, CI): `comm` lies
    /// inside `task_struct`, past its first members.
    #[test]
    fn the_task_name_has_an_offset_in_kernel_btf() {
        let off = task_comm_offset().expect("kernel BTF with task_struct.comm");
        assert!(off > 0 && off < 16 * 1024, "{off}");
    }
}
