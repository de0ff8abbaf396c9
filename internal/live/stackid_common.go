package live

import (
	"sync"
	"sync/atomic"

	"github.com/unwindkit/unwindkit/internal/tracehash"
)

// Record word 0, the first frame's return address r (below 1<<48, as the
// cache requires) with tags above it:
//
//	bits  0-47  r
//	bits 48-62  physical: the logical frames to drop from r's expansion
//	bit  63     logical: the record is Callers' answer, its pcs verbatim
//	            (bits 48-62 then 0, or tagWide if the first pc did not
//	            fit and the pcs follow from word 1)
const (
	tagLogical = 1 << 63
	tagWide    = 1 << 62
	tagCutMask = 1<<15 - 1
)

// IDs is the state of one stack-ID table: its depot's calls and hash key,
// and the verdicts its records need.
type IDs struct {
	// Lookup finds a stored record by its hash (the depot's running
	// hash, before its finish), without storing anything.
	Lookup func(rec []uint64, h uint64) (uint32, bool)
	// Store stores a record with its hash and returns its handle.
	Store func(rec []uint64, h uint64) (uint32, error)
	// Seed and Mul are the depot's hash key; MaxFrames its MaxFrames.
	Seed, Mul uint64
	MaxFrames int

	// walkInRace makes race builds take the walk as other builds do (the
	// tests, with callersCached); by default they store logical records.
	walkInRace bool

	mu   sync.RWMutex
	pins map[uintptr][]uintptr // verdicts that are not kindSelf: nil for hidden
}

// verdict is what one physical frame records: itself (self), nothing
// (hidden: pcs nil), or pcs.
type verdict struct {
	self bool
	pcs  []uintptr
}

// Counters of the stack IDs' slow paths, for the tests.
var (
	idResolves atomic.Uint64 // ResolveID calls
	idLogical  atomic.Uint64 // logical records stored (or looked up)
)

// maxIDFrames bounds IDs.MaxFrames (depot.MaxFramesLimit).
const maxIDFrames = 256

// storeLogical stores Callers' answer pcs (at most MaxFrames of them) as a
// logical record.
func (ids *IDs) storeLogical(buf *[maxIDFrames]uint64, pcs []uintptr) (uint32, error) {
	if len(pcs) == 0 {
		return ids.Store(nil, ids.Seed) // the depot's error for an empty trace
	}
	idLogical.Add(1)
	rec := buf[:0]
	if uint64(pcs[0]) >= addrMask {
		rec = append(rec, tagLogical|tagWide)
	}
	for _, pc := range pcs {
		if len(rec) == ids.MaxFrames {
			break
		}
		rec = append(rec, uint64(pc))
	}
	if rec[0]&tagWide == 0 {
		rec[0] |= tagLogical
	}
	return ids.Store(rec, tracehash.Sum(rec, ids.Seed, ids.Mul))
}

// pin keeps the verdicts of the frames phys that do not record just
// themselves, for the fetches of records that hold them.
func (ids *IDs) pin(phys []uintptr, vs []verdict) {
	need := false
	ids.mu.RLock()
	for i, v := range vs {
		if _, ok := ids.pins[phys[i]]; !v.self && !ok {
			need = true
			break
		}
	}
	ids.mu.RUnlock()
	if !need {
		return
	}
	ids.mu.Lock()
	defer ids.mu.Unlock()
	if ids.pins == nil {
		ids.pins = make(map[uintptr][]uintptr)
	}
	for i, v := range vs {
		if !v.self {
			ids.pins[phys[i]] = v.pcs
		}
	}
}

// Pinned returns the number of verdicts ids keeps.
func (ids *IDs) Pinned() int {
	ids.mu.RLock()
	defer ids.mu.RUnlock()
	return len(ids.pins)
}

func equalPCs(a, b []uintptr) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// Expand stores in pc the logical pcs of the record rec (a record of ids,
// fetched from its depot), as Callers would have stored them, and returns
// how many: all of them if pc has room, else the first len(pc).
func (ids *IDs) Expand(rec []uint64, pc []uintptr) int {
	if len(rec) == 0 || len(pc) == 0 {
		return 0
	}
	w0 := rec[0]
	if w0&tagLogical != 0 {
		if w0&tagWide != 0 {
			rec = rec[1:]
		}
		n := 0
		for i, w := range rec {
			if n == len(pc) {
				break
			}
			if i == 0 && w0&tagWide == 0 {
				w &= addrMask
			}
			pc[n] = uintptr(w)
			n++
		}
		return n
	}
	cut := int(w0 >> addrBits & tagCutMask)
	n := 0
	locked := false
	for i, w := range rec {
		r := uintptr(w)
		if i == 0 {
			r = uintptr(w0 & addrMask)
		}
		if homeTab[homeHash(r)].Load() != r {
			if !locked {
				ids.mu.RLock()
				locked = true
			}
			if pcs, ok := ids.pins[r]; ok {
				if i == 0 {
					pcs = pcs[min(cut, len(pcs)):]
				}
				n += copy(pc[n:], pcs)
				if n == len(pc) {
					break
				}
				continue
			}
		}
		pc[n] = r
		n++
		if n == len(pc) {
			break
		}
	}
	if locked {
		ids.mu.RUnlock()
	}
	return n
}
