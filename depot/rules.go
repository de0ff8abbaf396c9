package depot

import "github.com/unwindkit/unwindkit/internal/errs"

// RuleRecordOverrunsPool is the CorruptError.Rule of a stored trace that
// runs past its pool (a plain string, the same in every unwindkit
// package).
const RuleRecordOverrunsPool = errs.RuleRecordOverrunsPool
