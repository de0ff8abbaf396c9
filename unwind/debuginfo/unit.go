package debuginfo

import (
	"debug/dwarf"
	"errors"
	"fmt"
	"io"
	"path"
	"slices"
	"strings"
)

// DWARF forms the abbreviation skim must know (DWARF 5 section 7.5.6).
const attrMIPSLinkageName dwarf.Attr = 0x2007

const (
	formRefAddr       = 0x10
	formIndirect      = 0x16
	formImplicitConst = 0x21
)

// abbrevTable skims the abbreviation table of unit h: its size in bytes,
// and whether an attribute may refer into another unit (DW_FORM_ref_addr,
// or DW_FORM_indirect, which may be anything).
func (f *File) abbrevTable(abbrev []byte, h unitHdr) (size uint64, crossRefs bool, err error) {
	off := h.abbrev
	bad := func(at uint64, what string) error {
		return fmt.Errorf("%s: %w: .debug_abbrev at offset %#x (table at %#x of the unit at .debug_info offset %#x): %s",
			f.name, ErrCorrupt, at, off, h.off, what)
	}
	if off >= uint64(len(abbrev)) {
		return 0, false, bad(off, "table offset outside the section")
	}
	p := off
	uleb := func() (uint64, bool) {
		var v uint64
		for shift := uint(0); p < uint64(len(abbrev)); shift += 7 {
			c := abbrev[p]
			p++
			if shift < 64 {
				v |= uint64(c&0x7f) << shift
			}
			if c&0x80 == 0 {
				return v, true
			}
		}
		return 0, false
	}
	for {
		code, ok := uleb()
		if !ok {
			return 0, false, bad(p, "truncated table")
		}
		if code == 0 {
			return p - off, crossRefs, nil
		}
		if _, ok := uleb(); !ok { // tag
			return 0, false, bad(p, "truncated table")
		}
		if p >= uint64(len(abbrev)) {
			return 0, false, bad(p, "truncated table")
		}
		p++ // children
		for {
			at, ok1 := uleb()
			form, ok2 := uleb()
			if !ok1 || !ok2 {
				return 0, false, bad(p, "truncated table")
			}
			if at == 0 && form == 0 {
				break
			}
			switch form {
			case formRefAddr, formIndirect:
				crossRefs = true
			case formImplicitConst:
				if _, ok := uleb(); !ok { // the SLEB128 value: same byte shape
					return 0, false, bad(p, "truncated table")
				}
			}
		}
	}
}

// unitData returns a dwarf.Data holding unit h alone: debug/dwarf's New
// walks every unit header and parses every abbreviation table of the
// .debug_info it is given (for Debian's vmlinux: 3 s and 187 MB), so each
// unit gets its own, over its own bytes. Offsets in it are relative to the
// unit's start.
func (f *File) unitData(h unitHdr) (*dwarf.Data, error) {
	info, err := f.infoBytes(h.off, h.end-h.off)
	if err != nil {
		return nil, err
	}
	return f.newData(info, h)
}

// fullData returns one dwarf.Data over all of .debug_info, made on first
// use: for units whose references may cross into other units.
func (f *File) fullData(h unitHdr) (*dwarf.Data, error) {
	if f.full != nil {
		return f.full, nil
	}
	info, err := f.infoBytes(0, f.infoSize())
	if err != nil {
		return nil, err
	}
	d, err := f.newData(info, unitHdr{})
	if err != nil {
		return nil, err
	}
	f.full = d
	return d, nil
}

var dwarf5Sections = []string{".debug_addr", ".debug_line_str", ".debug_str_offsets", ".debug_rnglists"}

func (f *File) newData(info []byte, h unitHdr) (*dwarf.Data, error) {
	var secs [5][]byte
	for i, name := range []string{".debug_abbrev", ".debug_line", ".debug_ranges", ".debug_str"} {
		b, err := f.sectionData(name)
		if err != nil {
			return nil, err
		}
		secs[i] = b
	}
	d, err := dwarf.New(secs[0], nil, nil, info, secs[1], nil, secs[2], secs[3])
	if err != nil {
		return nil, f.dwarfErr(err, h, h.off)
	}
	for _, name := range dwarf5Sections {
		b, err := f.sectionData(name)
		if err != nil {
			return nil, err
		}
		if b != nil {
			d.AddSection(name, b)
		}
	}
	return d, nil
}

