package kernel_test

import (
	"slices"
	"testing"

	"github.com/unwindkit/unwindkit/fp"
	"github.com/unwindkit/unwindkit/internal/kcapture"
)

// TestDefaultPtRegsIsNewestKernel checks package fp's default pt_regs
// layout (the zero fp.PtRegsLayout: fp.PtRegsSize, fp.PtRegsStackFrameOff,
// ...) against the newest real kernel captured, Debian's 7.2, whose BTF
// says struct pt_regs is 320 bytes with stackframe at 296 (no
// lockdep_hardirqs and exit_rcu after it since arm64's generic entry):
// every blocked task walked with fp's defaults alone, task_pt_regs from
// fp.TaskPtRegsAddr, ends at its FINAL record with the same frames as
// the walk with the BTF's layout.
func TestDefaultPtRegsIsNewestKernel(t *testing.T) {
	cp, err := kcapture.OpenCapture("../../testdata/kernel/deb-7.2")
	if err != nil {
		t.Fatal(err)
	}
	var s *kcapture.Stop
	for i := range cp.Expected.Stops {
		if cp.Expected.Stops[i].Name == "t" {
			s = &cp.Expected.Stops[i]
		}
	}
	if s == nil {
		t.Fatal("no stop t")
	}
	k, err := cp.Kernel(s)
	if err != nil {
		t.Fatal(err)
	}
	def := fp.PtRegsLayout{Size: fp.PtRegsSize, X29: fp.PtRegsX29Off, PC: fp.PtRegsPCOff, StackFrame: fp.PtRegsStackFrameOff}
	if k.Regs != def {
		t.Errorf("7.2's pt_regs from BTF %+v, fp's default %+v", k.Regs, def)
	}
	rep := k.Unwind(true)
	n := 0
	for _, tr := range rep.Tasks {
		if tr.Running || tr.End != fp.EndFinal {
			continue
		}
		c, err := tr.Walk.Config()
		if err != nil {
			t.Fatal(err)
		}
		c.PtRegs = fp.PtRegsLayout{}
		c.TaskPtRegs = fp.TaskPtRegsAddr(tr.Walk.Stacks[0].High, fp.PtRegsLayout{})
		var got []uint64
		end, err := fp.Walk(c, func(f fp.Frame) bool { got = append(got, f.PC); return true })
		var want []uint64
		for _, f := range tr.Frames {
			want = append(want, f.PC)
		}
		if end != fp.EndFinal || err != nil || !slices.Equal(got, want) {
			t.Errorf("task %s pid %d with fp's default layout: %v %v\n%x\nwant %x", tr.Task.Comm, tr.Task.PID, end, err, got, want)
			continue
		}
		n++
	}
	if n == 0 {
		t.Fatal("no blocked task walked")
	}
	t.Logf("%d blocked tasks end at FINAL with fp's default pt_regs layout", n)
}
