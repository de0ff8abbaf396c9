package live

import (
	"fmt"
	"runtime"
	"testing"
	"time"
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

// BenchmarkCallersSideBySide runs the contenders of BenchmarkCallers
// interleaved, a batch of 256 calls each in turn (about 2 µs or more: well
// above the clock's resolution), and reports each one's ns per
// call in its fastest batch (a batch that was preempted or shared a core
// is slower, never faster) and the ratios the README quotes:
// runtime.Callers / Callers (speed-up), CallersFP / each frame-pointer
// baseline (the unchecked loop, gounwind's loop).
//
// In a race build Callers is runtime.Callers.
func BenchmarkCallersSideBySide(b *testing.B) {
	const batch = 256
	for _, depth := range []int{8, 32, 128} {
		b.Run(fmt.Sprintf("depth=%d", depth), func(b *testing.B) {
			us := append([]benchUnwinder{
				{"runtime.Callers", func(pc []uintptr) int { return runtime.Callers(1, pc) }},
				{"Callers", func(pc []uintptr) int { return Callers(0, pc) }},
				{"CallersFP", func(pc []uintptr) int { n, _ := CallersFP(0, pc); return n }},
			}, benchExtra...)
			if !Supported {
				us = us[:2]
			}
			best := make([]time.Duration, len(us))
			pc := make([]uintptr, depth)
			rounds := 0
			atDepth(depth+8, func() {
				for _, u := range us {
					u.fn(pc) // warm the expansion cache
				}
				for b.Loop() {
					for k := range us {
						u := us[(k+rounds)%len(us)]
						t0 := time.Now()
						for range batch {
							if n := u.fn(pc); n != depth {
								b.Fatalf("%s stored %d frames, want %d", u.name, n, depth)
							}
						}
						if d, i := time.Since(t0), (k+rounds)%len(us); best[i] == 0 || d < best[i] {
							best[i] = d
						}
					}
					rounds++
				}
			})
			ns := func(i int) float64 { return float64(best[i].Nanoseconds()) / batch }
			for i, u := range us {
				b.ReportMetric(ns(i), u.name+"-ns")
			}
			b.ReportMetric(ns(0)/ns(1), "rt/Callers")
			if len(us) > 2 {
				b.ReportMetric(ns(2)/ns(0), "FP/rt")
			}
			for i, u := range us[min(3, len(us)):] {
				b.ReportMetric(ns(2)/ns(3+i), "FP/"+u.name)
			}
			b.ReportMetric(0, "ns/op")
		})
	}
}

// BenchmarkCollidingStack measures Callers on a stack whose return
// addresses all fall into one bucket (a one-bucket table: 8 slots, the rest
// in the overflow map; the fast paths' home-slot compare always misses)
// against runtime.Callers, interleaved as in BenchmarkCallersSideBySide.
func BenchmarkCollidingStack(b *testing.B) {
	if !Supported {
		b.Skip("no frame pointers")
	}
	withCache(&testing.T{}, 0, func() {
		const batch = 32
		pc := make([]uintptr, 64)
		us := []func() int{
			func() int { return runtime.Callers(1, pc) },
			func() int { return Callers(0, pc) },
		}
		best := make([]time.Duration, 2)
		var n [2]int
		plainA(0) // a stack of distinct frames below...
		collideBench(func() {
			round := func() {
				for i, u := range us {
					t0 := time.Now()
					for range batch {
						n[i] = u()
					}
					if d := time.Since(t0); best[i] == 0 || d < best[i] {
						best[i] = d
					}
				}
			}
			var learns uint64
			for first := true; b.Loop(); first = false {
				round()
				if first { // learned now
					learns = learnCalls.Load()
				}
			}
			if learnCalls.Load() != learns {
				b.Fatal("the colliding stack was learned again")
			}
		})
		if n[0] != n[1] || n[0] < 8 {
			b.Fatalf("runtime.Callers %d frames, Callers %d", n[0], n[1])
		}
		rt, lv := float64(best[0].Nanoseconds())/batch, float64(best[1].Nanoseconds())/batch
		b.ReportMetric(rt, "runtime.Callers-ns")
		b.ReportMetric(lv, "Callers-ns")
		b.ReportMetric(lv/rt, "Callers/rt")
		b.ReportMetric(float64(n[0]), "frames")
		b.ReportMetric(0, "ns/op")
	})
}

// collideBench runs f below a few distinct frames.
//
//go:noinline
func collideBench(f func()) { collideBench2(f) }

//go:noinline
func collideBench2(f func()) { collideBench3(f) }

//go:noinline
func collideBench3(f func()) { atDepth(4, f) }
