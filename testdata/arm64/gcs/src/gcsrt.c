/* gcsrt.c: main of the GCS test program (built with GCS, without the
 * shadow call stack): installs the signal handler, maps a shadow call
 * stack, points x18 at it and runs one scenario of gcs.c. GCS itself is
 * enabled by glibc's start code before main (GLIBC_TUNABLES
 * glibc.cpu.aarch64_gcs=1), so every frame from _start on has its GCS
 * entry. g_gcs_enabled and g_gcspr_main are what main saw (prctl
 * PR_GET_SHADOW_STACK_STATUS and GCSPR_EL0), for the capture script. */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <unistd.h>

#ifndef PR_GET_SHADOW_STACK_STATUS
#define PR_GET_SHADOW_STACK_STATUS 74
#endif

#define SCS_SIZE 16384

unsigned long g_scs_base; /* the capture's scs_base */
unsigned long g_gcs_status, g_gcspr_main;
long g_pid;
int g_siginfo[32] = {SIGUSR1, 0, -1 /* SI_QUEUE */};
volatile int g_sink;

int run_chain(void), run_leaf(void), run_noframe(void), run_recurse(void), run_signal(void), run_longjmp(void);
void gcs_descend(long n);
void on_usr1(int sig);

static int run_deep(void)
{
	gcs_descend(1L << 40); /* never returns: the GCS overflows first */
	return 0;
}

/* with_scs runs fn with x18 at the base of a fresh shadow call stack. */
static inline __attribute__((always_inline)) int with_scs(int (*fn)(void))
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

/* thread: the chain on a second thread, which has a GCS of its own
 * (allocated at clone, as Linux does) and a shadow call stack of its own. */
static void *thread_main(void *arg)
{
	*(int *)arg = with_scs(run_chain);
	return 0;
}

static int run_thread(void)
{
	pthread_t t;
	int r = -1;
	if (pthread_create(&t, 0, thread_main, &r) || pthread_join(t, 0))
		return -1;
	return r;
}

int main(int argc, char **argv)
{
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_usr1;
	sigaction(SIGUSR1, &sa, 0);
	g_pid = getpid();
	prctl(PR_GET_SHADOW_STACK_STATUS, &g_gcs_status, 0, 0, 0);
	if (g_gcs_status & 1)
		__asm__ volatile("mrs %0, s3_3_c2_c5_1" : "=r"(g_gcspr_main)); /* GCSPR_EL0 */
	if (argc != 2)
		return 2;
	static const struct {
		const char *name;
		int (*fn)(void);
	} sc[] = {{"chain", run_chain}, {"leaf", run_leaf}, {"noframe", run_noframe}, {"recurse", run_recurse},
		  {"signal", run_signal}, {"longjmp", run_longjmp}, {"deep", run_deep}, {"thread", run_thread}};
	for (unsigned i = 0; i < sizeof sc / sizeof sc[0]; i++)
		if (!strcmp(argv[1], sc[i].name)) {
			int r = sc[i].fn == run_thread ? run_thread() : with_scs(sc[i].fn);
			printf("%s: %d gcs status %#lx gcspr %#lx\n", argv[1], r, g_gcs_status, g_gcspr_main);
			return 0;
		}
	return 2;
}
