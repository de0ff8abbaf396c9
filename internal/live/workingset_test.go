//go:generate go run gencallsites.go

package live

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"
)

// csPaths returns n seeded pseudo-random paths through the generated call
// sites; 4096 of them use nearly all csLevels*csWidth return addresses.
func csPaths(n int, seed uint64) []csPath {
	r := rand.New(rand.NewPCG(seed, seed^0x5eed))
	ps := make([]csPath, n)
	for i := range ps {
		for l := range ps[i] {
			ps[i][l] = uint16(r.IntN(csWidth))
		}
	}
	return ps
}

// csCompare returns a function for the top of a generated stack that calls
// runtime.Callers and Callers on one line and records a mismatch.
func csCompare(bad *error, calls *int) func() {
	a, b := make([]uintptr, 48), make([]uintptr, 48)
	return func() {
		before := runtimeCalls.Load()
		na, nb := runtime.Callers(1, a), testCallers(0, b)
		if d := runtimeCalls.Load() - before; d > 1 && *bad == nil {
			*bad = fmt.Errorf("one Callers call made %d runtime.Callers calls", d)
		}
		*calls++
		if (na != nb || !slices.Equal(a[1:na], b[1:nb])) && *bad == nil {
			*bad = fmt.Errorf("runtime %v\nCallers %v", framesOf(a[:na]), framesOf(b[:nb]))
		}
	}
}

// countLearns counts, while it runs f, how often each address is learned.
func countLearns(f func()) map[uintptr]int {
	m := make(map[uintptr]int)
	onLearn = func(ret uintptr) { m[ret]++ }
	defer func() { onLearn = nil }()
	f()
	return m
}

// 20,000 hot return addresses fit the cache: each is learned once, each
// call makes at most one runtime.Callers call, and a second pass over the
// same stacks makes none.
func TestWorkingSetFits(t *testing.T) {
	if !Supported {
		t.Skip("no frame pointers")
	}
	resetCache()
	defer resetCache()
	paths := csPaths(4096, 1)
	var bad error
	calls := 0
	f := csCompare(&bad, &calls)
	var rt, learns uint64
	ev, mv := evictions.Load(), moves.Load()
	learned := countLearns(func() {
		for round := 0; round < 2; round++ {
			rt, learns = runtimeCalls.Load(), learnCalls.Load()
			for i := range paths {
				cs0(&paths[i], f, 0)
			}
		}
	})
	if bad != nil {
		t.Fatal(bad)
	}
	if d := runtimeCalls.Load() - rt; d != 0 {
		t.Errorf("second pass: %d runtime.Callers calls for %d Callers calls", d, len(paths))
	}
	if d := learnCalls.Load() - learns; d != 0 {
		t.Errorf("second pass: %d learning passes", d)
	}
	gen := 0
	for ret, n := range learned {
		if n > 1 {
			t.Errorf("%v learned %d times", framesOf([]uintptr{ret}), n)
		}
		if fn := framesOf([]uintptr{ret})[0].Function; strings.Contains(fn, "/live.cs") {
			gen++
		}
	}
	t.Logf("%d addresses learned (%d in the generated functions), %d calls, %d evictions, %d moves to the other bucket",
		len(learned), gen, calls, evictions.Load()-ev, moves.Load()-mv)
	if len(learned) < csLevels*csWidth*99/100 {
		t.Errorf("only %d addresses learned: the working set is not the one claimed", len(learned))
	}
}

// A working set larger than the cache makes Callers answer with
// runtime.Callers alone after a few learning windows: at most one
// runtime.Callers call per Callers call, and few learning passes.
func TestWorkingSetLargerThanCache(t *testing.T) {
	if !Supported {
		t.Skip("no frame pointers")
	}
	withCache(t, 4, func() { // 16 buckets, 128 slots
		paths := csPaths(4096, 2)
		var bad error
		calls := 0
		f := csCompare(&bad, &calls)
		for i := range 600 {
			cs0(&paths[i], f, 0)
		}
		learns := learnCalls.Load()
		const n = 3000
		for i := range n {
			cs0(&paths[600+i], f, 0)
		}
		if bad != nil {
			t.Fatal(bad)
		}
		d := learnCalls.Load() - learns
		t.Logf("%d learning passes in %d calls; bypass period %d", d, n, bypassLen.Load())
		if d > n/20 {
			t.Errorf("%d learning passes in %d calls: the thrashing cache was not bypassed", d, n)
		}
		if bypassLen.Load() == 0 {
			t.Error("no bypass period started")
		}
	})
}

