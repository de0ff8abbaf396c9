// Package depot is a deduplicating store of stack traces with compact
// 32-bit handles, modelled on the Linux kernel's stack depot
// (lib/stackdepot.c, include/linux/stackdepot.h) and on the Go runtime's
// trace stack table (runtime/tracemap.go) and profile bucket hash
// (runtime/mprof.go).
//
// Save stores a trace once and returns a Handle; saving the same frames again
// returns the same Handle, and two different traces never share one: a match
// needs equal hash tags, equal lengths and equal frames. Fetch gives the
// frames back, appended to a caller's slice so that the hot path does not
// allocate.
//
// # Records and pools
//
// Records live in pools of PoolSize bytes, allocated on demand up to
// Config.MaxPools (the memory limit). A record is two header words followed
// by its frames, rounded up to 16 bytes, so a trace of n frames costs
// 8*n + 16 (n even) or 8*n + 24 (n odd) bytes of pool, plus its share of the
// bucket table (4 bytes per bucket). When the limit is reached Save returns
// an error wrapping ErrNoSpace and the depot is unchanged, as the kernel's
// stack_depot_save_flags fails without STACK_DEPOT_FLAG_CAN_ALLOC.
//
// # Persistent and refcounted records
//
// Save creates persistent records, which are never evicted (the kernel's
// default). SaveFlags with FlagGet creates or references a refcounted record
// (STACK_DEPOT_FLAG_GET): Get adds a reference, Put drops one, and the Put
// that drops the last reference evicts the record to a freelist, from which
// a later record of the same size class reuses the space. A plain Save that
// finds a refcounted record makes it persistent, so that a handle returned
// by Save stays valid for the life of the depot.
//
// # Handles
//
// A Handle is 32 bits laid out like the kernel's union handle_parts, low bits
// first:
//
//	bits  0..14  pool index + 1 (0 is never a valid pool, so Handle 0 is invalid)
//	bits 15..26  offset of the record in its pool, in 16-byte units
//	bits 27..31  generation (the kernel's 5 STACK_DEPOT_EXTRA_BITS)
//
// Each record slot has a generation that is incremented when the slot is
// evicted, so the handle of an evicted record is stale: Fetch, Get and Put
// reject it with an error wrapping ErrBadHandle. Only after the same slot has
// been evicted and reused 32 times does an old handle's generation come round
// again, and then it names whatever trace now lives there; freed slots are
// reused oldest first to make that rarer. Forged handles (a pool that does
// not exist, an offset that is not the start of a record) are rejected
// without reading outside the depot.
//
// # Concurrency
//
// A Depot is safe for concurrent use. Looking up a trace that is already
// stored (a Save hit), Fetch, Get and a Put that does not drop the last
// reference take no lock: records are published with atomic stores, and
// readers check a record's generation before and after reading it, like a
// sequence lock, so a record evicted under a reader is seen as a miss or a
// stale handle, never as another trace. Inserts and evictions take a mutex.
package depot

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"

	"github.com/unwindkit/unwindkit/internal/errs"
)

// Handle layout and pool geometry.
const (
	indexBits  = 15
	offsetBits = 12
	genBits    = 5

	offsetShift = indexBits
	genShift    = indexBits + offsetBits
	indexMask   = 1<<indexBits - 1
	offsetMask  = 1<<offsetBits - 1
	genMask     = 1<<genBits - 1
	locMask     = 1<<genShift - 1

	slotWords = 2                                           // 16-byte allocation unit
	poolWords = (1 << offsetBits) * slotWords               // words per pool
	hdrWords  = 2                                           // header words per record
	maxClass  = (hdrWords + MaxFramesLimit + 1) / slotWords // largest size class
)

// PoolSize is the size in bytes of one pool of records: 4096 slots of 16
// bytes, addressed by the 12-bit offset field of a Handle.
const PoolSize = 64 << 10

var _ = [1]struct{}{}[PoolSize-poolWords*8] // PoolSize matches the handle layout

// MaxFramesLimit is the largest Config.MaxFrames accepted.
const MaxFramesLimit = 256

