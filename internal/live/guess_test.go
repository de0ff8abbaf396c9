//go:build amd64 || arm64

package live

import (
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/unwindkit/unwindkit/depot"
	"github.com/unwindkit/unwindkit/internal/tracehash"
)

// Hit, WalkFirst and Resume, on any chain (fuzzStack's, which may break
// the rules), with any cut, with a guess planted in the chain's hint slot under the chain's
// own tag (as a key colliding with it would be): the chain's own record,
// one that differs in one frame (among the first hintFrames or after),
// one a frame shorter or longer, or none; the slot contended (the guess
// hashing as it compares) or not. Hit must hit exactly when the guess is
// the stack's record and its slot sure, never for a walk that broke a
// rule; a hit must keep the slot's hint and count one depot hit; and
// without a hit, WalkFirst then Resume must return what WalkHash returns
// (the same frames, hash and ok).
func FuzzHit(f *testing.F) {
	long := []byte{2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 0xff}
	for v := range uint8(5) {
		f.Add(long, uint8(7), v, uint8(6), true)
		f.Add(long, uint8(39), v, uint8(1), false)
		f.Add(long, uint8(20), v, uint8(130), true) // confidence 2
		f.Add(long, uint8(20), v, uint8(70), true)  // 1: no guess
	}
	f.Add([]byte{2, 4, 6, 8, 10, 13, 0xff}, uint8(20), uint8(0), uint8(0), true) // broken after 5
	f.Add([]byte{2, 5, 0xff}, uint8(20), uint8(0), uint8(200), true)             // broken after 2, in the key's frames
	for v := range uint8(4) {
		f.Add([]byte{2, 4, 6, 8, 10, 12, 15, 0xff}, uint8(20), v, uint8(200), true) // broken after 7, guessed
	}
	f.Add([]byte{2, 4, 6, 8, 10, 12, 0x90}, uint8(20), uint8(0), uint8(0), true) // not above
	f.Fuzz(func(t *testing.T, links []byte, mf, variant, pos uint8, storeOwn bool) {
		const words = 64
		fk := fuzzStack(words, links)
		start := fk.fp(0)
		m := 1 + int(mf%40)
		d, ids := newTestIDs(m)
		rec := make([]uint64, m)
		cut := int(pos % 3) // the logical frames a skip drops, in the first word
		n, h, ok := WalkHash(start, start, cut, rec, ids.Seed, ids.Mul)
		want := slices.Clone(rec[:n])
		var guess []uint64
		switch variant % 5 {
		case 0:
			guess = slices.Clone(want)
		case 1:
			guess = slices.Clone(want)
			guess[int(pos)%len(guess)] ^= 0x10
		case 2:
			if len(want) > 1 {
				guess = slices.Clone(want[:len(want)-1])
			}
		case 3:
			if len(want) < m {
				guess = append(slices.Clone(want), 0x1234)
			}
		}
		save := func(w []uint64) uint32 {
			hd, err := d.SaveHashed(w, depot.Hash(tracehash.Sum(w, ids.Seed, ids.Mul)))
			if err != nil {
				t.Fatal(err)
			}
			return uint32(hd)
		}
		if storeOwn {
			save(want)
		}
		var gh uint32
		planted := guess != nil && len(want) >= hintFrames
		if planted {
			gh = save(guess)
			slot, tag := hintSlot(hintKey(want[0], want[1], want[2], want[3]))
			ids.hints[slot].Store(uint64(gh) | uint64(len(guess))<<32 | uint64(pos>>6)<<hintConfShift | tag<<hintTagShift)
		}
		wantHd, wantFound := uint32(0), false
		if ok {
			hd, found := d.LookupHashed(want, depot.Hash(h))
			wantHd, wantFound = uint32(hd), found
		}
		hits := d.Stats().Hits
		hd, hit := ids.Hit(start, start, cut)
		if got := d.Stats().Hits - hits; hit && got != 1 || !hit && got != 0 {
			t.Fatalf("Hit %v counted %d hits in the depot", hit, got)
		}
		right := planted && ok && n > hintFrames && slices.Equal(guess, want)
		unsure := pos>>6 < 2 // not guessed from
		switch {
		case hit && unsure:
			t.Fatalf("hit %#x on a slot not sure enough to guess", hd)
		case hit && !right:
			t.Fatalf("hit %#x on guess %#x for the walk %#x (ok %v)", hd, guess, want, ok)
		case hit && hd != gh:
			t.Fatalf("hit %#x, the guess is %#x", hd, gh)
		case !hit && right && !unsure:
			t.Fatalf("no hit on the walk's own record %#x", want)
		case hit:
			slot, _ := hintSlot(hintKey(want[0], want[1], want[2], want[3]))
			if e := ids.hints[slot].Load(); uint32(e) != gh || e&hintConfMask < uint64(pos>>6)<<hintConfShift {
				t.Fatalf("a hit left its slot's hint %#x, want %#x no less sure", e, gh)
			}
			return
		}
		// Without a hit, WalkFirst's walk resumes as WalkHash.
		var g Guess
		ids.WalkFirst(start, start, cut, &g)
		buf := make([]uint64, m)
		n2, h2, ok2 := ids.Resume(start, &g, buf)
		if ok2 != ok || ok && (n2 != n || h2 != h || !slices.Equal(buf[:n2], want)) {
			t.Fatalf("resumed %d frames %#x hash %#x ok %v; WalkHash %d %#x %#x %v", n2, buf[:n2], h2, ok2, n, want, h, ok)
		}
		if ok {
			got, found := d.LookupHashed(buf[:n2], depot.Hash(h2))
			if found != wantFound || uint32(got) != wantHd {
				t.Fatalf("looked up %#x %v; the walk's own %#x %v", got, found, wantHd, wantFound)
			}
		}
	})
}

