package live

import (
	"sync"
	"sync/atomic"
)

// The expansion cache maps a physical return address to what
// runtime.Callers records for its frame. It is shared by all goroutines and
// lock-free for readers.
//
// Layout: 1<<cacheBits buckets of bucketSlots words, 64 bytes each (one
// cache line where the linker aligns homeTab so; a bucket straddling two
// lines costs only the slow path, which scans it). A word is one cached
// return address with its verdict packed into the bits above the address:
//
//	bits 0-47   the return address (addresses at or above 1<<48 are never
//	            cached; Callers answers such stacks with runtime.Callers)
//	bits 48-61  for kindMany, the index of the expansion in manyTab
//	bits 62-63  the kind; kindSelf is 0, so a frame that records itself is
//	            the word equal to its return address, one compare
//
// An address hashes to a home slot (bucket and slot); a lookup compares the
// home slot first, then the rest of the home bucket, then the rest of an
// alternative bucket, then the overflow map. An insert takes the first free
// slot of the home bucket or of the alternative bucket; with both full it
// moves one of their addresses to that address's other bucket if it has
// room (one cuckoo step), or one of the addresses there on to its own other
// bucket to make that room (two steps), else evicts a slot that the current
// learning pass has not confirmed, and only when all 16 slots hold addresses of the
// current pass it goes to the overflow map (bounded). So a stack is learned
// once, whatever its addresses hash to, and 20,000 hot addresses fit
// without an eviction (TestWorkingSetFits; with one step only, some code
// layouts, such as the test's built with -gcflags=all=-N -l, evicted a
// few). Capacity: 32,768 addresses, of
// which up to manyCap with inlined calls (their expansions live in manyTab,
// reused round-robin beyond that).
//
// Memory: 256 KiB of buckets and 16 KiB of their insertion times, 8 KiB of
// firstTab, 128 KiB of pointers in manyTab plus at most manyCap expansions (a few words
// each), and at most overflowCap map entries: under 2 MiB in all.
const (
	cacheBits   = 12 // buckets
	bucketSlots = 8  // words per bucket: one 64-byte cache line
	wordBits    = 32 << (^uintptr(0) >> 63)
	addrBits    = wordBits - 16 // 48 on 64-bit systems
	addrMask    = 1<<addrBits - 1
	kindShift   = wordBits - 2
	indexMask   = 1<<(kindShift-addrBits) - 1
	manyCap     = indexMask + 1
	overflowCap = 1024
	empty       = ^uintptr(0) // an empty slot; its address part (addrMask) is never cached
)

// kind says what runtime.Callers records for one physical frame.
type kind uint8

const (
	kindSelf   kind = iota // the return address itself: no inlined calls
	kindMany               // manyTab: the frame and the calls inlined into it
	kindHidden             // nothing: a compiler wrapper the runtime elides
	kindSlow               // unusual (sigpanic, a cgo boundary, no symbols): ask runtime.Callers
)

// manyEntry is the expansion of a kindMany return address; immutable once
// published.
type manyEntry struct {
	ret uintptr
	pcs []uintptr // logical pcs, innermost first: pair[:2] if there are two
	// pair holds an expansion of two pcs (one call inlined, the most
	// common), so that walkExpand reads them from the entry itself
	// rather than through pcs.
	pair [2]uintptr
}

// newManyEntry returns the entry of ret's expansion pcs (copied).
func newManyEntry(ret uintptr, pcs []uintptr) *manyEntry {
	e := &manyEntry{ret: ret}
	if len(pcs) == len(e.pair) {
		copy(e.pair[:], pcs)
		e.pcs = e.pair[:]
	} else {
		e.pcs = append([]uintptr(nil), pcs...)
	}
	return e
}

// cacheTab is the cache; a test replaces it (withCache) to shrink it or to
// make every address collide.
type cacheTab struct {
	slots  []atomic.Uintptr // 1<<bits buckets of bucketSlots words
	mask   uintptr          // len(slots)-1
	stamps []atomic.Uint32  // per bucket: learnClock at its last insert
}

