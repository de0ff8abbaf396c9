package scs

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/unwindkit/unwindkit/internal/tracehash"
	"github.com/unwindkit/unwindkit/ptrauth"
)

var nestings = [][]Context{
	{CtxTask},
	{CtxTask, CtxIRQ},
	{CtxTask, CtxSDEINormal},
	{CtxTask, CtxSDEICritical},
	{CtxTask, CtxIRQ, CtxSDEINormal},
	{CtxTask, CtxIRQ, CtxSDEICritical},
	{CtxTask, CtxSDEINormal, CtxSDEICritical},
	{CtxTask, CtxIRQ, CtxSDEINormal, CtxSDEICritical},
}

// depthOf is how many entries context c holds in the nesting tests; the
// IRQ context holds none in one variant to cover empty segments.
func depthOf(c Context, emptyIRQ bool) int {
	if c == CtxIRQ && emptyIRQ {
		return 0
	}
	return []int{5, 3, 4, 2}[c]
}

// build enters the contexts of nest in order on cpu 0, pushing depthOf(c)
// entries in each. Before each entry it pushes and pops a poison value, so
// the empty slot at every saved top holds a stale value that an off-by-one
// unwinder (the seed's v2) would report.
func build(t *testing.T, r *rig, nest []Context, emptyIRQ bool) {
	t.Helper()
	for k, c := range nest {
		if k > 0 {
			mustPush(t, r.m, 0, 0xdeadbeef)
			if v, err := r.m.Pop(0); err != nil || v != 0xdeadbeef {
				t.Fatal("poison pop")
			}
			if err := r.enter(0, c, interruptedPC(c)); err != nil {
				t.Fatal(err)
			}
		}
		for i := range depthOf(c, emptyIRQ) {
			mustPush(t, r.m, 0, retAddr(c, i))
		}
	}
}

// expected is the ground truth for nest, written from the rules: each
// context's entries newest first, innermost context first, the interrupted
// PC between contexts when kept; with OnStack the IRQ boundary is hidden
// (x18 pushed on the interrupted stack), while an SDEI boundary is not
// (x18 in the event's saved registers, under every policy).
func expected(p Policy, nest []Context, keepPC, stop, emptyIRQ bool) ([]uint64, error) {
	var out []uint64
	for k := len(nest) - 1; k >= 0; k-- {
		c := nest[k]
		for i := depthOf(c, emptyIRQ) - 1; i >= 0; i-- {
			out = append(out, retAddr(c, i))
		}
		if k == 0 || stop {
			break
		}
		if keepPC {
			out = append(out, interruptedPC(c))
		}
		if p == OnStack && c == CtxIRQ {
			return out, ErrInterruptedTopHidden
		}
	}
	return out, nil
}

func TestSaveNestings(t *testing.T) {
	for _, p := range Policies {
		for _, nest := range nestings {
			for _, keepPC := range []bool{false, true} {
				for _, stop := range []bool{false, true} {
					for _, emptyIRQ := range []bool{false, true} {
						if emptyIRQ && (len(nest) < 2 || nest[1] != CtxIRQ) {
							continue
						}
						name := fmt.Sprintf("%s/%v/pc=%v/stop=%v/emptyirq=%v", p, nest, keepPC, stop, emptyIRQ)
						t.Run(name, func(t *testing.T) {
							r := newRig(t, Config{Policy: p, KeepInterruptedPC: keepPC, Size: 1024})
							build(t, r, nest, emptyIRQ)
							if got := r.m.Context(0); got != nest[len(nest)-1] {
								t.Fatalf("context %s", got)
							}
							v, err := r.m.View(0)
							if err != nil {
								t.Fatal(err)
							}
							v.StopAtBoundary = stop
							want, wantErr := expected(p, nest, keepPC, stop, emptyIRQ)
							buf := make([]uint64, 64)
							n, err := Save(&v, buf, 0)
							if !errors.Is(err, wantErr) || (wantErr == nil) != (err == nil) {
								t.Fatalf("err %v, want %v", err, wantErr)
							}
							if !slices.Equal(buf[:n], want) {
								t.Fatalf("got  %x\nwant %x", buf[:n], want)
							}
							checkFrames(t, &v, 0, len(buf))
						})
					}
				}
			}
		}
	}
}

