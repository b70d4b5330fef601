/* "standard" variant: the thesis' Figure 2 program (every event reserved and
 * submitted to a BPF ring buffer, all aggregation in user space), plus the
 * pid check every variant has. Instead of bpf_printk on a failed reserve it
 * counts the drop in a per-CPU array. The ring buffer size (Figure 2: 1024
 * records, 32 KiB) and the submit flags (0, or BPF_RB_NO_WAKEUP for the
 * "standard-nw" variant) are set by the loader. */
#include "common.h"

const volatile u32 target_pid = 0;
const volatile u64 submit_flags = 0;

typedef struct {
	u64 time;
	u64 fd;
	u64 cpu;
	u64 count;
} raw_pread_t;

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1024 * sizeof(raw_pread_t));
} bench_rb SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, u64);
} bench_drops SEC(".maps");

SEC("tp/syscalls/sys_enter_pread64")
int bench_standard(struct sys_enter_pread64_ctx *ctx)
{
	if (current_tgid() != target_pid)
		return 0;
	raw_pread_t *q = bpf_ringbuf_reserve(&bench_rb, sizeof(raw_pread_t), 0);
	if (!q) {
		u32 zero = 0;
		u64 *d = bpf_map_lookup_elem(&bench_drops, &zero);
		if (d)
			*d += 1;
		return 1;
	}
	q->time = bpf_ktime_get_ns();
	q->fd = ctx->fd;
	q->cpu = bpf_get_smp_processor_id();
	q->count = ctx->count;
	bpf_ringbuf_submit(q, submit_flags);
	return 0;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
