package ptrauth

import (
	"errors"
	"math/rand/v2"
	"testing"
)

// This file is an independent reading of the Arm ARM's pseudocode
// (aarch64/functions/pac: AddPAC, Auth, Strip, CalculateBottomPACBit,
// EffectiveTBI) for the EL1&0 regime, written bit range by bit range the
// way the pseudocode is, so that the package's mask arithmetic is checked
// against it rather than against itself.

// bitsRange returns the mask of bits hi:lo (inclusive), hi >= lo.
func bitsRange(hi, lo int) uint64 {
	if hi < lo {
		return 0
	}
	m := ^uint64(0) >> (63 - hi)
	return m &^ (uint64(1)<<lo - 1)
}

func bit(x uint64, n int) uint64 { return x >> n & 1 }

// replicate returns 64 copies of b (0 or 1).
func replicate(b uint64) uint64 { return -b }

// refEffectiveTBI is EffectiveTBI(address, IsInstr, EL1): TBIn of the
// half that address<55> selects, and for instruction fetches only when
// TBIDn is 0.
func refEffectiveTBI(l Layout, ptr uint64, data bool) bool {
	h := l.half[bit(ptr, 55)]
	return h.TBI && (data || !h.TBID)
}

// refSelBit is AddPAC's selbit for a regime with two VA ranges:
// ptr<55> when either half has TBI for this kind of access, else ptr<63>.
func refSelBit(l Layout, ptr uint64, data bool) uint64 {
	lo, up := l.half[0], l.half[1]
	var either bool
	if data {
		either = lo.TBI || up.TBI
	} else {
		either = (up.TBI && !up.TBID) || (lo.TBI && !lo.TBID)
	}
	if either {
		return bit(ptr, 55)
	}
	return bit(ptr, 63)
}

// refBottomPACBit is CalculateBottomPACBit(top_bit) for an in-range TnSZ.
func refBottomPACBit(l Layout, sel uint64) int { return l.half[sel].VABits }

// refAddPAC is AddPAC(ptr, modifier, K, data).
func refAddPAC(l Layout, ptr, modifier uint64, key Key, alg Algorithm, data bool) uint64 {
	tbi := refEffectiveTBI(l, ptr, data)
	topBit := 63
	if tbi {
		topBit = 55
	}
	sel := refSelBit(l, ptr, data)
	bottom := refBottomPACBit(l, sel)
	ext := replicate(sel)
	var extPtr uint64
	if tbi {
		extPtr = ptr&bitsRange(63, 56) | ext&bitsRange(55, bottom) | ptr&bitsRange(bottom-1, 0)
	} else {
		extPtr = ext&bitsRange(63, bottom) | ptr&bitsRange(bottom-1, 0)
	}
	pac := ComputePAC(extPtr, modifier, key, alg)
	f := l.Features()
	if e := ptr & bitsRange(topBit, bottom); e != 0 && e != bitsRange(topBit, bottom) {
		switch {
		case f&PAuth2 != 0: // no action
		case f&EPAC != 0:
			pac = 0
		default:
			pac ^= 1 << (topBit - 1)
		}
	}
	var result uint64
	if f&PAuth2 == 0 {
		if tbi {
			result = ptr&bitsRange(63, 56) | sel<<55 | pac&bitsRange(54, bottom) | ptr&bitsRange(bottom-1, 0)
		} else {
			result = pac&bitsRange(63, 56) | sel<<55 | pac&bitsRange(54, bottom) | ptr&bitsRange(bottom-1, 0)
		}
	} else {
		if tbi {
			result = ptr&bitsRange(63, 56) | sel<<55 | (ptr^pac)&bitsRange(54, bottom) | ptr&bitsRange(bottom-1, 0)
		} else {
			result = (ptr^pac)&bitsRange(63, 56) | sel<<55 | (ptr^pac)&bitsRange(54, bottom) | ptr&bitsRange(bottom-1, 0)
		}
	}
	return result
}

