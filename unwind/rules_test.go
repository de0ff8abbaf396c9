package unwind

import (
	"errors"
	"fmt"
	"testing"

	"github.com/unwindkit/unwindkit/fault"
	"github.com/unwindkit/unwindkit/fp"
	"github.com/unwindkit/unwindkit/internal/errs"
	"github.com/unwindkit/unwindkit/scs"
)

// unwind.CorruptError is package fault's type, which errors.As fills from the
// corruption errors of the unwinders it fronts, with the rules as
// constants shared with fp and scs.
func TestCorruptErrorAs(t *testing.T) {
	for _, tc := range []struct {
		err  error
		rule string
	}{
		{errs.Corruptf(fp.RuleFPNotIncreasing, 0x40, "frame record"), fp.RuleFPNotIncreasing},
		{errs.Corrupt(fault.RuleSCSOverflow, 0x80), scs.RuleSCSOverflow},
		{errs.Corrupt(fault.RuleNonMonotonicFP, 0xc0), RuleNonMonotonicFP},
	} {
		var ce *CorruptError
		if !errors.As(fmt.Errorf("ctx: %w", tc.err), &ce) || ce.Rule != tc.rule || ce.Error() != tc.err.Error() || !errors.Is(ce, ErrCorrupt) {
			t.Errorf("%v: As gives %+v", tc.err, ce)
		}
	}
	if RuleMisalignedFP != fp.RuleMisalignedFP || RuleSCSUnderflow != scs.RuleSCSUnderflow {
		t.Fatal("re-exported rules differ")
	}
}
