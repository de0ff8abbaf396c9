package live_test

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/unwindkit/unwindkit/internal/benchbody"
	"github.com/unwindkit/unwindkit/unwind/live"
)

// liveFrames is what runtime.CallersFrames reports, minus the pcs.
func liveFrames(pcs []uintptr) []string {
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

// liveCapture calls runtime.Callers(s, ...) and live.Callers(s, ...) on
// one line for every s from 0 to past the depth and checks that they agree:
// frame 0 is each one's own Callers; for skip 1 the capturing frame has the
// same function, file and line; every other pc is identical.
//
//go:noinline
func liveCapture(bufLen int) error {
	depth := runtime.Callers(0, make([]uintptr, 1<<13))
	if bufLen == 0 {
		bufLen = depth + 4
	}
	for s := 0; s <= depth+1; s++ {
		a, b := make([]uintptr, bufLen+1), make([]uintptr, bufLen+1)
		a[bufLen], b[bufLen] = 0xdead, 0xdead
		na, nb := runtime.Callers(s, a[:bufLen]), live.Callers(s, b[:bufLen])
		if b[bufLen] != 0xdead {
			return fmt.Errorf("skip %d: live.Callers wrote beyond len(pc)", s)
		}
		if na != nb {
			return fmt.Errorf("skip %d: runtime.Callers %d pcs, live.Callers %d\nruntime: %q\nunwind:  %q",
				s, na, nb, liveFrames(a[:na]), liveFrames(b[:nb]))
		}
		fa, fb := liveFrames(a[:min(na, 3)]), liveFrames(b[:min(nb, 3)])
		for i := range fa {
			if s == 0 && i == 0 {
				if !strings.HasPrefix(fa[0], "runtime.Callers ") ||
					!strings.HasPrefix(fb[0], "github.com/unwindkit/unwindkit/unwind/live.Callers ") {
					return fmt.Errorf("skip 0: frame 0 is %q and %q", fa[0], fb[0])
				}
				continue
			}
			if fa[i] != fb[i] {
				return fmt.Errorf("skip %d: frame %d: runtime %q, unwind %q", s, i, fa[i], fb[i])
			}
		}
		for i := max(0, 2-s); i < na; i++ {
			if a[i] != b[i] {
				return fmt.Errorf("skip %d: pc %d: runtime %#x, unwind %#x\nruntime: %q\nunwind:  %q",
					s, i, a[i], b[i], liveFrames(a[:na]), liveFrames(b[:nb]))
			}
		}
	}
	return nil
}

//go:noinline
func liveChainA(n int) error { return liveChainB(n) }

//go:noinline
func liveChainB(n int) error { return liveCapture(n) }

// Inlined into liveInlineHost.
func liveInlineA(n int) error { return liveInlineB(n) }
func liveInlineB(n int) error { return liveCapture(n) }

//go:noinline
func liveInlineHost(n int) error { return liveInlineA(n) }

//go:noinline
func liveGo(n int, out chan<- error) { out <- liveChainA(n) }

//go:noinline
func liveRecurse(d, n int) error {
	if d == 0 {
		return liveCapture(n)
	}
	return liveRecurse(d-1, n)
}

//go:noinline
func liveDeferRecover(n int) (err error) {
	defer func() {
		err = liveCapture(n) // while panicking
		recover()
		if err == nil {
			err = liveCapture(n) // after recover
		}
	}()
	panic("boom")
}

type liveT[T any] struct{ v T }

//go:noinline
func (l *liveT[T]) capture(n int) error { return func() error { return liveCapture(n) }() }

func TestCallersMatchesRuntimeCallers(t *testing.T) {
	tests := []struct {
		name string
		run  func(n int) error
	}{
		{"chain", liveChainA},
		{"inlined", liveInlineHost},
		{"goroutine", func(n int) error {
			out := make(chan error)
			go liveGo(n, out)
			return <-out
		}},
		{"deep", func(n int) error { return liveRecurse(1100, n) }},
		{"defer-recover", liveDeferRecover},
		{"generic-method-closure", func(n int) error { return (&liveT[string]{}).capture(n) }},
	}
	for _, tc := range tests {
		for _, bufLen := range []int{0, 1, 7, 100} {
			t.Run(fmt.Sprintf("%s/buf=%d", tc.name, bufLen), func(t *testing.T) {
				if err := tc.run(bufLen); err != nil {
					t.Fatal(err)
				}
			})
		}
	}
}

//go:noinline
func liveFPCaller() ([]string, []string, error) {
	pc := make([]uintptr, 64)
	n, err := live.CallersFP(0, pc)
	if err != nil {
		return nil, nil, err
	}
	rt := make([]uintptr, 64)
	return liveFrames(pc[:n]), liveFrames(rt[:runtime.Callers(0, rt)]), nil
}

func TestCallersFPFrames(t *testing.T) {
	fp, rt, err := liveFPCaller()
	if errors.Is(err, live.ErrNotSupported) {
		if runtime.GOARCH == "amd64" || runtime.GOARCH == "arm64" {
			t.Fatalf("ErrNotSupported on %s", runtime.GOARCH)
		}
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(fp[0], "github.com/unwindkit/unwindkit/unwind/live.CallersFP ") {
		t.Fatalf("frame 0 is %q, want live.CallersFP", fp[0])
	}
	// Below frame 1 (the capturing frame, another line) the physical frames
	// expand to the runtime's frames plus the wrappers the runtime hides.
	var kept []string
	for _, f := range fp[2:] {
		if !strings.Contains(f, ".gowrap") {
			kept = append(kept, f)
		}
	}
	if fmt.Sprint(kept) != fmt.Sprint(rt[2:]) || !strings.HasPrefix(fp[1], strings.Fields(rt[1])[0]+" ") {
		t.Fatalf("CallersFP frames %q\nruntime frames %q", fp, rt)
	}
	pc := make([]uintptr, 64)
	n, err := live.CallersFP(1, pc)
	if err != nil || n == 0 {
		t.Fatalf("CallersFP(1): %d, %v", n, err)
	}
	if f := liveFrames(pc[:1])[0]; !strings.Contains(f, ".TestCallersFPFrames ") {
		t.Fatalf("CallersFP(1) frame 0 is %q, want the caller", f)
	}
}

// liveAtDepth calls f with at least d frames below it.
//
// BenchmarkLiveCallers compares runtime.Callers, live.Callers and
// live.CallersFP in one run, each storing exactly depth frames: the same
// bodies the report (examples/compare) runs (package internal/benchbody).
func BenchmarkLiveCallers(b *testing.B) {
	for _, depth := range benchbody.LiveDepths {
		for _, u := range benchbody.LiveUnwinders {
			b.Run(fmt.Sprintf("depth=%d/%s", depth, u.Name), func(b *testing.B) {
				if !benchbody.LiveSupported(u) {
					b.Skip("no frame pointers")
				}
				benchbody.Live(u, depth)(b)
			})
		}
	}
}

// CallersFP(s) is CallersFP(0) without its first s frames, for every s
// (skip 1, the common case, takes the inlined loop; the others the
// general walk), called from one call site.
func TestCallersFPSkips(t *testing.T) {
	if _, err := live.CallersFP(0, nil); errors.Is(err, live.ErrNotSupported) {
		t.Skip("no frame pointers")
	}
	var all [][]uintptr
	for s := range 12 {
		pc := make([]uintptr, 64)
		n, err := live.CallersFP(s, pc)
		if err != nil {
			t.Fatalf("skip %d: %v", s, err)
		}
		all = append(all, pc[:n])
	}
	full := all[0]
	if len(full) < 4 || !strings.HasPrefix(liveFrames(full[:1])[0], "github.com/unwindkit/unwindkit/unwind/live.CallersFP ") {
		t.Fatalf("skip 0: %q", liveFrames(full))
	}
	for s, got := range all {
		if want := full[min(s, len(full)):]; fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("skip %d: %#x, want %#x", s, got, want)
		}
	}
	for _, size := range []int{1, 2} {
		pc := make([]uintptr, size+1)
		pc[size] = 0xdead
		if n, err := live.CallersFP(0, pc[:size]); n != size || err != nil || pc[0] != full[0] || pc[size] != 0xdead {
			t.Fatalf("skip 0 into %d slots: %d, %v, %#x", size, n, err, pc)
		}
	}
}
