/* dyn.c: the instrumented part of dyn (-fsanitize=shadow-call-stack).
 * Scenario qsort: a comparator called back through libc's qsort;
 * scenario signal: a SIGUSR1 handler on the normal stack, raised with a
 * raw rt_sigqueueinfo from sig_raise. Both reach capture_here, where gen stops the
 * program (gdb breakpoint after its prologue). */
#include <signal.h>
#include <stdlib.h>

#ifdef __clang__
#define NOINL __attribute__((noinline, disable_tail_calls))
#else
#define NOINL __attribute__((noipa, noinline))
#endif

extern volatile int g_sink;
extern long g_pid;
extern int g_siginfo[32];

NOINL void snap_touch(int v) { g_sink += v; }

/* The capture point. */
NOINL void capture_here(int v)
{
	snap_touch(v);
	g_sink++;
}

static int g_calls;

NOINL int cmp_ints(const void *a, const void *b)
{
	int x = *(const int *)a, y = *(const int *)b;
	if (++g_calls == 5)
		capture_here(x);
	return (x > y) - (x < y);
}

NOINL int sort_it(int *v, int n)
{
	qsort(v, n, sizeof *v, cmp_ints);
	return v[0];
}

NOINL int run_qsort(void)
{
	int v[16] = {9, 3, 14, 1, 12, 7, 5, 16, 2, 11, 8, 15, 4, 10, 6, 13};
	return sort_it(v, 16) + g_sink;
}

NOINL void handler_mid(int sig) { capture_here(sig); }

NOINL void on_usr1(int sig)
{
	handler_mid(sig);
	g_sink++;
}

NOINL void sig_before(void) { g_sink++; }

/* sig_raise calls sig_before first, so its x30 points into itself when
 * the signal arrives right after the svc. */
NOINL void sig_raise(void)
{
	sig_before();
	/* rt_sigqueueinfo(pid, SIGUSR1, &g_siginfo): the siginfo says si_pid 0,
	 * and the pid is in x0 only, which the syscall's result overwrites, so
	 * the signal frame holds nothing that changes from run to run. */
	register long x8 __asm__("x8") = 138;
	register long x0 __asm__("x0") = g_pid;
	register long x1 __asm__("x1") = SIGUSR1;
	register long x2 __asm__("x2") = (long)g_siginfo;
	__asm__ volatile("svc #0" : "+r"(x0) : "r"(x8), "r"(x1), "r"(x2) : "memory");
	g_sink++;
}

NOINL void sig_mid(void)
{
	sig_raise();
	g_sink++;
}

NOINL int run_signal(void)
{
	sig_mid();
	return g_sink;
}
