package live

import (
	"sync/atomic"
	"time"
)

// Counters of the slow paths, for tests and for the adaptive fallback.
var (
	runtimeCalls atomic.Uint64 // runtime.Callers calls made by Callers, for any reason
	learnCalls   atomic.Uint64 // learning passes
	learnFrames  atomic.Uint64 // physical frames walked by learning passes
	learnedAddrs atomic.Uint64 // verdicts published
	evictions    atomic.Uint64 // cache slots overwritten by another address
	moves        atomic.Uint64 // addresses moved to their other bucket to make room
	overflowFull atomic.Uint64 // verdicts dropped: overflow map full
)

// The adaptive fallback. A working set of return addresses larger than the
// cache shows as learning passes that evict addresses from buckets that
// had an insert shortly before (recentMS): in a program whose hot stacks
// fit, evictions are rare, and a bucket's last insert is long past (4096
// buckets share the learning). Every thrashWindow learned addresses, if at
// least a quarter of them evicted from a recently filled bucket, Callers
// answers the next bypassLen calls with runtime.Callers alone (no walk, no
// learning), doubling bypassLen up to maxBypass while the thrashing lasts
// and resetting it when a window is healthy. A thrashing window costs a
// few learning passes; with up to maxBypass calls between windows, Callers
// then stays within a few percent of runtime.Callers
// (BenchmarkWorkingSet/overflow).
const (
	thrashWindow = 256
	minBypass    = 256
	maxBypass    = 1 << 16
	recentMS     = 1000
)

var (
	windowLearns, windowRecent atomic.Uint64
	bypassLeft                 atomic.Int64  // calls still to answer with runtime.Callers
	bypassLen                  atomic.Int64  // length of the last bypass period
	learnClock                 atomic.Uint32 // milliseconds since epoch, set by each learning pass
	epoch                      = time.Now()
)

// tick sets learnClock for a learning pass.
func tick() { learnClock.Store(uint32(time.Since(epoch) / time.Millisecond)) }

// noteLearned records a learning pass that published learned verdicts, of
// which recent evicted from a recently filled bucket, and starts a bypass
// period when the cache thrashes.
func noteLearned(learned, recent uint64) {
	l := windowLearns.Add(learned)
	r := windowRecent.Add(recent)
	if l < thrashWindow {
		return
	}
	windowLearns.Store(0)
	windowRecent.Store(0)
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
