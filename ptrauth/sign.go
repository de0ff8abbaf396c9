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
	Key      KeyID  // the key; Key.Data() is the syndrome's data bit
	Combined bool   // part of a combined instruction (RETAA, BRAA, LDRAA)
	Result   uint64 // the poisoned pointer a core without FPAC would return
}

// Error implements error.
func (e *AuthError) Error() string {
	kind := ""
	if e.Combined {
		kind = " (combined)"
	}
	return fmt.Sprintf("ptrauth: pointer authentication failed%s: %#x with key %s, modifier %#x (poisoned %#x)",
		kind, e.Ptr, e.Key, e.Modifier, e.Result)
}

// Unwrap returns ErrAuthFailed, so errors.Is(err, ErrAuthFailed) holds.
func (e *AuthError) Unwrap() error { return ErrAuthFailed }

const bit55 = uint64(1) << 55

// Sign adds a PAC to an instruction pointer with key IA or IB (PACIA,
// PACIB, PACIASP): [Layout.AddPAC] for an instruction key, without the
// error. Sign never panics: if alg is not valid it returns ptr unsigned
// (as a core with the key disabled would); AddPAC reports that error.
//
// The zero Layout has no PAC field: Sign returns ptr.
func (l Layout) Sign(ptr, modifier uint64, key Key, alg Algorithm) uint64 {
	if alg.Valid() != nil {
		return ptr
	}
	return l.addPAC(ptr, modifier, key, alg, false)
}

// AddPAC is the Arm ARM's AddPAC: it signs ptr with modifier under key
// (the value of the key register k names) and returns the signed pointer.
// Keys IA and IB sign instruction pointers, DA and DB data pointers (see
// [KeyID]); the kind decides which bits are the PAC field (TBID limits
// TBI to data).
//
// The code is ComputePAC of the pointer with good extension bits. Which
// bit those copy (the selector, written to bit 55 of the result) follows
// the Arm ARM for a regime with two VA ranges: bit 55 of ptr if either
// half ignores the top byte for this kind of access (for instruction
// pointers TBI set and TBID clear), bit 63 only if neither does; the
// selector's half gives the field's low end. If ptr's extension bits
// (63 or, with TBI in ptr's half, 55 down to the field's low end) are not
// all equal, the PAC is corrupted so that authentication fails: PAuth1
// inverts its bit 62 (54 with TBI), [EPAC] zeroes it, [PAuth2] XORs the
// pointer in, which carries the bad bits into the field by itself.
//
// QEMU (7.2 and later) takes the selector from bit 63 whenever ptr's own
// half has no TBI for the access; that differs from the Arm rule only for
// non-canonical pointers in layouts whose halves differ in TBI or TBID.
//
// AddPAC returns an error wrapping [ErrInvalid] for an unknown algorithm
// or key, or for KeyGA. The zero Layout has no PAC field: AddPAC returns
// ptr.
func (l Layout) AddPAC(ptr, modifier uint64, key Key, alg Algorithm, k KeyID) (uint64, error) {
	if err := alg.Valid(); err != nil {
		return ptr, err
	}
	if err := checkPointerKey(k); err != nil {
		return ptr, err
	}
	return l.addPAC(ptr, modifier, key, alg, k.Data()), nil
}

// addPAC is AddPAC for a valid algorithm.
func (l Layout) addPAC(ptr, modifier uint64, key Key, alg Algorithm, data bool) uint64 {
	if l.half[0].VABits == 0 {
		return ptr // the zero Layout
	}
	h := ptr >> 55 & 1
	tbi := l.half[h].tbi(data) // EffectiveTBI: ptr's own half
	// selbit: bit 55 if either half ignores the top byte for this access.
	sel := ptr >> 63
	if l.half[0].tbi(data) || l.half[1].tbi(data) {
		sel = h
	}
	bottom := uint(l.half[sel].VABits) // CalculateBottomPACBit(selbit)
	top := uint(63)
	if tbi {
		top = 55
	}
	ext := ^uint64(0)>>(63-top) - (uint64(1)<<bottom - 1) // bits top:bottom
	pac := ComputePAC(ptr&^ext|ext&-sel, modifier, key, alg)
	if e := ptr & ext; e != 0 && e != ext {
		switch {
		case l.feat&PAuth2 != 0: // the XOR below carries the bad bits
		case l.feat&EPAC != 0:
			pac = 0
		default:
			pac ^= 1 << (top - 1)
		}
	}
	if l.feat&PAuth2 != 0 {
		pac ^= ptr
	}
	field := fieldMask(int(bottom), tbi)
	return ptr&^(field|bit55) | sel<<55 | pac&field
}

