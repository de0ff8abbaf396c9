#include "textflag.h"

// func getfp() unsafe.Pointer
//
// getfp returns the frame pointer of its caller. It is a leaf without a frame
// (NOFRAME, $0), so R29 still holds the caller's frame pointer. Go's arm64
// prologue stores the caller's R29 at SP-8 and points R29 there, so that, as
// on amd64, [fp] is the next frame pointer and [fp+8] (the saved LR at 0(SP))
// is the return address.
TEXT ·getfp(SB), NOSPLIT|NOFRAME, $0-8
	MOVD R29, ret+0(FP)
	RET

// func FrameAndPC() (start unsafe.Pointer, self uintptr)
//
// FrameAndPC returns its caller's frame pointer, as getfp does, and its own
// return address (LR: a leaf without a frame does not save it): a pc in
// the caller, just after the call.
TEXT ·FrameAndPC(SB), NOSPLIT|NOFRAME, $0-16
	MOVD R29, start+0(FP)
	MOVD R30, self+8(FP)
	RET
