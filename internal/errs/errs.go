// Package errs holds the one definition of each error sentinel used across
// unwindkit. Public packages re-export these values, so errors.Is works the
// same whichever package a caller imports.
package errs

import (
	"errors"
	"fmt"
	"syscall"
)

// notSupported is the type of ErrNotSupported. It matches ENOSYS under
// errors.Is, mirroring the kernel's stack_trace_save_shadow() returning
// -ENOSYS when the architecture has no shadow call stack unwinder.
type notSupported struct{}

func (notSupported) Error() string { return "unwindkit: mechanism not supported" }

// Is reports whether target is ENOSYS. syscall.ENOSYS and unix.ENOSYS are
// the same syscall.Errno value on every Unix, so either matches.
func (notSupported) Is(target error) bool { return target == syscall.ENOSYS }

// ErrNotSupported reports that the asked-for mechanism is absent: the shadow
// call stack is disabled, frame pointers are not kept on this GOARCH, and so
// on. errors.Is(ErrNotSupported, unix.ENOSYS) is true.
var ErrNotSupported error = notSupported{}

// ErrCorrupt reports corrupt or inconsistent state found by an unwinder or a
// loader. It is always returned wrapped in a *CorruptError that says what was
// wrong and where.
var ErrCorrupt = errors.New("unwindkit: corrupt state")

// ErrUnreliable reports that a reliable walk (arch_stack_walk_reliable)
// cannot vouch for its trace: it met an exception boundary, an unrecovered
// return trampoline, an end other than the task's final frame record, or
// its consumer stopped it (a full store included). It is not corruption:
// the same stack walks fine without reliable mode.
var ErrUnreliable = errors.New("unwindkit: unreliable stack trace")

// ErrChanged reports that the state being unwound changed while it was
// read: a shadow stack a view covers was rewritten, or a modelled CPU kept
// changing through every retry. No consistent state was read, so no
// frames are returned; unwinding again may succeed.
var ErrChanged = errors.New("unwindkit: state changed during the unwind")

// CorruptError describes one piece of corruption: the rule that was broken,
// the address where it was found, and optional detail.
type CorruptError struct {
	Rule   string // the broken rule, e.g. "misaligned fp"
	Addr   uint64 // where it was found
	Detail string // optional extra context
}

// Error implements error.
func (e *CorruptError) Error() string {
	if e.Detail != "" {
		return fmt.Sprintf("unwindkit: corrupt state: %s at %#x: %s", e.Rule, e.Addr, e.Detail)
	}
	return fmt.Sprintf("unwindkit: corrupt state: %s at %#x", e.Rule, e.Addr)
}

// Unwrap returns ErrCorrupt, so errors.Is(err, ErrCorrupt) holds.
func (e *CorruptError) Unwrap() error { return ErrCorrupt }

// asHooks fill the public CorruptError types (see [RegisterAs]).
var asHooks []func(e *CorruptError, target any) bool

// publicCorrupt is the shape of a public package's CorruptError: a real
// type (not an alias of CorruptError) with CorruptError's fields, so each
// converts to the other.
type publicCorrupt interface {
	~struct {
		Rule   string
		Addr   uint64
		Detail string
	}
}

// RegisterAs adds T to the types As fills: a public package that exports
// its own CorruptError type calls RegisterAs[CorruptError]() from its init
// function, and errors.As with a **its.CorruptError then gets a copy of e.
func RegisterAs[T publicCorrupt]() {
	asHooks = append(asHooks, func(e *CorruptError, target any) bool {
		p, ok := target.(**T)
		if ok {
			v := T(*e)
			*p = &v
		}
		return ok
	})
}

// As lets errors.As fill the CorruptError type of any public package
// from e, so a caller's *CorruptError of whichever unwindkit package it
// imports matches every corruption error.
func (e *CorruptError) As(target any) bool {
	for _, f := range asHooks {
		if f(e, target) {
			return true
		}
	}
	return false
}

// Corrupt returns a *CorruptError for rule at addr.
func Corrupt(rule string, addr uint64) error {
	return &CorruptError{Rule: rule, Addr: addr}
}

// Corruptf returns a *CorruptError for rule at addr with formatted detail.
func Corruptf(rule string, addr uint64, format string, args ...any) error {
	return &CorruptError{Rule: rule, Addr: addr, Detail: fmt.Sprintf(format, args...)}
}
