package gcs_test

import (
	"errors"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/unwindkit/unwindkit/fault"
	"github.com/unwindkit/unwindkit/unwind/gcs"
)

func save(t *testing.T, v gcs.View, skip int) []uint64 {
	t.Helper()
	store := make([]uint64, 1<<12)
	n, err := gcs.Save(&v, store, skip)
	if err != nil {
		t.Fatalf("Save: %v", err)
	}
	return store[:n]
}

func rule(err error) string {
	var ce *fault.CorruptError
	if errors.As(err, &ce) {
		return ce.Rule
	}
	return ""
}

// TestThreadRandom drives the model with random calls, returns, signals,
// sigreturns and longjmps and checks, after every step, that the copy is
// the call stack a plain list of return addresses says (the truth,
// innermost first, with the trampolines of live handlers), and that a
// ret with the wrong x30 is refused.
func TestThreadRandom(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	th, err := gcs.NewThread(0x7f0000000000, 4096)
	if err != nil {
		t.Fatal(err)
	}
	var truth []uint64 // oldest first
	type sig struct {
		ctx   uint64
		depth int
	}
	var sigs []sig
	var jmps []struct {
		gcspr uint64
		depth int
	}
	for step := 0; step < 5000; step++ {
		floor := 0 // entries below a live handler's trampoline are not its to return to
		if len(sigs) > 0 {
			floor = sigs[len(sigs)-1].depth + 1
		}
		switch op := r.IntN(10); {
		case op < 4 && len(truth) < 400:
			pc := 0x400000 + uint64(r.IntN(1<<16))*4
			if err := th.Call(pc); err != nil {
				t.Fatal(err)
			}
			truth = append(truth, pc+4)
		case op < 7 && len(truth) > floor:
			top := truth[len(truth)-1]
			if err := th.Return(top ^ 4); rule(err) != gcs.RuleGCSReturnMismatch {
				t.Fatalf("ret to a wrong address: %v", err)
			}
			if err := th.Return(top); err != nil {
				t.Fatal(err)
			}
			truth = truth[:len(truth)-1]
			jmps = slices.DeleteFunc(jmps, func(j struct {
				gcspr uint64
				depth int
			}) bool {
				return j.depth > len(truth)
			})
		case op == 7 && len(sigs) < 8:
			tramp := 0x7ffff7f754ec + uint64(len(sigs))*16
			ctx, err := th.Signal(tramp)
			if err != nil {
				t.Fatal(err)
			}
			sigs = append(sigs, sig{ctx, len(truth)})
			truth = append(truth, tramp)
			jmps = nil
		case op == 8 && len(sigs) > 0 && len(truth) == floor:
			s := sigs[len(sigs)-1]
			if err := th.Return(truth[len(truth)-1]); err != nil { // the handler's ret to the trampoline
				t.Fatal(err)
			}
			if err := th.Sigreturn(s.ctx + 8); rule(err) != gcs.RuleGCSBadSignalCap {
				t.Fatalf("sigreturn with a wrong gcs_context: %v", err)
			}
			if err := th.Sigreturn(s.ctx); err != nil {
				t.Fatal(err)
			}
			sigs = sigs[:len(sigs)-1]
			truth = truth[:len(truth)-1]
		case op == 9:
			if len(jmps) > 0 && r.IntN(2) == 0 {
				j := jmps[len(jmps)-1]
				if err := th.PopTo(j.gcspr); err != nil {
					t.Fatal(err)
				}
				truth = truth[:j.depth]
				jmps = jmps[:len(jmps)-1]
			} else if len(sigs) == 0 {
				jmps = append(jmps, struct {
					gcspr uint64
					depth int
				}{th.GCSPR(), len(truth)})
			}
		}
		want := slices.Clone(truth)
		slices.Reverse(want)
		got := save(t, th.View(), 0)
		if !slices.Equal(got, want) {
			t.Fatalf("step %d: copy %x\ntruth %x", step, got, want)
		}
		if len(want) > 3 {
			if got := save(t, th.View(), 3); !slices.Equal(got, want[3:]) {
				t.Fatalf("step %d: skip 3: %x", step, got)
			}
		}
	}
}

func TestThreadLimits(t *testing.T) {
	th, err := gcs.NewThread(0x10000, 32) // 4 slots: the marker and 3 entries
	if err != nil {
		t.Fatal(err)
	}
	if err := th.Return(0x1234); rule(err) != gcs.RuleGCSUnderflow {
		t.Errorf("ret on an empty GCS: %v", err)
	}
	for i := range 3 {
		if err := th.Call(0x400000 + uint64(i)*8); err != nil {
			t.Fatal(err)
		}
	}
	if err := th.Call(0x500000); rule(err) != gcs.RuleGCSOverflow || th.GCSPR() != 0x10000 {
		t.Errorf("push past the base: %v, GCSPR %#x", err, th.GCSPR())
	}
	if _, err := th.Signal(0x600000); rule(err) != gcs.RuleGCSOverflow {
		t.Errorf("signal on a full GCS: %v", err)
	}
	if got := save(t, th.View(), 0); !slices.Equal(got, []uint64{0x400014, 0x40000c, 0x400004}) {
		t.Errorf("copy %x", got)
	}
	for _, bad := range [][2]uint64{{0x10001, 16}, {0x10000, 12}, {0x10000, 8}, {0x10000, 4 << 30}} {
		if _, err := gcs.NewThread(bad[0], bad[1]); err == nil {
			t.Errorf("NewThread(%#x, %#x) succeeded", bad[0], bad[1])
		}
	}
}

func le(words ...uint64) []byte {
	b := make([]byte, 8*len(words))
	for i, w := range words {
		for j := range 8 {
			b[8*i+j] = byte(w >> (8 * j))
		}
	}
	return b
}

