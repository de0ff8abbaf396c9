package stackid_test

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/unwindkit/unwindkit/depot"
	"github.com/unwindkit/unwindkit/unwind/live"
	"github.com/unwindkit/unwindkit/unwind/live/stackid"
)

func framesOf(pcs []uintptr) []string {
	var out []string
	if len(pcs) == 0 {
		return out
	}
	fs := runtime.CallersFrames(pcs)
	for {
		f, more := fs.Next()
		out = append(out, fmt.Sprintf("%s %s:%d", f.Function, f.File, f.Line))
		if !more {
			return out
		}
	}
}

// compare saves the stack with skip s and calls live.Callers(s) on the
// same line, then checks that the fetched pcs are live.Callers': the same
// count, the same pcs but the capturing frame's (same function, file and
// line: a different call on the line).
//
//go:noinline
func compare(tb *stackid.Table, s, bufLen int) error {
	pc, got := make([]uintptr, bufLen), make([]uintptr, bufLen)
	r, n := result(tb.Save(s)), live.Callers(s, pc) // one line: the same caller pc but for the call
	if n == 0 && errors.Is(r.err, depot.ErrEmpty) && r.h == 0 {
		return nil // nothing left after the skip
	}
	if r.err != nil {
		return fmt.Errorf("skip %d: %w (live.Callers: %d pcs)", s, r.err, n)
	}
	m, err := tb.Fetch(r.h, got)
	if err != nil {
		return err
	}
	if m != n {
		return fmt.Errorf("skip %d: fetched %d pcs, live.Callers %d\nfetched: %q\nlive:    %q", s, m, n, framesOf(got[:m]), framesOf(pc[:n]))
	}
	for i := range n {
		if s == 0 && i == 0 || s <= 1 && i == 1-s {
			continue // each one's own frame; the capturing frame (another call on its line)
		}
		if pc[i] != got[i] {
			return fmt.Errorf("skip %d: pc %d: fetched %#x, live.Callers %#x\nfetched: %q\nlive:    %q", s, i, got[i], pc[i], framesOf(got[:m]), framesOf(pc[:n]))
		}
	}
	if s <= 1 && n > 1-s {
		if a, b := framesOf(got[1-s:2-s]), framesOf(pc[1-s:2-s]); a[0] != b[0] {
			return fmt.Errorf("skip %d: capturing frame fetched %q, live.Callers %q", s, a, b)
		}
	}
	if s == 0 && n > 0 {
		if f := framesOf(got[:1])[0]; !strings.HasPrefix(f, "github.com/unwindkit/unwindkit/unwind/live/stackid.(*Table).Save ") {
			return fmt.Errorf("skip 0: frame 0 is %q, want Save", f)
		}
	}
	return nil
}

// saved is what Save returned, so that Save and live.Callers can be
// called in one statement.
type saved struct {
	h   depot.Handle
	err error
}

func result(h depot.Handle, err error) saved { return saved{h, err} }

func TestSmoke(t *testing.T) {
	tb, err := stackid.New(depot.Config{})
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		for s := 0; s < 8; s++ {
			if err := compare(tb, s, 64); err != nil {
				t.Fatal(err)
			}
		}
	}
	t.Logf("%+v", tb.Stats())
}

// saveTwice saves its caller's stack with skip 1 and, through an inlined
// helper, with skip 2, from one call site each.
//
//go:noinline
func saveTwice(tb *stackid.Table) (depot.Handle, depot.Handle) {
	a, _ := tb.Save(1)
	return a, inlinedSave(tb)
}

func inlinedSave(tb *stackid.Table) depot.Handle { h, _ := tb.Save(2); return h }

// forkPair saves two stacks that share their first frames (those of
// forked) and differ in the call of forked's outermost frame, so that each
// finds the other's guess.
//
//go:noinline
func forkPair(tb *stackid.Table) (depot.Handle, depot.Handle) {
	return forked(tb, 6), forked(tb, 6)
}

//go:noinline
func forked(tb *stackid.Table, d int) depot.Handle {
	if d == 0 {
		h, _ := tb.Save(1)
		return h
	}
	return forked(tb, d-1)
}

// A known stack costs no allocation and takes the same handle, with skip 1
// and with a skip that cuts into an inlined frame, and so do two that take
// each other's guess in turn.
func TestSaveKnownStackNoAlloc(t *testing.T) {
	tb, err := stackid.New(depot.Config{})
	if err != nil {
		t.Fatal(err)
	}
	var a0, b0, c0, d0 depot.Handle
	runs := 0
	allocs := testing.AllocsPerRun(100, func() { // its warm-up from one call site, its runs from another
		a, b := saveTwice(tb)
		c, d := forkPair(tb)
		if runs++; runs == 2 {
			a0, b0, c0, d0 = a, b, c, d
		}
		if runs == 1 {
			return
		}
		if a == 0 || b == 0 || a != a0 || b != b0 || c == 0 || c == d || c != c0 || d != d0 {
			t.Fatalf("handles %v %v %v %v, first %v %v %v %v", a, b, c, d, a0, b0, c0, d0)
		}
	})
	_, err = live.CallersFP(0, nil)
	if onePass := !raceBuild && !errors.Is(err, live.ErrNotSupported); onePass && allocs != 0 {
		t.Fatalf("%v allocations saving known stacks", allocs)
	}
	if s := tb.Stats(); s.Depot.InUse != 8 { // four stacks at each of AllocsPerRun's two call sites
		t.Fatalf("%d stacks stored, want 8", s.Depot.InUse)
	}
}
