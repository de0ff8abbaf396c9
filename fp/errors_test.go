package fp

import (
	"errors"
	"fmt"
	"testing"

	"github.com/unwindkit/unwindkit/internal/errs"
)

// A *CorruptError matches the walk's corruption errors with the rule as an
// exported constant, wrapped or not, and the corruption errors of other
// packages too; it keeps the shared wording and ErrCorrupt.
func TestCorruptErrorAs(t *testing.T) {
	m, s, _ := taskChain(t, 3)
	m.mem.Store(s.fp, s.fp-16) // the innermost record points below itself
	_, _, err := walkAll(t, m.config(s, pc(0)))
	var ce *CorruptError
	if !errors.As(fmt.Errorf("wrapped: %w", err), &ce) || ce.Rule != RuleFPNotIncreasing || ce.Addr != s.fp-16 {
		t.Fatalf("As: %v -> %+v", err, ce)
	}
	if ce.Error() != err.Error() || !errors.Is(ce, ErrCorrupt) {
		t.Fatalf("public error %q (is ErrCorrupt %v), walk error %q", ce.Error(), errors.Is(ce, ErrCorrupt), err.Error())
	}
	other := errs.Corruptf(errs.RuleSCSOverflow, 0x1230, "push on cpu %d", 1)
	if !errors.As(other, &ce) || ce.Rule != "scs overflow" || ce.Addr != 0x1230 || ce.Detail != "push on cpu 1" {
		t.Fatalf("As from another package's error: %+v", ce)
	}
	if errors.As(errors.New("x"), &ce) || errors.As(ErrUnreliable, &ce) {
		t.Fatal("As matched an error that is no corruption")
	}
}
