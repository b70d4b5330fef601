// SPDX-License-Identifier: Apache-2.0
/*
 * bench_loader: loads, attaches and drives the hand-written BPF probes of the
 * eBQL benchmark suite (libbpf skeletons).
 *
 *   bench_loader MODE --pid P [--window-ms 1000] [--rb-bytes N] [--no-wakeup]
 *                [--poll-ms N] [--duration S]
 *
 *   MODE: empty | standard | hand | hand-f4 | pair-ts | pair-hash
 *
 * Output mirrors `ebql query --format json`:
 *   stderr "bench: attached"               once the probe is attached;
 *   stdout NDJSON rows, one per (window, fd, cpu):
 *          {"window_start":..,"window_end":..,"fd":..,"cpu":..,
 *           "count(*)":..,"max(count)":..,"avg(count)":..}
 *   stderr "bench: stats {json}"           on exit (SIGINT/SIGTERM or --duration).
 * The pair modes (pread64 enter/exit latency histogram per fd) print one row
 * per (window, fd), CPUs merged:
 *          {"window_start":..,"window_end":..,"fd":..,"count(*)":..,
 *           "lat_ns":[{"lo":..,"hi":..,"count":..},..]}   (buckets [lo, hi))
 * and add pairs / unmatched counts to the stats; bpf_run_* cover both programs.
 * The BPF link is a file descriptor: the probe is detached when the process exits.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <linux/membarrier.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>

/* The skeletons spell the probes' global types as in the BPF sources. */
typedef __u32 u32;
typedef __u64 u64;

#include "empty.skel.h"
#include "hand.skel.h"
#include "hand_f4.skel.h"
#include "pair_hash.skel.h"
#include "pair_ts.skel.h"
#include "standard.skel.h"

static volatile sig_atomic_t stop_flag;
static void on_signal(int sig) { (void)sig; stop_flag = 1; }

static uint64_t mono_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + ts.tv_nsec;
}

static uint64_t real_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000ull + ts.tv_nsec / 1000000;
}

