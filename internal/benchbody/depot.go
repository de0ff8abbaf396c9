package benchbody

import (
	"hash/maphash"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/unwindkit/unwindkit/depot"
	"github.com/unwindkit/unwindkit/internal/tracegen"
)

// The depot's workload: DepotTraces distinct traces of DepotDepth frames
// stored, and MissRound more never stored, for misses.
const (
	DepotTraces = 4096
	DepotDepth  = 32
	MissRound   = 8192 // misses per round; the store is rebuilt between rounds
)

var (
	tracesOnce sync.Once
	storedSet  [][]uint64
	freshSet   [][]uint64
)

// DepotTraceSet returns the stored traces and the fresh ones (the same
// every call): kernel-like traces that share a common root of outer frames
// and differ in 1 to DepotDepth inner ones, as real stacks do.
func DepotTraceSet() (stored, fresh [][]uint64) {
	tracesOnce.Do(func() {
		all := tracegen.Kernel(DepotTraces+MissRound, DepotDepth, 42)
		storedSet, freshSet = all[:DepotTraces], all[DepotTraces:]
	})
	return storedSet, freshSet
}

// Store is one trace store under test: Save and Fetch as goroutine w
// (0 <= w < the workers it was made for).
type Store interface {
	Save(w int, trace []uint64) uint32
	Fetch(w int, h uint32, dst []uint64) []uint64
}

// Peer is a kind of trace store: the depot or what a Go programmer would
// write instead.
type Peer struct {
	Name string
	// New returns an empty store for up to workers goroutines.
	New func(workers int) (Store, error)
}

// DepotPeers are the stores compared: the depot at its default
// configuration (no hit counting, as the maps count none), a
// map[string] behind a sync.Mutex, and a sync.Map. The baseline of
// examples/compare is DepotPeers[1].
var DepotPeers = []Peer{
	{"depot", func(int) (Store, error) {
		d, err := depot.New(depot.Config{})
		return depotStore{d}, err
	}},
	{"mutexmap", func(int) (Store, error) { return NewMutexPeer(), nil }},
	{"syncmap", func(w int) (Store, error) { return NewSyncPeer(w), nil }},
}

type depotStore struct{ d *depot.Depot }

func (s depotStore) Save(_ int, tr []uint64) uint32 {
	h, err := s.d.Save(tr)
	if err != nil {
		panic(err)
	}
	return uint32(h)
}

func (s depotStore) Fetch(_ int, h uint32, dst []uint64) []uint64 {
	dst, err := s.d.Fetch(depot.Handle(h), dst)
	if err != nil {
		panic(err)
	}
	return dst
}

// NewFilled returns a new store of p, for up to workers goroutines,
// holding the stored traces.
func NewFilled(p Peer, workers int) (Store, error) {
	s, err := p.New(workers)
	if err != nil {
		return nil, err
	}
	set, _ := DepotTraceSet()
	for _, tr := range set {
		s.Save(0, tr)
	}
	return s, nil
}

func mustFilled(b *testing.B, p Peer, workers int) Store {
	s, err := NewFilled(p, workers)
	if err != nil {
		b.Fatal(err)
	}
	return s
}

// Run runs n operations op(w, i) on g goroutines at once, n/g each, on a
// Team made for the purpose.
func Run(g, n int, op func(w, i int)) {
	t := NewTeam(g)
	defer t.Close()
	t.Run(n, op)
}

// A Team is g goroutines that run blocks of operations at once: the
// caller's own and g-1 workers that spin between blocks, so that each
// keeps its P and its thread. Goroutines started for each block do not
// run at once reliably on this 2-vCPU VM: when a new one waits for the
// other P, that P's thread may be parked, and its wake-up took 0.6 to
// 2.4 ms in 20 of 43 blocks of 1.8 ms measured here, so the block ran
// one goroutine after the other, or nearly, at up to twice its time.
// With fewer Ps than goroutines (go test -cpu 1) the spins yield, or a
// spinning goroutine would hold the P until the scheduler preempts it.
type Team struct {
	g     int
	yield bool          // fewer Ps than goroutines: spins yield
	gen   atomic.Uint64 // a block's start (odd: stop)
	done  atomic.Int32  // workers done with the current block
	n     int           // the current block's operations
	op    func(w, i int)
	wg    sync.WaitGroup
}

