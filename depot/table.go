package depot

import "sync/atomic"

// Hash table.
const (
	initialBuckets = 1 << 10
	maxTableBits   = 28
	// maxLockFreeSteps bounds a lock-free bucket walk. A reader that
	// follows a record evicted or rehashed under it may wander into
	// another chain; after this many steps it gives up and looks again
	// under the lock, where chains are acyclic.
	maxLockFreeSteps = 1024
)

// A table is the bucket array: the first record location of each chain.
// Buckets are indexed by the top bits of a trace's hash, which are also the
// top bits of the tag in every record's link word, so that growing the
// table rehashes from the records alone.
type table struct {
	buckets []uint32
	shift   uint // bucket of hash: hash >> shift (64 for one bucket)
}

func newTable(n int) *table {
	return &table{buckets: make([]uint32, n), shift: 64 - log2ceil(n)}
}

func (t *table) bucket(hash uint64) *uint32 { return &t.buckets[hash>>t.shift] }

// linkHash is a hash with the tag of link in its top bits: enough for
// bucket.
func linkHash(link uint64) uint64 { return link >> (keyShift + sizeBits) << (64 - tagBits) }

func log2ceil(n int) uint {
	b := uint(0)
	for 1<<b < n {
		b++
	}
	return b
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

// growLocked doubles the table, relinking every record into the new one,
// and publishes it. Lock-free readers still walking the old table may be
// led astray by the relinked chains; they miss and look again under the
// lock.
func (d *Depot) growLocked(t *table) *table {
	nt := newTable(2 * len(t.buckets))
	for i := range t.buckets {
		for loc := atomic.LoadUint32(&t.buckets[i]); loc != 0; {
			p, off := d.at(loc)
			link := atomic.LoadUint64(&p[off])
			nb := nt.bucket(linkHash(link))
			atomic.StoreUint64(&p[off], link&^nextMask|uint64(*nb))
			*nb = loc // nt is not published yet
			loc = uint32(link) & nextMask
		}
	}
	d.tab.Store(nt)
	return nt
}
