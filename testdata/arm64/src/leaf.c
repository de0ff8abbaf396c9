/* leaf.c (instrumented, built with -momit-leaf-frame-pointer): the
 * innermost function capture_leaf is a leaf. It pushes nothing on the
 * shadow call stack and builds no frame record, so its caller leaf_mid is
 * only in x30: neither the SCS nor the frame-record chain holds it. */
#include "snap.h"

NOINL void capture_leaf(void)
{
	SAVE_REGS();
	copy_all();
}

NOINL int leaf_mid(int x)
{
	capture_leaf();
	g_sink += x;
	return x + 1;
}

NOINL int leaf_root(void)
{
	int r = leaf_mid(3);
	g_sink += r;
	return r + 1;
}
