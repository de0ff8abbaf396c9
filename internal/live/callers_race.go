//go:build (amd64 || arm64) && race

package live

import "runtime"

// Callers is runtime.Callers in race builds, where every stack read and
// cache probe of the walk would be instrumented: small enough to be inlined
// into its caller, so that it unwinds no frame of its own (skip+2 drops
// runtime.Callers and Callers' inlined logical frame) and costs what
// runtime.Callers costs.
func Callers(skip int, pc []uintptr) int {
	return runtime.Callers(clampSkip(max(skip, 0))+2, pc)
}

// callersCached is the Callers of other builds (callers.go), so that the
// tests run the cache under the race detector too (testCallers).
//
//go:noinline
//go:norace
func callersCached(skip int, pc []uintptr) int {
	if skip < 0 {
		skip = 0
	}
	if len(pc) == 0 {
		return 0
	}
	if skip > maxSkip || bypassLeft.Load() > 0 {
		if skip <= maxSkip {
			bypassLeft.Add(-1)
		}
		runtimeCalls.Add(1)
		return runtime.Callers(clampSkip(skip)+2, pc)
	}
	start := getfp()
	m, why, fp, miss := walkProbe(start, pc, stopPC.Load())
	if miss == 0 && why <= rawEnd {
		// Every frame after the first records itself (walkProbe).
		if skip == 0 && homeTab[homeHash(pc[0])].Load() == pc[0] {
			return m
		}
		// The public live.Callers(1, pc) (see firstTab).
		if w := firstTab[firstHash(pc[0])].Load(); skip == 1 && w&addrMask == pc[0] {
			pc[0] += uintptr(int16(w >> addrBits))
			return m
		}
		if n := expandFirst(pc, m, skip); n >= 0 {
			return n
		}
	}
	n, st, ok := 0, 0, false
	if miss != 0 {
		n, st, ok = expandWalk(start, skip, pc)
	}
	if !ok {
		n, st = fastWalk(start, fp, skip, pc, m, why)
	}
	switch st {
	case walkDone:
		return n
	case walkMiss:
		return learn(skip, pc)
	}
	runtimeCalls.Add(1)
	return runtime.Callers(skip+2, pc)
}