// framesInto fills store from the Frames iterator as Save fills its
// store: after skip frames, until store is full; an ErrChanged gives no
// frames, as from Save, and so does an empty store (nothing for a
// disabled View).
func framesInto(v *View, store []Frame, skip int) (n int, err error) {
	if len(store) == 0 {
		if v.Disabled {
			return 0, ErrNotSupported
		}
		return 0, nil
	}
	for f, err := range Frames(v) {
		if err == ErrChanged {
			return 0, err
		}
		if err != nil {
			return n, err
		}
		if skip > 0 {
			skip--
			continue
		}
		store[n] = f
		n++
		if n == len(store) {
			break
		}
	}
	return n, nil
}

// checkFrames checks Frames against Save for the same view, skip and size,
// and, for views whose segments are in nesting order (all views a Model
// builds), that frame contexts only move outward.
func checkFrames(t *testing.T, v *View, skip, size int) {
	t.Helper()
	buf := make([]uint64, size)
	n, err := Save(v, buf, skip)
	hb := make([]uint64, size)
	hn, h, herr := SaveHashed(v, hb, skip, 0x51ed, 0x9e3779b97f4a7c15)
	if hn != n || (herr == nil) != (err == nil) || !slices.Equal(hb[:hn], buf[:n]) {
		t.Fatalf("SaveHashed %d %v, Save %d %v", hn, herr, n, err)
	}
	if w := tracehash.Sum(hb[:hn], 0x51ed, 0x9e3779b97f4a7c15); h != w {
		t.Fatalf("SaveHashed: hash %#x, the stored frames' %#x", h, w)
	}
	fr := make([]Frame, size)
	fn, ferr := framesInto(v, fr, skip)
	if fn != n || (err == nil) != (ferr == nil) || (err != nil && err.Error() != ferr.Error()) {
		t.Fatalf("Frames %d %v, Save %d %v", fn, ferr, n, err)
	}
	for i := range n {
		if fr[i].PC != buf[i] {
			t.Fatalf("frame %d: Frames %#x, Save %#x", i, fr[i].PC, buf[i])
		}
		if i > 0 && fr[i].Stack > fr[i-1].Stack && ordered(v) {
			t.Fatalf("frame %d: context %s after %s", i, fr[i].Stack, fr[i-1].Stack)
		}
	}
}

// ordered reports whether v's segments are innermost first by context.
func ordered(v *View) bool {
	segs := v.Segments()
	for i := 1; i < len(segs); i++ {
		if segs[i].Context >= segs[i-1].Context {
			return false
		}
	}
	return true
}

// TestViewSources checks where each policy's View found each top.
func TestViewSources(t *testing.T) {
	want := map[Policy][]Where{
		// innermost first for task -> IRQ -> SDEI normal -> SDEI critical
		ThreadInfo: {InRegister, InSDEIRegs, InSDEIRegs, InThreadInfo},
		OnStack:    {InRegister, InSDEIRegs, InSDEIRegs, OnInterruptedStack},
		PerCPU:     {InRegister, InPerCPU, InPerCPU, InPerCPU},
	}
	for _, p := range Policies {
		r := newRig(t, Config{Policy: p})
		build(t, r, nestings[7], false)
		v, _ := r.m.View(0)
		if v.N != 4 {
			t.Fatalf("%d segments", v.N)
		}
		for i, s := range v.Segments() {
			if s.TopFrom != want[p][i] {
				t.Errorf("%s segment %d (%s): top from %s, want %s", p, i, s.Context, s.TopFrom, want[p][i])
			}
			if s.Hidden != (p == OnStack && s.Context == CtxTask) {
				t.Errorf("%s segment %d: hidden %v", p, i, s.Hidden)
			}
			if !s.Hidden {
				d := depthOf(s.Context, false)
				if s.Top != s.Base+uint64(d)*8 {
					t.Errorf("%s segment %d: top %#x, base %#x, want %d entries", p, i, s.Top, s.Base, d)
				}
			}
		}
	}
}

