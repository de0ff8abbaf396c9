package depot

import (
	"fmt"
	"hash/maphash"
	"sync"
	"sync/atomic"
	"unsafe"
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

// hitShards spreads the hit counter over cache lines, one shard per
// goroutine (chosen from its stack address), so that goroutines counting
// hits at once almost never write the same line.
const hitShards = 1 << hitShardBits

// hitShardBits is log2(hitShards).
const hitShardBits = 6

// Flags change how SaveFlags stores a trace, like the kernel's
// depot_flags_t (FlagFiltered is this package's own). Other bits are an
// error.
type Flags uint32

const (
	// FlagGet takes a reference on the record, creating it refcounted if
	// it is new (STACK_DEPOT_FLAG_GET). Each FlagGet save needs one Put.
	FlagGet Flags = 1 << iota
	// FlagNoAlloc forbids allocating a new pool: the trace is stored only
	// if a freed record or the current pool has room (saving without
	// STACK_DEPOT_FLAG_CAN_ALLOC).
	FlagNoAlloc
	// FlagFiltered says the trace is already cut as the depot's Filter
	// cuts it: its producer called [Depot.Filter] on each frame as it made
	// the trace and stopped after the first for which it was true (as
	// unwind.SaveForDepot does in the sweep that hashes). A save with it
	// does not call the filter again; a new trace that is not so cut is
	// refused with [ErrNotFiltered], before anything is stored, so every
	// record is cut, and a trace a hit matches is too.
	FlagFiltered

	flagsKnown = FlagGet | FlagNoAlloc | FlagFiltered
)

// Handle names a stored trace. The zero Handle is never valid. Its bit
// layout depends on the Depot's configuration; see the package
// documentation.
//
// A Handle means something only to the Depot that returned it, as the
// kernel's handles do to its one global depot: its 32 bits hold a pool,
// an offset and a generation, and no room is left to name the depot.
// Another Depot reads a foreign handle as one of its own: it is rejected
// with a [*HandleError] when no live record of that generation starts
// there, and otherwise names that depot's record, a different trace.
// Keep each handle with its depot.
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
	// Buckets, if not zero, fixes the number of distinct home slots in
	// the hash table, a power of two at most 1<<24: every trace hashes to
	// one of Buckets places and traces that share one are found by
	// probing past each other, so a small value models unlucky hashing.
	// The table still grows with the number of records. 0 uses as many
	// home slots as the table has.
	Buckets int
	// Filter, if not nil, is called on the frames of a trace from the
	// innermost outward before hashing; the trace is cut after the first
	// frame for which it returns true, as the kernel's filter_irq_stacks
	// cuts after the first frame in the IRQ-entry text (see EntryText).
	Filter func(pc uint64) bool
	// CountHits makes Stats.Hits count every hit. A hit found without
	// the lock is then one atomic add more, a locked instruction: on
	// amd64 a full fence, which waits for the caller's stores (a trace
	// just unwound into a buffer) and keeps the next save's loads from
	// overlapping this one's; measured, 2.5 to 3 ns of a 27 ns SaveHashed
	// hit over 4,096 traces and 4.4 of a 34 ns SCS copy and Save (see the
	// README). Without it Stats.Hits counts only the hits found under the
	// lock. (The kernel's stack depot counts no hits at all.)
	CountHits bool
}

// MaxFrames returns the most frames d keeps of a trace (Config.MaxFrames,
// or DefaultMaxFrames): a producer need not make more.
func (d *Depot) MaxFrames() int {
	d.ready()
	return d.maxFrames
}

