package depot

import "sync/atomic"

// Hash table: open addressing with linear probing over 32-bit entries.
//
// An entry is 0 (empty), tombstone (an evicted record's place, which a
// probe passes over), or a record location (low nextBits bits) with
// entryTagBits bits of the trace's hash above it, so that a probe skips
// all but about 1 in 32 entries of other traces without touching their
// records. At most maxLoadNum/maxLoadDen of the slots are in use (entries
// and tombstones), so a probe always ends at an empty slot.
const (
	initialSlots = 1 << 10
	maxTableBits = 28
	entryTagBits = 32 - nextBits
	tombstone    = 1 // location 1 is never a record: unit 0 of a pool is its bitmap
	// maxLoadNum/maxLoadDen is the fraction of slots in use (entries and
	// tombstones) above which the table is rebuilt: 13/16 keeps a
	// probe short (3 entries for a hit, 15 for a miss, 4 bytes each) and
	// the table at 4.9 to 9.8 bytes per stored trace.
	maxLoadNum, maxLoadDen = 13, 16
	// maxLockFreeSteps bounds a lock-free probe. A reader that probes a
	// table being rebuilt or rewritten may miss; it then looks again under
	// the lock.
	maxLockFreeSteps = 1024
)

// A table maps hashes to record locations. Its home slot for a hash is
// given by the hash's top bits (at most homeBits of them, spread over the
// table), its entry tag by bits 9 to 13, and the record's key word keeps
// every bit of the hash but the low 9, so that the table is rebuilt from
// the records alone.
type table struct {
	slots  []uint32
	mask   uint64
	shift  uint // home of hash: hash >> shift << spread
	spread uint
	// Guarded by the depot's mu.
	used int // slots that are not empty
	live int // slots that hold an entry
}

func newTable(n int, homeBits uint) *table {
	bits := log2ceil(n)
	home := min(homeBits, bits)
	return &table{slots: make([]uint32, n), mask: uint64(n - 1), shift: 64 - home, spread: bits - home}
}

func (t *table) home(hash uint64) uint64 { return hash >> t.shift << t.spread }

// entryOf is the entry of the record at loc whose trace has hash.
func entryOf(hash uint64, loc uint32) uint32 {
	return uint32(hash>>sizeBits)<<nextBits | loc
}

func log2ceil(n int) uint {
	b := uint(0)
	for 1<<b < n {
		b++
	}
	return b
}

// insertLocked adds the entry of the record at loc, rebuilding the table
// first if it is too full, and returns the table that holds it.
func (d *Depot) insertLocked(t *table, hash uint64, loc uint32) *table {
	if (t.used+1)*maxLoadDen > len(t.slots)*maxLoadNum {
		t = d.rebuildLocked(t)
	}
	i := t.home(hash)
	for {
		e := t.slots[i]
		if e == 0 || e == tombstone {
			if e == 0 {
				t.used++
			}
			break
		}
		i = (i + 1) & t.mask
	}
	t.live++
	atomic.StoreUint32(&t.slots[i], entryOf(hash, loc))
	return t
}

// removeLocked removes the entry of the record at loc whose key word is
// key. The slot becomes a tombstone, or empty (with the tombstones before
// it) when the slot after it is empty: no probe needs to pass it then.
func (d *Depot) removeLocked(t *table, key uint64, loc uint32) {
	want := entryOf(key, loc)
	i := t.home(key)
	for n := uint64(0); n <= t.mask; n++ {
		e := t.slots[i]
		if e == 0 {
			return // not in this table: cannot happen under the lock
		}
		if e == want {
			break
		}
		i = (i + 1) & t.mask
	}
	if t.slots[i] != want {
		return
	}
	t.live--
	if t.slots[(i+1)&t.mask] != 0 {
		atomic.StoreUint32(&t.slots[i], tombstone)
		return
	}
	for {
		atomic.StoreUint32(&t.slots[i], 0)
		t.used--
		i = (i - 1) & t.mask
		if t.slots[i] != tombstone {
			return
		}
	}
}

// rebuildLocked copies the live entries of t into a new table, twice the
// size if they fill more than half of the load limit, and publishes it.
// Lock-free readers still probing t may miss; they look again under the
// lock.
func (d *Depot) rebuildLocked(t *table) *table {
	n := len(t.slots)
	if (t.live+1)*2*maxLoadDen > n*maxLoadNum && n < 1<<maxTableBits {
		n *= 2
	}
	nt := newTable(n, d.homeBits)
	for _, e := range t.slots {
		if e == 0 || e == tombstone {
			continue
		}
		loc := e & nextMask
		p, off := d.at(loc)
		i := nt.home(atomic.LoadUint64(&p[off]))
		for nt.slots[i] != 0 {
			i = (i + 1) & nt.mask
		}
		nt.slots[i] = e // nt is not published yet
		nt.used++
		nt.live++
	}
	d.tab.Store(nt)
	return nt
}

// fifo is the queue of freed record locations. Every freed record has room
// for MaxFrames frames, so any trace fits any of them.
type fifo struct {
	q    []uint32
	head int
}

func (f *fifo) push(loc uint32) { f.q = append(f.q, loc) }

func (f *fifo) pop() (uint32, bool) {
	if f.head == len(f.q) {
		return 0, false
	}
	loc := f.q[f.head]
	f.head++
	if f.head == len(f.q) {
		f.q, f.head = f.q[:0], 0
	} else if f.head >= 64 && f.head*2 >= len(f.q) {
		n := copy(f.q, f.q[f.head:])
		f.q, f.head = f.q[:n], 0
	}
	return loc, true
}

func (f *fifo) len() int { return len(f.q) - f.head }