// TestSkipExact: for every skip and store size, Save returns exactly the
// full trace with skip entries removed from the innermost end, truncated
// to the store, and a wrapper that forwards skip gets the same.
func TestSkipExact(t *testing.T) {
	r := newRig(t, Config{Policy: PerCPU, KeepInterruptedPC: true})
	build(t, r, nestings[7], true)
	v, _ := r.m.View(0)
	full, err := expected(PerCPU, nestings[7], true, false, true)
	if err != nil {
		t.Fatal(err)
	}
	wrapper := func(store []uint64, skip int) (int, error) { return Save(&v, store, skip) }
	for skip := -1; skip <= len(full)+2; skip++ {
		for size := 0; size <= len(full)+2; size++ {
			s := max(skip, 0)
			want := full[min(s, len(full)):]
			want = want[:min(len(want), size)]
			buf := make([]uint64, size)
			n, err := Save(&v, buf, skip)
			if err != nil || !slices.Equal(buf[:n], want) {
				t.Fatalf("skip %d size %d: %x %v, want %x", skip, size, buf[:n], err, want)
			}
			buf2 := make([]uint64, size)
			n2, err2 := wrapper(buf2, skip)
			if n2 != n || err2 != nil || !slices.Equal(buf2[:n2], buf[:n]) {
				t.Fatalf("wrapper differs at skip %d size %d", skip, size)
			}
			n3, _ := r.m.Save(0, buf2, skip)
			if n3 != n || !slices.Equal(buf2[:n3], want) {
				t.Fatalf("Model.Save differs at skip %d size %d", skip, size)
			}
			checkFrames(t, &v, skip, size)
		}
	}
}

// TestSkipBeforeStop: skip stays exact when the copy stops at a later
// segment (a hidden top, a broken rule) after skipping into or past the
// earlier ones: Save returns Frames' entries with skip dropped from the
// front, cut to the store, and Frames' error whenever the store is not
// filled first, for every skip and store size.
func TestSkipBeforeStop(t *testing.T) {
	r := newRig(t, Config{Policy: OnStack, KeepInterruptedPC: true})
	build(t, r, nestings[1], false)
	hidden, _ := r.m.View(0)
	broken := hidden
	broken.Segs[1].Hidden = false
	broken.Segs[1].Top = broken.Segs[1].Base + 4 // misaligned
	for name, v := range map[string]*View{"hidden": &hidden, "broken": &broken} {
		var all []uint64
		var stop error
		for f, err := range Frames(v) {
			if err != nil {
				stop = err
				break
			}
			all = append(all, f.PC)
		}
		if stop == nil || len(all) < 2 {
			t.Fatalf("%s: %d frames, %v", name, len(all), stop)
		}
		for skip := 0; skip <= len(all)+1; skip++ {
			for size := 1; size <= len(all)+1; size++ {
				want := all[min(skip, len(all)):]
				wantErr := len(want) < size
				want = want[:min(len(want), size)]
				buf := make([]uint64, size)
				n, err := Save(v, buf, skip)
				if !slices.Equal(buf[:n], want) || (err != nil) != wantErr || (err != nil && err.Error() != stop.Error()) {
					t.Fatalf("%s skip %d size %d: %x %v, want %x (error %v: %v)", name, skip, size, buf[:n], err, want, wantErr, stop)
				}
			}
		}
	}
}

