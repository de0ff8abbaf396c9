package debuginfo

import (
	"debug/dwarf"
	"encoding/binary"
	"errors"
)

// rangeCtx is what a unit's range lists need from its top-level DIE.
// debug/dwarf's Ranges re-reads that DIE for every DIE with DW_AT_ranges
// (a fifth of a kernel unit's decoding allocations); this reads it once.
type rangeCtx struct {
	base     uint64 // the unit's base address: DW_AT_entry_pc or DW_AT_low_pc
	addrBase uint64 // DW_AT_addr_base
	asize    int
	order    binary.ByteOrder
	v5       bool
	ranges   []byte // .debug_ranges
	rngLists []byte // .debug_rnglists
	addr     []byte // .debug_addr
}

var errRange = errors.New("range list runs past its section")

func (f *File) newRangeCtx(u *unit, cu *dwarf.Entry) (*rangeCtx, error) {
	c := &rangeCtx{asize: u.hdr.asize, order: f.ef.ByteOrder, v5: u.hdr.version >= 5}
	if v, ok := cu.Val(dwarf.AttrEntrypc).(uint64); ok {
		c.base = v
	} else if v, ok := cu.Val(dwarf.AttrLowpc).(uint64); ok {
		c.base = v
	}
	if v, ok := cu.Val(dwarf.AttrAddrBase).(int64); ok && v >= 0 {
		c.addrBase = uint64(v)
	}
	var err error
	if c.ranges, err = f.sectionData(".debug_ranges"); err != nil {
		return nil, err
	}
	if c.rngLists, err = f.sectionData(".debug_rnglists"); err != nil {
		return nil, err
	}
	if c.addr, err = f.sectionData(".debug_addr"); err != nil {
		return nil, err
	}
	return c, nil
}

// rangesOf returns e's address ranges, appended to ret[:0], as
// debug/dwarf's Ranges would; ok is false where it must be asked instead
// (an address size other than 4 or 8, or a DWARF 5 unit without
// .debug_rnglists, which debug/dwarf reads as DWARF 4).
func (c *rangeCtx) rangesOf(e *dwarf.Entry, ret [][2]uint64) (_ [][2]uint64, ok bool, err error) {
	if c.asize != 4 && c.asize != 8 || c.v5 && c.rngLists == nil {
		return nil, false, nil
	}
	ret = ret[:0]
	if low, ok := e.Val(dwarf.AttrLowpc).(uint64); ok {
		if hf := e.AttrField(dwarf.AttrHighpc); hf != nil {
			switch hf.Class {
			case dwarf.ClassAddress:
				if high, ok := hf.Val.(uint64); ok {
					ret = append(ret, [2]uint64{low, high})
				}
			case dwarf.ClassConstant:
				if n, ok := hf.Val.(int64); ok {
					ret = append(ret, [2]uint64{low, low + uint64(n)})
				}
			}
		}
	}
	field := e.AttrField(dwarf.AttrRanges)
	if field == nil {
		return ret, true, nil
	}
	var off uint64
	switch v := field.Val.(type) {
	case int64:
		if v < 0 {
			return nil, true, errRange
		}
		off = uint64(v)
	case uint64:
		off = v
	default:
		return ret, true, nil
	}
	if !c.v5 {
		return c.dwarf4(off, ret)
	}
	return c.dwarf5(off, ret)
}

func (c *rangeCtx) read(b []byte, p uint64) (uint64, bool) {
	if p > uint64(len(b)) || uint64(len(b))-p < uint64(c.asize) {
		return 0, false
	}
	if c.asize == 4 {
		return uint64(c.order.Uint32(b[p:])), true
	}
	return c.order.Uint64(b[p:]), true
}

// dwarf4 reads a .debug_ranges list (DWARF 4 section 2.17.3).
func (c *rangeCtx) dwarf4(off uint64, ret [][2]uint64) ([][2]uint64, bool, error) {
	base := c.base
	sel := ^uint64(0)
	if c.asize == 4 {
		sel = 0xffffffff
	}
	for p := off; ; p += 2 * uint64(c.asize) {
		lo, ok1 := c.read(c.ranges, p)
		hi, ok2 := c.read(c.ranges, p+uint64(c.asize))
		if !ok1 || !ok2 {
			return nil, true, errRange
		}
		switch {
		case lo == 0 && hi == 0:
			return ret, true, nil
		case lo == sel:
			base = hi
		default:
			ret = append(ret, [2]uint64{base + lo, base + hi})
		}
	}
}

// DWARF 5 range list entries (DWARF 5 section 7.25).
const (
	rleEndOfList    = 0
	rleBaseAddressx = 1
	rleStartxEndx   = 2
	rleStartxLength = 3
	rleOffsetPair   = 4
	rleBaseAddress  = 5
	rleStartEnd     = 6
	rleStartLength  = 7
)

// dwarf5 reads a .debug_rnglists list; off is its offset in the section.
func (c *rangeCtx) dwarf5(off uint64, ret [][2]uint64) ([][2]uint64, bool, error) {
	b := c.rngLists
	base := c.base
	p := off
	u := func() (uint64, bool) {
		if p > uint64(len(b)) {
			return 0, false
		}
		v, n := uleb(b[p:])
		p += uint64(n)
		return v, n > 0
	}
	a := func() (uint64, bool) {
		v, ok := c.read(b, p)
		p += uint64(c.asize)
		return v, ok
	}
	x := func(idx uint64) (uint64, bool) {
		if idx > uint64(len(c.addr))/uint64(c.asize) {
			return 0, false
		}
		return c.read(c.addr, c.addrBase+idx*uint64(c.asize))
	}
	for {
		if p >= uint64(len(b)) {
			return nil, true, errRange
		}
		op := b[p]
		p++
		var ok1, ok2, ok3 = true, true, true
		var v1, v2 uint64
		switch op {
		case rleEndOfList:
			return ret, true, nil
		case rleBaseAddressx:
			v1, ok1 = u()
			base, ok2 = x(v1)
		case rleStartxEndx:
			v1, ok1 = u()
			v2, ok2 = u()
			var s, e uint64
			s, ok3 = x(v1)
			e, ok := x(v2)
			ok3 = ok3 && ok
			ret = append(ret, [2]uint64{s, e})
		case rleStartxLength:
			v1, ok1 = u()
			v2, ok2 = u()
			var s uint64
			s, ok3 = x(v1)
			ret = append(ret, [2]uint64{s, s + v2})
		case rleOffsetPair:
			v1, ok1 = u()
			v2, ok2 = u()
			ret = append(ret, [2]uint64{base + v1, base + v2})
		case rleBaseAddress:
			base, ok1 = a()
		case rleStartEnd:
			v1, ok1 = a()
			v2, ok2 = a()
			ret = append(ret, [2]uint64{v1, v2})
		case rleStartLength:
			v1, ok1 = a()
			v2, ok2 = u()
			ret = append(ret, [2]uint64{v1, v1 + v2})
		default:
			return nil, true, errRange
		}
		if !ok1 || !ok2 || !ok3 {
			return nil, true, errRange
		}
	}
}
