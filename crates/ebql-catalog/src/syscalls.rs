//! The x86-64 system call numbers (`__NR_<name>`), for the raw syscall
//! hooks (`raw_syscalls:sys_enter`/`sys_exit`), which see every system call
//! and tell them apart only by number.
//!
//! Source: the kernel's `arch/x86/entry/syscalls/syscall_64.tbl` (the 64-bit
//! and `common` ABI entries), as installed in
//! `/usr/include/x86_64-linux-gnu/asm/unistd_64.h` (Debian's linux-libc-dev
//! 6.1: numbers 0–450), plus the 22 calls added since (335–336 and 451–470,
//! marked below). Syscall numbers are a stable ABI: a number is never
//! reassigned, new calls only get new numbers, so a table checked in is
//! exact for every kernel; a call newer than the table simply has no number
//! here (the planner then keeps its tracefs tracepoint, and says so). The
//! unit test `table_matches_the_installed_header` re-reads the header where
//! it is installed and fails on any difference.
//!
//! tracefs names its syscall events after the kernel's `SYSCALL_DEFINE`
//! name, which differs from the `__NR_` name for six calls on x86-64
//! ([`TRACEFS_ALIASES`], e.g. `sys_enter_newfstat` is `__NR_fstat`).

/// Which side of a system call a syscall tracepoint is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SyscallSide {
    /// `sys_enter_<name>`: the arguments, before the call runs.
    Enter,
    /// `sys_exit_<name>`: the return value, after it ran.
    Exit,
}

/// The syscall a tracefs event `syscalls:sys_enter_<name>` / `sys_exit_<name>`
/// traces: its side and its x86-64 number. `None` for other events and for
/// calls this table does not know.
pub fn tracefs_syscall(category: &str, event: &str) -> Option<(SyscallSide, u32)> {
    if category != "syscalls" {
        return None;
    }
    let (side, name) = match (
        event.strip_prefix("sys_enter_"),
        event.strip_prefix("sys_exit_"),
    ) {
        (Some(n), _) => (SyscallSide::Enter, n),
        (_, Some(n)) => (SyscallSide::Exit, n),
        _ => return None,
    };
    let nr_name = TRACEFS_ALIASES
        .iter()
        .find(|(t, _)| *t == name)
        .map_or(name, |(_, nr)| *nr);
    syscall_nr(nr_name).map(|nr| (side, nr))
}

/// The x86-64 number of the system call `__NR_<name>`.
pub fn syscall_nr(name: &str) -> Option<u32> {
    SYSCALLS_X86_64
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, nr)| *nr)
}

/// The `struct pt_regs` members holding a system call's arguments on x86-64,
/// in order (the syscall ABI: rdi, rsi, rdx, r10, r8, r9; the kernel's
/// `syscall_get_arguments`, which fills the tracefs record the same way).
pub const ARG_REGS: [&str; 6] = ["di", "si", "dx", "r10", "r8", "r9"];

/// The `struct pt_regs` member holding the system call number at entry and
/// exit (`syscall_get_nr`).
pub const NR_REG: &str = "orig_ax";

/// `TS_COMPAT` (arch/x86/include/asm/thread_info.h): set in
/// `current->thread_info.status` while a 32-bit (ia32) system call runs.
/// Its numbers are the ia32 table's, and the tracefs syscall tracepoints
/// skip such calls (`trace_get_syscall_nr` returns -1 when
/// `in_ia32_syscall()`), so the raw hooks must skip them too.
pub const TS_COMPAT: u32 = 0x0002;

/// Byte offset of `thread_info.status` in `struct task_struct`, from kernel
/// BTF (the flag word [`TS_COMPAT`] is in).
///
/// Errors: [`crate::CatalogError::Unavailable`] without kernel BTF, or when the
/// kernel's `task_struct` has no embedded `thread_info.status`.
pub fn compat_status_offset() -> Result<u32, crate::CatalogError> {
    let btf = crate::btf::vmlinux()?;
    btf.member_offset("task_struct", &["thread_info", "status"]).ok_or_else(|| crate::CatalogError::Unavailable {
        kind: "raw syscall hook".into(),
        why: "kernel BTF has no `task_struct.thread_info.status` (where x86-64 marks 32-bit system calls)".into(),
        hint: "use the tracefs syscall tracepoint (--hook tracefs)".into(),
    })
}

