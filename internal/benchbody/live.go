package benchbody

import (
	"errors"
	"runtime"
	"testing"

	ilive "github.com/unwindkit/unwindkit/internal/live"
	"github.com/unwindkit/unwindkit/unwind/live"
)

// LiveDepths are the depths (frames stored per call) of the live-Go
// comparison: unwind/live's BenchmarkLiveCallers and the report's table.
var LiveDepths = []int{8, 32, 128}

// LiveUnwinder is one contender of the live-Go comparison: Fn stores the
// caller's stack into pc, as runtime.Callers(1, pc) does (live.Callers and
// live.CallersFP take runtime.Callers' skip: 1 is the caller).
type LiveUnwinder struct {
	Name string
	Fn   func(pc []uintptr) int
	// FP marks live.CallersFP, which is absent without frame pointers.
	FP bool
}

// LiveUnwinders are runtime.Callers (the baseline), live.Callers,
// live.CallersFP and the two frame-pointer loops with no checks that
// CallersFP's checks are measured against: gounwind's loop in its own
// shape (internal/live.GounwindFP, the baseline the speed target names)
// and the stricter minimal loop (internal/live.UncheckedFP), each called
// as a user calls it: skip 0 is its caller.
var LiveUnwinders = []LiveUnwinder{
	{Name: "runtime.Callers", Fn: func(pc []uintptr) int { return runtime.Callers(1, pc) }},
	{Name: "live.Callers", Fn: func(pc []uintptr) int { return live.Callers(1, pc) }},
	{Name: "live.CallersFP", Fn: func(pc []uintptr) int { n, _ := live.CallersFP(1, pc); return n }, FP: true},
	{Name: "gounwind loop", Fn: func(pc []uintptr) int { return ilive.GounwindFP(0, pc) }, FP: true},
	{Name: "minimal FP loop", Fn: func(pc []uintptr) int { n, _ := ilive.UncheckedFP(0, pc); return n }, FP: true},
}

// LiveSupported reports whether u can run here (CallersFP needs frame
// pointers).
func LiveSupported(u LiveUnwinder) bool {
	if !u.FP {
		return true
	}
	_, err := live.CallersFP(0, nil)
	return !errors.Is(err, live.ErrNotSupported)
}

// Live returns the body that times u storing exactly depth frames, called
// with depth+8 frames below it; the first calls learn and warm up.
func Live(u LiveUnwinder, depth int) func(*testing.B) {
	return func(b *testing.B) {
		pc := make([]uintptr, depth)
		liveAtDepth(depth+8, func() {
			u.Fn(pc)
			for b.Loop() {
				if n := u.Fn(pc); n != depth {
					b.Fatalf("%s stored %d frames, want %d", u.Name, n, depth)
				}
			}
		})
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(depth), "ns/frame")
	}
}

// liveAtDepth calls f with d more frames below it.
//
//go:noinline
func liveAtDepth(d int, f func()) {
	if d <= 0 {
		f()
		return
	}
	liveAtDepth(d-1, f)
}
