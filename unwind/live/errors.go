package live

import "github.com/unwindkit/unwindkit/internal/errs"

// Errors: unwindkit's shared sentinels, the same values in every package.
var (
	// ErrNotSupported: this GOARCH keeps no frame pointers (CallersFP).
	// errors.Is(err, unix.ENOSYS) is true.
	ErrNotSupported = errs.ErrNotSupported
	// ErrCorrupt is wrapped by every *CorruptError.
	ErrCorrupt = errs.ErrCorrupt
)

// CorruptError describes a broken frame-pointer chain: the rule, the
// address, detail.
type CorruptError = errs.CorruptError
