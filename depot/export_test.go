package depot

import (
	"sync/atomic"
	"unsafe"
)

// Floors for BenchmarkCompare: the depot's Save hit and Fetch, each with
// one part of its work taken out, so that a run shows what that part costs
// and how fast the depot could be without it. They are for measuring only:
// HitHashed trusts its caller's hash, FetchUnchecked trusts its handle.

// HashOf returns the hash of the trace stored under h as the table uses
// it: the record's key word, which keeps every bit of the trace's hash
// that a lookup reads (the home slot, the entry tag and the key), as the
// table's rebuild relies on.
func HashOf(d *Depot, h Handle) (uint64, error) {
	p, off, _, err := d.resolve(h)
	if err != nil {
		return 0, err
	}
	return atomic.LoadUint64(&p[off]), nil
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
		d.countHit(unsafe.Pointer(&hash))
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
