package ptrauth

import (
	"math/rand/v2"
	"os/exec"
	"strings"
	"testing"

	"github.com/unwindkit/unwindkit/internal/needs"
)

// Expected values below were worked out by hand from the rule "every PAC
// field bit becomes a copy of bit 55" (field = 54:VABits, plus 63:56 when
// the top byte is not ignored for instruction addresses).
func TestStripTable(t *testing.T) {
	tbiOn := Half{TBI: true}
	tbiOff := Half{}
	tbid := Half{TBI: true, TBID: true} // TBI for data only: no TBI for PCs
	tests := []struct {
		name     string
		va       int
		h        Half
		in, want uint64
	}{
		{"48/tbi/lower", 48, tbiOn, 0x5a7f0000deadbeef, 0x5a000000deadbeef},
		{"48/tbi/upper", 48, tbiOn, 0x0080ffff00001000, 0x00ffffff00001000},
		{"48/notbi/lower", 48, tbiOff, 0x5a7f0000deadbeef, 0x00000000deadbeef},
		{"48/notbi/upper", 48, tbiOff, 0x1280ffff00001000, 0xffffffff00001000},
		{"48/tbid/lower", 48, tbid, 0x5a7f0000deadbeef, 0x00000000deadbeef},
		{"48/tbid/upper", 48, tbid, 0x1280ffff00001000, 0xffffffff00001000},
		{"39/tbi/lower", 39, tbiOn, 0x1155558012345678, 0x1100000012345678},
		{"39/notbi/lower", 39, tbiOff, 0x1155558012345678, 0x0000000012345678},
		{"39/tbi/upper", 39, tbiOn, 0x22aaaa8012345678, 0x22ffff8012345678},
		{"39/notbi/upper", 39, tbiOff, 0x22aaaa8012345678, 0xffffff8012345678},
		{"39/tbid/upper", 39, tbid, 0x22aaaa8012345678, 0xffffff8012345678},
		{"52/tbi/upper", 52, tbiOn, 0x008923456789abcd, 0x00f923456789abcd},
		{"52/notbi/upper", 52, tbiOff, 0x008923456789abcd, 0xfff923456789abcd},
		{"52/tbi/lower", 52, tbiOn, 0x3c7923456789abcd, 0x3c0923456789abcd},
		{"52/notbi/lower", 52, tbiOff, 0x3c7923456789abcd, 0x000923456789abcd},
		{"48/canonical-user", 48, tbiOff, 0x0000aaaabbbbcccc, 0x0000aaaabbbbcccc},
		{"48/canonical-kernel", 48, tbiOff, 0xffff800008001234, 0xffff800008001234},
	}
	for _, tt := range tests {
		h := tt.h
		h.VABits = tt.va
		l, err := NewLayoutHalves(h, h, PAuth2)
		if err != nil {
			t.Fatal(err)
		}
		if got := l.Strip(tt.in); got != tt.want {
			t.Errorf("%s: Strip(%#x) = %#x, want %#x", tt.name, tt.in, got, tt.want)
		}
		if got := l.Strip(tt.want); got != tt.want {
			t.Errorf("%s: Strip not idempotent: Strip(%#x) = %#x", tt.name, tt.want, got)
		}
	}
}

