package depot

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"unsafe"
)

// mapDepot is the baseline: a Go map keyed by the trace bytes, behind one
// mutex, with the traces kept in a slice indexed by handle. Like the depot
// it has persistent entries (save) and refcounted ones (saveRef, put).
type mapDepot struct {
	mu     sync.Mutex
	m      map[string]uint32
	traces [][]uint64
	refs   []int // -1: persistent
	free   []uint32
}

func newMapDepot() *mapDepot {
	return &mapDepot{m: map[string]uint32{}, traces: [][]uint64{nil}, refs: []int{0}}
}

func traceBytes(t []uint64) []byte {
	if len(t) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&t[0])), 8*len(t))
}

func (m *mapDepot) save(t []uint64) uint32 { return m.saveFlags(t, false) }

func (m *mapDepot) saveRef(t []uint64) uint32 { return m.saveFlags(t, true) }

func (m *mapDepot) saveFlags(t []uint64, ref bool) uint32 {
	m.mu.Lock()
	defer m.mu.Unlock()
	if h, ok := m.m[string(traceBytes(t))]; ok { // no allocation: map index by string(bytes)
		if m.refs[h] >= 0 {
			if ref {
				m.refs[h]++
			} else {
				m.refs[h] = -1
			}
		}
		return h
	}
	c := append([]uint64(nil), t...)
	var h uint32
	if n := len(m.free); n > 0 {
		h, m.free = m.free[n-1], m.free[:n-1]
		m.traces[h] = c
	} else {
		h = uint32(len(m.traces))
		m.traces = append(m.traces, c)
		m.refs = append(m.refs, 0)
	}
	m.refs[h] = -1
	if ref {
		m.refs[h] = 1
	}
	m.m[string(traceBytes(c))] = h
	return h
}

func (m *mapDepot) put(h uint32) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.refs[h] < 0 {
		return
	}
	if m.refs[h]--; m.refs[h] > 0 {
		return
	}
	delete(m.m, string(traceBytes(m.traces[h])))
	m.traces[h] = nil
	m.free = append(m.free, h)
}

func (m *mapDepot) fetch(h uint32, dst []uint64) []uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append(dst, m.traces[h]...)
}

const (
	benchTraces = 4096
	benchDepth  = 32
)

var (
	benchOnce sync.Once
	benchSet  [][]uint64 // stored traces
	benchNew  [][]uint64 // traces not stored, for misses
)

func benchData() ([][]uint64, [][]uint64) {
	benchOnce.Do(func() {
		all := genTraces(2*benchTraces, benchDepth, 42)
		benchSet, benchNew = all[:benchTraces], all[benchTraces:]
	})
	return benchSet, benchNew
}

// setPar makes RunParallel use at least two goroutines.
func setPar(b *testing.B) {
	if runtime.GOMAXPROCS(0) < 2 {
		b.SetParallelism(2)
	}
}

func benchDepot(b *testing.B) (*Depot, []Handle) {
	return benchDepotCfg(b, Config{MaxPools: 64})
}

func benchDepotCfg(b *testing.B, cfg Config) (*Depot, []Handle) {
	set, _ := benchData()
	d := mustNew(b, cfg)
	hs := make([]Handle, len(set))
	for i, tr := range set {
		h, err := d.Save(tr)
		if err != nil {
			b.Fatal(err)
		}
		hs[i] = h
	}
	return d, hs
}

func benchMap() (*mapDepot, []uint32) {
	set, _ := benchData()
	m := newMapDepot()
	hs := make([]uint32, len(set))
	for i, tr := range set {
		hs[i] = m.save(tr)
	}
	return m, hs
}

// parallel runs body in b.RunParallel; each goroutine starts at its own
// index so that goroutines touch different traces at any moment. The "g2"
// benchmarks use it: RunParallel runs GOMAXPROCS goroutines (two on the
// 2-CPU CI machine, and at least two here).
var parStart atomic.Uint32

func parallel(b *testing.B, body func(i int)) {
	setPar(b)
	b.RunParallel(func(pb *testing.PB) {
		i := int(parStart.Add(997))
		for pb.Next() {
			body(i)
			i++
		}
	})
}

// BenchmarkSaveHit saves traces that are already stored (the common case:
// the same allocation and free sites recur).
func BenchmarkSaveHit(b *testing.B) {
	set, _ := benchData()
	b.Run("depot/g1", func(b *testing.B) {
		d, _ := benchDepot(b)
		i := 0
		for b.Loop() {
			if _, err := d.Save(set[i%benchTraces]); err != nil {
				b.Fatal(err)
			}
			i++
		}
	})
	b.Run("depot/g2", func(b *testing.B) {
		d, _ := benchDepot(b)
		parallel(b, func(i int) {
			if _, err := d.Save(set[i%benchTraces]); err != nil {
				panic(err)
			}
		})
	})
	b.Run("depot-nocount/g1", func(b *testing.B) {
		d, _ := benchDepotCfg(b, Config{MaxPools: 64, NoHitCount: true})
		i := 0
		for b.Loop() {
			if _, err := d.Save(set[i%benchTraces]); err != nil {
				b.Fatal(err)
			}
			i++
		}
	})
	b.Run("depot-nocount/g2", func(b *testing.B) {
		d, _ := benchDepotCfg(b, Config{MaxPools: 64, NoHitCount: true})
		parallel(b, func(i int) {
			if _, err := d.Save(set[i%benchTraces]); err != nil {
				panic(err)
			}
		})
	})
	b.Run("map/g1", func(b *testing.B) {
		m, _ := benchMap()
		i := 0
		for b.Loop() {
			m.save(set[i%benchTraces])
			i++
		}
	})
	b.Run("map/g2", func(b *testing.B) {
		m, _ := benchMap()
		parallel(b, func(i int) { m.save(set[i%benchTraces]) })
	})
	b.Run("hashonly/g1", func(b *testing.B) {
		var sink uint64
		i := 0
		for b.Loop() {
			sink += hashTrace(1, set[i%benchTraces])
			i++
		}
		_ = sink
	})
	b.Run("hashonly/g2", func(b *testing.B) {
		parallel(b, func(i int) { hashTrace(1, set[i%benchTraces]) })
	})
}

