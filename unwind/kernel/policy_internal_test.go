package kernel

import (
	"testing"

	"github.com/unwindkit/unwindkit/fp"
)

// TestOnStackPolicyMatters checks on the real kernels that the two x18
// policies are really different entry code: with call_on_irq_stack keeping
// x18 on the stack, thread_info.scs_sp of the interrupted task is stale
// (last written at a context switch), so the copy must take the on-stack
// slot; with scs_save, thread_info.scs_sp is the saved x18 and the
// on-stack slot above call_on_irq_stack's record holds something else.
func TestOnStackPolicyMatters(t *testing.T) {
	for _, c := range []struct {
		dir    string
		policy string
	}{
		{"../../testdata/kernel/scs-6.12", "thread_info"},
		{"../../testdata/kernel/scs-6.12-onstack", "on the stack"},
		{"../../testdata/kernel/scs-6.1", "thread_info"},
		{"../../testdata/kernel/scs-6.1-onstack", "on the stack"},
	} {
		cp, err := OpenCapture(c.dir)
		if err != nil {
			t.Fatal(err)
		}
		s := &cp.Expected.Stops[1]
		if s.Name != "l-ipi" {
			t.Fatalf("%s: stop 1 is %s", c.dir, s.Name)
		}
		k, err := cp.Kernel(s)
		if err != nil {
			t.Fatal(err)
		}
		rep := k.Unwind(false)
		r := rep.CPUs[s.StoppedCPU]
		task, _, _ := k.Current(s.StoppedCPU)
		_, tsp, err := k.threadSCS(task)
		if err != nil {
			t.Fatal(err)
		}
		var slot uint64
		for i := 1; i < len(r.Frames); i++ {
			if r.Frames[i-1].Stack == fp.IRQ && r.Frames[i].Stack == fp.Task {
				slot, _ = k.read64(r.Frames[i-1].FP + 16)
			}
		}
		saved := tsp
		if c.policy == "on the stack" {
			saved = slot
		}
		if rep.SCSPolicy != c.policy || tsp == slot || saved == 0 {
			t.Errorf("%s: policy %q, thread_info.scs_sp %#x, on-stack slot %#x", c.dir, rep.SCSPolicy, tsp, slot)
		}
		t.Logf("%s: policy %s: thread_info.scs_sp %#x, slot above call_on_irq_stack's record %#x", c.dir, rep.SCSPolicy, tsp, slot)
	}
}
