package live

import (
	"testing"
)

// fakeEntry is the function of a fake address: 256-byte blocks (no Go code
// lives below 0x10000).
func fakeEntry(pc uintptr) uintptr { return (pc - 1) &^ 0xff }

// fakePhys builds new physical frames with the given fake return addresses.
func fakePhys(rets ...uintptr) []physFrame {
	var p []physFrame
	for _, r := range rets {
		p = append(p, physFrame{ret: r, entry: fakeEntry(r)})
	}
	return p
}

func kinds(p []physFrame) []kind {
	var ks []kind
	for _, f := range p {
		k, _, ok := lookup(f.ret)
		if !ok {
			ks = append(ks, 255)
			continue
		}
		ks = append(ks, k)
	}
	return ks
}

func TestAlign(t *testing.T) {
	defer resetCache()
	x := func(v ...uintptr) []uintptr { return v }
	special := fakePhys(0x110, 0x210)
	special[1].special = true
	tests := []struct {
		name      string
		phys      []physFrame
		logical   []uintptr
		complete  bool
		truncated bool
		want      []kind // 255: not learned
	}{
		{"plain", fakePhys(0x110, 0x210, 0x310), x(0x110, 0x210, 0x310), true, false,
			[]kind{kindSelf, kindSelf, kindSelf}},
		{"inlined", fakePhys(0x110, 0x210), x(0x110, 0x155, 0x166, 0x210), true, false,
			[]kind{kindMany, kindSelf}},
		{"hidden run", fakePhys(0x110, 0x210, 0x310, 0x410), x(0x110, 0x410), true, false,
			[]kind{kindSelf, kindHidden, kindHidden, kindSelf}},
		{"inlined wrapper elided", fakePhys(0x110, 0x210), x(0x177, 0x210), true, false,
			[]kind{kindMany, kindSelf}},
		{"recursion", fakePhys(0x110, 0x110, 0x120), x(0x110, 0x110, 0x120), true, false,
			[]kind{kindSelf, kindSelf, kindSelf}},
		{"recursion, inlined", fakePhys(0x110, 0x120), x(0x110, 0x130, 0x120), true, false,
			[]kind{kindMany, kindSelf}},
		{"unexplained", fakePhys(0x110, 0x210, 0x310), x(0x110, 0x999, 0x310), true, false,
			[]kind{kindSelf, kindSlow, 255}},
		{"runtime has more", fakePhys(0x110, 0x210), x(0x110, 0x210, 0x310), true, false,
			[]kind{kindSelf, kindSlow}},
		// The runtime's answer was cut off: 0x210's inlined callers may
		// have followed.
		{"truncated tail", fakePhys(0x110, 0x210, 0x310), x(0x110, 0x210), false, true,
			[]kind{kindSelf, 255, 255}},
		{"special", special, x(0x110, 0x210), true, false,
			[]kind{kindSelf, kindSlow}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resetCache()
			align(tc.phys, tc.logical, tc.complete, tc.truncated, passOf(tc.phys), fakeEntry)
			got := kinds(tc.phys)
			if len(got) != len(tc.want) {
				t.Fatalf("kinds %v, want %v", got, tc.want)
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Fatalf("kinds %v, want %v", got, tc.want)
				}
			}
		})
	}
}

// align never panics, publishes kindMany only with pcs, and what it
// publishes reproduces logical when the whole stack lined up.
func FuzzAlign(f *testing.F) {
	f.Add([]byte{1, 1, 2, 0, 1}, []byte{1, 2, 3}, true, false)
	f.Fuzz(func(t *testing.T, shape, logicalB []byte, complete, truncated bool) {
		defer resetCache()
		resetCache()
		var rets []uintptr
		for i := range min(len(shape), 16) {
			rets = append(rets, 0x1000+uintptr(i)*0x100+uintptr(shape[i]&0xf)*8+1)
		}
		var logical []uintptr
		for _, b := range logicalB {
			logical = append(logical, 0x1000+uintptr(b)*8+1)
		}
		phys := fakePhys(rets...)
		align(phys, logical, complete, truncated, passOf(phys), fakeEntry)
		var out []uintptr
		all := true
		for _, fr := range phys {
			k, pcs, ok := lookup(fr.ret)
			if ok && k == kindMany && len(pcs) == 0 {
				t.Fatalf("kindMany entry without pcs for %#x", fr.ret)
			}
			switch {
			case !ok || k == kindSlow:
				all = false
			case k == kindSelf:
				out = append(out, fr.ret)
			case k == kindMany:
				out = append(out, pcs...)
			}
		}
		if all && complete && !truncated && len(phys) > 0 && len(out) != len(logical) {
			t.Fatalf("published %#x for logical %#x", out, logical)
		}
	})
}

// passOf is the set of addresses of phys.
func passOf(phys []physFrame) map[uintptr]struct{} {
	m := make(map[uintptr]struct{})
	for _, f := range phys {
		m[f.ret] = struct{}{}
	}
	return m
}
