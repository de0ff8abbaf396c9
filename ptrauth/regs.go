package ptrauth

import (
	"fmt"

	"github.com/unwindkit/unwindkit/internal/errs"
)

// Registers are the system register values that decide how pointer
// authentication behaves at EL1 and EL0, as a debugger, a crash dump or
// the kernel reads them. [FromRegisters] turns them into a [Config].
type Registers struct {
	// TCR is TCR_EL1: T0SZ [5:0], TG0 [15:14], T1SZ [21:16], TG1 [31:30],
	// TBI0 [37], TBI1 [38], TBID0 [51], TBID1 [52], DS [59]. Other bits
	// are ignored.
	TCR uint64
	// ISAR1 is ID_AA64ISAR1_EL1: APA [7:4] (QARMA5), API [11:8]
	// (implementation defined), GPA [27:24], GPI [31:28].
	ISAR1 uint64
	// ISAR2 is ID_AA64ISAR2_EL1: GPA3 [11:8], APA3 [15:12] (QARMA3).
	ISAR2 uint64
	// MMFR0 is ID_AA64MMFR0_EL1, read only for TCR.DS: TGran16 [23:20] =
	// 2 or TGran4 [31:28] = 1 say that granule supports 52-bit VAs
	// (FEAT_LPA2). Zero means no LPA2.
	MMFR0 uint64
	// MMFR2 is ID_AA64MMFR2_EL1, read only for the TnSZ limits: ST
	// [31:28] (FEAT_TTST, TnSZ up to 48) and VARange [19:16] (FEAT_LVA,
	// 52-bit VAs with 64 KiB pages). Zero means neither.
	MMFR2 uint64
}

// Config is what [FromRegisters] found: the layout (with its features),
// the PAC algorithm, and how the registers were read.
type Config struct {
	// Layout is the VA layout from TCR_EL1 with Features set.
	Layout Layout
	// Algorithm is QARMA5 (APA), ImpDef (API) or QARMA3 (APA3).
	Algorithm Algorithm
	// Features is Layout.Features(): the level of the APA, API or APA3
	// field.
	Features Features
	// Generic reports PACGA support (GPA, GPI or GPA3 non-zero).
	Generic bool
	// Clamped reports, for the lower and upper half, that TnSZ was out of
	// range and was clamped (see FromRegisters).
	Clamped [2]bool
}

