/* A process that lives a short time (tests/it/profile.rs): prints "ready",
 * waits for a line on stdin, spins in ebql_short_spin for argv[1]
 * milliseconds (300 by default), then exits. Built by the test with cc at
 * -O0 (frame pointers: main is the caller frame of the spin). */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now_ms(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

/* Nearly all of the process's CPU time: a loop that calls nothing, reading
 * the clock once per 2^20 iterations. */
__attribute__((noinline)) unsigned long ebql_short_spin(long ms)
{
	volatile unsigned long x = 0;
	double end = now_ms() + ms;
	while (now_ms() < end)
		for (unsigned long i = 0; i < (1UL << 20); i++)
			x += i;
	return x;
}

int main(int argc, char **argv)
{
	char line[16];
	printf("ready\n");
	fflush(stdout);
	if (!fgets(line, sizeof line, stdin))
		return 1;
	return (int)(ebql_short_spin(argc > 1 ? atol(argv[1]) : 300) & 1);
}
