/* Test target for uprobes, uretprobes and USDT (crates/ebql/tests/it/uprobe.rs).
 *
 * Usage: probed <n>. Prints "ready <pid>"; then for every line "run" on
 * stdin runs iterations i = 1..n, each making exactly:
 *   ebql_add(i, 1000 + i)            (uprobe: arg0 = i, arg1 = 1000 + i; returns 1001 + 2i)
 *   ebql_neg(i)                      (uretprobe: retval = -i as a 64-bit int)
 *   USDT ebql:tick(i, -i)            (int operands; at -O0 they are stack memory)
 *   USDT ebql:konst(7, i)            (a constant operand)
 *   USDT ebql:twice(i), two sites    (one probe, two places: two uprobes)
 *   USDT ebql:guarded(i)             (semaphore: fires only while the kernel has it incremented)
 *   USDT ebql:name(i, word)          (a string argument: "alpha", "beta", "gamma" by i % 3)
 * then prints "done <g>" (g = iterations that saw the guarded probe
 * enabled). Exits at EOF.
 */
#define _SDT_HAS_SEMAPHORES 1
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <sys/sdt.h>

/* With _SDT_HAS_SEMAPHORES every probe has one; only `guarded` tests its own. */
#define SEMAPHORE(p) unsigned short ebql_##p##_semaphore __attribute__((section(".probes")))
SEMAPHORE(guarded);
SEMAPHORE(tick);
SEMAPHORE(konst);
SEMAPHORE(twice);
SEMAPHORE(name);

__attribute__((noinline)) long ebql_add(long a, long b) {
    __asm__ volatile("" ::: "memory");
    return a + b;
}

__attribute__((noinline)) long ebql_neg(long x) {
    __asm__ volatile("" ::: "memory");
    return -x;
}

static const char *words[3] = {"alpha", "beta", "gamma"};

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 10;
    char line[64];
    volatile long sink = 0;
    long guarded = 0;
    printf("ready %d\n", (int)getpid());
    fflush(stdout);
    while (fgets(line, sizeof line, stdin)) {
    guarded = 0;
    for (int i = 1; i <= n; i++) {
        int neg = -i;
        sink += ebql_add(i, 1000 + i);
        sink += ebql_neg(i);
        STAP_PROBE2(ebql, tick, i, neg);
        STAP_PROBE2(ebql, konst, 7, i);
        STAP_PROBE1(ebql, twice, i);
        if (ebql_guarded_semaphore) {
            guarded++;
            STAP_PROBE1(ebql, guarded, i);
        }
        STAP_PROBE2(ebql, name, i, words[i % 3]);
        STAP_PROBE1(ebql, twice, i);
    }
    printf("done %ld\n", guarded);
    fflush(stdout);
    }
    return (int)(sink & 0);
}