// TestNoReadAtSavedTop: the stale value in the empty slot at each saved
// top (what the seed's v2 read one slot too far) never appears, while the
// same slots are read once they hold live entries again.
func TestNoReadAtSavedTop(t *testing.T) {
	for _, p := range []Policy{ThreadInfo, PerCPU} {
		r := newRig(t, Config{Policy: p})
		build(t, r, nestings[7], false)
		got, err := saveAll(r.m, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range got {
			if v == 0xdeadbeef {
				t.Fatalf("%s: read the empty slot at a saved top: %x", p, got)
			}
		}
		// The slot at the task's saved top is live again after the
		// contexts unwind and the task pushes.
		for range 3 {
			if c := r.m.Context(0); c == CtxIRQ {
				r.exitIRQ(0)
			} else {
				r.m.ExitSDEI(0)
			}
		}
		mustPush(t, r.m, 0, 0x77)
		got, _ = saveAll(r.m, 0)
		if got[0] != 0x77 || len(got) != 6 {
			t.Fatalf("%s: %x", p, got)
		}
	}
}

// TestPACStripped pushes entries signed with ptrauth.Sign (QARMA5, the SP
// as modifier) and checks Save returns the unsigned addresses, for 39-,
// 48- and 52-bit layouts with and without TBI, kernel and user addresses.
func TestPACStripped(t *testing.T) {
	key := ptrauth.Key{Hi: 0x0123456789abcdef, Lo: 0xfedcba9876543210}
	for _, va := range []int{39, 48, 52} {
		for _, tbi := range []bool{false, true} {
			l := ptrauth.NewLayout(va, tbi)
			for _, kernel := range []bool{true, false} {
				t.Run(fmt.Sprintf("va%d/tbi=%v/kernel=%v", va, tbi, kernel), func(t *testing.T) {
					r := newRig(t, Config{Layout: l, Policy: ThreadInfo})
					addr := func(i int) uint64 {
						a := uint64(0x400000+i*0x40) & (uint64(1)<<va - 1)
						if kernel {
							a |= ^(uint64(1)<<va - 1)
						}
						return a
					}
					var want []uint64
					signedAny := false
					for i := range 6 {
						if i == 4 {
							if err := r.enterIRQ(0, 0); err != nil {
								t.Fatal(err)
							}
						}
						s := l.Sign(addr(i), uint64(0xffff800008004000)-uint64(16*i), key, ptrauth.QARMA5)
						if s != addr(i) {
							signedAny = true
						}
						mustPush(t, r.m, 0, s)
						want = append([]uint64{addr(i)}, want...)
					}
					if !signedAny {
						t.Fatal("Sign added no PAC")
					}
					got, err := saveAll(r.m, 0)
					if err != nil || !slices.Equal(got, want) {
						t.Fatalf("got %x %v, want %x", got, err, want)
					}
					v, _ := r.m.View(0)
					fr := make([]Frame, 8)
					n, _ := framesInto(&v, fr, 0)
					for i := range n {
						if fr[i].PC != got[i] || l.Strip(fr[i].Raw) != fr[i].PC {
							t.Fatalf("frame %d raw %#x pc %#x", i, fr[i].Raw, fr[i].PC)
						}
					}
				})
			}
		}
	}
}

// TestCorruptState: each kind of corruption gives the frames found before
// it plus a *CorruptError naming the rule and the address.
func TestCorruptState(t *testing.T) {
	type tc struct {
		name   string
		policy Policy
		nest   []Context
		hurt   func(r *rig) uint64 // returns the expected address
		rule   string
		frames int // entries found before the corruption
	}
	const size = 1024
	cases := []tc{
		{"x18 misaligned", ThreadInfo, nestings[0], func(r *rig) uint64 {
			x := r.m.X18(0) + 4
			r.m.SetX18(0, x)
			return x
		}, "misaligned scs pointer", 0},
		{"x18 below base", ThreadInfo, nestings[0], func(r *rig) uint64 {
			x := r.m.Current(0).Base() - 8
			r.m.SetX18(0, x)
			return x
		}, "scs pointer below base", 0},
		{"x18 past end", ThreadInfo, nestings[0], func(r *rig) uint64 {
			x := r.m.Current(0).Base() + size
			r.m.SetX18(0, x)
			return x
		}, "scs pointer outside region", 0},
		{"x18 zero", PerCPU, nestings[1], func(r *rig) uint64 {
			r.m.SetX18(0, 0)
			return 0
		}, "scs pointer below base", 0},
		{"task magic overwritten", ThreadInfo, nestings[0], func(r *rig) uint64 {
			tk := r.m.Current(0)
			tk.st.store(tk.Base()+size-8, 0)
			return tk.Base() + size - 8
		}, "scs end magic overwritten", 0},
		{"task magic overwritten under irq", PerCPU, nestings[1], func(r *rig) uint64 {
			tk := r.m.Current(0)
			tk.st.store(tk.Base()+size-8, 1)
			return tk.Base() + size - 8
		}, "scs end magic overwritten", 3},
		{"irq saved ptr into irq region", PerCPU, nestings[1], func(r *rig) uint64 {
			x := r.m.Base(0, CtxIRQ) + 8
			r.m.SetSaved(0, CtxIRQ, x)
			return x
		}, "scs pointer below base", 3},
		{"thread_info scs_sp into sdei region", ThreadInfo, nestings[4], func(r *rig) uint64 {
			x := r.m.Base(0, CtxSDEINormal) + 16
			r.m.SetSaved(0, CtxIRQ, x)
			return x
		}, "scs pointer below base", 4 + 3},
		{"irq saved ptr into a later task's region", PerCPU, nestings[1], func(r *rig) uint64 {
			other, err := r.m.NewTask("other")
			if err != nil {
				panic(err)
			}
			r.m.SetSaved(0, CtxIRQ, other.Base()+8)
			return other.Base() + 8
		}, "scs pointer outside region", 3},
		{"sdei saved regs misaligned", ThreadInfo, nestings[6], func(r *rig) uint64 {
			x := r.m.Base(0, CtxSDEINormal) + 3
			r.m.SetSaved(0, CtxSDEICritical, x)
			return x
		}, "misaligned scs pointer", 2},
		{"sdei saved ptr zero", PerCPU, nestings[7], func(r *rig) uint64 {
			r.m.SetSaved(0, CtxSDEINormal, 0)
			return 0
		}, "scs pointer below base", 2 + 4},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := newRig(t, Config{Policy: c.policy, Size: size})
			build(t, r, c.nest, false)
			addr := c.hurt(r)
			buf := make([]uint64, 64)
			n, err := r.m.Save(0, buf, 0)
			var ce *CorruptError
			if !errors.As(err, &ce) || !errors.Is(err, ErrCorrupt) {
				t.Fatalf("err %v, want corrupt", err)
			}
			if ce.Rule != c.rule || ce.Addr != addr {
				t.Fatalf("rule %q at %#x, want %q at %#x (%v)", ce.Rule, ce.Addr, c.rule, addr, err)
			}
			if n != c.frames {
				t.Fatalf("%d frames before corruption, want %d", n, c.frames)
			}
			want, _ := expected(c.policy, c.nest, false, false, false)
			if !slices.Equal(buf[:n], want[:n]) {
				t.Fatalf("frames so far %x, want %x", buf[:n], want[:n])
			}
			v, _ := r.m.View(0)
			checkFrames(t, &v, 0, 64)
			if err := r.m.CheckCorruption(0); c.rule == "scs end magic overwritten" && c.frames == 0 && err == nil {
				t.Fatal("CheckCorruption missed the magic")
			}
		})
	}
}

