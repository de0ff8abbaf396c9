/* gcs-leaf.c: leaf_spin, the leaf capture point of the leaf scenario,
 * built with -momit-leaf-frame-pointer: no frame record, no SCS push; its
 * return address is in x30 and, pushed by the caller's bl, on the GCS. */
extern volatile int g_sink;

__attribute__((noipa, noinline)) int leaf_spin(int v)
{
	g_sink += v;
	return g_sink;
}
