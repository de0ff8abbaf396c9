/* The second compilation unit: its own copies of the header's inlines. */
#include "inl.h"

static inline int twice(int v)
{
	return leaf_add(v, v) * 2;
}

__attribute__((noinline)) int other(int x)
{
	int r = twice(x);
	if (x > 100)
		r += mid_mix(x, 3);
	return r + outer_walk(x & 7);
}