// DefaultMaxFrames is the Config.MaxFrames used when it is zero, the
// kernel's CONFIG_STACKDEPOT_MAX_FRAMES default.
const DefaultMaxFrames = 64

// DefaultMaxPools is the Config.MaxPools used when it is zero (16 MiB).
const DefaultMaxPools = 256

// MaxPoolsLimit is the largest Config.MaxPools accepted: the 15-bit pool
// field of a Handle holds the pool index plus one.
const MaxPoolsLimit = 1<<15 - 1

var _ = [1]struct{}{}[MaxPoolsLimit-indexMask] // MaxPoolsLimit matches the handle layout

// State word (header word 1) layout.
const (
	stRefMask    = 1<<32 - 1 // reference count of a refcounted record
	stSizeShift  = 32        // frames, 9 bits (1..256)
	stSizeMask   = 1<<9 - 1
	stGenShift   = 41      // slot generation, 5 bits
	stLive       = 1 << 46 // record holds a trace reachable from the table
	stPersistent = 1 << 47 // record is never evicted
	// stIdent covers the bits that name the trace a slot holds: a reader
	// that sees them unchanged around a read has read one trace. Reference
	// count and the persistent bit may change without that.
	stIdent = stSizeMask<<stSizeShift | genMask<<stGenShift | stLive
)

// testHookAfterRead, if set by a test, runs after a lock-free reader has
// read a record's frames and before it re-checks the record's state, so
// that a test can evict and reuse the record inside that window.
var testHookAfterRead func()

// maxLockFreeSteps bounds a lock-free bucket walk. A reader that follows a
// record evicted under it may wander into another chain; after this many
// steps it gives up and retries under the lock, where chains are acyclic.
const maxLockFreeSteps = 1024

// hitShards spreads the hit counter over cache lines so that goroutines
// hitting different traces do not share one counter.
const hitShards = 64

// Flags change how SaveFlags stores a trace, like the kernel's
// depot_flags_t.
type Flags uint32

const (
	// FlagGet takes a reference on the record, creating it refcounted if
	// it is new (STACK_DEPOT_FLAG_GET). Each FlagGet save needs one Put.
	FlagGet Flags = 1 << iota
	// FlagNoAlloc forbids allocating a new pool: the trace is stored only
	// if a freed record or the current pool has room (saving without
	// STACK_DEPOT_FLAG_CAN_ALLOC).
	FlagNoAlloc
)

// ErrCorrupt reports an internal inconsistency of the depot (a record that
// overruns its pool); such errors are *CorruptError values. It is
// errs.ErrCorrupt, shared by all unwindkit packages.
var ErrCorrupt = errs.ErrCorrupt

// CorruptError describes one piece of corruption; see errs.CorruptError.
type CorruptError = errs.CorruptError

// ErrNoSpace reports that a trace could not be stored because the memory
// limit (Config.MaxPools) was reached or FlagNoAlloc forbade a new pool.
var ErrNoSpace = errors.New("depot: no space for a new trace")

// ErrEmpty reports a trace with no frames left after filtering.
var ErrEmpty = errors.New("depot: empty trace")

// ErrBadHandle reports a handle that names no stored trace: zero, forged,
// or stale (its record was evicted). Errors for a particular handle are
// *HandleError values that unwrap to ErrBadHandle.
var ErrBadHandle = errors.New("depot: invalid handle")

// HandleError describes why a handle was rejected.
type HandleError struct {
	Handle Handle
	Reason string // e.g. "zero handle", "no such pool", "stale generation"
}

// Error implements error.
func (e *HandleError) Error() string {
	return fmt.Sprintf("depot: invalid handle %#08x (%v): %s", uint32(e.Handle), e.Handle, e.Reason)
}

// Unwrap returns ErrBadHandle.
func (e *HandleError) Unwrap() error { return ErrBadHandle }

// Handle names a stored trace. The zero Handle is never valid. See the
// package documentation for the bit layout.
type Handle uint32

