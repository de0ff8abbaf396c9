/* dynrt.c: the uninstrumented part of dyn (a dynamically linked PIE
 * program on glibc, for `gen -run`): main maps a shadow call stack, points
 * x18 at it and calls one instrumented scenario of dyn.c. Nothing in glibc
 * sets up a shadow call stack, and glibc is not built with -ffixed-x18, so
 * only libc calls that leave x18 alone may run while x18 is live: here
 * qsort on 16 ints (msort_with_tmp on an on-stack buffer, no malloc, no
 * memcpy) and the signal delivery (QEMU, like the kernel, keeps x18).
 * Every libc call that may clobber x18 (printf, sigaction, mmap) runs
 * before x18 is set or after the scenario returned. */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define SCS_SIZE 16384

unsigned long g_scs_base; /* gen -scs-base g_scs_base */
long g_pid;
int g_siginfo[32] = {SIGUSR1, 0, -1 /* SI_QUEUE */}; /* si_pid, si_uid 0 */
volatile int g_sink;

int run_qsort(void);
int run_signal(void);
void on_usr1(int sig);

/* with_scs runs fn with x18 at the base of a fresh shadow call stack. */
static int with_scs(int (*fn)(void))
{
	char *p = mmap(0, SCS_SIZE + 8192, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED || mprotect(p + 4096, SCS_SIZE, PROT_READ | PROT_WRITE))
		return -1;
	g_scs_base = (unsigned long)(p + 4096);
	int r;
	__asm__ volatile("mov x18, %1\n\t"
			 "blr %2\n\t"
			 "mov %w0, w0\n\t"
			 "mov x18, xzr"
			 : "=r"(r)
			 : "r"(g_scs_base), "r"(fn)
			 : "x0", "x1", "x2", "x3", "x4", "x5", "x6", "x7", "x8", "x9", "x10", "x11", "x12", "x13",
			   "x14", "x15", "x16", "x17", "x30", "memory", "cc");
	return r;
}

int main(int argc, char **argv)
{
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_usr1; /* no SA_ONSTACK: the handler runs on the normal stack */
	sigaction(SIGUSR1, &sa, 0);
	g_pid = getpid();
	if (argc != 2)
		return 2;
	int r = -1;
	if (!strcmp(argv[1], "qsort"))
		r = with_scs(run_qsort);
	else if (!strcmp(argv[1], "signal"))
		r = with_scs(run_signal);
	printf("%s: %d\n", argv[1], r);
	return 0;
}
