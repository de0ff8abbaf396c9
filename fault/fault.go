// Package fault defines, once, the errors every unwindkit package shares:
// the sentinels [ErrNotSupported], [ErrCorrupt], [ErrUnreliable] and
// [ErrChanged], and [CorruptError] with the one list of rules whose breach
// is corruption (the Rule constants).
//
// The other packages re-export them under the same names, the way
// os.PathError is fs.PathError: fp.CorruptError, scs.CorruptError,
// depot.CorruptError and unwind.CorruptError are aliases of
// fault.CorruptError, and fp.ErrCorrupt is fault.ErrCorrupt. So errors.Is
// and errors.As give the same answer whichever package a caller names:
//
//	var ce *unwind.CorruptError // the same type as *fp.CorruptError
//	if errors.As(err, &ce) && ce.Rule == fp.RuleFPNotIncreasing { ... }
//
// The package is a leaf (it imports the standard library only), so every
// unwindkit package can import it, the internal ones included; most
// programs never need to name it.
package fault

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
// loader. It is always returned wrapped in a *[CorruptError] that says what
// was wrong and where.
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

// CorruptError describes one piece of corruption: the rule that was
// broken, the address where it was found, and detail. errors.Is(err,
// [ErrCorrupt]) holds for it.
type CorruptError struct {
	// Rule is the broken rule: one of the Rule constants.
	Rule string
	// Addr is where the corruption was found: a frame pointer, a shadow
	// stack slot, a depot handle, or for a document being loaded the byte
	// offset in it.
	Addr uint64
	// Detail is optional extra context.
	Detail string
}

// Error implements error.
func (e *CorruptError) Error() string {
	if e.Detail != "" {
		return fmt.Sprintf("unwindkit: corrupt state: %s at %#x: %s", e.Rule, e.Addr, e.Detail)
	}
	return fmt.Sprintf("unwindkit: corrupt state: %s at %#x", e.Rule, e.Addr)
}

// Unwrap returns [ErrCorrupt], so errors.Is(err, ErrCorrupt) holds.
func (e *CorruptError) Unwrap() error { return ErrCorrupt }