// A stack seen again and again is found by its guess: its saves look
// nothing up in the depot, and the depot counts them as hits. Two stacks
// that share their first frames (and so their hint slot) and differ
// further down, saved in turn, keep their own handles, fetched as
// runtime.Callers.
func TestStackIDGuess(t *testing.T) {
	if !Supported || !FastIDs {
		t.Skip("no one-pass walk")
	}
	d, ids := newTestIDs(64)
	type saved struct {
		r    idResult
		want []uintptr
	}
	saveAt := func(bits int) saved {
		var s saved
		shapeA(bits, 14, func() {
			pc := make([]uintptr, 128)
			r, n := testSaveIDOn(d, ids, 1), runtime.Callers(1, pc)
			s = saved{r, pc[:n]}
		})
		return s
	}
	check := func(s saved) {
		t.Helper()
		if s.r.err != nil {
			t.Fatal(s.r.err)
		}
		if f := s.r.fetch(128); len(f) != len(s.want) || !equalPCs(f[1:], s.want[1:]) {
			t.Fatalf("fetched %v\nwant %v", framesOf(f), framesOf(s.want))
		}
	}
	// Every save from one call site of saveAt, in one call of run: the
	// stacks differ only by bits. After each save, after(i) runs.
	run := func(bits []int, after func(i int, s saved)) {
		for i, b := range bits {
			s := saveAt(b)
			check(s)
			after(i, s)
		}
	}
	// 0: stored; 1-100: found in the depot, the slot taken and (one
	// save in hintOdds) made surer, sure enough to guess after them but
	// with a chance of (1-1/hintOdds)^99; 101-200: found by the guess;
	// 201: another stack; 202-301: the two in turn.
	seq := make([]int, 302)
	seq[201] = 1
	for i := 202; i < len(seq); i++ {
		seq[i] = i % 2
	}
	var a, b uint32
	var l0 int64
	var h0, r0 uint64
	run(seq, func(i int, s saved) {
		switch {
		case i == 0:
			a = s.r.h
		case i <= 200 && s.r.h != a:
			t.Fatalf("save %d: handle %#x, first %#x", i, s.r.h, a)
		case i == 100:
			l0, h0 = testLookups.Load(), d.Stats().Hits
		case i == 200:
			if l := testLookups.Load() - l0; l != 0 {
				t.Fatalf("%d of 100 saves of a known stack looked it up", l)
			}
			if hits := d.Stats().Hits - h0; hits != 100 {
				t.Fatalf("the depot counted %d hits of 100", hits)
			}
		case i == 201:
			if b = s.r.h; b == a {
				t.Fatal("two stacks, one handle")
			}
			r0, l0 = idResolves.Load(), testLookups.Load()
		case i > 201 && s.r.h != []uint32{a, b}[i%2]:
			t.Fatalf("save %d: handle %#x, want %#x", i, s.r.h, []uint32{a, b}[i%2])
		}
	})
	t.Logf("%d of 100 saves of two stacks in turn looked them up", testLookups.Load()-l0)
	if r := idResolves.Load() - r0; r != 0 {
		t.Fatalf("%d saves of two known stacks took the slow path", r)
	}
}

