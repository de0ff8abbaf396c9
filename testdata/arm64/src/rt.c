/* rt.c (uninstrumented, built with -ffixed-x18 so it never touches x18):
 * a tiny freestanding runtime. _start calls main with x29 = x30 = 0, so the
 * frame-record chain ends cleanly at main's record; main maps a guarded
 * shadow call stack, points x18 at it, runs one scenario and writes the raw
 * dump to stdout with raw system calls. No libc is linked. */
#include "snap.h"

struct snap g_snap;
unsigned char g_stack_buf[STACK_BUF];
unsigned char g_alt_buf[ALT_BUF];
unsigned char g_scs_buf[SCS_BUF];
volatile int g_sink;
long g_pid;
int g_siginfo[32];

__asm__(".text\n"
	".globl _start\n"
	".type _start, %function\n"
	"_start:\n"
	"	ldr x0, [sp]\n"
	"	add x1, sp, #8\n"
	"	mov x29, #0\n"
	"	mov x30, #0\n"
	"	bl main\n"
	"	mov x8, #93\n" /* exit */
	"	svc #0\n"
	".size _start, .-_start\n"
	/* sigreturn_tramp is the signal return trampoline installed with
	 * SA_RESTORER, like the kernel's vDSO __kernel_rt_sigreturn. */
	".globl sigreturn_tramp\n"
	".type sigreturn_tramp, %function\n"
	"sigreturn_tramp:\n"
	"	mov x8, #139\n" /* rt_sigreturn */
	"	svc #0\n"
	".size sigreturn_tramp, .-sigreturn_tramp\n");

void sigreturn_tramp(void);

static long sys6(long n, long a, long b, long c, long d, long e, long f)
{
	register long x8 __asm__("x8") = n;
	register long x0 __asm__("x0") = a;
	register long x1 __asm__("x1") = b;
	register long x2 __asm__("x2") = c;
	register long x3 __asm__("x3") = d;
	register long x4 __asm__("x4") = e;
	register long x5 __asm__("x5") = f;
	__asm__ volatile("svc #0"
			 : "+r"(x0)
			 : "r"(x8), "r"(x1), "r"(x2), "r"(x3), "r"(x4), "r"(x5)
			 : "memory");
	return x0;
}

#define SYS_write 64
#define SYS_exit 93
#define SYS_sigaltstack 132
#define SYS_rt_sigaction 134
#define SYS_getpid 172
#define SYS_munmap 215
#define SYS_mmap 222
#define SYS_mprotect 226

#define PROT_NONE 0
#define PROT_RW 3
#define MAP_PRIVATE_ANON 0x22
#define SA_SIGINFO 4
#define SA_ONSTACK 0x08000000
#define SA_RESTORER 0x04000000
#define PAGE 4096

static void die(const char *msg)
{
	u64 n = 0;
	while (msg[n])
		n++;
	sys6(SYS_write, 2, (long)msg, n, 0, 0, 0);
	sys6(SYS_exit, 1, 0, 0, 0, 0, 0);
}

static void put(const void *p, u64 n)
{
	const char *c = p;
	while (n > 0) {
		long w = sys6(SYS_write, 1, (long)c, n, 0, 0, 0);
		if (w <= 0)
			die("write failed\n");
		c += w;
		n -= w;
	}
}

static int streq(const char *a, const char *b)
{
	while (*a && *a == *b)
		a++, b++;
	return *a == *b;
}

/* guarded maps size bytes with a PROT_NONE guard page on each side and
 * returns the usable base. */
static u64 guarded(u64 size)
{
	long p = sys6(SYS_mmap, 0, size + 2 * PAGE, PROT_NONE, MAP_PRIVATE_ANON, -1, 0);
	if (p < 0 && p > -4096)
		die("mmap failed\n");
	if (sys6(SYS_mprotect, p + PAGE, size, PROT_RW, 0, 0, 0) != 0)
		die("mprotect failed\n");
	return (u64)p + PAGE;
}

struct kaction {
	void *handler;
	u64 flags;
	void *restorer;
	u64 mask;
};

struct kstack {
	u64 sp;
	int flags;
	u64 size;
};

static void region(const char *name, const char *kind, u64 base, const void *data, u64 len)
{
	char hdr[32] = {0};
	for (int i = 0; name[i] && i < 15; i++)
		hdr[i] = name[i];
	for (int i = 0; kind[i] && i < 15; i++)
		hdr[16 + i] = kind[i];
	put(hdr, 32);
	put(&base, 8);
	put(&len, 8);
	put(data, len);
}

/* set_x18 points x18 at the shadow call stack. The compiler never uses x18
 * in this file (-ffixed-x18) and raw system calls preserve it, so it holds
 * until the instrumented code is called. */
#define SET_X18(v) __asm__ volatile("mov x18, %0" ::"r"(v) : "memory")

int main(long argc, char **argv)
{
	if (argc < 2)
		die("usage: capture chain|leaf|recurse|deep|signal\n");
	const char *sc = argv[1];
	g_snap.stack_top = (u64)argv - 8; /* sp at _start */
	g_snap.scs_base = guarded(SCS_SIZE);
	g_snap.scs_end = g_snap.scs_base + SCS_SIZE;
	g_pid = sys6(SYS_getpid, 0, 0, 0, 0, 0, 0);

	SET_X18(g_snap.scs_base);
	int r = warm(16);
	if (streq(sc, "chain")) {
		SET_X18(g_snap.scs_base);
		r = chain_root();
	} else if (streq(sc, "leaf")) {
		SET_X18(g_snap.scs_base);
		r = leaf_root();
	} else if (streq(sc, "recurse")) {
		SET_X18(g_snap.scs_base);
		r = rec_root(8);
	} else if (streq(sc, "deep")) {
		SET_X18(g_snap.scs_base);
		r = deep_root(130);
	} else if (streq(sc, "signal")) {
		g_snap.alt_base = guarded(ALT_SIZE);
		g_snap.alt_top = g_snap.alt_base + ALT_SIZE;
		struct kstack ss = {g_snap.alt_base, 0, ALT_SIZE};
		if (sys6(SYS_sigaltstack, (long)&ss, 0, 0, 0, 0, 0) != 0)
			die("sigaltstack failed\n");
		struct kaction act = {(void *)on_signal, SA_SIGINFO | SA_ONSTACK | SA_RESTORER,
				      (void *)sigreturn_tramp, 0};
		if (sys6(SYS_rt_sigaction, 10, (long)&act, 0, 8, 0, 0) != 0)
			die("rt_sigaction failed\n");
		/* si_signo, si_errno, si_code = SI_QUEUE; si_pid = si_uid = 0 */
		g_siginfo[0] = 10;
		g_siginfo[2] = -1;
		SET_X18(g_snap.scs_base);
		r = sig_root();
	} else {
		die("unknown scenario\n");
	}
	if (!g_snap.done)
		die("capture did not run\n");

	char hdr[8 + 32] = "UKSNAP01";
	for (int i = 0; sc[i] && i < 31; i++)
		hdr[8 + i] = sc[i];
	put(hdr, sizeof hdr);
	put(&g_snap, 6 * 8); /* pc, sp, x18, x29, x30, scs_base */
	u64 n = g_snap.alt_len ? 3 : 2;
	put(&n, 8);
	region("stack", "stack", g_snap.stack_lo, g_stack_buf, g_snap.stack_len);
	if (g_snap.alt_len)
		region("altstack", "stack", g_snap.alt_lo, g_alt_buf, g_snap.alt_len);
	region("scs", "scs", g_snap.scs_base, g_scs_buf, g_snap.scs_len);
	return r & 0;
}
