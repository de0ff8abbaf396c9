package depot

import "github.com/unwindkit/unwindkit/fault"

// RuleRecordOverrunsPool is the [CorruptError.Rule] of a stored trace that
// runs past its pool (a plain string: the value a caller compares; package
// fault's list, re-exported).
const RuleRecordOverrunsPool = fault.RuleRecordOverrunsPool

// CorruptError describes one piece of corruption: the rule that was
// broken ([RuleRecordOverrunsPool] for the depot's own errors), the handle
// (as Addr) where it was found, and detail. It is [fault.CorruptError],
// the one type of every unwindkit package, so errors.As with a
// *CorruptError matches every corruption error of unwindkit, whichever
// package found it, and errors.Is(err, [ErrCorrupt]) holds for it.
type CorruptError = fault.CorruptError