// NewTeam starts the g-1 workers of a team of g (at least 1) and returns
// once they all run.
func NewTeam(g int) *Team {
	t := &Team{g: max(g, 1)}
	t.yield = runtime.GOMAXPROCS(0) < t.g
	var up atomic.Int32
	for w := 1; w < t.g; w++ {
		t.wg.Go(func() {
			up.Add(1)
			var seen uint64
			for {
				gen := t.gen.Load()
				if gen == seen {
					t.spin()
					continue
				}
				if gen&1 != 0 {
					return
				}
				seen = gen
				k := t.n / t.g
				base := w * 997
				for i := range k {
					t.op(w, base+i)
				}
				t.done.Add(1)
			}
		})
	}
	for up.Load() < int32(t.g-1) {
		runtime.Gosched()
	}
	return t
}

// Run runs n operations op(w, i) on the team, n/g each (the caller's
// share, w 0, takes the remainder); goroutine w starts at its own index so
// that they touch different traces at any moment. It returns the block's
// time.
func (t *Team) Run(n int, op func(w, i int)) time.Duration {
	t.n, t.op = n, op
	t.done.Store(0)
	t0 := time.Now()
	t.gen.Add(2) // publishes n and op
	for i := range n/t.g + n%t.g {
		op(0, i)
	}
	for t.done.Load() < int32(t.g-1) {
		t.spin()
	}
	return time.Since(t0)
}

// spin is one turn of a wait: nothing, or a yield if the team has fewer
// Ps than goroutines.
func (t *Team) spin() {
	if t.yield {
		runtime.Gosched()
	}
}

// Close stops the team's workers.
func (t *Team) Close() {
	t.gen.Add(1)
	t.wg.Wait()
}

// HitOp saves stored trace i into s (a store from NewFilled): a hit.
func HitOp(s Store) func(w, i int) {
	set, _ := DepotTraceSet()
	return func(w, i int) { s.Save(w, set[i%DepotTraces]) }
}

// MissOp saves fresh traces into s (a store from NewFilled), goroutine w
// of g taking its own MissRound/g of them: MissRound operations are all
// misses, then s must be rebuilt.
func MissOp(s Store, g int) func(w, i int) {
	_, fr := DepotTraceSet()
	per := MissRound / max(g, 1)
	return func(w, i int) { s.Save(w, fr[w*per+(i-w*997)%per]) }
}

// FetchOp fetches stored trace i from s (a store from NewFilled) into a
// reused buffer of goroutine w of g.
func FetchOp(s Store, g int) func(w, i int) {
	set, _ := DepotTraceSet()
	hs := make([]uint32, len(set))
	for i, tr := range set {
		hs[i] = s.Save(0, tr)
	}
	// One buffer per goroutine, its slice header alone on a cache line:
	// adjacent headers written by every fetch would make the goroutines
	// share a line and time that instead of the stores.
	type paddedBuf struct {
		b []uint64
		_ [40]byte
	}
	bufs := make([]paddedBuf, max(g, 1))
	for i := range bufs {
		bufs[i].b = make([]uint64, 0, DepotDepth)
	}
	return func(w, i int) { bufs[w].b = s.Fetch(w, hs[i%DepotTraces], bufs[w].b[:0]) }
}

// HashOp hashes stored trace i alone, with the function the depot uses
// (depot.HashKey.Sum): the depot's floor.
func HashOp(g int) func(w, i int) {
	set, _ := DepotTraceSet()
	k := depot.HashKey{Seed: 0x243f6a8885a308d3, Mul: 0x13198a2e03707345}
	sinks := make([]uint64, max(g, 1)*8) // a cache line apart
	return func(w, i int) { sinks[w*8] += uint64(k.Sum(set[i%DepotTraces])) }
}

