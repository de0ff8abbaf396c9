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
	loc, _, _, st, same := lookup(d, d.tab.Load(), trace, hash, maxLockFreeSteps)
	if same >= 0 || st&stPersistent == 0 {
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

// ForceCollisions makes every two traces of one length collide in d's
// primary hash (its multiplier 0: every frame mixes to 0), for the tests
// of the bound on colliding traces. It must be called before d is used.
func ForceCollisions(d *Depot) {
	d.table()
	d.hkey.Mul = 0
}

// CountCompares counts the records every lookup compares, until the
// returned stop is called (not for concurrent use with other tests).
func CountCompares() (n *int, stop func()) {
	n = new(int)
	testHookCompare = func() { *n++ }
	return n, func() { testHookCompare = nil }
}

// Secondaries is the number of records d stored under their secondary
// hash.
func Secondaries(d *Depot) uint64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.secondaries
}