func TestViewErrors(t *testing.T) {
	data := make([]byte, 256) // caller memory: the stack from 0x1000
	base := NewSnapshotView(data, 0x1000, 0x1010, ptrauth.Layout{})
	for _, tc := range []struct {
		name string
		mod  func(v *View)
		rule string
	}{
		{"no memory", func(v *View) { v.Segs[0].Data = nil }, "scs region missing"},
		{"base misaligned", func(v *View) { v.Segs[0].Base = 0x1004 }, "misaligned scs base"},
		{"size beyond region", func(v *View) { v.Segs[0].Size = 512 }, "scs outside region"},
		{"size misaligned", func(v *View) { v.Segs[0].Size = 100 }, "scs outside region"},
		{"magic missing", func(v *View) { v.Segs[0].Magic = true }, "scs end magic overwritten"},
		{"no room for magic", func(v *View) { v.Segs[0].Data = data[:7]; v.Segs[0].Magic = true }, "scs too small for end magic"},
		{"top past short data", func(v *View) { v.Segs[0].Data = data[:15] }, "scs pointer outside region"},
		{"top past limit", func(v *View) { v.Segs[0].Size = 8 }, "scs pointer outside region"},
		{"N zero", func(v *View) { v.N = 0 }, "bad scs view"},
		{"N too big", func(v *View) { v.N = 5 }, "bad scs view"},
		{"N negative", func(v *View) { v.N = -1 }, "bad scs view"},
	} {
		v := base
		tc.mod(&v)
		_, err := Save(&v, make([]uint64, 4), 0)
		var ce *CorruptError
		if !errors.As(err, &ce) || ce.Rule != tc.rule {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.rule)
		}
		if v.N < 0 || v.N > 4 {
			if v.Segments() != nil {
				t.Errorf("%s: Segments on bad N", tc.name)
			}
		}
		checkFrames(t, &v, 0, 4)
	}
	// A snapshot view reads up to the end of its data without magic.
	binary.LittleEndian.PutUint64(data[8:], 0xaa)
	binary.LittleEndian.PutUint64(data[0:], 0xbb)
	buf := make([]uint64, 4)
	if n, err := Save(&base, buf, 0); n != 2 || err != nil || buf[0] != 0xaa || buf[1] != 0xbb {
		t.Fatalf("snapshot: %x %v", buf[:n], err)
	}
	full := NewSnapshotView(data, 0x1000, 0x1100, ptrauth.Layout{})
	if n, err := Save(&full, make([]uint64, 64), 0); n != 32 || err != nil {
		t.Fatalf("snapshot to region end: %d %v", n, err)
	}
}