// TestViewRules: each rule the copy checks, with the frames found before
// it and the address in the error; ErrNotSupported for a disabled view;
// the tokens that end a copy.
func TestViewRules(t *testing.T) {
	const base = 0x7f0000001000
	ret := func(i int) uint64 { return 0x400000 + uint64(i)*4 }
	cases := []struct {
		name  string
		words []uint64
		gcspr uint64
		want  []uint64
		rule  string
		addr  uint64
	}{
		{"chain", []uint64{ret(1), ret(2), 0}, base, []uint64{ret(1), ret(2)}, "", 0},
		{"signal cap passed over", []uint64{ret(1), gcs.SignalCap(base + 8), ret(2), 0}, base, []uint64{ret(1), ret(2)}, "", 0},
		{"valid cap ends", []uint64{ret(1), gcs.Cap(base + 8), ret(2), 0}, base, []uint64{ret(1)}, "", 0},
		{"in-progress ends", []uint64{ret(1), base | gcs.CapInProgressToken, 0}, base, []uint64{ret(1)}, "", 0},
		{"bad entry", []uint64{ret(1), 0x400002, 0}, base, []uint64{ret(1)}, gcs.RuleGCSBadEntry, base + 8},
		{"bad token", []uint64{ret(1), base | 0x3, 0}, base, []uint64{ret(1)}, gcs.RuleGCSBadEntry, base + 8},
		{"no top", []uint64{ret(1), ret(2)}, base, []uint64{ret(1), ret(2)}, gcs.RuleGCSNoTop, base + 16},
		{"misaligned", []uint64{ret(1), 0}, base + 4, nil, gcs.RuleMisalignedGCSPointer, base + 4},
		{"below", []uint64{ret(1), 0}, base - 8, nil, gcs.RuleGCSPointerOutsideRegion, base - 8},
		{"past", []uint64{ret(1), 0}, base + 16, nil, gcs.RuleGCSPointerOutsideRegion, base + 16},
	}
	for _, c := range cases {
		v := gcs.NewSnapshotView(le(c.words...), base, c.gcspr)
		store := make([]uint64, 8)
		n, err := gcs.Save(&v, store, 0)
		var frames []uint64
		var ferr error
		for f, err := range gcs.Frames(&v) {
			if err != nil {
				ferr = err
				break
			}
			frames = append(frames, f.PC)
		}
		if !slices.Equal(store[:n], c.want) || !slices.Equal(frames, c.want) {
			t.Errorf("%s: Save %x, Frames %x, want %x", c.name, store[:n], frames, c.want)
		}
		for _, e := range []error{err, ferr} {
			var ce *fault.CorruptError
			switch {
			case c.rule == "" && e != nil:
				t.Errorf("%s: %v", c.name, e)
			case c.rule != "" && (!errors.As(e, &ce) || ce.Rule != c.rule || ce.Addr != c.addr || !errors.Is(e, gcs.ErrCorrupt)):
				t.Errorf("%s: %v, want %s at %#x", c.name, e, c.rule, c.addr)
			}
		}
	}
	off := gcs.NewSnapshotView(nil, 0, 0)
	if n, err := gcs.Save(&off, make([]uint64, 4), 0); n != 0 || !errors.Is(err, gcs.ErrNotSupported) || !errors.Is(err, unix.ENOSYS) {
		t.Errorf("disabled: %d %v", n, err)
	}
	for _, err := range gcs.Frames(&off) {
		if !errors.Is(err, gcs.ErrNotSupported) {
			t.Errorf("disabled Frames: %v", err)
		}
	}
	// Skip and a short store: exact, tokens not counted.
	v := gcs.NewSnapshotView(le(ret(1), gcs.SignalCap(base+8), ret(2), ret(3), 0), base, base)
	for skip, want := range [][]uint64{{ret(1), ret(2)}, {ret(2), ret(3)}, {ret(3)}, nil, nil} {
		store := make([]uint64, 2)
		n, err := gcs.Save(&v, store, skip)
		if err != nil || !slices.Equal(store[:n], want) {
			t.Errorf("skip %d: %x %v, want %x", skip, store[:n], err, want)
		}
	}
	if n, err := gcs.Save(&v, nil, 0); n != 0 || err != nil {
		t.Errorf("empty store: %d %v", n, err)
	}
	if e := (gcs.Entry{Frame: gcs.Frame{PC: 1, Addr: 2}, Signal: 1, SigReturn: true}).String(); !strings.Contains(e, "signal 1, sigreturn") {
		t.Errorf("Entry.String: %s", e)
	}
}

// FuzzSave: any memory and pointer: no panic, Save and Frames agree, the
// copy never passes the store or the memory.
func FuzzSave(f *testing.F) {
	f.Add(le(0x400004, 0x7f0000001000, 0x400008, 0), uint64(0x7f0000001000), 2)
	f.Fuzz(func(t *testing.T, data []byte, gcspr uint64, skip int) {
		v := gcs.NewSnapshotView(data, 0x7f0000001000, gcspr)
		store := make([]uint64, 16)
		n, err := gcs.Save(&v, store, 0)
		if n > len(store) || n > len(data)/8 {
			t.Fatalf("%d entries from %d bytes", n, len(data))
		}
		var fr []uint64
		var ferr error
		for f, e := range gcs.Frames(&v) {
			if e != nil {
				ferr = e
				break
			}
			fr = append(fr, f.PC)
			if len(fr) == len(store) {
				break
			}
		}
		if !slices.Equal(fr, store[:n]) || (len(fr) < len(store)) && (err == nil) != (ferr == nil) {
			t.Fatalf("Save %x %v, Frames %x %v", store[:n], err, fr, ferr)
		}
		gcs.Save(&v, store, skip)
	})
}
