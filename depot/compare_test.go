package depot

import (
	"slices"
	"testing"
	"time"
)

// BenchmarkCompare measures the depot, its two peers and the hash floor
// side by side: blocks of 4,096 operations, one block per contender in
// turn (the order rotates every round), so that all see the same machine
// load within a few milliseconds. It reports the median ns/op of each
// contender's blocks and, per peer, the median over rounds of the peer's
// block time over the depot's block time in the same round: above 1 the
// depot is faster. Rows: hit (Save of a stored trace), miss (Save of a
// never-seen trace into a store holding the 4,096, rebuilt untimed before
// each block) and fetch; g1 on one goroutine, g2 on two at once.
//
//	go test -run '^$' -bench Compare -count 5 ./depot
func BenchmarkCompare(b *testing.B) {
	set, fresh := benchData()
	const block = benchTraces
	for _, row := range []string{"hit", "miss", "fetch"} {
		for _, g := range goroutines {
			b.Run(row+"/"+g.name, func(b *testing.B) {
				cs := contenders(b)
				hs := make([][]uint32, len(cs))
				if row != "miss" {
					for k, c := range cs {
						c.fill()
						hs[k] = make([]uint32, len(set))
						for i, tr := range set {
							hs[k][i] = c.save(0, tr)
						}
					}
				}
				d := mustNew(b, Config{})
				var sinks [2]uint64
				bufs := [2][]uint64{make([]uint64, 0, benchDepth), make([]uint64, 0, benchDepth)}
				per := block / g.g
				// contender k's block; k == len(cs) is the hash floor.
				blockOf := func(k int) time.Duration {
					if k == len(cs) {
						t0 := time.Now()
						run(g.g, block, func(w, i int) { sinks[w] += hashWords(d, set[i%benchTraces]) })
						return time.Since(t0)
					}
					c := cs[k]
					switch row {
					case "hit":
						t0 := time.Now()
						run(g.g, block, func(w, i int) { c.save(w, set[i%benchTraces]) })
						return time.Since(t0)
					case "miss":
						c.fill()
						t0 := time.Now()
						run(g.g, block, func(w, i int) { c.save(w, fresh[w*per+(i-w*997)%per]) })
						return time.Since(t0)
					default:
						t0 := time.Now()
						run(g.g, block, func(w, i int) { bufs[w] = c.fetch(w, hs[k][i%benchTraces], bufs[w][:0]) })
						return time.Since(t0)
					}
				}
				n := len(cs) + 1
				if row != "hit" {
					n = len(cs) // the hash floor is reported with the hits
				}
				ns := make([][]float64, n)
				ratios := make([][]float64, n)
				round := 0
				for b.Loop() {
					times := make([]time.Duration, n)
					for j := range n {
						k := (round + j) % n
						times[k] = blockOf(k)
						ns[k] = append(ns[k], float64(times[k].Nanoseconds())/block)
					}
					for k := 1; k < n; k++ {
						ratios[k] = append(ratios[k], float64(times[k])/float64(times[0]))
					}
					round++
				}
				names := []string{"depot", "mutexmap", "syncmap", "hash"}
				for k := range n {
					b.ReportMetric(median(ns[k]), names[k]+"-ns/op")
					if k > 0 {
						b.ReportMetric(median(ratios[k]), names[k]+"/depot")
					}
				}
			})
		}
	}
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}
