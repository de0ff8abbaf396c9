/* gcs-leaf.c: leaf_spin, the leaf capture point of the leaf scenario,
 * built with -momit-leaf-frame-pointer: no frame record, no SCS push; its
 * return address is in x30 and, pushed by the caller's bl, on the GCS. */
extern volatile int g_sink;

#ifdef GCS_CRASH
extern int *volatile g_crash_at; /* null: the core build faults here (gcs.c) */
#endif

__attribute__((noipa, noinline)) int leaf_spin(int v)
{
#ifdef GCS_CRASH
	*g_crash_at = v;
#endif
	g_sink += v;
	return g_sink;
}
