package live

import (
	"errors"
	"fmt"
	"iter"
	"math"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/unwindkit/unwindkit/internal/errs"
)

// frame is what runtime.CallersFrames reports, minus the pc.
type frame struct {
	Function, File string
	Line           int
}

func (f frame) String() string { return fmt.Sprintf("%s (%s:%d)", f.Function, f.File, f.Line) }

func framesOf(pcs []uintptr) []frame {
	var out []frame
	if len(pcs) == 0 {
		return out
	}
	fs := runtime.CallersFrames(pcs)
	for {
		f, more := fs.Next()
		out = append(out, frame{f.Function, f.File, f.Line})
		if !more {
			return out
		}
	}
}

// capture is what one capture point saw, for every skip: the pcs
// runtime.Callers returned and the pcs Callers returned, called on the same
// line (so the capturing frame has the same file and line in both).
type capture struct {
	rt, lv     [][]uintptr
	viaWrapper [][]uintptr // Callers through an inlined wrapper
	id         [][]uintptr // the stack ID's fetch (testSaveID, then Expand)
	handles    []idResult  // the stack IDs
	depth      int         // runtime.Callers depth below the capturing frame
	bufLen     int
}

// inlWrap is a wrapper meant to be inlined, as live.Callers is: it must
// not change what skip means beyond adding its own logical frame.
func inlWrap(skip int, pc []uintptr) int { return testCallers(skip, pc) }

// captureAll records runtime.Callers(s+1), testCallers(s) and inlWrap(s+1) for
// every s from 0 to one past the depth, with buffers of bufLen (0: large).
//
//go:noinline
func captureAll(bufLen int) *capture {
	big := make([]uintptr, 1<<14)
	depth := runtime.Callers(1, big)
	c := &capture{depth: depth, bufLen: bufLen}
	if bufLen == 0 {
		bufLen = depth + 8
	}
	for s := 0; s <= depth+1; s++ {
		// Guard words after each buffer catch writes beyond len(pc).
		a, b, w := make([]uintptr, bufLen+2), make([]uintptr, bufLen+2), make([]uintptr, bufLen+2)
		for _, x := range [][]uintptr{a, b, w} {
			x[bufLen], x[bufLen+1] = 0xdead, 0xbeef
		}
		na, nb, nw, id := runtime.Callers(s+1, a[:bufLen]), testCallers(s, b[:bufLen]), inlWrap(s+1, w[:bufLen]), testSaveID(s+1)
		c.handles = append(c.handles, id)
		c.id = append(c.id, id.fetch(bufLen))
		for _, x := range [][]uintptr{a, b, w} {
			if x[bufLen] != 0xdead || x[bufLen+1] != 0xbeef {
				panic(fmt.Sprintf("skip %d: write beyond len(pc)", s))
			}
		}
		c.rt = append(c.rt, a[:na])
		c.lv = append(c.lv, b[:nb])
		c.viaWrapper = append(c.viaWrapper, w[:nw])
	}
	return c
}

// check asserts that Callers agreed with runtime.Callers for every skip:
// the same count, the same pcs below the capturing frame, and the same
// frames after CallersFrames. It returns the frames seen with skip 0.
func (c *capture) check(t *testing.T) []frame {
	t.Helper()
	if c.depth < 3 {
		t.Fatalf("depth %d: capture did not run", c.depth)
	}
	for s := range c.rt {
		rt, lv, w := c.rt[s], c.lv[s], c.viaWrapper[s]
		if len(rt) != len(lv) || len(rt) != len(w) {
			t.Fatalf("skip %d: runtime.Callers %d pcs, Callers %d, via wrapper %d\nruntime: %v\nlive:    %v",
				s, len(rt), len(lv), len(w), framesOf(rt), framesOf(lv))
		}
		for i := range rt {
			if s == 0 && i == 0 {
				continue // the capturing frame: same line, different call
			}
			if rt[i] != lv[i] || rt[i] != w[i] {
				t.Fatalf("skip %d: pc %d: runtime %#x, Callers %#x, via wrapper %#x\nruntime: %v\nlive:    %v",
					s, i, rt[i], lv[i], w[i], framesOf(rt), framesOf(lv))
			}
		}
		if err := c.checkID(s); err != nil {
			t.Fatal(err)
		}
		if s <= 1 || s == len(c.rt)-1 {
			fr, fl, fw := framesOf(rt), framesOf(lv), framesOf(w)
			if fmt.Sprint(fr) != fmt.Sprint(fl) || fmt.Sprint(fr) != fmt.Sprint(fw) {
				t.Fatalf("skip %d: frames differ\nruntime: %v\nlive:    %v\nwrapper: %v", s, fr, fl, fw)
			}
		}
	}
	// Expected sizes: a full buffer, or everything left after skip.
	for s, rt := range c.rt {
		want := c.depth - s
		if want < 0 {
			want = 0
		}
		if c.bufLen > 0 && want > c.bufLen {
			want = c.bufLen
		}
		if len(rt) != want {
			t.Fatalf("skip %d: runtime.Callers gave %d pcs, want %d", s, len(rt), want)
		}
	}
	f := framesOf(c.rt[0])
	if !strings.HasSuffix(f[0].Function, ".captureAll") {
		t.Fatalf("frame 0 is %v, want captureAll", f[0])
	}
	if c.bufLen == 0 && f[len(f)-1].Function != "runtime.goexit" {
		t.Fatalf("last frame is %v, want runtime.goexit", f[len(f)-1])
	}
	return f
}