// homeTab is the production table's storage. The fast paths compare an
// address with its home slot here directly (homeHash is provably in range,
// so the compare needs no bounds check); when a test swaps in a smaller
// table, homeTab is empty and every probe goes to lookup.
var (
	homeTab    [1 << (cacheBits + 3)]atomic.Uintptr
	homeStamps [1 << cacheBits]atomic.Uint32
)

var (
	cache    = tableOf(homeTab[:], homeStamps[:])
	manyTab  [manyCap]atomic.Pointer[manyEntry]
	manyNext atomic.Uint32

	overflowMu sync.Mutex
	overflow   atomic.Pointer[map[uintptr]uintptr] // copy-on-write
)

// tableOf makes an empty table of the slots (a power of two, at most
// len(homeTab)) with a stamp per bucket.
func tableOf(slots []atomic.Uintptr, stamps []atomic.Uint32) *cacheTab {
	c := &cacheTab{slots: slots, mask: uintptr(len(slots) - 1), stamps: stamps}
	for i := range c.slots {
		c.slots[i].Store(empty)
	}
	return c
}

// The multiplicative hashes of the home slot and the alternative bucket:
// the top bits of the product, masked for a smaller table. Code addresses
// are regular (call sites a power-of-two stride apart, up to 64 bytes), and
// the product's top bits step by stride*mul/2^64 per call site: with the
// usual 2^64/phi multiplier a power-of-two stride shifts its golden bits
// out, and a fifth of 20,000 generated call sites overflowed their buckets
// (TestWorkingSetFits). These multipliers are phi*2^58 and phi*2^57, so
// that strides up to 64 bytes still step by a multiple of phi: no bucket
// overflows.
const (
	hashMul   = 0x278dde6e5fd29f1
	altMul    = 0x13c6ef372fe94f9
	hashShift = 64 - cacheBits - 3
)

// firstTab answers the first frame of the public live.Callers(1, pc) in
// its common case with one load: that wrapper is inlined into its caller,
// so the first physical frame, the return address r of the wrapper's call
// to Callers, records [r, the caller's inline mark + 1], and skip 1 keeps
// the second. A word is r | uint16(that pc - r)<<addrBits (a pc in the same
// function, a few bytes before r), stored by expandFirst when it answers
// such a frame and the difference fits; 0 is empty. An address that is the
// return address of a direct call to Callers records the same pcs wherever
// it is on a stack (the callee, whose kind decides whether the runtime
// elides an inlined wrapper, is fixed), so an entry never goes stale; slots
// are direct-mapped (one per hash, the first address to arrive keeps it)
// and emptied with the cache (resetCache). Memory: 8 KiB.
const firstBits = 10

var firstTab [1 << firstBits]atomic.Uintptr

// firstHash returns ret's slot index in firstTab.
func firstHash(ret uintptr) uint64 { return (uint64(ret) * hashMul) >> (64 - firstBits) }

// homeHash returns ret's home slot index in homeTab.
func homeHash(ret uintptr) uint64 { return (uint64(ret) * hashMul) >> hashShift }

// home returns ret's home slot index.
func (c *cacheTab) home(ret uintptr) uint { return uint(uintptr(homeHash(ret)) & c.mask) }

// alt returns the first slot of ret's alternative bucket.
func (c *cacheTab) alt(ret uintptr) uint {
	return uint(uintptr((uint64(ret)*altMul)>>hashShift)&c.mask) &^ (bucketSlots - 1)
}

// word packs a verdict for ret.
func word(ret uintptr, k kind, index uint32) uintptr {
	return ret | uintptr(index&indexMask)<<addrBits | uintptr(k)<<kindShift
}

func wordKind(w uintptr) kind    { return kind(w >> kindShift) }
func wordIndex(w uintptr) uint32 { return uint32(w>>addrBits) & indexMask }

// onLearn, if set (by tests, before any concurrent use), sees every
// address insert publishes.
var onLearn func(ret uintptr)

// cacheable reports whether ret can be cached.
func cacheable(ret uintptr) bool { return ret != 0 && ret < addrMask }