// MapHashOp hashes stored trace i with maphash.Comparable over its bytes
// (the runtime's memhash, what a map[string] uses, and the depot's hash
// before HashKey): a reference for HashOp.
func MapHashOp(g int) func(w, i int) {
	set, _ := DepotTraceSet()
	seed := maphash.MakeSeed()
	sinks := make([]uint64, max(g, 1)*8) // a cache line apart
	return func(w, i int) { sinks[w*8] += maphash.Comparable(seed, traceString(set[i%DepotTraces])) }
}

// ProducerHitOp saves stored trace i into d (holding the stored set) with
// the producer's hash (Depot.SaveHashed given the trace's Hash, computed
// beforehand as an unwinder computes it while it walks): the depot's hit
// in the one-pass path.
func ProducerHitOp(d *depot.Depot) func(w, i int) {
	set, _ := DepotTraceSet()
	k := d.HashKey()
	hs := make([]depot.Hash, len(set))
	for i, tr := range set {
		hs[i] = k.Sum(tr)
	}
	return func(_, i int) {
		if _, err := d.SaveHashed(set[i%DepotTraces], hs[i%DepotTraces]); err != nil {
			panic(err)
		}
	}
}

// ProducerHit is SaveHit for the depot with the producer's hash
// (ProducerHitOp on the depot peer, filled), b.N saves split between g
// goroutines.
func ProducerHit(b *testing.B, g int) {
	op := ProducerHitOp(mustFilled(b, DepotPeers[0], g).(depotStore).d)
	b.ReportAllocs()
	runB(b, g, op)
}

// SaveHit saves traces the store already holds (the common case: the same
// allocation and free sites recur), b.N saves split between g goroutines
// running at once: ns/op is wall time per save.
func SaveHit(b *testing.B, p Peer, g int) {
	op := HitOp(mustFilled(b, p, g))
	b.ReportAllocs()
	runB(b, g, op)
}

// SaveMiss saves traces never seen before into a store that holds the
// stored set: rounds of MissRound fresh traces, the store rebuilt (timer
// stopped) between rounds.
func SaveMiss(b *testing.B, p Peer, g int) {
	t := NewTeam(g)
	defer t.Close()
	b.ResetTimer()
	for done := 0; done < b.N; done += MissRound {
		b.StopTimer()
		op := MissOp(mustFilled(b, p, g), g)
		b.StartTimer()
		t.Run(min(MissRound, b.N-done), op)
	}
	b.StopTimer()
}

// runB runs b.N operations op on a team of g, timed from the first
// operation to the last: the team is started and stopped with the timer
// off.
func runB(b *testing.B, g int, op func(w, i int)) {
	t := NewTeam(g)
	defer t.Close()
	b.ResetTimer()
	t.Run(b.N, op)
	b.StopTimer()
}

// Fetch copies a stored trace into a reused buffer per goroutine.
func Fetch(b *testing.B, p Peer, g int) {
	op := FetchOp(mustFilled(b, p, g), g)
	b.ReportAllocs()
	runB(b, g, op)
}

// Hash is the depot's floor: hashing each trace alone (HashOp).
func Hash(b *testing.B, g int) {
	op := HashOp(g)
	runB(b, g, op)
}

// PlainMapHit is a floor for SaveHit on one goroutine: PlainMapOp, b.N
// lookups.
func PlainMapHit(b *testing.B) {
	op := PlainMapOp()
	b.ReportAllocs()
	runB(b, 1, op)
}

// PlainMapOp looks stored trace i up in a map[string]uint32 with no lock at
// all: the hash, the probe and the compare of the same bytes, and nothing
// else. Concurrent lookups are safe (the map is never written after it is
// built), but such a map could not take a save: it is a floor, not a peer.
func PlainMapOp() func(w, i int) {
	set, _ := DepotTraceSet()
	m := make(map[string]uint32, len(set))
	for i, tr := range set {
		m[traceString(slices.Clone(tr))] = uint32(i + 1)
	}
	return func(_, i int) {
		if m[traceString(set[i%DepotTraces])] == 0 {
			panic("benchbody: a stored trace is missing from the plain map")
		}
	}
}

