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

	got, err := l.Auth(signed, sp, key, ptrauth.QARMA5, ptrauth.KeyIA) // AUTIASP
	fmt.Printf("auth     %#x %v\n", got, err)

	_, err = l.Auth(signed, sp+16, key, ptrauth.QARMA5, ptrauth.KeyIA) // wrong SP
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

func ExampleFromRegisters() {
	// TCR_EL1 of a Linux kernel with 48-bit VAs, 4 KiB pages and MTE
	// (TBI0; TBI1 with TBID1), and ID_AA64ISAR1_EL1 with APA = 5: QARMA5
	// with FEAT_FPACCOMBINE, as QEMU 8's "max" CPU reports.
	c, err := ptrauth.FromRegisters(ptrauth.Registers{
		TCR:   0x005000f5b5503510,
		ISAR1: 0x0011101101211052,
	})
	if err != nil {
		panic(err)
	}
	fmt.Println(c.Algorithm, c.Features)
	fmt.Printf("%+v %+v\n", c.Layout.Lower(), c.Layout.Upper())
	// A kernel data pointer keeps its tag, a kernel PC does not have one.
	fmt.Printf("%#x\n", c.Layout.StripData(0x5abf800008123450))
	fmt.Printf("%#x\n", c.Layout.Strip(0x5abf800008123450))
	// Output:
	// QARMA5 PAuth2|FPAC|FPACCombine
	// {VABits:48 TBI:true TBID:false} {VABits:48 TBI:true TBID:true}
	// 0x5aff800008123450
	// 0xffff800008123450
}

func ExampleMasks() {
	l := ptrauth.NewLayout(48, false)
	lrs := []uint64{0x51b7800008123450, 0x3d9b800008001234, 0x00000000aaaabbc0}
	m := l.InsnMasks() // hoisted: two registers for the whole loop
	for i, lr := range lrs {
		lrs[i] = m.Strip(lr)
	}
	fmt.Printf("%#x\n", lrs)
	// Output: [0xffff800008123450 0xffff800008001234 0xaaaabbc0]
}

func ExampleLayout_AuthCombined() {
	l := ptrauth.NewLayout(48, false).WithFeatures(ptrauth.PAuth2 | ptrauth.FPAC)
	key := ptrauth.Key{Hi: 1, Lo: 2}
	lr, sp := uint64(0xffff800008123450), uint64(0xffff80000a00fe30)
	signed, _ := l.AddPAC(lr, sp, key, ptrauth.QARMA5, ptrauth.KeyIA) // PACIASP

	// AUTIASP with the wrong SP faults under FPAC ...
	_, err := l.Auth(signed, sp+16, key, ptrauth.QARMA5, ptrauth.KeyIA)
	fmt.Println(err != nil)
	// ... but RETAA's authentication faults only with FPACCOMBINE: here the
	// return itself faults on the poisoned address.
	poisoned, err := l.AuthCombined(signed, sp+16, key, ptrauth.QARMA5, ptrauth.KeyIA)
	fmt.Println(err, poisoned != lr)
	// Output:
	// true
	// <nil> true
}