// find returns the cached word for ret (ret != 0) and whether there is one.
// The fast paths compare the home slot inline and call find only when that
// fails.
func find(ret uintptr) (uintptr, bool) {
	c := cache
	h := c.home(ret)
	b := h &^ (bucketSlots - 1)
	for i := uint(0); i < bucketSlots; i++ {
		if w := c.slots[b+i].Load(); w&addrMask == ret {
			return w, true
		}
	}
	a := c.alt(ret)
	if a != b {
		for i := uint(0); i < bucketSlots; i++ {
			if w := c.slots[a+i].Load(); w&addrMask == ret {
				return w, true
			}
		}
	}
	if m := overflow.Load(); m != nil {
		w, ok := (*m)[ret]
		return w, ok
	}
	return 0, false
}

// expansionOf returns the logical pcs of a kindMany word for ret, or nil if
// its manyTab entry was reused since (then the word is a miss).
func expansionOf(ret, w uintptr) []uintptr {
	if e := manyTab[wordIndex(w)].Load(); e != nil && e.ret == ret {
		return e.pcs
	}
	return nil
}

// lookup returns ret's kind and, for kindMany, its logical pcs; ok is false
// on a miss.
func lookup(ret uintptr) (k kind, pcs []uintptr, ok bool) {
	w, ok := find(ret)
	if !ok {
		return 0, nil, false
	}
	k = wordKind(w)
	if k == kindMany {
		if pcs = expansionOf(ret, w); pcs == nil {
			return 0, nil, false
		}
	}
	return k, pcs, true
}

// insert publishes what runtime.Callers records for ret (shown, or kindSlow
// if slow). pass reports whether an address was confirmed by the current
// learning pass: such a slot is never evicted for another of the pass.
//
// It reports whether it evicted an address from a bucket that had had an
// insert less than recentMS before: a sign that the working set does not
// fit (see noteLearned).
func insert(ret uintptr, shown []uintptr, slow bool, pass func(uintptr) bool) (recent bool) {
	if !cacheable(ret) {
		return false
	}
	var w uintptr
	switch {
	case slow, ret == stopPC.Load():
		// The known boundary is never a home-slot hit: walkProbe
		// compares it with stop only on a miss.
		w = word(ret, kindSlow, 0)
	case len(shown) == 0:
		w = word(ret, kindHidden, 0)
	case len(shown) == 1 && shown[0] == ret:
		w = word(ret, kindSelf, 0)
	default:
		i := (manyNext.Add(1) - 1) % manyCap
		manyTab[i].Store(newManyEntry(ret, shown))
		w = word(ret, kindMany, i)
	}
	learnedAddrs.Add(1)
	if onLearn != nil {
		onLearn(ret)
	}
	now := learnClock.Load()
	c := cache
	h := c.home(ret)
	b := h &^ (bucketSlots - 1)
	a := c.alt(ret)
	// Home slot first (the fast paths compare only it), then the rest of
	// both buckets: an empty slot or one holding ret.
	order := func(yield func(uint) bool) {
		if !yield(h) {
			return
		}
		for i := uint(1); i < bucketSlots; i++ {
			if !yield(b + (h+i)%bucketSlots) {
				return
			}
		}
		if a != b {
			for i := uint(0); i < bucketSlots; i++ {
				if !yield(a + i) {
					return
				}
			}
		}
	}
	for i := range order {
		if old := c.slots[i].Load(); old == empty || old&addrMask == ret {
			if c.slots[i].CompareAndSwap(old, w) {
				c.stamps[i/bucketSlots].Store(now)
				return false
			}
		}
	}
	// Both buckets full: move one of their addresses to its other bucket
	// if that has room (one cuckoo step; it is published there before it
	// is replaced here, so readers never miss it), and take its slot.
	for i := range order {
		if i == h {
			continue // keep the home slot's address: it is compared first
		}
		old := c.slots[i].Load()
		r := old & addrMask
		if old == empty || r == ret {
			continue
		}
		other := c.alt(r)
		if other == i&^(bucketSlots-1) {
			other = c.home(r) &^ (bucketSlots - 1)
		}
		for k := other; k < other+bucketSlots; k++ {
			if c.slots[k].Load() == empty && c.slots[k].CompareAndSwap(empty, old) {
				c.stamps[k/bucketSlots].Store(now)
				if !c.slots[i].CompareAndSwap(old, w) {
					break // raced: fall through to eviction
				}
				moves.Add(1)
				return false
			}
		}
	}
	// No room one step away: two steps (an address of the other bucket
	// moves on to its own other bucket, making room there; each address is
	// published at its new place before it is replaced at the old one).
	for i := range order {
		if i == h {
			continue
		}
		old := c.slots[i].Load()
		r := old & addrMask
		if old == empty || r == ret {
			continue
		}
		b2 := c.otherBucket(r, i)
		for j := b2; j < b2+bucketSlots; j++ {
			old2 := c.slots[j].Load()
			r2 := old2 & addrMask
			if old2 == empty || r2 == ret || r2 == r {
				continue
			}
			b3 := c.otherBucket(r2, j)
			if b3 == i&^(bucketSlots-1) {
				continue // would take the slot being freed
			}
			for k := b3; k < b3+bucketSlots; k++ {
				if c.slots[k].Load() != empty || !c.slots[k].CompareAndSwap(empty, old2) {
					continue
				}
				c.stamps[k/bucketSlots].Store(now)
				if !c.slots[j].CompareAndSwap(old2, old) {
					break
				}
				c.stamps[j/bucketSlots].Store(now)
				if !c.slots[i].CompareAndSwap(old, w) {
					break
				}
				moves.Add(2)
				return false
			}
		}
	}
	// Still full: evict a slot the current pass did not confirm,
	// preferring the alternative bucket (the home bucket keeps the slots
	// the fast paths compare first).
	var victim uint
	found := false
	for i := range order {
		if old := c.slots[i].Load(); !pass(old & addrMask) {
			victim, found = i, true
			if i != h {
				break
			}
		}
	}
	if found {
		c.slots[victim].Store(w)
		evictions.Add(1)
		last := c.stamps[victim/bucketSlots].Swap(now)
		return now-last < recentMS
	}
	insertOverflow(ret, w)
	return false
}

