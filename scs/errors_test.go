package scs

import (
	"errors"
	"fmt"
	"reflect"
	"testing"

	"github.com/unwindkit/unwindkit/fault"
	"github.com/unwindkit/unwindkit/internal/errs"
	"github.com/unwindkit/unwindkit/ptrauth"
)

// CorruptError is package fault's type, the one of every unwindkit
// package (no exported name mentions an internal type), and a *CorruptError matches Save's corruption errors,
// wrapped or not, with the rule as an exported constant, as well as other
// packages' corruption errors; it keeps the shared wording and
// ErrCorrupt.
func TestCorruptErrorPublic(t *testing.T) {
	if p := reflect.TypeOf(CorruptError{}).PkgPath(); p != "github.com/unwindkit/unwindkit/fault" {
		t.Fatalf("scs.CorruptError is declared in %s, not in package fault", p)
	}
	r := newRig(t, Config{Layout: ptrauth.NewLayout(48, false), Size: 256})
	mustPush(t, r.m, 0, retAddr(CtxTask, 0))
	v, _ := r.m.View(0)
	end := v.Segs[0].Base + v.Segs[0].Size - 8
	v.Segs[0].words[len(v.Segs[0].words)-1] = 0x1234 // the end magic overwritten
	n, err := Save(&v, make([]uint64, 4), 0)
	var ce *CorruptError
	if n != 0 || !errors.As(fmt.Errorf("wrapped: %w", err), &ce) || ce.Rule != RuleSCSEndMagicOverwritten || ce.Addr != end {
		t.Fatalf("Save: %d, %v -> %+v", n, err, ce)
	}
	if ce.Error() != err.Error() || !errors.Is(ce, ErrCorrupt) || !errors.Is(err, ErrCorrupt) {
		t.Fatalf("public error %q (is ErrCorrupt %v), Save's %q", ce.Error(), errors.Is(ce, ErrCorrupt), err.Error())
	}
	other := errs.Corruptf(fault.RuleMisalignedFP, 0x1230, "frame %d", 1)
	if !errors.As(other, &ce) || ce.Rule != "misaligned fp" || ce.Addr != 0x1230 || ce.Detail != "frame 1" {
		t.Fatalf("As from another package's error: %+v", ce)
	}
	if errors.As(errors.New("x"), &ce) || errors.As(ErrInterruptedTopHidden, &ce) {
		t.Fatal("As matched an error that is no corruption")
	}
}
