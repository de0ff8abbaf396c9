package depot

import (
	"fmt"
	"slices"
	"sync/atomic"
	"unsafe"

	"github.com/unwindkit/unwindkit/internal/depotview"
	"github.com/unwindkit/unwindkit/internal/errs"
	"github.com/unwindkit/unwindkit/internal/tracehash"
)

// Pool geometry.
const (
	poolWords   = PoolSize / 8
	slotWords   = 2                          // 16-byte allocation unit
	offsetBits  = 12                         // units per pool: 1 << offsetBits
	startsWords = poolWords / slotWords / 64 // record-start bitmap at the head of a pool
	firstWord   = startsWords                // the first record's word
	hdrWords    = 2                          // header words per record
)

var _ = [1]struct{}{}[poolWords-slotWords<<offsetBits] // PoolSize matches the offset field

// A pool is one allocation of record memory. Words [0, startsWords) are the
// record-start bitmap (one bit per 16-byte unit); records follow. Every word
// is accessed atomically, except where equal.go says why not: readers run
// concurrently with writers.
type pool [poolWords]uint64

// Key word (header word 0) of a record: the trace's hash with its low
// sizeBits bits replaced by the number of frames. A lookup compares it
// before the frames; the table is rebuilt from it.
const (
	nextBits = 27 // a record location: up to 15 pool bits and 12 offset bits
	nextMask = 1<<nextBits - 1
	sizeBits = 9
	sizeMask = 1<<sizeBits - 1
)

// Compile-time checks (a negative constant does not convert to uint).
const (
	_ uint = nextBits - log2MaxPools - offsetBits    // a location fits an entry
	_ uint = sizeMask - MaxFramesLimit               // a length fits the key
	_ uint = 64 - sizeBits - maxTableBits            // the home bits are hash bits the key keeps
	_ uint = 32 - log2MaxPools - offsetBits - minGen // at least minGen generation bits
)

var _ = [1]struct{}{}[1<<log2MaxPools-MaxPoolsLimit] // MaxPoolsLimit matches log2MaxPools

const (
	log2MaxPools = 15
	minGen       = 5
)

// keyOf is the key word of a trace of n frames with hash.
func keyOf(hash uint64, n int) uint64 { return hash&^sizeMask | uint64(n) }

func frameCount(key uint64) int { return int(key & sizeMask) }

// State word (header word 1) of a record slot.
//
//	bits  0..21  reference count of a refcounted record (1..MaxRefs)
//	bits 22..61  sequence: +1 each time the slot is evicted; a handle keeps its low G bits
//	bit  62      persistent: never evicted
//	bit  63      live: the slot holds a trace reachable from the table
//
// A fresh slot is 0. Eviction sets the slot to its next sequence with every
// other bit clear; reuse keeps that sequence and sets live.
const (
	stRefBits    = 22
	stRefMask    = 1<<stRefBits - 1
	stSeqShift   = stRefBits
	stSeqBits    = 40
	stSeqMask    = (1<<stSeqBits - 1) << stSeqShift
	stPersistent = 1 << 62
	stLive       = 1 << 63
)

// sameRecord reports whether two state words of one slot name the same
// record: live in both, with no eviction in between (the full sequence).
func sameRecord(a, b uint64) bool {
	return a&stLive != 0 && (a^b)&(stLive|stSeqMask) == 0
}

// recordWords is the pool words taken by a record of n frames.
func recordWords(n int) int {
	return (hdrWords + n + slotWords - 1) &^ (slotWords - 1)
}

// testHookAfterRead, if set by a test, runs after a lock-free reader has
// read a record's frames and before it validates the record's state, so
// that a test can evict and reuse the record inside that window.
var testHookAfterRead func()

func (d *Depot) handle(loc uint32, st uint64) Handle {
	return Handle(loc | uint32(st>>stSeqShift&d.genMask)<<d.locBits)
}

