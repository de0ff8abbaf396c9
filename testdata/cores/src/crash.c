/* crash.c (instrumented with -fsanitize=shadow-call-stack): functions that
 * crash with SIGSEGV in four places. main.c (uninstrumented) sets up the
 * shadow call stack and picks the scenario. Every call's result is used
 * afterwards, so no call is a tail call. */
#include <signal.h>
#include <stdlib.h>

#define NOINL __attribute__((noinline))

volatile int g_sink;
int *volatile g_null;

/* ---- a crash in a leaf: crash_leaf pushes nothing, builds no record ---- */

NOINL void crash_leaf(int x)
{
	*g_null = x; /* SIGSEGV */
}

NOINL int leaf_mid(int x)
{
	crash_leaf(x);
	g_sink += x;
	return x + 1;
}

NOINL int leaf_root(void)
{
	int r = leaf_mid(3);
	g_sink += r;
	return r + 1;
}

/* ---- a crash at the bottom of a recursion ---- */

NOINL int rec(int n)
{
	int r;
	if (n <= 1) {
		g_sink += 1;
		r = *g_null; /* SIGSEGV in a non-leaf frame (rec calls itself) */
	} else {
		r = rec(n - 1);
	}
	g_sink += r;
	return r + 1;
}

NOINL int rec_root(int n)
{
	int r = rec(n);
	g_sink += r;
	return r + 1;
}

/* ---- a crash in a signal handler ---- */

NOINL int handler_inner(int sig)
{
	g_sink += sig;
	int r = *g_null; /* SIGSEGV inside the SIGUSR1 handler */
	g_sink += r;
	return r;
}

NOINL void on_usr1(int sig)
{
	int r = handler_inner(sig);
	g_sink += r;
}

NOINL int sig_mid(void)
{
	int r = raise(SIGUSR1);
	g_sink += r;
	return r + 1;
}

NOINL int sig_root(void)
{
	signal(SIGUSR1, on_usr1);
	int r = sig_mid();
	g_sink += r;
	return r + 1;
}

/* ---- a crash in a callback called by libc's qsort ---- */

NOINL int cmp_ints(const void *a, const void *b)
{
	int x = *(const int *)a, y = *(const int *)b;
	if (x == 7 || y == 7)
		g_sink += *g_null; /* SIGSEGV in the comparison callback */
	return (x > y) - (x < y);
}

NOINL int sort_root(void)
{
	int v[16];
	for (int i = 0; i < 16; i++)
		v[i] = (i * 5) % 16;
	qsort(v, 16, sizeof v[0], cmp_ints);
	g_sink += v[0];
	return v[1] + 1;
}