// dwarfErr names the file, the section and the offset of an error from
// debug/dwarf; base is the .debug_info offset of the Data's offset 0.
func (f *File) dwarfErr(err error, h unitHdr, base uint64) error {
	var de dwarf.DecodeError
	if errors.As(err, &de) {
		off := uint64(de.Offset)
		if de.Name == "info" {
			off += base
		}
		return fmt.Errorf("%s: %w: .debug_%s at offset %#x (unit at .debug_info offset %#x): %s", f.name, ErrCorrupt, de.Name, off, h.off, de.Err)
	}
	return fmt.Errorf("%s: %w: unit at .debug_info offset %#x: %v", f.name, ErrCorrupt, h.off, err)
}

// unit is one compilation unit, decoded: its functions and line table.
type unit struct {
	hdr     unitHdr
	d       *dwarf.Data
	base    uint64 // .debug_info offset of d's offset 0
	nodes   []node
	fn      rangeSet // arange.unit is the node's index
	seqs    rangeSet // arange.unit indexes seqRows
	rows    []row
	seqRows [][2]int // each sequence's rows: [start, end)
	files   []srcFile
	err     error // the error decoding it, returned for every lookup

	abbrevSize int    // bytes of its abbreviation table (debug/dwarf holds it parsed)
	cost       int    // estimated bytes held, for the cache's budget
	lastUse    uint64 // the File's lookup count at its last use
}

// cacheBudget bounds the memory the decoded units hold, estimated: past
// it the least recently used units are dropped (and decoded again should
// a lookup need them). A kernel's unit holds 0.1 to 2 MB decoded.
const cacheBudget = 64 << 20

// node is a function DIE with code: a concrete subprogram or an inlined
// subroutine.
type node struct {
	parent                      int32 // the nearest enclosing node; -1 for none
	depth                       int32
	inlined                     bool
	named                       bool         // name and linkage are final
	ref                         dwarf.Offset // where the name is, when not named
	name                        string
	linkage                     string
	callFile, callLine, callCol int
}

// row is one line-table row.
type row struct {
	addr          uint64
	line, col     int32
	file          int32
	discriminator int32
}

type srcFile struct{ file, path string }

// maxRefChain bounds a name's DW_AT_abstract_origin/DW_AT_specification
// chain (real ones have 1 or 2 links).
const maxRefChain = 8

// unit returns the decoded unit at off, decoding it on first use.
func (f *File) unit(off uint64) (*unit, error) {
	f.uses++
	if u, ok := f.cus[off]; ok {
		u.lastUse = f.uses
		return u, u.err
	}
	u := &unit{}
	u.err = f.decodeUnit(u, off)
	if u.err != nil {
		*u = unit{err: u.err} // keep only the error
	}
	u.lastUse = f.uses
	u.cost = 512 + len(u.rows)*24 + len(u.seqRows)*16 + len(u.nodes)*120 + len(u.fn.r)*32 +
		len(u.seqs.r)*32 + len(u.files)*64 + u.abbrevSize*8
	for _, sf := range u.files {
		u.cost += len(sf.file) + len(sf.path)
	}
	f.cus[off] = u
	f.cacheCost += u.cost
	for f.cacheCost > cacheBudget && len(f.cus) > 1 {
		var old uint64
		var oldest *unit
		for o, v := range f.cus {
			if v != u && (oldest == nil || v.lastUse < oldest.lastUse) {
				old, oldest = o, v
			}
		}
		f.cacheCost -= oldest.cost
		delete(f.cus, old)
		f.evictions++
	}
	return u, u.err
}

func (f *File) decodeUnit(u *unit, off uint64) error {
	h, err := f.unitAt(off)
	if err != nil {
		return err
	}
	u.hdr = h
	abbrev, err := f.sectionData(".debug_abbrev")
	if err != nil {
		return err
	}
	asize, cross, err := f.abbrevTable(abbrev, h)
	if err != nil {
		return err
	}
	u.abbrevSize = int(asize)
	if cross || f.forceWhole {
		u.d, err = f.fullData(h)
		u.base = 0
	} else {
		u.d, err = f.unitData(h)
		u.base = h.off
	}
	if err != nil {
		return err
	}
	r := u.d.Reader()
	if u.base == 0 && h.off != 0 {
		r.Seek(dwarf.Offset(h.die))
	}
	cu, err := r.Next()
	if err != nil {
		return f.dwarfErr(err, h, u.base)
	}
	if cu == nil || (cu.Tag != dwarf.TagCompileUnit && cu.Tag != dwarf.TagPartialUnit) {
		return fmt.Errorf("%s: %w: .debug_info unit at offset %#x: first DIE is not a compile unit", f.name, ErrCorrupt, h.off)
	}
	if err := f.decodeDIEs(u, r, cu); err != nil {
		return err
	}
	return f.decodeLines(u, cu)
}

