/* "hand" variant: what a BPF expert would write for the Figure 12 query
 *
 *   SELECT fd, cpu, COUNT(*), MAX(count), AVG(count)
 *   FROM tracepoint/syscalls/sys_enter_pread64
 *   GROUP BY fd, cpu WHERE pid == P WINDOW(time, 1000, 1000);
 *
 * - the pid check comes first (a constant in .rodata);
 * - GROUP BY cpu is free: a per-CPU hash keyed by (window generation, fd),
 *   so no atomics and no cache-line sharing between CPUs;
 * - one lookup per event (an insert only for the first event of a group);
 * - windows switch race-free: user space bumps `bench_gen`, waits for every
 *   in-flight probe to finish (membarrier(MEMBARRIER_CMD_GLOBAL), i.e.
 *   synchronize_rcu(); tracepoint programs run inside an RCU read section),
 *   then drains and deletes the keys of the closed generation.
 *
 * Built with -DFILTER4 it is the hand-written "filter cost" probe:
 *   WHERE pid == P AND fd > 2 AND count >= 64 AND count <= 4096. */
#include "common.h"

#define EEXIST 17

const volatile u32 target_pid = 0;
volatile u32 bench_gen = 0;

struct agg_key {
	u32 gen;
	u32 fd;
};

struct agg_val {
	u64 count;
	u64 sum;
	u64 max;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, 4096);
	__type(key, struct agg_key);
	__type(value, struct agg_val);
} bench_agg SEC(".maps");

/* Events that found the map full (a group-count overflow, not expected). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, u64);
} bench_drops SEC(".maps");

#ifdef FILTER4
SEC("tp/syscalls/sys_enter_pread64")
int bench_hand_f4(struct sys_enter_pread64_ctx *ctx)
#else
SEC("tp/syscalls/sys_enter_pread64")
int bench_hand(struct sys_enter_pread64_ctx *ctx)
#endif
{
	if (current_tgid() != target_pid)
		return 0;
	u64 count = ctx->count;
#ifdef FILTER4
	if (ctx->fd <= 2 || count < 64 || count > 4096)
		return 0;
#endif
	struct agg_key key = { .gen = bench_gen, .fd = (u32)ctx->fd };
	struct agg_val *v = bpf_map_lookup_elem(&bench_agg, &key);
	if (v) {
		v->count += 1;
		v->sum += count;
		if (count > v->max)
			v->max = count;
		return 0;
	}
	struct agg_val init = { .count = 1, .sum = count, .max = count };
	long err = bpf_map_update_elem(&bench_agg, &key, &init, BPF_NOEXIST);
	if (err == 0)
		return 0;
	if (err == -EEXIST) {
		/* Another CPU created the group between our lookup and update. */
		v = bpf_map_lookup_elem(&bench_agg, &key);
		if (v) {
			v->count += 1;
			v->sum += count;
			if (count > v->max)
				v->max = count;
			return 0;
		}
	}
	u32 zero = 0;
	u64 *d = bpf_map_lookup_elem(&bench_drops, &zero);
	if (d)
		*d += 1;
	return 0;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
