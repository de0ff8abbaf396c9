package depot_test

import (
	"testing"

	"github.com/unwindkit/unwindkit/internal/benchbody"
)

// Benchmarks: the depot against its peers (a map behind a mutex, a
// sync.Map) on 4,096 distinct 32-frame traces, at the default
// configuration with hit counting on, on one goroutine (g1) and on two
// (g2, the b.N operations split between two goroutines running at once,
// so ns/op is wall time per operation). hash/ is one floor: hashing the
// trace alone, with the function the depot uses; plainmap/ is the other:
// a map[string] lookup of the same bytes with no lock. The bodies are
// package internal/benchbody's, the ones examples/compare runs for the
// README.
//
//	go test -run '^$' -bench . -count 6 ./depot

var goroutines = []struct {
	name string
	g    int
}{{"g1", 1}, {"g2", 2}}

func each(b *testing.B, body func(*testing.B, benchbody.Peer, int)) {
	for _, p := range benchbody.DepotPeers {
		for _, g := range goroutines {
			b.Run(p.Name+"/"+g.name, func(b *testing.B) { body(b, p, g.g) })
		}
	}
}

// BenchmarkSaveHit saves traces that are already stored (the common case:
// the same allocation and free sites recur).
func BenchmarkSaveHit(b *testing.B) {
	each(b, benchbody.SaveHit)
	for _, g := range goroutines {
		b.Run("hash/"+g.name, func(b *testing.B) { benchbody.Hash(b, g.g) })
	}
	b.Run("plainmap/g1", benchbody.PlainMapHit)
}

// BenchmarkSaveMiss saves traces never seen before into a store that holds
// the 4,096: rounds of 8,192 fresh traces, the store rebuilt (timer
// stopped) between rounds.
func BenchmarkSaveMiss(b *testing.B) { each(b, benchbody.SaveMiss) }

// BenchmarkFetch copies a stored trace into a reused buffer.
func BenchmarkFetch(b *testing.B) { each(b, benchbody.Fetch) }