// decodeDIEs records the unit's function DIEs that have code, with their
// nesting, ranges and call sites.
func (f *File) decodeDIEs(u *unit, r *dwarf.Reader, cu *dwarf.Entry) error {
	if !cu.Children {
		return nil
	}
	// The ranges kept are bounded by the unit's size plus a fixed budget,
	// so that many DIEs sharing one long range list cost linear memory.
	budget := int(u.hdr.end-u.hdr.off) + 1<<16
	var rs []arange
	rc, err := f.newRangeCtx(u, cu)
	if err != nil {
		return err
	}
	var buf [][2]uint64
	stack := []int32{-1} // the enclosing node at each open level
	for len(stack) > 0 {
		e, err := r.Next()
		if err != nil {
			return f.dwarfErr(err, u.hdr, u.base)
		}
		if e == nil {
			break
		}
		if e.Tag == 0 {
			stack = stack[:len(stack)-1]
			continue
		}
		parent := stack[len(stack)-1]
		if u.base == 0 && uint64(e.Offset) >= u.hdr.end {
			break // the whole-section Data walked past this unit
		}
		switch e.Tag {
		case dwarf.TagSubprogram, dwarf.TagInlinedSubroutine:
			ranges, ok, err := rc.rangesOf(e, buf)
			if err != nil {
				return fmt.Errorf("%s: %w: .debug_info unit at offset %#x: DIE at %#x: %v", f.name, ErrCorrupt, u.hdr.off, u.base+uint64(e.Offset), err)
			}
			if !ok {
				if ranges, err = u.d.Ranges(e); err != nil {
					return f.dwarfErr(err, u.hdr, u.base)
				}
			}
			buf = ranges
			if f.checkRanges {
				want, err := u.d.Ranges(e)
				if err != nil || !slices.Equal(want, ranges) {
					return fmt.Errorf("DIE at %#x: ranges %#x, debug/dwarf's %#x (%v)", u.base+uint64(e.Offset), ranges, want, err)
				}
			}
			idx := int32(len(u.nodes))
			kept := 0
			for _, x := range ranges {
				if x[0] == 0 || x[0] >= x[1] {
					continue // discarded code, or empty
				}
				rs = append(rs, arange{x[0], x[1], uint64(idx)})
				kept++
			}
			if budget -= len(ranges); budget < 0 {
				return fmt.Errorf("%s: %w: .debug_info unit at offset %#x: more address ranges than the unit's size allows (DIE at %#x)",
					f.name, ErrCorrupt, u.hdr.off, u.base+uint64(e.Offset))
			}
			if kept == 0 {
				// A declaration, an abstract instance or discarded
				// code: nothing under it has code of its own.
				if e.Children {
					r.SkipChildren()
				}
				continue
			}
			n := node{parent: parent, inlined: e.Tag == dwarf.TagInlinedSubroutine}
			if parent >= 0 {
				n.depth = u.nodes[parent].depth + 1
			}
			n.name, _ = e.Val(dwarf.AttrName).(string)
			n.linkage, _ = e.Val(dwarf.AttrLinkageName).(string)
			if n.linkage == "" {
				n.linkage, _ = e.Val(attrMIPSLinkageName).(string)
			}
			n.named = true
			if n.name == "" && n.linkage == "" {
				if ref, ok := e.Val(dwarf.AttrAbstractOrigin).(dwarf.Offset); ok {
					n.ref, n.named = ref, false
				} else if ref, ok := e.Val(dwarf.AttrSpecification).(dwarf.Offset); ok {
					n.ref, n.named = ref, false
				}
			}
			if n.inlined {
				n.callFile = intVal(e, dwarf.AttrCallFile)
				n.callLine = intVal(e, dwarf.AttrCallLine)
				n.callCol = intVal(e, dwarf.AttrCallColumn)
			}
			u.nodes = append(u.nodes, n)
			if e.Children {
				stack = append(stack, idx)
			}
		case dwarf.TagLexDwarfBlock, dwarf.TagNamespace, dwarf.TagModule:
			if e.Children {
				stack = append(stack, parent)
			}
		default:
			if e.Children {
				r.SkipChildren()
			}
		}
	}
	u.fn = newRangeSet(rs)
	return nil
}

