// Package errs gives the module's own code short names for the errors
// every unwindkit package shares, defined once in the public leaf package
// [github.com/unwindkit/unwindkit/fault] (public so that every public
// package can re-export them without naming an internal type), and the
// constructors of a *CorruptError.
package errs

import (
	"fmt"

	"github.com/unwindkit/unwindkit/fault"
)

// The shared sentinels: the same values as package fault's.
var (
	ErrNotSupported = fault.ErrNotSupported
	ErrCorrupt      = fault.ErrCorrupt
	ErrUnreliable   = fault.ErrUnreliable
	ErrChanged      = fault.ErrChanged
)

// CorruptError is fault.CorruptError.
type CorruptError = fault.CorruptError

// Corrupt returns a *CorruptError for rule (one of fault's Rule
// constants) at addr.
func Corrupt(rule string, addr uint64) error {
	return &CorruptError{Rule: rule, Addr: addr}
}

// Corruptf returns a *CorruptError for rule (one of fault's Rule
// constants) at addr with formatted detail.
func Corruptf(rule string, addr uint64, format string, args ...any) error {
	return &CorruptError{Rule: rule, Addr: addr, Detail: fmt.Sprintf(format, args...)}
}
