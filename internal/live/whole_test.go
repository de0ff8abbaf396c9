//go:build amd64 || arm64

package live

import (
	"fmt"
	"runtime"
	"slices"
	"sync"
	"testing"
)

// wholeLeaf stores the stack from its caller's caller (skip 1: wholeInl,
// inlined into wholeRec) into rt with runtime.Callers and into pc with
// testCallers: the same pcs, from the same frame, for skip > 0.
//
//go:noinline
func wholeLeaf(skip int, pc, rt []uintptr) (n, nrt int) {
	return testCallers(skip, pc), runtime.Callers(skip+1, rt)
}

// wholeInl is inlined into wholeRec, so that the second physical frame
// has inlined calls: Callers leaves walkProbe's one-compare path there
// for the whole-stack cache.
func wholeInl(skip int, pc, rt []uintptr) (int, int) { return wholeLeaf(skip, pc, rt) }

// wholeRec recurses d frames, then captures. Every depth has the same
// first frames (wholeLeaf, wholeInl in wholeRec, wholeRec...), so at one
// skip all depths share a whole-stack slot, and only the walk to the
// chain's end tells them apart.
//
//go:noinline
func wholeRec(d, skip int, pc, rt []uintptr) (int, int) {
	if d == 0 {
		return wholeInl(skip, pc, rt)
	}
	return wholeRec(d-1, skip, pc, rt)
}

// wholeGot returns Callers' answer from wholeRec(d) with skip into n pcs,
// and runtime.Callers' from the same frame, checked for writes beyond n
// (a panic: goroutines of the tests call it too).
//
//go:noinline
func wholeGot(d, skip, n int) (got, want []uintptr) {
	pc, rt := make([]uintptr, n+1), make([]uintptr, n)
	pc[n] = 0xdead
	k, krt := wholeRec(d, skip, pc[:n], rt)
	if pc[n] != 0xdead {
		panic(fmt.Sprintf("depth %d skip %d: write beyond len(pc)", d, skip))
	}
	return pc[:k], rt[:krt]
}

// wholeCheck fails t unless Callers' answer is runtime.Callers', and
// returns it.
func wholeCheck(t *testing.T, what string, d, skip, n int) []uintptr {
	t.Helper()
	got, want := wholeGot(d, skip, n)
	if !slices.Equal(got, want) {
		t.Fatalf("%s (depth %d, skip %d, %d pcs): Callers %v\nruntime.Callers %v", what, d, skip, n, framesOf(got), framesOf(want))
	}
	return got
}

// wholeEntryFor returns the slot of the cache's entry whose answer is
// pcs, or -1.
func wholeEntryFor(pcs []uintptr) int {
	for i := range wholeTab {
		if e := wholeTab[i].e.Load(); e != nil && slices.Equal(e.pcs, pcs) {
			return i
		}
	}
	return -1
}

// A whole stack answered once is stored, and answered from its entry
// after that: an entry whose answer is changed (same chain, same skip)
// gives the changed answer, so the hit path is what answers.
func TestWholeStackAnswersFromEntry(t *testing.T) {
	resetCache()
	defer resetCache()
	var marked []uintptr
	// One call site: the test's own frame is in the chain.
	for i, n := range []int{64, 64, 64, 5} {
		got, want := wholeGot(6, 1, n)
		switch i {
		case 0, 1:
			if !slices.Equal(got, want) {
				t.Fatalf("call %d: Callers %v\nruntime.Callers %v", i, framesOf(got), framesOf(want))
			}
		case 3:
			// Only a stack whose second physical frame has inlined
			// calls goes to the whole-stack cache when its buffer is
			// short: walkProbe answers the rest. Without optimisation
			// (-N -l) wholeInl is a frame of its own.
			if runtime.FuncForPC(want[0]).Entry() != runtime.FuncForPC(want[1]).Entry() {
				t.Logf("wholeInl not inlined: %d pcs answered by walkProbe", n)
				break
			}
			fallthrough
		case 2:
			if !slices.Equal(got, marked[:len(got)]) || len(got) != min(n, len(marked)) {
				t.Fatalf("call %d into %d pcs: Callers did not answer from the entry: %#x", i, n, got)
			}
		}
		if i == 1 {
			slot := wholeEntryFor(want)
			if slot < 0 {
				t.Fatal("no whole-stack entry holds the answer")
			}
			e := wholeTab[slot].e.Load()
			marked = slices.Clone(e.pcs)
			for i := range marked {
				marked[i] = 0x1000 + uintptr(i)
			}
			wholeTab[slot].e.Store(&wholeEntry{phys: e.phys, pcs: marked})
		}
	}
	// Another skip, or another depth, is another stack.
	wholeCheck(t, "another skip", 6, 2, 64)
	wholeCheck(t, "another depth", 7, 1, 64)
	wholeCheck(t, "another depth", 5, 1, 64)
}

