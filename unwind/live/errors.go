package live

import "github.com/unwindkit/unwindkit/internal/errs"

// Errors: unwindkit's shared sentinels, the same values in every package.
// A broken frame-pointer chain is an error wrapping ErrCorrupt that says
// which rule broke and where; errors.As fills an unwind.CorruptError
// (package github.com/unwindkit/unwindkit/unwind) from it.
var (
	// ErrNotSupported: this GOARCH keeps no frame pointers (CallersFP).
	// errors.Is(err, unix.ENOSYS) is true.
	ErrNotSupported = errs.ErrNotSupported
	// ErrCorrupt is wrapped by the error CallersFP returns for a broken
	// frame-pointer chain.
	ErrCorrupt = errs.ErrCorrupt
)
