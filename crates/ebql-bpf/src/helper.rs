//! Kernel helper function ids and helper flag constants.
//!
//! Ids are positions in the `___BPF_FUNC_MAPPER` list of
//! `include/uapi/linux/bpf.h` (`enum bpf_func_id`); they are stable ABI.
//! Each is passed as the `imm` of a `call` instruction.

/// Defines each helper id constant and the `NAMES` table from one list.
macro_rules! helpers {
    ($($(#[$doc:meta])* $konst:ident = $id:literal, $name:literal;)*) => {
        $($(#[$doc])* pub const $konst: i32 = $id;)*
        const NAMES: &[(i32, &str)] = &[$(($id, $name)),*];
    };
}

helpers! {
    /// `void *bpf_map_lookup_elem(map, key)`: value pointer or NULL.
    MAP_LOOKUP_ELEM = 1, "bpf_map_lookup_elem";
    /// `long bpf_map_update_elem(map, key, value, flags)`; flags: [`BPF_ANY`] etc.
    MAP_UPDATE_ELEM = 2, "bpf_map_update_elem";
    /// `long bpf_map_delete_elem(map, key)`.
    MAP_DELETE_ELEM = 3, "bpf_map_delete_elem";
    /// `long bpf_probe_read(dst, size, unsafe_ptr)` (legacy; prefer the `_kernel` variant).
    PROBE_READ = 4, "bpf_probe_read";
    /// `u64 bpf_ktime_get_ns(void)`: CLOCK_MONOTONIC nanoseconds.
    KTIME_GET_NS = 5, "bpf_ktime_get_ns";
    /// `long bpf_trace_printk(fmt, fmt_size, ...)`.
    TRACE_PRINTK = 6, "bpf_trace_printk";
    /// `u32 bpf_get_prandom_u32(void)`.
    GET_PRANDOM_U32 = 7, "bpf_get_prandom_u32";
    /// `u32 bpf_get_smp_processor_id(void)`.
    GET_SMP_PROCESSOR_ID = 8, "bpf_get_smp_processor_id";
    /// `long bpf_tail_call(ctx, prog_array_map, index)`.
    TAIL_CALL = 12, "bpf_tail_call";
    /// `u64 bpf_get_current_pid_tgid(void)`: `tgid << 32 | pid`.
    GET_CURRENT_PID_TGID = 14, "bpf_get_current_pid_tgid";
    /// `u64 bpf_get_current_uid_gid(void)`: `gid << 32 | uid`.
    GET_CURRENT_UID_GID = 15, "bpf_get_current_uid_gid";
    /// `long bpf_get_current_comm(buf, size_of_buf)`.
    GET_CURRENT_COMM = 16, "bpf_get_current_comm";
    /// `long bpf_perf_event_output(ctx, map, flags, data, size)`.
    PERF_EVENT_OUTPUT = 25, "bpf_perf_event_output";
    /// `long bpf_skb_load_bytes(skb, offset, to, len)` (SCHED_CLS and socket programs; non-linear packets too).
    SKB_LOAD_BYTES = 26, "bpf_skb_load_bytes";
    /// `long bpf_get_stackid(ctx, map, flags)`.
    GET_STACKID = 27, "bpf_get_stackid";
    /// `u64 bpf_get_current_task(void)`.
    GET_CURRENT_TASK = 35, "bpf_get_current_task";
    /// `long bpf_probe_read_str(dst, size, unsafe_ptr)` (legacy).
    PROBE_READ_STR = 45, "bpf_probe_read_str";
    /// `u64 bpf_get_current_cgroup_id(void)`.
    GET_CURRENT_CGROUP_ID = 80, "bpf_get_current_cgroup_id";
    /// `long bpf_probe_read_user(dst, size, unsafe_ptr)`.
    PROBE_READ_USER = 112, "bpf_probe_read_user";
    /// `long bpf_probe_read_kernel(dst, size, unsafe_ptr)`.
    PROBE_READ_KERNEL = 113, "bpf_probe_read_kernel";
    /// `long bpf_probe_read_user_str(dst, size, unsafe_ptr)`.
    PROBE_READ_USER_STR = 114, "bpf_probe_read_user_str";
    /// `long bpf_probe_read_kernel_str(dst, size, unsafe_ptr)`.
    PROBE_READ_KERNEL_STR = 115, "bpf_probe_read_kernel_str";
    /// `u64 bpf_jiffies64(void)`.
    JIFFIES64 = 118, "bpf_jiffies64";
    /// `u64 bpf_ktime_get_boot_ns(void)`: CLOCK_BOOTTIME nanoseconds.
    KTIME_GET_BOOT_NS = 125, "bpf_ktime_get_boot_ns";
    /// `long bpf_ringbuf_output(ringbuf, data, size, flags)`.
    RINGBUF_OUTPUT = 130, "bpf_ringbuf_output";
    /// `void *bpf_ringbuf_reserve(ringbuf, size, flags)`: record pointer or NULL.
    RINGBUF_RESERVE = 131, "bpf_ringbuf_reserve";
    /// `void bpf_ringbuf_submit(data, flags)`.
    RINGBUF_SUBMIT = 132, "bpf_ringbuf_submit";
    /// `void bpf_ringbuf_discard(data, flags)`.
    RINGBUF_DISCARD = 133, "bpf_ringbuf_discard";
    /// `u64 bpf_ringbuf_query(ringbuf, flags)`.
    RINGBUF_QUERY = 134, "bpf_ringbuf_query";
    /// `void *bpf_task_storage_get(map, task, value, flags)`: the task's
    /// value in a task-storage map, or NULL (absent without
    /// [`BPF_LOCAL_STORAGE_GET_F_CREATE`], allocation failed, or recursion).
    TASK_STORAGE_GET = 156, "bpf_task_storage_get";
    /// `struct task_struct *bpf_get_current_task_btf(void)`: the current task as a BTF pointer.
    GET_CURRENT_TASK_BTF = 158, "bpf_get_current_task_btf";
    /// `u64 bpf_ktime_get_coarse_ns(void)`.
    KTIME_GET_COARSE_NS = 160, "bpf_ktime_get_coarse_ns";
    /// `struct pt_regs *bpf_task_pt_regs(struct task_struct *task)`: the
    /// task's user-space registers as saved on entry to the kernel.
    TASK_PT_REGS = 175, "bpf_task_pt_regs";
}

/// `bpf_map_update_elem` flag: create or overwrite.
pub const BPF_ANY: u64 = 0;
/// `bpf_map_update_elem` flag: fail if the key exists.
pub const BPF_NOEXIST: u64 = 1;
/// `bpf_map_update_elem` flag: fail unless the key exists.
pub const BPF_EXIST: u64 = 2;

/// `bpf_task_storage_get` flag: create the task's value (zeroed, or a copy
/// of the `value` argument) when it has none.
pub const BPF_LOCAL_STORAGE_GET_F_CREATE: u64 = 1;

/// Ring buffer submit/output flag: do not wake up the consumer.
pub const BPF_RB_NO_WAKEUP: u64 = 1;
/// Ring buffer submit/output flag: always wake up the consumer.
pub const BPF_RB_FORCE_WAKEUP: u64 = 2;

/// Kernel name (`bpf_` prefixed) of a helper id defined in this module, for
/// the disassembler; `None` for ids not listed here.
pub fn helper_name(id: i32) -> Option<&'static str> {
    NAMES.iter().find(|(i, _)| *i == id).map(|(_, n)| *n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_match_uapi_enum_order() {
        // Spot checks against enum bpf_func_id in include/uapi/linux/bpf.h.
        assert_eq!(helper_name(1), Some("bpf_map_lookup_elem"));
        assert_eq!(helper_name(14), Some("bpf_get_current_pid_tgid"));
        assert_eq!(helper_name(113), Some("bpf_probe_read_kernel"));
        assert_eq!(helper_name(125), Some("bpf_ktime_get_boot_ns"));
        assert_eq!(helper_name(131), Some("bpf_ringbuf_reserve"));
        assert_eq!(helper_name(156), Some("bpf_task_storage_get"));
        assert_eq!(helper_name(158), Some("bpf_get_current_task_btf"));
        assert_eq!(helper_name(0), None);
        assert_eq!(helper_name(9999), None);
    }

    #[test]
    fn names_are_unique() {
        for (k, (id, name)) in NAMES.iter().enumerate() {
            assert!(
                NAMES[k + 1..].iter().all(|(i, n)| i != id && n != name),
                "{name}"
            );
        }
    }
}