// wantFrames asserts that every name in want appears, in order, in got.
func wantFrames(t *testing.T, got []frame, want ...string) {
	t.Helper()
	i := 0
	for _, f := range got {
		if i < len(want) && strings.HasSuffix(f.Function, want[i]) {
			i++
		}
	}
	if i < len(want) {
		t.Fatalf("frames %v\nlack %q (in order %q)", got, want[i], want)
	}
}

// noFrames asserts that no frame's function contains any of bad.
func noFrames(t *testing.T, got []frame, bad ...string) {
	t.Helper()
	for _, f := range got {
		for _, b := range bad {
			if strings.Contains(f.Function, b) {
				t.Fatalf("frame %v should be hidden", f)
			}
		}
	}
}

// Plain chain of non-inlined functions.

//go:noinline
func plainA(n int) *capture { return plainB(n) }

//go:noinline
func plainB(n int) *capture { return plainC(n) }

//go:noinline
func plainC(n int) *capture { return captureAll(n) }

// Inlined chain: inlA and inlB are inlined into inlHost.

func inlA(n int) *capture { return inlB(n) }
func inlB(n int) *capture { return captureAll(n) }

//go:noinline
func inlHost(n int) *capture { return inlA(n) }

// Methods, generics, a value method called through an interface holding a
// pointer (an autogenerated wrapper the runtime hides) and a method value.

type valRecv struct{ k int }

type capturer interface{ capture(n int) *capture }

//go:noinline
func (v valRecv) capture(n int) *capture { return genericCapture(v.k, n) }

//go:noinline
func genericCapture[T any](_ T, n int) *capture { return (&ptrRecv{}).capture(n) }

type ptrRecv struct{}

//go:noinline
func (p *ptrRecv) capture(n int) *capture { return captureAll(n) }

//go:noinline
func viaInterface(n int) *capture {
	var c capturer = &valRecv{k: 1}
	return c.capture(n)
}

//go:noinline
func viaMethodValue(n int) *capture {
	f := (&ptrRecv{}).capture
	return f(n)
}

// Closures.

//go:noinline
func viaClosure(n int) *capture {
	depth := 2
	var rec func(d int) *capture
	rec = func(d int) *capture {
		if d == 0 {
			return captureAll(n)
		}
		return rec(d - 1)
	}
	return rec(depth)
}

// A goroutine started with go and arguments: the compiler wraps the call in
// a "gowrap" closure that runtime.Callers hides.

//go:noinline
func goWorker(n int, out chan<- *capture) { out <- plainA(n) }

func viaGoroutine(n int) *capture {
	out := make(chan *capture)
	go goWorker(n, out)
	return <-out
}

// Deep recursion.

//go:noinline
func recurse(d, n int) *capture {
	if d == 0 {
		return captureAll(n)
	}
	return recurse(d-1, n)
}

// recurseInl recurses d levels, every third through inlRecurse, inlined
// into it: a deep stack in which a third of the frames expand to two
// logical ones, so that Callers' expansions run out of room in pc again
// and again, over more than one read-ahead buffer (fastChunk).
//
//go:noinline
func recurseInl(d, n int) *capture {
	switch {
	case d <= 0:
		return captureAll(n)
	case d%3 == 0:
		return inlRecurse(d, n)
	}
	return recurseInl(d-1, n)
}

func inlRecurse(d, n int) *capture { return recurseInl(d-2, n) }

// Deferred calls, panics and recover.

//go:noinline
func inDefer(n int) (c *capture) {
	defer func() { c = captureAll(n) }()
	return nil
}

//go:noinline
func inPanicDefer(n int) (c *capture) {
	defer func() {
		c = captureAll(n) // during panicking, before recover
		recover()
	}()
	panic("boom")
}

