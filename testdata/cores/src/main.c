/* main.c (uninstrumented, -ffixed-x18): maps a shadow call stack between
 * two PROT_NONE guard pages, points x18 at its base and calls one crashing
 * scenario of crash.c. A user-space program has to set up its own shadow
 * call stack this way unless its C library does (Android's bionic does). */
#include <string.h>
#include <sys/mman.h>

#define SCS_SIZE (16 << 10)
#define PAGE 4096

int leaf_root(void);
int rec_root(int n);
int sig_root(void);
int sort_root(void);

int main(int argc, char **argv)
{
	if (argc < 2)
		return 2;
	char *p = mmap(0, SCS_SIZE + 2 * PAGE, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED || mprotect(p + PAGE, SCS_SIZE, PROT_READ | PROT_WRITE) != 0)
		return 3;
	__asm__ volatile("mov x18, %0" ::"r"(p + PAGE) : "memory");
	int r = 0;
	if (!strcmp(argv[1], "leaf"))
		r = leaf_root();
	else if (!strcmp(argv[1], "recurse"))
		r = rec_root(6);
	else if (!strcmp(argv[1], "signal"))
		r = sig_root();
	else if (!strcmp(argv[1], "qsort"))
		r = sort_root();
	/* Using r after the call keeps main's frame: no tail call. */
	return r + argc;
}
