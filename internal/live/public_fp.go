//go:build amd64 || arm64

package live

import "unsafe"

// The pieces of unwind/live.CallersFP, which walks from its own frame
// instead of calling CallersFP (one call less for its callers): a caller
// of that function asks for skip 1, itself, in the common case, which is
// the walk from CallersFP's own frame record with nothing to skip. Its
// body is
//
//	start, self := live.FrameAndPC()
//	if skip == 1 && len(pc) != 0 && !live.BoundaryKnown() {
//		if n, ok := live.FPLoop(start, start, pc); ok { // inlined
//			return n, nil
//		}
//	}
//	return live.CallersFPAt(start, self, skip, pc)
//
// and it must be marked //go:noinline, //go:norace and //go:nocheckptr,
// as CallersFP is. ("Stack moves" in walk.go holds there too: start is an
// unsafe.Pointer, self a code address, and FPLoop computes its bound from
// start right before its loop.)

// FrameAndPC returns the frame pointer of its caller, the first record of
// the walk, and a pc in its caller (its own return address), frame 0 of
// unwind/live.CallersFP. It is implemented in assembly
// (getfp_$GOARCH.s), like getfp, without a frame of its own.
func FrameAndPC() (start unsafe.Pointer, self uintptr)

// BoundaryKnown reports whether a walk has learned the cgo boundary
// (stopPC): then only CallersFPAt stops at it.
func BoundaryKnown() bool { return stopPC.Load() != 0 }

// CallersFPAt is unwind/live.CallersFP's general case: skip 0 is self, the
// pc in that function, then the walk from its frame record start, whose
// first record is skip 1.
func CallersFPAt(start unsafe.Pointer, self uintptr, skip int, pc []uintptr) (int, error) {
	if skip > 0 {
		return walkFP(start, skip-1, pc)
	}
	if len(pc) == 0 {
		return 0, nil
	}
	pc[0] = self
	n, err := walkFP(start, 0, pc[1:])
	return n + 1, err
}
