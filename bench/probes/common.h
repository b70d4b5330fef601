/* Shared definitions for the eBQL benchmark's hand-written BPF probes. */
#pragma once
#include <linux/types.h>
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

typedef __u32 u32;
typedef __u64 u64;

/* Layout of tracepoint/syscalls/sys_enter_pread64 (see
 * /sys/kernel/tracing/events/syscalls/sys_enter_pread64/format). */
struct sys_enter_pread64_ctx {
	unsigned short common_type;
	unsigned char common_flags;
	unsigned char common_preempt_count;
	int common_pid;
	int __syscall_nr;
	int __pad;
	u64 fd;
	u64 buf;
	u64 count;
	u64 pos;
};

static __always_inline u32 current_tgid(void)
{
	return bpf_get_current_pid_tgid() >> 32;
}
