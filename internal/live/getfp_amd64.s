#include "textflag.h"

// func getfp() unsafe.Pointer
//
// getfp returns the frame pointer of its caller. It has no frame of its own
// (NOFRAME, $0), so BP still holds the caller's frame pointer: the address of
// the caller's saved-BP slot, with the caller's return address one word above.
TEXT ·getfp(SB), NOSPLIT|NOFRAME, $0-8
	MOVQ BP, ret+0(FP)
	RET

// func FrameAndPC() (start unsafe.Pointer, self uintptr)
//
// FrameAndPC returns its caller's frame pointer, as getfp does, and its own
// return address: a pc in the caller, just after the call.
TEXT ·FrameAndPC(SB), NOSPLIT|NOFRAME, $0-16
	MOVQ BP, start+0(FP)
	MOVQ 0(SP), AX
	MOVQ AX, self+8(FP)
	RET
