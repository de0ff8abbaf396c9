package live

import (
	"slices"
	"sync/atomic"
	"testing"
)

// withCache runs f with a fresh cache table of 1<<bits buckets (0: every
// address in one bucket), then restores the normal one.
func withCache(t *testing.T, bits uint, f func()) {
	t.Helper()
	resetCache() // empties homeTab: the fast paths then always miss
	wholeOff.Store(true)
	defer wholeOff.Store(false)
	old := cache
	cache = tableOf(make([]atomic.Uintptr, bucketSlots<<bits), make([]atomic.Uint32, 1<<bits))
	resetCache()
	defer func() { cache = old; resetCache() }()
	f()
}

// A stack whose return addresses all hash to one bucket (a one-bucket
// table: 8 slots, the rest in the overflow map) is learned once, with one
// runtime.Callers call, and then answered from the cache: each address is
// learned once, and later calls make no runtime.Callers call.
func TestCollidingStackLearnedOnce(t *testing.T) {
	if !Supported {
		t.Skip("no frame pointers")
	}
	withCache(t, 0, func() {
		path := csPaths(1, 4)[0] // 32 generated frames, and the test's
		var bad error
		calls := 0
		f := csCompare(&bad, &calls)
		var rts []uint64
		learned := countLearns(func() {
			for range 5 {
				before := runtimeCalls.Load()
				cs0(&path, f, 0)
				rts = append(rts, runtimeCalls.Load()-before)
			}
		})
		if bad != nil {
			t.Fatal(bad)
		}
		if rts[0] > 1 || slices.Max(rts[1:]) != 0 {
			t.Errorf("runtime.Callers calls per call: %v, want at most 1, then none", rts)
		}
		for ret, n := range learned {
			if n > 1 {
				t.Errorf("%v learned %d times", framesOf([]uintptr{ret}), n)
			}
		}
		if len(learned) < csLevels+2 {
			t.Errorf("only %d addresses learned: the stack is not the one claimed", len(learned))
		}
		if m := overflow.Load(); m == nil || len(*m) < len(learned)-2*bucketSlots {
			t.Errorf("the overflow map was not used")
		}
	})
}