func TestDisabledView(t *testing.T) {
	v := View{Disabled: true}
	_, err := Save(&v, make([]uint64, 4), 0)
	if !errors.Is(err, ErrNotSupported) || !errors.Is(err, unix.ENOSYS) {
		t.Fatalf("got %v, want ErrNotSupported matching ENOSYS", err)
	}
	if _, err := framesInto(&v, make([]Frame, 4), 0); !errors.Is(err, unix.ENOSYS) {
		t.Fatal(err)
	}
}

// TestHiddenError: OnStack gives the frames so far and a distinct error,
// not corruption.
func TestHiddenError(t *testing.T) {
	r := newRig(t, Config{Policy: OnStack, KeepInterruptedPC: true})
	build(t, r, nestings[1], false)
	got, err := saveAll(r.m, 0)
	if !errors.Is(err, ErrInterruptedTopHidden) || errors.Is(err, ErrCorrupt) {
		t.Fatalf("err %v", err)
	}
	want := []uint64{retAddr(CtxIRQ, 2), retAddr(CtxIRQ, 1), retAddr(CtxIRQ, 0), interruptedPC(CtxIRQ)}
	if !slices.Equal(got, want) {
		t.Fatalf("got %x want %x", got, want)
	}
	// A driver that found the slot through the frame chain can reveal it.
	v, _ := r.m.View(0)
	s := &v.Segs[1]
	s.Top, _ = r.mem.Load(s.TopAddr)
	s.Hidden = false
	buf := make([]uint64, 32)
	n, err := Save(&v, buf, 0)
	if err != nil || n != 3+1+5 {
		t.Fatalf("revealed: %x %v", buf[:n], err)
	}
}

