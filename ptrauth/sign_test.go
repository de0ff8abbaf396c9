package ptrauth

import (
	"errors"
	"math/rand/v2"
	"strings"
	"testing"
)

var testKey = Key{Hi: 0x84be85ce9804e94b, Lo: 0xec2802d4e0a488e9}

var algorithms = []Algorithm{QARMA5, QARMA3, ImpDef}

// want computes what AddPAC must return for a canonical pointer, written
// independently of Sign from the Arm ARM's description.
func wantSigned(l Layout, p, mod uint64, key Key, alg Algorithm) uint64 {
	field := l.PACMask(p&bit55 != 0)
	pac := ComputePAC(p, mod, key, alg) & field
	if l.Features()&PAuth2 != 0 {
		return p ^ pac // the field of a canonical p is bit-55 copies
	}
	return p&^field | pac
}

func TestSignAuthRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for _, l := range allLayouts() {
		for _, alg := range algorithms {
			changed := 0
			const n = 40
			for range n {
				p := l.Strip(r.Uint64())
				mod := r.Uint64()
				key := Key{r.Uint64(), r.Uint64()}
				s := l.Sign(p, mod, key, alg)
				if w := wantSigned(l, p, mod, key, alg); s != w {
					t.Fatalf("%+v %v: Sign(%#x) = %#x, want %#x", l, alg, p, s, w)
				}
				field := l.PACMask(p&bit55 != 0)
				if s&^field != p&^field {
					t.Fatalf("%+v %v: Sign(%#x) = %#x changed bits outside the field %#x", l, alg, p, s, field)
				}
				if s != p {
					changed++
				}
				if got := l.Strip(s); got != p {
					t.Fatalf("%+v %v: Strip(Sign(%#x)) = %#x", l, alg, p, got)
				}
				for _, k := range []KeyID{KeyIA, KeyIB} {
					if got, err := l.Auth(s, mod, key, alg, k); got != p || err != nil {
						t.Fatalf("%+v %v: Auth(Sign(%#x)) = %#x, %v", l, alg, p, got, err)
					}
				}
			}
			if changed < n/2 {
				t.Errorf("%+v %v: only %d of %d signatures changed the pointer", l, alg, changed, n)
			}
		}
	}
}

// wantFailed computes what a failed Auth with key k returns,
// independently of Auth.
func wantFailed(l Layout, s, p, badPAC uint64, k KeyID) uint64 {
	m := l.InsnMasks()
	if k.Data() {
		m = l.DataMasks()
	}
	field := m.Field(p&bit55 != 0)
	if l.Features()&PAuth2 != 0 {
		return s ^ badPAC&field
	}
	pos := 61
	if field>>63 == 0 {
		pos = 53
	}
	code := uint64(0b01)
	if k == KeyIB || k == KeyDB {
		code = 0b10
	}
	return p&^(3<<pos) | code<<pos
}

func TestAuthFailure(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	failures := 0
	for _, l := range allLayouts() {
		for _, alg := range algorithms {
			for i := range 30 {
				p := l.Strip(r.Uint64())
				mod := r.Uint64()
				s := l.Sign(p, mod, testKey, alg)
				badMod, badKey := mod, testKey
				if i%2 == 0 {
					badMod ^= 1 << (i % 64)
				} else {
					badKey.Lo ^= 1 << (i % 64)
				}
				k := KeyID(i / 2 % 2)
				field := l.PACMask(p&bit55 != 0)
				good, bad := ComputePAC(p, mod, testKey, alg), ComputePAC(p, badMod, badKey, alg)
				got, err := l.Auth(s, badMod, badKey, alg, k)
				if (good^bad)&field == 0 { // a PAC collision: authentic
					if got != p || err != nil {
						t.Fatalf("%+v %v: colliding PAC: Auth = %#x, %v, want %#x", l, alg, got, err, p)
					}
					continue
				}
				failures++
				want := wantFailed(l, s, p, bad, k)
				if got != want {
					t.Fatalf("%+v %v key %v: Auth(%#x) with wrong tweakey = %#x, want %#x", l, alg, k, s, got, want)
				}
				if l.Strip(got) != p {
					t.Fatalf("%+v: poisoned %#x does not strip back to %#x", l, got, p)
				}
				if got == p {
					t.Fatalf("%+v: failed Auth returned the canonical pointer", l)
				}
				if l.Features()&FPAC == 0 {
					if err != nil {
						t.Fatalf("%+v: without FPAC, Auth returned error %v", l, err)
					}
					continue
				}
				var ae *AuthError
				if !errors.Is(err, ErrAuthFailed) || !errors.As(err, &ae) {
					t.Fatalf("%+v: with FPAC, err = %v, want *AuthError wrapping ErrAuthFailed", l, err)
				}
				if ae.Ptr != s || ae.Modifier != badMod || ae.Key != k || ae.Result != got {
					t.Fatalf("%+v: AuthError %+v does not describe the failure", l, ae)
				}
			}
		}
	}
	if failures == 0 {
		t.Fatal("no authentication failed")
	}
}

