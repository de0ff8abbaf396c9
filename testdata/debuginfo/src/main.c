/*
 * A freestanding arm64 program for debuginfo's tests: inlined functions
 * three deep across two files, a cold split (gcc's .cold parts), a
 * constant-propagated clone, recursion, a call through a pointer and a
 * second compilation unit. Built without libc so the binaries are small.
 */
#include "inl.h"

volatile int sink;

int other(int x);		/* other.c */

__attribute__((noinline)) void note(int v)
{
	sink = v;
}

static __attribute__((noinline)) int scale(int x, int k)
{
	if (k == 0)
		return x;
	return scale(x * 3, k - 1) + 1;
}

static int depth(int n)
{
	if (n <= 0)
		return outer_walk(sink);
	return depth(n - 1) + leaf_add(n, 2);
}

__attribute__((noinline)) int through(int (*fn)(int), int v)
{
	return fn(v) + outer_walk(v);
}

static __attribute__((noinline, cold)) void fail(int code)
{
	note(code);
	for (;;)
		sink = code;
}

int run(int argc)
{
	int r = outer_walk(argc);
	r += scale(argc, 4);
	r += depth(argc & 3);
	r += through(other, argc);
	if (r == 42)
		fail(r);
	return r;
}

void _start(void)
{
	sink = run(sink);
	for (;;)
		;
}
