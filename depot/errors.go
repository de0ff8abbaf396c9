package depot

import (
	"errors"
	"fmt"

	"github.com/unwindkit/unwindkit/internal/errs"
)

// ErrCorrupt reports an internal inconsistency of the depot (a record that
// overruns its pool); such errors are *[CorruptError] values. It is the
// ErrCorrupt shared by all unwindkit packages.
var ErrCorrupt = errs.ErrCorrupt

// ErrNoSpace reports that a trace could not be stored because the memory
// limit ([Config.MaxPools]) was reached or [FlagNoAlloc] forbade a new pool.
var ErrNoSpace = errors.New("depot: no space for a new trace")

// ErrEmpty reports a trace with no frames left after filtering.
var ErrEmpty = errors.New("depot: empty trace")

// ErrNotFiltered reports a new trace saved with [FlagFiltered] that the
// depot's Filter would cut shorter: a frame before its last is one the
// filter cuts after.
var ErrNotFiltered = errors.New("depot: trace saved as filtered is not cut by the filter")

// ErrFlags reports flag bits that [Depot.SaveFlags] does not know.
var ErrFlags = errors.New("depot: unknown flag bits")

// ErrBadHandle reports a handle that names no stored trace: zero, forged,
// or stale (its record was evicted). Errors for a particular handle are
// *[HandleError] values that unwrap to ErrBadHandle.
var ErrBadHandle = errors.New("depot: invalid handle")

// HandleError describes why a handle was rejected.
type HandleError struct {
	// Handle is the rejected handle.
	Handle Handle
	// Reason says why: "zero handle", "no such pool", "not the start of a
	// record" or "stale generation".
	Reason string
}

// Error implements error.
func (e *HandleError) Error() string {
	return fmt.Sprintf("depot: invalid handle %v: %s", e.Handle, e.Reason)
}

// Unwrap returns [ErrBadHandle].
func (e *HandleError) Unwrap() error { return ErrBadHandle }