// BenchmarkSaveMiss saves a trace that is not stored, with a reference, and
// drops the reference: one insert and one eviction per op, so the depot
// stays at 4096 stored traces plus the freelist.
func BenchmarkSaveMiss(b *testing.B) {
	_, fresh := benchData()
	b.Run("depot/g1", func(b *testing.B) {
		d, _ := benchDepot(b)
		i := 0
		for b.Loop() {
			h, err := d.SaveFlags(fresh[i%benchTraces], FlagGet)
			if err != nil {
				b.Fatal(err)
			}
			_ = d.Put(h)
			i++
		}
	})
	b.Run("depot/g2", func(b *testing.B) {
		d, _ := benchDepot(b)
		parallel(b, func(i int) {
			h, err := d.SaveFlags(fresh[i%benchTraces], FlagGet)
			if err != nil {
				panic(err)
			}
			_ = d.Put(h)
		})
	})
	b.Run("map/g1", func(b *testing.B) {
		m, _ := benchMap()
		i := 0
		for b.Loop() {
			m.put(m.saveRef(fresh[i%benchTraces]))
			i++
		}
	})
	b.Run("map/g2", func(b *testing.B) {
		m, _ := benchMap()
		parallel(b, func(i int) { m.put(m.saveRef(fresh[i%benchTraces])) })
	})
}

// BenchmarkSaveMix is a realistic mix: 15 of 16 saves hit, 1 misses (and
// its record is evicted again).
func BenchmarkSaveMix(b *testing.B) {
	set, fresh := benchData()
	b.Run("depot/g1", func(b *testing.B) {
		d, _ := benchDepot(b)
		i := 0
		for b.Loop() {
			if i%16 == 15 {
				h, _ := d.SaveFlags(fresh[i%benchTraces], FlagGet)
				_ = d.Put(h)
			} else {
				_, _ = d.Save(set[i%benchTraces])
			}
			i++
		}
	})
	b.Run("depot/g2", func(b *testing.B) {
		d, _ := benchDepot(b)
		parallel(b, func(i int) {
			if i%16 == 15 {
				h, _ := d.SaveFlags(fresh[i%benchTraces], FlagGet)
				_ = d.Put(h)
			} else {
				_, _ = d.Save(set[i%benchTraces])
			}
		})
	})
	b.Run("map/g1", func(b *testing.B) {
		m, _ := benchMap()
		i := 0
		for b.Loop() {
			if i%16 == 15 {
				m.put(m.saveRef(fresh[i%benchTraces]))
			} else {
				m.save(set[i%benchTraces])
			}
			i++
		}
	})
	b.Run("map/g2", func(b *testing.B) {
		m, _ := benchMap()
		parallel(b, func(i int) {
			if i%16 == 15 {
				m.put(m.saveRef(fresh[i%benchTraces]))
			} else {
				m.save(set[i%benchTraces])
			}
		})
	})
}

// BenchmarkFetch copies a stored trace into a reused buffer.
func BenchmarkFetch(b *testing.B) {
	b.Run("depot/g1", func(b *testing.B) {
		d, hs := benchDepot(b)
		buf := make([]uint64, 0, benchDepth)
		i := 0
		for b.Loop() {
			var err error
			if buf, err = d.Fetch(hs[i%benchTraces], buf[:0]); err != nil {
				b.Fatal(err)
			}
			i++
		}
	})
	b.Run("depot/g2", func(b *testing.B) {
		d, hs := benchDepot(b)
		setPar(b)
		b.RunParallel(func(pb *testing.PB) {
			buf := make([]uint64, 0, benchDepth)
			i := int(parStart.Add(997))
			for pb.Next() {
				buf, _ = d.Fetch(hs[i%benchTraces], buf[:0])
				i++
			}
		})
	})
	b.Run("map/g1", func(b *testing.B) {
		m, hs := benchMap()
		buf := make([]uint64, 0, benchDepth)
		i := 0
		for b.Loop() {
			buf = m.fetch(hs[i%benchTraces], buf[:0])
			i++
		}
	})
	b.Run("map/g2", func(b *testing.B) {
		m, hs := benchMap()
		setPar(b)
		b.RunParallel(func(pb *testing.PB) {
			buf := make([]uint64, 0, benchDepth)
			i := int(parStart.Add(997))
			for pb.Next() {
				buf = m.fetch(hs[i%benchTraces], buf[:0])
				i++
			}
		})
	})
}

// BenchmarkBytesPerTrace reports the memory cost of the 4096 stored traces:
// record bytes, with the bucket table, and whole pools with the table.
func BenchmarkBytesPerTrace(b *testing.B) {
	set, _ := benchData()
	var st Stats
	for b.Loop() {
		d := mustNew(b, Config{MaxPools: 64})
		for _, tr := range set {
			if _, err := d.Save(tr); err != nil {
				b.Fatal(err)
			}
		}
		st = d.Stats()
	}
	n := float64(st.InUse)
	b.ReportMetric(float64(st.UsedBytes)/n, "record-B/trace")
	b.ReportMetric(float64(st.UsedBytes+st.TableBytes)/n, "B/trace")
	b.ReportMetric(float64(st.PoolBytes+st.TableBytes)/n, "pool-B/trace")
}