func TestStripMixedHalves(t *testing.T) {
	// Lower half 48-bit with TBI, upper half 39-bit without: bit 55 picks.
	l, err := NewLayoutHalves(Half{VABits: 48, TBI: true}, Half{VABits: 39}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := l.Strip(0x5a7f0000deadbeef), uint64(0x5a000000deadbeef); got != want {
		t.Errorf("lower: got %#x, want %#x", got, want)
	}
	if got, want := l.Strip(0x22aaaa8012345678), uint64(0xffffff8012345678); got != want {
		t.Errorf("upper: got %#x, want %#x", got, want)
	}
	if got, want := l.PACMask(false), uint64(0x007f000000000000); got != want {
		t.Errorf("PACMask(false) = %#x, want %#x", got, want)
	}
	if got, want := l.PACMask(true), uint64(0xff7fff8000000000); got != want {
		t.Errorf("PACMask(true) = %#x, want %#x", got, want)
	}
	if l.Lower().VABits != 48 || l.Upper().VABits != 39 || !l.Lower().TBI || l.Upper().TBI {
		t.Errorf("halves not kept: %+v %+v", l.Lower(), l.Upper())
	}
}

func TestZeroLayoutIsIdentity(t *testing.T) {
	var l Layout
	for _, p := range []uint64{0, 0x5a7f0000deadbeef, ^uint64(0), 0x0080ffff00001000} {
		if got := l.Strip(p); got != p {
			t.Errorf("Strip(%#x) = %#x", p, got)
		}
		if got := l.StripKernelStyle(p); got != p {
			t.Errorf("StripKernelStyle(%#x) = %#x", p, got)
		}
		if got := l.Sign(p, 1, Key{1, 2}, QARMA5); got != p {
			t.Errorf("Sign(%#x) = %#x", p, got)
		}
		if got, err := l.Auth(p, 1, Key{1, 2}, QARMA5, KeyIA); got != p || err != nil {
			t.Errorf("Auth(%#x) = %#x, %v", p, got, err)
		}
	}
}

func TestLayoutValidation(t *testing.T) {
	for _, va := range []int{0, 15, 53, 64, -1} {
		if _, err := NewLayoutHalves(Half{VABits: va}, Half{VABits: 48}, 0); err == nil || !strings.Contains(err.Error(), "lower half") {
			t.Errorf("lower VABits %d: err = %v", va, err)
		}
		if _, err := NewLayoutHalves(Half{VABits: 48}, Half{VABits: va}, 0); err == nil || !strings.Contains(err.Error(), "upper half") {
			t.Errorf("upper VABits %d: err = %v", va, err)
		}
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("NewLayout(%d) did not panic", va)
				}
			}()
			NewLayout(va, true)
		}()
	}
	for _, va := range []int{16, 39, 48, 52} {
		l := NewLayout(va, false)
		if l.Features() != PAuth2 {
			t.Errorf("NewLayout features = %v, want PAuth2", l.Features())
		}
		if f := l.WithFeatures(FPAC | PAuth2).Features(); f != FPAC|PAuth2 {
			t.Errorf("WithFeatures: %v", f)
		}
	}
}

// linuxLayouts are the kernel's configuration: TBI0 for user space, no
// TBI for kernel instruction addresses (TBI1 clear, or set with TBID1).
func linuxLayouts() []Layout {
	var ls []Layout
	for _, va := range []int{39, 48, 52} {
		for _, upper := range []Half{{VABits: va}, {VABits: va, TBI: true, TBID: true}} {
			for _, f := range []Features{0, PAuth2, PAuth2 | FPAC} {
				l, err := NewLayoutHalves(Half{VABits: va, TBI: true}, upper, f)
				if err != nil {
					panic(err)
				}
				ls = append(ls, l)
			}
		}
	}
	return ls
}

func TestStripKernelStyleAgreesWithStrip(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	key := Key{Hi: 0x0123456789abcdef, Lo: 0xfedcba9876543210}
	for _, l := range linuxLayouts() {
		for range 500 {
			p := l.Strip(r.Uint64()) // canonical: Strip leaves it alone
			if got := l.StripKernelStyle(p); got != p {
				t.Fatalf("%+v: StripKernelStyle(canonical %#x) = %#x", l, p, got)
			}
			s := l.Sign(p, r.Uint64(), key, QARMA5)
			if a, b := l.StripKernelStyle(s), l.Strip(s); a != b || a != p {
				t.Fatalf("%+v: signed %#x of %#x: kernel style %#x, Strip %#x", l, s, p, a, b)
			}
			// Arbitrary (even non-canonical) bits: the two still agree.
			x := r.Uint64()
			if a, b := l.StripKernelStyle(x), l.Strip(x); a != b {
				t.Fatalf("%+v: %#x: kernel style %#x, Strip %#x", l, x, a, b)
			}
		}
	}
}