//go:noinline
func afterRecoverInDefer(n int) (c *capture) {
	defer func() {
		recover()
		c = captureAll(n)
	}()
	panic("boom")
}

//go:noinline
func panicky() {
	defer func() { recover() }()
	panic("boom")
}

//go:noinline
func afterRecover(n int) *capture {
	panicky()
	return captureAll(n)
}

//go:noinline
func deferTarget(n int, out **capture) { *out = captureAll(n) }

// defer with arguments: the compiler wraps the call in a "deferwrap"
// closure.
//
//go:noinline
func inDeferWrap(n int) (c *capture) {
	defer deferTarget(n, &c)
	return nil
}

//go:noinline
func inDeferWrapPanic(n int) (c *capture) {
	defer func() { recover() }()
	defer deferTarget(n, &c)
	panic("boom")
}

// Defers in a loop are not open-coded: runtime.deferreturn (a wrapper to
// the runtime) calls the deferwrap closures.
//
//go:noinline
func inDeferLoop(n int) (c *capture) {
	for i := 0; i < 2; i++ {
		defer deferTarget(n, &c)
	}
	return nil
}

// Inside an iter.Pull coroutine (its stack starts at runtime.corostart).
//
//go:noinline
func inCoroutine(n int) *capture {
	next, stop := iter.Pull(func(yield func(*capture) bool) { yield(plainA(n)) })
	defer stop()
	c, _ := next()
	return c
}

// Through reflect.Value.Call (the runtime's reflectcall and its assembly
// callNN trampolines).
//
//go:noinline
func viaReflect(n int) *capture {
	out := reflect.ValueOf(plainA).Call([]reflect.Value{reflect.ValueOf(n)})
	return out[0].Interface().(*capture)
}

// During runtime.Goexit's deferred calls.
func inGoexit(n int) *capture {
	out := make(chan *capture)
	go func() {
		var c *capture
		defer func() { out <- c }()
		defer func() { c = captureAll(n) }()
		runtime.Goexit()
	}()
	return <-out
}

// In a finalizer, run by the runtime's finalizer goroutine.
func inFinalizer(n int) *capture {
	out := make(chan *capture, 1)
	func() {
		p := new([64]byte)
		runtime.SetFinalizer(p, func(*[64]byte) { out <- captureAll(n) })
	}()
	for {
		runtime.GC()
		select {
		case c := <-out:
			return c
		case <-time.After(10 * time.Millisecond):
		}
	}
}

var nilPtr *valRecv

//go:noinline
func inSigpanicDefer(n int) (c *capture) {
	defer func() {
		c = captureAll(n) // the stack holds runtime.sigpanic
		recover()
	}()
	return captureAll(nilPtr.k)
}

// scenarios are the stacks Callers must reproduce; names lists functions
// that must appear in order, hidden those runtime.Callers must not show.
var scenarios = []struct {
	name   string
	run    func(n int) *capture
	names  []string
	hidden []string
}{
	{"plain", plainA, []string{"captureAll", "plainC", "plainB", "plainA", "runtime.goexit"}, nil},
	{"inlined", inlHost, []string{"captureAll", "inlB", "inlA", "inlHost"}, nil},
	{"interface", viaInterface, []string{"captureAll", "(*ptrRecv).capture", "genericCapture[...]", "valRecv.capture", "viaInterface"}, nil},
	{"method-value", viaMethodValue, []string{"captureAll", "(*ptrRecv).capture", "viaMethodValue"}, nil},
	{"closure", viaClosure, []string{"captureAll", "viaClosure.func1", "viaClosure.func1", "viaClosure.func1", "viaClosure"}, nil},
	{"goroutine", viaGoroutine, []string{"captureAll", "plainA", "goWorker", "runtime.goexit"}, []string{"gowrap"}},
	{"defer", inDefer, []string{"captureAll", "inDefer.func1", "inDefer"}, nil},
	{"defer-wrap", inDeferWrap, []string{"captureAll", "deferTarget", "inDeferWrap"}, []string{"deferwrap"}},
	{"coroutine", inCoroutine, []string{"captureAll", "plainA", "inCoroutine.func1"}, nil},
	{"reflect", viaReflect, []string{"captureAll", "plainA", "reflect.Value.Call", "viaReflect"}, nil},
	{"goexit-defer", inGoexit, []string{"captureAll", "runtime.Goexit", "inGoexit.func1"}, nil},
	{"finalizer", inFinalizer, []string{"captureAll", "runtime.runFinalizers", "runtime.goexit"}, nil},
	{"defer-loop", inDeferLoop, []string{"captureAll", "deferTarget", "inDeferLoop"}, []string{"deferwrap", "deferreturn"}},
	{"defer-wrap-panic", inDeferWrapPanic, []string{"captureAll", "deferTarget", "runtime.gopanic", "inDeferWrapPanic"}, []string{"deferwrap"}},
	{"panic-defer", inPanicDefer, []string{"captureAll", "inPanicDefer.func1", "runtime.gopanic", "inPanicDefer"}, nil},
	{"recover-in-defer", afterRecoverInDefer, []string{"captureAll", "afterRecoverInDefer.func1", "runtime.gopanic", "afterRecoverInDefer"}, nil},
	{"after-recover", afterRecover, []string{"captureAll", "afterRecover"}, nil},
	{"sigpanic-defer", inSigpanicDefer, []string{"captureAll", "inSigpanicDefer.func1", "runtime.gopanic", "runtime.sigpanic", "inSigpanicDefer"}, nil},
	{"deep", func(n int) *capture { return recurse(1100, n) }, []string{"captureAll", "recurse", "recurse"}, nil},
	{"deep-inlined", func(n int) *capture { return recurseInl(150, n) }, []string{"captureAll", "recurseInl", "inlRecurse", "recurseInl", "recurseInl"}, nil},
}

