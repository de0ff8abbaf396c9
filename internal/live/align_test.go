package live

import (
	"testing"
)

// fakePhys builds physical frames with small fake return addresses (no Go
// code lives below 0x10000) and given expansions.
func fakePhys(exps ...[]uintptr) []physFrame {
	var p []physFrame
	for i, e := range exps {
		if e == nil {
			e = []uintptr{} // non-nil: expansion() must not ask the runtime
		}
		p = append(p, physFrame{ret: 0x100 + uintptr(i)*0x10, pcs: e, done: true})
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
	tests := []struct {
		name      string
		phys      []physFrame
		logical   []uintptr
		complete  bool
		truncated bool
		want      []kind // 255: not learned
	}{
		{"plain", fakePhys(x(0x100), x(0x110), x(0x120)), x(0x100, 0x110, 0x120), true, false,
			[]kind{kindSelf, kindSelf, kindSelf}},
		{"inlined", fakePhys(x(0x100, 0x555), x(0x110)), x(0x100, 0x555, 0x110), true, false,
			[]kind{kindMany, kindSelf}},
		{"hidden run", fakePhys(x(0x100), x(0x110), x(0x120), x(0x130)), x(0x100, 0x130), true, false,
			[]kind{kindSelf, kindHidden, kindHidden, kindSelf}},
		{"inlined wrapper elided", fakePhys(x(0x100, 0x777), x(0x110)), x(0x777, 0x110), true, false,
			[]kind{kindMany, kindSelf}},
		{"unexplained", fakePhys(x(0x100), x(0x110), x(0x120)), x(0x100, 0x999, 0x120), true, false,
			[]kind{kindSelf, kindSlow, 255}},
		{"runtime has more", fakePhys(x(0x100), x(0x110)), x(0x100, 0x110, 0x120), true, false,
			[]kind{kindSelf, kindSlow}},
		{"truncated tail", fakePhys(x(0x100), x(0x110), x(0x120)), x(0x100, 0x110), false, true,
			[]kind{kindSelf, kindSelf, 255}},
		{"special", append(fakePhys(x(0x100)), physFrame{ret: 0x200, pcs: x(0x200), special: true, done: true}), x(0x100, 0x200), true, false,
			[]kind{kindSelf, kindSlow}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resetCache()
			align(tc.phys, tc.logical, tc.complete, tc.truncated, passOf(tc.phys))
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

// align never panics and never learns anything but its own frames.
func FuzzAlign(f *testing.F) {
	f.Add([]byte{1, 1, 2, 0, 1}, []byte{1, 2, 3}, true, false)
	f.Fuzz(func(t *testing.T, shape, logicalB []byte, complete, truncated bool) {
		defer resetCache()
		resetCache()
		var exps [][]uintptr
		for i, b := range shape {
			if i >= 16 {
				break
			}
			var e []uintptr
			for k := 0; k < int(b%4); k++ {
				e = append(e, 0x100+uintptr(i)*0x10+uintptr(k)*3)
			}
			exps = append(exps, e)
		}
		var logical []uintptr
		for _, b := range logicalB {
			logical = append(logical, 0x100+uintptr(b))
		}
		phys := fakePhys(exps...)
		align(phys, logical, complete, truncated, passOf(phys))
		for _, f := range phys {
			if k, pcs, ok := lookup(f.ret); ok && k == kindMany && len(pcs) == 0 {
				t.Fatalf("kindMany entry without pcs for %#x", f.ret)
			}
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
