// Package depot is a deduplicating store of stack traces with compact
// 32-bit handles, modelled on the Linux kernel's stack depot
// (lib/stackdepot.c, include/linux/stackdepot.h) and on the Go runtime's
// trace stack table (runtime/tracemap.go) and profile bucket hash
// (runtime/mprof.go).
//
// [Depot.Save] stores a trace once and returns a [Handle]; saving the same
// frames again returns the same Handle, and two different traces never share
// one: a match needs equal hash tags, equal lengths and equal frames.
// [Depot.Fetch] gives the frames back, appended to a caller's slice so that
// the hot path does not allocate. The zero Depot is ready to use with the
// default [Config]; [New] makes one with another configuration.
//
// # Records and pools
//
// Records live in pools of [PoolSize] bytes, allocated on demand up to
// [Config.MaxPools] (the memory limit). The first 512 bytes of a pool are a
// bitmap with one bit per 16-byte unit, set at the first unit of every
// record, so that a forged handle pointing into the middle of a record is
// refused. A record is two header words (hash tag, length and chain link;
// state) followed by its frames, rounded up to 16 bytes: a persistent trace
// of n frames costs 8*n + 16 bytes (n even) or 8*n + 24 (n odd). The hash
// table is a chain per bucket (4 bytes a bucket); it starts at 1,024
// buckets and doubles whenever it holds as many records as buckets, so it
// costs 4 to 8 bytes per stored trace, whatever the memory limit. Measured
// on the real heap ([runtime.MemStats], 100,000 distinct persistent traces
// of 32 frames): about 280 bytes per trace at the default configuration and
// at [MaxPoolsLimit], against 256 bytes of frames. The default
// configuration (32 MiB) holds 122,368 such traces.
//
// When the limit is reached Save returns an error wrapping [ErrNoSpace] and
// the depot is unchanged, as the kernel's stack_depot_save_flags fails
// without STACK_DEPOT_FLAG_CAN_ALLOC.
//
// # Persistent and refcounted records
//
// Save creates persistent records, which are never evicted (the kernel's
// default). [Depot.SaveFlags] with [FlagGet] creates or references a
// refcounted record (STACK_DEPOT_FLAG_GET): [Depot.Get] adds a reference,
// [Depot.Put] drops one, and the Put that drops the last reference evicts
// the record to a freelist. The rules for persistent records:
//
//   - a plain Save that finds a refcounted record makes it persistent
//     ("pins" it), so that a handle returned by Save stays valid for the
//     life of the depot;
//   - a refcounted record whose count would pass [MaxRefs] is pinned too
//     (the kernel's refcount_t saturates and leaks the same way);
//   - Get, Put and SaveFlags(FlagGet) on a persistent record change nothing.
//
// [Stats.Pinned] counts the pins.
//
// Freed space serves any later trace: as in the kernel's depot_alloc_stack
// ("evictable entries have to allocate the max. size so they may safely be
// re-used by differently sized allocations"), every refcounted record
// takes the space of a [Config.MaxFrames] trace,
// 8*MaxFrames + 16 bytes (528 bytes at the default of 64 frames, whatever
// its length), and a freed record is reused oldest first by the next
// record of any length, refcounted or, when no new pool can be had,
// persistent. That is the memory cost of reusable space: a depot that keeps
// mostly short refcounted traces should lower MaxFrames to the longest
// trace it keeps (with MaxFrames 32, a 32-frame refcounted trace costs the
// same 272 bytes as a persistent one).
//
// # Handles
//
// A Handle is 32 bits, like the kernel's union handle_parts, low bits first:
// P pool bits, 12 offset bits (16-byte units within a pool) and G = 20 - P
// generation bits, where P = ceil(log2(MaxPools)) follows from the
// configuration: P = 9 and G = 11 at the default of 512 pools, P = 15 and
// G = 5 at [MaxPoolsLimit], P = 0 and G = 20 with one pool. Handle 0 is
// never valid (offset 0 of a pool is its bitmap).
//
// Each record slot keeps a 40-bit sequence number in its state word that
// grows by one every time the slot is evicted; a handle carries its low G
// bits. The handle of an evicted record is therefore stale, and Fetch, Get,
// Put and Len reject it with an error wrapping [ErrBadHandle], until its
// slot has been reused 2^G times: 2,047 reuses are always rejected at the
// default configuration, 31 at MaxPoolsLimit, 1,048,575 with one pool.
// Freed slots are reused oldest first, so one slot is reused only after
// every other freed slot. Forged handles (a pool that does not exist, an
// offset that is not the start of a record) are rejected without reading
// outside the depot.
//
// # Concurrency
//
// A Depot is safe for concurrent use. Looking up a trace that is already
// stored (a Save hit), Fetch, Get and a Put that does not drop the last
// reference take no lock. Records are published with atomic stores, and the
// lock-free paths validate what they read against the slot's state word:
//
//   - a persistent record is never evicted, so a reader that has seen it
//     persistent reads stable frames;
//   - a refcounted record is only ever returned by a compare-and-swap on the
//     full state word (taking the reference), and Fetch re-reads the state
//     after copying. Both compare the full 40-bit sequence, not the handle's
//     G bits, so a reader that pauses while its slot is evicted and reused
//     sees a changed state and falls back to the lock (or reports the handle
//     stale), however many reuses came round the handle's generation. Only
//     2^40 reuses of one slot during one pause could fool it: at the
//     fastest evict-and-reuse cycle (tens of nanoseconds, under the lock)
//     that is a pause of hours.
//
// Inserts, evictions and the growth of the hash table take a mutex. A
// reader that follows a chain being rewritten may miss a stored trace; it
// then looks again under the mutex, so a miss is never reported wrongly.
//
// # Speed
//
// A Save hit hashes the trace (the runtime's memhash, as a map[string]
// does), follows one bucket chain and compares every frame; with hit
// counting on it adds one atomic add. Hashing and comparing the frames are
// most of its cost, so on one goroutine a hit costs about what a
// map[string] lookup of the same bytes behind a sync.Mutex costs; the
// depot takes no lock, so goroutines hitting different traces do not wait
// for each other. BenchmarkCompare in the tests measures the depot, a
// mutex-guarded map and a sync.Map side by side.
package depot