/* Sleeps until the CLOCK_MONOTONIC deadline or a signal. */
static void sleep_until(uint64_t deadline_ns)
{
	struct timespec ts = { .tv_sec = deadline_ns / 1000000000ull, .tv_nsec = deadline_ns % 1000000000ull };
	while (!stop_flag && clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
		;
}

static int libbpf_quiet(enum libbpf_print_level level, const char *fmt, va_list args)
{
	if (level == LIBBPF_DEBUG)
		return 0;
	return vfprintf(stderr, fmt, args);
}

struct opts {
	const char *mode;
	uint32_t pid;
	uint64_t window_ms;
	uint64_t rb_bytes;
	bool no_wakeup;
	int poll_ms;
	double duration;
};

struct stats {
	uint64_t events_seen, rows_emitted, events_dropped, late_events, windows;
	const char *sync;
};

static uint64_t deadline_ns; /* 0: none */

static bool should_stop(void)
{
	return stop_flag || (deadline_ns && mono_ns() >= deadline_ns);
}

static void print_row(uint64_t ws, uint64_t we, uint64_t fd, uint64_t cpu, uint64_t count, uint64_t sum,
		      uint64_t max)
{
	printf("{\"window_start\":%" PRIu64 ",\"window_end\":%" PRIu64 ",\"fd\":%" PRIu64 ",\"cpu\":%" PRIu64
	       ",\"count(*)\":%" PRIu64 ",\"max(count)\":%" PRIu64 ",\"avg(count)\":%.3f}\n",
	       ws, we, fd, cpu, count, max, count ? (double)sum / (double)count : 0.0);
}

/* Stats line; bpf_run_cnt/bpf_run_time_ns are summed over `nprogs` programs
 * (prog_id/prog_name: the first), `extra` is appended JSON ("" or ",\"k\":v..."). */
static void print_stats_n(const int *prog_fds, int nprogs, const struct stats *st, const char *extra)
{
	struct bpf_prog_info info, first;
	unsigned long long run_cnt = 0, run_ns = 0;
	memset(&first, 0, sizeof(first));
	for (int i = 0; i < nprogs; i++) {
		uint32_t len = sizeof(info);
		memset(&info, 0, sizeof(info));
		if (bpf_obj_get_info_by_fd(prog_fds[i], &info, &len) != 0)
			memset(&info, 0, sizeof(info));
		run_cnt += info.run_cnt;
		run_ns += info.run_time_ns;
		if (i == 0)
			first = info;
	}
	fflush(stdout);
	fprintf(stderr,
		"bench: stats {\"events_seen\":%" PRIu64 ",\"events_matched\":%" PRIu64 ",\"rows_emitted\":%" PRIu64
		",\"events_dropped\":%" PRIu64 ",\"late_events\":%" PRIu64 ",\"windows\":%" PRIu64
		",\"bpf_run_cnt\":%llu,\"bpf_run_time_ns\":%llu,\"prog_id\":%u,\"prog_name\":\"%s\",\"sync\":\"%s\"%s}\n",
		st->events_seen, st->events_seen, st->rows_emitted, st->events_dropped, st->late_events, st->windows,
		run_cnt, run_ns, first.id, first.name, st->sync ? st->sync : "", extra ? extra : "");
}

static void print_stats(int prog_fd, const struct stats *st)
{
	print_stats_n(&prog_fd, 1, st, "");
}

static uint64_t sum_percpu_counter(int map_fd)
{
	int ncpu = libbpf_num_possible_cpus();
	uint64_t *vals = calloc(ncpu, sizeof(uint64_t)), total = 0;
	uint32_t zero = 0;
	if (vals && bpf_map_lookup_elem(map_fd, &zero, vals) == 0)
		for (int i = 0; i < ncpu; i++)
			total += vals[i];
	free(vals);
	return total;
}

/* ------------------------------------------------------------------ empty */

static int run_empty(const struct opts *o)
{
	struct empty_bpf *skel = empty_bpf__open_and_load();
	struct stats st = { 0 };
	if (!skel || empty_bpf__attach(skel)) {
		fprintf(stderr, "bench: cannot load/attach empty probe\n");
		empty_bpf__destroy(skel);
		return 1;
	}
	(void)o;
	fprintf(stderr, "bench: attached\n");
	while (!should_stop())
		sleep_until(deadline_ns ? deadline_ns : mono_ns() + 3600ull * 1000000000ull);
	print_stats(bpf_program__fd(skel->progs.bench_empty), &st);
	empty_bpf__destroy(skel);
	return 0;
}

/* --------------------------------------------------------------- standard */

struct uent {
	uint64_t win, count, sum, max;
	uint32_t fd, cpu;
	bool used;
};

#define UTAB_SIZE 8192
struct std_ctx {
	struct uent tab[UTAB_SIZE];
	uint32_t used;
	uint64_t t0;           /* bpf_ktime_get_ns() origin of window 0 */
	uint64_t window_ns;
	uint64_t next_emit;    /* lowest window not yet emitted */
	uint64_t real0_ms;     /* wall clock at t0 */
	struct stats st;
	uint64_t overflow;
};

typedef struct {
	uint64_t time, fd, cpu, count;
} raw_pread_t;

static struct uent *utab_slot(struct std_ctx *c, uint64_t win, uint32_t fd, uint32_t cpu)
{
	uint64_t h = (win * 0x9E3779B97F4A7C15ull) ^ ((uint64_t)fd * 0xC2B2AE3D27D4EB4Full) ^ ((uint64_t)cpu << 17);
	h ^= h >> 29;
	for (uint32_t i = 0; i < UTAB_SIZE; i++) {
		struct uent *e = &c->tab[(h + i) & (UTAB_SIZE - 1)];
		if (!e->used) {
			if (c->used >= UTAB_SIZE * 3 / 4)
				return NULL;
			e->used = true;
			e->win = win;
			e->fd = fd;
			e->cpu = cpu;
			e->count = e->sum = e->max = 0;
			c->used++;
			return e;
		}
		if (e->win == win && e->fd == fd && e->cpu == cpu)
			return e;
	}
	return NULL;
}

static int handle_event(void *ctx, void *data, size_t size)
{
	struct std_ctx *c = ctx;
	const raw_pread_t *ev = data;
	if (size < sizeof(*ev))
		return 0;
	uint64_t win = ev->time > c->t0 ? (ev->time - c->t0) / c->window_ns : 0;
	if (win < c->next_emit) { /* window already emitted: count it in the oldest open one */
		win = c->next_emit;
		c->st.late_events++;
	}
	struct uent *e = utab_slot(c, win, (uint32_t)ev->fd, (uint32_t)ev->cpu);
	c->st.events_seen++;
	if (!e) {
		c->overflow++;
		return 0;
	}
	e->count++;
	e->sum += ev->count;
	if (ev->count > e->max)
		e->max = ev->count;
	return 0;
}

/* Prints and removes every group of window `win` (rebuilding the table). */
static void emit_window(struct std_ctx *c, uint64_t win)
{
	static struct uent keep[UTAB_SIZE];
	uint32_t nkeep = 0;
	uint64_t ws = c->real0_ms + win * (c->window_ns / 1000000), we = ws + c->window_ns / 1000000;
	for (uint32_t i = 0; i < UTAB_SIZE; i++) {
		struct uent *e = &c->tab[i];
		if (!e->used)
			continue;
		if (e->win == win) {
			print_row(ws, we, e->fd, e->cpu, e->count, e->sum, e->max);
			c->st.rows_emitted++;
		} else {
			keep[nkeep++] = *e;
		}
	}
	memset(c->tab, 0, sizeof(c->tab));
	c->used = 0;
	for (uint32_t i = 0; i < nkeep; i++) {
		struct uent *e = utab_slot(c, keep[i].win, keep[i].fd, keep[i].cpu);
		if (e) {
			e->count = keep[i].count;
			e->sum = keep[i].sum;
			e->max = keep[i].max;
		}
	}
	c->st.windows++;
	fflush(stdout);
}

static int run_standard(const struct opts *o)
{
	struct standard_bpf *skel = standard_bpf__open();
	struct std_ctx *c = calloc(1, sizeof(*c));
	struct ring_buffer *rb = NULL;
	int ret = 1;
	if (!skel || !c)
		goto out;
	skel->rodata->target_pid = o->pid;
	skel->rodata->submit_flags = o->no_wakeup ? BPF_RB_NO_WAKEUP : 0;
	if (o->rb_bytes && bpf_map__set_max_entries(skel->maps.bench_rb, o->rb_bytes)) {
		fprintf(stderr, "bench: bad --rb-bytes %" PRIu64 " (power of 2, multiple of the page size)\n", o->rb_bytes);
		goto out;
	}
	if (standard_bpf__load(skel) || standard_bpf__attach(skel)) {
		fprintf(stderr, "bench: cannot load/attach standard probe\n");
		goto out;
	}
	c->window_ns = o->window_ms * 1000000ull;
	c->t0 = mono_ns(); /* bpf_ktime_get_ns() is CLOCK_MONOTONIC */
	c->real0_ms = real_ms();
	rb = ring_buffer__new(bpf_map__fd(skel->maps.bench_rb), handle_event, c, NULL);
	if (!rb) {
		fprintf(stderr, "bench: ring_buffer__new failed\n");
		goto out;
	}
	fprintf(stderr, "bench: attached\n");
	const uint64_t grace_ns = 50 * 1000000ull;
	while (!should_stop()) {
		int err;
		if (o->no_wakeup) {
			/* No wakeups: epoll never fires, so consume on a timer. */
			sleep_until(mono_ns() + (uint64_t)o->poll_ms * 1000000ull);
			err = ring_buffer__consume(rb);
		} else {
			err = ring_buffer__poll(rb, o->poll_ms);
		}
		if (err < 0 && err != -EINTR) {
			fprintf(stderr, "bench: ring_buffer__poll: %d\n", err);
			break;
		}
		uint64_t now = mono_ns();
		while (now >= c->t0 + (c->next_emit + 1) * c->window_ns + grace_ns) {
			emit_window(c, c->next_emit);
			c->next_emit++;
		}
	}
	ring_buffer__consume(rb);
	/* Flush every window that still has groups, oldest first. */
	for (;;) {
		uint64_t min = UINT64_MAX;
		for (uint32_t i = 0; i < UTAB_SIZE; i++)
			if (c->tab[i].used && c->tab[i].win < min)
				min = c->tab[i].win;
		if (min == UINT64_MAX)
			break;
		emit_window(c, min);
	}
	c->st.events_dropped = sum_percpu_counter(bpf_map__fd(skel->maps.bench_drops)) + c->overflow;
	c->st.sync = o->no_wakeup ? "ringbuf-nowakeup" : "ringbuf";
	print_stats(bpf_program__fd(skel->progs.bench_standard), &c->st);
	ret = 0;
out:
	ring_buffer__free(rb);
	standard_bpf__destroy(skel);
	free(c);
	return ret;
}

/* ------------------------------------------------------------------- hand */

struct agg_key {
	uint32_t gen, fd;
};
struct agg_val {
	uint64_t count, sum, max;
};

/* Waits until every probe invocation that may have read the old generation
 * has returned. membarrier(MEMBARRIER_CMD_GLOBAL) is synchronize_rcu(). */
static const char *sync_probes(void)
{
	if (syscall(__NR_membarrier, MEMBARRIER_CMD_GLOBAL, 0, 0) == 0)
		return "membarrier";
	usleep(20000); /* fallback (nohz_full kernels): far longer than any probe */
	return "sleep";
}

static void drain_generation(int map_fd, uint32_t gen, uint64_t ws, uint64_t we, struct stats *st)
{
	static struct agg_key keys[4096 + 1];
	int ncpu = libbpf_num_possible_cpus();
	struct agg_val *vals = calloc(ncpu, sizeof(struct agg_val));
	struct agg_key cur, next, *prev = NULL;
	uint32_t n = 0;
	while (n < 4096 && bpf_map_get_next_key(map_fd, prev, &next) == 0) {
		if (next.gen == gen)
			keys[n++] = next;
		cur = next;
		prev = &cur;
	}
	for (uint32_t i = 0; i < n; i++) {
		if (bpf_map_lookup_elem(map_fd, &keys[i], vals) != 0)
			continue;
		for (int cpu = 0; cpu < ncpu; cpu++) {
			if (!vals[cpu].count)
				continue;
			print_row(ws, we, keys[i].fd, cpu, vals[cpu].count, vals[cpu].sum, vals[cpu].max);
			st->events_seen += vals[cpu].count;
			st->rows_emitted++;
		}
		bpf_map_delete_elem(map_fd, &keys[i]);
	}
	st->windows++;
	fflush(stdout);
	free(vals);
}

#define RUN_HAND(NAME, PROG)                                                                                  \
	static int run_##NAME(const struct opts *o)                                                           \
	{                                                                                                     \
		struct NAME##_bpf *skel = NAME##_bpf__open();                                                 \
		struct stats st = { 0 };                                                                      \
		if (!skel) {                                                                                  \
			fprintf(stderr, "bench: cannot open " #NAME " probe\n");                              \
			return 1;                                                                             \
		}                                                                                             \
		skel->rodata->target_pid = o->pid;                                                            \
		if (NAME##_bpf__load(skel) || NAME##_bpf__attach(skel)) {                                     \
			fprintf(stderr, "bench: cannot load/attach " #NAME " probe\n");                       \
			NAME##_bpf__destroy(skel);                                                            \
			return 1;                                                                             \
		}                                                                                             \
		int map_fd = bpf_map__fd(skel->maps.bench_agg);                                               \
		uint32_t gen = 0;                                                                             \
		uint64_t window_ns = o->window_ms * 1000000ull, next = mono_ns() + window_ns;                 \
		uint64_t ws = real_ms();                                                                      \
		fprintf(stderr, "bench: attached\n");                                                         \
		for (;;) {                                                                                    \
			uint64_t until = deadline_ns && deadline_ns < next ? deadline_ns : next;              \
			sleep_until(until);                                                                   \
			bool last = should_stop();                                                            \
			uint64_t we = real_ms();                                                              \
			uint32_t closed = gen++;                                                              \
			__atomic_store_n(&skel->bss->bench_gen, gen, __ATOMIC_SEQ_CST);                       \
			st.sync = sync_probes();                                                              \
			drain_generation(map_fd, closed, ws, we, &st);                                        \
			ws = we;                                                                              \
			next += window_ns;                                                                    \
			if (last)                                                                             \
				break;                                                                        \
		}                                                                                             \
		st.events_dropped = sum_percpu_counter(bpf_map__fd(skel->maps.bench_drops));                  \
		print_stats(bpf_program__fd(skel->progs.PROG), &st);                                          \
		NAME##_bpf__destroy(skel);                                                                    \
		return 0;                                                                                     \
	}

RUN_HAND(hand, bench_hand)
RUN_HAND(hand_f4, bench_hand_f4)

/* ------------------------------------------------------------------- pair */

#define HIST_SLOTS 66 /* as pair.bpf.c: negative, zero, 2^0 .. 2^63 */
enum { CNT_UNMATCHED_EXIT, CNT_REPLACED_START, CNT_START_FULL, CNT_HIST_FULL, CNT_N };

struct hist_key {
	uint32_t gen, fd;
};
struct hist_val {
	uint64_t count, slots[HIST_SLOTS];
};

/* Prints slot i of a bpftrace hist() as [lo, hi). */
static void print_bucket(int i, uint64_t n, bool first)
{
	if (i == 0)
		printf("%s{\"lo\":%" PRId64 ",\"hi\":0,\"count\":%" PRIu64 "}", first ? "" : ",", INT64_MIN, n);
	else if (i == 1)
		printf("%s{\"lo\":0,\"hi\":1,\"count\":%" PRIu64 "}", first ? "" : ",", n);
	else if (i - 2 < 63)
		printf("%s{\"lo\":%" PRIu64 ",\"hi\":%" PRIu64 ",\"count\":%" PRIu64 "}", first ? "" : ",",
		       (uint64_t)1 << (i - 2), (uint64_t)1 << (i - 1), n);
	else
		printf("%s{\"lo\":%" PRIu64 ",\"hi\":%" PRIu64 ",\"count\":%" PRIu64 "}", first ? "" : ",",
		       (uint64_t)1 << 63, UINT64_MAX, n);
}

/* Prints and deletes the groups of generation `gen`, CPUs merged; returns the pairs. */
static uint64_t drain_pairs(int map_fd, uint32_t gen, uint64_t ws, uint64_t we, struct stats *st)
{
	static struct hist_key keys[4096 + 1];
	int ncpu = libbpf_num_possible_cpus();
	struct hist_val *vals = calloc(ncpu, sizeof(struct hist_val));
	struct hist_key cur, next, *prev = NULL;
	uint32_t n = 0;
	uint64_t pairs = 0;
	while (n < 4096 && bpf_map_get_next_key(map_fd, prev, &next) == 0) {
		if (next.gen == gen)
			keys[n++] = next;
		cur = next;
		prev = &cur;
	}
	for (uint32_t i = 0; i < n; i++) {
		if (bpf_map_lookup_elem(map_fd, &keys[i], vals) != 0)
			continue;
		struct hist_val m = { 0 };
		for (int cpu = 0; cpu < ncpu; cpu++) {
			m.count += vals[cpu].count;
			for (int b = 0; b < HIST_SLOTS; b++)
				m.slots[b] += vals[cpu].slots[b];
		}
		bpf_map_delete_elem(map_fd, &keys[i]);
		if (!m.count)
			continue;
		printf("{\"window_start\":%" PRIu64 ",\"window_end\":%" PRIu64 ",\"fd\":%u,\"count(*)\":%" PRIu64
		       ",\"lat_ns\":[",
		       ws, we, keys[i].fd, m.count);
		bool first = true;
		for (int b = 0; b < HIST_SLOTS; b++)
			if (m.slots[b]) {
				print_bucket(b, m.slots[b], first);
				first = false;
			}
		printf("]}\n");
		pairs += m.count;
		st->rows_emitted++;
	}
	st->events_seen += pairs;
	st->windows++;
	fflush(stdout);
	free(vals);
	return pairs;
}

static uint64_t percpu_counter_at(int map_fd, uint32_t idx)
{
	int ncpu = libbpf_num_possible_cpus();
	uint64_t *vals = calloc(ncpu, sizeof(uint64_t)), total = 0;
	if (vals && bpf_map_lookup_elem(map_fd, &idx, vals) == 0)
		for (int i = 0; i < ncpu; i++)
			total += vals[i];
	free(vals);
	return total;
}

/* Entries left in the start map (starts whose exit came after detach); -1 if not iterable. */
static long long pending_starts(int map_fd, bool iterable)
{
	uint32_t cur, next, *prev = NULL;
	long long n = 0;
	if (!iterable)
		return -1;
	while (bpf_map_get_next_key(map_fd, prev, &next) == 0) {
		n++;
		cur = next;
		prev = &cur;
	}
	return n;
}

#define RUN_PAIR(NAME, ITERABLE)                                                                              \
	static int run_##NAME(const struct opts *o)                                                           \
	{                                                                                                     \
		struct NAME##_bpf *skel = NAME##_bpf__open();                                                 \
		struct stats st = { 0 };                                                                      \
		if (!skel) {                                                                                  \
			fprintf(stderr, "bench: cannot open " #NAME " probe\n");                              \
			return 1;                                                                             \
		}                                                                                             \
		skel->rodata->target_pid = o->pid;                                                            \
		if (NAME##_bpf__load(skel) || NAME##_bpf__attach(skel)) {                                     \
			fprintf(stderr, "bench: cannot load/attach " #NAME " probes\n");                      \
			NAME##_bpf__destroy(skel);                                                            \
			return 1;                                                                             \
		}                                                                                             \
		int map_fd = bpf_map__fd(skel->maps.bench_hist);                                              \
		uint32_t gen = 0;                                                                             \
		uint64_t window_ns = o->window_ms * 1000000ull, next = mono_ns() + window_ns, pairs = 0;      \
		uint64_t ws = real_ms();                                                                      \
		fprintf(stderr, "bench: attached\n");                                                         \
		for (;;) {                                                                                    \
			uint64_t until = deadline_ns && deadline_ns < next ? deadline_ns : next;              \
			sleep_until(until);                                                                   \
			bool last = should_stop();                                                            \
			uint64_t we = real_ms();                                                              \
			uint32_t closed = gen++;                                                              \
			__atomic_store_n(&skel->bss->bench_gen, gen, __ATOMIC_SEQ_CST);                       \
			st.sync = sync_probes();                                                              \
			pairs += drain_pairs(map_fd, closed, ws, we, &st);                                    \
			ws = we;                                                                              \
			next += window_ns;                                                                    \
			if (last)                                                                             \
				break;                                                                        \
		}                                                                                             \
		int cfd = bpf_map__fd(skel->maps.bench_counters);                                             \
		uint64_t start_full = percpu_counter_at(cfd, CNT_START_FULL);                                 \
		uint64_t hist_full = percpu_counter_at(cfd, CNT_HIST_FULL);                                   \
		st.events_dropped = start_full + hist_full;                                                   \
		char extra[512];                                                                              \
		snprintf(extra, sizeof(extra),                                                                \
			 ",\"pairs\":%" PRIu64 ",\"unmatched_exits\":%" PRIu64 ",\"replaced_starts\":%" PRIu64  \
			 ",\"pending_starts\":%lld,\"start_map_full\":%" PRIu64 ",\"hist_map_full\":%" PRIu64,  \
			 pairs, percpu_counter_at(cfd, CNT_UNMATCHED_EXIT),                                   \
			 percpu_counter_at(cfd, CNT_REPLACED_START),                                          \
			 pending_starts(bpf_map__fd(skel->maps.bench_start), ITERABLE), start_full, hist_full);  \
		int fds[2] = { bpf_program__fd(skel->progs.bench_pair_enter),                                 \
			       bpf_program__fd(skel->progs.bench_pair_exit) };                                \
		print_stats_n(fds, 2, &st, extra);                                                            \
		NAME##_bpf__destroy(skel);                                                                    \
		return 0;                                                                                     \
	}

RUN_PAIR(pair_hash, true)
RUN_PAIR(pair_ts, false)

/* ------------------------------------------------------------------- main */

static void usage(void)
{
	fprintf(stderr, "usage: bench_loader empty|standard|hand|hand-f4|pair-hash|pair-ts --pid P [--window-ms MS] [--rb-bytes N]\n"
			"                    [--no-wakeup] [--poll-ms MS] [--duration S]\n");
}

int main(int argc, char **argv)
{
	struct opts o = { .window_ms = 1000, .poll_ms = -1 };
	if (argc < 2) {
		usage();
		return 2;
	}
	o.mode = argv[1];
	for (int i = 2; i < argc; i++) {
		const char *a = argv[i];
		const char *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (!strcmp(a, "--no-wakeup")) {
			o.no_wakeup = true;
			continue;
		}
		if (!v) {
			usage();
			return 2;
		}
		if (!strcmp(a, "--pid"))
			o.pid = strtoul(v, NULL, 10);
		else if (!strcmp(a, "--window-ms"))
			o.window_ms = strtoull(v, NULL, 10);
		else if (!strcmp(a, "--rb-bytes"))
			o.rb_bytes = strtoull(v, NULL, 10);
		else if (!strcmp(a, "--poll-ms"))
			o.poll_ms = atoi(v);
		else if (!strcmp(a, "--duration"))
			o.duration = atof(v);
		else {
			usage();
			return 2;
		}
		i++;
	}
	if (o.window_ms == 0)
		o.window_ms = 1000;
	if (o.poll_ms < 0)
		o.poll_ms = o.no_wakeup ? 5 : 100;
	libbpf_set_print(libbpf_quiet);
	struct sigaction sa = { .sa_handler = on_signal };
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	if (o.duration > 0)
		deadline_ns = mono_ns() + (uint64_t)(o.duration * 1e9);

	if (!strcmp(o.mode, "empty"))
		return run_empty(&o);
	if (!strcmp(o.mode, "standard"))
		return run_standard(&o);
	if (!strcmp(o.mode, "hand"))
		return run_hand(&o);
	if (!strcmp(o.mode, "hand-f4"))
		return run_hand_f4(&o);
	if (!strcmp(o.mode, "pair-hash"))
		return run_pair_hash(&o);
	if (!strcmp(o.mode, "pair-ts"))
		return run_pair_ts(&o);
	usage();
	return 2;
}
