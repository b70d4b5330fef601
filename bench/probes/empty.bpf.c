/* "empty" variant: a tracepoint program that returns at once. It measures the
 * fixed cost of having any BPF program on sys_enter_pread64. */
#include "common.h"

SEC("tp/syscalls/sys_enter_pread64")
int bench_empty(void *ctx)
{
	return 0;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
