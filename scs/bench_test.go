package scs

import (
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/unwindkit/unwindkit/internal/needs"
	"github.com/unwindkit/unwindkit/ptrauth"
)

var benchDepths = []int{8, 32, 128}

// benchModel returns a model on cpu 0 holding depth entries, signed under
// a 48-bit layout: all in the task context, or split over task, IRQ and
// SDEI normal (nested, PerCPU policy, interrupted PCs kept).
func benchModel(b *testing.B, depth int, nested bool) *Model {
	l := ptrauth.NewLayout(48, false)
	cfg := Config{Layout: l, Size: 4096}
	if nested {
		cfg.Policy, cfg.KeepInterruptedPC = PerCPU, true
	}
	r := newRig(b, cfg)
	push := func(n int) {
		for i := range n {
			mustPush(b, r.m, 0, retAddr(CtxTask, i)^uint64(i%7+1)<<48)
		}
	}
	if !nested {
		push(depth)
		return r.m
	}
	// depth frames in all, counting the two interrupted PCs.
	per := (depth - 2) / 3
	push(depth - 2 - 2*per)
	r.enterIRQ(0, 1)
	push(per)
	r.m.EnterSDEI(0, false, 0, 2)
	push(per)
	return r.m
}

func reportPerFrame(b *testing.B, frames int) {
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(frames), "ns/frame")
}

// BenchmarkSave is the fast path: Save on a View taken once.
func BenchmarkSave(b *testing.B) {
	for _, nested := range []bool{false, true} {
		for _, depth := range benchDepths {
			name := fmt.Sprintf("single/depth=%d", depth)
			if nested {
				name = fmt.Sprintf("nested/depth=%d", depth)
			}
			b.Run(name, func(b *testing.B) {
				m := benchModel(b, depth, nested)
				v, _ := m.View(0)
				store := make([]uint64, 256)
				if n, err := Save(&v, store, 0); n != depth || err != nil {
					b.Fatalf("%d frames, %v", n, err)
				}
				for b.Loop() {
					Save(&v, store, 0)
				}
				reportPerFrame(b, depth)
			})
		}
	}
}

// BenchmarkModelSave includes taking the View (the sequence-locked read of
// the per-CPU state) on every call.
func BenchmarkModelSave(b *testing.B) {
	for _, nested := range []bool{false, true} {
		for _, depth := range benchDepths {
			name := fmt.Sprintf("single/depth=%d", depth)
			if nested {
				name = fmt.Sprintf("nested/depth=%d", depth)
			}
			b.Run(name, func(b *testing.B) {
				m := benchModel(b, depth, nested)
				store := make([]uint64, 256)
				for b.Loop() {
					m.Save(0, store, 0)
				}
				reportPerFrame(b, depth)
			})
		}
	}
}

// BenchmarkFrames is the rich variant, for comparison.
func BenchmarkFrames(b *testing.B) {
	for _, depth := range benchDepths {
		b.Run(fmt.Sprintf("nested/depth=%d", depth), func(b *testing.B) {
			m := benchModel(b, depth, true)
			v, _ := m.View(0)
			for b.Loop() {
				for _, err := range Frames(&v) {
					if err != nil {
						b.Fatal(err)
					}
				}
			}
			reportPerFrame(b, depth)
		})
	}
}

// TestSaveInlines checks the compiler's inlining decisions the package
// relies on: Save inlines into its callers, and the copy loops have the
// PAC strip, ptrauth.Masks.Strip or stripHalf, inlined (no call per frame;
// TestStripMatchesLayout checks they strip as ptrauth.Layout.Strip).
func TestSaveInlines(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the go command")
	}
	out, err := exec.Command(needs.Go(t), "build", "-gcflags=-m", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go build -gcflags=-m: %v\n%s", err, out)
	}
	s := string(out)
	if !strings.Contains(s+"\n", "can inline Save\n") {
		t.Errorf("Save is not inlinable:\n%s", s)
	}
	src, err := os.ReadFile("view.go")
	if err != nil {
		t.Fatal(err)
	}
	// Every call of the strip in the file (the copy loops') must be
	// inlined.
	for _, strip := range []struct{ call, inlined string }{
		{"= m.Strip(", "inlining call to ptrauth.Masks.Strip"},
		{"= stripHalf(", "inlining call to stripHalf"},
	} {
		var lines []int
		for i, l := range strings.Split(string(src), "\n") {
			if strings.Contains(l, strip.call) {
				lines = append(lines, i+1)
			}
		}
		if len(lines) == 0 {
			t.Fatalf("no %q found in view.go", strip.call)
		}
		for _, line := range lines {
			want := fmt.Sprintf("view.go:%d:", line)
			found := false
			for _, l := range strings.Split(s, "\n") {
				if strings.Contains(l, want) && strings.Contains(l, strip.inlined) {
					found = true
				}
			}
			if !found {
				t.Errorf("strip not inlined in the copy (%s):\n%s", want, s)
			}
		}
	}
}