import (
	"errors"
	"fmt"
	"hash/maphash"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/unwindkit/unwindkit/internal/errs"
)

// PoolSize is the size in bytes of one pool of records: 4,096 units of 16
// bytes, addressed by the 12-bit offset field of a Handle. The first 512
// bytes of each pool hold its record-start bitmap.
const PoolSize = 64 << 10

// MaxFramesLimit is the largest Config.MaxFrames accepted.
const MaxFramesLimit = 256

// DefaultMaxFrames is the Config.MaxFrames used when it is zero, the
// kernel's CONFIG_STACKDEPOT_MAX_FRAMES default.
const DefaultMaxFrames = 64

// DefaultMaxPools is the Config.MaxPools used when it is zero: 32 MiB,
// enough for 122,368 persistent traces of 32 frames, and 11 generation bits
// in a Handle.
const DefaultMaxPools = 512

// MaxPoolsLimit is the largest Config.MaxPools accepted (2 GiB): 15 pool
// bits, leaving 5 generation bits in a Handle.
const MaxPoolsLimit = 1 << 15

// MaxRefs is the most references a refcounted record holds; the Get or
// SaveFlags(FlagGet) that would take one more pins the record instead.
const MaxRefs = stRefMask

// hitShards spreads the hit counter over cache lines so that goroutines
// hitting different traces do not share one counter.
const hitShards = 64

// Flags change how SaveFlags stores a trace, like the kernel's
// depot_flags_t. Bits other than FlagGet and FlagNoAlloc are an error.
type Flags uint32

const (
	// FlagGet takes a reference on the record, creating it refcounted if
	// it is new (STACK_DEPOT_FLAG_GET). Each FlagGet save needs one Put.
	FlagGet Flags = 1 << iota
	// FlagNoAlloc forbids allocating a new pool: the trace is stored only
	// if a freed record or the current pool has room (saving without
	// STACK_DEPOT_FLAG_CAN_ALLOC).
	FlagNoAlloc

	flagsKnown = FlagGet | FlagNoAlloc
)

// ErrCorrupt reports an internal inconsistency of the depot (a record that
// overruns its pool); such errors are *[CorruptError] values. It is the
// ErrCorrupt shared by all unwindkit packages.
var ErrCorrupt = errs.ErrCorrupt

// ErrNoSpace reports that a trace could not be stored because the memory
// limit ([Config.MaxPools]) was reached or [FlagNoAlloc] forbade a new pool.
var ErrNoSpace = errors.New("depot: no space for a new trace")

// ErrEmpty reports a trace with no frames left after filtering.
var ErrEmpty = errors.New("depot: empty trace")

// ErrFlags reports flag bits that [Depot.SaveFlags] does not know.
var ErrFlags = errors.New("depot: unknown flag bits")

// ErrBadHandle reports a handle that names no stored trace: zero, forged,
// or stale (its record was evicted). Errors for a particular handle are
// *[HandleError] values that unwrap to ErrBadHandle.
var ErrBadHandle = errors.New("depot: invalid handle")

