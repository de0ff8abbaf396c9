package ptrauth

import (
	"errors"
	"testing"
)

var fuzzLayouts = allLayouts()

// pick decodes a fuzz selector into a layout and an algorithm.
func pick(sel uint16) (Layout, Algorithm) {
	l := fuzzLayouts[int(sel)%len(fuzzLayouts)]
	return l, algorithms[int(sel)/len(fuzzLayouts)%len(algorithms)]
}

// FuzzSignAuth: for a canonical pointer in every layout, Strip(Sign(p)) ==
// p and Auth(Sign(p)) == p; a wrong key or modifier fails exactly as the
// layout's features say (PAuth1 error code, PAuth2 XOR, FPAC error).
func FuzzSignAuth(f *testing.F) {
	f.Add(uint64(0x0000aaaabbbbccc0), uint64(0x0000fffff0001230), uint64(vecW0), uint64(vecK0), uint16(0), uint8(0))
	f.Add(uint64(0xffff800012345678), uint64(0), uint64(0), uint64(0), uint16(77), uint8(63))
	f.Add(uint64(0x5a7f0000deadbeef), ^uint64(0), ^uint64(0), uint64(1), uint16(500), uint8(130))
	f.Fuzz(func(t *testing.T, raw, mod, hi, lo uint64, sel uint16, flip uint8) {
		l, alg := pick(sel)
		key := Key{Hi: hi, Lo: lo}
		p := l.Strip(raw)
		s := l.Sign(p, mod, key, alg)
		if got := l.Strip(s); got != p {
			t.Fatalf("Strip(Sign(%#x)) = %#x", p, got)
		}
		k := KeyID(flip >> 7)
		if got, err := l.Auth(s, mod, key, alg, k); got != p || err != nil {
			t.Fatalf("Auth(Sign(%#x)) = %#x, %v", p, got, err)
		}
		// A wrong modifier or key (bit flip&63 of the modifier, or of a key
		// half).
		badMod, badKey := mod, key
		switch flip >> 6 & 1 {
		case 0:
			badMod ^= 1 << (flip & 63)
		default:
			if flip&1 == 0 {
				badKey.Lo ^= 1 << (flip & 63)
			} else {
				badKey.Hi ^= 1 << (flip & 63)
			}
		}
		field := l.PACMask(p&bit55 != 0)
		diff := (ComputePAC(p, mod, key, alg) ^ ComputePAC(p, badMod, badKey, alg)) & field
		got, err := l.Auth(s, badMod, badKey, alg, k)
		if diff == 0 {
			if got != p || err != nil {
				t.Fatalf("colliding PAC: Auth = %#x, %v, want %#x", got, err, p)
			}
			return
		}
		if got == p {
			t.Fatalf("wrong tweakey authenticated %#x", s)
		}
		if want := wantFailed(l, s, p, ComputePAC(p, badMod, badKey, alg), k); got != want {
			t.Fatalf("failed Auth = %#x, want %#x", got, want)
		}
		if l.Features()&PAuth2 != 0 && got != p^diff {
			t.Fatalf("PAuth2 failure %#x is not p XOR PAC difference %#x", got, p^diff)
		}
		if fpac := l.Features()&FPAC != 0; fpac != errors.Is(err, ErrAuthFailed) {
			t.Fatalf("FPAC=%v but err = %v", fpac, err)
		}
	})
}

// FuzzAnyPointer feeds arbitrary (also non-canonical) pointers to Sign,
// Auth, Strip and StripKernelStyle: nothing panics, the bits below the
// PAC field always survive, and Strip's result is canonical.
func FuzzAnyPointer(f *testing.F) {
	f.Add(uint64(0x8000123456789ab0), uint64(1), uint64(2), uint64(3), uint16(1))
	f.Add(uint64(0x00ff00000000ffff), uint64(0), uint64(0), uint64(0), uint16(400))
	f.Fuzz(func(t *testing.T, ptr, mod, hi, lo uint64, sel uint16) {
		l, alg := pick(sel)
		key := Key{Hi: hi, Lo: lo}
		va := l.Lower().VABits
		if ptr&bit55 != 0 {
			va = l.Upper().VABits
		}
		low := uint64(1)<<va - 1 // the address bits below the PAC field
		st := l.Strip(ptr)
		if l.Strip(st) != st || st&low != ptr&low || st&bit55 != ptr&bit55 {
			t.Fatalf("Strip(%#x) = %#x", ptr, st)
		}
		_ = l.StripKernelStyle(ptr)
		s := l.Sign(ptr, mod, key, alg)
		if s&low != ptr&low {
			t.Fatalf("Sign(%#x) = %#x changed address bits", ptr, s)
		}
		a, err := l.Auth(ptr, mod, key, alg, KeyA)
		if a&low != ptr&low {
			t.Fatalf("Auth(%#x) = %#x changed address bits", ptr, a)
		}
		if err != nil && (l.Features()&FPAC == 0 || !errors.Is(err, ErrAuthFailed)) {
			t.Fatalf("Auth error %v with features %v", err, l.Features())
		}
		if err == nil && a != l.Strip(a) && l.Features()&PAuth2 == 0 {
			// PAuth1 success returns a canonical pointer; failure an error
			// code, which is never canonical.
			if a != (l.Strip(a)&^(3<<53)|1<<53) && a != (l.Strip(a)&^(3<<61)|1<<61) {
				t.Fatalf("PAuth1 Auth(%#x) = %#x is neither canonical nor poisoned", ptr, a)
			}
		}
	})
}

// FuzzComputePAC: the table-driven ciphers agree with the reference.
func FuzzComputePAC(f *testing.F) {
	f.Add(uint64(vecP), uint64(vecT), uint64(vecW0), uint64(vecK0))
	f.Add(uint64(0), uint64(0), uint64(0), uint64(0))
	f.Fuzz(func(t *testing.T, data, mod, hi, lo uint64) {
		k := Key{Hi: hi, Lo: lo}
		if got, want := ComputePAC(data, mod, k, QARMA5), QARMA64(data, mod, hi, lo, 2, 5); got != want {
			t.Fatalf("QARMA5 = %#x, reference %#x", got, want)
		}
		if got, want := ComputePAC(data, mod, k, QARMA3), QARMA64(data, mod, hi, lo, 1, 3); got != want {
			t.Fatalf("QARMA3 = %#x, reference %#x", got, want)
		}
	})
}