// TestAddPACExtensionBitArm: the Arm ARM's AddPAC takes the extension
// (selector) bit from ptr<55> whenever either half has TBI for the kind of
// access (for instruction pointers: TBI set and TBID clear), and from
// ptr<63> only when neither does. QEMU 7.2 uses ptr<63> whenever the
// pointer's own half has no instruction TBI. The two differ on a
// non-canonical pointer in a layout whose halves differ in TBI/TBID.
func TestAddPACExtensionBitArm(t *testing.T) {
	key := testKey
	const mod = 0xffff80000a00fe30
	tests := []struct {
		name         string
		lower, upper Half
		f            Features
		ptr          uint64
	}{
		// Linux: TBI0 for user space, no TBI for kernel PCs. A pointer with
		// bit 55 set (upper half, no TBI) and bit 63 clear.
		{"tbi0/bit55set", Half{VABits: 48, TBI: true}, Half{VABits: 48}, 0, 0x0080_ffff_0812_3450},
		{"tbi0/bit55set/pauth2", Half{VABits: 48, TBI: true}, Half{VABits: 48}, PAuth2, 0x0080_ffff_0812_3450},
		// Linux with MTE: TBI1 and TBID1, so the upper half has TBI for data
		// only; the lower half's TBI0 still makes selbit ptr<55>.
		{"tbi0+tbid1/bit55set", Half{VABits: 48, TBI: true}, Half{VABits: 48, TBI: true, TBID: true}, 0, 0x0080_ffff_0812_3450},
		// The mirror case: bit 55 clear (lower half without TBI), bit 63 set,
		// the upper half with instruction TBI.
		{"tbi1/bit63set", Half{VABits: 39}, Half{VABits: 48, TBI: true}, 0, 0x8000_0012_3456_7890},
		{"tbi1/bit63set/pauth2", Half{VABits: 39}, Half{VABits: 48, TBI: true}, PAuth2, 0x8000_0012_3456_7890},
	}
	for _, tt := range tests {
		l, err := NewLayoutHalves(tt.lower, tt.upper, tt.f)
		if err != nil {
			t.Fatal(err)
		}
		got := l.Sign(tt.ptr, mod, key, QARMA5)
		want := refAddPAC(l, tt.ptr, mod, key, QARMA5, false)
		if got != want {
			t.Errorf("%s: Sign(%#x) = %#x, Arm AddPAC gives %#x", tt.name, tt.ptr, got, want)
		}
		// Written out for the first case without the reference: selbit is
		// ptr<55> = 1, the field is 63:56 and 54:48, the PAC is computed on
		// ptr with bits 63:48 set, and PAuth1 inverts PAC<62>.
		if tt.name == "tbi0/bit55set" {
			pac := ComputePAC(0xffff_ffff_0812_3450, mod, key, QARMA5) ^ 1<<62
			w := pac&0xff7f_0000_0000_0000 | 1<<55 | 0x0000_ffff_0812_3450
			if got != w {
				t.Errorf("%s: Sign(%#x) = %#x, want %#x", tt.name, tt.ptr, got, w)
			}
		}
	}
}

// refStrip is Strip(A, data): the PAC field of A's own half (selected by
// A<55>, top byte included unless EffectiveTBI) becomes copies of A<55>.
func refStrip(l Layout, a uint64, data bool) uint64 {
	if l.half[0].VABits == 0 {
		return a
	}
	tbi := refEffectiveTBI(l, a, data)
	bottom := refBottomPACBit(l, bit(a, 55))
	ext := replicate(bit(a, 55))
	if tbi {
		return a&bitsRange(63, 56) | ext&bitsRange(55, bottom) | a&bitsRange(bottom-1, 0)
	}
	return ext&bitsRange(63, bottom) | a&bitsRange(bottom-1, 0)
}