// otherBucket returns the first slot of the bucket other than slot i's
// where the address r may live (its alternative bucket or its home).
func (c *cacheTab) otherBucket(r uintptr, i uint) uint {
	other := c.alt(r)
	if other == i&^(bucketSlots-1) {
		other = c.home(r) &^ (bucketSlots - 1)
	}
	return other
}

// insertOverflow adds ret to the overflow map, if it has room.
func insertOverflow(ret, w uintptr) {
	overflowMu.Lock()
	defer overflowMu.Unlock()
	var m map[uintptr]uintptr
	if p := overflow.Load(); p != nil {
		if len(*p) >= overflowCap {
			overflowFull.Add(1)
			return
		}
		m = make(map[uintptr]uintptr, len(*p)+1)
		for k, v := range *p {
			m[k] = v
		}
	} else {
		m = make(map[uintptr]uintptr, 1)
	}
	m[ret] = w
	overflow.Store(&m)
}

// cacheResets counts resetCache calls, so that a test can tell an emptied
// cache from a relearning bug.
var cacheResets atomic.Uint64

// resetCache empties the cache (tests and benchmarks of the cold path).
func resetCache() {
	cacheResets.Add(1)
	c := cache
	for i := range c.slots {
		c.slots[i].Store(empty)
	}
	for i := range manyTab {
		manyTab[i].Store(nil)
	}
	for i := range c.stamps {
		c.stamps[i].Store(0)
	}
	for i := range firstTab {
		firstTab[i].Store(0)
	}
	resetWhole()
	overflowMu.Lock()
	overflow.Store(nil)
	overflowMu.Unlock()
	bypassLeft.Store(0)
	bypassLen.Store(0)
	windowLearns.Store(0)
	windowRecent.Store(0)
}
