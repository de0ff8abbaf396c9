package depot

import (
	"sync"
	"sync/atomic"
	"testing"
	"unsafe"
)

// The peers are what a Go programmer would write instead of a depot: a
// map[string] behind a sync.Mutex, and a sync.Map. Both key by the trace's
// bytes as a string, built without allocating on lookup, store a handle on
// save and give the trace back on fetch, copying its frames into the
// caller's buffer as Depot.Fetch does. Their records are persistent, like
// the depot records the benchmarks compare them with.

// traceString views a trace's frames as a string, without copying.
func traceString(t []uint64) string {
	return unsafe.String((*byte)(unsafe.Pointer(unsafe.SliceData(t))), 8*len(t))
}

// mutexPeer is a map[string]uint32 and a slice of traces by handle, behind
// one mutex. Handle 0 is unused.
type mutexPeer struct {
	mu     sync.Mutex
	m      map[string]uint32
	traces [][]uint64
}

func newMutexPeer() *mutexPeer {
	return &mutexPeer{m: map[string]uint32{}, traces: [][]uint64{nil}}
}

func (m *mutexPeer) save(t []uint64) uint32 {
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

func (m *mutexPeer) fetch(h uint32, dst []uint64) []uint64 {
	m.mu.Lock()
	tr := m.traces[h]
	m.mu.Unlock()
	return append(dst, tr...) // stored traces never change: copy outside the lock
}

// syncPeer is two sync.Maps: trace bytes to handle, handle to trace.
type syncPeer struct {
	byTrace  sync.Map // string → uint32
	byHandle sync.Map // uint32 → []uint64
	next     atomic.Uint32
}

// A sync.Map key is an interface; converting a string or a uint32 to one
// allocates. A lookup key is boxed instead by pointing an interface at a
// caller-owned variable: the maps compare and hash the value it points at
// and keep no reference to a key they only look up.

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

// syncKeys holds one goroutine's lookup keys.
type syncKeys struct {
	s string
	h uint32
}

func (m *syncPeer) save(t []uint64, k *syncKeys) uint32 {
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

func (m *syncPeer) fetch(h uint32, dst []uint64, k *syncKeys) []uint64 {
	k.h = h
	v, _ := m.byHandle.Load(anyUint32(&k.h))
	tr, _ := v.([]uint64)
	return append(dst, tr...)
}

// TestPeers checks that the peers are correct and that their save hits and
// fetches do not allocate, like the depot's: the benchmarks compare equal
// work.
func TestPeers(t *testing.T) {
	set := genTraces(64, 32, 5)
	mp, sp := newMutexPeer(), &syncPeer{}
	var k syncKeys
	hm, hs := map[uint32]int{}, map[uint32]int{}
	for i, tr := range set {
		hm[mp.save(tr)] = i
		hs[sp.save(tr, &k)] = i
	}
	if len(hm) != len(set) || len(hs) != len(set) {
		t.Fatalf("distinct handles: mutex %d, sync.Map %d, want %d", len(hm), len(hs), len(set))
	}
	buf := make([]uint64, 0, 32)
	for i, tr := range set {
		h1, h2 := mp.save(tr), sp.save(tr, &k)
		if hm[h1] != i || hs[h2] != i {
			t.Fatalf("trace %d: save hit gave handles of %d and %d", i, hm[h1], hs[h2])
		}
		if got := mp.fetch(h1, buf[:0]); string(u64bytes(got)) != string(u64bytes(tr)) {
			t.Fatalf("mutex peer fetch %d", i)
		}
		if got := sp.fetch(h2, buf[:0], &k); string(u64bytes(got)) != string(u64bytes(tr)) {
			t.Fatalf("sync.Map peer fetch %d", i)
		}
	}
	d := mustNew(t, Config{})
	hd, _ := d.Save(set[3])
	h1, h2 := mp.save(set[3]), sp.save(set[3], &k)
	for name, f := range map[string]func(){
		"mutex save hit":    func() { mp.save(set[3]) },
		"mutex fetch":       func() { buf = mp.fetch(h1, buf[:0]) },
		"sync.Map save hit": func() { sp.save(set[3], &k) },
		"sync.Map fetch":    func() { buf = sp.fetch(h2, buf[:0], &k) },
		"depot save hit":    func() { _, _ = d.Save(set[3]) },
		"depot fetch":       func() { buf, _ = d.Fetch(hd, buf[:0]) },
	} {
		if n := testing.AllocsPerRun(100, f); n != 0 {
			t.Errorf("%s allocates %.1f times", name, n)
		}
	}
}