func TestStripKernelStyleCanonicalAnyLayout(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for _, l := range allLayouts() {
		upperTBI := l.PACMask(true)>>63 == 0
		for range 200 {
			p := l.Strip(r.Uint64())
			// A canonical pointer of a non-TBI half has its top byte equal
			// to bit 55, so the kernel's fixed rule leaves it alone; a
			// lower-half tag byte survives both. Only an upper half with
			// TBI for PCs (not a Linux configuration) can carry a tag that
			// the kernel's rule overwrites.
			want := p
			if upperTBI && p&bit55 != 0 {
				want = p | 0xff<<56
			}
			if got := l.StripKernelStyle(p); got != want {
				t.Fatalf("%+v: StripKernelStyle(canonical %#x) = %#x, want %#x", l, p, got, want)
			}
		}
	}
	// Where a layout differs from Linux, the kernel's rule treats the top
	// byte its own way: documented, not hidden.
	l := NewLayout(48, false)
	if a, b := l.StripKernelStyle(0x5a7f0000deadbeef), l.Strip(0x5a7f0000deadbeef); a != 0x5a000000deadbeef || b != 0xdeadbeef {
		t.Errorf("no-TBI user pointer: kernel style %#x, Strip %#x", a, b)
	}
}

// validFeatures are the feature sets the ID registers can express.
var validFeatures = []Features{0, EPAC, PAuth2, PAuth2 | FPAC, PAuth2 | FPAC | FPACCombine}

// allLayouts covers 39/48/52-bit VAs, TBI on/off/TBID in each half and
// every feature set.
func allLayouts() []Layout {
	var ls []Layout
	halves := func(va int) []Half {
		return []Half{{VABits: va}, {VABits: va, TBI: true}, {VABits: va, TBI: true, TBID: true}}
	}
	for _, va := range []int{39, 48, 52} {
		for _, lo := range halves(va) {
			for _, hi := range halves(va) {
				for _, f := range validFeatures {
					l, err := NewLayoutHalves(lo, hi, f)
					if err != nil {
						panic(err)
					}
					ls = append(ls, l)
				}
			}
		}
	}
	return ls
}

// TestStripInlinable checks the promise that Strip costs a mask: the
// compiler must be able to inline it into an unwinder's loop.
func TestStripInlinable(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the compiler")
	}
	goTool := needs.Go(t)
	out, err := exec.Command(goTool, "build", "-gcflags=-m", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go build -gcflags=-m: %v\n%s", err, out)
	}
	for _, fn := range []string{"can inline Layout.Strip", "can inline Layout.StripData", "can inline Layout.StripKernelStyle",
		"can inline Masks.Strip", "can inline Layout.InsnMasks", "can inline Layout.DataMasks"} {
		if !strings.Contains(string(out), fn) {
			t.Errorf("compiler output lacks %q", fn)
		}
	}
}

// TestMasksStrip: the hoisted masks strip exactly as the Layout methods,
// on every layout and any bits, and the zero Masks strip nothing.
func TestMasksStrip(t *testing.T) {
	r := rand.New(rand.NewPCG(13, 14))
	for _, l := range allLayouts() {
		im, dm := l.InsnMasks(), l.DataMasks()
		if pm := l.InsnMasksPtr(); pm != im {
			t.Fatalf("%+v: InsnMasksPtr %+v, InsnMasks %+v", l, pm, im)
		}
		if im.Field(false) != l.PACMask(false) || im.Field(true) != l.PACMask(true) {
			t.Fatalf("%+v: InsnMasks fields %#x/%#x, PACMask %#x/%#x", l, im.Field(false), im.Field(true), l.PACMask(false), l.PACMask(true))
		}
		for range 200 {
			p := r.Uint64()
			if a, b := im.Strip(p), l.Strip(p); a != b {
				t.Fatalf("%+v: InsnMasks().Strip(%#x) = %#x, Strip %#x", l, p, a, b)
			}
			if a, b := dm.Strip(p), l.StripData(p); a != b {
				t.Fatalf("%+v: DataMasks().Strip(%#x) = %#x, StripData %#x", l, p, a, b)
			}
		}
		// Data fields never include the top byte of a TBI half.
		for h, half := range []Half{l.Lower(), l.Upper()} {
			if top := dm.Field(h == 1) >> 56; half.TBI != (top == 0) {
				t.Fatalf("%+v: data field of half %d has top byte %#x", l, h, top)
			}
		}
	}
	var m Masks
	if m.Strip(0x5a7f0000deadbeef) != 0x5a7f0000deadbeef {
		t.Error("zero Masks changed a pointer")
	}
}
