package benchbody

import (
	"maps"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/unwindkit/unwindkit/unwind"
)

// TestPeers checks that every store is correct and that save hits and
// fetches do not allocate, the depot's and its peers' alike: the
// benchmarks compare equal work.
func TestPeers(t *testing.T) {
	set, fresh := DepotTraceSet()
	if len(set) != DepotTraces || len(fresh) != MissRound {
		t.Fatalf("%d stored and %d fresh traces", len(set), len(fresh))
	}
	seen := map[string]bool{}
	for _, tr := range append(slices.Clone(set), fresh...) {
		if len(tr) != DepotDepth || seen[traceString(tr)] {
			t.Fatalf("trace of %d frames, repeated %v", len(tr), seen[traceString(tr)])
		}
		seen[traceString(tr)] = true
	}
	for _, p := range DepotPeers {
		s, err := p.New(2)
		if err != nil {
			t.Fatal(err)
		}
		hs := map[uint32]int{}
		for i, tr := range set[:64] {
			hs[s.Save(i%2, tr)] = i
		}
		if len(hs) != 64 {
			t.Fatalf("%s: %d distinct handles for 64 traces", p.Name, len(hs))
		}
		buf := make([]uint64, 0, DepotDepth)
		for i, tr := range set[:64] {
			h := s.Save(1, tr)
			if hs[h] != i {
				t.Fatalf("%s: save hit of trace %d gave the handle of %d", p.Name, i, hs[h])
			}
			if got := s.Fetch(0, h, buf[:0]); !slices.Equal(got, tr) {
				t.Fatalf("%s: fetch %d: %#x, want %#x", p.Name, i, got, tr)
			}
		}
		h := s.Save(0, set[3])
		for name, f := range map[string]func(){
			"save hit": func() { s.Save(1, set[3]) },
			"fetch":    func() { buf = s.Fetch(1, h, buf[:0]) },
		} {
			if n := testing.AllocsPerRun(100, f); n != 0 {
				t.Errorf("%s %s allocates %.1f times", p.Name, name, n)
			}
		}
	}
}

// TestOps: on a filled store every HitOp is a hit (no new handle), every
// MissOp of a round a miss, on one goroutine and on two.
func TestOps(t *testing.T) {
	for _, p := range DepotPeers {
		for _, g := range []int{1, 2} {
			s, err := NewFilled(p, g)
			if err != nil {
				t.Fatal(err)
			}
			c := &counting{Store: s, handles: map[uint32]bool{}}
			Run(g, 2*DepotTraces, HitOp(c))
			if len(c.handles) != DepotTraces {
				t.Errorf("%s g%d: hits gave %d handles, want %d", p.Name, g, len(c.handles), DepotTraces)
			}
			clear(c.handles)
			Run(g, MissRound, MissOp(c, g))
			if len(c.handles) != MissRound {
				t.Errorf("%s g%d: a round of misses gave %d new handles, want %d", p.Name, g, len(c.handles), MissRound)
			}
		}
	}
}

// counting records the handles a store returns, from any goroutine.
type counting struct {
	Store
	mu      sync.Mutex
	handles map[uint32]bool
}

func (c *counting) Save(w int, tr []uint64) uint32 {
	h := c.Store.Save(w, tr)
	c.mu.Lock()
	c.handles[h] = true
	c.mu.Unlock()
	return h
}

// TestModelSource: both methods unwind the recursion machine to exactly
// the depth asked for, with the same return addresses.
func TestModelSource(t *testing.T) {
	for _, pac := range []bool{false, true} {
		for _, depth := range ModelDepths {
			var traces [2][]uint64
			for i, m := range []unwind.Method{unwind.MethodSCS, unwind.MethodFP} {
				src, err := ModelSource(m, pac, depth)
				if err != nil {
					t.Fatal(err)
				}
				traces[i] = make([]uint64, depth)
				if n, err := unwind.Save(src, traces[i], 0); n != depth || err != nil {
					t.Fatalf("%v pac=%v depth %d: %d frames, %v", m, pac, depth, n, err)
				}
			}
			if !slices.Equal(traces[0], traces[1]) {
				t.Errorf("pac=%v depth %d: SCS %#x, FP %#x", pac, depth, traces[0], traces[1])
			}
		}
	}
}

// TestMeasure: Measure returns a positive time for each body and an error
// for a body that always fails.
func TestMeasure(t *testing.T) {
	sink := 0
	ns, err := Measure(time.Millisecond, 2, func(b *testing.B) {
		for b.Loop() {
			sink++
		}
	}, func(b *testing.B) {
		for i := range b.N {
			sink += i
		}
	})
	if err != nil || len(ns) != 2 || ns[0] <= 0 || ns[1] <= 0 {
		t.Fatalf("Measure: %v, %v", ns, err)
	}
	if _, err := Measure(time.Millisecond, 1, func(b *testing.B) { b.Fatal("broken") }); err == nil {
		t.Fatal("Measure of a failing body: no error")
	}
}

// TestTeam: each block of a team runs every operation once, each goroutine
// its own share (the caller's with the remainder) from its own base, for
// blocks of several sizes in turn, and the two goroutines of a team of two
// run at once: each waits, inside one block, to see the other's first
// operation.
func TestTeam(t *testing.T) {
	for _, g := range []int{1, 2, 3} {
		tm := NewTeam(g)
		for _, n := range []int{0, 1, 7, 1000} {
			var mu sync.Mutex
			got := map[[2]int]int{}
			tm.Run(n, func(w, i int) {
				mu.Lock()
				got[[2]int{w, i}]++
				mu.Unlock()
			})
			want := map[[2]int]int{}
			for w := range g {
				k := n / g
				if w == 0 {
					k += n % g
				}
				for i := range k {
					want[[2]int{w, w*997 + i}]++
				}
			}
			if !maps.Equal(got, want) {
				t.Errorf("team of %d, block of %d: ran %v, want %v", g, n, got, want)
			}
		}
		tm.Close()
	}
	tm := NewTeam(2)
	defer tm.Close()
	var started, saw [2]atomic.Bool
	tm.Run(2, func(w, i int) {
		started[w].Store(true)
		for end := time.Now().Add(10 * time.Second); time.Now().Before(end); runtime.Gosched() {
			if started[1-w].Load() {
				saw[w].Store(true)
				return
			}
		}
	})
	if !saw[0].Load() || !saw[1].Load() {
		t.Errorf("a team of two: goroutine 0 saw the other start %v, goroutine 1 %v; want both", saw[0].Load(), saw[1].Load())
	}
}
