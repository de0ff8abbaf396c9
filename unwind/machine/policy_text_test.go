package machine_test

import (
	"flag"
	"io"
	"testing"

	"github.com/unwindkit/unwindkit/unwind/machine"
)

// TestPolicyText checks that flag.TextVar parses every shadow call stack
// policy into a Config (no import of package scs needed) and rejects
// anything else.
func TestPolicyText(t *testing.T) {
	for _, want := range []machine.Policy{machine.ThreadInfo, machine.OnStack, machine.PerCPU} {
		cfg := machine.DefaultConfig()
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		fs.TextVar(&cfg.Policy, "policy", machine.ThreadInfo, "x18 policy")
		if err := fs.Parse([]string{"-policy", want.String()}); err != nil {
			t.Fatalf("%v: %v", want, err)
		}
		if cfg.Policy != want {
			t.Errorf("-policy %s parsed as %v", want, cfg.Policy)
		}
		b, err := want.MarshalText()
		if err != nil || string(b) != want.String() {
			t.Errorf("%v.MarshalText() = %q, %v", want, b, err)
		}
	}
	var p machine.Policy
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.TextVar(&p, "policy", machine.PerCPU, "x18 policy")
	if err := fs.Parse([]string{"-policy", "percpu"}); err == nil {
		t.Errorf("-policy percpu accepted as %v", p)
	}
	if b, err := machine.Policy(7).MarshalText(); err == nil {
		t.Errorf("Policy(7).MarshalText() = %q, no error", b)
	}
}