func intVal(e *dwarf.Entry, a dwarf.Attr) int {
	switch v := e.Val(a).(type) {
	case int64:
		if v >= 0 && v <= 1<<31-1 {
			return int(v)
		}
	case uint64:
		if v <= 1<<31-1 {
			return int(v)
		}
	}
	return 0
}

// decodeLines reads the unit's line program into rows and sequences.
func (f *File) decodeLines(u *unit, cu *dwarf.Entry) error {
	if err := f.checkLineHeader(u, cu); err != nil {
		return err
	}
	lr, err := u.d.LineReader(cu)
	if err != nil {
		return f.dwarfErr(err, u.hdr, u.base)
	}
	if lr == nil {
		return nil
	}
	compDir, _ := cu.Val(dwarf.AttrCompDir).(string)
	cuName, _ := cu.Val(dwarf.AttrName).(string)
	fileIdx := map[*dwarf.LineFile]int32{}
	var seqs []arange
	start := -1
	var le dwarf.LineEntry
	for {
		err := lr.Next(&le)
		if err == io.EOF {
			break
		}
		if err != nil {
			return f.dwarfErr(err, u.hdr, u.base)
		}
		if le.EndSequence {
			if start >= 0 && start < len(u.rows) {
				lo := u.rows[start].addr
				// Rows go up within a sequence; keep a stray one
				// from breaking the binary search.
				seq := u.rows[start:]
				if !slices.IsSortedFunc(seq, cmpRow) {
					slices.SortStableFunc(seq, cmpRow)
					lo = seq[0].addr
				}
				if lo != 0 && lo < le.Address {
					seqs = append(seqs, arange{lo, le.Address, uint64(len(u.seqRows))})
					u.seqRows = append(u.seqRows, [2]int{start, len(u.rows)})
				}
			}
			start = -1
			continue
		}
		if start < 0 {
			start = len(u.rows)
		}
		fi := int32(-1)
		if le.File != nil {
			i, ok := fileIdx[le.File]
			if !ok {
				i = int32(len(u.files))
				fileIdx[le.File] = i
				u.files = append(u.files, makeSrcFile(le.File.Name, compDir, cuName))
			}
			fi = i
		}
		u.rows = append(u.rows, row{addr: le.Address, line: clamp32(le.Line), col: clamp32(le.Column),
			file: fi, discriminator: clamp32(le.Discriminator)})
	}
	u.seqs = newRangeSet(seqs)
	// Call sites index the file table itself: map it onto files.
	table := lr.Files()
	calls := make([]int32, len(table))
	for i, lf := range table {
		calls[i] = -1
		if lf == nil {
			continue
		}
		j, ok := fileIdx[lf]
		if !ok {
			j = int32(len(u.files))
			fileIdx[lf] = j
			u.files = append(u.files, makeSrcFile(lf.Name, compDir, cuName))
		}
		calls[i] = j
	}
	for i := range u.nodes {
		n := &u.nodes[i]
		if !n.inlined {
			continue
		}
		if n.callFile >= 0 && n.callFile < len(calls) {
			n.callFile = int(calls[n.callFile])
		} else {
			n.callFile = -1
		}
	}
	return nil
}

func cmpRow(a, b row) int {
	switch {
	case a.addr < b.addr:
		return -1
	case a.addr > b.addr:
		return 1
	}
	return 0
}

func clamp32(v int) int32 {
	if v < 0 || v > 1<<31-1 {
		return 0
	}
	return int32(v)
}

// makeSrcFile names a line table's file. Go's debug/dwarf joins a DWARF
// 5 file entry's directory with its name even when the name is absolute
// (clang's assembler units name their primary file, entry 0, by its
// absolute path, directory 0 being the compilation directory): the
// primary file joined so is given back as the unit's DW_AT_name.
func makeSrcFile(name, compDir, cuName string) srcFile {
	p := name
	if path.IsAbs(cuName) && compDir != "" && p == path.Join(compDir, cuName) {
		p = cuName
	}
	if compDir != "" && !path.IsAbs(p) {
		p = path.Join(compDir, p)
	}
	rel := p
	if root := path.Clean(compDir); compDir != "" && strings.HasPrefix(p, root+"/") {
		rel = p[len(root)+1:]
	}
	return srcFile{file: rel, path: p}
}

