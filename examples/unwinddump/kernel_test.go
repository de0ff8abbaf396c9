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
	}{
		{"../../testdata/kernel/deb-6.1", "blocked tasks: 50 of 50 match"},
		{"../../testdata/kernel/deb-6.12", "blocked tasks: 55 of 55 match"},
	} {
		var b strings.Builder
		if err := dumpKernel(&b, c.dir); err != nil {
			t.Fatal(err)
		}
		out := b.String()
		if n := strings.Count(out, "match the FP walk exactly"); n != 3 || strings.Contains(out, "DIFFERS") {
			t.Errorf("%s: %d of 3 stops matched, or a difference:\n%s", c.dir, n, out)
		}
		if !strings.Contains(out, c.blocked) || !strings.Contains(out, "kernel built without CONFIG_SHADOW_CALL_STACK") {
			t.Errorf("%s: want %q and the SCS copy refused:\n%s", c.dir, c.blocked, out)
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
