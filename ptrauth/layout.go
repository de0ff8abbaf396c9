package ptrauth

import (
	"errors"
	"fmt"
)

// ErrInvalid reports an invalid pointer-authentication configuration or
// argument: a feature set the architecture does not allow, an unknown
// [Algorithm] or [KeyID], a reserved ID register value. It is returned
// wrapped, with the field or value named.
var ErrInvalid = errors.New("ptrauth: invalid configuration")

// Half describes one translation half of the virtual address space: the
// lower (TTBR0, user) half when bit 55 of a pointer is 0, the upper (TTBR1,
// kernel) half when it is 1.
type Half struct {
	// VABits is the virtual address size, 64 - TnSZ. The lowest PAC bit is
	// bit VABits. Valid values are 16 to 52.
	VABits int
	// TBI is TCR_ELx.TBIn: top-byte-ignore. With TBI bits 63:56 are a tag,
	// not part of the PAC field.
	TBI bool
	// TBID is TCR_ELx.TBIDn: TBI applies to data addresses only, so for
	// instruction addresses (return addresses) the top byte is PAC field.
	TBID bool
}

// tbi reports whether the top byte is ignored for this kind of access (the
// Arm ARM's EffectiveTBI): always with TBI for data, and for instruction
// addresses only when TBID is clear.
func (h Half) tbi(data bool) bool { return h.TBI && (data || !h.TBID) }

// Features selects the pointer-authentication architecture version. The
// zero value is FEAT_PAuth (PAuth1). The valid sets are the levels of the
// ID_AA64ISAR1_EL1.APA/API and ID_AA64ISAR2_EL1.APA3 fields: 0, [EPAC],
// [PAuth2], PAuth2|[FPAC] and PAuth2|FPAC|[FPACCombine].
type Features uint8

const (
	// PAuth2 (FEAT_PAuth2): AddPAC XORs the PAC into the field, and a
	// failed Auth returns the pointer XOR the PAC (bit 55's copies
	// corrupted) rather than writing an error code.
	PAuth2 Features = 1 << iota
	// FPAC (FEAT_FPAC, requires PAuth2): a failed stand-alone
	// authentication (AUTIA, AUTIASP, AUTDA, ...) is reported as an error
	// (a fault), not as a poisoned pointer.
	FPAC
	// FPACCombine (FEAT_FPACCOMBINE, requires FPAC): the authentication
	// inside a combined instruction (RETAA, BRAA, BLRAA, ERETAA, LDRAA) also
	// faults; with FPAC alone it returns the poisoned pointer. See
	// [Layout.AuthCombined].
	FPACCombine
	// EPAC (FEAT_EPAC, the level between PAuth1 and PAuth2): AddPAC of a
	// pointer with bad extension bits inserts a zero PAC instead of
	// inverting one bit. Not valid together with PAuth2, which replaces it.
	EPAC

	allFeatures = PAuth2 | FPAC | FPACCombine | EPAC
)

// String returns the set's names joined by "|", "PAuth1" for the zero set.
func (f Features) String() string {
	if f == 0 {
		return "PAuth1"
	}
	s := ""
	for _, n := range []struct {
		b    Features
		name string
	}{{EPAC, "EPAC"}, {PAuth2, "PAuth2"}, {FPAC, "FPAC"}, {FPACCombine, "FPACCombine"}} {
		if f&n.b != 0 {
			if s != "" {
				s += "|"
			}
			s += n.name
		}
	}
	if rest := f &^ allFeatures; rest != 0 {
		if s != "" {
			s += "|"
		}
		s += fmt.Sprintf("%#x", uint8(rest))
	}
	return s
}

// Valid returns nil if f is a feature set the architecture allows, else an
// error wrapping [ErrInvalid] that names the problem.
func (f Features) Valid() error {
	switch {
	case f&^allFeatures != 0:
		return fmt.Errorf("%w: unknown feature bits %#x", ErrInvalid, uint8(f&^allFeatures))
	case f&FPAC != 0 && f&PAuth2 == 0:
		return fmt.Errorf("%w: FPAC without PAuth2", ErrInvalid)
	case f&FPACCombine != 0 && f&FPAC == 0:
		return fmt.Errorf("%w: FPACCombine without FPAC", ErrInvalid)
	case f&EPAC != 0 && f&PAuth2 != 0:
		return fmt.Errorf("%w: EPAC together with PAuth2", ErrInvalid)
	}
	return nil
}

// Masks are one layout's PAC fields for one kind of pointer (instruction
// or data), in the form a loop can keep in two registers. Get them once
// with [Layout.InsnMasks] or [Layout.DataMasks] outside the loop and call
// [Masks.Strip] inside it: it inlines to seven ALU operations without a
// branch or a memory load, which is what an unwinder copying thousands of
// return addresses wants. The zero Masks strip nothing.
type Masks struct {
	lower uint64 // the PAC field of a pointer with bit 55 clear
	flip  uint64 // lower XOR the field of a pointer with bit 55 set
}

// Field returns the PAC field of a pointer with the given value of bit 55.
func (m Masks) Field(bit55 bool) uint64 {
	if bit55 {
		return m.lower ^ m.flip
	}
	return m.lower
}

