/* Inlined helpers in a header, so call sites name a second file. */
#ifndef INL_H
#define INL_H

extern volatile int sink;
void note(int v);

static inline __attribute__((always_inline)) int leaf_add(int a, int b)
{
	sink = a;
	note(a + b);
	return a + b;
}

static inline int mid_mix(int a, int b)
{
	int s = 0;
	for (int i = 0; i < a; i++) {
		if (i & 1)
			s += leaf_add(i, b);
		else
			s -= leaf_add(b, i);
	}
	return s;
}

static inline __attribute__((always_inline)) int outer_walk(int n)
{
	int t = mid_mix(n, n + 1);
	if (__builtin_expect(t == 12345, 0)) {
		note(-1);
		note(-2);
	}
	return t + leaf_add(t, n);
}

#endif