func TestCallersMatchesRuntime(t *testing.T) {
	for _, sc := range scenarios {
		for _, bufLen := range []int{0, 1, 5, 64} {
			t.Run(fmt.Sprintf("%s/buf=%d", sc.name, bufLen), func(t *testing.T) {
				c := sc.run(bufLen)
				f := c.check(t)
				if bufLen == 0 {
					wantFrames(t, f, sc.names...)
					noFrames(t, f, sc.hidden...)
				}
			})
		}
	}
}

// The same with an empty cache for every capture, so the learning path runs
// inside every scenario, and with the cache filled, so it does not.
func TestCallersColdAndWarm(t *testing.T) {
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			resetCache()
			var learns, slows uint64
			for i := 0; i < 2; i++ { // one call site, so warm means warm
				if i == 1 {
					learns, slows = learnCalls.Load(), runtimeCalls.Load()
				}
				sc.run(0).check(t)
			}
			if strings.HasPrefix(sc.name, "sigpanic") {
				return // answered by runtime.Callers on purpose
			}
			if d := learnCalls.Load() - learns; d != 0 {
				t.Errorf("warm run learned %d times", d)
			}
			if d := runtimeCalls.Load() - slows; d != 0 {
				t.Errorf("warm run fell back to runtime.Callers %d times", d)
			}
		})
	}
}

// A stack through runtime.sigpanic is answered by runtime.Callers.
func TestSigpanicFallsBack(t *testing.T) {
	if !Supported {
		t.Skip("no frame pointers")
	}
	before := runtimeCalls.Load()
	inSigpanicDefer(0).check(t)
	if runtimeCalls.Load() == before {
		t.Fatal("a stack through runtime.sigpanic did not fall back to runtime.Callers")
	}
}

// The inlined scenario really has inlined frames: fewer physical frames
// than logical ones.
func TestInlinedScenarioIsInlined(t *testing.T) {
	if !inliningOn() {
		t.Skip("built without inlining (-gcflags=-l): nothing is inlined")
	}
	c := inlHost(0)
	fpc := make([]uintptr, 256)
	n := inlHostFP(fpc)
	if n == 0 || n >= c.depth {
		t.Fatalf("physical frames %d, logical %d: inlA/inlB were not inlined", n, c.depth)
	}
}

func inlFPA(pc []uintptr) int { return inlFPB(pc) }
func inlFPB(pc []uintptr) int {
	n, err := CallersFP(0, pc)
	if err != nil && !errors.Is(err, errs.ErrNotSupported) {
		panic(err)
	}
	if err != nil {
		return runtime.Callers(1, pc) - 2 // not supported: count inlined frames as physical
	}
	return n
}

//go:noinline
func inlHostFP(pc []uintptr) int { return inlFPA(pc) }

func TestSkipEdges(t *testing.T) {
	pc := make([]uintptr, 8)
	if n := testCallers(0, pc[:0]); n != 0 {
		t.Fatalf("empty buffer: %d", n)
	}
	if n := testCallers(math.MaxInt, pc); n != 0 {
		t.Fatalf("huge skip: %d", n)
	}
	if n := callersSlow(math.MaxInt, pc); n != 0 {
		t.Fatalf("huge skip, slow: %d", n)
	}
	a, b := make([]uintptr, 8), make([]uintptr, 8)
	na, nb := testCallers(-5, a), testCallers(0, b)
	if na != nb || fmt.Sprint(framesOf(a[:na])) != fmt.Sprint(framesOf(b[:nb])) {
		t.Fatalf("negative skip differs from 0:\n%v\n%v", framesOf(a[:na]), framesOf(b[:nb]))
	}
}

