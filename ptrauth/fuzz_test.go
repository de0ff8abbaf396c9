package ptrauth

import (
	"errors"
	"syscall"
	"testing"
)

var fuzzLayouts = allLayouts()

// pick decodes a fuzz selector into a layout and an algorithm.
func pick(sel uint16) (Layout, Algorithm) {
	l := fuzzLayouts[int(sel)%len(fuzzLayouts)]
	return l, algorithms[int(sel)/len(fuzzLayouts)%len(algorithms)]
}

// FuzzSignAuth: for a canonical pointer in every layout and with every
// pointer key, StripX(AddPAC(p)) == p and Auth(AddPAC(p)) == p; a wrong
// key or modifier fails exactly as the layout's features say (PAuth1
// error code, PAuth2 XOR, FPAC error for stand-alone AUT*, FPACCOMBINE
// error for combined ones).
func FuzzSignAuth(f *testing.F) {
	f.Add(uint64(0x0000aaaabbbbccc0), uint64(0x0000fffff0001230), uint64(vecW0), uint64(vecK0), uint16(0), uint8(0), uint8(0))
	f.Add(uint64(0xffff800012345678), uint64(0), uint64(0), uint64(0), uint16(77), uint8(63), uint8(5))
	f.Add(uint64(0x5a7f0000deadbeef), ^uint64(0), ^uint64(0), uint64(1), uint16(500), uint8(130), uint8(2))
	f.Fuzz(func(t *testing.T, raw, mod, hi, lo uint64, sel uint16, flip, ksel uint8) {
		l, alg := pick(sel)
		key := Key{Hi: hi, Lo: lo}
		k := pointerKeys[ksel%4]
		combined := ksel&4 != 0
		m := l.InsnMasks()
		if k.Data() {
			m = l.DataMasks()
		}
		p := m.Strip(raw)
		s, err := l.AddPAC(p, mod, key, alg, k)
		if err != nil {
			t.Fatal(err)
		}
		if got := m.Strip(s); got != p {
			t.Fatalf("Strip(AddPAC(%#x)) = %#x", p, got)
		}
		auth := l.Auth
		if combined {
			auth = l.AuthCombined
		}
		if got, err := auth(s, mod, key, alg, k); got != p || err != nil {
			t.Fatalf("Auth(AddPAC(%#x)) = %#x, %v", p, got, err)
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
		field := m.Field(p&bit55 != 0)
		diff := (ComputePAC(p, mod, key, alg) ^ ComputePAC(p, badMod, badKey, alg)) & field
		got, err := auth(s, badMod, badKey, alg, k)
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
		fault := l.Features()&FPACCombine != 0 || l.Features()&FPAC != 0 && !combined
		if fault != errors.Is(err, ErrAuthFailed) {
			t.Fatalf("features %v, combined %v: err = %v", l.Features(), combined, err)
		}
	})
}

// FuzzArmReference: on arbitrary bits, every operation equals the Arm
// ARM pseudocode of armref_test.go.
func FuzzArmReference(f *testing.F) {
	f.Add(uint64(0x0080ffff08123450), uint64(0xffff80000a00fe30), uint64(vecW0), uint64(vecK0), uint16(3), uint8(0))
	f.Add(uint64(0x8000001234567890), uint64(1), uint64(2), uint64(3), uint16(100), uint8(7))
	f.Fuzz(func(t *testing.T, ptr, mod, hi, lo uint64, sel uint16, ksel uint8) {
		l, alg := pick(sel)
		key := Key{Hi: hi, Lo: lo}
		k := pointerKeys[ksel%4]
		combined := ksel&4 != 0
		if a, b := l.Strip(ptr), refStrip(l, ptr, false); a != b {
			t.Fatalf("Strip(%#x) = %#x, Arm %#x", ptr, a, b)
		}
		if a, b := l.StripData(ptr), refStrip(l, ptr, true); a != b {
			t.Fatalf("StripData(%#x) = %#x, Arm %#x", ptr, a, b)
		}
		s, err := l.AddPAC(ptr, mod, key, alg, k)
		if want := refAddPAC(l, ptr, mod, key, alg, k.Data()); s != want || err != nil {
			t.Fatalf("AddPAC(%#x) = %#x, %v; Arm %#x", ptr, s, err, want)
		}
		for _, in := range []uint64{ptr, s} {
			got, err := l.Auth(in, mod, key, alg, k)
			if combined {
				got, err = l.AuthCombined(in, mod, key, alg, k)
			}
			want, fault := refAuth(l, in, mod, key, alg, k.Data(), k.number(), combined)
			if got != want || fault != (err != nil) {
				t.Fatalf("Auth(%#x) = %#x, %v; Arm %#x, fault %v", in, got, err, want, fault)
			}
		}
	})
}

// FuzzFromRegisters: any register values give either a valid
// configuration (VA sizes in range, features valid, a layout that strips
// idempotently) or an ErrInvalid/ErrNotSupported error; nothing panics.
func FuzzFromRegisters(f *testing.F) {
	f.Add(uint64(tcrLinux48), uint64(isar1QEMU72Max), uint64(0), uint64(0), uint64(0), uint64(0x0080ffff08123450))
	f.Add(uint64(tcrLinux48MTE), uint64(isar1QEMU72NoPAC), uint64(isar2QEMU8QARMA3), uint64(0), uint64(1<<28), ^uint64(0))
	f.Add(^uint64(0), ^uint64(0), ^uint64(0), ^uint64(0), ^uint64(0), uint64(0))
	f.Fuzz(func(t *testing.T, tcr, isar1, isar2, mmfr0, mmfr2, ptr uint64) {
		c, err := FromRegisters(Registers{TCR: tcr, ISAR1: isar1, ISAR2: isar2, MMFR0: mmfr0, MMFR2: mmfr2})
		if err != nil {
			if !errors.Is(err, ErrInvalid) && !errors.Is(err, syscall.ENOSYS) {
				t.Fatalf("unexpected error %v", err)
			}
			return
		}
		for _, h := range []Half{c.Layout.Lower(), c.Layout.Upper()} {
			if h.VABits < 16 || h.VABits > 52 {
				t.Fatalf("VA size %d out of range", h.VABits)
			}
		}
		if c.Features.Valid() != nil || c.Layout.Features() != c.Features || c.Algorithm.Valid() != nil {
			t.Fatalf("invalid config %+v", c)
		}
		st := c.Layout.Strip(ptr)
		if c.Layout.Strip(st) != st {
			t.Fatalf("Strip not idempotent on %#x", ptr)
		}
		if _, err := c.Layout.AddPAC(ptr, 0, Key{}, c.Algorithm, KeyDA); err != nil {
			t.Fatal(err)
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
		if sd := l.StripData(ptr); l.StripData(sd) != sd || sd&low != ptr&low || sd&bit55 != ptr&bit55 {
			t.Fatalf("StripData(%#x) = %#x", ptr, sd)
		}
		_ = l.StripKernelStyle(ptr)
		s := l.Sign(ptr, mod, key, alg)
		if s&low != ptr&low {
			t.Fatalf("Sign(%#x) = %#x changed address bits", ptr, s)
		}
		a, err := l.Auth(ptr, mod, key, alg, KeyIA)
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