// lookup returns the unit's frames at pc; ok is false when neither a
// function nor a line of the unit covers pc.
func (f *File) lookupUnit(u *unit, pc uint64) (frames []Frame, ok bool, err error) {
	// The innermost function: the deepest node holding pc (the
	// smallest range on a tie).
	best, bestSize := -1, uint64(0)
	u.fn.find(pc, func(i int) bool {
		a := u.fn.r[i]
		n := int(a.unit)
		if best < 0 || u.nodes[n].depth > u.nodes[best].depth ||
			(u.nodes[n].depth == u.nodes[best].depth && a.hi-a.lo < bestSize) {
			best, bestSize = n, a.hi-a.lo
		}
		return true
	})
	var first Frame
	lineOK := false
	u.seqs.find(pc, func(i int) bool {
		s := u.seqs.r[i]
		sr := u.seqRows[s.unit]
		rows := u.rows[sr[0]:sr[1]]
		j, _ := slices.BinarySearchFunc(rows, pc, func(r row, pc uint64) int {
			if r.addr <= pc {
				return -1
			}
			return 1
		})
		if j == 0 {
			return true
		}
		r := rows[j-1]
		first.Line, first.Column, first.Discriminator = int(r.line), int(r.col), int(r.discriminator)
		if r.file >= 0 {
			first.File, first.Path = u.files[r.file].file, u.files[r.file].path
		}
		lineOK = true
		return false
	})
	if best < 0 {
		if !lineOK {
			return nil, false, nil
		}
		return []Frame{first}, true, nil
	}
	depth := 1
	for n := best; n >= 0 && u.nodes[n].inlined && depth <= len(u.nodes); n = int(u.nodes[n].parent) {
		depth++
	}
	frames = make([]Frame, 0, depth)
	frame := first
	for n, steps := best, 0; n >= 0 && steps <= len(u.nodes); steps++ {
		nd := &u.nodes[n]
		if err := f.resolveName(u, nd); err != nil {
			return nil, false, err
		}
		frame.Func, frame.LinkageName, frame.Inlined = nd.name, nd.linkage, nd.inlined
		frames = append(frames, frame)
		if !nd.inlined {
			break
		}
		frame = Frame{Line: nd.callLine, Column: nd.callCol}
		if nd.callFile >= 0 && nd.callFile < len(u.files) {
			frame.File, frame.Path = u.files[nd.callFile].file, u.files[nd.callFile].path
		}
		n = int(nd.parent)
	}
	return frames, true, nil
}

// resolveName follows the node's abstract origin or specification to its
// name.
func (f *File) resolveName(u *unit, n *node) error {
	if n.named {
		return nil
	}
	ref := n.ref
	r := u.d.Reader()
	for range maxRefChain {
		r.Seek(ref)
		e, err := r.Next()
		if err != nil {
			return f.dwarfErr(err, u.hdr, u.base)
		}
		if e == nil {
			break
		}
		n.name, _ = e.Val(dwarf.AttrName).(string)
		n.linkage, _ = e.Val(dwarf.AttrLinkageName).(string)
		if n.linkage == "" {
			n.linkage, _ = e.Val(attrMIPSLinkageName).(string)
		}
		if n.name != "" || n.linkage != "" {
			break
		}
		next, ok := e.Val(dwarf.AttrAbstractOrigin).(dwarf.Offset)
		if !ok {
			next, ok = e.Val(dwarf.AttrSpecification).(dwarf.Offset)
		}
		if !ok {
			break
		}
		ref = next
	}
	n.named = true
	return nil
}

// lookup finds pc's unit and its frames.
func (f *File) lookup(pc uint64) ([]Frame, error) {
	offs, err := f.cuFor(pc)
	if err != nil {
		return nil, err
	}
	for _, off := range offs {
		u, err := f.unit(off)
		if err != nil {
			return nil, err
		}
		frames, ok, err := f.lookupUnit(u, pc)
		if err != nil {
			return nil, err
		}
		if ok {
			return frames, nil
		}
	}
	return nil, fmt.Errorf("%s: %w: %#x", f.name, ErrNotFound, pc)
}
