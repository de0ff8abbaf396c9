package kcorecheck

import (
	"testing"

	"github.com/unwindkit/unwindkit/unwind/kernel"
)

// TestClassify checks each rule's verdict and that Check accepts it, and
// that Check refuses an unexplained difference and an "equal" whose
// lines differ.
func TestClassify(t *testing.T) {
	quiet := kernel.LiveState{FP: 0x10, SP: 0x10, PC: 0x20, Switches: 5}
	ran := quiet
	ran.Switches = 6
	on := quiet
	on.OnCPU = 1
	a, b := []string{"[<0>] f+0x4/0x10"}, []string{"[<0>] g+0x4/0x10"}
	for _, c := range []struct {
		name   string
		lr     kernel.LiveResult
		proc   []string
		after  kernel.LiveState
		reader bool
		want   string
	}{
		{"equal", kernel.LiveResult{Attempts: 1, Consistent: true, State: quiet}, a, quiet, false, Equal},
		{"equal, retried", kernel.LiveResult{Attempts: 2, Consistent: true, State: quiet}, a, ran, false, EqualRetried},
		{"ran between", kernel.LiveResult{Attempts: 1, Consistent: true, State: quiet}, b, ran, false, RanBetween},
		{"running", kernel.LiveResult{Attempts: 2, OnCPU: true, State: on}, b, on, false, Running},
		{"reader", kernel.LiveResult{Attempts: 2, OnCPU: true, State: on}, b, on, true, Reader},
		{"inconsistent", kernel.LiveResult{Attempts: 4, State: quiet}, b, quiet, false, Inconsistent},
		{"unexplained", kernel.LiveResult{Attempts: 1, Consistent: true, State: quiet}, b, quiet, false, Unexplained},
	} {
		cm := Comparison{Kcore: a, Proc: c.proc}
		Classify(&cm, c.lr, c.after, nil, c.reader)
		if cm.Verdict != c.want {
			t.Errorf("%s: verdict %q, want %q", c.name, cm.Verdict, c.want)
		}
		if err := Check(cm); (err != nil) != (c.want == Unexplained) {
			t.Errorf("%s: Check: %v", c.name, err)
		}
	}
	bad := Comparison{Verdict: Equal, Attempts: 1, Kcore: a, Proc: b}
	if Check(bad) == nil {
		t.Errorf("Check accepted an equal verdict with different lines")
	}
	gone := Comparison{Kcore: nil, ProcErr: "open /proc/42/stack: no such file or directory"}
	Classify(&gone, kernel.LiveResult{Attempts: 1, Consistent: true}, quiet, nil, false)
	if gone.Verdict != Exited {
		t.Errorf("exited task: %q", gone.Verdict)
	}
}

// TestSCSProblem checks that Check refuses a shadow call stack comparison
// with an unexplained frame or a failed copy, and accepts one whose
// differences are all named rules.
func TestSCSProblem(t *testing.T) {
	ok := Comparison{Verdict: Equal, Attempts: 1, Kcore: []string{"[<0>] f+0x4/0x10"}, SCSChecked: true,
		SCS:      []string{"[<0>] g+0x4/0x10"},
		SCSNotes: []string{"__switch_to+0x8/0x10: only FP: cpu_context.pc, the return address into __switch_to (cpu_switch_to is asm and does not push)"}}
	if err := Check(ok); err != nil {
		t.Errorf("explained: %v", err)
	}
	for name, c := range map[string]Comparison{
		"unexplained": {SCSNotes: []string{"g+0x4/0x10: " + SCSUnexplained + ": only SCS, and not the newest entry of a CPU stopped in a prologue"}},
		"copy failed": {SCSErr: "scs [0x1000, 0x2000): not mapped"},
	} {
		bad := ok
		bad.SCSNotes, bad.SCSErr = c.SCSNotes, c.SCSErr
		if SCSProblem(bad) == "" || Check(bad) == nil {
			t.Errorf("%s: accepted", name)
		}
		bad.SCSChecked = false
		if SCSProblem(bad) != "" {
			t.Errorf("%s, not checked: %q", name, SCSProblem(bad))
		}
	}
}
