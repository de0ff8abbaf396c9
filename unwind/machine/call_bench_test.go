package machine

import "testing"

// BenchmarkCallReturn drives one call and its return on a CPU (SCS,
// frame pointers, no PAC): the model's per-step cost, allocations
// included.
func BenchmarkCallReturn(b *testing.B) {
	_, c := newTestMachine(b, nil)
	must(b, c.Call("do_work"))
	b.ReportAllocs()
	for b.Loop() {
		if err := c.Call("alloc_obj"); err != nil {
			b.Fatal(err)
		}
		if err := c.Return(); err != nil {
			b.Fatal(err)
		}
	}
}
