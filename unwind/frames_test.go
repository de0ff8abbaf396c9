package unwind

import (
	"fmt"
	"runtime"
	"slices"
	"testing"

	"github.com/unwindkit/unwindkit/internal/mem"
	"github.com/unwindkit/unwindkit/ptrauth"
	"github.com/unwindkit/unwindkit/scs"
)

// scsSource returns a Source over a 16 KiB shadow stack holding depth
// entries, the newest last.
func scsSource(t testing.TB, depth int, opts SourceOptions) *Source {
	return scsSourceIn(t, 16<<10, depth, opts)
}

// scsSourceIn is scsSource with a shadow stack region of size bytes.
func scsSourceIn(t testing.TB, size uint64, depth int, opts SourceOptions) *Source {
	t.Helper()
	const base = 0x7000_0000
	r, err := mem.NewRegion("scs", "scs", base, size)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < depth; i++ {
		r.Store(base+uint64(i)*8, 0x40_0000+uint64(i)*4)
	}
	v := scs.NewSnapshotView(r, base, base+uint64(depth)*8, ptrauth.Layout{})
	return NewSCSSource(&v, opts)
}

// TestSCSFramesEqualSave checks that Frames of an SCS source yields exactly
// what Save stores, for traces shorter and longer than Frames' internal
// buffer, with and without the Source's skip.
func TestSCSFramesEqualSave(t *testing.T) {
	for _, depth := range []int{0, 1, 63, 64, 65, 128, 200, 2047} {
		for _, skip := range []int{0, 1, 64, 300} {
			src := scsSource(t, depth, SourceOptions{Skip: skip})
			store := make([]uint64, 4096)
			n, err := Save(src, store, 0)
			if err != nil {
				t.Fatal(err)
			}
			var got []uint64
			for f, err := range src.Frames() {
				if err != nil {
					t.Fatalf("depth %d skip %d: %v", depth, skip, err)
				}
				if f.Source != SourceSCS || f.Raw != f.PC {
					t.Fatalf("depth %d skip %d: frame %+v", depth, skip, f)
				}
				got = append(got, f.PC)
			}
			if !slices.Equal(got, store[:n]) {
				t.Fatalf("depth %d skip %d: Frames gave %d frames, Save %d", depth, skip, len(got), n)
			}
			if want := max(depth-skip, 0); n != want {
				t.Fatalf("depth %d skip %d: Save gave %d frames, want %d", depth, skip, n, want)
			}
		}
	}
}

// TestSCSFramesAllocs checks that iterating an SCS source's frames costs
// nothing that grows with the shadow stack region: the same allocations
// and bytes for a short trace in a 4 KiB region as in a 1 MiB one (the old
// Frames allocated a buffer for the whole region), and no more
// allocations than one name per frame plus the iterator.
func TestSCSFramesAllocs(t *testing.T) {
	const depth = 8
	var sum uint64
	measure := func(size uint64) (allocs float64, bytes uint64) {
		src := scsSourceIn(t, size, depth, SourceOptions{})
		run := func() {
			for f, err := range src.Frames() {
				if err != nil {
					panic(fmt.Sprint(err))
				}
				sum += f.PC
			}
		}
		allocs = testing.AllocsPerRun(100, run)
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		for range 100 {
			run()
		}
		runtime.ReadMemStats(&after)
		return allocs, (after.TotalAlloc - before.TotalAlloc) / 100
	}
	smallA, smallB := measure(4 << 10)
	bigA, bigB := measure(1 << 20)
	t.Logf("4 KiB region: %v allocs, %d B per trace; 1 MiB region: %v allocs, %d B", smallA, smallB, bigA, bigB)
	if bigA != smallA || bigB > smallB+64 {
		t.Errorf("Frames cost grows with the region: %v allocs %d B (4 KiB) vs %v allocs %d B (1 MiB)", smallA, smallB, bigA, bigB)
	}
	if smallA > depth+1 {
		t.Errorf("Frames of %d frames: %v allocations, want at most %d (a name per frame, the iterator)", depth, smallA, depth+1)
	}
	if sum == 0 {
		t.Error("no frames")
	}
}