// String formats h as pool/offset/generation.
func (h Handle) String() string {
	idx := int(h&indexMask) - 1
	return fmt.Sprintf("pool %d offset %#x gen %d", idx, int(h>>offsetShift&offsetMask)*slotWords*8, h>>genShift)
}

// Config configures a Depot. The zero Config is valid.
type Config struct {
	// MaxFrames is the number of frames kept per trace: longer traces are
	// truncated to their innermost MaxFrames frames before hashing.
	// 0 means DefaultMaxFrames; at most MaxFramesLimit.
	MaxFrames int
	// MaxPools is the memory limit in pools of PoolSize bytes.
	// 0 means DefaultMaxPools; at most MaxPoolsLimit.
	MaxPools int
	// Buckets is the number of hash buckets, a power of two. 0 picks one
	// bucket per 512 bytes of the memory limit, between 1<<10 and 1<<20.
	Buckets int
	// Filter, if not nil, is called on the frames of a trace from the
	// innermost outward before hashing; the trace is cut after the first
	// frame for which it returns true, as the kernel's filter_irq_stacks
	// cuts after the first frame in the IRQ-entry text (see EntryText).
	Filter func(pc uint64) bool
	// NoHitCount skips counting hits found without the lock, saving one
	// atomic add per Save hit (a sixth of the hit path); Stats.Hits then
	// counts only the hits found under the lock.
	NoHitCount bool
}

// EntryText returns a Filter that cuts a trace after its first frame in
// one of the half-open ranges [start[i], end[i]), like the kernel's
// in_irqentry_text over __irqentry_text and __softirqentry_text. It panics
// if start and end differ in length.
func EntryText(start, end []uint64) func(pc uint64) bool {
	if len(start) != len(end) {
		panic("depot: EntryText: start and end differ in length")
	}
	s := append([]uint64(nil), start...)
	e := append([]uint64(nil), end...)
	return func(pc uint64) bool {
		for i := range s {
			if pc >= s[i] && pc < e[i] {
				return true
			}
		}
		return false
	}
}

// pool is one allocation of record memory. starts has one bit per 16-byte
// slot, set for the first slot of every record ever allocated, so a forged
// handle that points into the middle of a record is refused. Every word is
// accessed atomically: readers run concurrently with writers.
type pool struct {
	words  [poolWords]uint64
	starts [poolWords / slotWords / 64]uint64
}

type paddedCounter struct {
	n atomic.Uint64
	_ [56]byte
}

// fifo is a queue of freed record locations of one size class.
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

// Depot is a deduplicating trace store. Create one with New.
type Depot struct {
	seed        uint64
	maxFrames   int
	filter      func(pc uint64) bool
	countHits   bool
	buckets     []uint32 // heads of the chains (record locations), atomic
	bucketShift uint     // bucket index = tag >> bucketShift
	pools       []atomic.Pointer[pool]

	_    [64]byte // keep the read-mostly fields above off the counters' lines
	hits [hitShards]paddedCounter

	mu sync.Mutex
	// Guarded by mu.
	npools     int
	curOff     int // next free word in the newest pool
	free       [maxClass + 1]fifo
	nfree      int
	freeBytes  int64
	usedBytes  int64
	persistent int
	refcounted int
	misses     uint64
	evictions  uint64
	nospace    uint64
}