// Stacks that share their first frames and their slot (one recursion at
// different depths), every skip, buffers that cut the answer and buffers
// that hold it, in every order, against runtime.Callers; and a buffer
// that the answer fills is never what a larger one is answered from.
func TestWholeStackMatchesRuntime(t *testing.T) {
	resetCache()
	defer resetCache()
	type key struct{ d, skip, n int }
	var keys []key
	for _, n := range []int{3, 8, 64} { // cut answers first
		for d := 3; d <= 9; d++ {
			for skip := 1; skip <= 4; skip++ {
				keys = append(keys, key{d, skip, n})
			}
		}
	}
	// Two stacks in turn at one slot, long enough for replacements
	// (wholeReplace misses), then all of them.
	var turns [2][]uintptr
	for i := range 4 * wholeReplace {
		turns[i%2] = wholeCheck(t, "in turn", 3+i%2, 1, 64)
	}
	if wholeEntryFor(turns[0]) < 0 && wholeEntryFor(turns[1]) < 0 {
		t.Error("neither stack of the shared slot is in the cache")
	}
	// A stack that keeps missing its slot takes it.
	resetCache()
	var first, second []uintptr
	for i := range 2 + 2*wholeReplace {
		if i < 2 {
			first = wholeCheck(t, "first", 3, 1, 64)
		} else {
			second = wholeCheck(t, "second", 4, 1, 64)
		}
		if i == 1 && wholeEntryFor(first) < 0 {
			t.Fatal("the first stack at an empty slot was not stored")
		}
	}
	if wholeEntryFor(second) < 0 || wholeEntryFor(first) >= 0 {
		t.Errorf("after %d misses, the slot's entry is not the stack that missed", 2*wholeReplace)
	}
	// From an empty cache, so that the first stacks of these rounds take
	// their slots (the turns above came from another call site: another
	// chain), and long enough that others replace them.
	resetCache()
	for round := range 2 * (4*wholeReplace/len(keys) + 1) {
		for _, k := range keys {
			wholeCheck(t, fmt.Sprintf("round %d", round), k.d, k.skip, k.n)
		}
		slices.Reverse(keys)
	}
	// A cut answer is not stored: from an empty cache, 8 pcs of a stack
	// (the buffer full) and then the whole stack.
	resetCache()
	for range 3 {
		wholeCheck(t, "cut", 9, 1, 8)
	}
	for i := range wholeTab {
		if wholeTab[i].e.Load() != nil {
			t.Fatal("an answer that filled its buffer was stored")
		}
	}
	for range 3 {
		wholeCheck(t, "after a cut answer", 9, 1, 64)
	}
	// A call site whose answers were cut (cutTab: the cache is not
	// looked up) and then are whole again, with the same buffer: the
	// stack is stored and answered from the cache.
	for range 3 {
		wholeCheck(t, "cut at this site", 9, 1, 8)
	}
	var whole []uintptr
	for range 3 {
		whole = wholeCheck(t, "whole at this site", 0, 1, 8)
	}
	// (Without optimisation, -N -l, wholeInl is a frame of its own and
	// walkProbe answers this short stack by itself.)
	inlined := runtime.FuncForPC(whole[0]).Entry() == runtime.FuncForPC(whole[1]).Entry()
	if len(whole) >= 8 || inlined && wholeEntryFor(whole) < 0 {
		t.Errorf("a whole answer of %d pcs (into 8) after cut ones at its call site was not stored", len(whole))
	}
}

