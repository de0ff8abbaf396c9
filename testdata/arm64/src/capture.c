/* capture.c (instrumented): the innermost frame of most chains. capture is
 * a non-leaf function: it pushes its return address on the shadow call
 * stack and builds a frame record, then calls snap_copy. */
#include "snap.h"

NOINL static void snap_copy(void)
{
	copy_all();
}

NOINL void capture(void)
{
	/* Using the frame address forces x29 to be set up before SAVE_REGS:
	 * clang would otherwise schedule "mov x29, sp" after the asm. */
	__asm__ volatile("" ::"r"(__builtin_frame_address(0)));
	SAVE_REGS();
	snap_copy();
	g_sink++;
}
