/* chain.c (instrumented): call chains of different shapes, recursion, a
 * deep chain and a signal handler on the alternate stack. Every call's
 * result is used afterwards, so no call is a tail call. */
#include "snap.h"

/* ---- warm-up: leaves stale return addresses above the later x18 ---- */

/* warm runs before every scenario, so the shadow call stack slots just
 * above the capture's x18 and the stack below its sp hold stale return
 * addresses, as they do in a real program. An unwinder must not read them. */
NOINL int warm(int n)
{
	int r = n > 1 ? warm(n - 1) : 0;
	g_sink += n;
	return r + 1;
}

/* ---- plain chain: frames of different shapes ---- */

/* shape_args takes ten arguments: the last two are passed on the stack,
 * in the caller's outgoing-argument area below its frame. */
NOINL int shape_args(int a, int b, int c, int d, int e, int f, int g, int h, int i, int j)
{
	capture();
	g_sink += a + b + c + d + e + f + g + h + i + j;
	return a + j;
}

/* shape_vla has a variable-length array: sp moves at run time and the
 * frame pointer is the only fixed anchor. */
NOINL int shape_vla(int n)
{
	volatile char vla[n];
	vla[0] = 1;
	vla[n - 1] = 2;
	int r = shape_args(1, 2, 3, 4, 5, 6, 7, 8, 9, n);
	g_sink += vla[0];
	return r + 1;
}

/* shape_callee uses every callee-saved general register, so its frame
 * holds x19-x28 beside the frame record. */
NOINL int shape_callee(int x)
{
	__asm__ volatile("" ::: "x19", "x20", "x21", "x22", "x23", "x24", "x25", "x26", "x27", "x28");
	int r = shape_vla(x + 40);
	g_sink += x;
	return r + 1;
}

/* shape_big has 2 KiB of locals. */
NOINL int shape_big(void)
{
	volatile char buf[2048];
	__asm__ volatile("" ::"r"(buf) : "memory"); /* keep all 2 KiB */
	buf[0] = 1;
	buf[2047] = 2;
	int r = shape_callee(buf[0]);
	g_sink += buf[2047];
	return r + 1;
}

NOINL int chain_root(void)
{
	int r = shape_big();
	g_sink += r;
	return r + 1;
}

/* ---- recursion ---- */

NOINL int rec(int n)
{
	int r;
	if (n <= 1) {
		capture();
		r = 0;
	} else {
		r = rec(n - 1);
	}
	g_sink += n;
	return r + 1;
}

NOINL int rec_root(int depth)
{
	int r = rec(depth);
	g_sink += r;
	return r + 1;
}

/* ---- deep chain: mutual recursion ping -> pong -> ping ... ---- */

NOINL int pong(int n);

NOINL int ping(int n)
{
	int r;
	if (n <= 1) {
		capture();
		r = 0;
	} else {
		r = pong(n - 1);
	}
	g_sink += n;
	return r + 1;
}

NOINL int pong(int n)
{
	int r;
	if (n <= 1) {
		capture();
		r = 0;
	} else {
		r = ping(n - 1);
	}
	g_sink += n;
	return r + 2;
}

NOINL int deep_root(int depth)
{
	int r = ping(depth);
	g_sink += r;
	return r + 1;
}

/* ---- signal on the alternate stack ---- */

NOINL int sig_before(void)
{
	return g_sink + 1;
}

/* sig_raise sends SIGUSR1 to its own process with a raw rt_sigqueueinfo
 * system call (siginfo prepared by main, so the capture does not depend on
 * the pid). Before the svc it calls sig_before, so x30 at the interrupted
 * svc points into sig_raise itself; the kernel (here QEMU) stores that x30
 * in the signal frame's frame record. */
NOINL int sig_raise(void)
{
	int r = sig_before();
	__asm__ volatile("adrp x10, g_snap\n\t"
			 "add x10, x10, :lo12:g_snap\n\t"
			 "mov x9, sp\n\t"
			 "str x9, [x10, #64]\n\t" /* g_snap.main_lo */
			 ::: "x9", "x10", "memory");
	register long x8 __asm__("x8") = 138; /* rt_sigqueueinfo */
	register long x0 __asm__("x0") = g_pid;
	register long x1 __asm__("x1") = 10; /* SIGUSR1 */
	register long x2 __asm__("x2") = (long)g_siginfo;
	__asm__ volatile("svc #0" : "+r"(x0) : "r"(x8), "r"(x1), "r"(x2) : "memory");
	g_sink += r;
	return r + (int)x0;
}

NOINL int sig_mid(void)
{
	int r = sig_raise();
	g_sink += r;
	return r + 1;
}

NOINL int sig_root(void)
{
	int r = sig_mid();
	g_sink += r;
	return r + 1;
}

NOINL int handler_mid(int sig)
{
	capture();
	g_sink += sig;
	return sig + 1;
}

/* on_signal runs on the sigaltstack, with x18 as the interrupted code left
 * it: the shadow call stack continues on the same x18. */
NOINL void on_signal(int sig, void *info, void *uctx)
{
	(void)info;
	(void)uctx;
	int r = handler_mid(sig);
	g_sink += r;
}
