package ptrauth

import (
	"errors"
	"fmt"
)

// ErrAuthFailed reports a failed pointer authentication on a core with
// FEAT_FPAC, where AUT* raises an exception instead of returning a
// poisoned pointer. Auth returns it wrapped in an *AuthError.
var ErrAuthFailed = errors.New("ptrauth: pointer authentication failed")

// AuthError describes one failed authentication. Unwrap returns
// ErrAuthFailed.
type AuthError struct {
	Ptr      uint64 // the signed pointer that was authenticated
	Modifier uint64 // the modifier (for AUTIASP, the stack pointer)
	Key      KeyID  // the key
	Result   uint64 // the poisoned pointer a core without FPAC would return
}

// Error implements error.
func (e *AuthError) Error() string {
	return fmt.Sprintf("ptrauth: pointer authentication failed: %#x with key %s, modifier %#x (poisoned %#x)",
		e.Ptr, e.Key, e.Modifier, e.Result)
}

// Unwrap returns ErrAuthFailed, so errors.Is(err, ErrAuthFailed) holds.
func (e *AuthError) Unwrap() error { return ErrAuthFailed }

const bit55 = uint64(1) << 55

// Sign adds a PAC to an instruction pointer, the Arm ARM's AddPAC as used
// by PACIA/PACIB/PACIASP: the PAC field is chosen by bit 55 of ptr (see
// PACMask), and the code is ComputePAC of the pointer with its extension
// bits made canonical.
//
// With TBI (and not TBID) the extension bits are 55:VABits and the top
// byte is kept; otherwise they are 63:VABits and the top byte is part of
// the field. If the extension bits of ptr are not all equal (a
// non-canonical pointer), the PAC is corrupted so that authentication
// fails: under PAuth1 its bit 54 (with TBI) or 62 (without) is inverted;
// under PAuth2 the PAC is XOR-ed with the pointer, which carries the bad
// bits into the field by itself. Bit 55 of the result is bit 55 of ptr with
// TBI and bit 63 of ptr without (they differ only for non-canonical ptr).
//
// The zero Layout has no PAC field: Sign returns ptr.
func (l Layout) Sign(ptr, modifier uint64, key Key, alg Algorithm) uint64 {
	h := ptr >> 55 & 1
	field := l.mask[h]
	if field == 0 {
		return ptr
	}
	ext := field | bit55 // the extension bits, 55:bot or 63:bot
	tbi := field>>63 == 0
	sel := ptr >> 63
	top := uint(62) // bit the PAuth1 corruption inverts
	if tbi {
		sel = h
		top = 54
	}
	pac := ComputePAC(ptr&^ext|ext&-sel, modifier, key, alg)
	if e := ptr & ext; e != 0 && e != ext && l.feat&PAuth2 == 0 {
		pac ^= 1 << top
	}
	if l.feat&PAuth2 != 0 {
		pac ^= ptr
	}
	return ptr&^ext | sel<<55 | pac&field
}

// Auth authenticates a signed instruction pointer, the Arm ARM's Auth as
// used by AUTIA/AUTIB/AUTIASP with key number k. On success it returns the
// stripped pointer (Strip(ptr)) and nil. On failure:
//
//   - PAuth1 (Features without PAuth2): the stripped pointer with an error
//     code in two of the field's bits, 0b01 for key A and 0b10 for key B, at
//     bits 54:53 with TBI and 62:61 without, so that a branch to it faults.
//   - PAuth2: ptr XOR the expected PAC over the field, that is the stripped
//     pointer with the bits where the expected and actual PAC differ
//     flipped, a non-canonical address.
//   - FPAC in addition: the same poisoned pointer together with an
//     *AuthError wrapping ErrAuthFailed (on hardware, an exception).
//
// Without FPAC a failure returns a nil error: as on hardware, only the
// poisoned pointer tells. The zero Layout has no PAC field: Auth returns
// ptr, nil.
func (l Layout) Auth(ptr, modifier uint64, key Key, alg Algorithm, k KeyID) (uint64, error) {
	h := ptr >> 55 & 1
	field := l.mask[h]
	if field == 0 {
		return ptr, nil
	}
	orig := ptr&^field | field&-h
	pac := ComputePAC(orig, modifier, key, alg)
	var res uint64
	if l.feat&PAuth2 != 0 {
		res = ptr ^ pac&field
		if res == orig {
			return res, nil
		}
	} else {
		if (pac^ptr)&field == 0 {
			return orig, nil
		}
		code := uint64(1) // key A: 0b01
		if k != KeyA {
			code = 2 // key B: 0b10
		}
		pos := uint(61)
		if field>>63 == 0 {
			pos = 53
		}
		res = orig&^(3<<pos) | code<<pos
	}
	if l.feat&FPAC != 0 {
		return res, &AuthError{Ptr: ptr, Modifier: modifier, Key: k, Result: res}
	}
	return res, nil
}

// StripKernelStyle strips a PAC the way the Linux kernel's
// ptrauth_strip_kernel_insn_pac/ptrauth_strip_user_insn_pac do
// (arch/arm64/include/asm/pointer_auth.h): for a kernel address (bit 55
// set) it sets bits 63:VABits, for a user address it clears bits
// 54:VABits, with VABits taken from the pointer's half.
//
// It equals Strip on every pointer when the lower half uses TBI for
// instruction addresses and the upper half does not (the Linux
// configuration: TBI0 set; TBI1 clear, or set together with TBID1), and on
// every canonical pointer (Strip(p) == p) unless the upper half has TBI for
// instruction addresses, where the kernel's rule overwrites a tag byte.
// Otherwise the two differ only in the top byte, which Strip treats by the
// layout and this function by the kernel's fixed rule.
// The zero Layout returns ptr unchanged.
func (l Layout) StripKernelStyle(ptr uint64) uint64 {
	if ptr&bit55 != 0 {
		if l.half[1].VABits == 0 {
			return ptr
		}
		return ptr | ^uint64(0)<<l.half[1].VABits
	}
	if l.half[0].VABits == 0 {
		return ptr
	}
	return ptr &^ (bit55 - 1 - (uint64(1)<<l.half[0].VABits - 1))
}
