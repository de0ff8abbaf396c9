package unwind_test

import (
	"fmt"
	"github.com/unwindkit/unwindkit/fp"
	"math"
	"runtime"
	"slices"
	"testing"

	"github.com/unwindkit/unwindkit/unwind"
	"github.com/unwindkit/unwindkit/unwind/machine"
)

// recursing returns a CPU whose task has recursed depth times, with shadow
// call stacks of scsSize bytes.
func recursing(t testing.TB, scsSize uint64, depth int) *machine.CPU {
	t.Helper()
	cfg := machine.DefaultConfig()
	cfg.SCSSize, cfg.KASAN = scsSize, true
	cfg.Funcs = []machine.Func{{Name: "r", Calls: []string{"r"}}}
	m, err := machine.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	task, err := m.NewTask("t", "r")
	if err != nil {
		t.Fatal(err)
	}
	c := m.CPU(0)
	if err := c.Switch(task); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < depth; i++ {
		if err := c.Call("r"); err != nil {
			t.Fatal(err)
		}
	}
	return c
}

// TestSCSFramesEqualSave checks that Frames of an SCS source yields exactly
// what Save stores, for traces shorter and longer than Frames' internal
// buffer, with and without the Source's skip.
func TestSCSFramesEqualSave(t *testing.T) {
	for _, depth := range []int{0, 1, 61, 62, 63, 64, 65, 128, 200, 400} {
		c := recursing(t, 8192, depth)
		for _, skip := range []int{0, 1, 64, 300} {
			src, err := c.Source(unwind.MethodSCS, machine.SaveOptions{Skip: skip})
			if err != nil {
				t.Fatal(err)
			}
			store := make([]uint64, 4096)
			n, err := unwind.Save(src, store, 0)
			if err != nil {
				t.Fatal(err)
			}
			var got []uint64
			for f, err := range src.Frames() {
				if err != nil {
					t.Fatalf("depth %d skip %d: %v", depth, skip, err)
				}
				if f.Origin != fp.OriginSCS {
					t.Fatalf("depth %d skip %d: frame %+v", depth, skip, f)
				}
				got = append(got, f.PC)
			}
			if !slices.Equal(got, store[:n]) {
				t.Fatalf("depth %d skip %d: Frames gave %d frames, Save %d", depth, skip, len(got), n)
			}
			if want := max(depth+1-skip, 0); n != want { // r's calls and ret_from_fork's
				t.Fatalf("depth %d skip %d: Save gave %d frames, want %d", depth, skip, n, want)
			}
		}
	}
}

// TestSCSFramesAllocs checks that iterating an SCS source's frames costs
// nothing that grows with the shadow stack region: the same allocations
// and bytes for a short trace with 4 KiB shadow stacks as with 1 MiB ones
// (the old Frames allocated a buffer for the whole region), and no more
// allocations than formatting each frame's "name+0xoff" takes.
func TestSCSFramesAllocs(t *testing.T) {
	const depth = 7 // 8 frames
	var sum uint64
	measure := func(size uint64) (allocs float64, bytes uint64) {
		src, err := recursing(t, size, depth).Source(unwind.MethodSCS, machine.SaveOptions{})
		if err != nil {
			t.Fatal(err)
		}
		run := func() {
			for f, err := range src.Frames() {
				if err != nil {
					panic(fmt.Sprint(err))
				}
				sum += f.PC
			}
		}
		// AllocsPerRun and MemStats count every allocation in the
		// process, the runtime's own included: keep the least of a few
		// rounds, which is what Frames itself costs.
		allocs, bytes = math.Inf(1), math.MaxUint64
		for range 5 {
			allocs = min(allocs, testing.AllocsPerRun(100, run))
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			for range 100 {
				run()
			}
			runtime.ReadMemStats(&after)
			bytes = min(bytes, (after.TotalAlloc-before.TotalAlloc)/100)
		}
		return allocs, bytes
	}
	smallA, smallB := measure(4 << 10)
	bigA, bigB := measure(1 << 20)
	t.Logf("4 KiB shadow stacks: %v allocs, %d B per trace; 1 MiB: %v allocs, %d B", smallA, smallB, bigA, bigB)
	// Bytes from MemStats include what the runtime allocates meanwhile
	// (GC, other goroutines), so compare with room: the defect this
	// guards against (a buffer the size of the region) costs 1 MiB here.
	// Under -race the count itself varies between runs (20 or 21 a trace
	// in both sizes, in any order): sync.Pool drops a random quarter of
	// what is put back in race builds, so fmt's pooled printers are
	// reallocated at random. A race build allows one.
	slack := 0.0
	if raceEnabled {
		slack = 1
	}
	if math.Abs(bigA-smallA) > slack || bigB > 2*smallB+256 {
		t.Errorf("Frames cost grows with the region: %v allocs %d B (4 KiB) vs %v allocs %d B (1 MiB)", smallA, smallB, bigA, bigB)
	}
	if frames := depth + 1; !raceEnabled && smallA > float64(2*frames+1) {
		t.Errorf("Frames of %d frames: %v allocations, want at most %d (a symbol name per frame, the iterator)", frames, smallA, 2*frames+1)
	}
	if sum == 0 {
		t.Error("no frames")
	}
}

// TestAppendFrames checks that AppendFrames is the Frames loop: the same
// frames after what dst held, and on a walk that fails part-way the
// frames before the failure with its error.
func TestAppendFrames(t *testing.T) {
	c := recursing(t, 4096, 5)
	for _, m := range []unwind.Method{unwind.MethodSCS, unwind.MethodFP} {
		src, err := c.Source(m, machine.SaveOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var want []unwind.Frame
		var wantErr error
		for f, err := range src.Frames() {
			if err != nil {
				wantErr = err
				break
			}
			want = append(want, f)
		}
		head := []unwind.Frame{{PC: 1}}
		got, err := src.AppendFrames(head)
		if err != wantErr || !slices.Equal(got[1:], want) || got[0].PC != 1 || len(want) == 0 {
			t.Errorf("%v: AppendFrames = %d frames, %v; Frames %d, %v", m, len(got)-1, err, len(want), wantErr)
		}
	}
	// A GCS of 7 bytes, not a whole entry: no frame, the error.
	bad := unwind.NewGCSSource(make([]byte, 7), 0x1000, 0x1000, unwind.SourceOptions{})
	got, err := bad.AppendFrames(nil)
	var loopErr error
	for _, e := range bad.Frames() {
		loopErr = e
	}
	if len(got) != 0 || err == nil || err.Error() != fmt.Sprint(loopErr) {
		t.Errorf("a broken source: %d frames, %v; Frames ends with %v", len(got), err, loopErr)
	}
}