// HandleError describes why a handle was rejected.
type HandleError struct {
	// Handle is the rejected handle.
	Handle Handle
	// Reason says why: "zero handle", "no such pool", "not the start of a
	// record" or "stale generation".
	Reason string
}

// Error implements error.
func (e *HandleError) Error() string {
	return fmt.Sprintf("depot: invalid handle %v: %s", e.Handle, e.Reason)
}

// Unwrap returns [ErrBadHandle].
func (e *HandleError) Unwrap() error { return ErrBadHandle }

// Handle names a stored trace. The zero Handle is never valid. Its bit
// layout depends on the Depot's configuration; see the package
// documentation.
type Handle uint32

// String formats h in hexadecimal.
func (h Handle) String() string { return fmt.Sprintf("%#08x", uint32(h)) }

// Config configures a Depot. The zero Config is valid.
type Config struct {
	// MaxFrames is the number of frames kept per trace: longer traces are
	// truncated to their innermost MaxFrames frames before hashing. Every
	// refcounted record takes the space of MaxFrames frames.
	// 0 means DefaultMaxFrames; at most MaxFramesLimit.
	MaxFrames int
	// MaxPools is the memory limit in pools of PoolSize bytes. It also
	// sets the handle layout: ceil(log2(MaxPools)) pool bits, the rest of
	// 20 bits for the generation. 0 means DefaultMaxPools; at most
	// MaxPoolsLimit.
	MaxPools int
	// Buckets, if not zero, fixes the number of hash buckets, a power of
	// two at most 1<<24. 0 lets the table grow with the number of records.
	Buckets int
	// Filter, if not nil, is called on the frames of a trace from the
	// innermost outward before hashing; the trace is cut after the first
	// frame for which it returns true, as the kernel's filter_irq_stacks
	// cuts after the first frame in the IRQ-entry text (see EntryText).
	Filter func(pc uint64) bool
	// NoHitCount skips counting hits found without the lock, saving one
	// atomic add per Save hit; Stats.Hits then counts only the hits found
	// under the lock.
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

type paddedCounter struct {
	n atomic.Uint64
	_ [56]byte
}

// Depot is a deduplicating trace store. The zero Depot is ready to use with
// the default Config; New makes one with another. A Depot must not be
// copied after first use.
type Depot struct {
	// tab is nil until the depot is set up. The fields after it are
	// written once before tab is first stored and only read afterwards,
	// so loading tab orders every later read of them.
	tab       atomic.Pointer[table]
	seed      maphash.Seed
	maxFrames int
	filter    func(pc uint64) bool
	countHits bool
	fixed     bool   // Config.Buckets set: the table never grows
	poolBits  uint   // P
	poolMask  uint32 // 1<<P - 1
	locBits   uint   // P + offsetBits: a record location is the low locBits of a handle
	genMask   uint64 // 1<<G - 1
	maxWords  int    // pool words of a refcounted record
	pools     []atomic.Pointer[pool]

	_    [64]byte // keep the read-mostly fields above off the counters' lines
	hits [hitShards]paddedCounter

	mu sync.Mutex
	// Guarded by mu.
	npools     int
	curOff     int // next free word in the newest pool
	free       fifo
	freeBytes  int64
	usedBytes  int64
	persistent int
	refcounted int
	misses     uint64
	evictions  uint64
	nospace    uint64
	pinned     uint64
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
	d := &Depot{}
	d.setup(cfg)
	return d, nil
}

// setup applies a validated cfg and publishes the table. It runs once,
// from New or (under mu) on the first use of a zero Depot.
func (d *Depot) setup(cfg Config) {
	d.maxFrames = cfg.MaxFrames
	if d.maxFrames == 0 {
		d.maxFrames = DefaultMaxFrames
	}
	np := cfg.MaxPools
	if np == 0 {
		np = DefaultMaxPools
	}
	d.filter = cfg.Filter
	d.countHits = !cfg.NoHitCount
	d.poolBits = log2ceil(np)
	d.poolMask = 1<<d.poolBits - 1
	d.locBits = d.poolBits + offsetBits
	d.genMask = 1<<(32-d.locBits) - 1
	d.maxWords = recordWords(d.maxFrames)
	d.pools = make([]atomic.Pointer[pool], np)
	d.seed = maphash.MakeSeed()
	nb := cfg.Buckets
	d.fixed = nb != 0
	if nb == 0 {
		nb = initialBuckets
	}
	d.tab.Store(newTable(nb))
}

// table returns d's hash table, setting up a zero Depot on first use.
func (d *Depot) table() *table {
	if t := d.tab.Load(); t != nil {
		return t
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.tab.Load() == nil {
		d.setup(Config{})
	}
	return d.tab.Load()
}

// Save stores trace (innermost frame first) as a persistent record and
// returns its handle. It does not keep trace.
func (d *Depot) Save(trace []uint64) (Handle, error) { return d.save(trace, 0) }

// SavePCs is Save for program counters as runtime.Callers returns them.
// The same values saved as []uint64 and []uintptr give the same handle.
func (d *Depot) SavePCs(pcs []uintptr) (Handle, error) { return d.savePCs(pcs, 0) }

// SaveFlags is Save with flags ([FlagGet], [FlagNoAlloc]); other bits are
// an error wrapping [ErrFlags].
func (d *Depot) SaveFlags(trace []uint64, flags Flags) (Handle, error) {
	return d.save(trace, flags)
}

// SavePCsFlags is SavePCs with flags ([FlagGet], [FlagNoAlloc]).
func (d *Depot) SavePCsFlags(pcs []uintptr, flags Flags) (Handle, error) {
	return d.savePCs(pcs, flags)
}

// Fetch appends the frames stored under h to dst and returns the extended
// slice. It does not allocate when dst has room. For a zero, forged or
// stale handle it returns dst unchanged and a *[HandleError].
func (d *Depot) Fetch(h Handle, dst []uint64) ([]uint64, error) { return d.fetch(h, dst) }

// FetchPCs is Fetch into a []uintptr.
func (d *Depot) FetchPCs(h Handle, dst []uintptr) ([]uintptr, error) {
	if unsafe.Sizeof(uintptr(0)) == 8 {
		w, err := d.fetch(h, words8(dst))
		return unsafe.Slice((*uintptr)(unsafe.Pointer(unsafe.SliceData(w))), cap(w))[:len(w)], err
	}
	var buf [MaxFramesLimit]uint64
	w, err := d.fetch(h, buf[:0])
	for _, pc := range w {
		dst = append(dst, uintptr(pc))
	}
	return dst, err
}

// Len returns the number of frames stored under h.
func (d *Depot) Len(h Handle) (int, error) {
	p, off, st, err := d.resolve(h)
	if err != nil {
		return 0, err
	}
	n := frameCount(atomic.LoadUint64(&p[off]))
	if st&stPersistent == 0 && !sameRecord(atomic.LoadUint64(&p[off+1]), st) {
		return 0, &HandleError{h, "stale generation"}
	}
	return n, nil
}

// Get takes a reference on the refcounted record h (stack_depot_get). On a
// persistent record it does nothing; a record at MaxRefs references is
// pinned (made persistent).
func (d *Depot) Get(h Handle) error {
	for {
		p, off, st, err := d.resolve(h)
		if err != nil {
			return err
		}
		if st&stPersistent != 0 {
			return nil
		}
		if st&stRefMask < stRefMask {
			if atomic.CompareAndSwapUint64(&p[off+1], st, st+1) {
				return nil
			}
			continue
		}
		d.mu.Lock()
		ok := d.pinLocked(&p[off+1], st)
		d.mu.Unlock()
		if ok {
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
			if atomic.CompareAndSwapUint64(&p[off+1], st, st-1) {
				return nil
			}
			continue
		}
		// Last reference: evict under the lock, so that no inserter sees a
		// half-removed record and the freelist stays consistent.
		d.mu.Lock()
		done := d.evictLocked(p, off, st, uint32(h)&(1<<d.locBits-1))
		d.mu.Unlock()
		if done {
			return nil
		}
	}
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
	Pinned     uint64 // refcounted records made persistent (by a plain Save or at MaxRefs)
}

// Stats returns a snapshot of d's counters.
func (d *Depot) Stats() Stats {
	var hits uint64
	for i := range d.hits {
		hits += d.hits[i].n.Load()
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	var table int64
	if t := d.tab.Load(); t != nil {
		table = int64(len(t.buckets)) * 4
	}
	return Stats{
		Pools:      d.npools,
		PoolBytes:  int64(d.npools) * PoolSize,
		TableBytes: table,
		UsedBytes:  d.usedBytes,
		InUse:      d.persistent + d.refcounted,
		Persistent: d.persistent,
		Refcounted: d.refcounted,
		Free:       d.free.len(),
		FreeBytes:  d.freeBytes,
		Hits:       hits,
		Misses:     d.misses,
		Evictions:  d.evictions,
		NoSpace:    d.nospace,
		Pinned:     d.pinned,
	}
}
