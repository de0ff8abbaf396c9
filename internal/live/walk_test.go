package live

import (
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"testing"
	"unsafe"

	"github.com/unwindkit/unwindkit/internal/errs"
)

// fakeStack is a crafted frame-record chain in a []uintptr: a record at word
// i is {buf[i] = next fp, buf[i+1] = return pc}.
type fakeStack struct{ buf []uintptr }

func newFake(words int) *fakeStack { return &fakeStack{buf: make([]uintptr, words)} }

func (f *fakeStack) addr(i int) uintptr          { return uintptr(unsafe.Pointer(&f.buf[i])) }
func (f *fakeStack) fp(i int) unsafe.Pointer     { return unsafe.Pointer(&f.buf[i]) }
func (f *fakeStack) rec(i int, next, pc uintptr) { f.buf[i], f.buf[i+1] = next, pc }

// chain links records at the given word indexes, last one ending the chain,
// with return pcs 0x1000, 0x1001, ...
func (f *fakeStack) chain(idx ...int) {
	for k, i := range idx {
		var next uintptr
		if k+1 < len(idx) {
			next = f.addr(idx[k+1])
		}
		f.rec(i, next, 0x1000+uintptr(k))
	}
}

func TestWalkFPFakeChains(t *testing.T) {
	tests := []struct {
		name    string
		setup   func(f *fakeStack) unsafe.Pointer
		skip    int
		bufLen  int
		want    []uintptr
		wantErr string // rule, "" for none
	}{
		{"good", func(f *fakeStack) unsafe.Pointer { f.chain(0, 4, 10); return f.fp(0) }, 0, 8,
			[]uintptr{0x1000, 0x1001, 0x1002}, ""},
		{"skip", func(f *fakeStack) unsafe.Pointer { f.chain(0, 4, 10); return f.fp(0) }, 2, 8,
			[]uintptr{0x1002}, ""},
		{"skip all", func(f *fakeStack) unsafe.Pointer { f.chain(0, 4, 10); return f.fp(0) }, 5, 8,
			nil, ""},
		{"full buffer", func(f *fakeStack) unsafe.Pointer { f.chain(0, 4, 10); return f.fp(0) }, 0, 2,
			[]uintptr{0x1000, 0x1001}, ""},
		{"empty buffer", func(f *fakeStack) unsafe.Pointer { f.chain(0, 4, 10); return f.fp(0) }, 0, 0,
			nil, ""},
		{"nil start", func(f *fakeStack) unsafe.Pointer { return nil }, 0, 8, nil, ""},
		{"misaligned start", func(f *fakeStack) unsafe.Pointer { f.chain(0, 4); return unsafe.Add(f.fp(0), 1) }, 0, 8,
			nil, ruleMisaligned},
		{"misaligned next", func(f *fakeStack) unsafe.Pointer {
			f.chain(0, 4, 10)
			f.buf[4] = f.addr(10) + 3
			return f.fp(0)
		}, 0, 8, []uintptr{0x1000, 0x1001}, ruleMisaligned},
		{"self loop", func(f *fakeStack) unsafe.Pointer {
			f.chain(0, 4)
			f.buf[4] = f.addr(4)
			return f.fp(0)
		}, 0, 8, []uintptr{0x1000, 0x1001}, ruleNonMonotonic},
		{"cycle", func(f *fakeStack) unsafe.Pointer {
			f.chain(0, 4, 10)
			f.buf[10] = f.addr(0)
			return f.fp(0)
		}, 0, 8, []uintptr{0x1000, 0x1001, 0x1002}, ruleNonMonotonic},
		{"downward", func(f *fakeStack) unsafe.Pointer {
			f.chain(10, 4)
			return f.fp(10)
		}, 0, 8, []uintptr{0x1000}, ruleNonMonotonic},
		{"beyond max stack", func(f *fakeStack) unsafe.Pointer {
			f.chain(0, 4)
			f.buf[4] = f.addr(0) + maxStack
			return f.fp(0)
		}, 0, 8, []uintptr{0x1000, 0x1001}, ruleOutside},
		{"skip past a bad record", func(f *fakeStack) unsafe.Pointer {
			f.chain(0, 4)
			f.buf[0] = 8
			return f.fp(0)
		}, 3, 8, nil, ruleNonMonotonic},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFake(16)
			fp := tc.setup(f)
			store := make([]uintptr, tc.bufLen+2)
			store[tc.bufLen], store[tc.bufLen+1] = 0xdead, 0xbeef
			n, err := walkFP(fp, tc.skip, store[:tc.bufLen])
			if store[tc.bufLen] != 0xdead || store[tc.bufLen+1] != 0xbeef {
				t.Fatal("wrote beyond len(pc)")
			}
			if !slices.Equal(store[:n], tc.want) {
				t.Errorf("pcs %#x, want %#x", store[:n], tc.want)
			}
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("err %v", err)
				}
				return
			}
			var ce *errs.CorruptError
			if !errors.As(err, &ce) || ce.Rule != tc.wantErr || !errors.Is(err, errs.ErrCorrupt) {
				t.Fatalf("err %v, want rule %q", err, tc.wantErr)
			}
		})
	}
}

