package ptrauth

import (
	"errors"
	"strings"
	"testing"
)

// Invalid arguments are errors wrapping ErrInvalid on every layout, the
// zero one included, and never panic.

func TestUnknownKeyIDRejected(t *testing.T) {
	l, _ := NewLayoutHalves(Half{VABits: 48, TBI: true}, Half{VABits: 48}, 0)
	p := uint64(0xffff800008123450)
	s := l.Sign(p, 0x10, testKey, QARMA5)
	for _, lay := range []Layout{l, {}} {
		for _, k := range []KeyID{KeyGA, 5, 9, 255} {
			got, err := lay.Auth(s, 0x20, testKey, QARMA5, k)
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("Auth with %v = %#x, %v; want ErrInvalid", k, got, err)
			}
			if _, err := lay.AddPAC(p, 0x10, testKey, QARMA5, k); !errors.Is(err, ErrInvalid) {
				t.Errorf("AddPAC with %v: err = %v, want ErrInvalid", k, err)
			}
		}
	}
}

func TestUnknownAlgorithmRejected(t *testing.T) {
	real := NewLayout(48, false)
	for _, l := range []Layout{real, {}} {
		for _, alg := range []Algorithm{3, 7, 255} {
			if err := alg.Valid(); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "Algorithm(") {
				t.Errorf("%v.Valid() = %v", alg, err)
			}
			p := uint64(0xffff800008123450)
			if got := l.Sign(p, 1, testKey, alg); got != p {
				t.Errorf("Sign with %v = %#x, want the pointer unsigned", alg, got)
			}
			if _, err := l.AddPAC(p, 1, testKey, alg, KeyIA); !errors.Is(err, ErrInvalid) {
				t.Errorf("AddPAC with %v: err = %v", alg, err)
			}
			if _, err := l.Auth(p, 1, testKey, alg, KeyIA); !errors.Is(err, ErrInvalid) {
				t.Errorf("Auth with %v: err = %v", alg, err)
			}
			if _, err := l.AuthCombined(p, 1, testKey, alg, KeyDB); !errors.Is(err, ErrInvalid) {
				t.Errorf("AuthCombined with %v: err = %v", alg, err)
			}
		}
	}
	if _, err := PACGA(1, 2, testKey, 9); !errors.Is(err, ErrInvalid) {
		t.Errorf("PACGA with Algorithm(9): err = %v", err)
	}
}

func TestInvalidFeatures(t *testing.T) {
	h := Half{VABits: 48}
	tests := []struct {
		f    Features
		want string // in the error; "" means valid
	}{
		{0, ""},
		{EPAC, ""},
		{PAuth2, ""},
		{PAuth2 | FPAC, ""},
		{PAuth2 | FPAC | FPACCombine, ""},
		{FPAC, "FPAC without PAuth2"},
		{FPAC | FPACCombine, "FPAC without PAuth2"},
		{PAuth2 | FPACCombine, "FPACCombine without FPAC"},
		{EPAC | PAuth2, "EPAC together with PAuth2"},
		{0x10, "unknown feature bits 0x10"},
		{PAuth2 | 0x80, "unknown feature bits 0x80"},
	}
	for _, tt := range tests {
		_, err := NewLayoutHalves(h, h, tt.f)
		if tt.want == "" {
			if err != nil || tt.f.Valid() != nil {
				t.Errorf("%v: err = %v", tt.f, err)
			}
			continue
		}
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%v: err = %v, want ErrInvalid with %q", tt.f, err, tt.want)
		}
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("WithFeatures(%v) did not panic", tt.f)
				}
			}()
			NewLayout(48, false).WithFeatures(tt.f)
		}()
	}
}
