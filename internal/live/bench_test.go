package live

import (
	"fmt"
	"runtime"
	"testing"
)

// atDepth calls f with at least d frames of atDepth below it.
//
//go:noinline
func atDepth(d int, f func()) {
	if d <= 0 {
		f()
		return
	}
	atDepth(d-1, f)
}

// benchUnwinder is one contender in BenchmarkCallers.
type benchUnwinder struct {
	name string
	fn   func(pc []uintptr) int
}

// benchExtra holds baselines that exist only on some GOARCHes.
var benchExtra []benchUnwinder

// BenchmarkCallers compares runtime.Callers, Callers and CallersFP in one
// run. Each stores exactly depth frames: the stack is deeper than the buffer,
// so every unwinder stops when the buffer is full.
func BenchmarkCallers(b *testing.B) {
	for _, depth := range []int{8, 32, 128} {
		unwinders := []benchUnwinder{
			{"runtime.Callers", func(pc []uintptr) int { return runtime.Callers(1, pc) }},
			{"Callers", func(pc []uintptr) int { return Callers(0, pc) }},
			{"CallersFP", func(pc []uintptr) int { n, _ := CallersFP(0, pc); return n }},
		}
		for _, u := range append(unwinders, benchExtra...) {
			b.Run(fmt.Sprintf("depth=%d/%s", depth, u.name), func(b *testing.B) {
				if u.name == "CallersFP" && !Supported {
					b.Skip("no frame pointers")
				}
				pc := make([]uintptr, depth)
				atDepth(depth+8, func() {
					u.fn(pc) // warm the expansion cache
					for b.Loop() {
						if n := u.fn(pc); n != depth {
							b.Fatalf("stored %d frames, want %d", n, depth)
						}
					}
				})
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(depth), "ns/frame")
			})
		}
	}
}

// BenchmarkCallersCold measures the learning path: the cache is emptied
// before every call.
func BenchmarkCallersCold(b *testing.B) {
	pc := make([]uintptr, 32)
	atDepth(40, func() {
		for b.Loop() {
			resetCache()
			Callers(0, pc)
		}
	})
}
