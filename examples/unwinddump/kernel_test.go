package main

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
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
		{"../../testdata/kernel/deb-7.2", "blocked tasks: 54 of 54 match", false, 3},
		{"../../testdata/kernel/scs-6.12", "blocked tasks: 33 of 33 match", true, 4},
		{"../../testdata/kernel/scs-6.12-onstack", "blocked tasks: 33 of 33 match", true, 4},
		{"../../testdata/kernel/scs-6.1", "blocked tasks: 25 of 25 match", true, 4},
		{"../../testdata/kernel/scs-6.1-onstack", "blocked tasks: 25 of 25 match", true, 4},
		{"../../testdata/kernel/scs-6.12-percpu", "blocked tasks: 31 of 31 match", true, 4},
		{"../../testdata/kernel/scs-7.2", "blocked tasks: 30 of 30 match", true, 4},
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
		if !strings.Contains(out, "= el1h_64_irq+0x64/0x68") && !strings.Contains(out, "[regs-pc, task]") {
			t.Errorf("%s: no exception boundary shown", c.dir)
		}
	}
}

func TestIsKernelCapture(t *testing.T) {
	if !isKernelCapture("../../testdata/kernel/deb-6.1") || isKernelCapture("../../testdata/kernel") || isKernelCapture("main.go") {
		t.Error("isKernelCapture")
	}
}

// A capture whose stop names a CPU the dump does not have is an error
// naming the stop and the field (the old code indexed the report with it
// and panicked).
func TestDumpKernelStoppedCPUOutside(t *testing.T) {
	src := "../../testdata/kernel/deb-6.12"
	ents, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	exp, err := os.ReadFile(filepath.Join(src, "expected.json"))
	if err != nil {
		t.Fatal(err)
	}
	for _, cpu := range []string{"2", "-1"} {
		dir := t.TempDir()
		for _, e := range ents {
			if e.Name() != "expected.json" {
				abs, _ := filepath.Abs(filepath.Join(src, e.Name()))
				if err := os.Symlink(abs, filepath.Join(dir, e.Name())); err != nil {
					t.Fatal(err)
				}
			}
		}
		b := bytes.Replace(exp, []byte(`"stopped_cpu": 1`), []byte(`"stopped_cpu": `+cpu), 1)
		if bytes.Equal(b, exp) {
			t.Fatal("no stopped_cpu in expected.json")
		}
		if err := os.WriteFile(filepath.Join(dir, "expected.json"), b, 0o644); err != nil {
			t.Fatal(err)
		}
		err := func() (err error) {
			defer func() {
				if r := recover(); r != nil {
					t.Errorf("stopped_cpu %s: panic: %v", cpu, r)
				}
			}()
			return dumpKernel(io.Discard, dir)
		}()
		if err == nil || !strings.Contains(err.Error(), "stop 0 (l-syscall): stopped_cpu "+cpu+" is not among the dump's 2 CPU(s)") {
			t.Errorf("stopped_cpu %s: %v", cpu, err)
		}
	}
}
