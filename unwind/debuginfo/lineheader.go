package debuginfo

import (
	"debug/dwarf"
	"fmt"
)

// checkLineHeader checks what debug/dwarf would allocate from a DWARF 5
// line program header before it does: the directory and file name counts,
// which it takes as given for make.
func (f *File) checkLineHeader(u *unit, cu *dwarf.Entry) error {
	off, ok := cu.Val(dwarf.AttrStmtList).(int64)
	if !ok {
		return nil
	}
	line, err := f.sectionData(".debug_line")
	if err != nil {
		return err
	}
	if off < 0 || uint64(off) >= uint64(len(line)) {
		return nil // debug/dwarf reports it
	}
	order := f.ef.ByteOrder
	p := line[off:]
	bad := func(what string, args ...any) error {
		return fmt.Errorf("%s: %w: .debug_line program at offset %#x (unit at .debug_info offset %#x): %s",
			f.name, ErrCorrupt, off, u.hdr.off, fmt.Sprintf(what, args...))
	}
	if len(p) < 4 {
		return bad("truncated header")
	}
	l, hdr, offsz := uint64(order.Uint32(p)), 4, 4
	if l == 0xffffffff {
		if len(p) < 12 {
			return bad("truncated header")
		}
		l, hdr, offsz = order.Uint64(p[4:]), 12, 8
	}
	if l > uint64(len(p)-hdr) {
		return nil // debug/dwarf reports it
	}
	p = p[hdr : uint64(hdr)+l]
	if len(p) < 2 || order.Uint16(p) < 5 {
		return nil // before version 5 the tables are NUL-terminated lists
	}
	// version(2) address_size(1) seg_sel(1) header_length(offsz)
	// min_inst(1) max_ops(1) default_is_stmt(1) line_base(1) line_range(1)
	// opcode_base(1) standard_opcode_lengths(opcode_base-1)
	pos := 4 + offsz + 5
	if len(p) < pos+1 {
		return bad("truncated header")
	}
	opbase := int(p[pos])
	pos += opbase // the opcode base byte and opcode_base-1 lengths
	if opbase == 0 {
		pos++
	}
	for _, what := range []string{"directory", "file name"} {
		if len(p) < pos+1 {
			return bad("truncated %s table", what)
		}
		nformat := int(p[pos])
		pos++
		forms := make([]uint64, 0, nformat)
		minSize := 0
		for range nformat {
			_, n := uleb(p[pos:])
			if n == 0 {
				return bad("truncated %s format", what)
			}
			pos += n
			form, n := uleb(p[pos:])
			if n == 0 {
				return bad("truncated %s format", what)
			}
			pos += n
			forms = append(forms, form)
			minSize += minFormSize(form, offsz)
		}
		count, n := uleb(p[pos:])
		if n == 0 {
			return bad("truncated %s count", what)
		}
		pos += n
		rest := uint64(len(p) - pos)
		if count > 0 && (minSize == 0 && count > 1<<16 || minSize > 0 && count > rest/uint64(minSize)) {
			return bad("%d %s entries of at least %d bytes in the %d bytes left", count, what, minSize, rest)
		}
		if what == "file name" || len(forms) == 0 {
			break
		}
		for range count {
			for _, form := range forms {
				n, ok := skipForm(p[pos:], form, offsz)
				if !ok {
					return nil // debug/dwarf reports it
				}
				pos += n
			}
		}
	}
	return nil
}

// skipForm is the size of a line-table attribute of the form at b.
func skipForm(b []byte, form uint64, offsz int) (int, bool) {
	n := minFormSize(form, offsz)
	switch form {
	case 0x08: // string
		for i, c := range b {
			if c == 0 {
				return i + 1, true
			}
		}
		return 0, false
	case 0x0f, 0x1a: // udata strx
		_, n = uleb(b)
		return n, n > 0
	case 0x09: // block
		l, m := uleb(b)
		if m == 0 || l > uint64(len(b)-m) {
			return 0, false
		}
		return m + int(l), true
	case 0x0a: // block1
		if len(b) < 1 || int(b[0]) > len(b)-1 {
			return 0, false
		}
		return 1 + int(b[0]), true
	}
	if n == 0 || n > len(b) {
		return 0, false
	}
	return n, true
}

// minFormSize is the least number of bytes a line-table attribute of the
// form can take.
func minFormSize(form uint64, offsz int) int {
	switch form {
	case 0x0b, 0x0c, 0x25, 0x08, 0x0f, 0x1a, 0x0a, 0x09: // data1 flag strx1 string udata strx block1 block
		return 1
	case 0x05, 0x26: // data2 strx2
		return 2
	case 0x27: // strx3
		return 3
	case 0x06, 0x28: // data4 strx4
		return 4
	case 0x07: // data8
		return 8
	case 0x1e: // data16
		return 16
	case 0x0e, 0x1f: // strp line_strp
		return offsz
	}
	return 0
}

// uleb decodes an unsigned LEB128: the value and its length, 0 if
// truncated.
func uleb(b []byte) (uint64, int) {
	var v uint64
	for i, c := range b {
		if i < 10 {
			v |= uint64(c&0x7f) << (7 * uint(i))
		}
		if c&0x80 == 0 {
			return v, i + 1
		}
	}
	return 0, 0
}