// BenchmarkBaselineCopy is the floor Save is measured against in the same
// run: a plain reverse copy of the same number of words, with no strip, no
// atomic load and no validation.
func BenchmarkBaselineCopy(b *testing.B) {
	for _, depth := range benchDepths {
		b.Run(fmt.Sprintf("depth=%d", depth), func(b *testing.B) {
			src := make([]uint64, depth)
			for i := range src {
				src[i] = retAddr(CtxTask, i)
			}
			store := make([]uint64, 256)
			for b.Loop() {
				dst := store[:len(src)]
				for i, j := len(src)-1, 0; i >= 0; i, j = i-1, j+1 {
					dst[j] = src[i]
				}
			}
			reportPerFrame(b, depth)
		})
	}
}

// BenchmarkSaveVsCopy runs Save over a View of one context (single) and of
// three (nested: task, IRQ, SDEI normal) and the plain reverse copy of the
// same number of words as sub-benchmarks of one benchmark, so that
// -count=N interleaves them and their ratios come from one run on a busy
// machine. Each also reports its thread's CPU time per call (cpu-ns/op),
// which other processes competing for the cores do not inflate.
func BenchmarkSaveVsCopy(b *testing.B) {
	for _, depth := range benchDepths {
		src := make([]uint64, depth)
		for i := range src {
			src[i] = retAddr(CtxTask, i)
		}
		store := make([]uint64, 256)
		b.Run(fmt.Sprintf("depth=%d/copy", depth), func(b *testing.B) {
			t := startCPU(b)
			for b.Loop() {
				dst := store[:len(src)]
				for i, j := len(src)-1, 0; i >= 0; i, j = i-1, j+1 {
					dst[j] = src[i]
				}
			}
			t.stop()
		})
		for _, nested := range []bool{false, true} {
			name := fmt.Sprintf("depth=%d/save1", depth)
			if nested {
				name = fmt.Sprintf("depth=%d/save3", depth)
			}
			b.Run(name, func(b *testing.B) {
				m := benchModel(b, depth, nested)
				v, _ := m.View(0)
				if n, err := Save(&v, store, 0); n != depth || err != nil {
					b.Fatalf("%d frames, %v", n, err)
				}
				t := startCPU(b)
				for b.Loop() {
					Save(&v, store, 0)
				}
				t.stop()
			})
		}
	}
}

// BenchmarkSaveSnapshot is Save over caller memory (Segment.Data, plain
// little-endian bytes), for comparison with BenchmarkSave's model memory.
func BenchmarkSaveSnapshot(b *testing.B) {
	l := ptrauth.NewLayout(48, false)
	for _, depth := range benchDepths {
		b.Run(fmt.Sprintf("depth=%d", depth), func(b *testing.B) {
			data := make([]byte, 4096)
			for i := range depth {
				binary.LittleEndian.PutUint64(data[8*i:], retAddr(CtxTask, i)^uint64(i%7+1)<<48)
			}
			const base = 0xffff800010000000
			v := NewSnapshotView(data, base, base+uint64(depth)*8, l)
			store := make([]uint64, 256)
			if n, err := Save(&v, store, 0); n != depth || err != nil || store[0] != retAddr(CtxTask, depth-1) {
				b.Fatalf("%d frames, %v", n, err)
			}
			for b.Loop() {
				Save(&v, store, 0)
			}
			reportPerFrame(b, depth)
		})
	}
}