func TestStrings(t *testing.T) {
	for _, s := range []fmt.Stringer{ThreadInfo, OnStack, PerCPU, Policy(9), CtxTask, CtxIRQ, CtxSDEINormal, CtxSDEICritical, Context(9),
		InRegister, InThreadInfo, OnInterruptedStack, InSDEIRegs, InPerCPU, InSnapshot, Where(99), OriginSCS, OriginInterruptedPC, Origin(7),
		Frame{PC: 1, Stack: CtxIRQ.Stack()}, Frame{Origin: OriginInterruptedPC}, Cost{1, 2, 3}} {
		if s.String() == "" {
			t.Errorf("%T has empty String", s)
		}
	}
	if got := CtxSDEICritical.String(); got != "sdei-critical" {
		t.Error(got)
	}
	if got := (Cost{1, 1, 6}).String(); got != "1 load, 1 store, 6 insns" {
		t.Error(got)
	}
}

// TestStripMatchesLayout: the copy loops (model words and caller bytes)
// strip exactly as ptrauth.Layout.Strip does, for every layout, for
// pointers of either half and mixed halves, and for every length (the
// four-at-a-time steps and the tail), and write nothing past the copy.
func TestStripMatchesLayout(t *testing.T) {
	layouts := []ptrauth.Layout{{}}
	for _, va := range []int{16, 39, 48, 52} {
		for _, tbi := range []bool{false, true} {
			layouts = append(layouts, ptrauth.NewLayout(va, tbi))
		}
	}
	mixed, err := ptrauth.NewLayoutHalves(ptrauth.Half{VABits: 48, TBI: true}, ptrauth.Half{VABits: 39, TBI: false, TBID: true}, 0)
	if err != nil {
		t.Fatal(err)
	}
	layouts = append(layouts, mixed)
	rng := rand.New(rand.NewPCG(1, 2))
	for _, l := range layouts {
		for n := range 23 {
			src := make([]uint64, n)
			raw := make([]byte, 8*n)
			for round := range 40 {
				for i := range src {
					src[i] = rng.Uint64()
					switch round % 4 {
					case 0:
						src[i] |= 1 << 55
					case 1:
						src[i] &^= 1 << 55
					}
					binary.LittleEndian.PutUint64(raw[8*i:], src[i])
				}
				for _, bytes := range []bool{false, true} {
					dst := make([]uint64, n+3)
					for i := range dst {
						dst[i] = 0x5a5a
					}
					// Save over one segment of the model's words or
					// of caller bytes holding src.
					const base = 0x10000
					v := View{Layout: l, N: 1}
					v.Segs[0] = Segment{words: src, Base: base, Top: base + 8*uint64(n)}
					if bytes {
						v.Segs[0] = Segment{Data: raw, Base: base, Top: base + 8*uint64(n)}
					}
					if got, err := Save(&v, dst, 0); got != n || err != nil {
						t.Fatalf("layout %+v (bytes %v): Save of %d: %d, %v", l, bytes, n, got, err)
					}
					for j := range n {
						if want := l.Strip(src[n-1-j]); dst[j] != want {
							t.Fatalf("layout %+v (bytes %v): copy of %x: dst[%d] = %#x, want %#x", l, bytes, src, j, dst[j], want)
						}
					}
					for j := n; j < len(dst); j++ {
						if dst[j] != 0x5a5a {
							t.Fatalf("copy (bytes %v) wrote past %d entries", bytes, n)
						}
					}
				}
			}
		}
	}
}

