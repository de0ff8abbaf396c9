package vmcore

import (
	"encoding/binary"
	"fmt"

	"github.com/unwindkit/unwindkit/internal/pgtable"
)

// ErrNotMapped is wrapped by translations of addresses the page tables do
// not map.
var ErrNotMapped = pgtable.ErrNotMapped

// translator is the kernel's translation regime (TTBR1: swapper_pg_dir).
type translator struct {
	fmt   pgtable.Format
	root  uint64 // physical address of swapper_pg_dir
	how   string
	ready bool
}

// init picks the descriptor format: a 52-bit VA (TCR_EL1_T1SZ 12) with 4K
// or 16K pages is FEAT_LPA2; a kernel built for 52 bits running with 48
// may still use LPA2 descriptors (TCR_EL1.DS), which VMCOREINFO does not
// say, so each candidate format is checked by translating swapper_pg_dir's
// own address, whose physical address the image offset gives.
func (t *translator) init(v *Vmcore) error {
	in := &v.Info
	t.root = in.SwapperPgDir - in.KimageVoffset
	shift := uint(12)
	switch in.PageSize {
	case 16384:
		shift = 14
	case 65536:
		shift = 16
	}
	base := pgtable.Format{PageShift: shift, VABits: uint(in.VABitsActual)}
	var cands []pgtable.Format
	switch {
	case shift == 16:
		base.LPA = in.VABits == 52
		cands = []pgtable.Format{base}
	case in.VABitsActual == 52:
		base.LPA2 = true
		cands = []pgtable.Format{base}
	case in.VABits == 52:
		lpa2 := base
		lpa2.LPA2 = true
		cands = []pgtable.Format{lpa2, base}
	default:
		cands = []pgtable.Format{base}
	}
	for _, c := range cands {
		if err := c.Validate(); err != nil {
			return v.f.Errf("VMCOREINFO", v.infoOff, "%v", err)
		}
	}
	read := func(pa uint64) (uint64, error) { return v.ReadPhys64(pa) }
	for _, c := range cands {
		r, err := pgtable.Walk(c, t.root, in.SwapperPgDir, read)
		if err == nil && r.PA == t.root {
			t.fmt, t.ready = c, true
			t.how = fmt.Sprintf("%dK pages, %d-bit VA, LPA2 %v: checked by translating swapper_pg_dir", 1<<shift>>10, c.VABits, c.LPA2)
			return nil
		}
	}
	t.fmt, t.ready = cands[len(cands)-1], true
	t.how = fmt.Sprintf("%dK pages, %d-bit VA, LPA2 %v: unchecked (swapper_pg_dir does not translate to itself)", 1<<shift>>10, t.fmt.VABits, t.fmt.LPA2)
	return nil
}

// Translation describes the regime Translate uses, and how it was chosen.
func (v *Vmcore) Translation() string { return v.tr.how }

// Translate returns the physical address of the kernel virtual address va
// by walking the page tables from swapper_pg_dir. Unmapped addresses give
// an error wrapping ErrNotMapped; malformed tables an error naming the
// level and the descriptor's physical address.
func (v *Vmcore) Translate(va uint64) (uint64, error) {
	if !v.tr.ready {
		return 0, fmt.Errorf("%s: va %#x: no VMCOREINFO: virtual addresses cannot be translated", v.Path, va)
	}
	read := func(pa uint64) (uint64, error) { return v.ReadPhys64(pa) }
	r, err := pgtable.Walk(v.tr.fmt, v.tr.root, va, read)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", v.Path, err)
	}
	return r.PA, nil
}

// LinearToPhys returns the physical address of a linear-map address
// (__pa of a lowmem pointer): va - PAGE_OFFSET + PHYS_OFFSET.
func (v *Vmcore) LinearToPhys(va uint64) (uint64, bool) {
	if !v.HasInfo || va < v.PageOffset || va-v.PageOffset >= 1<<(v.Info.VABits-1) {
		return 0, false
	}
	return va - v.PageOffset + v.Info.PhysOffset, true
}

// PhysToLinear returns the linear-map address of pa (__va).
func (v *Vmcore) PhysToLinear(pa uint64) uint64 { return pa - v.Info.PhysOffset + v.PageOffset }

// ImageToPhys returns the physical address of a kernel image address
// (__pa_symbol): va - kimage_voffset.
func (v *Vmcore) ImageToPhys(va uint64) uint64 { return va - v.Info.KimageVoffset }

// ReadVirt reads len(b) bytes at kernel virtual address va, translating
// each page through the page tables; a [Vmcore.Virtual] dump is read at
// va directly (the kernel translates /proc/kcore's reads itself, and
// gives zeros for what is not mapped).
func (v *Vmcore) ReadVirt(b []byte, va uint64) error {
	if v.Virtual {
		return v.readFile(b, va)
	}
	ps := v.pageSize()
	for len(b) > 0 {
		pa, err := v.Translate(va)
		if err != nil {
			return err
		}
		n := min(uint64(len(b)), ps-va%ps)
		if err := v.ReadPhys(b[:n], pa); err != nil {
			return fmt.Errorf("va %#x: %w", va, err)
		}
		b, va = b[n:], va+n
	}
	return nil
}

// ReadVirt64 reads the little-endian word at va.
func (v *Vmcore) ReadVirt64(va uint64) (uint64, error) {
	var b [8]byte
	if err := v.ReadVirt(b[:], va); err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint64(b[:]), nil
}
