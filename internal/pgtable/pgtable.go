// Package pgtable walks arm64 stage-1 translation tables (Arm ARM D8,
// "The AArch64 Virtual Memory System Architecture"; the kernel's
// arch/arm64/include/asm/pgtable-hwdef.h): 4 KiB, 16 KiB and 64 KiB
// granules, VA sizes from 25 to 52 bits, table, block and page descriptors,
// the contiguous hint, and the three output-address formats: the 48-bit
// one, FEAT_LPA with 64 KiB pages (OA[51:48] in descriptor bits [15:12])
// and FEAT_LPA2 with 4 KiB and 16 KiB pages (TCR_ELx.DS = 1: OA[51:50] in
// bits [9:8], OA[49:m] in bits [49:m]).
//
// A walk reads at most one descriptor per level (at most five), checks
// every table address against the memory it is given, and refuses a table
// that points back at a table of the same walk, so hostile tables can
// neither loop nor read outside memory.
package pgtable

import (
	"errors"
	"fmt"

	"github.com/unwindkit/unwindkit/internal/errs"
)

// Format describes a translation regime.
type Format struct {
	// PageShift is the granule: 12 (4 KiB), 14 (16 KiB) or 16 (64 KiB).
	PageShift uint
	// VABits is the VA size translated: 64 - TnSZ.
	VABits uint
	// LPA2 selects the FEAT_LPA2 descriptor format (TCR_ELx.DS = 1; 4K
	// and 16K granules only).
	LPA2 bool
	// LPA selects FEAT_LPA's 52-bit output addresses for 64 KiB pages.
	LPA bool
}

// Validate checks f.
func (f Format) Validate() error {
	switch f.PageShift {
	case 12, 14, 16:
	default:
		return fmt.Errorf("pgtable: granule 2^%d is not 4K, 16K or 64K", f.PageShift)
	}
	if f.VABits < 25 || f.VABits > 52 {
		return fmt.Errorf("pgtable: VA size %d outside [25, 52]", f.VABits)
	}
	if f.LPA2 && f.PageShift == 16 {
		return errors.New("pgtable: LPA2 descriptors need a 4K or 16K granule")
	}
	if f.VABits > 48 && !f.LPA2 && !(f.LPA && f.PageShift == 16) {
		return fmt.Errorf("pgtable: a %d-bit VA needs LPA2 (4K/16K) or 64K pages with LPA", f.VABits)
	}
	return nil
}

// Levels returns the number of lookup levels and the level the walk starts
// at (-1 for a 52-bit VA with 4 KiB pages).
func (f Format) Levels() (n int, start int) {
	bits := f.PageShift - 3
	n = int((f.VABits - f.PageShift + bits - 1) / bits)
	return n, 4 - n
}

// Reader reads the 8-byte little-endian word at physical address pa.
type Reader func(pa uint64) (uint64, error)

// Result is a translation.
type Result struct {
	PA uint64
	// Level is the level of the leaf descriptor (3 for a page, 1 or 2 —
	// 0 with LPA2 and 4K — for a block); Size is the size it maps.
	Level int
	Size  uint64
	// Desc is the leaf descriptor; Contiguous its contiguous hint (bit 52).
	Desc       uint64
	Contiguous bool
	// Tables are the physical addresses of the descriptors read, root
	// first.
	Tables [5]uint64
	Steps  int
}

// ErrNotMapped is wrapped by every translation that ends at an invalid
// descriptor: the address is not mapped.
var ErrNotMapped = errors.New("pgtable: translation fault")

// Error is a malformed table or unreadable descriptor.
type Error struct {
	VA, DescPA uint64
	Level      int
	Msg        string
}

func (e *Error) Error() string {
	return fmt.Sprintf("pgtable: va %#x: level %d descriptor at pa %#x: %s", e.VA, e.Level, e.DescPA, e.Msg)
}

// Unwrap returns errs.ErrCorrupt: malformed or unreadable tables are
// corrupt state (an unmapped address is ErrNotMapped instead).
func (e *Error) Unwrap() error { return errs.ErrCorrupt }

// OA returns the output address of a table, block or page descriptor,
// aligned to shift.
func (f Format) OA(desc uint64, shift uint) uint64 {
	switch {
	case f.LPA2:
		lo := desc & (1<<50 - 1) &^ (1<<shift - 1)
		return lo | (desc>>8&3)<<50
	case f.LPA && f.PageShift == 16:
		lo := desc & (1<<48 - 1) &^ (1<<shift - 1)
		return lo | (desc>>12&0xf)<<48
	}
	return desc & (1<<48 - 1) &^ (1<<shift - 1)
}

// Walk translates va through the table at root (a physical address).
// Only the low VABits of va index the tables: the caller picks the table
// of the half (TTBR0 or TTBR1) va belongs to.
func Walk(f Format, root, va uint64, read Reader) (Result, error) {
	var res Result
	if err := f.Validate(); err != nil {
		return res, err
	}
	n, start := f.Levels()
	table := root &^ 7
	for i := 0; i < n; i++ {
		level, shift, pa := f.step(table, va, i)
		if err := f.loop(res.Tables[:i], table, va, pa, level); err != nil {
			return res, err
		}
		res.Tables[i], res.Steps = pa, i+1
		d, err := read(pa)
		if err != nil {
			return res, &Error{VA: va, DescPA: pa, Level: level, Msg: err.Error()}
		}
		if d&1 == 0 {
			return res, fmt.Errorf("%w: va %#x: level %d descriptor %#x at pa %#x is invalid", ErrNotMapped, va, level, d, pa)
		}
		isTable := d&2 != 0
		if level == 3 {
			if !isTable {
				return res, fmt.Errorf("%w: va %#x: level 3 descriptor %#x at pa %#x is reserved", ErrNotMapped, va, d, pa)
			}
			return f.leaf(res, d, va, shift, level), nil
		}
		if !isTable {
			if !f.blockAt(level) {
				return res, &Error{VA: va, DescPA: pa, Level: level, Msg: fmt.Sprintf("block descriptor %#x not allowed at this level", d)}
			}
			return f.leaf(res, d, va, shift, level), nil
		}
		table = f.OA(d, f.PageShift)
	}
	return res, &Error{VA: va, Level: start + n, Msg: "no leaf"}
}

