/* snap.h: shared state between the uninstrumented runtime (rt.c) and the
 * instrumented capture code (capture.c, chain.c, leaf.c).
 *
 * The capture code fills g_snap and the static buffers without calling any
 * library function; rt.c (uninstrumented) writes the raw dump afterwards. */
#ifndef SNAP_H
#define SNAP_H

typedef unsigned long u64;

#define STACK_BUF 65536
#define ALT_BUF 16384
#define SCS_BUF 16384
#define SCS_SIZE 16384
#define ALT_SIZE 16384
#define SCS_SLACK 32 /* bytes copied above x18: the stale slots */

struct snap {
	/* registers, stored by capture's inline asm (offsets are fixed) */
	u64 pc, sp, x18, x29, x30; /* 0, 8, 16, 24, 32 */
	/* bounds, set by main before the chain runs */
	u64 scs_base, scs_end;  /* usable shadow call stack */
	u64 stack_top;          /* exclusive top of the main stack copy */
	u64 main_lo;            /* signal case: interrupted sp on the main stack */
	u64 alt_base, alt_top;  /* sigaltstack, 0 if none */
	/* results, filled by snap_copy */
	u64 stack_lo, stack_len;
	u64 alt_lo, alt_len;
	u64 scs_len;
	u64 done;
};

extern struct snap g_snap;
extern unsigned char g_stack_buf[STACK_BUF];
extern unsigned char g_alt_buf[ALT_BUF];
extern unsigned char g_scs_buf[SCS_BUF];
extern volatile int g_sink;
extern long g_pid;
extern int g_siginfo[32]; /* the siginfo sig_raise queues */

/* Attributes: no inlining, no interprocedural cloning (GCC would rename
 * functions to f.constprop.0 and similar), no sibling calls. */
#ifdef __clang__
#define NOINL __attribute__((noinline, disable_tail_calls))
#else
#define NOINL __attribute__((noipa, noinline))
#endif

/* SAVE_REGS stores pc, sp, x18, x29 and x30 into g_snap in one asm block,
 * so that no compiler-chosen register can hold a stale copy of x30. */
#define SAVE_REGS()                                                      \
	__asm__ volatile("adrp x10, g_snap\n\t"                          \
			 "add x10, x10, :lo12:g_snap\n\t"                \
			 "str x30, [x10, #32]\n\t"                       \
			 "str x29, [x10, #24]\n\t"                       \
			 "str x18, [x10, #16]\n\t"                       \
			 "mov x9, sp\n\t"                                \
			 "str x9, [x10, #8]\n\t"                         \
			 "adr x9, .\n\t"                                 \
			 "str x9, [x10, #0]\n\t" ::: "x9", "x10", "memory")

/* copy_words copies n bytes (a multiple of 8) with volatile accesses, so
 * the compiler cannot turn the loop into a memcpy call. */
static inline __attribute__((always_inline)) void copy_words(unsigned char *dst, u64 src, u64 n)
{
	volatile u64 *s = (volatile u64 *)src;
	volatile u64 *d = (volatile u64 *)dst;
	for (u64 i = 0; i < n / 8; i++)
		d[i] = s[i];
}

/* copy_all copies the used stacks and the shadow call stack into the
 * static buffers, given the registers already in g_snap. */
static inline __attribute__((always_inline)) void copy_all(void)
{
	u64 sp = g_snap.sp;
	u64 lo = sp;
	if (g_snap.alt_base && sp >= g_snap.alt_base && sp < g_snap.alt_top) {
		u64 n = g_snap.alt_top - sp;
		if (n > ALT_BUF)
			n = ALT_BUF;
		copy_words(g_alt_buf, sp, n);
		g_snap.alt_lo = sp;
		g_snap.alt_len = n;
		lo = g_snap.main_lo;
	}
	lo &= ~(u64)15;
	u64 n = g_snap.stack_top - lo;
	if (n > STACK_BUF)
		n = STACK_BUF;
	copy_words(g_stack_buf, lo, n);
	g_snap.stack_lo = lo;
	g_snap.stack_len = n;
	u64 s = g_snap.x18 + SCS_SLACK;
	if (s > g_snap.scs_end)
		s = g_snap.scs_end;
	n = s - g_snap.scs_base;
	if (n > SCS_BUF)
		n = SCS_BUF;
	copy_words(g_scs_buf, g_snap.scs_base, n);
	g_snap.scs_len = n;
	g_snap.done = 1;
}

/* instrumented entry points called by main */
int warm(int n);
int chain_root(void);
int rec_root(int depth);
int deep_root(int depth);
int sig_root(void);
int leaf_root(void);
void on_signal(int sig, void *info, void *uctx);
void capture(void);

#endif