// New returns an empty Depot configured by cfg.
func New(cfg Config) (*Depot, error) {
	if cfg.MaxFrames < 0 || cfg.MaxFrames > MaxFramesLimit {
		return nil, fmt.Errorf("depot: MaxFrames %d outside [0, %d]", cfg.MaxFrames, MaxFramesLimit)
	}
	if cfg.MaxPools < 0 || cfg.MaxPools > MaxPoolsLimit {
		return nil, fmt.Errorf("depot: MaxPools %d outside [0, %d]", cfg.MaxPools, MaxPoolsLimit)
	}
	if cfg.Buckets < 0 || cfg.Buckets > 1<<24 || cfg.Buckets&(cfg.Buckets-1) != 0 {
		return nil, fmt.Errorf("depot: Buckets %d is not a power of two in [1, 1<<24]", cfg.Buckets)
	}
	d := &Depot{maxFrames: cfg.MaxFrames, filter: cfg.Filter, countHits: !cfg.NoHitCount}
	if d.maxFrames == 0 {
		d.maxFrames = DefaultMaxFrames
	}
	np := cfg.MaxPools
	if np == 0 {
		np = DefaultMaxPools
	}
	nb := cfg.Buckets
	if nb == 0 {
		nb = 1 << 10
		for nb < np*PoolSize/512 && nb < 1<<20 {
			nb <<= 1
		}
	}
	bits := uint(0)
	for 1<<bits < nb {
		bits++
	}
	d.pools = make([]atomic.Pointer[pool], np)
	d.buckets = make([]uint32, nb)
	d.bucketShift = 32 - bits // bits == 0 gives shift 32: every tag >> 32 == 0
	d.seed = rand.Uint64()
	return d, nil
}

// Save stores trace (innermost frame first) as a persistent record and
// returns its handle. It does not keep trace.
func (d *Depot) Save(trace []uint64) (Handle, error) { return save(d, trace, 0) }

// SavePCs is Save for program counters as runtime.Callers returns them.
// The same values saved as []uint64 and []uintptr give the same handle.
func (d *Depot) SavePCs(pcs []uintptr) (Handle, error) { return save(d, pcs, 0) }

// SaveFlags is Save with flags (FlagGet, FlagNoAlloc).
func (d *Depot) SaveFlags(trace []uint64, flags Flags) (Handle, error) {
	return save(d, trace, flags)
}

// SavePCsFlags is SavePCs with flags (FlagGet, FlagNoAlloc).
func (d *Depot) SavePCsFlags(pcs []uintptr, flags Flags) (Handle, error) {
	return save(d, pcs, flags)
}

// Fetch appends the frames stored under h to dst and returns the extended
// slice. It does not allocate when dst has room. For a zero, forged or
// stale handle it returns dst unchanged and a *HandleError.
func (d *Depot) Fetch(h Handle, dst []uint64) ([]uint64, error) { return fetch(d, h, dst) }

// FetchPCs is Fetch into a []uintptr.
func (d *Depot) FetchPCs(h Handle, dst []uintptr) ([]uintptr, error) { return fetch(d, h, dst) }

// Len returns the number of frames stored under h.
func (d *Depot) Len(h Handle) (int, error) {
	_, _, st, err := d.resolve(h)
	if err != nil {
		return 0, err
	}
	return int(st >> stSizeShift & stSizeMask), nil
}

// Get takes a reference on the refcounted record h (stack_depot_get). On a
// persistent record it does nothing.
func (d *Depot) Get(h Handle) error {
	for {
		p, off, st, err := d.resolve(h)
		if err != nil {
			return err
		}
		if st&stPersistent != 0 {
			return nil
		}
		if st&stRefMask == stRefMask {
			return &HandleError{h, "reference count overflow"}
		}
		if atomic.CompareAndSwapUint64(&p.words[off+1], st, st+1) {
			return nil
		}
	}
}

// Put drops a reference on the refcounted record h (stack_depot_put). The
// Put that drops the last reference evicts the record: its handle becomes
// stale and its space goes to the freelist. On a persistent record Put does
// nothing.
func (d *Depot) Put(h Handle) error {
	for {
		p, off, st, err := d.resolve(h)
		if err != nil {
			return err
		}
		if st&stPersistent != 0 {
			return nil
		}
		if st&stRefMask > 1 {
			if atomic.CompareAndSwapUint64(&p.words[off+1], st, st-1) {
				return nil
			}
			continue
		}
		// Last reference: evict under the lock, so that no inserter sees a
		// half-removed record and the freelist stays consistent.
		d.mu.Lock()
		done := d.evictLocked(p, off, st, h)
		d.mu.Unlock()
		if done {
			return nil
		}
	}
}

