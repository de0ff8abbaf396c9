package machine

import (
	"errors"
	"testing"

	"github.com/unwindkit/unwindkit/scs"
)

// TestErrChangedOneSentinel: the machine's "state changed during the
// unwind" and the SCS model's are one value, so a caller matches either
// with one errors.Is.
func TestErrChangedOneSentinel(t *testing.T) {
	if ErrChanged != scs.ErrChanged {
		t.Fatalf("machine.ErrChanged %v and scs.ErrChanged %v are different sentinels", ErrChanged, scs.ErrChanged)
	}
	if !errors.Is(ErrChanged, scs.ErrChanged) {
		t.Fatal("errors.Is(machine.ErrChanged, scs.ErrChanged) is false")
	}
}

// TestNestingOneStateMachine: the machine's nesting rules are the SCS
// model's (one state machine per CPU), with and without the shadow call
// stack: a refused transition wraps scs.ErrNesting, changes nothing, and
// the CPU's context is the model's.
func TestNestingOneStateMachine(t *testing.T) {
	for _, withSCS := range []bool{true, false} {
		m, c := newTestMachine(t, func(cfg *Config) { cfg.SCS = withSCS })
		must(t, c.EnterIRQ())
		seq := c.Seq()
		for name, err := range map[string]error{
			"irq in irq":       c.EnterIRQ(),
			"exit sdei in irq": c.ExitSDEI(),
			"switch in irq":    c.Switch(c.Task()),
		} {
			if !errors.Is(err, scs.ErrNesting) {
				t.Errorf("scs=%v %s: %v, want ErrNesting", withSCS, name, err)
			}
		}
		if c.Seq() != seq || c.Context() != CtxIRQ || m.scs.Context(0) != CtxIRQ {
			t.Errorf("scs=%v: refused transitions changed the CPU: seq %d -> %d, context %s", withSCS, seq, c.Seq(), c.Context())
		}
		must(t, c.EnterSDEI(true))
		if err := c.EnterSDEI(false); !errors.Is(err, scs.ErrNesting) {
			t.Errorf("scs=%v: normal SDEI in critical: %v, want ErrNesting", withSCS, err)
		}
		if err := c.ExitIRQ(); !errors.Is(err, scs.ErrNesting) {
			t.Errorf("scs=%v: ExitIRQ in SDEI: %v, want ErrNesting", withSCS, err)
		}
		must(t, c.ExitSDEI())
		must(t, c.ExitIRQ())
		if c.Context() != CtxTask || c.Seq()%2 != 0 || c.Seq() <= seq {
			t.Errorf("scs=%v: after exits: context %s, seq %d", withSCS, c.Context(), c.Seq())
		}
	}
}
