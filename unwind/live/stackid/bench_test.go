package stackid_test

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/unwindkit/unwindkit/depot"
	"github.com/unwindkit/unwindkit/internal/benchbody"
	"github.com/unwindkit/unwindkit/unwind/live"
	"github.com/unwindkit/unwindkit/unwind/live/stackid"
)

// atDepth calls f with d more frames below it.
//
//go:noinline
func atDepth(d int, f func()) {
	if d <= 0 {
		f()
		return
	}
	atDepth(d-1, f)
}

// contender is one way to get a stack's ID (or, for floors, part of it).
type contender struct {
	name string
	fn   func() bool // false: it did not do what it should
}

// sideBySide runs the contenders interleaved, batches of calls each in
// turn with the order rotating, and returns each one's ns per call in its
// fastest batch (a batch that was preempted or shared a core is slower,
// never faster).
func sideBySide(b *testing.B, cs []contender, batch int) []float64 {
	best := make([]time.Duration, len(cs))
	// Round -1 warms up (learns, stores); every call, warm or timed, is
	// made from the one call site below, so that a contender's stack is
	// the same every time.
	for round := -1; round < 0 || b.Loop(); round++ {
		for k := range cs {
			i := (k + max(round, 0)) % len(cs)
			n := batch
			if round < 0 {
				n = 1
			}
			t0 := time.Now()
			ok := benchbody.RunBatch(cs[i].fn, n)
			d := time.Since(t0)
			if !ok {
				b.Fatalf("%s failed", cs[i].name)
			}
			if round >= 0 && (best[i] == 0 || d < best[i]) {
				best[i] = d
			}
		}
	}
	ns := make([]float64, len(cs))
	for i := range cs {
		ns[i] = float64(best[i].Nanoseconds()) / float64(batch)
	}
	return ns
}

// BenchmarkStackIDSideBySide compares, for one stack deeper than the
// frames kept (depth = frames kept), side by side in one run:
//
//   - onepass: Table.Save(1), the one-pass stack ID (a Table whose
//     MaxFrames is the depth);
//   - twopass: live.Callers(1, pc) then depot.SavePCs (this library's two
//     passes: the unwinder stores, the depot hashes and compares);
//   - peer: runtime.Callers(1, pc) then a map[string]uint32 behind a
//     sync.Mutex keyed by the pcs' bytes, the idiom of today;
//   - callersfp: live.CallersFP(1, pc), a walk that stores the return
//     addresses and nothing else (the floor of the walk);
//   - callers and runtime: live.Callers and runtime.Callers alone;
//
// and two floors of onepass: walkhash, its walk and hash alone (no lookup),
// and lookup, the depot's LookupHashed alone of a stored trace of the
// depth given its hash. It reports each one's ns per call (fastest batch)
// and the ratios peer/onepass, twopass/onepass, onepass/callersfp, and
// walkhash/callersfp and floor/callersfp ((walkhash + lookup) /
// callersfp: what onepass/callersfp cannot go below).
//
//	go test -run '^$' -bench StackIDSideBySide -count 5 ./unwind/live/stackid
func BenchmarkStackIDSideBySide(b *testing.B) {
	if !benchbody.StackIDSupported() {
		b.Skip("no frame pointers")
	}
	for _, depth := range benchbody.StackIDDepths {
		b.Run(fmt.Sprintf("depth=%d", depth), func(b *testing.B) {
			bcs, err := benchbody.StackIDContenders(depth)
			if err != nil {
				b.Fatal(err)
			}
			cs := make([]contender, len(bcs))
			for i, c := range bcs {
				cs[i] = contender{c.Name, c.Fn}
			}
			var ns []float64
			atDepth(depth+8, func() {
				ns = sideBySide(b, cs, 256)
			})
			for i, c := range cs {
				b.ReportMetric(ns[i], c.name+"-ns")
			}
			b.ReportMetric(ns[2]/ns[0], "peer/onepass")
			b.ReportMetric(ns[1]/ns[0], "twopass/onepass")
			b.ReportMetric(ns[0]/ns[3], "onepass/callersfp")
			b.ReportMetric(ns[5]/ns[4], "runtime/callers")
			b.ReportMetric(ns[6]/ns[3], "walkhash/callersfp")
			b.ReportMetric((ns[6]+ns[7])/ns[3], "floor/callersfp")
			b.ReportMetric(0, "ns/op")
		})
	}
}

// Whole stacks, as the error and logging libraries capture them: the
// stack of a fresh goroutine, depth logical frames down to runtime.goexit
// (about one physical frame in three of the recursion has a call inlined
// into it, so two logical frames), captured into a buffer it fits, with the
// libraries' own call shapes.

// wsRec and wsInl are the recursion: every third physical frame calls on
// through wsInl, which is inlined into it (two logical frames); the others
// call wsRec directly.
//
//go:noinline
func wsRec(d int, f func()) {
	switch {
	case d <= 0:
		f()
	case d%4 == 0:
		wsInl(d, f)
	default:
		wsRec(d-1, f)
	}
}