// at returns the pool and word offset of a record location, or a nil pool
// for a location that names no allocated pool.
func (d *Depot) at(loc uint32) (*pool, int) {
	idx := int(loc & d.poolMask)
	if idx >= len(d.pools) {
		return nil, 0
	}
	return d.pools[idx].Load(), int(loc>>d.poolBits&(1<<offsetBits-1)) * slotWords
}

// record returns the record and current state word named by the outside
// handle h, or a nil pool if h names none (handleError says why). It is
// the lock-free check every handle goes through.
func (d *Depot) record(h Handle) (*pool, int, uint64) {
	if h == 0 || d.tab.Load() == nil {
		return nil, 0, 0
	}
	idx := uint32(h) & d.poolMask
	if idx >= uint32(len(d.pools)) {
		return nil, 0, 0
	}
	p := d.pools[idx].Load()
	if p == nil {
		return nil, 0, 0
	}
	unit := uint32(h) >> d.poolBits & (1<<offsetBits - 1)
	off := unit * slotWords
	st := atomic.LoadUint64(&p[off+1])
	if atomic.LoadUint64(&p[unit/64])>>(unit%64)&1 == 0 ||
		st&stLive == 0 || st>>stSeqShift&d.genMask != uint64(h)>>d.locBits {
		return nil, 0, 0
	}
	return p, int(off), st
}

// handleError says why record refused h.
func (d *Depot) handleError(h Handle) error {
	reason := "stale generation"
	if h == 0 {
		reason = "zero handle"
	} else if d.tab.Load() == nil {
		reason = "no such pool"
	} else if p, off := d.at(uint32(h)); p == nil {
		reason = "no such pool"
	} else if unit := off / slotWords; atomic.LoadUint64(&p[unit/64])&(1<<(unit%64)) == 0 {
		reason = "not the start of a record"
	}
	return &HandleError{h, reason}
}

// resolve is record with the error.
func (d *Depot) resolve(h Handle) (*pool, int, uint64, error) {
	p, off, st := d.record(h)
	if p == nil {
		return nil, 0, 0, d.handleError(h)
	}
	return p, off, st, nil
}

func (d *Depot) fetch(h Handle, dst []uint64) ([]uint64, error) {
	p, off, st := d.record(h)
	if p == nil {
		return dst, d.handleError(h)
	}
	// Read after the state: if the state is unchanged afterwards, the
	// length is the record's.
	n := frameCount(atomic.LoadUint64(&p[off]))
	if off+hdrWords+n > poolWords {
		return dst, overrun(h, n, off)
	}
	base := len(dst)
	if cap(dst)-base < n {
		dst = slices.Grow(dst, n)
	}
	dst = dst[:base+n]
	readFrames(dst[base:], p[off+hdrWords:off+hdrWords+n])
	// Sequence check: if a refcounted record was evicted (and perhaps
	// reused) while we copied, the frames may be a mix; report the handle
	// stale instead. A persistent record never changes.
	if st&stPersistent == 0 && !d.unchanged(p, off, st) {
		return dst[:base], &HandleError{h, "stale generation"}
	}
	return dst, nil
}

// unchanged reports whether the record at p/off still is the one whose
// state word was st.
func (d *Depot) unchanged(p *pool, off int, st uint64) bool {
	if testHookAfterRead != nil {
		testHookAfterRead()
	}
	return sameRecord(atomic.LoadUint64(&p[off+1]), st)
}

func overrun(h Handle, n, off int) error {
	return errs.Corruptf(RuleRecordOverrunsPool, uint64(h), "%d frames at word %d", n, off)
}

// checkFiltered checks, for a trace about to be stored with FlagFiltered,
// that d's Filter would not cut it shorter.
func (d *Depot) checkFiltered(trace []uint64, flags Flags) error {
	if flags&FlagFiltered == 0 || d.filter == nil {
		return nil
	}
	if n := len(cut(d.filter, trace)); n != len(trace) {
		return fmt.Errorf("%w: frame %d of %d (%#x) is one it cuts after", ErrNotFiltered, n-1, len(trace), trace[n-1])
	}
	return nil
}