// TestPAuth1ErrorCodes pins the error-code positions with literal values.
func TestPAuth1ErrorCodes(t *testing.T) {
	tests := []struct {
		tbi  bool
		p    uint64
		k    KeyID
		want uint64
	}{
		{true, 0x0000aaaabbbbccc0, KeyIA, 0x0020aaaabbbbccc0},  // bits 54:53 = 01
		{true, 0x0000aaaabbbbccc0, KeyIB, 0x0040aaaabbbbccc0},  // bits 54:53 = 10
		{true, 0xffff800012345670, KeyIA, 0xffbf800012345670},  // 11 → 01
		{true, 0xffff800012345670, KeyIB, 0xffdf800012345670},  // 11 → 10
		{false, 0x0000aaaabbbbccc0, KeyIA, 0x2000aaaabbbbccc0}, // bits 62:61 = 01
		{false, 0x0000aaaabbbbccc0, KeyIB, 0x4000aaaabbbbccc0}, // bits 62:61 = 10
		{false, 0xffff800012345670, KeyIA, 0xbfff800012345670}, // 11 → 01
		{false, 0xffff800012345670, KeyIB, 0xdfff800012345670}, // 11 → 10
		{true, 0x5a00aaaabbbbccc0, KeyIB, 0x5a40aaaabbbbccc0},  // tag kept
	}
	for _, tt := range tests {
		l := NewLayout(48, tt.tbi).WithFeatures(0)
		s := l.Sign(tt.p, 0x1000, testKey, QARMA5)
		// Find a modifier whose PAC differs in the field (almost any).
		bad := uint64(0x2000)
		for (ComputePAC(tt.p, bad, testKey, QARMA5)^ComputePAC(tt.p, 0x1000, testKey, QARMA5))&l.PACMask(tt.p&bit55 != 0) == 0 {
			bad += 16
		}
		got, err := l.Auth(s, bad, testKey, QARMA5, tt.k)
		if got != tt.want || err != nil {
			t.Errorf("tbi=%v %#x key %v: Auth = %#x, %v, want %#x", tt.tbi, tt.p, tt.k, got, err, tt.want)
		}
	}
}

// TestSignNonCanonical: a pointer with bad extension bits never
// authenticates as the canonical pointer, and Sign matches the Arm ARM's
// AddPAC on it (see armref_test.go).
func TestSignNonCanonical(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	for _, l := range allLayouts() {
		for _, alg := range algorithms {
			for range 20 {
				p := l.Strip(r.Uint64())
				field := l.PACMask(p&bit55 != 0)
				// Flip one field bit below bit 63 (bit 63 is AddPAC's
				// selector when neither half has TBI).
				var fb []int
				for i := range 63 {
					if field>>i&1 != 0 {
						fb = append(fb, i)
					}
				}
				nc := p ^ 1<<fb[r.IntN(len(fb))]
				mod := r.Uint64()
				s := l.Sign(nc, mod, testKey, alg)
				if want := refAddPAC(l, nc, mod, testKey, alg, false); s != want {
					t.Fatalf("%+v %v: Sign(non-canonical %#x) = %#x, Arm AddPAC %#x", l, alg, nc, s, want)
				}
				got, err := l.Auth(s, mod, testKey, alg, KeyIA)
				if l.Features()&EPAC != 0 && ComputePAC(p, mod, testKey, alg)&field == 0 {
					continue // EPAC's zero PAC is the right one: 1 in 2^len(field)
				}
				if got == l.Strip(s) {
					t.Fatalf("%+v %v: non-canonical %#x authenticated as %#x", l, alg, nc, got)
				}
				if l.Features()&PAuth2 != 0 && got != nc {
					t.Fatalf("%+v %v: PAuth2 Auth(Sign(%#x)) = %#x, want the input back", l, alg, nc, got)
				}
				if (err != nil) != (l.Features()&FPAC != 0) {
					t.Fatalf("%+v %v: err = %v", l, alg, err)
				}
			}
		}
	}
}

// Without TBI the selector is bit 63 (AddPAC's selbit); it only differs
// from bit 55 for non-canonical input.
func TestSignSelectorBit63WithoutTBI(t *testing.T) {
	l := NewLayout(48, false).WithFeatures(0)
	nc := uint64(0x8000_1234_5678_9ab0) // bit 63 set, bit 55 clear
	s := l.Sign(nc, 7, testKey, QARMA5)
	if s&bit55 == 0 {
		t.Errorf("Sign(%#x) = %#x: bit 55 should copy bit 63", nc, s)
	}
	if s&0xffff_ffff_ffff != nc&0xffff_ffff_ffff {
		t.Errorf("Sign(%#x) = %#x changed the address bits", nc, s)
	}
}

func TestAuthErrorString(t *testing.T) {
	e := &AuthError{Ptr: 0x1234, Modifier: 0x10, Key: KeyIB, Result: 0x4000000000001234}
	msg := e.Error()
	for _, s := range []string{"0x1234", "key IB", "0x10", "0x4000000000001234"} {
		if !strings.Contains(msg, s) {
			t.Errorf("%q lacks %q", msg, s)
		}
	}
	if !errors.Is(e, ErrAuthFailed) {
		t.Error("AuthError is not ErrAuthFailed")
	}
}

func TestNames(t *testing.T) {
	for _, tt := range []struct {
		got, want string
	}{
		{QARMA5.String(), "QARMA5"},
		{QARMA3.String(), "QARMA3"},
		{ImpDef.String(), "ImpDef"},
		{Algorithm(9).String(), "Algorithm(9)"},
		{KeyIA.String(), "IA"},
		{KeyIB.String(), "IB"},
		{KeyDA.String(), "DA"},
		{KeyDB.String(), "DB"},
		{KeyGA.String(), "GA"},
		{Features(0).String(), "PAuth1"},
		{(PAuth2 | FPAC | FPACCombine).String(), "PAuth2|FPAC|FPACCombine"},
		{(EPAC | 0x80).String(), "EPAC|0x80"},
		{KeyID(7).String(), "KeyID(7)"},
	} {
		if tt.got != tt.want {
			t.Errorf("got %q, want %q", tt.got, tt.want)
		}
	}
}