func wsInl(d int, f func()) { wsRec(d-2, f) }

// The ways a contender of BenchmarkWholeStack captures a stack.
const (
	wayRuntime   = iota // runtime.Callers
	wayLive             // live.Callers
	waySaveFetch        // Table.Save, then Table.Fetch
)

// errorsCallers is pkg/errors' callers(): runtime.Callers(3, pcs[:32])
// from a function its constructor calls (skip: runtime.Callers, callers,
// the constructor), into an array on its stack, or the same with
// live.Callers or the stack ID, called directly as the library would
// (through a func value the array would escape to the heap, and every
// contender would pay for an allocation pkg/errors does not make).
//
//go:noinline
func errorsCallers(way int, tb *stackid.Table) int {
	var pcs [32]uintptr
	switch way {
	case wayRuntime:
		return runtime.Callers(3, pcs[:])
	case wayLive:
		return live.Callers(3, pcs[:])
	}
	h, err := tb.Save(3) // 0 is Save, as 0 is runtime.Callers
	if err != nil || h == 0 {
		return -1
	}
	n, err := tb.Fetch(h, pcs[:])
	if err != nil {
		return -1
	}
	return n
}

// errorsNew is the constructor (errors.New, inlined into its caller).
func errorsNew(way int, tb *stackid.Table) int { return errorsCallers(way, tb) }

// wholeCall captures the stack from its caller into pc, the way way
// says (zap's and the 128-pc shape: skip 1, the buffer the caller's).
//
//go:noinline
func wholeCall(way int, tb *stackid.Table, pc []uintptr) int {
	switch way {
	case wayRuntime:
		return runtime.Callers(2, pc)
	case wayLive:
		return live.Callers(2, pc)
	}
	h, err := tb.Save(2)
	if err != nil || h == 0 {
		return -1
	}
	n, err := tb.Fetch(h, pc)
	if err != nil {
		return -1
	}
	return n
}

// wholeShape is one library call shape.
type wholeShape struct {
	name  string
	depth int // logical frames of the whole stack
	buf   int
}

// BenchmarkWholeStack compares runtime.Callers, live.Callers and the
// one-pass stack ID (Table.Save with the same skip) on whole stacks that
// fit the buffer, in the libraries' shapes: pkg/errors (skip 3 into 32
// pcs) at depth 10 and 32, zap (skip into 64 pcs) at 32, and a 128-pc
// buffer at depth 100. live.CallersFP (the walk alone, its physical
// frames) is the floor; savefetch saves and fetches (checking that the
// fetch has runtime.Callers' count). Reports rt/callers and rt/onepass,
// the speed-ups.
//
//	go test -run '^$' -bench WholeStack -count 5 ./unwind/live/stackid
func BenchmarkWholeStack(b *testing.B) {
	for _, sh := range []wholeShape{{"errors", 10, 32}, {"zap", 32, 64}, {"buf128", 100, 128}} {
		b.Run(fmt.Sprintf("depth=%d/%s", sh.depth, sh.name), func(b *testing.B) {
			tb, err := stackid.New(depot.Config{MaxFrames: sh.buf})
			if err != nil {
				b.Fatal(err)
			}
			var ns []float64
			var counts [4]int
			done := make(chan struct{})
			go func() {
				defer close(done)
				// The goroutine's own frames: this closure and wsRec's;
				// the recursion makes up the rest of depth.
				wsRec(sh.depth-6, func() {
					pc := make([]uintptr, sh.buf)
					// Each contender's closure runs at the same depth, so
					// each stores the same count.
					cs := []contender{
						{"runtime", func() bool { counts[0] = shapeCall(sh, wayRuntime, tb, pc); return counts[0] > 0 }},
						{"callers", func() bool { counts[1] = shapeCall(sh, wayLive, tb, pc); return counts[1] == counts[0] }},
						{"onepass", func() bool { h := shapeSave(sh, tb); return h != 0 }},
						{"callersfp", func() bool { n, err := live.CallersFP(1, pc); counts[3] = n; return err == nil }},
						{"savefetch", func() bool { counts[2] = shapeCall(sh, waySaveFetch, tb, pc); return counts[2] == counts[0] }},
					}
					ns = sideBySide(b, cs, 64)
				})
			}()
			<-done
			if ns == nil {
				b.FailNow()
			}
			if counts[2] != counts[0] {
				b.Fatalf("the one-pass stack ID fetched %d pcs, runtime.Callers %d", counts[2], counts[0])
			}
			if counts[0] >= sh.buf || counts[0] < sh.depth-8 {
				b.Fatalf("runtime.Callers stored %d of a %d-pc buffer: not a whole stack of about %d frames", counts[0], sh.buf, sh.depth)
			}
			for i, name := range []string{"runtime", "callers", "onepass", "callersfp", "savefetch"} {
				b.ReportMetric(ns[i], name+"-ns")
			}
			b.ReportMetric(float64(counts[0]), "frames")
			b.ReportMetric(ns[0]/ns[1], "rt/callers")
			b.ReportMetric(ns[0]/ns[2], "rt/onepass")
			b.ReportMetric(0, "ns/op")
		})
	}
}