// FromRegisters returns the pointer-authentication configuration of EL1
// and EL0 (the EL1&0 translation regime) described by r.
//
// The algorithm is the one whose ID field is non-zero: APA selects
// QARMA5, API the implementation-defined algorithm (modelled as QEMU's
// [ImpDef]), APA3 QARMA3; more than one is an error wrapping [ErrInvalid],
// none is an error wrapping ErrNotSupported (no FEAT_PAuth). The field's
// level gives the features: 0b0001 PAuth1, 0b0010 [EPAC], 0b0011
// [PAuth2], 0b0100 PAuth2|[FPAC], 0b0101 PAuth2|FPAC|[FPACCombine], and
// 0b0110 (FEAT_PAuth_LR, which adds instructions but does not change
// AddPAC or Auth) is read as 0b0101; higher values are reserved and are an
// error wrapping ErrInvalid.
//
// TnSZ outside its permitted range is CONSTRAINED UNPREDICTABLE in the Arm
// ARM (CalculateBottomPACBit may use it as it is or force it into range).
// FromRegisters clamps it as QEMU does (aa64_va_parameters): the maximum
// is 39, or with FEAT_TTST 48 (47 with 64 KiB pages); the minimum is 16,
// or 12 with 64 KiB pages and FEAT_LVA, or with TCR.DS set and FEAT_LPA2
// for the granule. A reserved TGn encoding is read as 4 KiB pages.
// Config.Clamped says which halves were clamped. [NewLayoutHalves], which
// takes VA sizes, stays strict.
func FromRegisters(r Registers) (Config, error) {
	var c Config
	apa, api, apa3 := field(r.ISAR1, 4), field(r.ISAR1, 8), field(r.ISAR2, 12)
	var level uint64
	n := 0
	for _, a := range []struct {
		v   uint64
		alg Algorithm
	}{{apa, QARMA5}, {api, ImpDef}, {apa3, QARMA3}} {
		if a.v != 0 {
			level, c.Algorithm = a.v, a.alg
			n++
		}
	}
	switch {
	case n == 0:
		return Config{}, fmt.Errorf("ptrauth: ID_AA64ISAR1_EL1 %#x, ID_AA64ISAR2_EL1 %#x: APA, API and APA3 are 0, no pointer authentication: %w",
			r.ISAR1, r.ISAR2, errs.ErrNotSupported)
	case n > 1:
		return Config{}, fmt.Errorf("%w: ID_AA64ISAR1_EL1.APA = %d, API = %d, ID_AA64ISAR2_EL1.APA3 = %d: more than one algorithm",
			ErrInvalid, apa, api, apa3)
	}
	switch level {
	case 1:
		c.Features = 0
	case 2:
		c.Features = EPAC
	case 3:
		c.Features = PAuth2
	case 4:
		c.Features = PAuth2 | FPAC
	case 5, 6:
		c.Features = PAuth2 | FPAC | FPACCombine
	default:
		return Config{}, fmt.Errorf("%w: %s field of ID_AA64ISAR%s_EL1 = %#x is reserved",
			ErrInvalid, c.Algorithm.fieldName(), c.Algorithm.isarNumber(), level)
	}
	c.Generic = field(r.ISAR1, 24) != 0 || field(r.ISAR1, 28) != 0 || field(r.ISAR2, 8) != 0

	tcr := r.TCR
	var halves [2]Half
	for i := range halves {
		var tsz, tg uint64
		var tbi, tbid bool
		if i == 0 {
			tsz, tg = tcr&0x3f, granule0(tcr>>14&3)
			tbi, tbid = tcr>>37&1 != 0, tcr>>51&1 != 0
		} else {
			tsz, tg = tcr>>16&0x3f, granule1(tcr>>30&3)
			tbi, tbid = tcr>>38&1 != 0, tcr>>52&1 != 0
		}
		lo, hi := tszLimits(tg, tcr>>59&1 != 0, r.MMFR0, r.MMFR2)
		if tsz < lo {
			tsz, c.Clamped[i] = lo, true
		} else if tsz > hi {
			tsz, c.Clamped[i] = hi, true
		}
		halves[i] = Half{VABits: 64 - int(tsz), TBI: tbi, TBID: tbid}
	}
	l, err := NewLayoutHalves(halves[0], halves[1], c.Features)
	if err != nil {
		return Config{}, err // cannot happen: the limits keep VABits in [16, 52]
	}
	c.Layout = l
	return c, nil
}

// field returns the 4-bit ID register field at bit lsb.
func field(reg uint64, lsb uint) uint64 { return reg >> lsb & 0xf }

// Page granules, in bits of page offset.
const (
	gran4K  = 12
	gran16K = 14
	gran64K = 16
)

// granule0 decodes TCR_EL1.TG0 (0b00 4K, 0b01 64K, 0b10 16K).
func granule0(tg uint64) uint64 {
	switch tg {
	case 1:
		return gran64K
	case 2:
		return gran16K
	}
	return gran4K
}

// granule1 decodes TCR_EL1.TG1 (0b01 16K, 0b10 4K, 0b11 64K).
func granule1(tg uint64) uint64 {
	switch tg {
	case 1:
		return gran16K
	case 3:
		return gran64K
	}
	return gran4K
}

// tszLimits returns the permitted TnSZ range for a granule, as QEMU
// computes it.
func tszLimits(gran uint64, ds bool, mmfr0, mmfr2 uint64) (lo, hi uint64) {
	hi = 39
	if field(mmfr2, 28) != 0 { // FEAT_TTST
		hi = 48
		if gran == gran64K {
			hi = 47
		}
	}
	lo = 16
	switch {
	case gran == gran64K:
		if field(mmfr2, 16) != 0 { // FEAT_LVA
			lo = 12
		}
	case ds && gran == gran16K && field(mmfr0, 20) == 2,
		ds && gran == gran4K && field(mmfr0, 28) == 1: // FEAT_LPA2
		lo = 12
	}
	return lo, hi
}

func (a Algorithm) fieldName() string {
	switch a {
	case ImpDef:
		return "API"
	case QARMA3:
		return "APA3"
	}
	return "APA"
}

func (a Algorithm) isarNumber() string {
	if a == QARMA3 {
		return "2"
	}
	return "1"
}
