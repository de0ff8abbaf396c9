package live

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/unwindkit/unwindkit/depot"
	"github.com/unwindkit/unwindkit/internal/depotview"
)

// The stack-ID engine is tested here through testSaveID, the public
// stackid.Table.Save's body on a depot of the tests: every scenario of
// captureAll saves its stack for every skip, and checkID compares the
// fetched pcs with runtime.Callers'.

// idMaxFrames is the tests' MaxFrames: the limit, so that only the deep
// scenario has more physical frames than a record keeps.
const idMaxFrames = depot.MaxFramesLimit

var testDepot, testIDs = newTestIDs(idMaxFrames)

// newTestIDs returns a depot and the IDs of a stack-ID table on it, with
// the walk on in race builds too (as testCallers is callersCached there).
func newTestIDs(maxFrames int) (*depot.Depot, *IDs) {
	d, err := depot.New(depot.Config{MaxFrames: maxFrames, CountHits: true})
	if err != nil {
		panic(err)
	}
	k := d.HashKey()
	ids := &IDs{
		Seed: k.Seed, Mul: k.Mul, MaxFrames: maxFrames, walkInRace: true,
		Store: func(rec []uint64, h uint64) (uint32, error) {
			hd, err := d.SaveHashed(rec, depot.Hash(h))
			return uint32(hd), err
		},
	}
	ids.UseDepot(depotview.Of(d))
	return d, ids
}

// idResult is what testSaveID returned, and the table it used.
type idResult struct {
	h   uint32
	err error
	d   *depot.Depot
	ids *IDs
}

// testSaveID is stackid.Table.Save's body on the tests' table: skip 0 is
// testSaveID, 1 its caller. (In race builds it walks too, with
// walkInRace.)
//
//go:noinline
//go:norace
//go:nocheckptr
func testSaveID(skip int) idResult {
	start, _ := FrameAndPC()
	if (FastIDs || testIDs.walkInRace) && skip >= 1 {
		fp, cut, ok := start, 0, true
		if skip > 1 {
			fp, cut, ok = SkipIDFrames(start, skip)
		}
		if ok {
			if hd, hit := testIDs.Hit(start, fp, cut); hit {
				return idResult{hd, nil, testDepot, testIDs}
			}
			var g Guess
			testIDs.WalkFirst(start, fp, cut, &g)
			var buf [maxIDFrames]uint64
			rec := buf[:testIDs.MaxFrames]
			if n, h, ok := testIDs.Resume(start, &g, rec); ok {
				if hd, hit := testDepot.LookupHashed(rec[:n], depot.Hash(h)); hit {
					testIDs.SetHint(&g, n, uint32(hd))
					return idResult{uint32(hd), nil, testDepot, testIDs}
				}
			}
		}
	}
	h, err := ResolveID(start, skip, testIDs)
	return idResult{h, err, testDepot, testIDs}
}

// testLookups counts the depot lookups of testSaveIDOn (the saves its
// guess did not find).
var testLookups atomic.Int64

// testSaveIDOn is testSaveID on another table.
//
//go:noinline
//go:norace
//go:nocheckptr
func testSaveIDOn(d *depot.Depot, ids *IDs, skip int) idResult {
	start, _ := FrameAndPC()
	if (FastIDs || ids.walkInRace) && skip >= 1 {
		fp, cut, ok := start, 0, true
		if skip > 1 {
			fp, cut, ok = SkipIDFrames(start, skip)
		}
		if ok {
			if hd, hit := ids.Hit(start, fp, cut); hit {
				return idResult{hd, nil, d, ids}
			}
			var g Guess
			ids.WalkFirst(start, fp, cut, &g)
			var buf [maxIDFrames]uint64
			rec := buf[:ids.MaxFrames]
			if n, h, ok := ids.Resume(start, &g, rec); ok {
				testLookups.Add(1)
				if hd, hit := d.LookupHashed(rec[:n], depot.Hash(h)); hit {
					ids.SetHint(&g, n, uint32(hd))
					return idResult{uint32(hd), nil, d, ids}
				}
			}
		}
	}
	h, err := ResolveID(start, skip, ids)
	return idResult{h, err, d, ids}
}

