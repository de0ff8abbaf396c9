package live

import (
	"sync/atomic"
	"testing"
)

// withCache runs f with a fresh cache table of 1<<bits buckets (0: every
// address in one bucket), then restores the normal one.
func withCache(t *testing.T, bits uint, f func()) {
	t.Helper()
	resetCache() // empties homeTab: the fast paths then always miss
	old := cache
	cache = tableOf(make([]atomic.Uintptr, bucketSlots<<bits), make([]atomic.Uint32, 1<<bits))
	resetCache()
	defer func() { cache = old; resetCache() }()
	f()
}

// A stack whose return addresses all hash to one bucket is learned once,
// with one runtime.Callers call, and then answered from the cache.
func TestCollidingStackLearnedOnce(t *testing.T) {
	if !Supported || raceEnabled {
		t.Skip("Callers uses no cache here")
	}
	withCache(t, 0, func() {
		for i := 0; i < 5; i++ {
			before := runtimeCalls.Load()
			plainA(0).check(t)
			_ = before
		}
		for i := 0; i < 5; i++ {
			before := runtimeCalls.Load()
			pc := make([]uintptr, 64)
			collideCall(pc)
			if d := runtimeCalls.Load() - before; d > 1 || (i > 0 && d > 0) {
				t.Errorf("call %d made %d runtime.Callers calls", i, d)
			}
		}
	})
}

//go:noinline
func collideCall(pc []uintptr) int { return collide2(pc) }

//go:noinline
func collide2(pc []uintptr) int { return collide3(pc) }

//go:noinline
func collide3(pc []uintptr) int { return testCallers(0, pc) }