// refAuth is Auth(ptr, modifier, K, data, key_number, is_combined); fault
// reports TakeFPACException.
func refAuth(l Layout, ptr, modifier uint64, key Key, alg Algorithm, data bool, keyNumber uint64, combined bool) (result uint64, fault bool) {
	tbi := refEffectiveTBI(l, ptr, data)
	bottom := refBottomPACBit(l, bit(ptr, 55))
	orig := refStrip(l, ptr, data)
	pac := ComputePAC(orig, modifier, key, alg)
	f := l.Features()
	errorCode := keyNumber<<1 | (keyNumber ^ 1)
	fpac := f&FPACCombine != 0 || (f&FPAC != 0 && !combined)
	if tbi {
		if f&PAuth2 == 0 {
			if pac&bitsRange(54, bottom) == ptr&bitsRange(54, bottom) {
				return orig, false
			}
			return orig&bitsRange(63, 55) | errorCode<<53 | orig&bitsRange(52, 0), false
		}
		result = ptr ^ pac&bitsRange(54, bottom)
		if fpac && result&bitsRange(54, bottom) != replicate(bit(result, 55))&bitsRange(54, bottom) {
			return result, true
		}
		return result, false
	}
	if f&PAuth2 == 0 {
		if pac&bitsRange(54, bottom) == ptr&bitsRange(54, bottom) && pac&bitsRange(63, 56) == ptr&bitsRange(63, 56) {
			return orig, false
		}
		return orig&bitsRange(63, 63) | errorCode<<61 | orig&bitsRange(60, 0), false
	}
	result = ptr ^ pac&bitsRange(54, bottom) ^ pac&bitsRange(63, 56)
	m := bitsRange(63, bottom) &^ bit55
	if fpac && result&m != replicate(bit(result, 55))&m {
		return result, true
	}
	return result, false
}

// pointerKeys are the keys that sign pointers.
var pointerKeys = []KeyID{KeyIA, KeyIB, KeyDA, KeyDB}

// TestAgainstArmPseudocode compares AddPAC, Auth, AuthCombined, Strip and
// StripData with the pseudocode above on every layout, algorithm and key,
// for canonical, signed, tampered and arbitrary pointers.
func TestAgainstArmPseudocode(t *testing.T) {
	r := rand.New(rand.NewPCG(21, 22))
	faults := map[bool]int{}
	for _, l := range allLayouts() {
		for _, alg := range algorithms {
			for _, k := range pointerKeys {
				data := k.Data()
				for i := range 12 {
					mod := r.Uint64()
					var p uint64
					switch i % 3 {
					case 0: // arbitrary bits
						p = r.Uint64()
					case 1: // canonical for this kind
						p = refStrip(l, r.Uint64(), data)
					case 2: // canonical with one bit flipped above bit 47
						p = refStrip(l, r.Uint64(), data) ^ 1<<(48+r.IntN(16))
					}
					if got, want := l.StripData(p), refStrip(l, p, true); got != want {
						t.Fatalf("%+v: StripData(%#x) = %#x, Arm %#x", l, p, got, want)
					}
					if got, want := l.Strip(p), refStrip(l, p, false); got != want {
						t.Fatalf("%+v: Strip(%#x) = %#x, Arm %#x", l, p, got, want)
					}
					s, err := l.AddPAC(p, mod, testKey, alg, k)
					if want := refAddPAC(l, p, mod, testKey, alg, data); s != want || err != nil {
						t.Fatalf("%+v %v %v: AddPAC(%#x) = %#x, %v; Arm %#x", l, alg, k, p, s, err, want)
					}
					// Authenticate the signed pointer, and a tampered copy.
					for _, in := range []uint64{s, s ^ 1<<(56+r.IntN(8)), s ^ 1<<(52+r.IntN(3))} {
						for _, combined := range []bool{false, true} {
							var got uint64
							if combined {
								got, err = l.AuthCombined(in, mod, testKey, alg, k)
							} else {
								got, err = l.Auth(in, mod, testKey, alg, k)
							}
							want, fault := refAuth(l, in, mod, testKey, alg, data, k.number(), combined)
							if got != want || (err != nil) != fault {
								t.Fatalf("%+v %v %v combined=%v: Auth(%#x) = %#x, %v; Arm %#x, fault %v",
									l, alg, k, combined, in, got, err, want, fault)
							}
							var ae *AuthError
							if fault && (!errors.As(err, &ae) || ae.Key != k || ae.Combined != combined || ae.Result != got || ae.Ptr != in) {
								t.Fatalf("%+v: fault reported as %v", l, err)
							}
							faults[fault]++
						}
					}
				}
			}
		}
	}
	if faults[true] == 0 || faults[false] == 0 {
		t.Fatalf("faults %v: both outcomes must occur", faults)
	}
}
