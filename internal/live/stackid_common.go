package live

import (
	"math/bits"
	"sync"
	"sync/atomic"

	"github.com/unwindkit/unwindkit/internal/depotview"
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

	// layout, hints and rolls are the depot's layout, the guesses of
	// Hit (nil: no guesses) and the counters of their chances,
	// set by UseDepot.
	layout depotview.Layout
	hints  *[hintSlots]atomic.Uint64
	rolls  *depotview.Rolls
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

// Hints: a Table guesses the record of a stack from its first hintFrames
// frames (their key, hintKey, picks a slot of its hint table) before it walks the
// rest, and compares each further return address with the guess's frame
// as it reads it. A right guess needs neither the hash of those frames nor
// the depot's lookup, and its compare loads do not depend on the walk's,
// so they run in the walk's shadow. A wrong or missing guess goes on as
// WalkHash would have (Resume), and the depot's lookup finds the record.
//
// A hint slot is one word, written and read atomically: the handle of a
// persistent record (never evicted: its frames never change), its frame
// count, a confidence, and a tag of the key, so a slot is either a whole
// hint or none.
//
// A wrong guess costs the compare loop's mispredicted exit and a second
// pass over the frames it compared (they were not hashed), and every
// write to a slot is a locked instruction. Stacks that share a slot (the
// same first frames, different callers further out) and are saved in
// turn would pay both on every save. So a slot guesses only when it is
// sure, and is slow to trust. Its confidence (0 to 3) moves on one save in
// hintOdds of those that found a stack in the depot (roll chooses): down
// by two if the stack is not the hint's, up by one if it is (one time in
// hintOdds again), and at 0 the other stack's hint replaces it (one time
// in hintReplaceOdds again). A hit by the guess raises it one time in
// hintOdds. A slot guesses from 2. So a stack saved again and again takes
// an empty slot at once and guesses after about hintOdds^2 saves, and a
// hit at 3 writes nothing; stacks saved in turn keep the slot below 2 (an
// increase waits 16 saves, a decrease 4), so they seldom guess (two
// stacks in turn: 3.6 guesses in 100 saves, 2.1 of them wrong) and write
// the slot about one save in 14; a stack new to a sure slot pays about
// hintOdds wrong guesses.
const (
	hintFrames      = 4
	hintBits        = 12
	hintSlots       = 1 << hintBits
	hintConfShift   = 41
	hintConfMask    = 3 << hintConfShift
	hintGuessConf   = 2 << hintConfShift
	hintTagShift    = 43
	hintTagBits     = 64 - hintTagShift
	hintOdds        = 4
	hintReplaceOdds = 16
)

// UseDepot makes ids guess records through l, the layout of its depot,
// whose records must all be persistent. It allocates the hint table
// (hintSlots words, 32 KiB) and the roll counters (1 KiB).
func (ids *IDs) UseDepot(l depotview.Layout) {
	ids.layout = l
	ids.hints = new([hintSlots]atomic.Uint64)
	ids.rolls = new(depotview.Rolls)
}

// hintKey is the key of a record's first hintFrames frames f0 to f3 in
// the hint table: not the depot's hash of them (four multiplies and their
// folds, 28 instructions on amd64), but the frames rotated apart and
// xored, mixed by hintSlot's one multiply. Keys that collide (the frames
// of two stacks cancel out) cost only a slot shared, as stacks with the
// same first frames share one.
func hintKey(f0, f1, f2, f3 uint64) uint64 {
	return f0 ^ bits.RotateLeft64(f1, 16) ^ bits.RotateLeft64(f2, 32) ^ bits.RotateLeft64(f3, 48)
}

// hintSlot returns the slot and tag of the key h (hintKey) of a record's
// first hintFrames frames.
func hintSlot(h uint64) (slot uint64, tag uint64) {
	k := h * 0x9e3779b97f4a7c15
	return k >> (64 - hintBits), k >> 29 & (1<<hintTagBits - 1)
}

// nextHint is the slot old after a save that found the record of hint e
// (confidence 0) without old's guess (see hintFrames).
func nextHint(old, e uint64) uint64 {
	const one = 1 << hintConfShift
	conf := old & hintConfMask
	switch {
	case old&^hintConfMask == e:
		return old + min(hintConfMask-conf, one)
	case conf != 0:
		return old - min(conf, 2*one)
	}
	return e | one
}

// roll returns a number for the chances of hintFrames
// (depotview.Rolls.Roll).
func (ids *IDs) roll() uint64 { return ids.rolls.Roll() }
