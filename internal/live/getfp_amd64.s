#include "textflag.h"

// func getfp() unsafe.Pointer
//
// getfp returns the frame pointer of its caller. It has no frame of its own
// (NOFRAME, $0), so BP still holds the caller's frame pointer: the address of
// the caller's saved-BP slot, with the caller's return address one word above.
TEXT ·getfp(SB), NOSPLIT|NOFRAME, $0-8
	MOVQ BP, ret+0(FP)
	RET
