package live

import "sync/atomic"

// Counters of the slow paths, for tests and for the adaptive fallback.
var (
	runtimeCalls atomic.Uint64 // runtime.Callers calls made by Callers, for any reason
	learnCalls   atomic.Uint64 // learning passes
	learnFrames  atomic.Uint64 // physical frames walked by learning passes
	learnedAddrs atomic.Uint64 // verdicts published
	relearned    atomic.Uint64 // verdicts published for an address evicted before
	evictions    atomic.Uint64 // cache slots overwritten by another address
	overflowFull atomic.Uint64 // verdicts dropped: overflow map full
)

// The adaptive fallback. A working set of return addresses larger than the
// cache shows as addresses learned again after their eviction. Every
// thrashWindow learned addresses, if at least a quarter of them were
// relearned, Callers answers the next bypassLen calls with runtime.Callers
// alone (no walk, no learning), doubling bypassLen up to maxBypass while
// the thrashing lasts and resetting it when a window is healthy. A
// thrashing window costs a few learning passes; with maxBypass calls
// between windows, Callers then stays within a few percent of
// runtime.Callers (BenchmarkWorkingSet).
const (
	thrashWindow = 256
	minBypass    = 256
	maxBypass    = 1 << 16
)

var (
	windowLearns, windowRelearns atomic.Uint64
	bypassLeft                   atomic.Int64 // calls still to answer with runtime.Callers
	bypassLen                    atomic.Int64 // length of the last bypass period
)

// noteLearned records a learning pass that published learned verdicts, of
// which relearns had been evicted before, and starts a bypass period when
// the cache thrashes.
func noteLearned(learned, relearns uint64) {
	l := windowLearns.Add(learned)
	r := windowRelearns.Add(relearns)
	if l < thrashWindow {
		return
	}
	windowLearns.Store(0)
	windowRelearns.Store(0)
	if r*4 < l {
		bypassLen.Store(0)
		return
	}
	n := bypassLen.Load() * 2
	n = max(n, minBypass)
	n = min(n, maxBypass)
	bypassLen.Store(n)
	bypassLeft.Store(n)
}

// cacheUnderRace makes Callers use its cache in race builds too (the tests
// set it, so that the race detector checks the cache).
var cacheUnderRace bool