// The fallback keeps the skip meaning.
func TestSlowPathSkip(t *testing.T) {
	big := make([]uintptr, 256)
	depth := runtime.Callers(1, big)
	for s := 0; s <= depth; s++ {
		a, b := make([]uintptr, 256), make([]uintptr, 256)
		na, nb := runtime.Callers(s+1, a), callersSlow(s, b)
		fa, fb := framesOf(a[:na]), framesOf(b[:nb])
		if fmt.Sprint(fa) != fmt.Sprint(fb) {
			t.Fatalf("skip %d:\nruntime: %v\nslow:    %v", s, fa, fb)
		}
	}
}

// Concurrent callers, with the cache being emptied under them, agree with
// the runtime (run with -race).
func TestCallersConcurrent(t *testing.T) {
	var wg sync.WaitGroup
	errc := make(chan error, 8)
	stop, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		for {
			select {
			case <-stop:
				return
			default:
				resetCache()
				runtime.Gosched()
			}
		}
	}()
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 60; i++ {
				sc := scenarios[i%len(scenarios)]
				if sc.name == "deep" {
					continue
				}
				c := sc.run(0)
				for s := range c.rt {
					rt, lv := c.rt[s], c.lv[s]
					if s == 0 && len(rt) > 0 && len(lv) > 0 {
						rt, lv = rt[1:], lv[1:] // the capturing frame: same line, other call
					}
					if !slices.Equal(rt, lv) {
						errc <- fmt.Errorf("%s skip %d: %v != %v", sc.name, s, framesOf(rt), framesOf(lv))
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	// Wait for the emptier too: one more resetCache after the test has
	// returned (it was descheduled under CI's load) emptied the cache in
	// the middle of TestCgoCallback, which then learned again.
	close(stop)
	<-stopped
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
}

//go:noinline
func physFrames() []frame {
	pc := make([]uintptr, 64)
	n, _ := CallersFP(0, pc)
	return framesOf(pc[:n])
}

//go:noinline
func setPhys(p *[]frame) { *p = physFrames() }

//go:noinline
func deferLoopPhys() (f []frame) {
	for i := 0; i < 2; i++ {
		defer setPhys(&f)
	}
	return nil
}

// The defer-loop scenario really runs a deferwrap closure from
// runtime.deferreturn: two hidden frames in a row.
func TestDeferLoopHasTwoWrappers(t *testing.T) {
	if !Supported {
		t.Skip("no frame pointers")
	}
	f := deferLoopPhys()
	wantFrames(t, f, "physFrames", "setPhys", "deferLoopPhys.deferwrap1", "runtime.deferreturn", "deferLoopPhys")
}

//go:noinline
func deepSmall(d int, pc []uintptr) (int, int) {
	if d == 0 {
		return runtime.Callers(1, pc[:len(pc)/2]), testCallers(0, pc[len(pc)/2:])
	}
	return deepSmall(d-1, pc)
}

// On a very deep stack a cold Callers with a small buffer learns only the
// frames it needs, not the whole stack.
func TestLearnIsBounded(t *testing.T) {
	if !Supported {
		t.Skip("no frame pointers")
	}
	resetCache()
	before := learnFrames.Load()
	pc := make([]uintptr, 16)
	na, nb := deepSmall(20000, pc)
	if na != 8 || nb != 8 || !slices.Equal(pc[1:8], pc[9:16]) {
		t.Fatalf("runtime %d %v, live %d %v", na, framesOf(pc[:8]), nb, framesOf(pc[8:]))
	}
	if walked := learnFrames.Load() - before; walked == 0 || walked > 8+learnSlack+2 {
		t.Fatalf("learning walked %d frames for an 8-frame buffer", walked)
	}
}

// inlProbe is small enough to be inlined, unless inlining is off.
func inlProbe(pc []uintptr) int { return runtime.Callers(1, pc) }

// inliningOn reports whether the compiler inlined inlProbe.
//
//go:noinline
func inliningOn() bool {
	pc := make([]uintptr, 1)
	inlProbe(pc)
	f, _ := runtime.CallersFrames(pc).Next()
	return !strings.HasSuffix(f.Function, ".inlProbe") || f.Func == nil
}