// fetch returns the pcs saved under r.h, into a buffer of bufLen (0:
// large), as stackid.Table.Fetch does; nil for an error.
func (r idResult) fetch(bufLen int) []uintptr {
	if r.err != nil {
		return nil
	}
	if bufLen == 0 {
		bufLen = 1 << 14
	}
	rec, err := r.d.Fetch(depot.Handle(r.h), nil)
	if err != nil {
		panic(err)
	}
	pc := make([]uintptr, bufLen)
	return pc[:r.ids.Expand(rec, pc)]
}

// checkID checks the stack ID saved for skip s against runtime.Callers':
// the same pcs but the capturing frame's (s == 0: another call on the same
// line), all of them unless the stack has more physical frames than a
// record keeps (then at least idMaxFrames of them); a skip past the
// stack's end is ErrEmpty.
func (c *capture) checkID(s int) error {
	framesOf := func(pcs []uintptr) []frame { return framesOf(pcs[:min(len(pcs), 8)]) }
	rt, id, r := c.rt[s], c.id[s], c.handles[s]
	if len(rt) == 0 {
		if !errors.Is(r.err, depot.ErrEmpty) || r.h != 0 {
			return fmt.Errorf("skip %d: past the end: handle %#x, %v; want depot.ErrEmpty", s, r.h, r.err)
		}
		return nil
	}
	if r.err != nil {
		return fmt.Errorf("skip %d: %v", s, r.err)
	}
	if len(id) != len(rt) && (len(id) > len(rt) || len(id) < idMaxFrames) {
		return fmt.Errorf("skip %d: fetched %d pcs, runtime.Callers %d\nruntime: %v\nfetched: %v", s, len(id), len(rt), framesOf(rt), framesOf(id))
	}
	for i := range id {
		if s == 0 && i == 0 {
			if fmt.Sprint(framesOf(rt[:1])) != fmt.Sprint(framesOf(id[:1])) {
				return fmt.Errorf("skip 0: capturing frame: runtime %v, fetched %v", framesOf(rt[:1]), framesOf(id[:1]))
			}
			continue
		}
		if rt[i] != id[i] {
			return fmt.Errorf("skip %d: pc %d: runtime %#x, fetched %#x\nruntime: %v\nfetched: %v", s, i, rt[i], id[i], framesOf(rt), framesOf(id))
		}
	}
	return nil
}

// idLoop saves the stack of one call site n times and returns the handles
// and the slow paths taken after the first.
//
//go:noinline
func idLoop(n int) ([]idResult, uint64) {
	out := make([]idResult, n)
	var r0 uint64
	for i := range out {
		out[i] = testSaveID(1)
		if i == 0 {
			r0 = idResolves.Load()
		}
	}
	return out, idResolves.Load() - r0
}

// A stack seen before is one pass: no resolve, no allocation, the same
// handle.
func TestStackIDWarmIsOnePass(t *testing.T) {
	if !Supported {
		t.Skip("no frame pointers")
	}
	rs, d := idLoop(101)
	if d != 0 {
		t.Fatalf("%d of 100 saves of a known stack took the slow path", d)
	}
	first := rs[0]
	for _, r := range rs {
		if r.err != nil || r.h != first.h {
			t.Fatalf("handle %#x, %v; first %#x", r.h, r.err, first.h)
		}
	}
	if a := testing.AllocsPerRun(100, func() { testSaveID(1) }); a != 0 {
		t.Fatalf("%v allocations a known stack", a)
	}
}