// BenchmarkWorkingSet measures Callers against runtime.Callers on stacks
// through 20,000 distinct hot return addresses (csPaths over the generated
// call sites): each stack is unwound by both, one after the other, each call
// timed alone, and the slowest 5% of each one's calls (preempted on a busy
// machine) are dropped. With the full cache the set fits; with the cache
// shrunk to 2048 slots it does not, and Callers bypasses it.
func BenchmarkWorkingSet(b *testing.B) {
	if !Supported {
		b.Skip("no frame pointers")
	}
	for _, c := range []struct {
		name string
		bits uint
	}{{"fits", cacheBits}, {"overflow", 8}} {
		b.Run(c.name, func(b *testing.B) {
			if c.bits == cacheBits {
				resetCache()
				benchWorkingSet(b)
				return
			}
			withCache(&testing.T{}, c.bits, func() { benchWorkingSet(b) })
		})
	}
}

func benchWorkingSet(b *testing.B) {
	paths := csPaths(4096, 3)
	pc := make([]uintptr, 48)
	var took time.Duration
	us := []func(){
		func() { t0 := time.Now(); runtime.Callers(1, pc); took = time.Since(t0) },
		func() { t0 := time.Now(); testCallers(0, pc); took = time.Since(t0) },
	}
	for i := range paths { // learn the set (or start the bypass)
		cs0(&paths[i], us[1], 0)
	}
	var samples [2][]time.Duration
	next := 0
	for b.Loop() {
		for k := range us {
			cs0(&paths[next%len(paths)], us[k], 0)
			samples[k] = append(samples[k], took)
		}
		next++
	}
	rt, lv := trimmedMean(samples[0]), trimmedMean(samples[1])
	b.ReportMetric(rt, "runtime.Callers-ns")
	b.ReportMetric(lv, "Callers-ns")
	b.ReportMetric(lv/rt, "Callers/rt")
	b.ReportMetric(0, "ns/op")
}

// trimmedMean is the mean of the fastest 95% of d, in ns.
func trimmedMean(d []time.Duration) float64 {
	slices.Sort(d)
	d = d[:max(1, len(d)*95/100)]
	var sum time.Duration
	for _, x := range d {
		sum += x
	}
	return float64(sum.Nanoseconds()) / float64(len(d))
}

// BenchmarkColdCall measures the first call through new return addresses:
// each of 624 stacks through the generated call sites uses call sites no
// other uses (case i at every level); the even ones go to runtime.Callers,
// the odd ones to Callers, each timed alone, the cache emptied before each
// round.
func BenchmarkColdCall(b *testing.B) {
	if !Supported {
		b.Skip("no frame pointers")
	}
	paths := make([]csPath, 624)
	for i := range paths {
		for l := range paths[i] {
			paths[i][l] = uint16(i)
		}
	}
	pc := make([]uintptr, 40)
	var t0 time.Time
	var took time.Duration
	rt := func() { t0 = time.Now(); runtime.Callers(1, pc); took = time.Since(t0) }
	lv := func() { t0 = time.Now(); testCallers(0, pc); took = time.Since(t0) }
	var sum [2]time.Duration
	rounds := 0
	for b.Loop() {
		resetCache()
		lv() // learn the benchmark's own frames
		for i := range paths {
			f := rt
			if i%2 == 1 {
				f = lv
			}
			cs0(&paths[i], f, 0)
			sum[i%2] += took
		}
		rounds++
	}
	n := float64(rounds * len(paths) / 2)
	r, l := float64(sum[0].Nanoseconds())/n, float64(sum[1].Nanoseconds())/n
	b.ReportMetric(r, "runtime.Callers-ns")
	b.ReportMetric(l, "Callers-ns")
	b.ReportMetric(l/r, "Callers/rt")
	b.ReportMetric(0, "ns/op")
}
