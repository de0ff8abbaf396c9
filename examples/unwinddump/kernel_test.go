package main

import (
	"strings"
	"testing"
)

// TestDumpKernel prints the shipped Debian captures and checks that every
// stop's printed trace is reported matched and every blocked task equal.
func TestDumpKernel(t *testing.T) {
	for _, c := range []struct {
		dir     string
		blocked string
		scs     bool
		stops   int
	}{
		{"../../testdata/kernel/deb-6.1", "blocked tasks: 50 of 50 match", false, 3},
		{"../../testdata/kernel/deb-6.12", "blocked tasks: 55 of 55 match", false, 3},
		{"../../testdata/kernel/scs-6.12", "blocked tasks: 33 of 33 match", true, 4},
		{"../../testdata/kernel/scs-6.12-onstack", "blocked tasks: 33 of 33 match", true, 4},
		{"../../testdata/kernel/scs-6.1", "blocked tasks: 25 of 25 match", true, 4},
		{"../../testdata/kernel/scs-6.1-onstack", "blocked tasks: 25 of 25 match", true, 4},
	} {
		var b strings.Builder
		if err := dumpKernel(&b, c.dir); err != nil {
			t.Fatal(err)
		}
		out := b.String()
		exact, plus := strings.Count(out, "match the FP walk exactly"), strings.Count(out, "(the stopped function prints at the offset of its later call)")
		if exact+plus != c.stops || plus != c.stops-3 || strings.Contains(out, "DIFFERS") {
			t.Errorf("%s: %d+%d of %d stops matched, or a difference:\n%s", c.dir, exact, plus, c.stops, out)
		}
		noSCS := strings.Contains(out, "kernel built without CONFIG_SHADOW_CALL_STACK")
		if !strings.Contains(out, c.blocked) || noSCS != !c.scs {
			t.Errorf("%s: want %q and the SCS copy refused %v:\n%s", c.dir, c.blocked, !c.scs, out)
		}
		if c.scs && (!strings.Contains(out, "interrupted x18") || strings.Contains(out, "UNEXPLAINED")) {
			t.Errorf("%s: SCS copy without the interrupted x18, or a difference unexplained:\n%s", c.dir, out)
		}
		if !strings.Contains(out, "= el1h_64_irq+0x64/0x68") && !strings.Contains(out, "[pt_regs-pc, task]") {
			t.Errorf("%s: no exception boundary shown", c.dir)
		}
	}
}

func TestIsKernelCapture(t *testing.T) {
	if !isKernelCapture("../../testdata/kernel/deb-6.1") || isKernelCapture("../../testdata/kernel") || isKernelCapture("main.go") {
		t.Error("isKernelCapture")
	}
}
