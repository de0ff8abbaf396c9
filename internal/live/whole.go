package live

import (
	"sync/atomic"
	"unsafe"
)

// The whole-stack cache answers Callers for a whole stack it has answered
// before: a walk that compares the chain's return addresses with the
// cached chain's, and a copy of the cached answer. Without it, a stack
// whose frames have inlined calls goes through walkExpand, a home-slot
// probe and often an expansion copied per frame (65 ns for zap's 34
// frames, against 25 for the one-pass stack ID's walk and compare).
//
// What runtime.Callers stores for a stack is a function of the chain of
// physical return addresses (each address's logical frames are fixed by
// the binary) and the skip, and the answer for a shorter buffer is a
// prefix of the whole one. So an entry holds a chain that ended at the
// goroutine's entry frame (saved frame pointer 0) and the answer Callers
// computed for it, whole (fewer pcs than the buffer had), with that skip;
// a later call whose chain is the same, to its end, with the same skip,
// copies the answer as far as its buffer takes. An answer that filled the
// buffer, a chain that ended anywhere else (a broken record, the cgo
// boundary) and an answer from runtime.Callers are never cached.
//
// Entries are immutable once published, read through atomic pointers: a
// reader sees a whole entry or none. The table is direct-mapped by the
// first hintFrames return addresses and the skip (hintKey, as the
// one-pass stack ID keys its guesses): stacks that share their first
// frames (a recursion at different depths, say) share a slot, and the
// compare to the chain's end tells them apart. A slot takes the first
// stack that arrives; another replaces it only after wholeReplace misses
// of the slot's entry, so two stacks that share a slot take turns at it,
// and the insert's walk and allocation are spread over that many calls
// (one insert in 64 misses, about 3 ns a miss).
//
// Memory: 8 KiB of slots and 2 KiB of miss counts; an entry is
// 8 bytes per physical frame plus 8 per logical pc, at most wholeMaxPhys
// and wholeMaxPCs of them: under 1.6 MiB in all.
const (
	wholeBits    = 9
	wholeMaxPhys = 128
	wholeMaxPCs  = 256
	wholeReplace = 256
)

// wholeEntry is one cached whole stack.
type wholeEntry struct {
	// phys is the chain's return addresses, from the one into the frame
	// that called Callers to the entry frame's; the first with the skip
	// in the bits above the address, as the one-pass stack ID stores its
	// cut.
	phys []uintptr
	pcs  []uintptr // Callers' answer with that skip, whole
}

// wholeSlotT is a slot: its entry and the key of the entry's first
// frames (hintKey), so that a miss is told by one load from the slot's
// cache line, not two dependent ones through the entry (7 ns a call over
// 4,096 stacks: BenchmarkWorkingSet/fits). The key only filters: a hit
// compares the entry's frames themselves.
type wholeSlotT struct {
	key atomic.Uint64
	e   atomic.Pointer[wholeEntry]
}

var (
	wholeTab [1 << wholeBits]wholeSlotT
	// wholeMiss counts the misses of each slot's entry since it was
	// stored, without atomics, in functions the race detector does not
	// see (as depotview.Rolls counts): an atomic add is a locked
	// instruction on every miss, and two goroutines that lose a count
	// only delay a replacement.
	wholeMiss [1 << wholeBits]uint32
	// wholeOff turns inserts off, for the tests of the paths the cache
	// would answer for (withCache).
	wholeOff atomic.Bool
)

// wholeKey returns the key of a stack by its first frames (w0 with the
// skip) and its slot.
func wholeKey(w0, r1, r2, r3 uint64) (key uint64, slot int) {
	key = hintKey(w0, r1, r2, r3) * 0x9e3779b97f4a7c15
	return key, int(key >> (64 - wholeBits))
}

// rememberWhole stores in slot the whole stack from start (Callers' own
// frame record) with Callers' whole answer pcs for the skip, if the
// chain ends at the entry frame within wholeMaxPhys records (the walk
// again, after the answer: the frames above Callers' have not changed).
//
//go:noinline
//go:norace
func rememberWhole(start unsafe.Pointer, skip int, pcs []uintptr, slot int) {
	if len(pcs) > wholeMaxPCs || wholeOff.Load() {
		return
	}
	var buf [wholeMaxPhys + 1]uintptr
	n, why, _ := rawWalk(start, start, buf[:], stopPC.Load())
	if why != rawEnd || n <= hintFrames || n > wholeMaxPhys || buf[0] >= addrMask {
		return
	}
	words := make([]uintptr, n+len(pcs))
	copy(words, buf[:n])
	words[0] |= uintptr(skip) << addrBits
	copy(words[n:], pcs)
	key, s := wholeKey(uint64(words[0]), uint64(words[1]), uint64(words[2]), uint64(words[3]))
	if s != slot {
		return // not the stack wholeHit looked up
	}
	wholeTab[slot].key.Store(key)
	wholeTab[slot].e.Store(&wholeEntry{phys: words[:n:n], pcs: words[n:]})
	wholeMiss[slot] = 0
}

// cutTab marks the call sites of Callers whose last answer through a
// frame with inlined calls filled its buffer: their stacks are deeper than
// the buffer, so the whole-stack cache cannot answer them and is not
// looked up (its key's four dependent loads cost such a call 5 ns, a
// fifth of it, at 8 pcs of a 34-frame stack). A word is the return
// address of the call to Callers (the chain's first) with the buffer's
// length above it (cutWord); direct-mapped by firstHash, the last site to
// arrive keeps a slot. A site whose answer is whole again is unmarked,
// so that its next call looks its stack up. Memory: 8 KiB.
var cutTab [1 << firstBits]atomic.Uintptr

// cutWord is cutTab's word for the first return address r0 and a buffer
// of n pcs.
func cutWord(r0 uintptr, n int) uintptr { return r0 | uintptr(min(n, 1<<16-1))<<addrBits }

// noteCut records in cutTab whether the answer for the first return
// address r0 filled its buffer of n pcs (cut), writing only a change.
func noteCut(r0 uintptr, n int, cut bool) {
	c, w := &cutTab[firstHash(r0)], cutWord(r0, n)
	switch old := c.Load(); {
	case cut && old != w:
		c.Store(w)
	case !cut && old == w:
		c.Store(0)
	}
}

// resetWhole empties the whole-stack cache (resetCache).
//
//go:norace
func resetWhole() {
	for i := range wholeTab {
		wholeTab[i].e.Store(nil)
		wholeTab[i].key.Store(0)
		wholeMiss[i] = 0
	}
	for i := range cutTab {
		cutTab[i].Store(0)
	}
}