// Strip makes every bit of ptr's PAC field a copy of bit 55 (XPACI or
// XPACD, by which masks m are), keeping all other bits.
func (m Masks) Strip(ptr uint64) uint64 {
	s := uint64(int64(ptr<<8) >> 63) // bit 55 copied into every bit
	f := m.lower ^ m.flip&s          // the field of ptr's half
	return ptr ^ (ptr^s)&f           // field bits := bit 55
}

// Layout is the VA layout that decides which bits of a pointer form its
// pointer-authentication code (PAC) field, plus the PAuth features.
//
// The zero Layout has no PAC field: Strip is the identity. Build layouts
// with [NewLayout], [NewLayoutHalves] or [FromRegisters].
type Layout struct {
	half [2]Half
	feat Features
	insn Masks // the PAC fields of instruction pointers
	data Masks // the PAC fields of data pointers
}

// NewLayout returns the layout with the same VA size and TBI setting in
// both halves, TBID clear, and PAuth2 features. It panics if vaBits is
// outside [16, 52]; use NewLayoutHalves for an error instead.
func NewLayout(vaBits int, tbi bool) Layout {
	h := Half{VABits: vaBits, TBI: tbi}
	l, err := NewLayoutHalves(h, h, PAuth2)
	if err != nil {
		panic(err)
	}
	return l
}

// NewLayoutHalves returns the layout with separate lower (bit 55 clear)
// and upper (bit 55 set) halves and the given features. It is strict: a VA
// size outside [16, 52] or an invalid feature set (see [Features.Valid])
// is an error wrapping [ErrInvalid]. ([FromRegisters] instead clamps an
// out-of-range TnSZ, as QEMU does.)
func NewLayoutHalves(lower, upper Half, f Features) (Layout, error) {
	if err := f.Valid(); err != nil {
		return Layout{}, err
	}
	l := Layout{half: [2]Half{lower, upper}, feat: f}
	var insn, data [2]uint64
	for i, h := range l.half {
		if h.VABits < 16 || h.VABits > 52 {
			return Layout{}, fmt.Errorf("%w: %s half: VA size %d bits outside [16, 52]", ErrInvalid, halfName(i), h.VABits)
		}
		insn[i] = fieldMask(h.VABits, h.tbi(false))
		data[i] = fieldMask(h.VABits, h.tbi(true))
	}
	l.insn = Masks{lower: insn[0], flip: insn[0] ^ insn[1]}
	l.data = Masks{lower: data[0], flip: data[0] ^ data[1]}
	return l, nil
}

func halfName(i int) string {
	if i == 0 {
		return "lower"
	}
	return "upper"
}

// fieldMask returns the PAC field: bits 54:vaBits, plus 63:56 without TBI.
func fieldMask(vaBits int, tbi bool) uint64 {
	m := (uint64(1)<<55 - 1) &^ (uint64(1)<<vaBits - 1)
	if !tbi {
		m |= 0xff << 56
	}
	return m
}

// Lower returns the lower half's description.
func (l Layout) Lower() Half { return l.half[0] }

// Upper returns the upper half's description.
func (l Layout) Upper() Half { return l.half[1] }

// Features returns the layout's PAuth features.
func (l Layout) Features() Features { return l.feat }

// WithFeatures returns a copy of l with features f. It panics if f is not
// valid ([Features.Valid]); use NewLayoutHalves for an error instead.
func (l Layout) WithFeatures(f Features) Layout {
	if err := f.Valid(); err != nil {
		panic(err)
	}
	l.feat = f
	return l
}

// PACMask returns the PAC field of an instruction pointer with the given
// value of bit 55.
func (l Layout) PACMask(bit55 bool) uint64 { return l.insn.Field(bit55) }

// InsnMasks returns the PAC fields of instruction pointers (return
// addresses), for [Masks.Strip] in a loop: l.InsnMasks().Strip(p) ==
// l.Strip(p) for every p.
func (l Layout) InsnMasks() Masks { return l.insn }

// InsnMasksPtr is [Layout.InsnMasks] through a pointer: it reads the two
// masks without copying the Layout, for the setup of a loop over a struct
// that holds one. l.InsnMasksPtr() == l.InsnMasks().
func (l *Layout) InsnMasksPtr() Masks { return l.insn }

// DataMasks returns the PAC fields of data pointers: with TBI the top byte
// is a tag even when TBID is set. l.DataMasks().Strip(p) ==
// l.StripData(p) for every p.
func (l Layout) DataMasks() Masks { return l.data }

// Strip removes the PAC from an instruction pointer, as XPACI and XPACLRI
// do (the Arm ARM's Strip with data FALSE): every bit of the PAC field
// becomes a copy of bit 55. Bits outside the field (the address, bit 55,
// and with TBI and without TBID the tag byte) are kept.
//
// Strip is a mask and a select, seven ALU operations without branches,
// small enough to inline into an unwinder's inner loop; a loop that wants
// the masks in registers calls [Layout.InsnMasks] once and [Masks.Strip]
// per pointer.
func (l Layout) Strip(ptr uint64) uint64 { return l.insn.Strip(ptr) }

// StripData removes the PAC from a data pointer, as XPACD does (Strip with
// data TRUE): like [Layout.Strip], except that with TBI the tag byte is
// kept whatever TBID says.
func (l Layout) StripData(ptr uint64) uint64 { return l.data.Strip(ptr) }
