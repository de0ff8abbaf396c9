package ptrauth

import "fmt"

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

// Features selects the pointer-authentication architecture version.
type Features uint8

const (
	// PAuth2 (FEAT_PAuth2): AddPAC XORs the PAC into the field, and a
	// failed Auth returns the pointer XOR the PAC (bit 55's copies
	// corrupted) rather than writing an error code.
	PAuth2 Features = 1 << iota
	// FPAC (FEAT_FPAC): a failed Auth is reported as an error (a fault),
	// not as a poisoned pointer.
	FPAC
)

// Layout is the VA layout that decides which bits of a pointer form its
// pointer-authentication code (PAC) field, plus the PAuth features.
//
// The zero Layout has no PAC field: Strip is the identity. Build layouts
// with NewLayout or NewLayoutHalves.
type Layout struct {
	half [2]Half
	feat Features
	// mask[h] is the PAC field of an instruction pointer in half h.
	mask [2]uint64
	// flip is mask[0] ^ mask[1], so that Strip selects a mask without a
	// load that depends on the pointer.
	flip uint64
}

// NewLayout returns the layout with the same VA size and TBI setting in
// both halves, TBID clear, and PAuth2 features (as recent cores and QEMU's
// "max" CPU have). It panics if vaBits is outside [16, 52]; use
// NewLayoutHalves for an error instead.
func NewLayout(vaBits int, tbi bool) Layout {
	h := Half{VABits: vaBits, TBI: tbi}
	l, err := NewLayoutHalves(h, h, PAuth2)
	if err != nil {
		panic(err)
	}
	return l
}

// NewLayoutHalves returns the layout with separate lower (bit 55 clear)
// and upper (bit 55 set) halves and the given features.
func NewLayoutHalves(lower, upper Half, f Features) (Layout, error) {
	l := Layout{half: [2]Half{lower, upper}, feat: f}
	for i, h := range l.half {
		if h.VABits < 16 || h.VABits > 52 {
			return Layout{}, fmt.Errorf("ptrauth: %s half: VA size %d bits outside [16, 52]", halfName(i), h.VABits)
		}
		l.mask[i] = fieldMask(h.VABits, h.TBI && !h.TBID)
	}
	l.flip = l.mask[0] ^ l.mask[1]
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

// WithFeatures returns a copy of l with features f.
func (l Layout) WithFeatures(f Features) Layout { l.feat = f; return l }

// PACMask returns the PAC field of an instruction pointer with the given
// value of bit 55.
func (l Layout) PACMask(bit55 bool) uint64 {
	if bit55 {
		return l.mask[1]
	}
	return l.mask[0]
}

// Strip removes the PAC from an instruction pointer, as XPACI and XPACLRI
// do: every bit of the PAC field becomes a copy of bit 55. Bits outside the
// field (the address, bit 55, and with TBI the tag byte) are kept.
//
// Strip is a mask and a select, seven ALU operations without branches,
// small enough to inline into an unwinder's inner loop.
func (l Layout) Strip(ptr uint64) uint64 {
	s := uint64(int64(ptr<<8) >> 63) // bit 55 copied into every bit
	m := l.mask[0] ^ l.flip&s        // the field of ptr's half
	return ptr ^ (ptr^s)&m           // field bits := bit 55
}
