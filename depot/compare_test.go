package depot_test

import (
	"slices"
	"testing"
	"time"

	"github.com/unwindkit/unwindkit/internal/benchbody"
)

// BenchmarkCompare measures the depot, its two peers and the hash floor
// side by side: blocks of operations, one block per contender in
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
	peers := benchbody.DepotPeers
	for _, row := range []string{"hit", "miss", "fetch"} {
		// A block must be long enough that the second goroutine's wake-up
		// (tens of µs on this VM) does not serialise the two: 131,072 hits
		// or fetches (each stored trace 32 times), or a whole round of
		// misses (MissRound, all fresh).
		block := 32 * benchbody.DepotTraces
		if row == "miss" {
			block = benchbody.MissRound
		}
		for _, g := range goroutines {
			b.Run(row+"/"+g.name, func(b *testing.B) {
				ops := make([]func(w, i int), len(peers))
				if row != "miss" {
					for k, p := range peers {
						s, err := benchbody.NewFilled(p, g.g)
						if err != nil {
							b.Fatal(err)
						}
						if row == "hit" {
							ops[k] = benchbody.HitOp(s)
						} else {
							ops[k] = benchbody.FetchOp(s, g.g)
						}
					}
				}
				hash := benchbody.HashOp(g.g)
				// peer k's block; k == len(peers) is the hash floor.
				blockOf := func(k int) time.Duration {
					op := hash
					if k < len(peers) {
						op = ops[k]
					}
					if row == "miss" {
						s, err := benchbody.NewFilled(peers[k], g.g) // rebuilt untimed
						if err != nil {
							b.Fatal(err)
						}
						op = benchbody.MissOp(s, g.g)
					}
					t0 := time.Now()
					benchbody.Run(g.g, block, op)
					return time.Since(t0)
				}
				n := len(peers) + 1
				if row != "hit" {
					n = len(peers) // the hash floor is reported with the hits
				}
				ns := make([][]float64, n)
				ratios := make([][]float64, n)
				round := 0
				for b.Loop() {
					times := make([]time.Duration, n)
					for j := range n {
						k := (round + j) % n
						times[k] = blockOf(k)
						ns[k] = append(ns[k], float64(times[k].Nanoseconds())/float64(block))
					}
					for k := 1; k < n; k++ {
						ratios[k] = append(ratios[k], float64(times[k])/float64(times[0]))
					}
					round++
				}
				for k := range n {
					name := "hash"
					if k < len(peers) {
						name = peers[k].Name
					}
					b.ReportMetric(median(ns[k]), name+"-ns/op")
					if k > 0 {
						b.ReportMetric(median(ratios[k]), name+"/depot")
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