// step returns the level of the i-th lookup of a walk (0: the first), the
// shift of the address bits it resolves, and the physical address of va's
// descriptor in the table at table.
func (f Format) step(table, va uint64, i int) (level int, shift uint, pa uint64) {
	bits := f.PageShift - 3
	_, start := f.Levels()
	level = start + i
	shift = f.PageShift + uint(3-level)*bits
	idxBits := bits
	if i == 0 {
		idxBits = f.VABits - shift
	}
	return level, shift, table + (va>>shift&(1<<idxBits-1))*8
}

// loop returns the error for a walk of va about to read the descriptor at
// pa, in the table at table, when it has read one from that table already
// (descs: the addresses of the descriptors read, root first), or nil: hostile
// tables that point back cannot make a walk, or Map, go round.
func (f Format) loop(descs []uint64, table, va, pa uint64, level int) error {
	_, start := f.Levels()
	for k, d := range descs {
		if d&^(1<<f.PageShift-1) == table {
			return &Error{VA: va, DescPA: pa, Level: level, Msg: fmt.Sprintf("table %#x is also the level %d table: the tables loop", table, start+k)}
		}
	}
	return nil
}

// blockAt reports whether a block descriptor is allowed at level: levels 1
// and 2 (level 1 only with 4K, or with LPA2/LPA at 16K/64K), and level 0
// with LPA2 and 4K.
func (f Format) blockAt(level int) bool {
	return level == 2 || (level == 1 && (f.PageShift == 12 || f.LPA2 || f.LPA)) || (level == 0 && f.LPA2 && f.PageShift == 12)
}

// Desc returns the output-address bits of a descriptor for oa, which must
// be aligned to what the descriptor maps (a granule for a table): the
// inverse of OA.
func (f Format) Desc(oa uint64) uint64 {
	switch {
	case f.LPA2:
		return oa&(1<<50-1) | (oa>>50&3)<<8
	case f.LPA && f.PageShift == 16:
		return oa&(1<<48-1) | (oa>>48&0xf)<<12
	}
	return oa & (1<<48 - 1)
}

// Memory is physical memory that Map builds tables in.
type Memory interface {
	// Read reads the 8-byte word at pa.
	Read(pa uint64) (uint64, error)
	// Write writes the 8-byte word at pa.
	Write(pa, v uint64) error
	// NewTable returns the physical address of a zeroed, granule-aligned
	// page for a new table.
	NewTable() (uint64, error)
}

// Map makes va translate to pa through the table at root: the inverse of
// Walk, for building translation tables (tests, synthetic images). The leaf
// is at level leaf (3: a page; a lower level: a block, where the format
// allows one) and maps the leaf-sized region holding pa; its descriptor is
// pa's address bits, the valid bit (and the page bit at level 3) and
// attrs. Tables missing on the way are taken from m.NewTable. A mapping
// already on the way (a block where a table is needed) is an error, never
// replaced, and so are tables that point back, as in Walk: after a Map
// that succeeds, Walk translates va to pa.
func Map(f Format, root, va, pa uint64, leaf int, attrs uint64, m Memory) error {
	if err := f.Validate(); err != nil {
		return err
	}
	n, start := f.Levels()
	if leaf < start || leaf > 3 || leaf < 3 && !f.blockAt(leaf) {
		return fmt.Errorf("pgtable: no leaf at level %d in this format", leaf)
	}
	table := root &^ 7
	var descs [5]uint64 // the descriptors' addresses, root first, as Walk's Tables
	for i := 0; i < n; i++ {
		level, shift, slot := f.step(table, va, i)
		if err := f.loop(descs[:i], table, va, slot, level); err != nil {
			return err
		}
		descs[i] = slot
		if level == leaf {
			d := f.Desc(pa&^(1<<shift-1)) | 1 | attrs
			if level == 3 {
				d |= 2
			}
			return m.Write(slot, d)
		}
		d, err := m.Read(slot)
		if err != nil {
			return err
		}
		switch d & 3 {
		case 3: // a table
		case 1:
			return &Error{VA: va, DescPA: slot, Level: level, Msg: fmt.Sprintf("block descriptor %#x where a table is needed", d)}
		default:
			t, err := m.NewTable()
			if err != nil {
				return err
			}
			d = f.Desc(t) | 3
			if err := m.Write(slot, d); err != nil {
				return err
			}
		}
		table = f.OA(d, f.PageShift)
	}
	return nil
}

func (f Format) leaf(res Result, d, va uint64, shift uint, level int) Result {
	res.Desc, res.Level, res.Size = d, level, 1<<shift
	res.Contiguous = d>>52&1 != 0
	res.PA = f.OA(d, shift) | va&(1<<shift-1)
	return res
}
