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
