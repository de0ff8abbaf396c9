package kernel_test

import (
	"testing"

	"github.com/unwindkit/unwindkit/internal/kcapture"
)

// BenchmarkRealKernel unwinds the IPI-interrupted CPU of the shipped SCS
// kernel capture (18 frames across the IRQ stack and pt_regs) with both
// techniques. The FP walk is package fp's over the stacks' bytes, which
// the first Run read from the dump (the reads are not timed); the SCS
// copy reads two contiguous ranges through the dump's page tables each
// time.
func BenchmarkRealKernel(b *testing.B) {
	cp, err := kcapture.OpenCapture("../../testdata/kernel/scs-6.12")
	if err != nil {
		b.Fatal(err)
	}
	s := &cp.Expected.Stops[1]
	k, err := cp.Kernel(s)
	if err != nil {
		b.Fatal(err)
	}
	w, err := k.CPUWalk(s.StoppedCPU)
	if err != nil {
		b.Fatal(err)
	}
	fs, _, err := w.Run()
	if err != nil {
		b.Fatal(err)
	}
	b.Run("fp-walk", func(b *testing.B) {
		for b.Loop() {
			if got, _, _ := w.Run(); len(got) != len(fs) {
				b.Fatal(len(got))
			}
		}
	})
	b.Run("scs-copy", func(b *testing.B) {
		for b.Loop() {
			if got, _, err := k.SCSCopyCPU(s.StoppedCPU, fs); err != nil || len(got) == 0 {
				b.Fatal(err)
			}
		}
	})
}