// evictLocked drops the last reference of the record at p/off whose state
// was st. It reports false if the state changed (a concurrent Get, Put or
// promotion) and the caller must start again.
func (d *Depot) evictLocked(p *pool, off int, st uint64, h Handle) bool {
	sw := &p.words[off+1]
	dead := st&^(stRefMask|stLive|genMask<<stGenShift) | ((st>>stGenShift+1)&genMask)<<stGenShift
	if !atomic.CompareAndSwapUint64(sw, st, dead) {
		return false
	}
	loc := uint32(h) & locMask
	w0 := atomic.LoadUint64(&p.words[off])
	tag := uint32(w0)
	next := uint32(w0 >> 32)
	// Unlink from the chain. Under the lock chains are acyclic and every
	// live record is on the chain of its tag's bucket.
	b := &d.buckets[tag>>d.bucketShift&uint32(len(d.buckets)-1)]
	if atomic.LoadUint32(b) == loc {
		atomic.StoreUint32(b, next)
	} else {
		cur := atomic.LoadUint32(b)
		for cur != 0 {
			cp, coff, _ := d.locate(cur)
			cw := atomic.LoadUint64(&cp.words[coff])
			if uint32(cw>>32) == loc {
				atomic.StoreUint64(&cp.words[coff], uint64(uint32(cw))|uint64(next)<<32)
				break
			}
			cur = uint32(cw >> 32)
		}
	}
	n := int(st >> stSizeShift & stSizeMask)
	words := recordWords(n)
	d.free[words/slotWords].push(loc)
	d.nfree++
	d.freeBytes += int64(words) * 8
	d.usedBytes -= int64(words) * 8
	d.refcounted--
	d.evictions++
	return true
}

// Stats is a snapshot of a depot's counters, after the kernel's
// stack depot debugfs stats.
type Stats struct {
	Pools      int    // pools allocated
	PoolBytes  int64  // Pools * PoolSize
	TableBytes int64  // bytes of the bucket table
	UsedBytes  int64  // bytes of pool held by live records
	InUse      int    // live records (Persistent + Refcounted)
	Persistent int    // live records that are never evicted
	Refcounted int    // live records evicted on their last Put
	Free       int    // evicted records on the freelist
	FreeBytes  int64  // bytes of pool held by the freelist
	Hits       uint64 // saves that found their trace already stored
	Misses     uint64 // saves that stored a new record
	Evictions  uint64 // records evicted by Put
	NoSpace    uint64 // saves refused with ErrNoSpace
}