// TestSavedX18 checks the policy table against the kernel's entry code:
// SDEI keeps the interrupted x18 in the event's saved registers under
// every policy (the seed patch's per-CPU copy being what its unwinder
// reads), and only OnStack's IRQ entry hides it.
func TestSavedX18(t *testing.T) {
	want := map[Policy][NumContexts]Where{
		ThreadInfo: {CtxIRQ: InThreadInfo, CtxSDEINormal: InSDEIRegs, CtxSDEICritical: InSDEIRegs},
		OnStack:    {CtxIRQ: OnInterruptedStack, CtxSDEINormal: InSDEIRegs, CtxSDEICritical: InSDEIRegs},
		PerCPU:     {CtxIRQ: InPerCPU, CtxSDEINormal: InPerCPU, CtxSDEICritical: InPerCPU},
	}
	for _, p := range Policies {
		for c := CtxTask; c < NumContexts; c++ {
			w := p.SavedX18(c)
			if w != want[p][c] {
				t.Errorf("%s %s: %s, want %s", p, c, w, want[p][c])
			}
			if w.Hidden() != (p == OnStack && c == CtxIRQ) {
				t.Errorf("%s %s: hidden %v", p, c, w.Hidden())
			}
		}
	}
	if w := Policy(9).SavedX18(CtxIRQ); w != InRegister {
		t.Errorf("unknown policy: %s", w)
	}
}

// TestSaveFollowsLayout: Save strips with the View's Layout as it is at
// the call, also when the caller replaced it after taking the View.
func TestSaveFollowsLayout(t *testing.T) {
	r := newRig(t, Config{Layout: ptrauth.NewLayout(48, false)})
	signed := retAddr(CtxTask, 1) ^ 0x7f<<48
	mustPush(t, r.m, 0, signed)
	v, _ := r.m.View(0)
	buf := make([]uint64, 4)
	if n, err := Save(&v, buf, 0); n != 1 || err != nil || buf[0] != retAddr(CtxTask, 1) {
		t.Fatalf("48-bit: %d %v %#x", n, err, buf[0])
	}
	v.Layout = ptrauth.NewLayout(52, false)
	if n, err := Save(&v, buf, 0); n != 1 || err != nil || buf[0] != v.Layout.Strip(signed) || buf[0] == retAddr(CtxTask, 1) {
		t.Fatalf("52-bit: %d %v %#x, want %#x", n, err, buf[0], v.Layout.Strip(signed))
	}
}

// TestFramesIterator: Frames stops when the consumer breaks off, and over
// a running model it re-checks each slot: a push that rewrites a slot the
// View covers while the consumer holds the iterator ends it with
// ErrChanged, after frames that are all of the View's instant (the
// rewritten value is never yielded).
func TestFramesIterator(t *testing.T) {
	r := newRig(t, Config{Layout: ptrauth.NewLayout(48, false)})
	for i := range 4 {
		mustPush(t, r.m, 0, retAddr(CtxTask, i))
	}
	v, _ := r.m.View(0)
	n := 0
	for f, err := range Frames(&v) {
		if err != nil || f.PC != retAddr(CtxTask, 3) || f.Addr != v.Segs[0].Top-8 {
			t.Fatalf("first frame %v, %v", f, err)
		}
		n++
		break
	}
	if n != 1 {
		t.Fatalf("%d frames after break", n)
	}
	var got []uint64
	var last error
	for f, err := range Frames(&v) {
		if err != nil {
			last = err
			break
		}
		got = append(got, f.PC)
		if len(got) == 1 { // pop three, push one: slot 1 gets a new value
			for range 3 {
				if _, err := r.m.Pop(0); err != nil {
					t.Fatal(err)
				}
			}
			mustPush(t, r.m, 0, retAddr(CtxTask, 99))
		}
	}
	if last != ErrChanged || !slices.Equal(got, []uint64{retAddr(CtxTask, 3)}) {
		t.Fatalf("got %x, %v; want the first frame, then ErrChanged", got, last)
	}
}
