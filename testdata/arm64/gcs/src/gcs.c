/* gcs.c: the scenarios of the GCS test program, built with
 * -mbranch-protection=gcs and -fsanitize=shadow-call-stack (so the same
 * run has a Guarded Control Stack, a shadow call stack and frame
 * records). gcsrt.c (no SCS) enables nothing itself: glibc's start code
 * enables GCS (GLIBC_TUNABLES=glibc.cpu.aarch64_gcs=1) and gcsrt.c's main
 * points x18 at a shadow call stack before calling a scenario. Every
 * scenario reaches capture_here, where the capture script stops the
 * program with gdb (a breakpoint on snap_touch, then "finish"), or, built
 * with -DGCS_CRASH, faults for a core (kcore.sh). */
#include <setjmp.h>
#include <signal.h>

#define NOINL __attribute__((noipa, noinline))

extern volatile int g_sink;
extern long g_pid;
extern int g_siginfo[32];

NOINL void snap_touch(int v) { g_sink += v; }

/* The core build (kcore.sh, -DGCS_CRASH) faults at the capture point:
 * a store through the null g_crash_at right after snap_touch returns, so
 * Linux writes a core where the snapshot build stops for gdb. */
#ifdef GCS_CRASH
int *volatile g_crash_at;
#define CRASH_POINT(v) (*g_crash_at = (v))
#else
#define CRASH_POINT(v) ((void)0)
#endif

/* The capture point: a non-leaf with a frame record. */
NOINL void capture_here(int v)
{
	snap_touch(v);
	CRASH_POINT(v);
	g_sink++;
}

/* chain: five C frames. */
NOINL void chain_d(int v) { capture_here(v); g_sink++; }
NOINL void chain_c(int v) { chain_d(v + 1); g_sink++; }
NOINL void chain_b(int v) { chain_c(v + 1); g_sink++; }
NOINL int run_chain(void) { chain_b(1); return g_sink; }

/* leaf: the capture point is leaf_spin, a leaf without a frame record
 * (gcs-leaf.c is built with -momit-leaf-frame-pointer); its caller
 * leaf_mid is then only in x30 and on the GCS. */
int leaf_spin(int v);
NOINL int leaf_mid(int v) { int r = leaf_spin(v); g_sink++; return r; }
NOINL int run_leaf(void) { return leaf_mid(3); }

/* noframe: noframe_call (noframe.S) is assembly that keeps x30 on the
 * stack without a frame record or SCS push and calls capture_here: the
 * FP walk and the SCS copy skip its caller asm_mid, whose return address
 * is only on the stack and on the GCS. */
void noframe_call(int v);
NOINL void asm_mid(int v) { noframe_call(v); g_sink++; }
NOINL int run_noframe(void) { asm_mid(5); return g_sink; }

/* recurse: 100 C frames of rec. */
NOINL int rec(int n)
{
	if (n == 0) {
		capture_here(n);
		return g_sink;
	}
	int r = rec(n - 1);
	g_sink++;
	return r;
}
NOINL int run_recurse(void) { return rec(100); }

/* signal: a SIGUSR1 handler on the normal stack, raised with a raw
 * rt_sigqueueinfo from sig_raise (see testdata/arm64/src/dyn.c). */
NOINL void handler_mid(int sig) { capture_here(sig); }
NOINL void on_usr1(int sig)
{
	handler_mid(sig);
	g_sink++;
}
NOINL void sig_before(void) { g_sink++; }
NOINL void sig_raise(void)
{
	sig_before();
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

/* longjmp: lj_deep longjmps out of two frames back into lj_top, which
 * then calls lj_after and the capture point. glibc's longjmp unwinds the
 * GCS to the pointer setjmp saved; it does not hold x18, so the shadow
 * call stack keeps the two dead frames' slots. */
static jmp_buf g_jb;
NOINL void lj_deep(int v)
{
	g_sink += v;
	longjmp(g_jb, 1);
}
NOINL void lj_mid(int v) { lj_deep(v + 1); g_sink++; }
NOINL void lj_after(int v) { capture_here(v); g_sink++; }
NOINL int lj_top(void)
{
	if (setjmp(g_jb) == 0)
		lj_mid(1);
	else
		lj_after(2);
	return g_sink;
}
NOINL int run_longjmp(void) { return lj_top(); }
