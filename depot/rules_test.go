package depot

import (
	"errors"
	"fmt"
	"testing"
)

// The depot's corruption error is a *CorruptError (package fault's, not an
// internal type): errors.As fills it with the rule, the handle and the
// detail, and errors.Is matches ErrCorrupt.
func TestCorruptErrorAs(t *testing.T) {
	err := fmt.Errorf("fetch: %w", overrun(0x1234, 40, 16380))
	var ce *CorruptError
	if !errors.As(err, &ce) {
		t.Fatalf("errors.As(%v) found no *depot.CorruptError", err)
	}
	if ce.Rule != RuleRecordOverrunsPool || ce.Addr != 0x1234 || ce.Detail != "40 frames at word 16380" {
		t.Errorf("CorruptError %+v", *ce)
	}
	if !errors.Is(err, ErrCorrupt) || !errors.Is(ce, ErrCorrupt) {
		t.Error("not ErrCorrupt")
	}
	if ce.Error() != errors.Unwrap(err).Error() {
		t.Errorf("Error() %q, want %q", ce.Error(), errors.Unwrap(err).Error())
	}
}