// cut cuts trace after its first frame for which filter is true.
func cut(filter func(pc uint64) bool, trace []uint64) []uint64 {
	for i, pc := range trace {
		if filter(pc) {
			return trace[:i+1]
		}
	}
	return trace
}

// lookup probes at most steps slots of t for trace w. It returns the
// record and the state word read before its key and frames were compared:
// under the lock that is the record's state; a lock-free caller (save) must
// validate it before trusting the match. On a miss, same is the number of
// records it compared whose key word equals w's (same hash and length):
// at maxSameKey the trace may be stored under its secondary hash.
func lookup(d *Depot, t *table, w []uint64, hash uint64, steps int) (loc uint32, p *pool, off int, st uint64, same int) {
	key := keyOf(hash, len(w))
	tag := entryOf(hash, 0)
	slots, mask := t.slots, t.mask
	i := t.home(hash)
	for range min(steps, len(slots)) {
		e := atomic.LoadUint32(&slots[i&mask])
		if e == 0 {
			break
		}
		i++
		if e&^nextMask != tag || e == tombstone {
			continue
		}
		loc := e & nextMask
		if p, off := d.at(loc); p != nil {
			// The state is read first: the key and frames read after it
			// belong to the record it names if the state is validated.
			st := atomic.LoadUint64(&p[off+1])
			if atomic.LoadUint64(&p[off]) == key && st&stLive != 0 {
				if testHookCompare != nil {
					testHookCompare()
				}
				if equalFrames(p[off+hdrWords:], w) {
					return loc, p, off, st, -1
				}
				same++
			}
		}
	}
	return 0, nil, 0, 0, same
}

// testHookCompare, if set by a test, runs before every frame compare of a
// lookup, so that a test can count the records a lookup reads.
var testHookCompare func()

// save filters and truncates trace and saves it: found by its hint
// (hint.go), or else hashed once (HashKey.Sum; SaveHashed takes the
// producer's hash instead) and looked up or stored.
func (d *Depot) save(trace []uint64, flags Flags) (Handle, error) {
	t := d.tab.Load()
	if t == nil || flags&^flagsKnown != 0 || d.filter != nil && flags&FlagFiltered == 0 || uint(len(trace)-1) >= uint(d.maxFrames) {
		var err error
		if t, trace, err = d.prepare(trace, flags); err != nil {
			return 0, err
		}
	}
	k := hintKey(trace, d.hkey.Seed)
	if h, ok := d.hinted(trace, k); ok {
		return h, nil
	}
	hash := tracehash.Finish(tracehash.Sum(trace, d.hkey.Seed, d.hkey.Mul), len(trace))
	h, ok := d.hitLockFree(t, trace, hash, flags)
	if !ok {
		if err := d.checkFiltered(trace, flags); err != nil {
			return 0, err
		}
		var err error
		if h, err = saveSlow(d, trace, hash, flags); err != nil {
			return 0, err
		}
	}
	// Without FlagGet the record is persistent: found so, stored so or
	// pinned by saveSlow.
	if flags&FlagGet == 0 {
		d.learn(k, h, len(trace))
	}
	return h, nil
}

// hitLockFree is the lock-free hit of Save and SaveHashed: the handle of
// the stored trace, found without the lock unless it is not found within
// maxLockFreeSteps probes, or it is a refcounted record that a plain Save
// must pin or whose reference could not be taken; saveSlow then looks
// again under the lock. A persistent record is never evicted, so frames
// compared after seeing it persistent are its own. A refcounted one is
// returned only by the compare-and-swap that takes the reference: it fails
// if the slot was evicted since the state was read, however often it was
// reused (the full 40-bit sequence is compared). A trace whose primary key
// names maxSameKey other records is looked up under its secondary hash.
func (d *Depot) hitLockFree(t *table, trace []uint64, hash uint64, flags Flags) (Handle, bool) {
	loc, p, off, st, same := lookup(d, t, trace, hash, maxLockFreeSteps)
	if same >= maxSameKey {
		hash = d.secondaryHash(trace)
		loc, p, off, st, same = lookup(d, t, trace, hash, maxLockFreeSteps)
	}
	if same >= 0 {
		return 0, false
	}
	if testHookAfterRead != nil {
		testHookAfterRead()
	}
	if st&stPersistent != 0 || flags&FlagGet != 0 && st&stRefMask != stRefMask &&
		atomic.CompareAndSwapUint64(&p[off+1], st, st+1) {
		if d.countHits {
			d.countHit(unsafe.Pointer(&hash))
		}
		return d.handle(loc, st), true
	}
	return 0, false
}

