package snapshot

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/unwindkit/unwindkit/fp"
	"github.com/unwindkit/unwindkit/internal/mem"
	"github.com/unwindkit/unwindkit/scs"
	"github.com/unwindkit/unwindkit/unwind"
)

// These tests look below the public Frame: the SCS slot each entry came
// from and how the FP walk ended. They unwind through Snapshot.Source, the
// one place that maps a snapshot onto the unwinders' inputs.

const snapMaxFrames = 4096

// snapSCS copies the snapshot's shadow call stack with slot addresses.
func snapSCS(s *Snapshot) ([]scs.Frame, error) {
	src, err := s.Source(unwind.MethodSCS)
	if err != nil {
		return nil, err
	}
	var out []scs.Frame
	v, _ := src.SCSView()
	for f, err := range scs.Frames(&v) {
		if err != nil {
			return out, err
		}
		if len(out) == snapMaxFrames {
			break
		}
		out = append(out, f)
	}
	return out, nil
}

// snapFP walks the snapshot's frame records and says how the walk ended.
func snapFP(s *Snapshot) ([]fp.Frame, fp.End, error) {
	src, err := s.Source(unwind.MethodFP)
	if err != nil {
		return nil, fp.EndError, err
	}
	var frames []fp.Frame
	c, _ := src.FPConfig()
	end, err := fp.Walk(&c, func(f fp.Frame) bool {
		frames = append(frames, f)
		return len(frames) < snapMaxFrames
	})
	return frames, end, err
}

// TestCommittedSnapshotsEndAndRaw checks, on every committed capture, that
// the FP walk ends at fp == 0 without error, and that every SCS entry is
// the same return address, raw (PAC included) and stripped, as one frame
// record's lr, in the same order: the prologue stores the one signed x30
// in both places.
func TestCommittedSnapshotsEndAndRaw(t *testing.T) {
	files, err := filepath.Glob("../../testdata/arm64/snapshots/*.json")
	if err != nil || len(files) < 30 {
		t.Fatalf("found %d snapshots (%v), want at least 30", len(files), err)
	}
	for _, path := range files {
		t.Run(filepath.Base(path), func(t *testing.T) {
			s := loadSnap(t, path)
			frames, end, err := snapFP(s)
			if err != nil || end != fp.EndZeroFP {
				t.Errorf("FP walk: end %v, error %v", end, err)
			}
			entries, err := snapSCS(s)
			if err != nil {
				t.Errorf("SCS copy: %v", err)
			}
			j := 1 // frames[0] is the pc
			for _, e := range entries {
				for j < len(frames) && frames[j].PC != e.PC {
					j++
				}
				if j == len(frames) {
					t.Errorf("SCS entry %#x (slot %#x) is not among the frame records' lrs", e.PC, e.Addr)
					break
				}
				if frames[j].Raw != e.Raw {
					t.Errorf("SCS entry raw %#x, frame record raw %#x", e.Raw, frames[j].Raw)
				}
				j++
			}
		})
	}
}

// TestStaleSlotsNotRead checks the slots above x18 hold stale, nonzero
// return addresses in some captures (left by the warm-up recursion), so the
// SCS tests would notice a copy that read past x18.
func TestStaleSlotsNotRead(t *testing.T) {
	s := loadSnap(t, "../../testdata/arm64/snapshots/clang-pacret-pauth-chain.json")
	v, ok := s.s.Memory.Load(s.Regs.X18)
	if !ok || v == 0 || s.sym.Func(s.Layout.Strip(v)) != "warm" {
		t.Fatalf("slot at x18 = %#x, %v: want a stale return address into warm", v, ok)
	}
	entries, err := snapSCS(s)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Addr >= s.Regs.X18 {
			t.Errorf("SCS copy read slot %#x at or above x18 %#x", e.Addr, s.Regs.X18)
		}
	}
}

// TestSignalCrossesStacks checks the FP walk of a signal capture goes from
// the sigaltstack to the main stack through QEMU's signal frame record.
func TestSignalCrossesStacks(t *testing.T) {
	s := loadSnap(t, "../../testdata/arm64/snapshots/gcc-pacretb-pauth-signal.json")
	frames, _, err := snapFP(s)
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, f := range frames {
		kinds = append(kinds, fmt.Sprintf("%s:%v", s.sym.Func(f.PC), f.Stack))
	}
	got := strings.Join(kinds, " ")
	i, k := strings.Index(got, "sigreturn_tramp"), strings.Index(got, "sig_raise")
	if i < 0 || k < i {
		t.Fatalf("no trampoline before sig_raise: %s", got)
	}
	if frames[0].Stack != fp.Extra || frames[len(frames)-1].Stack != fp.Task {
		t.Errorf("walk did not go from the altstack to the task stack: %s", got)
	}
}

// TestLeafSnapshot: the frameless leaf's caller is only in x30.
func TestLeafSnapshot(t *testing.T) {
	s := loadSnap(t, "../../testdata/arm64/snapshots/clang-pacret-pauth-leaf.json")
	var b strings.Builder
	frames, end, err := snapFP(s)
	b.WriteString("fp:  ")
	for _, fr := range frames {
		b.WriteString(" " + s.sym.Func(fr.PC))
	}
	fmt.Fprintln(&b, " | ended at fp == 0:", end == fp.EndZeroFP, err)
	entries, err := snapSCS(s)
	b.WriteString("scs: ")
	for _, e := range entries {
		b.WriteString(" " + s.sym.Func(e.PC))
	}
	fmt.Fprintln(&b, " |", err)
	fmt.Fprintln(&b, "x30:", s.sym.Func(s.Layout.Strip(s.Regs.X30)))
	want := "fp:   capture_leaf leaf_root main _start | ended at fp == 0: true <nil>\n" +
		"scs:  leaf_root main | <nil>\n" +
		"x30: leaf_mid\n"
	if b.String() != want {
		t.Fatalf("got\n%s\nwant\n%s", b.String(), want)
	}
}