// Stacks deeper than an entry holds (wholeMaxPhys frames, wholeMaxPCs
// pcs) are answered as before and never stored.
func TestWholeStackTooDeep(t *testing.T) {
	resetCache()
	defer resetCache()
	for _, d := range []int{wholeMaxPhys, wholeMaxPCs + 8} {
		var got []uintptr
		for range 3 {
			got = wholeCheck(t, "deep", d, 1, 2*wholeMaxPCs)
		}
		if wholeEntryFor(got) >= 0 {
			t.Fatalf("depth %d: a stack of %d pcs was stored", d, len(got))
		}
	}
}

// Goroutines that answer stacks sharing a slot, while the slot's entry
// is replaced under them: every answer is runtime.Callers' from the same
// frame (each depth's has a different count and different frames, so an
// answer from another stack's entry, or a mix of two, fails).
func TestWholeStackConcurrent(t *testing.T) {
	resetCache()
	defer resetCache()
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 2000 {
				d := 3 + (g+i)%4
				if got, want := wholeGot(d, 1, 64); !slices.Equal(got, want) {
					errs <- fmt.Errorf("goroutine %d call %d, depth %d: Callers %v\nruntime.Callers %v", g, i, d, framesOf(got), framesOf(want))
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// On crafted chains: an entry answers its chain only, to the chain's
// end, and no chain that ends anywhere else is stored.
func TestWholeHitFakeChains(t *testing.T) {
	resetCache()
	defer resetCache()
	f := newFake(16)
	f.chain(0, 2, 4, 6, 8, 10)
	answer := []uintptr{0xa, 0xb, 0xc}
	pc := make([]uintptr, 8)
	n, slot := wholeHit(f.fp(0), 1, pc)
	if n != -1 || slot < 0 {
		t.Fatalf("empty cache: wholeHit = %d, slot %d", n, slot)
	}
	rememberWhole(f.fp(0), 1, answer, slot)
	if n, _ := wholeHit(f.fp(0), 1, pc); n != len(answer) || !slices.Equal(pc[:n], answer) {
		t.Fatalf("the stored chain: wholeHit = %d, %#x", n, pc[:max(n, 0)])
	}
	if n, _ := wholeHit(f.fp(0), 1, pc[:2]); n != 2 || !slices.Equal(pc[:n], answer[:2]) {
		t.Fatalf("into 2 pcs: wholeHit = %d, %#x", n, pc[:max(n, 0)])
	}
	if n, _ := wholeHit(f.fp(0), 2, pc); n != -1 {
		t.Fatalf("another skip: wholeHit = %d", n)
	}
	for _, c := range []struct {
		name   string
		change func()
	}{
		{"longer", func() { f.buf[10] = f.addr(12); f.rec(12, 0, 0x2000) }},
		{"another frame 5", func() { f.buf[11] = 0x2000 }},
		{"another frame 4", func() { f.buf[9] = 0x2000 }},
		{"another frame 1", func() { f.buf[3] = 0x2000 }},
		{"broken at frame 2", func() { f.buf[4] = f.addr(6) + 3 }},
		{"broken at frame 4", func() { f.buf[8] = f.addr(2) }},
	} {
		f.chain(0, 2, 4, 6, 8, 10)
		c.change()
		if n, _ := wholeHit(f.fp(0), 1, pc); n != -1 {
			t.Errorf("%s: wholeHit = %d, %#x", c.name, n, pc[:n])
		}
	}
	// A chain that ends at a broken record, or goes on past
	// wholeMaxPhys records, is not stored.
	resetCache()
	f.chain(0, 2, 4, 6, 8, 10)
	f.buf[10] = f.addr(4)
	_, slot = wholeHit(f.fp(0), 1, pc)
	rememberWhole(f.fp(0), 1, answer, slot)
	if slot < 0 || wholeTab[slot].e.Load() != nil {
		t.Errorf("a broken chain was stored (slot %d)", slot)
	}
	long := newFake(2*wholeMaxPhys + 4)
	idx := make([]int, wholeMaxPhys+1)
	for i := range idx {
		idx[i] = 2 * i
	}
	long.chain(idx...)
	_, slot = wholeHit(long.fp(0), 1, pc)
	rememberWhole(long.fp(0), 1, answer, slot)
	if slot < 0 || wholeTab[slot].e.Load() != nil {
		t.Errorf("a chain of %d records was stored (slot %d)", len(idx), slot)
	}
}
