package ptrauth

import (
	"errors"
	"fmt"
	"strings"
	"syscall"
	"testing"
)

// Register values used below.
//
// TCR_EL1 as Linux 6.1 programs it for 48-bit VAs and 4 KiB pages
// (arch/arm64/mm/proc.S __cpu_setup: TCR_TxSZ(48), IRGN/ORGN WBWA, inner
// shareable, TG0/TG1 4K, ASID16, TBI0, A1; then IPS = 0b101 for a 48-bit
// PA and HA): T0SZ = T1SZ = 16, TBI0 = 1, TBI1 = 0. With CONFIG_ARM64_MTE
// and CONFIG_RANDOMIZE_BASE it adds TBI1|TBID1 and NFD1.
//
// ID_AA64ISAR1_EL1 as read with MRS from EL0 under qemu-aarch64 7.2
// (Debian 1:7.2+dfsg-7+deb12u18): -cpu max has APA = 1 and GPA = 1
// (QARMA5, PAuth1); -cpu max,pauth-impdef=on has API = 1 and GPI = 1;
// -cpu max,pauth=off has none. QEMU 8.0 and later set APA to 5
// (PauthFeat_FPACCOMBINED, target/arm/tcg/cpu64.c) and move that value to
// ID_AA64ISAR2_EL1.APA3 (with GPA3 = 1) for pauth-qarma3=on.
const (
	tcrLinux48       = 0x0000_00b5_b550_3510
	tcrLinux48MTE    = 0x0050_00f5_b550_3510
	isar1QEMU72Max   = 0x0011_1011_0121_1012
	isar1QEMU72Imp   = 0x0011_1011_1021_1102
	isar1QEMU72NoPAC = 0x0011_1011_0021_1002
	isar1QEMU8Max    = 0x0011_1011_0121_1052
	isar2QEMU8QARMA3 = 0x0000_0000_0000_5100
)

func TestFromRegistersReal(t *testing.T) {
	linux := [2]Half{{VABits: 48, TBI: true}, {VABits: 48}}
	linuxMTE := [2]Half{{VABits: 48, TBI: true}, {VABits: 48, TBI: true, TBID: true}}
	tests := []struct {
		name   string
		r      Registers
		halves [2]Half
		alg    Algorithm
		f      Features
	}{
		{"linux48/qemu7.2-max", Registers{TCR: tcrLinux48, ISAR1: isar1QEMU72Max}, linux, QARMA5, 0},
		{"linux48-mte/qemu7.2-max", Registers{TCR: tcrLinux48MTE, ISAR1: isar1QEMU72Max}, linuxMTE, QARMA5, 0},
		{"linux48/qemu7.2-impdef", Registers{TCR: tcrLinux48, ISAR1: isar1QEMU72Imp}, linux, ImpDef, 0},
		{"linux48/qemu8-max", Registers{TCR: tcrLinux48, ISAR1: isar1QEMU8Max}, linux, QARMA5, PAuth2 | FPAC | FPACCombine},
		{"linux48/qemu8-qarma3", Registers{TCR: tcrLinux48MTE, ISAR1: isar1QEMU72NoPAC, ISAR2: isar2QEMU8QARMA3}, linuxMTE, QARMA3, PAuth2 | FPAC | FPACCombine},
	}
	for _, tt := range tests {
		c, err := FromRegisters(tt.r)
		if err != nil {
			t.Errorf("%s: %v", tt.name, err)
			continue
		}
		if c.Layout.Lower() != tt.halves[0] || c.Layout.Upper() != tt.halves[1] {
			t.Errorf("%s: halves %+v %+v, want %+v", tt.name, c.Layout.Lower(), c.Layout.Upper(), tt.halves)
		}
		if c.Algorithm != tt.alg || c.Features != tt.f || c.Layout.Features() != tt.f {
			t.Errorf("%s: %v %v (layout %v), want %v %v", tt.name, c.Algorithm, c.Features, c.Layout.Features(), tt.alg, tt.f)
		}
		if !c.Generic || c.Clamped != [2]bool{} {
			t.Errorf("%s: Generic %v, Clamped %v", tt.name, c.Generic, c.Clamped)
		}
		// The layout strips a signed kernel return address of the Linux
		// configuration.
		pc := uint64(0xffff_8000_0812_3450)
		if s := c.Layout.Sign(pc, 1, testKey, c.Algorithm); s == pc || c.Layout.Strip(s) != pc {
			t.Errorf("%s: Sign %#x, Strip %#x", tt.name, s, c.Layout.Strip(s))
		}
	}
	_, err := FromRegisters(Registers{TCR: tcrLinux48, ISAR1: isar1QEMU72NoPAC})
	if !errors.Is(err, syscall.ENOSYS) || !strings.Contains(err.Error(), "0x11101100211002") {
		t.Errorf("pauth=off: err = %v, want ErrNotSupported naming the register", err)
	}
}

