/*
 * crash: a static arm64 program with a known call chain that dies of SIGSEGV in a leaf.
 *
 *   main -> level1 -> level2 -> level3 -> leaf   (leaf stores through a NULL pointer)
 *
 * Built by ../capture.sh with
 *   aarch64-linux-gnu-gcc -static -O1 -g -fno-omit-frame-pointer -fno-inline \
 *       -fno-optimize-sibling-calls -o crash crash.c
 * Every function but leaf keeps a frame record ({x29, x30} at x29); leaf is a true leaf (no frame
 * record, its caller's return address still in x30 when it faults), so an FP walk from the core's
 * registers sees leaf (pc), level3 (x30, via the first frame record's caller) and so on.
 */
#include <stdio.h>

__attribute__((noinline)) void leaf(volatile int *p, int v)
{
	*p = v; /* SIGSEGV: p is NULL */
}

__attribute__((noinline)) int level3(volatile int *p, int v)
{
	leaf(p, v + 3);
	return v + 3;
}

__attribute__((noinline)) int level2(volatile int *p, int v)
{
	return level3(p, v + 2) + 1;
}

__attribute__((noinline)) int level1(volatile int *p, int v)
{
	return level2(p, v + 1) + 1;
}

int main(int argc, char **argv)
{
	volatile int *p = 0;

	(void)argv;
	printf("crash: calling level1\n");
	fflush(stdout);
	return level1(p, argc);
}
