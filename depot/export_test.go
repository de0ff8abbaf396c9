package depot

import (
	"hash/maphash"
	"sync/atomic"
	"unsafe"
)

// Floors for BenchmarkCompare: the depot's Save hit and Fetch, each with
// one part of its work taken out, so that a run shows what that part costs
// and how fast the depot could be without it. They are for measuring only:
// HitHashed trusts its caller's hash, FetchUnchecked trusts its handle.

// HashOf returns the hash Save computes for trace (no filter, at most
// MaxFrames frames).
func HashOf(d *Depot, trace []uint64) uint64 {
	d.table()
	return maphash.Comparable(d.seed, bytesOf(trace))
}

// HitHashed is Save's lock-free hit of a stored persistent trace, given
// its hash (HashOf): the probe, the compare, the state check and the hit
// count, as save does them, without hashing.
func HitHashed(d *Depot, trace []uint64, hash uint64) (Handle, bool) {
	loc, _, _, st, ok := lookup(d, d.tab.Load(), trace, hash, maxLockFreeSteps)
	if !ok || st&stPersistent == 0 {
		return 0, false
	}
	if d.countHits {
		d.hits[stackShard(unsafe.Pointer(&hash))].n.Add(1)
	}
	return d.handle(loc, st), true
}

// FetchUnchecked is Fetch of a valid handle with no check at all: the
// pool, the frame count and the copy.
func FetchUnchecked(d *Depot, h Handle, dst []uint64) []uint64 {
	p, off := d.at(uint32(h))
	n := frameCount(atomic.LoadUint64(&p[off]))
	return append(dst, p[off+hdrWords:off+hdrWords+n]...)
}