// prepare handles what save's fast path leaves: a depot not set up yet,
// unknown flags, a filter, an empty trace or one longer than MaxFrames. It
// returns the table and the trace to save.
func (d *Depot) prepare(trace []uint64, flags Flags) (*table, []uint64, error) {
	if flags&^flagsKnown != 0 {
		return nil, nil, fmt.Errorf("%w %#x", ErrFlags, uint32(flags&^flagsKnown))
	}
	t := d.table()
	if d.filter != nil && flags&FlagFiltered == 0 {
		trace = cut(d.filter, trace)
	}
	if len(trace) > d.maxFrames {
		trace = trace[:d.maxFrames]
	}
	if len(trace) == 0 {
		return nil, nil, ErrEmpty
	}
	return t, trace, nil
}

// savePCs saves program counters as the trace of the same values.
func (d *Depot) savePCs(pcs []uintptr, flags Flags) (Handle, error) {
	if unsafe.Sizeof(uintptr(0)) == 8 {
		return d.save(words8(pcs), flags)
	}
	// 4-byte uintptr: widen. Filtering after truncating to MaxFrames cuts
	// the same frames as before: a cut beyond MaxFrames is truncated away.
	d.table()
	var buf [MaxFramesLimit]uint64
	n := min(len(pcs), d.maxFrames)
	for i, pc := range pcs[:n] {
		buf[i] = uint64(pc)
	}
	return d.save(buf[:n], flags)
}

// saveSlow looks the trace up again under the lock and inserts it if it is
// still missing.
func saveSlow(d *Depot, w []uint64, hash uint64, flags Flags) (Handle, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	t := d.tab.Load()
	loc, p, off, st, same := lookup(d, t, w, hash, len(t.slots))
	secondary := false
	if same >= maxSameKey || same >= 0 && d.secondaries > 0 {
		// Crowded, or it may have been crowded when the trace was stored
		// (the records that crowded it may have been evicted since).
		h2 := d.secondaryHash(w)
		if l2, p2, off2, st2, s2 := lookup(d, t, w, h2, len(t.slots)); s2 < 0 || same >= maxSameKey {
			loc, p, off, st, same, hash, secondary = l2, p2, off2, st2, s2, h2, true
		}
	}
	if same < 0 {
		// Under the lock the record cannot be evicted, but lock-free Get
		// and Put may change its count (never to zero: the last Put takes
		// the lock).
		sw := &p[off+1]
		for st&stPersistent == 0 {
			if flags&FlagGet != 0 && st&stRefMask < stRefMask {
				if atomic.CompareAndSwapUint64(sw, st, st+1) {
					break
				}
			} else if d.pinLocked(sw, st) {
				break
			}
			st = atomic.LoadUint64(sw)
		}
		d.countHit(unsafe.Pointer(&hash))
		return d.handle(loc, st), nil
	}

	n := len(w)
	evictable := flags&FlagGet != 0
	var err error
	loc, p, off, err = d.allocLocked(recordWords(n), evictable, flags&FlagNoAlloc != 0)
	if err != nil {
		d.nospace++
		return 0, err
	}
	if secondary {
		d.secondaries++
	}
	sw := &p[off+1]
	seq := atomic.LoadUint64(sw) & stSeqMask // a reused slot's sequence, 0 if fresh
	writeFrames(p[off+hdrWords:off+hdrWords+n], w)
	atomic.StoreUint64(&p[off], keyOf(hash, n))
	st = stLive | seq
	if evictable {
		st |= 1
		d.refcounted++
	} else {
		st |= stPersistent
		d.persistent++
	}
	atomic.StoreUint64(sw, st)
	unit := off / slotWords
	atomic.OrUint64(&p[unit/64], 1<<(unit%64))
	// Publish: from here lock-free readers can reach the record.
	d.insertLocked(t, hash, loc)
	d.misses++
	return d.handle(loc, st), nil
}

