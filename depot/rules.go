package depot

import "github.com/unwindkit/unwindkit/internal/errs"

// RuleRecordOverrunsPool is the [CorruptError.Rule] of a stored trace that
// runs past its pool (a plain string: the value a caller compares).
const RuleRecordOverrunsPool = "record overruns its pool"

// CorruptError describes one piece of corruption: the rule that was
// broken ([RuleRecordOverrunsPool] for the depot's own errors), the handle
// (as Addr) where it was found, and detail. errors.As with a
// *CorruptError matches every corruption error of unwindkit, whichever
// package found it, and errors.Is(err, [ErrCorrupt]) holds for it.
type CorruptError struct {
	// Rule is the broken rule: [RuleRecordOverrunsPool] for the depot's
	// errors (for errors from other unwindkit packages, one of theirs).
	Rule string
	// Addr is where the corruption was found: for the depot, the handle.
	Addr uint64
	// Detail is optional extra context.
	Detail string
}

// Error implements error, in the same words as every unwindkit package.
func (e *CorruptError) Error() string {
	return (&errs.CorruptError{Rule: e.Rule, Addr: e.Addr, Detail: e.Detail}).Error()
}

// Unwrap returns [ErrCorrupt].
func (e *CorruptError) Unwrap() error { return ErrCorrupt }

func init() { errs.RegisterAs[CorruptError]() }