// Filter returns the Config.Filter d cuts traces with (nil if none), for a
// producer that cuts its trace while it makes and hashes it and saves it
// with [FlagFiltered].
func (d *Depot) Filter() func(pc uint64) bool {
	d.ready()
	return d.filter
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
	// Most frames are outside all the ranges: one compare against their
	// hull [lo, hi) rejects them (the depot calls the filter on every
	// frame of every trace it saves).
	lo, hi := ^uint64(0), uint64(0)
	for i := range s {
		if s[i] < e[i] {
			lo, hi = min(lo, s[i]), max(hi, e[i])
		}
	}
	return func(pc uint64) bool {
		if pc-lo >= hi-lo {
			return false
		}
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
	seed      maphash.Seed // of the secondary hash
	hkey      HashKey      // of the primary hash
	maxFrames int
	filter    func(pc uint64) bool
	countHits bool
	homeBits  uint   // hash bits that choose a home slot: log2(Config.Buckets) or maxTableBits
	poolBits  uint   // P
	poolMask  uint32 // 1<<P - 1
	locBits   uint   // P + offsetBits: a record location is the low locBits of a handle
	genMask   uint64 // 1<<G - 1
	maxWords  int    // pool words of a refcounted record
	pools     []atomic.Pointer[pool]
	hints     atomic.Pointer[hints] // nil until the first learn (hint.go)

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
	// secondaries counts records ever stored under their secondary
	// hash; while it is 0 a miss under the lock need not look there.
	secondaries uint64
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
	d.countHits = cfg.CountHits
	d.poolBits = log2ceil(np)
	d.poolMask = 1<<d.poolBits - 1
	d.locBits = d.poolBits + offsetBits
	d.genMask = 1<<(32-d.locBits) - 1
	d.maxWords = recordWords(d.maxFrames)
	d.pools = make([]atomic.Pointer[pool], np)
	d.seed = maphash.MakeSeed()
	d.hkey = newHashKey()
	d.homeBits = maxTableBits
	if cfg.Buckets != 0 {
		d.homeBits = log2ceil(cfg.Buckets)
	}
	d.tab.Store(newTable(initialSlots, d.homeBits))
}

// table returns d's hash table, setting up a zero Depot on first use.
func (d *Depot) table() *table {
	if t := d.tab.Load(); t != nil {
		return t
	}
	return d.setupZero()
}

// ready sets up a zero Depot on first use (table without its result, for
// the accessors that must inline).
func (d *Depot) ready() {
	if d.tab.Load() == nil {
		d.setupZero()
	}
}

// setupZero sets up a zero Depot (table's first use, kept out of line so
// that table inlines).
func (d *Depot) setupZero() *table {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.tab.Load() == nil {
		d.setup(Config{})
	}
	return d.tab.Load()
}

// Save stores trace (innermost frame first) as a persistent record and
// returns its handle. It does not keep trace.
//
// A trace d holds is usually found without hashing it: Save keys it by
// some of its frames (the first 12, the middle one and the last two) and
// its length, and the key names the persistent record of a trace saved
// before with that key (a hint table of 8,192 slots, Stats.HintBytes,
// allocated by d's first plain save; see the package documentation). The
// trace is compared
// with that record, the compare a hit makes anyway, and only if they
// differ (or there is no hint) is the trace hashed and looked up. A hint
// never stands for the compare: traces that share a key share one slot.
func (d *Depot) Save(trace []uint64) (Handle, error) { return d.save(trace, 0) }

// SavePCs is Save for program counters as runtime.Callers returns them.
// The same values saved as []uint64 and []uintptr give the same handle.
func (d *Depot) SavePCs(pcs []uintptr) (Handle, error) { return d.savePCs(pcs, 0) }

// SaveFlags is Save with flags ([FlagGet], [FlagNoAlloc], [FlagFiltered]); other bits are
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
	TableBytes int64  // bytes of the hash table
	HintBytes  int64  // bytes of the hint table: 0 before the first plain save, then fixed (see Save)
	UsedBytes  int64  // bytes of pool held by live records
	InUse      int    // live records (Persistent + Refcounted)
	Persistent int    // live records that are never evicted
	Refcounted int    // live records evicted on their last Put
	Free       int    // evicted records on the freelist
	FreeBytes  int64  // bytes of pool held by the freelist
	Hits       uint64 // saves that found their trace already stored (all of them with Config.CountHits)
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
	var table, hints int64
	if t := d.tab.Load(); t != nil {
		table = int64(len(t.slots)) * 4
	}
	if d.hints.Load() != nil {
		hints = hintBytes
	}
	return Stats{
		Pools:      d.npools,
		PoolBytes:  int64(d.npools) * PoolSize,
		TableBytes: table,
		HintBytes:  hints,
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