// A slot's confidence, save by save (every move taken): a stack saved
// again and again makes its slot sure; two in turn keep it unsure (below
// 2, where it does not guess) whichever held it; a stack new to a sure
// slot makes it unsure at once, takes it at its third save and is sure at
// its fourth.
func TestNextHint(t *testing.T) {
	const one = 1 << hintConfShift
	conf := func(e uint64) int { return int(e & hintConfMask >> hintConfShift) }
	a, b := uint64(0x4000)|20<<32|7<<hintTagShift, uint64(0x5000)|20<<32|7<<hintTagShift
	s := a | one
	for i, want := range []int{2, 3, 3} {
		if s = nextHint(s, a); conf(s) != want || s&^hintConfMask != a {
			t.Fatalf("save %d of a: %#x, want a at %d", i, s, want)
		}
	}
	for _, first := range []uint64{a | one, a | 3*one, b | one} {
		s = first
		for i := range 40 {
			e := []uint64{a, b}[i%2]
			if s = nextHint(s, e); i >= 4 && conf(s) >= 2 {
				t.Fatalf("save %d in turn from %#x: %#x is sure", i, first, s)
			}
		}
	}
	s = a | 3*one
	for i, want := range []struct {
		e    uint64
		conf int
	}{{a, 1}, {a, 0}, {b, 1}, {b, 2}} {
		if s = nextHint(s, b); conf(s) != want.conf || s&^hintConfMask != want.e {
			t.Fatalf("save %d of b: %#x, want %#x at %d", i, s, want.e, want.conf)
		}
	}
}

// Goroutines saving the same stacks at once, so that guesses are made
// while other saves move and replace the slots: two stacks that share a
// slot (they differ in their outermost shape frame) and one of a slot of
// its own, each goroutine in its own order. Every save must give the
// stack's own handle, as a save on one goroutine gave it: a guess read
// from a slot mixed with another's, or a hint naming the other stack,
// would give the other handle. Run with -race: the walk runs there too
// (walkInRace). The guesses must have been made: a quarter of the saves
// or more look nothing up.
func TestStackIDGuessConcurrent(t *testing.T) {
	if !Supported {
		t.Skip("no frame pointers")
	}
	d, ids := newTestIDs(64)
	kinds := []int{0, 1, 1 << 13}
	var want [3]uint32
	var wg sync.WaitGroup
	// On one goroutine first: the handles, and the slots made sure.
	warm := make([]int, 600)
	for i := range warm {
		warm[i] = i % 3
	}
	goGuessWorker(&wg, d, ids, kinds, warm, func(k int, h uint32) { want[k] = h })
	wg.Wait()
	if want[0] == 0 || want[0] == want[1] || want[0] == want[2] || want[1] == want[2] {
		t.Fatalf("handles %#x: not three stacks", want)
	}
	const workers, saves = 4, 3000
	var bad atomic.Int64
	var first atomic.Value
	l0 := testLookups.Load()
	for w := range workers {
		order := make([]int, saves)
		for i := range order {
			order[i] = (i*(w+1) + i/7) % 3
		}
		goGuessWorker(&wg, d, ids, kinds, order, func(k int, h uint32) {
			if h != want[k] {
				bad.Add(1)
				first.CompareAndSwap(nil, fmt.Sprintf("kind %d: handle %#x, want %#x", k, h, want[k]))
			}
		})
	}
	wg.Wait()
	if n := bad.Load(); n != 0 {
		t.Fatalf("%d of %d saves gave another handle; first: %v", n, workers*saves, first.Load())
	}
	// The slot of its own guesses the third stack; the shared one
	// guesses in the runs of one stack that some orders make.
	l := testLookups.Load() - l0
	if found := workers*saves - l; found < workers*saves/4 {
		t.Fatalf("%d of %d saves found by a guess: the guesses were not made", found, workers*saves)
	}
	t.Logf("%d of %d saves found by a guess", workers*saves-l, workers*saves)
}

// goGuessWorker starts a goroutine of TestStackIDGuessConcurrent, from
// its one go statement: a go statement with arguments starts its own
// wrapper function, whose return address is on the goroutine's physical
// stack (and hidden from its logical one).
//
//go:noinline
func goGuessWorker(wg *sync.WaitGroup, d *depot.Depot, ids *IDs, kinds, order []int, got func(kind int, h uint32)) {
	wg.Add(1)
	go guessWorker(wg, d, ids, kinds, order, got)
}

// guessWorker saves the stacks of kinds in the order given, from one call
// site (so every goroutine goGuessWorker starts has the same stack for a
// kind), and reports each save's kind and handle (0 for an error).
//
//go:noinline
func guessWorker(wg *sync.WaitGroup, d *depot.Depot, ids *IDs, kinds, order []int, got func(kind int, h uint32)) {
	defer wg.Done()
	for _, k := range order {
		var r idResult
		shapeA(kinds[k], 14, func() { r = testSaveIDOn(d, ids, 1) })
		if r.err != nil {
			got(k, 0)
			continue
		}
		got(k, r.h)
	}
}