/// tracefs event names (the `SYSCALL_DEFINE` name) whose `__NR_` name differs, on x86-64.
pub const TRACEFS_ALIASES: [(&str, &str); 6] = [
    ("newstat", "stat"),
    ("newfstat", "fstat"),
    ("newlstat", "lstat"),
    ("newuname", "uname"),
    ("sendfile64", "sendfile"),
    ("umount", "umount2"),
];

/// `(name, number)` of every x86-64 system call, by number.
pub const SYSCALLS_X86_64: &[(&str, u32)] = &[
    ("read", 0),
    ("write", 1),
    ("open", 2),
    ("close", 3),
    ("stat", 4),
    ("fstat", 5),
    ("lstat", 6),
    ("poll", 7),
    ("lseek", 8),
    ("mmap", 9),
    ("mprotect", 10),
    ("munmap", 11),
    ("brk", 12),
    ("rt_sigaction", 13),
    ("rt_sigprocmask", 14),
    ("rt_sigreturn", 15),
    ("ioctl", 16),
    ("pread64", 17),
    ("pwrite64", 18),
    ("readv", 19),
    ("writev", 20),
    ("access", 21),
    ("pipe", 22),
    ("select", 23),
    ("sched_yield", 24),
    ("mremap", 25),
    ("msync", 26),
    ("mincore", 27),
    ("madvise", 28),
    ("shmget", 29),
    ("shmat", 30),
    ("shmctl", 31),
    ("dup", 32),
    ("dup2", 33),
    ("pause", 34),
    ("nanosleep", 35),
    ("getitimer", 36),
    ("alarm", 37),
    ("setitimer", 38),
    ("getpid", 39),
    ("sendfile", 40),
    ("socket", 41),
    ("connect", 42),
    ("accept", 43),
    ("sendto", 44),
    ("recvfrom", 45),
    ("sendmsg", 46),
    ("recvmsg", 47),
    ("shutdown", 48),
    ("bind", 49),
    ("listen", 50),
    ("getsockname", 51),
    ("getpeername", 52),
    ("socketpair", 53),
    ("setsockopt", 54),
    ("getsockopt", 55),
    ("clone", 56),
    ("fork", 57),
    ("vfork", 58),
    ("execve", 59),
    ("exit", 60),
    ("wait4", 61),
    ("kill", 62),
    ("uname", 63),
    ("semget", 64),
    ("semop", 65),
    ("semctl", 66),
    ("shmdt", 67),
    ("msgget", 68),
    ("msgsnd", 69),
    ("msgrcv", 70),
    ("msgctl", 71),
    ("fcntl", 72),
    ("flock", 73),
    ("fsync", 74),
    ("fdatasync", 75),
    ("truncate", 76),
    ("ftruncate", 77),
    ("getdents", 78),
    ("getcwd", 79),
    ("chdir", 80),
    ("fchdir", 81),
    ("rename", 82),
    ("mkdir", 83),
    ("rmdir", 84),
    ("creat", 85),
    ("link", 86),
    ("unlink", 87),
    ("symlink", 88),
    ("readlink", 89),
    ("chmod", 90),
    ("fchmod", 91),
    ("chown", 92),
    ("fchown", 93),
    ("lchown", 94),
    ("umask", 95),
    ("gettimeofday", 96),
    ("getrlimit", 97),
    ("getrusage", 98),
    ("sysinfo", 99),
    ("times", 100),
    ("ptrace", 101),
    ("getuid", 102),
    ("syslog", 103),
    ("getgid", 104),
    ("setuid", 105),
    ("setgid", 106),
    ("geteuid", 107),
    ("getegid", 108),
    ("setpgid", 109),
    ("getppid", 110),
    ("getpgrp", 111),
    ("setsid", 112),
    ("setreuid", 113),
    ("setregid", 114),
    ("getgroups", 115),
    ("setgroups", 116),
    ("setresuid", 117),
    ("getresuid", 118),
    ("setresgid", 119),
    ("getresgid", 120),
    ("getpgid", 121),
    ("setfsuid", 122),
    ("setfsgid", 123),
    ("getsid", 124),
    ("capget", 125),
    ("capset", 126),
    ("rt_sigpending", 127),
    ("rt_sigtimedwait", 128),
    ("rt_sigqueueinfo", 129),
    ("rt_sigsuspend", 130),
    ("sigaltstack", 131),
    ("utime", 132),
    ("mknod", 133),
    ("uselib", 134),
    ("personality", 135),
    ("ustat", 136),
    ("statfs", 137),
    ("fstatfs", 138),
    ("sysfs", 139),
    ("getpriority", 140),
    ("setpriority", 141),
    ("sched_setparam", 142),
    ("sched_getparam", 143),
    ("sched_setscheduler", 144),
    ("sched_getscheduler", 145),
    ("sched_get_priority_max", 146),
    ("sched_get_priority_min", 147),
    ("sched_rr_get_interval", 148),
    ("mlock", 149),
    ("munlock", 150),
    ("mlockall", 151),
    ("munlockall", 152),
    ("vhangup", 153),
    ("modify_ldt", 154),
    ("pivot_root", 155),
    ("_sysctl", 156),
    ("prctl", 157),
    ("arch_prctl", 158),
    ("adjtimex", 159),
    ("setrlimit", 160),
    ("chroot", 161),
    ("sync", 162),
    ("acct", 163),
    ("settimeofday", 164),
    ("mount", 165),
    ("umount2", 166),
    ("swapon", 167),
    ("swapoff", 168),
    ("reboot", 169),
    ("sethostname", 170),
    ("setdomainname", 171),
    ("iopl", 172),
    ("ioperm", 173),
    ("create_module", 174),
    ("init_module", 175),
    ("delete_module", 176),
    ("get_kernel_syms", 177),
    ("query_module", 178),
    ("quotactl", 179),
    ("nfsservctl", 180),
    ("getpmsg", 181),
    ("putpmsg", 182),
    ("afs_syscall", 183),
    ("tuxcall", 184),
    ("security", 185),
    ("gettid", 186),
    ("readahead", 187),
    ("setxattr", 188),
    ("lsetxattr", 189),
    ("fsetxattr", 190),
    ("getxattr", 191),
    ("lgetxattr", 192),
    ("fgetxattr", 193),
    ("listxattr", 194),
    ("llistxattr", 195),
    ("flistxattr", 196),
    ("removexattr", 197),
    ("lremovexattr", 198),
    ("fremovexattr", 199),
    ("tkill", 200),
    ("time", 201),
    ("futex", 202),
    ("sched_setaffinity", 203),
    ("sched_getaffinity", 204),
    ("set_thread_area", 205),
    ("io_setup", 206),
    ("io_destroy", 207),
    ("io_getevents", 208),
    ("io_submit", 209),
    ("io_cancel", 210),
    ("get_thread_area", 211),
    ("lookup_dcookie", 212),
    ("epoll_create", 213),
    ("epoll_ctl_old", 214),
    ("epoll_wait_old", 215),
    ("remap_file_pages", 216),
    ("getdents64", 217),
    ("set_tid_address", 218),
    ("restart_syscall", 219),
    ("semtimedop", 220),
    ("fadvise64", 221),
    ("timer_create", 222),
    ("timer_settime", 223),
    ("timer_gettime", 224),
    ("timer_getoverrun", 225),
    ("timer_delete", 226),
    ("clock_settime", 227),
    ("clock_gettime", 228),
    ("clock_getres", 229),
    ("clock_nanosleep", 230),
    ("exit_group", 231),
    ("epoll_wait", 232),
    ("epoll_ctl", 233),
    ("tgkill", 234),
    ("utimes", 235),
    ("vserver", 236),
    ("mbind", 237),
    ("set_mempolicy", 238),
    ("get_mempolicy", 239),
    ("mq_open", 240),
    ("mq_unlink", 241),
    ("mq_timedsend", 242),
    ("mq_timedreceive", 243),
    ("mq_notify", 244),
    ("mq_getsetattr", 245),
    ("kexec_load", 246),
    ("waitid", 247),
    ("add_key", 248),
    ("request_key", 249),
    ("keyctl", 250),
    ("ioprio_set", 251),
    ("ioprio_get", 252),
    ("inotify_init", 253),
    ("inotify_add_watch", 254),
    ("inotify_rm_watch", 255),
    ("migrate_pages", 256),
    ("openat", 257),
    ("mkdirat", 258),
    ("mknodat", 259),
    ("fchownat", 260),
    ("futimesat", 261),
    ("newfstatat", 262),
    ("unlinkat", 263),
    ("renameat", 264),
    ("linkat", 265),
    ("symlinkat", 266),
    ("readlinkat", 267),
    ("fchmodat", 268),
    ("faccessat", 269),
    ("pselect6", 270),
    ("ppoll", 271),
    ("unshare", 272),
    ("set_robust_list", 273),
    ("get_robust_list", 274),
    ("splice", 275),
    ("tee", 276),
    ("sync_file_range", 277),
    ("vmsplice", 278),
    ("move_pages", 279),
    ("utimensat", 280),
    ("epoll_pwait", 281),
    ("signalfd", 282),
    ("timerfd_create", 283),
    ("eventfd", 284),
    ("fallocate", 285),
    ("timerfd_settime", 286),
    ("timerfd_gettime", 287),
    ("accept4", 288),
    ("signalfd4", 289),
    ("eventfd2", 290),
    ("epoll_create1", 291),
    ("dup3", 292),
    ("pipe2", 293),
    ("inotify_init1", 294),
    ("preadv", 295),
    ("pwritev", 296),
    ("rt_tgsigqueueinfo", 297),
    ("perf_event_open", 298),
    ("recvmmsg", 299),
    ("fanotify_init", 300),
    ("fanotify_mark", 301),
    ("prlimit64", 302),
    ("name_to_handle_at", 303),
    ("open_by_handle_at", 304),
    ("clock_adjtime", 305),
    ("syncfs", 306),
    ("sendmmsg", 307),
    ("setns", 308),
    ("getcpu", 309),
    ("process_vm_readv", 310),
    ("process_vm_writev", 311),
    ("kcmp", 312),
    ("finit_module", 313),
    ("sched_setattr", 314),
    ("sched_getattr", 315),
    ("renameat2", 316),
    ("seccomp", 317),
    ("getrandom", 318),
    ("memfd_create", 319),
    ("kexec_file_load", 320),
    ("bpf", 321),
    ("execveat", 322),
    ("userfaultfd", 323),
    ("membarrier", 324),
    ("mlock2", 325),
    ("copy_file_range", 326),
    ("preadv2", 327),
    ("pwritev2", 328),
    ("pkey_mprotect", 329),
    ("pkey_alloc", 330),
    ("pkey_free", 331),
    ("statx", 332),
    ("io_pgetevents", 333),
    ("rseq", 334),
    // Added after the installed header (syscall_64.tbl):
    ("uretprobe", 335),
    ("uprobe", 336),
    ("pidfd_send_signal", 424),
    ("io_uring_setup", 425),
    ("io_uring_enter", 426),
    ("io_uring_register", 427),
    ("open_tree", 428),
    ("move_mount", 429),
    ("fsopen", 430),
    ("fsconfig", 431),
    ("fsmount", 432),
    ("fspick", 433),
    ("pidfd_open", 434),
    ("clone3", 435),
    ("close_range", 436),
    ("openat2", 437),
    ("pidfd_getfd", 438),
    ("faccessat2", 439),
    ("process_madvise", 440),
    ("epoll_pwait2", 441),
    ("mount_setattr", 442),
    ("quotactl_fd", 443),
    ("landlock_create_ruleset", 444),
    ("landlock_add_rule", 445),
    ("landlock_restrict_self", 446),
    ("memfd_secret", 447),
    ("process_mrelease", 448),
    ("futex_waitv", 449),
    ("set_mempolicy_home_node", 450),
    // Added after the installed header (syscall_64.tbl):
    ("cachestat", 451),
    ("fchmodat2", 452),
    ("map_shadow_stack", 453),
    ("futex_wake", 454),
    ("futex_wait", 455),
    ("futex_requeue", 456),
    ("statmount", 457),
    ("listmount", 458),
    ("lsm_get_self_attr", 459),
    ("lsm_set_self_attr", 460),
    ("lsm_list_modules", 461),
    ("mseal", 462),
    ("setxattrat", 463),
    ("getxattrat", 464),
    ("listxattrat", 465),
    ("removexattrat", 466),
    ("open_tree_attr", 467),
    ("file_getattr", 468),
    ("file_setattr", 469),
    ("listns", 470),
];