// traceString views a trace's frames as a string, without copying.
func traceString(t []uint64) string {
	return unsafe.String((*byte)(unsafe.Pointer(unsafe.SliceData(t))), 8*len(t))
}

// The peers are what a Go programmer would write instead of a depot. Both
// key by the trace's bytes as a string, built without allocating on
// lookup, store a handle on save and give the trace back on fetch, copying
// its frames into the caller's buffer as depot.Depot.Fetch does. Their
// records are persistent, like the depot records they are compared with.

// MutexPeer is a map[string]uint32 and a slice of traces by handle, behind
// one mutex. Handle 0 is unused.
type MutexPeer struct {
	mu     sync.Mutex
	m      map[string]uint32
	traces [][]uint64
}

// NewMutexPeer returns an empty MutexPeer.
func NewMutexPeer() *MutexPeer {
	return &MutexPeer{m: map[string]uint32{}, traces: [][]uint64{nil}}
}

// Save returns t's handle, storing a copy of t if it is new.
func (m *MutexPeer) Save(_ int, t []uint64) uint32 {
	m.mu.Lock()
	defer m.mu.Unlock()
	if h, ok := m.m[traceString(t)]; ok { // the compiler makes no copy for a lookup
		return h
	}
	c := append([]uint64(nil), t...)
	h := uint32(len(m.traces))
	m.traces = append(m.traces, c)
	m.m[traceString(c)] = h
	return h
}

// Fetch appends the trace stored under h to dst.
func (m *MutexPeer) Fetch(_ int, h uint32, dst []uint64) []uint64 {
	m.mu.Lock()
	tr := m.traces[h]
	m.mu.Unlock()
	return append(dst, tr...) // stored traces never change: copy outside the lock
}

// SyncPeer is two sync.Maps: trace bytes to handle, handle to trace.
type SyncPeer struct {
	byTrace  sync.Map // string → uint32
	byHandle sync.Map // uint32 → []uint64
	next     atomic.Uint32
	keys     []syncKeys // per goroutine
}

// NewSyncPeer returns an empty SyncPeer for up to workers goroutines.
func NewSyncPeer(workers int) *SyncPeer {
	return &SyncPeer{keys: make([]syncKeys, max(workers, 1))}
}

// A sync.Map key is an interface; converting a string or a uint32 to one
// allocates. A lookup key is boxed instead by pointing an interface at a
// goroutine's own variable: the maps compare and hash the value it points
// at and keep no reference to a key they only look up.

func anyString(p *string) any {
	var k any = ""
	(*[2]unsafe.Pointer)(unsafe.Pointer(&k))[1] = unsafe.Pointer(p)
	return k
}

func anyUint32(p *uint32) any {
	var k any = uint32(0)
	(*[2]unsafe.Pointer)(unsafe.Pointer(&k))[1] = unsafe.Pointer(p)
	return k
}

// syncKeys holds one goroutine's lookup keys, padded to a cache line.
type syncKeys struct {
	s string
	h uint32
	_ [64]byte
}

// Save returns t's handle, storing a copy of t if it is new.
func (m *SyncPeer) Save(w int, t []uint64) uint32 {
	k := &m.keys[w]
	k.s = traceString(t)
	if h, ok := m.byTrace.Load(anyString(&k.s)); ok {
		return h.(uint32)
	}
	c := append([]uint64(nil), t...)
	h := m.next.Add(1)
	m.byHandle.Store(h, c)
	if old, loaded := m.byTrace.LoadOrStore(traceString(c), h); loaded {
		m.byHandle.Delete(h)
		return old.(uint32)
	}
	return h
}

// Fetch appends the trace stored under h to dst.
func (m *SyncPeer) Fetch(w int, h uint32, dst []uint64) []uint64 {
	k := &m.keys[w]
	k.h = h
	v, _ := m.byHandle.Load(anyUint32(&k.h))
	tr, _ := v.([]uint64)
	return append(dst, tr...)
}
