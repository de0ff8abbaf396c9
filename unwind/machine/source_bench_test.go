package machine

import (
	"testing"

	"github.com/unwindkit/unwindkit/unwind"
)

// BenchmarkSource measures building a Source from a running CPU (the model
// reading registers), then the unwind itself, for an inline unwinder at
// depth 10.
func BenchmarkSource(b *testing.B) {
	for _, method := range []unwind.Method{unwind.MethodSCS, unwind.MethodFP} {
		_, c := newTestMachine(b, func(cfg *Config) { cfg.PAC = true })
		for i := 0; i < 8; i++ {
			must(b, c.Call("do_work"))
		}
		store := make([]uint64, 64)
		b.Run(method.String()+"/source", func(b *testing.B) {
			for b.Loop() {
				if _, err := c.Source(method, SaveOptions{}); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(method.String()+"/unwind", func(b *testing.B) {
			for b.Loop() {
				if _, err := c.Unwind(method, Inline, store, SaveOptions{}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestUnwindDoesNotAllocate: an inline unwind of a running CPU allocates
// nothing (the Source lives on the stack; the FP walk copies its Config).
func TestUnwindDoesNotAllocate(t *testing.T) {
	for _, method := range []unwind.Method{unwind.MethodSCS, unwind.MethodFP} {
		_, c := newTestMachine(t, func(cfg *Config) { cfg.PAC = true })
		must(t, c.Call("do_work"))
		store := make([]uint64, 64)
		if a := testing.AllocsPerRun(50, func() {
			if _, err := c.Unwind(method, Inline, store, SaveOptions{}); err != nil {
				t.Fatal(err)
			}
		}); a != 0 {
			t.Errorf("%v: Unwind allocates %.1f times", method, a)
		}
	}
}
