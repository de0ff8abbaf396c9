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
	n, st, ok, slot, r0 := 0, 0, false, -1, pc[0]
	if miss != 0 {
		// A frame with inlined calls, most often: the whole stack may
		// have been answered before (whole.go), unless walkProbe filled
		// pc or this call site's stacks are deeper than its buffer.
		if m < len(pc) && cutTab[firstHash(r0)].Load() != cutWord(r0, len(pc)) {
			if n, slot = wholeHit(start, skip, pc); n >= 0 {
				return n
			}
		}
		n, st, ok = expandWalk(start, skip, pc)
	}
	if !ok {
		n, st = fastWalk(start, fp, skip, pc, m, why)
	}
	switch st {
	case walkDone:
		if miss != 0 {
			noteCut(r0, len(pc), n == len(pc))
			if slot >= 0 && n < len(pc) {
				rememberWhole(start, skip, pc[:n], slot) // whole: fewer than pc holds
			}
		}
		return n
	case walkMiss:
		return learn(skip, pc)
	}
	runtimeCalls.Add(1)
	return runtime.Callers(skip+2, pc)
}
