package debuginfo

import (
	"debug/dwarf"
	"encoding/binary"
	"fmt"
	"slices"
)

// unitHdr is one unit of .debug_info, from its header alone.
type unitHdr struct {
	off, end uint64 // [off, end): the unit, header included
	die      uint64 // the offset of its first DIE
	version  int
	utype    uint8 // DWARF 5's unit type; 1 (compile) before version 5
	asize    int   // address size
	abbrev   uint64
}

// DWARF 5 unit types (DWARF 5 section 7.5.1).
const (
	utCompile = 0x01
	utPartial = 0x03
)

// unitAt reads the unit header at off in .debug_info.
func (f *File) unitAt(off uint64) (unitHdr, error) {
	bad := func(what string, args ...any) (unitHdr, error) {
		return unitHdr{}, fmt.Errorf("%s: %w: .debug_info unit at offset %#x: %s", f.name, ErrCorrupt, off, fmt.Sprintf(what, args...))
	}
	b, err := f.infoBytes(off, 24)
	if err != nil {
		return unitHdr{}, err
	}
	order := f.ef.ByteOrder
	if len(b) < 4 {
		return bad("truncated unit length")
	}
	l, hdr, offsz := uint64(order.Uint32(b)), uint64(4), 4
	switch {
	case l == 0xffffffff:
		if len(b) < 12 {
			return bad("truncated 64-bit unit length")
		}
		l, hdr, offsz = order.Uint64(b[4:]), 12, 8
	case l >= 0xfffffff0:
		return bad("reserved unit length %#x", l)
	}
	size := f.infoSize()
	if l > size || off+hdr+l > size {
		return bad("length %#x runs past the section's end (%#x)", l, size)
	}
	u := unitHdr{off: off, end: off + hdr + l, utype: utCompile}
	p := b[hdr:]
	if l < 2 || len(p) < 2 {
		return bad("truncated header")
	}
	u.version = int(order.Uint16(p))
	if u.version < 2 || u.version > 5 {
		return bad("unsupported DWARF version %d", u.version)
	}
	p = p[2:]
	if u.version >= 5 {
		if len(p) < 2 {
			return bad("truncated header")
		}
		u.utype, u.asize = p[0], int(p[1])
		p = p[2:]
	}
	if len(p) < offsz {
		return bad("truncated header")
	}
	if offsz == 8 {
		u.abbrev = order.Uint64(p)
	} else {
		u.abbrev = uint64(order.Uint32(p))
	}
	if u.version < 5 {
		if len(p) < offsz+1 {
			return bad("truncated header")
		}
		u.asize = int(p[offsz])
	}
	// length, version, [unit type, address size,] abbrev offset, [address size]
	u.die = off + hdr + 2 + 1 + uint64(offsz)
	if u.version >= 5 {
		u.die++
		switch u.utype {
		case 0x04, 0x05: // skeleton, split compile: the unit ID
			u.die += 8
		case 0x02, 0x06: // type, split type: signature and type offset
			u.die += 8 + uint64(offsz)
		}
	}
	if u.die > u.end {
		return bad("header longer than the unit")
	}
	return u, nil
}

// arange is one address range of a compilation unit.
type arange struct {
	lo, hi uint64
	unit   uint64 // the unit header's offset in .debug_info
}

// rangeSet finds the ranges holding an address among possibly
// overlapping ranges: sorted by lo, with the running maximum of hi.
type rangeSet struct {
	r     []arange
	maxHi []uint64
}

func newRangeSet(r []arange) rangeSet {
	slices.SortStableFunc(r, func(a, b arange) int {
		switch {
		case a.lo < b.lo:
			return -1
		case a.lo > b.lo:
			return 1
		}
		return 0
	})
	m := make([]uint64, len(r))
	var hi uint64
	for i, a := range r {
		hi = max(hi, a.hi)
		m[i] = hi
	}
	return rangeSet{r, m}
}

// find calls fn with the index of each range holding pc, nearest start
// first, until fn returns false.
func (s *rangeSet) find(pc uint64, fn func(i int) bool) {
	i, _ := slices.BinarySearchFunc(s.r, pc, func(a arange, pc uint64) int {
		if a.lo <= pc {
			return -1
		}
		return 1
	})
	for i--; i >= 0 && s.maxHi[i] > pc; i-- {
		if s.r[i].hi > pc && !fn(i) {
			return
		}
	}
}

// cuIndex maps addresses to compilation units.
type cuIndex struct {
	aranges rangeSet
	listed  map[uint64]bool // units .debug_aranges describes
	scanned bool            // the other units' ranges are in scan
	scan    rangeSet
}

// cuFor returns the offsets of the units whose ranges hold pc, those of
// .debug_aranges first; the units .debug_aranges leaves out are scanned
// (once) only when it has no answer.
func (f *File) cuFor(pc uint64) ([]uint64, error) {
	if f.index == nil {
		ix, err := f.readAranges()
		if err != nil {
			return nil, err
		}
		f.index = ix
	}
	ix := f.index
	out := f.cands[:0]
	add := func(s *rangeSet) func(int) bool {
		return func(i int) bool {
			if u := s.r[i].unit; !slices.Contains(out, u) {
				out = append(out, u)
			}
			return len(out) < 8
		}
	}
	ix.aranges.find(pc, add(&ix.aranges))
	if len(out) > 0 {
		return out, nil
	}
	if !ix.scanned {
		if err := f.scanUnits(ix); err != nil {
			return nil, err
		}
	}
	ix.scan.find(pc, add(&ix.scan))
	return out, nil
}