func TestFromRegistersLevels(t *testing.T) {
	want := map[uint64]Features{1: 0, 2: EPAC, 3: PAuth2, 4: PAuth2 | FPAC, 5: PAuth2 | FPAC | FPACCombine, 6: PAuth2 | FPAC | FPACCombine}
	for _, fld := range []struct {
		name        string
		isar1, isr2 uint64 // the field's position: value 1
		alg         Algorithm
	}{{"APA", 1 << 4, 0, QARMA5}, {"API", 1 << 8, 0, ImpDef}, {"APA3", 0, 1 << 12, QARMA3}} {
		for v := uint64(1); v <= 15; v++ {
			c, err := FromRegisters(Registers{TCR: tcrLinux48, ISAR1: fld.isar1 * v, ISAR2: fld.isr2 * v})
			f, ok := want[v]
			if !ok {
				if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), fmt.Sprintf("%s field", fld.name)) {
					t.Errorf("%s = %d: err = %v, want ErrInvalid naming the field", fld.name, v, err)
				}
				continue
			}
			if err != nil || c.Features != f || c.Algorithm != fld.alg || c.Generic {
				t.Errorf("%s = %d: %+v, %v; want %v %v", fld.name, v, c, err, fld.alg, f)
			}
		}
	}
	// Two algorithms at once is not an implementation.
	_, err := FromRegisters(Registers{ISAR1: 1<<4 | 1<<8})
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "more than one algorithm") {
		t.Errorf("APA and API: err = %v", err)
	}
}

// TestFromRegistersClamp: out-of-range TnSZ is clamped as QEMU's
// aa64_va_parameters does.
func TestFromRegistersClamp(t *testing.T) {
	const (
		tg0_64K = 1 << 14
		tg1_16K = 1 << 30
		tg1_4K  = 2 << 30
		tg1_64K = 3 << 30
		ds      = 1 << 59
		st      = 1 << 28 // ID_AA64MMFR2_EL1.ST
		lva     = 1 << 16 // ID_AA64MMFR2_EL1.VARange
		lpa2_4K = 1 << 28 // ID_AA64MMFR0_EL1.TGran4 = 1
		lpa2_16 = 2 << 20 // ID_AA64MMFR0_EL1.TGran16 = 2
	)
	t1 := func(tsz uint64) uint64 { return tsz << 16 }
	tests := []struct {
		name         string
		tcr          uint64
		mmfr0, mmfr2 uint64
		lower, upper int
		clamped      [2]bool
	}{
		{"in range", 16 | t1(25) | tg1_4K, 0, 0, 48, 39, [2]bool{}},
		{"0 -> 16", 0 | t1(16) | tg1_4K, 0, 0, 48, 48, [2]bool{true, false}},
		{"12 without LVA -> 16", 12 | tg0_64K | t1(12) | tg1_64K, 0, 0, 48, 48, [2]bool{true, true}},
		{"12 with 64K and LVA", 12 | tg0_64K | t1(12) | tg1_64K, 0, lva, 52, 52, [2]bool{}},
		{"12 with 4K, LVA: no", 12 | t1(12) | tg1_4K, 0, lva, 48, 48, [2]bool{true, true}},
		{"12 with DS and 4K LPA2", 12 | t1(12) | tg1_4K | ds, lpa2_4K, 0, 52, 52, [2]bool{}},
		{"12 with DS, 16K LPA2 only", 12 | t1(12) | tg1_16K | ds, lpa2_16, 0, 48, 52, [2]bool{true, false}},
		{"12 with DS, no LPA2", 12 | t1(12) | tg1_4K | ds, 0, 0, 48, 48, [2]bool{true, true}},
		{"63 -> 39 without TTST", 63 | t1(40), 0, 0, 25, 25, [2]bool{true, true}},
		{"39 is the limit", 39 | t1(39) | tg1_4K, 0, 0, 25, 25, [2]bool{}},
		{"63 -> 48 with TTST", 63 | t1(48) | tg1_4K, 0, st, 16, 16, [2]bool{true, false}},
		{"63 -> 47 with TTST, 64K", 63 | tg0_64K | t1(48) | tg1_64K, 0, st, 17, 17, [2]bool{true, true}},
	}
	for _, tt := range tests {
		c, err := FromRegisters(Registers{TCR: tt.tcr, ISAR1: isar1QEMU72Max, MMFR0: tt.mmfr0, MMFR2: tt.mmfr2})
		if err != nil {
			t.Errorf("%s: %v", tt.name, err)
			continue
		}
		if c.Layout.Lower().VABits != tt.lower || c.Layout.Upper().VABits != tt.upper || c.Clamped != tt.clamped {
			t.Errorf("%s: VA bits %d/%d clamped %v, want %d/%d %v", tt.name,
				c.Layout.Lower().VABits, c.Layout.Upper().VABits, c.Clamped, tt.lower, tt.upper, tt.clamped)
		}
	}
	// NewLayoutHalves stays strict about the same sizes.
	if _, err := NewLayoutHalves(Half{VABits: 64}, Half{VABits: 48}, 0); !errors.Is(err, ErrInvalid) {
		t.Errorf("NewLayoutHalves(64 bits): err = %v", err)
	}
}
