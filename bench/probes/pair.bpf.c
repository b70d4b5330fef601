/* "hand-pair" (-DTASK_STORAGE) and "hand-pair-hash" variants: what a BPF expert
 * writes for the pairing query
 *
 *   SELECT e.fd, HIST(x.time - e.time) AS lat_ns, COUNT(*)
 *   FROM tracepoint:syscalls:sys_enter_pread64 AS e
 *   JOIN tracepoint:syscalls:sys_exit_pread64 AS x ON e.tid = x.tid
 *   WHERE e.pid = P GROUP BY e.fd WINDOW(time, 1000, 1000)
 *
 * - both programs check the pid first (a constant in .rodata), so other
 *   processes' calls cost one compare;
 * - sys_enter stores (bpf_ktime_get_ns(), fd) keyed by tid: a hash map
 *   (libbpf-tools' biolatency/syscount idiom), or task-local storage when
 *   built with -DTASK_STORAGE (no hash, no delete: the slot lives with the
 *   thread and is cleared by writing 0);
 * - sys_exit looks the start up, removes it, and adds the latency to a
 *   log2 histogram with bpftrace hist() buckets (slot 0: negative, slot 1:
 *   zero, slot 2 + k: [2^k, 2^(k+1))) inside the group's value of a per-CPU
 *   hash keyed by (window generation, fd): one lookup per pair, no atomics;
 * - windows switch as in hand.bpf.c: user space bumps `bench_gen`, waits for
 *   in-flight probes (membarrier = synchronize_rcu()), drains the closed one;
 * - counters (per-CPU): exits without a start, starts overwritten before
 *   their exit, start-map-full and histogram-map-full events. */
#include "common.h"

#define EEXIST 17
#define HIST_SLOTS 66 /* negative, zero, 2^0 .. 2^63 */

enum { CNT_UNMATCHED_EXIT, CNT_REPLACED_START, CNT_START_FULL, CNT_HIST_FULL, CNT_N };

/* Layout of tracepoint/syscalls/sys_exit_pread64. */
struct sys_exit_pread64_ctx {
	unsigned short common_type;
	unsigned char common_flags;
	unsigned char common_preempt_count;
	int common_pid;
	int __syscall_nr;
	int __pad;
	long ret;
};

const volatile u32 target_pid = 0;
volatile u32 bench_gen = 0;

struct start {
	u64 ts; /* bpf_ktime_get_ns() at sys_enter; 0 = none */
	u64 fd;
};

#ifdef TASK_STORAGE
struct task_struct;
struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct start);
} bench_start SEC(".maps");
#else
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, u32);
	__type(value, struct start);
} bench_start SEC(".maps");
#endif

struct hist_key {
	u32 gen;
	u32 fd;
};

struct hist_val {
	u64 count;
	u64 slots[HIST_SLOTS];
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, 4096);
	__type(key, struct hist_key);
	__type(value, struct hist_val);
} bench_hist SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, CNT_N);
	__type(key, u32);
	__type(value, u64);
} bench_counters SEC(".maps");

/* A group's first value: too large for the stack, so it comes from .rodata. */
static const struct hist_val zero_val;

static __always_inline void bump(u32 which)
{
	u64 *c = bpf_map_lookup_elem(&bench_counters, &which);
	if (c)
		*c += 1;
}

/* bpftrace's hist() slot of v. */
static __always_inline u32 hist_slot(__s64 v)
{
	if (v < 0)
		return 0;
	if (v == 0)
		return 1;
	u64 n = v;
	u32 k = 0;
	if (n >> 32) { n >>= 32; k += 32; }
	if (n >> 16) { n >>= 16; k += 16; }
	if (n >> 8) { n >>= 8; k += 8; }
	if (n >> 4) { n >>= 4; k += 4; }
	if (n >> 2) { n >>= 2; k += 2; }
	if (n >> 1) { k += 1; }
	return 2 + k;
}

SEC("tp/syscalls/sys_enter_pread64")
int bench_pair_enter(struct sys_enter_pread64_ctx *ctx)
{
	if (current_tgid() != target_pid)
		return 0;
	struct start s = { .ts = bpf_ktime_get_ns(), .fd = ctx->fd };
#ifdef TASK_STORAGE
	struct start *slot = bpf_task_storage_get(&bench_start, bpf_get_current_task_btf(), 0,
						  BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (!slot) {
		bump(CNT_START_FULL);
		return 0;
	}
	if (slot->ts)
		bump(CNT_REPLACED_START);
	*slot = s;
#else
	u32 tid = (u32)bpf_get_current_pid_tgid();
	/* BPF_NOEXIST: a pending start (a call whose exit we missed) is rare; count it and replace it. */
	long err = bpf_map_update_elem(&bench_start, &tid, &s, BPF_NOEXIST);
	if (err == -EEXIST) {
		bump(CNT_REPLACED_START);
		err = bpf_map_update_elem(&bench_start, &tid, &s, BPF_ANY);
	}
	if (err)
		bump(CNT_START_FULL);
#endif
	return 0;
}

SEC("tp/syscalls/sys_exit_pread64")
int bench_pair_exit(struct sys_exit_pread64_ctx *ctx)
{
	if (current_tgid() != target_pid)
		return 0;
	u64 now = bpf_ktime_get_ns();
#ifdef TASK_STORAGE
	struct start *s = bpf_task_storage_get(&bench_start, bpf_get_current_task_btf(), 0, 0);
	if (!s || !s->ts) {
		bump(CNT_UNMATCHED_EXIT);
		return 0;
	}
	u64 ts = s->ts, fd = s->fd;
	s->ts = 0;
#else
	u32 tid = (u32)bpf_get_current_pid_tgid();
	struct start *s = bpf_map_lookup_elem(&bench_start, &tid);
	if (!s) {
		bump(CNT_UNMATCHED_EXIT);
		return 0;
	}
	u64 ts = s->ts, fd = s->fd;
	bpf_map_delete_elem(&bench_start, &tid);
#endif
	u32 slot = hist_slot((__s64)(now - ts));
	if (slot >= HIST_SLOTS) /* for the verifier */
		return 0;
	struct hist_key key = { .gen = bench_gen, .fd = (u32)fd };
	struct hist_val *v = bpf_map_lookup_elem(&bench_hist, &key);
	if (!v) {
		long err = bpf_map_update_elem(&bench_hist, &key, &zero_val, BPF_NOEXIST);
		if (err && err != -EEXIST) {
			bump(CNT_HIST_FULL);
			return 0;
		}
		v = bpf_map_lookup_elem(&bench_hist, &key);
		if (!v) {
			bump(CNT_HIST_FULL);
			return 0;
		}
	}
	v->count += 1;
	v->slots[slot] += 1;
	return 0;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