// Stats returns a snapshot of d's counters.
func (d *Depot) Stats() Stats {
	var hits uint64
	for i := range d.hits {
		hits += d.hits[i].n.Load()
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return Stats{
		Pools:      d.npools,
		PoolBytes:  int64(d.npools) * PoolSize,
		TableBytes: int64(len(d.buckets)) * 4,
		UsedBytes:  d.usedBytes,
		InUse:      d.persistent + d.refcounted,
		Persistent: d.persistent,
		Refcounted: d.refcounted,
		Free:       d.nfree,
		FreeBytes:  d.freeBytes,
		Hits:       hits,
		Misses:     d.misses,
		Evictions:  d.evictions,
		NoSpace:    d.nospace,
	}
}

// recordWords is the pool words taken by a record of n frames.
func recordWords(n int) int {
	return (hdrWords + n + slotWords - 1) &^ (slotWords - 1)
}

func makeHandle(loc uint32, st uint64) Handle {
	return Handle(loc | uint32(st>>stGenShift&genMask)<<genShift)
}

// locate returns the pool and word offset of a record location. It reports
// false for a location that names no allocated pool.
func (d *Depot) locate(loc uint32) (*pool, int, bool) {
	idx := int(loc & indexMask)
	if idx == 0 || idx > len(d.pools) {
		return nil, 0, false
	}
	p := d.pools[idx-1].Load()
	if p == nil {
		return nil, 0, false
	}
	return p, int(loc>>offsetShift&offsetMask) * slotWords, true
}

// resolve checks an outside handle and returns its record and current
// state word.
func (d *Depot) resolve(h Handle) (*pool, int, uint64, error) {
	if h == 0 {
		return nil, 0, 0, &HandleError{h, "zero handle"}
	}
	p, off, ok := d.locate(uint32(h))
	if !ok {
		return nil, 0, 0, &HandleError{h, "no such pool"}
	}
	slot := off / slotWords
	if atomic.LoadUint64(&p.starts[slot/64])&(1<<(slot%64)) == 0 {
		return nil, 0, 0, &HandleError{h, "not the start of a record"}
	}
	st := atomic.LoadUint64(&p.words[off+1])
	if st&stLive == 0 || uint32(st>>stGenShift&genMask) != uint32(h>>genShift) {
		return nil, 0, 0, &HandleError{h, "stale generation"}
	}
	return p, off, st, nil
}

func fetch[T ~uint64 | ~uintptr](d *Depot, h Handle, dst []T) ([]T, error) {
	p, off, st, err := d.resolve(h)
	if err != nil {
		return dst, err
	}
	n := int(st >> stSizeShift & stSizeMask)
	if off+hdrWords+n > poolWords {
		return dst, errs.Corruptf(errs.RuleRecordOverrunsPool, uint64(h), "%d frames at word %d", n, off)
	}
	base := len(dst)
	if cap(dst)-base < n {
		nd := make([]T, base, base+n)
		copy(nd, dst)
		dst = nd
	}
	out := dst[base : base+n]
	w := p.words[off+hdrWords : off+hdrWords+n]
	for i := range out {
		out[i] = T(atomic.LoadUint64(&w[i]))
	}
	if testHookAfterRead != nil {
		testHookAfterRead()
	}
	// Sequence check: if the record was evicted (and perhaps reused) while
	// we copied, the frames may be a mix; report the handle stale instead.
	if (atomic.LoadUint64(&p.words[off+1])^st)&stIdent != 0 {
		return dst[:base], &HandleError{h, "stale generation"}
	}
	return dst[:base+n], nil
}

// trim applies the filter and the frame limit.
func trim[T ~uint64 | ~uintptr](d *Depot, trace []T) []T {
	if d.filter != nil {
		for i, pc := range trace {
			if d.filter(uint64(pc)) {
				trace = trace[:i+1]
				break
			}
		}
	}
	if len(trace) > d.maxFrames {
		trace = trace[:d.maxFrames]
	}
	return trace
}

// find walks the chain at b for trace. bounded limits the walk for
// lock-free callers. It returns the record and the state word it validated.
func find[T ~uint64 | ~uintptr](d *Depot, b *uint32, trace []T, tag uint32, bounded bool) (uint32, *pool, int, uint64, bool) {
	want := uint64(len(trace))<<stSizeShift | stLive
	loc := atomic.LoadUint32(b)
	for steps := 0; loc != 0; steps++ {
		if bounded && steps >= maxLockFreeSteps {
			return 0, nil, 0, 0, false
		}
		p, off, ok := d.locate(loc)
		if !ok {
			return 0, nil, 0, 0, false // cannot happen: chains hold real records
		}
		w0 := atomic.LoadUint64(&p.words[off])
		if uint32(w0) == tag {
			st := atomic.LoadUint64(&p.words[off+1])
			if st&(stSizeMask<<stSizeShift|stLive) == want && equalFrames(p, off, trace) {
				if testHookAfterRead != nil {
					testHookAfterRead()
				}
				// Sequence check: the slot still holds the trace we compared.
				if (atomic.LoadUint64(&p.words[off+1])^st)&stIdent == 0 {
					return loc, p, off, st, true
				}
				return 0, nil, 0, 0, false
			}
		}
		loc = uint32(w0 >> 32)
	}
	return 0, nil, 0, 0, false
}

func save[T ~uint64 | ~uintptr](d *Depot, trace []T, flags Flags) (Handle, error) {
	trace = trim(d, trace)
	if len(trace) == 0 {
		return 0, ErrEmpty
	}
	hash := hashTrace(d.seed, trace)
	tag := uint32(hash >> 32)
	b := &d.buckets[tag>>d.bucketShift&uint32(len(d.buckets)-1)]
	// Fast path: no lock. A persistent record needs nothing more; a
	// refcounted one needs a reference taken by CAS when FlagGet is set.
	if loc, p, off, st, ok := find(d, b, trace, tag, true); ok {
		if st&stPersistent != 0 ||
			flags&FlagGet != 0 && st&stRefMask < stRefMask &&
				atomic.CompareAndSwapUint64(&p.words[off+1], st, st+1) {
			if d.countHits {
				d.hits[hash%hitShards].n.Add(1)
			}
			return makeHandle(loc, st), nil
		}
	}
	return saveSlow(d, b, trace, tag, hash, flags)
}

// saveSlow looks the trace up again under the lock and inserts it if it is
// still missing.
func saveSlow[T ~uint64 | ~uintptr](d *Depot, b *uint32, trace []T, tag uint32, hash uint64, flags Flags) (Handle, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if loc, p, off, st, ok := find(d, b, trace, tag, false); ok {
		sw := &p.words[off+1]
		// Lock-free Get and Put may change the reference count under us
		// (but never to zero: the last Put takes the lock).
		for st&stPersistent == 0 {
			var nst uint64
			if flags&FlagGet != 0 {
				if st&stRefMask == stRefMask {
					return 0, fmt.Errorf("depot: reference count overflow on %v", makeHandle(loc, st))
				}
				nst = st + 1
			} else {
				nst = st | stPersistent
			}
			if atomic.CompareAndSwapUint64(sw, st, nst) {
				if nst&stPersistent != 0 {
					d.refcounted--
					d.persistent++
				}
				break
			}
			st = atomic.LoadUint64(sw)
		}
		d.hits[hash%hitShards].n.Add(1)
		return makeHandle(loc, st), nil
	}

	n := len(trace)
	words := recordWords(n)
	loc, p, off, err := d.allocLocked(words, flags)
	if err != nil {
		d.nospace++
		return 0, err
	}
	sw := &p.words[off+1]
	old := atomic.LoadUint64(sw) // dead state of a reused slot, 0 if fresh
	w := p.words[off+hdrWords : off+hdrWords+n]
	for i, pc := range trace {
		atomic.StoreUint64(&w[i], uint64(pc))
	}
	atomic.StoreUint64(&p.words[off], uint64(tag)|uint64(atomic.LoadUint32(b))<<32)
	st := uint64(n)<<stSizeShift | (old>>stGenShift&genMask)<<stGenShift | stLive
	if flags&FlagGet != 0 {
		st |= 1
		d.refcounted++
	} else {
		st |= stPersistent
		d.persistent++
	}
	atomic.StoreUint64(sw, st)
	slot := off / slotWords
	atomic.OrUint64(&p.starts[slot/64], 1<<(slot%64))
	// Publish: from here lock-free readers can reach the record.
	atomic.StoreUint32(b, loc)
	d.usedBytes += int64(words) * 8
	d.misses++
	return makeHandle(loc, st), nil
}

// allocLocked finds room for a record of words words: a freed record of the
// same size class first, then the rest of the newest pool, then a new pool.
func (d *Depot) allocLocked(words int, flags Flags) (uint32, *pool, int, error) {
	if loc, ok := d.free[words/slotWords].pop(); ok {
		d.nfree--
		d.freeBytes -= int64(words) * 8
		p, off, _ := d.locate(loc)
		return loc, p, off, nil
	}
	if d.npools == 0 || d.curOff+words > poolWords {
		if flags&FlagNoAlloc != 0 {
			return 0, nil, 0, fmt.Errorf("%w: no freed record of %d bytes and FlagNoAlloc forbids a new pool", ErrNoSpace, words*8)
		}
		if d.npools == len(d.pools) {
			return 0, nil, 0, fmt.Errorf("%w: all %d pools of %d bytes in use", ErrNoSpace, len(d.pools), PoolSize)
		}
		d.pools[d.npools].Store(new(pool))
		d.npools++
		d.curOff = 0
	}
	off := d.curOff
	d.curOff += words
	loc := uint32(d.npools) | uint32(off/slotWords)<<offsetShift
	return loc, d.pools[d.npools-1].Load(), off, nil
}
