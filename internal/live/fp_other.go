//go:build !amd64 && !arm64

package live

import (
	"runtime"
	"unsafe"

	"github.com/unwindkit/unwindkit/internal/errs"
)

// Supported reports whether this GOARCH keeps frame pointers, so that
// CallersFP works and Callers uses the frame-pointer walk.
const Supported = false

// CallersFP returns errs.ErrNotSupported: this GOARCH keeps no frame
// pointers.
func CallersFP(skip int, pc []uintptr) (int, error) {
	return 0, errs.ErrNotSupported
}

// Callers is runtime.Callers with skip 0 meaning the frame that called
// Callers. Without frame pointers it is runtime.Callers itself.
//
//go:noinline
func Callers(skip int, pc []uintptr) int {
	if skip < 0 {
		skip = 0
	}
	// Frame 0 is runtime.Callers, frame 1 is this function.
	return runtime.Callers(clampSkip(skip)+2, pc)
}

// callersSlow is Callers (tests use it on every GOARCH).
//
//go:noinline
func callersSlow(skip int, pc []uintptr) int {
	if skip < 0 {
		skip = 0
	}
	return runtime.Callers(clampSkip(skip)+2, pc)
}

// UncheckedFP returns errs.ErrNotSupported: this GOARCH keeps no frame
// pointers (see the amd64 and arm64 UncheckedFP, a benchmark baseline).
func UncheckedFP(skip int, pc []uintptr) (int, error) {
	return 0, errs.ErrNotSupported
}

// GounwindFP returns 0: this GOARCH keeps no frame pointers (see the
// amd64 and arm64 GounwindFP, a benchmark baseline).
func GounwindFP(skip int, pc []uintptr) int { return 0 }

// FrameAndPC, BoundaryKnown, FPLoop and CallersFPAt are unwind/live's
// CallersFP; without frame pointers it returns errs.ErrNotSupported
// (CallersFPAt).
func FrameAndPC() (unsafe.Pointer, uintptr) { return nil, 0 }

// BoundaryKnown reports true, so that CallersFP never runs FPLoop here.
func BoundaryKnown() bool { return true }

// CallersFPAt returns errs.ErrNotSupported.
func CallersFPAt(start unsafe.Pointer, self uintptr, skip int, pc []uintptr) (int, error) {
	return 0, errs.ErrNotSupported
}
