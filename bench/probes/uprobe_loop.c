/* Hit-cost target for bench/uprobe.py: `uprobe_loop func|usdt <iters>`.
 * Prints "ready <pid>", waits for a line on stdin, then calls the plain
 * function bench_fn (func) or passes the semaphore-guarded USDT probe
 * bench:hit (usdt) <iters> times and prints "ns <nanoseconds per iteration>".
 * Again for every further line; exits at EOF. */
#define _SDT_HAS_SEMAPHORES 1
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/sdt.h>

unsigned short bench_hit_semaphore __attribute__((section(".probes")));

__attribute__((noinline)) long bench_fn(long x) {
    __asm__ volatile("" ::: "memory");
    return x + 1;
}

static double now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e9 + ts.tv_nsec;
}

int main(int argc, char **argv) {
    if (argc < 3) return 2;
    int usdt = strcmp(argv[1], "usdt") == 0;
    long iters = atol(argv[2]);
    char line[64];
    volatile long sink = 0;
    printf("ready %d\n", (int)getpid());
    fflush(stdout);
    while (fgets(line, sizeof line, stdin)) {
        double t0 = now_ns();
        for (long i = 0; i < iters; i++) {
            if (usdt) {
                if (bench_hit_semaphore) STAP_PROBE1(bench, hit, i);
                sink += i;
            } else {
                sink += bench_fn(i);
            }
        }
        printf("ns %.1f\n", (now_ns() - t0) / iters);
        fflush(stdout);
    }
    return (int)(sink & 0);
}
