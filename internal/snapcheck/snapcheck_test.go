package snapcheck

import (
	"errors"

	"fmt"
	"github.com/unwindkit/unwindkit/internal/errs"
	"github.com/unwindkit/unwindkit/internal/mem"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/unwindkit/unwindkit/fp"
	"github.com/unwindkit/unwindkit/internal/snapshot"
	"github.com/unwindkit/unwindkit/scs"
)

func load(t testing.TB, path string) *snapshot.Snapshot {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	s, err := snapshot.Load(f)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// without returns chain minus the named entries (each removed once).
func without(chain []string, drop ...string) []string {
	out := slices.Clone(chain)
	for _, d := range drop {
		if i := slices.Index(out, d); i >= 0 {
			out = slices.Delete(out, i, i+1)
		}
	}
	return out
}

// invisible lists, per scenario, the frames of the expect chain each
// unwinder cannot see, by the rules:
//   - FP: a frame whose return address is only in x30 (leaf_mid, the caller
//     of the frameless leaf capture_leaf).
//   - SCS: the innermost function (its pc is not a return address), _start
//     (main is not instrumented and pushes nothing), a caller whose return
//     address is only in x30 (leaf_mid), and the function interrupted by
//     the signal (sig_raise: its own pc is not on the SCS; its return
//     address into sig_mid is).
func invisible(scenario string, expect []string) (fpMiss, scsMiss []string) {
	scsMiss = []string{expect[0], "_start"}
	switch scenario {
	case "leaf":
		fpMiss = []string{"leaf_mid"}
		scsMiss = append(scsMiss, "leaf_mid")
	case "signal":
		scsMiss = append(scsMiss, "sig_raise")
	}
	return fpMiss, scsMiss
}

func scenarioOf(path string) string {
	base := strings.TrimSuffix(filepath.Base(path), ".json")
	return base[strings.LastIndex(base, "-")+1:]
}

// TestCommittedSnapshots runs both unwinders on every committed capture and
// checks each symbolizes to the expect chain minus the frames the rules
// say it cannot see.
func TestCommittedSnapshots(t *testing.T) {
	files, err := filepath.Glob("../../testdata/arm64/snapshots/*.json")
	if err != nil || len(files) < 30 {
		t.Fatalf("found %d snapshots (%v), want at least 30", len(files), err)
	}
	for _, path := range files {
		t.Run(filepath.Base(path), func(t *testing.T) {
			s := load(t, path)
			fpMiss, scsMiss := invisible(scenarioOf(path), s.Expect)

			frames, end, err := FP(s)
			if err != nil || end != fp.EndZeroFP {
				t.Errorf("FP walk: end %v, error %v", end, err)
			}
			var fpNames []string
			for _, f := range frames {
				fpNames = append(fpNames, s.Symbols.Func(f.PC))
			}
			if want := without(s.Expect, fpMiss...); !slices.Equal(fpNames, want) {
				t.Errorf("FP walk\n got %v\nwant %v", fpNames, want)
			}

			entries, err := SCS(s)
			if err != nil {
				t.Errorf("SCS copy: %v", err)
			}
			var scsNames []string
			for _, e := range entries {
				scsNames = append(scsNames, s.Symbols.Func(e.PC))
			}
			if want := without(s.Expect, scsMiss...); !slices.Equal(scsNames, want) {
				t.Errorf("SCS copy\n got %v\nwant %v", scsNames, want)
			}

			t.Logf("expect %d frames; FP %d frames (%v), misses %v; SCS %d entries, misses %v",
				len(s.Expect), len(fpNames), end, fpMiss, len(scsNames), scsMiss)

			// Differential: every SCS entry is the same return address,
			// raw (PAC included) and stripped, as one frame record's lr,
			// in the same order; the prologue stores the one signed x30
			// in both places.
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
// SCS test above would notice a copy that read past x18.
func TestStaleSlotsNotRead(t *testing.T) {
	s := load(t, "../../testdata/arm64/snapshots/clang-pacret-pauth-chain.json")
	v, ok := s.Memory.Load(s.Regs.X18)
	if !ok || v == 0 || s.Symbols.Func(s.Layout.Strip(v)) != "warm" {
		t.Fatalf("slot at x18 = %#x, %v: want a stale return address into warm", v, ok)
	}
	entries, err := SCS(s)
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
	s := load(t, "../../testdata/arm64/snapshots/gcc-pacretb-pauth-signal.json")
	frames, _, err := FP(s)
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, f := range frames {
		kinds = append(kinds, fmt.Sprintf("%s:%v", s.Symbols.Func(f.PC), f.Stack))
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

func Example() {
	f, err := os.Open("../../testdata/arm64/snapshots/clang-pacret-pauth-leaf.json")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer f.Close()
	s, err := snapshot.Load(f)
	if err != nil {
		fmt.Println(err)
		return
	}
	frames, end, err := FP(s)
	fmt.Print("fp:  ")
	for _, fr := range frames {
		fmt.Print(" ", s.Symbols.Func(fr.PC))
	}
	fmt.Println(" | ended at fp == 0:", end == fp.EndZeroFP, err)
	entries, err := SCS(s)
	fmt.Print("scs: ")
	for _, e := range entries {
		fmt.Print(" ", s.Symbols.Func(e.PC))
	}
	fmt.Println(" |", err)
	fmt.Println("x30:", s.Symbols.Func(s.Layout.Strip(s.Regs.X30)))
	// Output:
	// fp:   capture_leaf leaf_root main _start | ended at fp == 0: true <nil>
	// scs:  leaf_root main | <nil>
	// x30: leaf_mid
}

// FuzzUnwindSnapshot overwrites words of a real capture (stack, altstack
// and shadow stack) and runs both unwinders: they must terminate, never
// panic, and fail only with ErrCorrupt, keeping the frames they had.
func FuzzUnwindSnapshot(f *testing.F) {
	paths, _ := filepath.Glob("../../testdata/arm64/snapshots/*-signal.json")
	paths = append(paths, "../../testdata/arm64/snapshots/gcc-pacret-pauth-deep.json")
	var snaps []*snapshot.Snapshot
	for _, p := range paths {
		snaps = append(snaps, load(f, p))
	}
	f.Add(uint8(0), uint32(0), uint64(0), uint32(1), uint64(0x10))
	f.Add(uint8(1), uint32(3), uint64(0xdead), uint32(8), uint64(1))
	f.Fuzz(func(t *testing.T, which uint8, word uint32, val uint64, word2 uint32, val2 uint64) {
		orig := snaps[int(which)%len(snaps)]
		// Work on a private copy of the memory.
		s := *orig
		s.Memory = new(mem.Memory)
		for _, r := range orig.Memory.Regions() {
			c, err := mem.NewRegionBytes(r.Name, r.Kind, r.Base, r.Bytes())
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Memory.Add(c); err != nil {
				t.Fatal(err)
			}
		}
		var total uint32
		for _, r := range s.Memory.Regions() {
			total += uint32(r.Size() / 8)
		}
		for _, w := range []struct {
			i uint32
			v uint64
		}{{word, val}, {word2, val2}} {
			i := w.i % total
			for _, r := range s.Memory.Regions() {
				if n := uint32(r.Size() / 8); i < n {
					r.Store(r.Base+8*uint64(i), w.v)
					break
				} else {
					i -= n
				}
			}
		}
		frames, _, err := FP(&s)
		if err != nil && !errors.Is(err, errs.ErrCorrupt) {
			t.Fatalf("FP: %v", err)
		}
		if len(frames) > MaxFrames || len(frames) == 0 {
			t.Fatalf("FP: %d frames", len(frames))
		}
		entries, err := SCS(&s)
		if err != nil && !errors.Is(err, errs.ErrCorrupt) {
			t.Fatalf("SCS: %v", err)
		}
		if uint64(len(entries)) > (s.Regs.X18-s.SCSBase)/8 {
			t.Fatalf("SCS: %d entries from %d slots", len(entries), (s.Regs.X18-s.SCSBase)/8)
		}
	})
}

// TestConcurrentUnwinds runs both unwinders and the symbolizer on one
// loaded snapshot from several goroutines (run with -race): a loaded
// Snapshot is only read, so the results must all agree.
func TestConcurrentUnwinds(t *testing.T) {
	s := load(t, "../../testdata/arm64/snapshots/clang-pacretb-pauth-deep.json")
	want, _, err := FP(s)
	if err != nil {
		t.Fatal(err)
	}
	const workers = 4
	errc := make(chan error, workers)
	for range workers {
		go func() {
			for range 20 {
				frames, _, err := FP(s)
				if err == nil && len(frames) != len(want) {
					err = fmt.Errorf("FP: %d frames, want %d", len(frames), len(want))
				}
				if err == nil {
					for i, f := range frames {
						if f != want[i] || s.Symbols.Func(f.PC) != s.Expect[i] {
							err = fmt.Errorf("frame %d: %+v, want %+v (%s)", i, f, want[i], s.Expect[i])
							break
						}
					}
				}
				if err == nil {
					var e []scs.Frame
					if e, err = SCS(s); err == nil && len(e) != len(want)-2 {
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
