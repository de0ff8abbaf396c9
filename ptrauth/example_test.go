package ptrauth_test

import (
	"errors"
	"fmt"

	"github.com/unwindkit/unwindkit/ptrauth"
)

func ExampleLayout_Strip() {
	// A 48-bit kernel with TBI for user space (TBI0) and none for kernel
	// instruction addresses, as Linux configures it.
	l, err := ptrauth.NewLayoutHalves(
		ptrauth.Half{VABits: 48, TBI: true},
		ptrauth.Half{VABits: 48},
		ptrauth.PAuth2)
	if err != nil {
		panic(err)
	}
	// A signed kernel return address: PAC in bits 63:56 and 54:48.
	fmt.Printf("%#x\n", l.Strip(0x3d9b800008123450))
	// A signed user return address: the tag byte is kept.
	fmt.Printf("%#x\n", l.Strip(0x0a4f0000aaaabbc0))
	// Output:
	// 0xffff800008123450
	// 0xa000000aaaabbc0
}

func ExampleLayout_Sign() {
	l := ptrauth.NewLayout(48, false).WithFeatures(ptrauth.PAuth2 | ptrauth.FPAC)
	key := ptrauth.Key{Hi: 0x84be85ce9804e94b, Lo: 0xec2802d4e0a488e9}
	lr, sp := uint64(0xffff800008123450), uint64(0xffff80000a00fe30)

	signed := l.Sign(lr, sp, key, ptrauth.QARMA5) // PACIASP
	fmt.Printf("signed   %#x\n", signed)
	fmt.Printf("stripped %#x\n", l.Strip(signed)) // XPACLRI

	got, err := l.Auth(signed, sp, key, ptrauth.QARMA5, ptrauth.KeyA) // AUTIASP
	fmt.Printf("auth     %#x %v\n", got, err)

	_, err = l.Auth(signed, sp+16, key, ptrauth.QARMA5, ptrauth.KeyA) // wrong SP
	fmt.Println(errors.Is(err, ptrauth.ErrAuthFailed))
	// Output:
	// signed   0x51b7800008123450
	// stripped 0xffff800008123450
	// auth     0xffff800008123450 <nil>
	// true
}

func ExampleComputePAC() {
	// The QARMA paper's σ2, r = 5 vector is Arm's QARMA5 ComputePAC.
	key := ptrauth.Key{Hi: 0x84be85ce9804e94b, Lo: 0xec2802d4e0a488e9}
	fmt.Printf("%#x\n", ptrauth.ComputePAC(0xfb623599da6e8127, 0x477d469dec0b8762, key, ptrauth.QARMA5))
	// Output: 0xc003b93999b33765
}
