package ptrauth

import (
	"errors"
	"testing"
)

// linuxMTE is Linux's EL1 layout with CONFIG_ARM64_MTE: TBI0 for user
// space, TBI1 with TBID1 for the kernel (tags on kernel data pointers,
// none on kernel PCs).
func linuxMTE(t *testing.T, f Features) Layout {
	t.Helper()
	l, err := NewLayoutHalves(Half{VABits: 48, TBI: true}, Half{VABits: 48, TBI: true, TBID: true}, f)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// TestDataVersusInstruction: with TBID the top byte of a kernel pointer is
// a tag for data accesses and PAC field for instruction fetches, so XPACD
// keeps it where XPACI overwrites it, and the two kinds of key sign
// different fields. Expected values worked out by hand from the Arm ARM's
// Strip (field := copies of bit 55; top byte kept iff EffectiveTBI).
func TestDataVersusInstruction(t *testing.T) {
	l := linuxMTE(t, PAuth2)
	const kptr = 0x5abf_8000_0812_3450 // tag 0x5a, bit 55 set, PAC bits 0x3f in 54:48
	if got, want := l.StripData(kptr), uint64(0x5aff_8000_0812_3450); got != want {
		t.Errorf("StripData(%#x) = %#x, want %#x (tag kept)", uint64(kptr), got, want)
	}
	if got, want := l.Strip(kptr), uint64(0xffff_8000_0812_3450); got != want {
		t.Errorf("Strip(%#x) = %#x, want %#x (top byte is PAC for PCs)", uint64(kptr), got, want)
	}
	if got, want := l.DataMasks().Field(true), uint64(0x007f_0000_0000_0000); got != want {
		t.Errorf("data field, upper half = %#x, want %#x", got, want)
	}
	if got, want := l.InsnMasks().Field(true), uint64(0xff7f_0000_0000_0000); got != want {
		t.Errorf("instruction field, upper half = %#x, want %#x", got, want)
	}
	// The lower half has TBI without TBID: both kinds keep the tag.
	const uptr = 0x2a12_0000_aaaa_bbc0
	if a, b := l.Strip(uptr), l.StripData(uptr); a != 0x2a00_0000_aaaa_bbc0 || b != a {
		t.Errorf("user pointer: Strip %#x, StripData %#x, want 0x2a000000aaaabbc0 for both", a, b)
	}

	p := uint64(0x5aff_8000_0812_3450) // a tagged kernel data pointer
	const mod = 0x1234
	sd, err := l.AddPAC(p, mod, testKey, QARMA5, KeyDA)
	if err != nil {
		t.Fatal(err)
	}
	if sd>>56 != 0x5a || sd&0xffff_ffff_ffff != p&0xffff_ffff_ffff {
		t.Errorf("PACDA(%#x) = %#x: tag and address must be kept", p, sd)
	}
	if want := (p ^ ComputePAC(p, mod, testKey, QARMA5)&0x007f_0000_0000_0000); sd != want {
		t.Errorf("PACDA(%#x) = %#x, want %#x", p, sd, want)
	}
	if got, err := l.Auth(sd, mod, testKey, QARMA5, KeyDA); got != p || err != nil {
		t.Errorf("AUTDA(PACDA(p)) = %#x, %v, want %#x", got, err, p)
	}
	// The same bits authenticated as an instruction pointer: a different
	// field (the tag is PAC there), so it fails.
	if got, _ := l.Auth(sd, mod, testKey, QARMA5, KeyIA); got == l.Strip(sd) {
		t.Errorf("AUTIA of a PACDA-signed pointer succeeded: %#x", got)
	}
	pc := uint64(0xffff_8000_0812_3450)
	si, _ := l.AddPAC(pc, mod, testKey, QARMA5, KeyIA)
	if want := pc ^ ComputePAC(pc, mod, testKey, QARMA5)&0xff7f_0000_0000_0000; si != want {
		t.Errorf("PACIA(%#x) = %#x, want %#x (PAC in the top byte too)", pc, si, want)
	}
	if si != l.Sign(pc, mod, testKey, QARMA5) {
		t.Errorf("AddPAC(KeyIA) %#x != Sign %#x", si, l.Sign(pc, mod, testKey, QARMA5))
	}
	// IA and IB (and DA and DB) differ only in the key register and the
	// PAuth1 error code: with the same key value they sign alike.
	sb, _ := l.AddPAC(pc, mod, testKey, QARMA5, KeyIB)
	sdb, _ := l.AddPAC(p, mod, testKey, QARMA5, KeyDB)
	if sb != si || sdb != sd {
		t.Errorf("IB/DB signatures %#x %#x differ from IA/DA %#x %#x", sb, sdb, si, sd)
	}
}

// TestPAuth1ErrorCodeData: a failed AUTDB writes 0b10 at bits 54:53 of a
// tagged kernel data pointer (TBI1 applies to data), a failed AUTIB at
// bits 62:61 of a kernel PC (TBID1: no TBI for PCs).
func TestPAuth1ErrorCodeData(t *testing.T) {
	l := linuxMTE(t, 0)
	p, pc := uint64(0x5aff_8000_0812_3450), uint64(0xffff_8000_0812_3450)
	sd, _ := l.AddPAC(p, 1, testKey, QARMA5, KeyDB)
	si, _ := l.AddPAC(pc, 1, testKey, QARMA5, KeyIB)
	bad := Key{Hi: testKey.Hi ^ 1, Lo: testKey.Lo}
	if got, err := l.Auth(sd, 1, bad, QARMA5, KeyDB); got != 0x5adf_8000_0812_3450 || err != nil {
		t.Errorf("failed AUTDB = %#x, %v, want 0x5adf800008123450", got, err)
	}
	if got, err := l.Auth(si, 1, bad, QARMA5, KeyIB); got != 0xdfff_8000_0812_3450 || err != nil {
		t.Errorf("failed AUTIB = %#x, %v, want 0xdfff800008123450", got, err)
	}
	if got, _ := l.Auth(sd, 1, bad, QARMA5, KeyDA); got != 0x5abf_8000_0812_3450 {
		t.Errorf("failed AUTDA = %#x, want 0x5abf800008123450", got)
	}
}

// TestFPACCombine: with FPAC a stand-alone AUT* faults but the
// authentication inside RETAA/BRAA/LDRAA does not (the branch or load then
// faults on the poisoned pointer); with FPACCOMBINE both fault; with
// PAuth2 alone neither does. The poisoned value is the same in all cases.
func TestFPACCombine(t *testing.T) {
	pc := uint64(0xffff_8000_0812_3450)
	tests := []struct {
		f                    Features
		standalone, combined bool // fault expected
	}{
		{PAuth2, false, false},
		{PAuth2 | FPAC, true, false},
		{PAuth2 | FPAC | FPACCombine, true, true},
	}
	var poisoned uint64
	for _, tt := range tests {
		l := NewLayout(48, false).WithFeatures(tt.f)
		for _, k := range pointerKeys {
			s, _ := l.AddPAC(pc, 0x10, testKey, QARMA5, k)
			a, errA := l.Auth(s, 0x20, testKey, QARMA5, k)
			c, errC := l.AuthCombined(s, 0x20, testKey, QARMA5, k)
			if (errA != nil) != tt.standalone || (errC != nil) != tt.combined {
				t.Errorf("%v key %v: stand-alone err %v, combined err %v; want faults %v, %v", tt.f, k, errA, errC, tt.standalone, tt.combined)
			}
			if a != c || a == pc {
				t.Errorf("%v key %v: stand-alone %#x, combined %#x", tt.f, k, a, c)
			}
			if poisoned == 0 {
				poisoned = a
			} else if a != poisoned {
				t.Errorf("%v key %v: poisoned %#x, other features gave %#x", tt.f, k, a, poisoned)
			}
			var ae *AuthError
			if errC != nil && (!errors.As(errC, &ae) || !ae.Combined || ae.Key != k) {
				t.Errorf("combined fault %v", errC)
			}
			// Success is never an error, combined or not.
			if got, err := l.AuthCombined(s, 0x10, testKey, QARMA5, k); got != pc || err != nil {
				t.Errorf("%v: AuthCombined(valid) = %#x, %v", tt.f, got, err)
			}
		}
	}
}

// TestPACGA: PACGA is ComputePAC with the low half cleared; the QARMA
// paper's σ2/r=5 vector gives the upper half.
func TestPACGA(t *testing.T) {
	got, err := PACGA(vecP, vecT, Key{Hi: vecW0, Lo: vecK0}, QARMA5)
	if err != nil || got != 0xc003b93900000000 {
		t.Errorf("PACGA(paper vector) = %#x, %v, want 0xc003b93900000000", got, err)
	}
	for _, alg := range algorithms {
		g, _ := PACGA(0x1234, 0x5678, testKey, alg)
		if g&0xffffffff != 0 || g != ComputePAC(0x1234, 0x5678, testKey, alg)&^0xffffffff {
			t.Errorf("%v: PACGA = %#x", alg, g)
		}
	}
}

// TestEPACZeroPAC: under EPAC a pointer with bad extension bits gets a
// zero PAC field (PAuth1 inverts one PAC bit instead).
func TestEPACZeroPAC(t *testing.T) {
	l, _ := NewLayoutHalves(Half{VABits: 48}, Half{VABits: 48}, EPAC)
	nc := uint64(0xffff_0000_0812_3450) // bits 63:48 set, bit 47 clear: canonical
	nc ^= 1 << 50                       // now not
	if got, want := l.Sign(nc, 1, testKey, QARMA5), uint64(0x0080_0000_0812_3450); got != want {
		t.Errorf("EPAC Sign(%#x) = %#x, want %#x", nc, got, want)
	}
}
