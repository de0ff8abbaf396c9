package errs

import (
	"errors"
	"fmt"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/unwindkit/unwindkit/fault"
)

func TestNotSupportedIsENOSYS(t *testing.T) {
	if !errors.Is(ErrNotSupported, unix.ENOSYS) {
		t.Fatal("errors.Is(ErrNotSupported, unix.ENOSYS) is false")
	}
	wrapped := fmt.Errorf("scs: %w", ErrNotSupported)
	if !errors.Is(wrapped, unix.ENOSYS) || !errors.Is(wrapped, ErrNotSupported) {
		t.Fatal("wrapped ErrNotSupported lost its identity")
	}
	if errors.Is(ErrNotSupported, unix.EINVAL) {
		t.Fatal("ErrNotSupported matches EINVAL")
	}
	if errors.Is(ErrCorrupt, unix.ENOSYS) {
		t.Fatal("ErrCorrupt matches ENOSYS")
	}
}

func TestCorruptError(t *testing.T) {
	err := Corruptf(fault.RuleMisalignedFP, 0x1003, "in %s", "task stack")
	if !errors.Is(err, ErrCorrupt) {
		t.Fatal("CorruptError does not unwrap to ErrCorrupt")
	}
	var ce *CorruptError
	if !errors.As(err, &ce) || ce.Rule != "misaligned fp" || ce.Addr != 0x1003 {
		t.Fatalf("errors.As gave %+v", ce)
	}
	if got, want := err.Error(), "unwindkit: corrupt state: misaligned fp at 0x1003: in task stack"; got != want {
		t.Fatalf("Error() = %q, want %q", got, want)
	}
	if got, want := Corrupt(fault.RuleSCSOverflow, 0x10).Error(), "unwindkit: corrupt state: scs overflow at 0x10"; got != want {
		t.Fatalf("Error() = %q, want %q", got, want)
	}
}
