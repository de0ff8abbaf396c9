package depot

import (
	"sync"
	"testing"
)

// Benchmarks: the depot against its peers (peers_test.go) on 4,096
// distinct 32-frame traces, at the default configuration with hit counting
// on, on one goroutine (g1) and on two (g2, the b.N operations split
// between two goroutines running at once, so ns/op is wall time per
// operation). hash/ is the floor: hashing the trace alone, with the
// function the depot uses.
//
//	go test -run '^$' -bench . -count 6 ./depot

const (
	benchTraces = 4096
	benchDepth  = 32
	missRound   = 8192 // misses per round; the stores are rebuilt between rounds
)

var (
	benchOnce sync.Once
	benchSet  [][]uint64 // stored traces
	benchNew  [][]uint64 // traces never stored, for misses
)

func benchData() ([][]uint64, [][]uint64) {
	benchOnce.Do(func() {
		all := genTraces(benchTraces+missRound, benchDepth, 42)
		benchSet, benchNew = all[:benchTraces], all[benchTraces:]
	})
	return benchSet, benchNew
}

// contender is one store under test: save and fetch for goroutine w.
type contender struct {
	name  string
	fill  func() // a fresh store holding benchSet
	save  func(w int, tr []uint64) uint32
	fetch func(w int, h uint32, dst []uint64) []uint64
}

func contenders(b *testing.B) []contender {
	set, _ := benchData()
	var d *Depot
	var mp *mutexPeer
	var sp *syncPeer
	keys := make([]syncKeys, 2)
	return []contender{
		{
			name: "depot",
			fill: func() {
				d = mustNew(b, Config{}) // the default configuration, hit counting on
				for _, tr := range set {
					if _, err := d.Save(tr); err != nil {
						b.Fatal(err)
					}
				}
			},
			save: func(_ int, tr []uint64) uint32 {
				h, err := d.Save(tr)
				if err != nil {
					panic(err)
				}
				return uint32(h)
			},
			fetch: func(_ int, h uint32, dst []uint64) []uint64 {
				dst, err := d.Fetch(Handle(h), dst)
				if err != nil {
					panic(err)
				}
				return dst
			},
		},
		{
			name: "mutexmap",
			fill: func() {
				mp = newMutexPeer()
				for _, tr := range set {
					mp.save(tr)
				}
			},
			save:  func(_ int, tr []uint64) uint32 { return mp.save(tr) },
			fetch: func(_ int, h uint32, dst []uint64) []uint64 { return mp.fetch(h, dst) },
		},
		{
			name: "syncmap",
			fill: func() {
				sp = &syncPeer{}
				for _, tr := range set {
					sp.save(tr, &keys[0])
				}
			},
			save:  func(w int, tr []uint64) uint32 { return sp.save(tr, &keys[w]) },
			fetch: func(w int, h uint32, dst []uint64) []uint64 { return sp.fetch(h, dst, &keys[w]) },
		},
	}
}

// run runs n operations op(w, i) on g goroutines; goroutine w starts at
// its own index so that the two touch different traces at any moment.
func run(g, n int, op func(w, i int)) {
	if g == 1 {
		for i := range n {
			op(0, i)
		}
		return
	}
	var wg sync.WaitGroup
	for w := range g {
		k := n / g
		if w == 0 {
			k += n % g
		}
		wg.Go(func() {
			base := w * 997
			for i := range k {
				op(w, base+i)
			}
		})
	}
	wg.Wait()
}

var goroutines = []struct {
	name string
	g    int
}{{"g1", 1}, {"g2", 2}}

// BenchmarkSaveHit saves traces that are already stored (the common case:
// the same allocation and free sites recur).
func BenchmarkSaveHit(b *testing.B) {
	set, _ := benchData()
	for _, c := range contenders(b) {
		for _, g := range goroutines {
			b.Run(c.name+"/"+g.name, func(b *testing.B) {
				c.fill()
				b.ResetTimer()
				run(g.g, b.N, func(w, i int) { c.save(w, set[i%benchTraces]) })
			})
		}
	}
	d := mustNew(b, Config{})
	var sinks [2]uint64
	for _, g := range goroutines {
		b.Run("hash/"+g.name, func(b *testing.B) {
			run(g.g, b.N, func(w, i int) { sinks[w] += hashWords(d, set[i%benchTraces]) })
		})
	}
}

// BenchmarkSaveMiss saves traces never seen before into a store that holds
// the 4,096: rounds of 8,192 fresh traces, the store rebuilt (timer
// stopped) between rounds.
func BenchmarkSaveMiss(b *testing.B) {
	_, fresh := benchData()
	for _, c := range contenders(b) {
		for _, g := range goroutines {
			b.Run(c.name+"/"+g.name, func(b *testing.B) {
				b.ResetTimer()
				for done := 0; done < b.N; done += missRound {
					b.StopTimer()
					c.fill()
					b.StartTimer()
					n := min(missRound, b.N-done)
					per := missRound / g.g
					run(g.g, n, func(w, i int) { c.save(w, fresh[w*per+(i-w*997)%per]) })
				}
			})
		}
	}
}

// BenchmarkFetch copies a stored trace into a reused buffer.
func BenchmarkFetch(b *testing.B) {
	set, _ := benchData()
	for _, c := range contenders(b) {
		for _, g := range goroutines {
			b.Run(c.name+"/"+g.name, func(b *testing.B) {
				c.fill()
				hs := make([]uint32, len(set))
				for i, tr := range set {
					hs[i] = c.save(0, tr)
				}
				bufs := [2][]uint64{make([]uint64, 0, benchDepth), make([]uint64, 0, benchDepth)}
				b.ResetTimer()
				run(g.g, b.N, func(w, i int) { bufs[w] = c.fetch(w, hs[i%benchTraces], bufs[w][:0]) })
			})
		}
	}
}
