package kcapture_test

import (
	"strings"
	"testing"

	"github.com/unwindkit/unwindkit/internal/kcapture"
)

// The source markers kernels since 6.14 print after each frame are kept
// one per frame: a trace with another number of them is refused, and the
// shipped 7.2 capture has them where its console shows " (P)": first in
// the traces show_regs prints, or right after the IRQ vector el1h_64_irq.
func TestSources(t *testing.T) {
	bad := `{"stops": [], "traces": [{"frames": ["a+0x0/0x4", "b+0x4/0x8"], "sources": ["P"]}]}`
	if _, err := kcapture.ParseExpected([]byte(bad)); err == nil || !strings.Contains(err.Error(), "1 sources for 2 frames") {
		t.Errorf("mismatched sources: %v", err)
	}
	cp, err := kcapture.OpenCapture("../../testdata/kernel/deb-7.2")
	if err != nil {
		t.Fatal(err)
	}
	p := 0
	for _, tr := range cp.Expected.Traces {
		for i, s := range tr.Sources {
			if s == "P" {
				p++
				// The pc of pt_regs: where show_regs starts, or after
				// the EL1 vector that pushed them.
				if i != 0 && kcapture.FuncOf(tr.Frames[i-1]) != "el1h_64_irq" {
					t.Errorf("trace %q: (P) at frame %d after %s", tr.Title, i, tr.Frames[i-1])
				}
			}
		}
	}
	if p == 0 {
		t.Error("no frame printed with (P)")
	}
}