// Random words in a fake stack never make the walk read outside it: every
// followed fp lies strictly above the previous one inside the buffer, or
// the walk stops. (Values are kept inside the buffer or rejected by the
// checks, so nothing outside it is ever dereferenced.)
func FuzzWalkFP(f *testing.F) {
	f.Add([]byte{0, 4, 10, 0xff}, uint8(0))
	f.Add([]byte{3, 3, 3}, uint8(1))
	f.Fuzz(func(t *testing.T, links []byte, skip uint8) {
		const words = 64
		fk := fuzzStack(words, links)
		pc := make([]uintptr, 100)
		n, err := walkFP(fk.fp(0), int(skip), pc)
		if n > len(pc) || n > words/2+1 {
			t.Fatalf("n = %d", n)
		}
		if err != nil && !errors.Is(err, errs.ErrCorrupt) {
			t.Fatalf("err %v", err)
		}
		for _, p := range pc[:n] {
			if p < 0x1000 || p >= 0x1000+words {
				t.Fatalf("pc %#x read from outside the records", p)
			}
		}
	})
}

// fuzzStack builds a fake stack of words words whose records' saved frame
// pointers come from links: a word index or a misaligned address inside the
// buffer (possibly at or below the record itself), 0xff for the end of the
// chain, anything else a small bogus value.
func fuzzStack(words int, links []byte) *fakeStack {
	fk := newFake(words + 2)
	for i := 0; i+1 < words; i += 2 {
		fk.buf[i+1] = 0x1000 + uintptr(i)
		if len(links) == 0 {
			continue
		}
		l := int(links[(i/2)%len(links)])
		switch {
		case l == 0xff:
			fk.buf[i] = 0
		case l < 0x80 && l/2 < words:
			fk.buf[i] = fk.addr(l%words) + uintptr(l&1)*3
		default:
			fk.buf[i] = uintptr(l) // rejected as not above
		}
	}
	return fk
}

// The walk loops agree with each other on any chain: countWalk (CallersFP)
// and walkProbe (Callers, where supported) store what rawWalk stores and stop for the same reason, for
// every buffer length, without and with a known boundary return address.
func FuzzWalkLoops(f *testing.F) {
	f.Add([]byte{0, 4, 10, 0xff}, uint8(3), uint8(0))
	f.Add([]byte{3, 3, 3}, uint8(40), uint8(0))
	f.Add([]byte{2, 4, 6, 8, 10, 12, 0xff}, uint8(47), uint8(4))
	f.Add([]byte{2, 4, 6, 9, 10, 12, 0xff}, uint8(47), uint8(0))
	f.Add([]byte{2, 4, 6, 8, 10, 12, 0xff}, uint8(4), uint8(0))
	f.Fuzz(func(t *testing.T, links []byte, size, stopAt uint8) {
		const words = 64
		fk := fuzzStack(words, links)
		var stop uintptr // 0, or one of the records' return pcs
		if stopAt != 0 {
			stop = 0x1000 + 2*uintptr(stopAt%(words/2))
		}
		want, got := make([]uintptr, int(size)%48), make([]uintptr, int(size)%48+1)
		n, why, _ := rawWalk(fk.fp(0), fk.fp(0), want, stop)
		for _, w := range []struct {
			name string
			fn   func(unsafe.Pointer, []uintptr, uintptr) (int, int)
		}{{"countWalk", countWalk}} {
			clear(got)
			got[len(got)-1] = 0xdead
			cn, cwhy := w.fn(fk.fp(0), got[:len(want)], stop)
			if got[len(got)-1] != 0xdead {
				t.Fatalf("%s wrote beyond len(pc)", w.name)
			}
			if cn != n || cwhy != why || !slices.Equal(got[:cn], want[:n]) {
				t.Fatalf("%s %d %d %#x, rawWalk %d %d %#x", w.name, cn, cwhy, got[:cn], n, why, want[:n])
			}
		}
		pgot := make([]uintptr, len(want))
		if pn, pwhy, ok := probeWalkOf(fk.fp(0), pgot, stop); ok && (pn != n || pwhy != why || !slices.Equal(pgot[:pn], want[:n])) {
			t.Fatalf("walkProbe %d %d %#x, rawWalk %d %d %#x", pn, pwhy, pgot[:pn], n, why, want[:n])
		}
		if stop != 0 {
			return
		}
		// skipFP (CallersFP's skip) arrives where rawWalk continues
		// after as many records, or gives up (nil) where rawWalk stops.
		{
			s := int(size)%8 + 1
			_, swhy, next := rawWalk(fk.fp(0), fk.fp(0), make([]uintptr, s), 0)
			if got := skipFP(fk.fp(0), s); (swhy == rawFull) != (got != nil) || got != nil && got != next {
				t.Fatalf("skipFP %d: %p, rawWalk %d %p", s, got, swhy, next)
			}
		}
	})
}