// readAranges reads .debug_aranges (DWARF 5 section 6.1.2), if any.
func (f *File) readAranges() (*cuIndex, error) {
	ix := &cuIndex{listed: map[uint64]bool{}}
	b, err := f.sectionData(".debug_aranges")
	if err != nil {
		return nil, err
	}
	order := f.ef.ByteOrder
	var r []arange
	infoSize := f.infoSize()
	for off := uint64(0); off < uint64(len(b)); {
		bad := func(what string, args ...any) (*cuIndex, error) {
			return nil, fmt.Errorf("%s: %w: .debug_aranges set at offset %#x: %s", f.name, ErrCorrupt, off, fmt.Sprintf(what, args...))
		}
		p := b[off:]
		if len(p) < 4 {
			return bad("truncated length")
		}
		l, hdr, offsz := uint64(order.Uint32(p)), uint64(4), 4
		if l == 0xffffffff {
			if len(p) < 12 {
				return bad("truncated 64-bit length")
			}
			l, hdr, offsz = order.Uint64(p[4:]), 12, 8
		} else if l >= 0xfffffff0 {
			return bad("reserved length %#x", l)
		}
		if l > uint64(len(p))-hdr {
			return bad("length %#x runs past the section's end", l)
		}
		set := p[:hdr+l]
		q := set[hdr:]
		if len(q) < 2+offsz+2 {
			return bad("truncated header")
		}
		if v := order.Uint16(q); v != 2 {
			return bad("unsupported version %d", v)
		}
		var unit uint64
		if offsz == 8 {
			unit = order.Uint64(q[2:])
		} else {
			unit = uint64(order.Uint32(q[2:]))
		}
		asize, segsize := int(q[2+offsz]), int(q[3+offsz])
		if asize != 8 && asize != 4 {
			return bad("address size %d", asize)
		}
		if segsize != 0 {
			return bad("segment selector size %d", segsize)
		}
		if unit >= infoSize {
			return bad("unit offset %#x outside .debug_info (%#x bytes)", unit, infoSize)
		}
		ix.listed[unit] = true
		tuple := uint64(2 * asize)
		pos := (hdr + 2 + uint64(offsz) + 2 + tuple - 1) / tuple * tuple
		for ; pos+tuple <= uint64(len(set)); pos += tuple {
			lo, n := readAddr(order, set[pos:], asize), readAddr(order, set[pos+uint64(asize):], asize)
			if lo == 0 && n == 0 {
				break
			}
			if lo == 0 || n == 0 || lo+n < lo {
				continue // discarded code (address 0) or empty
			}
			r = append(r, arange{lo, lo + n, unit})
		}
		off += hdr + l
	}
	ix.aranges = newRangeSet(r)
	return ix, nil
}

func readAddr(order binary.ByteOrder, b []byte, size int) uint64 {
	if size == 4 {
		return uint64(order.Uint32(b))
	}
	return order.Uint64(b)
}

// scanUnits reads the header and the top-level DIE of every compile unit
// .debug_aranges does not list, for its ranges. Its cost is bounded: the
// unit headers are walked in order, and the abbreviation tables parsed are
// at most scanAbbrevFactor times .debug_abbrev plus a fixed budget, shared
// tables counted each time.
func (f *File) scanUnits(ix *cuIndex) error {
	abbrev, err := f.sectionData(".debug_abbrev")
	if err != nil {
		return err
	}
	budget := uint64(len(abbrev))*scanAbbrevFactor + scanAbbrevBudget
	var r []arange
	size := f.infoSize()
	rangeBudget := int(min(size, 1<<40)) + 1<<16
	for off := uint64(0); off < size; {
		h, err := f.unitAt(off)
		if err != nil {
			return err
		}
		off = h.end
		if ix.listed[h.off] || (h.utype != utCompile && h.utype != utPartial) {
			continue
		}
		n, _, err := f.abbrevTable(abbrev, h)
		if err != nil {
			return err
		}
		if n > budget {
			return fmt.Errorf("%s: %w: .debug_info unit at offset %#x: the units' abbreviation tables exceed %d bytes in all (shared tables?)",
				f.name, ErrCorrupt, h.off, uint64(len(abbrev))*scanAbbrevFactor+scanAbbrevBudget)
		}
		budget -= n
		d, err := f.unitData(h)
		if err != nil {
			return err
		}
		e, err := d.Reader().Next()
		if err != nil {
			return f.dwarfErr(err, h, h.off)
		}
		if e == nil || (e.Tag != dwarf.TagCompileUnit && e.Tag != dwarf.TagPartialUnit) {
			continue
		}
		rs, err := d.Ranges(e)
		if err != nil {
			return f.dwarfErr(err, h, h.off)
		}
		// Units sharing one long range list would cost its length each.
		if rangeBudget -= len(rs); rangeBudget < 0 {
			return fmt.Errorf("%s: %w: .debug_info unit at offset %#x: the units' top-level DIEs have more address ranges than the section's size allows",
				f.name, ErrCorrupt, h.off)
		}
		for _, x := range rs {
			if x[0] != 0 && x[0] < x[1] {
				r = append(r, arange{x[0], x[1], h.off})
			}
		}
	}
	ix.scan = newRangeSet(r)
	ix.scanned = true
	return nil
}

const (
	scanAbbrevFactor = 4
	scanAbbrevBudget = 64 << 20
)
