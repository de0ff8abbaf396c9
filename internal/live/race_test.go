package live

import (
	"slices"
	"testing"
)

// The tests exercise Callers' cache in race builds too (where Callers is
// otherwise runtime.Callers), so that the race detector checks it.
func init() { cacheUnderRace = true }

// In a race build Callers is runtime.Callers: no walk, no learning.
func TestRaceBuildIsRuntimeCallers(t *testing.T) {
	if !raceEnabled {
		t.Skip("not a race build")
	}
	cacheUnderRace = false
	defer func() { cacheUnderRace = true }()
	resetCache()
	learns := learnCalls.Load()
	a, b := make([]uintptr, 64), make([]uintptr, 64)
	na, nb := callersSlow(0, a), Callers(0, b)
	if na != nb || !slices.Equal(a[1:na], b[1:nb]) {
		t.Fatalf("race build: %v != %v", framesOf(a[:na]), framesOf(b[:nb]))
	}
	if learnCalls.Load() != learns {
		t.Fatal("a race build learned")
	}
}