// pinLocked makes the refcounted record whose state word sw held st
// persistent. It reports false if the state changed meanwhile.
func (d *Depot) pinLocked(sw *uint64, st uint64) bool {
	if !atomic.CompareAndSwapUint64(sw, st, st&^stRefMask|stPersistent) {
		return false
	}
	d.refcounted--
	d.persistent++
	d.pinned++
	return true
}

// allocLocked finds room for a record of words words, or of MaxFrames
// frames if it is evictable. An evictable record takes a freed record
// first (oldest first), then fresh space; a persistent one takes fresh
// space first (packed at its own size) and a freed record only when no new
// pool can be had.
func (d *Depot) allocLocked(words int, evictable, noAlloc bool) (uint32, *pool, int, error) {
	if evictable {
		words = d.maxWords
		if loc, ok := d.popFreeLocked(); ok {
			p, off := d.at(loc)
			return loc, p, off, nil
		}
	}
	if d.npools == 0 || d.curOff+words > poolWords {
		if noAlloc || d.npools == len(d.pools) {
			if loc, ok := d.popFreeLocked(); ok {
				p, off := d.at(loc)
				return loc, p, off, nil
			}
			if noAlloc {
				return 0, nil, 0, fmt.Errorf("%w: no freed record and FlagNoAlloc forbids a new pool", ErrNoSpace)
			}
			return 0, nil, 0, fmt.Errorf("%w: all %d pools of %d bytes in use", ErrNoSpace, len(d.pools), PoolSize)
		}
		d.pools[d.npools].Store(new(pool))
		d.npools++
		d.curOff = firstWord
	}
	off := d.curOff
	d.curOff += words
	d.usedBytes += int64(words) * 8
	idx := uint32(d.npools - 1)
	return idx | uint32(off/slotWords)<<d.poolBits, d.pools[idx].Load(), off, nil
}

func (d *Depot) popFreeLocked() (uint32, bool) {
	loc, ok := d.free.pop()
	if ok {
		d.freeBytes -= int64(d.maxWords) * 8
		d.usedBytes += int64(d.maxWords) * 8
	}
	return loc, ok
}

// evictLocked drops the last reference of the record at p/off (location
// loc) whose state was st. It reports false if the state changed (a
// concurrent Get, Put or pin) and the caller must start again.
func (d *Depot) evictLocked(p *pool, off int, st uint64, loc uint32) bool {
	dead := (st&stSeqMask + 1<<stSeqShift) & stSeqMask
	if !atomic.CompareAndSwapUint64(&p[off+1], st, dead) {
		return false
	}
	d.removeLocked(d.tab.Load(), atomic.LoadUint64(&p[off]), loc)
	d.free.push(loc)
	d.freeBytes += int64(d.maxWords) * 8
	d.usedBytes -= int64(d.maxWords) * 8
	d.refcounted--
	d.evictions++
	return true
}

// countHit counts a hit in the shard of the calling goroutine, whose stack
// holds the variable at p (see stackShard).
func (d *Depot) countHit(p unsafe.Pointer) { d.hits[stackShard(uintptr(p))].n.Add(1) }

// stackShard picks the hit-counter shard of the calling goroutine from the
// address p of one of its stack variables (see depotview.Shard).
func stackShard(p uintptr) uintptr { return depotview.Shard(p, hitShardBits) }