/// Numbers above this are not x86-64 syscalls of this table (x32 calls have bit 30 set).
pub const MAX_SYSCALL_NR: u32 = 470;

/// Whether `field` of `event` is a system call number: `id` of
/// `raw_syscalls:sys_enter`/`sys_exit` (as a tracefs, BTF or raw
/// tracepoint: the kernel's `trace_sys_enter(regs, id)`), or the
/// `__syscall_nr` every `syscalls:*` tracefs event starts with. Its values
/// are the numbers of this table (and the lower ia32 ones), x32 calls
/// (bit 30 set), −1 for a call a tracer or seccomp skipped, and whatever
/// number a program passed to syscall(2), which the kernel then refuses.
pub fn is_nr_field(event: &crate::EventName, field: &str) -> bool {
    field == "__syscall_nr" && event.category == "syscalls"
        || field == "id"
            && event.category == "raw_syscalls"
            && matches!(event.name.as_str(), "sys_enter" | "sys_exit")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every `#define __NR_<name> <n>` of the installed header is in the
    /// table with the same number (skipped where the header is not installed).
    #[test]
    fn table_matches_the_installed_header() {
        let Ok(text) = std::fs::read_to_string("/usr/include/x86_64-linux-gnu/asm/unistd_64.h")
        else {
            eprintln!("no unistd_64.h installed: nothing to compare");
            return;
        };
        let mut seen = 0;
        for line in text.lines() {
            let mut w = line.split_whitespace();
            if let (Some("#define"), Some(name), Some(nr)) = (
                w.next(),
                w.next().and_then(|n| n.strip_prefix("__NR_")),
                w.next(),
            ) {
                assert_eq!(syscall_nr(name), Some(nr.parse().unwrap()), "__NR_{name}");
                seen += 1;
            }
        }
        assert!(seen > 300, "only {seen} syscalls in the header");
    }

    #[test]
    fn numbers_are_unique_and_bounded() {
        let mut nrs: Vec<u32> = SYSCALLS_X86_64.iter().map(|(_, n)| *n).collect();
        nrs.sort_unstable();
        let n = nrs.len();
        nrs.dedup();
        assert_eq!(nrs.len(), n, "a number appears twice");
        assert_eq!(nrs.last(), Some(&MAX_SYSCALL_NR));
    }

    /// x86-64 kernels since 5.11 lay thread_info out as {flags, syscall_work,
    /// status, …} at the start of task_struct (skipped without kernel BTF).
    #[test]
    fn compat_flag_word_from_btf() {
        match compat_status_offset() {
            Ok(off) => assert_eq!(off, 16),
            Err(e) => eprintln!("no kernel BTF here: {e}"),
        }
    }

    #[test]
    fn number_fields_of_the_syscall_events() {
        use crate::{EventKind, EventName};
        for kind in [
            EventKind::Tracepoint,
            EventKind::TpBtf,
            EventKind::RawTracepoint,
        ] {
            assert!(is_nr_field(
                &EventName::new(kind, "raw_syscalls", "sys_enter"),
                "id"
            ));
            assert!(is_nr_field(
                &EventName::new(kind, "raw_syscalls", "sys_exit"),
                "id"
            ));
        }
        assert!(is_nr_field(
            &EventName::tracepoint("syscalls", "sys_enter_pread64"),
            "__syscall_nr"
        ));
        assert!(!is_nr_field(
            &EventName::tracepoint("syscalls", "sys_enter_pread64"),
            "fd"
        ));
        assert!(!is_nr_field(
            &EventName::tracepoint("irq", "irq_handler_entry"),
            "id"
        ));
    }

    #[test]
    fn tracefs_names_and_aliases() {
        assert_eq!(
            tracefs_syscall("syscalls", "sys_enter_pread64"),
            Some((SyscallSide::Enter, 17))
        );
        assert_eq!(
            tracefs_syscall("syscalls", "sys_exit_pread64"),
            Some((SyscallSide::Exit, 17))
        );
        assert_eq!(
            tracefs_syscall("syscalls", "sys_enter_newfstat"),
            Some((SyscallSide::Enter, 5))
        );
        assert_eq!(
            tracefs_syscall("syscalls", "sys_exit_umount"),
            Some((SyscallSide::Exit, 166))
        );
        assert_eq!(tracefs_syscall("syscalls", "sys_enter_no_such_call"), None);
        assert_eq!(tracefs_syscall("sched", "sys_enter_pread64"), None);
        assert_eq!(tracefs_syscall("syscalls", "pread64"), None);
    }
}
