package depot_test

import (
	"math"
	"slices"
	"testing"
	"time"

	"github.com/unwindkit/unwindkit/depot"
	"github.com/unwindkit/unwindkit/internal/benchbody"
)

// BenchmarkCompare measures the depot, its two peers and some floors side
// by side: blocks of operations, one block per contender in turn (the
// order rotates every round), so that all see the same machine load within
// a few milliseconds. It reports the median ns/op of each contender's
// blocks and, per contender, the median over rounds of its block time over
// the depot's block time in the same round: above 1 the depot is faster.
// Rows: hit (Save of a stored trace), miss (Save of a never-seen trace
// into a store holding the 4,096, rebuilt untimed before each block) and
// fetch; g1 on one goroutine, g2 on two at once.
//
// For hits, producer is the depot's Save hit with the producer's hash
// (SaveHashed given each trace's Hash, as an unwinder that hashes while it
// walks passes it): its peer/producer is the better peer's time over its
// own, the speed-up of the one-pass path.
//
// The floors are not peers: they show where the depot's time goes. For
// hits: hash (hashing the trace alone, as the depot and a map[string] do),
// nohash (the depot's hit given the hash: probe, compare, state check and
// hit count) and plainmap (a map[string] lookup with no lock, not safe
// for concurrent writes). For fetches: unchecked (the pool, the frame
// count and the copy, trusting the handle). Each floor's peer/<floor> is
// the better peer's time (the faster of the two in each round) over the
// floor's: what the depot's ratio would be if it did only what the floor
// does.
//
//	go test -run '^$' -bench Compare -count 5 ./depot
func BenchmarkCompare(b *testing.B) {
	for _, row := range []string{"hit", "miss", "fetch"} {
		// A block: 131,072 hits or fetches (each stored trace 32 times),
		// or a whole round of misses (MissRound, all fresh), run by a
		// benchbody.Team whose second goroutine spins between blocks, so
		// that the two run at once from the block's first operation.
		block := 32 * benchbody.DepotTraces
		if row == "miss" {
			block = benchbody.MissRound
		}
		for _, g := range goroutines {
			b.Run(row+"/"+g.name, func(b *testing.B) {
				cs := contenders(b, row, g.g)
				team := benchbody.NewTeam(g.g)
				defer team.Close()
				blockOf := func(c contender) time.Duration {
					op := c.op
					if op == nil {
						op = c.fresh() // rebuilt untimed
					}
					return team.Run(block, op)
				}
				interleave(b, cs, blockOf, block)
			})
		}
	}
}

// A contender is one store's (or floor's) operation: op, or for misses a
// fresh op on a newly filled store before each block.
type contender struct {
	name  string
	op    func(w, i int)
	fresh func() func(w, i int)
	floor bool
}

// contenders returns row's contenders on g goroutines: the depot first,
// then its peers, then the floors.
func contenders(b *testing.B, row string, g int) []contender {
	var cs []contender
	for _, p := range benchbody.DepotPeers {
		c := contender{name: p.Name}
		if row == "miss" {
			c.fresh = func() func(w, i int) {
				s, err := benchbody.NewFilled(p, g)
				if err != nil {
					b.Fatal(err)
				}
				return benchbody.MissOp(s, g)
			}
		} else {
			s, err := benchbody.NewFilled(p, g)
			if err != nil {
				b.Fatal(err)
			}
			c.op = benchbody.HitOp(s)
			if row == "fetch" {
				c.op = benchbody.FetchOp(s, g)
			}
		}
		cs = append(cs, c)
	}
	if row == "miss" {
		return cs
	}
	set, _ := benchbody.DepotTraceSet()
	d, err := depot.New(depot.Config{}) // the depot peer's configuration
	if err != nil {
		b.Fatal(err)
	}
	hashes := make([]uint64, len(set))
	handles := make([]depot.Handle, len(set))
	for i, tr := range set {
		if handles[i], err = d.Save(tr); err != nil {
			b.Fatal(err)
		}
		if hashes[i], err = depot.HashOf(d, handles[i]); err != nil {
			b.Fatal(err)
		}
	}
	n := benchbody.DepotTraces
	if row == "fetch" {
		bufs := make([][64]uint64, max(g, 1)) // a buffer per goroutine, a line apart
		return append(cs, contender{name: "unchecked", floor: true, op: func(w, i int) {
			depot.FetchUnchecked(d, handles[i%n], bufs[w][:0])
		}})
	}
	var sinks [2][8]uint64
	hash := benchbody.HashOp(g)
	nohash := func(w, i int) {
		h, ok := depot.HitHashed(d, set[i%n], hashes[i%n])
		if !ok {
			panic("not a hit")
		}
		sinks[w&1][0] += uint64(h)
	}
	plain := benchbody.PlainMapOp()
	producer := benchbody.ProducerHitOp(d)
	return append(cs, contender{name: "producer", op: producer, floor: true},
		contender{name: "hash", op: hash, floor: true},
		contender{name: "maphash", op: benchbody.MapHashOp(g), floor: true},
		contender{name: "nohash", op: nohash, floor: true},
		contender{name: "plainmap", op: plain, floor: true})
}

// interleave runs one block of each contender per b.Loop round, rotating
// the order, and reports the medians: each contender's ns/op, its time
// over the depot's (cs[0]) and, for floors, the better peer's time over
// the floor's.
func interleave(b *testing.B, cs []contender, blockOf func(contender) time.Duration, block int) {
	n := len(cs)
	ns := make([][]float64, n)
	overDepot := make([][]float64, n)
	peerOver := make([][]float64, n)
	round := 0
	for b.Loop() {
		times := make([]time.Duration, n)
		for j := range n {
			k := (round + j) % n
			times[k] = blockOf(cs[k])
			ns[k] = append(ns[k], float64(times[k].Nanoseconds())/float64(block))
		}
		better := time.Duration(math.MaxInt64)
		for k := 1; k < n; k++ {
			if !cs[k].floor {
				better = min(better, times[k])
			}
		}
		for k := 1; k < n; k++ {
			overDepot[k] = append(overDepot[k], float64(times[k])/float64(times[0]))
			peerOver[k] = append(peerOver[k], float64(better)/float64(times[k]))
		}
		round++
	}
	for k, c := range cs {
		b.ReportMetric(median(ns[k]), c.name+"-ns/op")
		if k > 0 {
			b.ReportMetric(median(overDepot[k]), c.name+"/depot")
		}
		if c.floor {
			b.ReportMetric(median(peerOver[k]), "peer/"+c.name)
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
