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
 * enabled). For a line "cold" it makes n calls ebql_cold(p), p the start
 * of a fresh private mapping of a memfd page holding "cold-path": the page
 * is in the page cache but not in this process's page tables until
 * ebql_cold reads it (a probe at its entry cannot read it without faulting
 * it in); then prints "done <n>". Exits at EOF.
 */
#define _SDT_HAS_SEMAPHORES 1
#define _GNU_SOURCE
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
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

__attribute__((noinline)) long ebql_cold(const char *s) {
    __asm__ volatile("" ::: "memory");
    return (long)strlen(s);
}

/* n calls of ebql_cold, each on a page never touched before the call. */
static long cold_calls(long n) {
    static const char text[] = "cold-path";
    long sum = 0;
    int fd = memfd_create("ebql-cold", MFD_CLOEXEC);
    if (fd < 0 || ftruncate(fd, 4096) != 0 || pwrite(fd, text, sizeof text, 0) != sizeof text)
        return -1;
    for (long i = 0; i < n; i++) {
        char *p = mmap(NULL, 4096, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED)
            return -1;
        sum += ebql_cold(p);
        munmap(p, 4096);
    }
    close(fd);
    return sum == n * (long)(sizeof text - 1) ? n : -1;
}

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 10;
    char line[64];
    volatile long sink = 0;
    long guarded = 0;
    printf("ready %d\n", (int)getpid());
    fflush(stdout);
    while (fgets(line, sizeof line, stdin)) {
    if (strncmp(line, "cold", 4) == 0) {
        printf("done %ld\n", cold_calls(n));
        fflush(stdout);
        continue;
    }
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
