package depot

import (
	"errors"
	"fmt"
	"hash/maphash"
	"math/rand/v2"
	"unsafe"

	"github.com/unwindkit/unwindkit/internal/tracehash"
)

// A Hash is the running hash of a trace's first frames, as a producer
// computes it while it makes the trace (an unwinder hashing each return
// address as it stores it): start with [HashKey.Start] and extend it with
// [HashKey.Add], one frame at a time, innermost first. [Depot.SaveHashed]
// takes it instead of hashing the trace again.
type Hash uint64

// HashKey is the key of a depot's trace hash, drawn at random for each
// depot (so that traces built to collide in one depot do not collide in
// another). The hash of frames f[0..n) is
//
//	h = Seed
//	for each frame f:  t = f * Mul (mod 2^64);  h = rotl(h, 29) ^ t ^ t>>29
//
// finished by the depot with the frame count. Each step is a multiply, a
// shift and an xor beside the hash's own chain (a rotate and an xor), so
// an unwinder whose chain of loads takes longer hides it. It is not a
// cryptographic hash; what colliding traces cost is bounded (see
// [Depot.SaveHashed]).
type HashKey struct {
	// Seed starts the hash.
	Seed uint64
	// Mul is the odd multiplier of every frame.
	Mul uint64
}

// Start returns the hash of no frames.
func (k HashKey) Start() Hash { return Hash(k.Seed) }

// Add returns h extended by the next frame pc (outward).
func (k HashKey) Add(h Hash, pc uint64) Hash {
	return Hash(tracehash.Step(uint64(h), pc, k.Seed, k.Mul))
}

// Sum returns the hash of trace: Add over every frame from Start, four
// frames a step.
func (k HashKey) Sum(trace []uint64) Hash {
	return Hash(tracehash.Sum(trace, k.Seed, k.Mul))
}

// HashKey returns d's hash key (setting up a zero Depot).
func (d *Depot) HashKey() HashKey {
	d.ready()
	return d.hkey
}

// newHashKey draws a depot's key.
func newHashKey() HashKey { return HashKey{Seed: rand.Uint64(), Mul: rand.Uint64() | 1} }

// ErrHash reports a Hash passed to [Depot.SaveHashed] that is not the
// trace's hash under the depot's [HashKey].
var ErrHash = errors.New("depot: hash does not match the trace")

// maxSameKey is the most records stored under one primary key word (the
// same 64-bit hash, bar its low 9 bits, and the same length): a trace
// whose primary key already names maxSameKey other records is stored
// under its secondary hash instead. So a lookup compares at most
// maxSameKey records whose key equals its own before it turns to the
// secondary hash, whatever traces were built to collide.
const maxSameKey = 4

// secondaryHash is the hash of a trace whose primary key is crowded: the
// runtime's memhash of its bytes (what a map[string] uses), under a seed
// of its own per depot. It needs a second pass over the trace, and only
// colliding traces ever need it.
func (d *Depot) secondaryHash(w []uint64) uint64 { return maphash.Comparable(d.seed, bytesOf(w)) }

// SaveHashed is Save for a trace whose hash the caller computed with d's
// [HashKey] while it made the trace (h = Start, then Add of every frame,
// innermost first), so that d does not read the trace to hash it: a hit
// probes the table, compares the one candidate's frames and returns its
// handle without copying. A miss checks h against the trace (a second
// pass, only when the trace is new) and returns an error wrapping
// [ErrHash] if it does not match, storing nothing. If the depot's Filter
// or MaxFrames shortens the trace, d hashes the shortened trace itself
// (a producer that cuts as it hashes passes [FlagFiltered] instead).
//
// Colliding traces: a lookup passes over entries of other traces by the 5
// hash bits each table entry keeps and compares at most 4 records whose
// 64-bit key equals its own; traces beyond the 4th with the same key are
// stored under a second, independent hash (the runtime's memhash under a
// seed of its own), which a lookup computes only after meeting 4 such
// records. So a set of traces built to collide in the producer's hash costs
// each lookup at most 4 extra record compares and one hash of its bytes,
// not a probe through the whole set.
func (d *Depot) SaveHashed(trace []uint64, h Hash) (Handle, error) {
	return d.saveHashed(trace, h, 0)
}

// SavePCsHashed is SaveHashed for program counters (as SavePCs).
func (d *Depot) SavePCsHashed(pcs []uintptr, h Hash) (Handle, error) {
	if unsafe.Sizeof(uintptr(0)) == 8 {
		return d.saveHashed(words8(pcs), h, 0)
	}
	return d.savePCs(pcs, 0) // 4-byte uintptr: widened and hashed here
}

// SaveHashedFlags is SaveHashed with flags ([FlagGet], [FlagNoAlloc],
// [FlagFiltered]: with it, a depot with a Filter reads the trace only to
// compare it on a hit).
func (d *Depot) SaveHashedFlags(trace []uint64, h Hash, flags Flags) (Handle, error) {
	return d.saveHashed(trace, h, flags)
}

func (d *Depot) saveHashed(trace []uint64, h Hash, flags Flags) (Handle, error) {
	t := d.tab.Load()
	if t == nil || flags&^flagsKnown != 0 || d.filter != nil && flags&FlagFiltered == 0 || uint(len(trace)-1) >= uint(d.maxFrames) {
		n := len(trace)
		var err error
		if t, trace, err = d.prepare(trace, flags); err != nil {
			return 0, err
		}
		if len(trace) != n {
			h = d.hkey.Sum(trace)
		}
	}
	hash := tracehash.Finish(uint64(h), len(trace))
	if hd, ok := d.hitLockFree(t, trace, hash, flags); ok {
		return hd, nil
	}
	if d.hkey.Sum(trace) != h {
		return 0, fmt.Errorf("%w (%d frames)", ErrHash, len(trace))
	}
	if err := d.checkFiltered(trace, flags); err != nil {
		return 0, err
	}
	return saveSlow(d, trace, hash, flags)
}

// LookupHashed returns the handle of trace, found with the producer's hash
// h as SaveHashed finds it (one probe, one compare), if d holds it as a
// persistent record, and stores nothing. It does not take the lock, so it
// reports false for a trace it cannot find that way (while the table is
// being rebuilt, or a trace the depot's Filter or MaxFrames would
// shorten); SaveHashed never stores a trace twice. A producer that must
// check a new trace before storing it (package unwind/live/stackid) calls
// LookupHashed first and SaveHashed only on a miss.
func (d *Depot) LookupHashed(trace []uint64, h Hash) (Handle, bool) {
	t := d.tab.Load()
	if t == nil || d.filter != nil || uint(len(trace)-1) >= uint(d.maxFrames) {
		return 0, false
	}
	return d.hitLockFree(t, trace, tracehash.Finish(uint64(h), len(trace)), 0)
}