// CallersFP returns physical frames: for every skip it is the skip-0 walk
// shifted, and after CallersFrames it shows the runtime's frames plus the
// wrappers the runtime hides.
func TestCallersFP(t *testing.T) {
	if !Supported {
		n, err := CallersFP(0, make([]uintptr, 8))
		if n != 0 || !errors.Is(err, errs.ErrNotSupported) {
			t.Fatalf("CallersFP on %s: %d, %v; want 0, ErrNotSupported", runtime.GOARCH, n, err)
		}
		return
	}
	out := make(chan error)
	go fpWorker(3, out) // a gowrap frame at the bottom
	if err := <-out; err != nil {
		t.Fatal(err)
	}
}

//go:noinline
func fpWorker(d int, out chan<- error) {
	if d > 0 {
		fpWorker(d-1, out)
		return
	}
	out <- checkFP()
}

//go:noinline
func checkFP() error {
	var all [][]uintptr
	var rt []uintptr
	for s := 0; s < 64; s++ {
		pc := make([]uintptr, 64)
		var n int
		var err error
		if s == 0 {
			rt = make([]uintptr, 64)
			rt = rt[:runtime.Callers(1, rt)]
		}
		n, err = CallersFP(s, pc)
		if err != nil {
			return err
		}
		all = append(all, pc[:n])
	}
	full := all[0]
	for s, got := range all {
		want := full[min(s, len(full)):]
		if s == 0 {
			continue
		}
		if !slices.Equal(got, want) {
			return fmt.Errorf("skip %d: %#x, want %#x", s, got, want)
		}
	}
	fp, rf := framesOf(full), framesOf(rt)
	var kept []frame
	sawWrap := false
	for _, f := range fp {
		if strings.Contains(f.Function, ".gowrap") {
			sawWrap = true
			continue
		}
		kept = append(kept, f)
	}
	if !sawWrap {
		return fmt.Errorf("physical frames lack the gowrap wrapper: %v", fp)
	}
	if fmt.Sprint(kept[1:]) != fmt.Sprint(rf[1:]) || kept[0].Function != rf[0].Function {
		return fmt.Errorf("frames differ:\nCallersFP: %v\nruntime:   %v", kept, rf)
	}
	if rf[len(rf)-1].Function != "runtime.goexit" {
		return fmt.Errorf("last frame %v", rf[len(rf)-1])
	}
	return nil
}

// countWalk (CallersFP's walk) stops at a saved frame pointer maxStack or
// more above the first record, as rawWalk does, without following it.
func TestCountWalkLimit(t *testing.T) {
	for _, stop := range []uintptr{0, 0x5000} {
		f := newFake(16)
		f.chain(0, 4)
		f.buf[4] = f.addr(0) + maxStack
		pc := make([]uintptr, 8)
		n, why := countWalk(f.fp(0), pc, stop)
		if n != 2 || why != rawBad || !slices.Equal(pc[:n], []uintptr{0x1000, 0x1001}) {
			t.Errorf("stop %#x: countWalk %d %d %#x, want 2 frames, rawBad", stop, n, why, pc[:n])
		}
	}
}

// UncheckedFP and GounwindFP, the benchmarks' baselines, store what
// CallersFP stores on a healthy stack, for every skip, so that the three
// are timed on the same work.
func TestUncheckedFPMatchesCallersFP(t *testing.T) {
	if !Supported {
		t.Skip("no frame pointers")
	}
	for skip := range 6 {
		a, b := make([]uintptr, 64), make([]uintptr, 64)
		na, err := CallersFP(skip, a)
		nb, _ := UncheckedFP(skip, b)
		c := make([]uintptr, 64)
		nc := GounwindFP(skip, c)
		from := 0
		if skip == 0 {
			from = 1 // the test's own frame: three call sites
		}
		if err != nil || na != nb || na < 3-skip || !slices.Equal(a[from:na], b[from:nb]) {
			t.Fatalf("skip %d: CallersFP %d %v %#x, UncheckedFP %d %#x", skip, na, err, a[:na], nb, b[:nb])
		}
		if nc != na || !slices.Equal(a[from:na], c[from:nc]) {
			t.Fatalf("skip %d: CallersFP %d %#x, GounwindFP %d %#x", skip, na, a[:na], nc, c[:nc])
		}
	}
}