// The verdicts a record needs are the table's: emptying the cache (as an
// eviction would) changes no fetched stack.
func TestStackIDSurvivesCacheReset(t *testing.T) {
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			c := sc.run(0)
			for s := range c.rt {
				if err := c.checkID(s); err != nil {
					t.Fatal(err)
				}
			}
			resetCache()
			for s, r := range c.handles {
				c.id[s] = r.fetch(0)
				if err := c.checkID(s); err != nil {
					t.Fatalf("after the cache was emptied: %v", err)
				}
			}
		})
	}
}

// Stacks that Callers answers with runtime.Callers are stored as Callers'
// logical pcs; the others as physical chains.
func TestStackIDLogicalWhereCallersFallsBack(t *testing.T) {
	if !Supported {
		t.Skip("no frame pointers")
	}
	l0 := idLogical.Load()
	plainA(0)
	if d := idLogical.Load() - l0; d != 0 {
		t.Fatalf("a plain stack stored %d logical records for its skips, want 0", d)
	}
	l0 = idLogical.Load()
	c := inSigpanicDefer(0)
	if d := idLogical.Load() - l0; d < uint64(len(c.rt))-8 {
		t.Fatalf("a stack through sigpanic stored %d logical records for %d skips", d, len(c.rt))
	}
}

// shapeA and shapeB build a stack that spells bits in binary: bit i of
// bits chooses which of the two calls frame i makes, so every value has
// its own chain of return addresses.
//
//go:noinline
func shapeA(bits, i int, f func()) {
	if i == 0 {
		f()
		return
	}
	if bits&1 == 0 {
		shapeA(bits>>1, i-1, f)
	} else {
		shapeB(bits>>1, i-1, f)
	}
}

//go:noinline
func shapeB(bits, i int, f func()) {
	if i == 0 {
		f()
		return
	}
	if bits&1 == 0 {
		shapeA(bits>>1, i-1, f)
	} else {
		shapeB(bits>>1, i-1, f)
	}
}

// Saves and fetches from many goroutines at once, each on stacks of its
// own shape: every fetch, of its own handles and of handles other
// goroutines published, must be exactly the runtime.Callers captured with
// it, so that a record mixed up with another's (two shapes differ in many
// frames) is caught. Run with -race: the walk runs there too (walkInRace).
func TestStackIDConcurrent(t *testing.T) {
	d, ids := newTestIDs(64)
	const workers, shapes, rounds = 4, 64, 6
	type entry struct {
		h  uint32
		rt []uintptr
	}
	var mu sync.Mutex
	var published []entry
	var wg sync.WaitGroup
	errc := make(chan error, workers)
	for w := range workers {
		wg.Go(func() {
			for r := range rounds {
				for k := range shapes {
					bits := int(uint64(w*shapes+k) * 2654435761 % (1 << 12))
					var res idResult
					var want []uintptr
					shapeA(bits, 12, func() {
						pc := make([]uintptr, 128)
						rr, n := testSaveIDOn(d, ids, 1), runtime.Callers(1, pc)
						res, want = rr, pc[:n]
					})
					if res.err != nil {
						errc <- res.err
						return
					}
					f := res.fetch(128)
					if len(f) != len(want) || !equalPCs(f[1:], want[1:]) {
						errc <- fmt.Errorf("worker %d shape %d round %d: fetched %v\nwant %v", w, bits, r, framesOf(f), framesOf(want))
						return
					}
					mu.Lock()
					published = append(published, entry{res.h, want})
					other := published[(w*7919+k*31+r)%len(published)]
					mu.Unlock()
					o := idResult{h: other.h, d: d, ids: ids}.fetch(128)
					if len(o) != len(other.rt) || !equalPCs(o[1:], other.rt[1:]) {
						errc <- fmt.Errorf("another goroutine's handle %#x: fetched %v\nwant %v", other.h, framesOf(o), framesOf(other.rt))
						return
					}
				}
			}
		})
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	if s := d.Stats(); s.InUse < workers*shapes || s.Hits == 0 {
		t.Fatalf("%d stacks stored, %d hits: the shapes did not make distinct stacks", s.InUse, s.Hits)
	}
}