// Auth authenticates a signed pointer, the Arm ARM's Auth as used by a
// stand-alone AUTIA, AUTIB, AUTDA, AUTDB or AUTIASP with key k (IA, IB,
// DA or DB; the kind picks the PAC field as in [Layout.AddPAC]). On
// success it returns the stripped pointer (Strip or StripData of ptr) and
// nil. On failure:
//
//   - PAuth1 and EPAC: the stripped pointer with an error code in two of
//     the field's bits, 0b01 for key A and 0b10 for key B, at bits 54:53
//     with TBI and 62:61 without, so that a branch to it faults.
//   - PAuth2: ptr XOR the expected PAC over the field, that is the
//     stripped pointer with the bits where the expected and actual PAC
//     differ flipped, a non-canonical address.
//   - FPAC in addition: the same poisoned pointer together with an
//     *AuthError wrapping [ErrAuthFailed] (on hardware, an exception).
//
// Without FPAC a failure returns a nil error: as on hardware, only the
// poisoned pointer tells. An unknown algorithm or key, or KeyGA, is an
// error wrapping [ErrInvalid] on every layout. The zero Layout has no PAC
// field: Auth returns ptr, nil.
func (l Layout) Auth(ptr, modifier uint64, key Key, alg Algorithm, k KeyID) (uint64, error) {
	return l.auth(ptr, modifier, key, alg, k, false)
}

// AuthCombined is [Layout.Auth] as part of a combined instruction that
// authenticates and then branches or loads (RETAA, RETAB, BRAA, BLRAB,
// ERETAA, LDRAA, LDRAB). The result is the same, but a failure is an
// error only with [FPACCombine]: with FPAC alone the poisoned pointer is
// returned with a nil error, and the branch or load faults on it.
func (l Layout) AuthCombined(ptr, modifier uint64, key Key, alg Algorithm, k KeyID) (uint64, error) {
	return l.auth(ptr, modifier, key, alg, k, true)
}

func (l Layout) auth(ptr, modifier uint64, key Key, alg Algorithm, k KeyID, combined bool) (uint64, error) {
	if err := alg.Valid(); err != nil {
		return ptr, err
	}
	if err := checkPointerKey(k); err != nil {
		return ptr, err
	}
	if l.half[0].VABits == 0 {
		return ptr, nil // the zero Layout
	}
	m := l.insn
	if k.Data() {
		m = l.data
	}
	h := ptr >> 55 & 1
	field := m.Field(h != 0)
	orig := ptr&^field | field&-h // Strip: the field := copies of bit 55
	pac := ComputePAC(orig, modifier, key, alg)
	var res uint64
	if l.feat&PAuth2 != 0 {
		res = ptr ^ pac&field
		if res == orig {
			return res, nil
		}
		if l.feat&FPACCombine == 0 && (l.feat&FPAC == 0 || combined) {
			return res, nil
		}
	} else {
		if (pac^ptr)&field == 0 {
			return orig, nil
		}
		n := k.number()
		code := n<<1 | (n ^ 1) // key_number:NOT(key_number)
		pos := uint(61)
		if field>>63 == 0 { // TBI: the top byte is not field
			pos = 53
		}
		return orig&^(3<<pos) | code<<pos, nil
	}
	return res, &AuthError{Ptr: ptr, Modifier: modifier, Key: k, Combined: combined, Result: res}
}

// PACGA is the generic authentication code of x under modifier y and the
// generic key (APGAKey): ComputePAC(x, y, key) with its low 32 bits
// cleared, as PACGA writes it. An unknown algorithm is an error wrapping
// [ErrInvalid].
func PACGA(x, y uint64, key Key, alg Algorithm) (uint64, error) {
	if err := alg.Valid(); err != nil {
		return 0, err
	}
	return ComputePAC(x, y, key, alg) &^ 0xffffffff, nil
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
