#include "_cgo_export.h"

/* A few C frames between Go and the callback. */
__attribute__((noinline)) void cgotestCall(int n) {
	if (n > 0) {
		cgotestCall(n - 1);
		__asm__ volatile("" ::: "memory"); /* not a tail call */
		return;
	}
	cgotestCallback();
}