// shapeSave saves the stack's ID the library's way (the skip that stores
// the frames shapeCall stores).
func shapeSave(sh wholeShape, tb *stackid.Table) depot.Handle {
	if sh.name == "errors" {
		return errorsSave(tb)
	}
	h, _ := tb.Save(1)
	return h
}

// errorsSave is errorsCallers with the stack ID: Save(2) stores what
// runtime.Callers(3) stores.
//
//go:noinline
func errorsSave(tb *stackid.Table) depot.Handle {
	h, _ := tb.Save(2)
	return h
}

// shapeCall captures the stack the library's way.
func shapeCall(sh wholeShape, way int, tb *stackid.Table, pc []uintptr) int {
	if sh.name == "errors" {
		return errorsNew(way, tb)
	}
	return wholeCall(way, tb, pc[:sh.buf])
}

// forkSave saves the stack from d frames of recursion below it; the
// recursion's frame at fork (from Save's caller, 0) makes its call from
// one of two call sites, as which says, so two values of which make two
// stacks that differ only in that frame. bits, if not negative, instead
// chooses the call site of every frame by its bit i (frames past 12
// taking bit 0 onward again), for 4,096 stacks that share at most their
// first frames. With tb nil it saves with two passes into dp
// (live.Callers into pc, then depot.SavePCs), with dp nil too not at all.
//
//go:noinline
func forkSave(tb *stackid.Table, dp *depot.Depot, pc []uintptr, d, fork, which, bits int) depot.Handle {
	if d == 0 {
		switch {
		case tb != nil:
			h, _ := tb.Save(1)
			return h
		case dp != nil:
			h, _ := dp.SavePCs(pc[:live.Callers(1, pc)])
			return h
		}
		return 1 // the recursion alone
	}
	if d == fork && which == 1 || bits >= 0 && bits>>(d%12)&1 == 1 {
		return forkSave(tb, dp, pc, d-1, fork, which, bits)
	}
	return forkSave(tb, dp, pc, d-1, fork, which, bits)
}

// BenchmarkStackIDGuess measures the guess of Table.Save on stacks of 32
// frames kept (of 40), side by side: hit, one stack (the guess right);
// late and early, two stacks saved in turn that differ in frame 30 or 5
// and share their hint slot (its guesses wrong for one of them); many,
// 4,096 stacks in turn whose frames differ from frame 0 to 12 (256 to a
// hint slot); the same four with two passes (live.Callers, then
// depot.SavePCs; twopass-*); and the recursions that make the stacks,
// alone (one for the two stacks, one for the 4,096). Each *-save metric
// is a contender's time less its recursion's.
//
//	go test -run '^$' -bench StackIDGuess -count 5 ./unwind/live/stackid
func BenchmarkStackIDGuess(b *testing.B) {
	tb, err := stackid.New(depot.Config{MaxFrames: 32})
	if err != nil {
		b.Fatal(err)
	}
	dp, err := depot.New(depot.Config{MaxFrames: 32})
	if err != nil {
		b.Fatal(err)
	}
	pc := make([]uintptr, 32)
	var turn, i int
	type shape struct {
		name                string
		fork, which, stacks int
	}
	shapes := []shape{{"hit", 30, 0, 1}, {"late", 30, -1, 2}, {"early", 5, -1, 2}, {"many", -1, 0, 4096}}
	call := func(sh shape, tb *stackid.Table, dp *depot.Depot) bool {
		which, bits := sh.which, -1
		switch {
		case sh.stacks == 2:
			turn ^= 1
			which = turn
		case sh.stacks > 2:
			i++
			bits = int(uint32(i) * 2654435761 % 4096)
		}
		return forkSave(tb, dp, pc, 40, sh.fork, which, bits) != 0
	}
	var cs []contender
	for _, sh := range shapes {
		cs = append(cs, contender{sh.name, func() bool { return call(sh, tb, nil) }})
	}
	for _, sh := range shapes {
		cs = append(cs, contender{"twopass-" + sh.name, func() bool { return call(sh, nil, dp) }})
	}
	cs = append(cs,
		contender{"recursion", func() bool { return call(shapes[1], nil, nil) }},
		contender{"recursion-many", func() bool { return call(shapes[3], nil, nil) }})
	var ns []float64
	atDepth(8, func() {
		// Every stack stored before the timing.
		for range 4096 * 2 {
			for _, c := range cs {
				c.fn()
			}
		}
		ns = sideBySide(b, cs, 256)
	})
	rec, recMany := ns[len(cs)-2], ns[len(cs)-1]
	for j, c := range cs[:len(cs)-2] {
		base := rec
		if j%4 == 3 {
			base = recMany
		}
		b.ReportMetric(ns[j]-base, c.name+"-save-ns")
	}
	b.ReportMetric(rec, "recursion-ns")
	b.ReportMetric(recMany, "recursion-many-ns")
	b.ReportMetric(0, "ns/op")
}
