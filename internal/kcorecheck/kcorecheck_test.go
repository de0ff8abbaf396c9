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