// FuzzUnwindSnapshot overwrites words of a real capture (stack, altstack
// and shadow stack) and runs both unwinders: they must terminate, never
// panic, and fail only with ErrCorrupt, keeping the frames they had.
func FuzzUnwindSnapshot(f *testing.F) {
	paths, _ := filepath.Glob("../../testdata/arm64/snapshots/*-signal.json")
	paths = append(paths, "../../testdata/arm64/snapshots/gcc-pacret-pauth-deep.json")
	var snaps []*Snapshot
	for _, p := range paths {
		snaps = append(snaps, loadSnap(f, p))
	}
	f.Add(uint8(0), uint32(0), uint64(0), uint32(1), uint64(0x10))
	f.Add(uint8(1), uint32(3), uint64(0xdead), uint32(8), uint64(1))
	f.Fuzz(func(t *testing.T, which uint8, word uint32, val uint64, word2 uint32, val2 uint64) {
		orig := snaps[int(which)%len(snaps)]
		// Work on a private copy of the memory.
		inner := *orig.s
		inner.Memory = new(mem.Memory)
		for _, r := range orig.s.Memory.Regions() {
			c, err := mem.NewRegionBytes(r.Name, r.Kind, r.Base, r.Bytes())
			if err != nil {
				t.Fatal(err)
			}
			if err := inner.Memory.Add(c); err != nil {
				t.Fatal(err)
			}
		}
		s := *orig
		s.s = &inner
		var total uint32
		for _, r := range inner.Memory.Regions() {
			total += uint32(r.Size() / 8)
		}
		for _, w := range []struct {
			i uint32
			v uint64
		}{{word, val}, {word2, val2}} {
			i := w.i % total
			for _, r := range inner.Memory.Regions() {
				if n := uint32(r.Size() / 8); i < n {
					r.Store(r.Base+8*uint64(i), w.v)
					break
				} else {
					i -= n
				}
			}
		}
		frames, _, err := snapFP(&s)
		if err != nil && !errors.Is(err, unwind.ErrCorrupt) {
			t.Fatalf("FP: %v", err)
		}
		if len(frames) > snapMaxFrames || len(frames) == 0 {
			t.Fatalf("FP: %d frames", len(frames))
		}
		entries, err := snapSCS(&s)
		if err != nil && !errors.Is(err, unwind.ErrCorrupt) {
			t.Fatalf("SCS: %v", err)
		}
		if uint64(len(entries)) > (s.Regs.X18-s.SCSBase)/8 {
			t.Fatalf("SCS: %d entries from %d slots", len(entries), (s.Regs.X18-s.SCSBase)/8)
		}
	})
}

// TestConcurrentSnapshotUnwinds runs both unwinders and the symbolizer on
// one loaded snapshot from several goroutines (run with -race): a loaded
// Snapshot is only read, so the results must all agree.
func TestConcurrentSnapshotUnwinds(t *testing.T) {
	s := loadSnap(t, "../../testdata/arm64/snapshots/clang-pacretb-pauth-deep.json")
	want, _, err := snapFP(s)
	if err != nil {
		t.Fatal(err)
	}
	const workers = 4
	errc := make(chan error, workers)
	for range workers {
		go func() {
			for range 20 {
				frames, _, err := snapFP(s)
				if err == nil && len(frames) != len(want) {
					err = fmt.Errorf("FP: %d frames, want %d", len(frames), len(want))
				}
				if err == nil {
					for i, f := range frames {
						if f != want[i] || s.sym.Func(f.PC) != s.Expect[i] {
							err = fmt.Errorf("frame %d: %+v, want %+v (%s)", i, f, want[i], s.Expect[i])
							break
						}
					}
				}
				if err == nil {
					var e []scs.Frame
					if e, err = snapSCS(s); err == nil && len(e) != len(want)-2 {
						err = fmt.Errorf("SCS: %d entries, want %d", len(e), len(want)-2)
					}
				}
				if err != nil {
					errc <- err
					return
				}
			}
			errc <- nil
		}()
	}
	for range workers {
		if err := <-errc; err != nil {
			t.Error(err)
		}
	}
}

// TestSymbolizerIsTheLoaders checks that the public Symbolizer of a
// snapshot resolves every address exactly as the loader's table does
// (aliases included: it wraps that table, it does not rebuild it).
func TestSymbolizerIsTheLoaders(t *testing.T) {
	files, _ := filepath.Glob("../../testdata/arm64/snapshots/*.json")
	if len(files) == 0 {
		t.Fatal("no snapshots")
	}
	for _, path := range files {
		s, err := Open(path)
		if err != nil {
			t.Fatal(err)
		}
		in := s.s.Symbols.Symbols()
		if len(s.Symbolizer().Symbols()) != len(in) {
			t.Fatalf("%s: %d public symbols, loader %d", path, len(s.Symbolizer().Symbols()), len(in))
		}
		for i, sym := range in {
			if pub := s.Symbolizer().Symbols()[i]; pub.Name != sym.Name || pub.Addr != sym.Addr || pub.Size != sym.Size {
				t.Fatalf("%s: symbol %d: public %+v, loader %+v", path, i, pub, sym)
			}
			for _, pc := range []uint64{sym.Addr, sym.Addr + sym.Size/2, sym.Addr + sym.Size} {
				if got, want := s.Symbolizer().Name(pc), s.s.Symbols.Name(pc); got != want {
					t.Fatalf("%s: Name(%#x) = %q, loader %q", path, pc, got, want)
				}
			}
		}
	}
}
