package debuginfo

import (
	"debug/dwarf"
	"fmt"
	"strings"
)

// Types answers structure-layout questions from a file's DWARF: the byte
// offset of a member path such as "task_struct.thread.cpu_context" and the
// size of a struct, as the kernel's BTF answers them (unwind/vmcore's BTF
// and Types). It is what unwind/kernel reads structure offsets from when a
// vmcore has no BTF but the kernel's vmlinux has DWARF.
//
// It is lazy too: a struct is looked for in the compilation units in
// file order, each unit's top-level DIEs read once (their struct
// definitions remembered by name), until one defines it; a member path is
// then resolved in that unit (typedefs, const and volatile followed; a
// struct the unit only declares is looked up by name). A name no unit
// defines costs one pass over every unit's top-level DIEs. Units whose
// references may cross into other units (DW_FORM_ref_addr) are skipped.
// Types' methods are safe for concurrent use, as File's are.
type Types struct {
	f *File
}

// maxMemberDepth bounds the anonymous structs and unions searched through
// for a member, and the typedef chains followed (BTF's lookup stops at 8
// anonymous levels too).
const maxMemberDepth = 8

// Types returns the file's structure layouts.
func (f *File) Types() *Types { return &Types{f: f} }

// Origin returns "dwarf", where the layouts come from (Offset.Source in
// unwind/vmcore).
func (t *Types) Origin() string { return "dwarf" }

// typeIndex is what the top-level scan remembered.
type typeIndex struct {
	next    uint64              // the next unit to scan
	done    bool                // every unit scanned
	structs map[string]typeDef  // the first definition of each struct and union name
	data    map[uint64]unitData // units holding a definition, by offset
}

type typeDef struct {
	unit uint64       // the unit header's offset
	die  dwarf.Offset // the DIE's offset within the unit's Data
}

type unitData struct {
	h unitHdr
	d *dwarf.Data
}

// Size returns sizeof(struct name) (DW_AT_byte_size of its definition).
func (t *Types) Size(name string) (uint64, error) {
	f := t.f
	f.mu.Lock()
	defer f.mu.Unlock()
	ud, e, err := t.def(name)
	if err != nil {
		return 0, err
	}
	sz, ok := e.Val(dwarf.AttrByteSize).(int64)
	if !ok || sz < 0 {
		return 0, fmt.Errorf("%s: %w: .debug_info unit at offset %#x: struct %s at %#x has no byte size", f.name, ErrCorrupt, ud.h.off, name, e.Offset)
	}
	return uint64(sz), nil
}

// Offset returns the byte offset of a member path: "S.m1.m2" is member m2
// of member m1 of struct S. Members of anonymous structs and unions are
// found as the compiler finds them, the first in declaration order, at
// most 8 deep; a bitfield is an error.
func (t *Types) Offset(path string) (uint64, error) {
	f := t.f
	f.mu.Lock()
	defer f.mu.Unlock()
	parts := strings.Split(path, ".")
	if len(parts) < 2 {
		return 0, fmt.Errorf("%s: debuginfo: %q is no member path", f.name, path)
	}
	ud, e, err := t.def(parts[0])
	if err != nil {
		return 0, err
	}
	var off uint64
	for _, p := range parts[1:] {
		if e == nil {
			return 0, fmt.Errorf("%s: debuginfo: %s: %s is not in a struct", f.name, path, p)
		}
		o, typ, err := t.member(ud, e, p, 0, map[typeDef]int{})
		if err != nil {
			return 0, fmt.Errorf("%s: debuginfo: %s: %w", f.name, path, err)
		}
		off += o
		ud, e, err = t.structOf(ud, typ)
		if err != nil {
			return 0, fmt.Errorf("%s: debuginfo: %s: %w", f.name, path, err)
		}
	}
	return off, nil
}

// def finds the definition of struct (or union) name. f.mu is held.
func (t *Types) def(name string) (unitData, *dwarf.Entry, error) {
	f := t.f
	if f.closed {
		return unitData{}, nil, fmt.Errorf("%s: debuginfo: Types after Close", f.name)
	}
	if f.types == nil {
		f.types = &typeIndex{structs: map[string]typeDef{}, data: map[uint64]unitData{}}
	}
	ix := f.types
	for {
		if d, ok := ix.structs[name]; ok {
			ud := ix.data[d.unit]
			r := ud.d.Reader()
			r.Seek(d.die)
			e, err := r.Next()
			if err != nil || e == nil {
				return ud, nil, fmt.Errorf("%s: %w: .debug_info unit at offset %#x: struct %s at %#x: %v", f.name, ErrCorrupt, ud.h.off, name, d.die, err)
			}
			return ud, e, nil
		}
		if ix.done {
			return unitData{}, nil, fmt.Errorf("%s: debuginfo: no unit defines struct %s", f.name, name)
		}
		if err := t.scanNext(); err != nil {
			return unitData{}, nil, err
		}
	}
}

// scanNext reads the top-level DIEs of the next unit, remembering its
// struct and union definitions. f.mu is held.
func (t *Types) scanNext() error {
	f, ix := t.f, t.f.types
	size := f.infoSize()
	if ix.next >= size {
		ix.done = true
		return nil
	}
	h, err := f.unitAt(ix.next)
	if err != nil {
		return err
	}
	ix.next = h.end
	if h.utype != utCompile && h.utype != utPartial {
		return nil
	}
	abbrev, err := f.sectionData(".debug_abbrev")
	if err != nil {
		return err
	}
	if _, cross, err := f.abbrevTable(abbrev, h); err != nil || cross {
		return err
	}
	d, err := f.unitData(h)
	if err != nil {
		return err
	}
	r := d.Reader()
	cu, err := r.Next()
	if err != nil {
		return f.dwarfErr(err, h, h.off)
	}
	if cu == nil || !cu.Children {
		return nil
	}
	found := false
	for {
		e, err := r.Next()
		if err != nil {
			return f.dwarfErr(err, h, h.off)
		}
		if e == nil || e.Tag == 0 {
			break
		}
		if e.Tag == dwarf.TagStructType || e.Tag == dwarf.TagUnionType {
			name, _ := e.Val(dwarf.AttrName).(string)
			decl, _ := e.Val(dwarf.AttrDeclaration).(bool)
			if _, seen := ix.structs[name]; name != "" && !decl && !seen && e.Children {
				ix.structs[name] = typeDef{unit: h.off, die: e.Offset}
				found = true
			}
		}
		if e.Children {
			r.SkipChildren()
		}
	}
	if found {
		ix.data[h.off] = unitData{h: h, d: d}
	}
	return nil
}

// member finds the member name of the struct or union at e: its offset
// and its type's DIE offset. seen holds, for each struct searched in this
// lookup, the shallowest depth + 1 it was searched at: a search that
// failed fails again at any greater depth, so each struct is searched at
// most maxMemberDepth+1 times however often it is embedded (a malformed
// file may embed one anonymous struct many times over). f.mu is held.
func (t *Types) member(ud unitData, e *dwarf.Entry, name string, depth int, seen map[typeDef]int) (uint64, dwarf.Offset, error) {
	if depth > maxMemberDepth {
		return 0, 0, fmt.Errorf("no member %s within %d anonymous levels", name, maxMemberDepth)
	}
	key := typeDef{unit: ud.h.off, die: e.Offset}
	if d := seen[key]; d != 0 && d <= depth+1 {
		return 0, 0, fmt.Errorf("no member %s", name)
	}
	seen[key] = depth + 1
	r := ud.d.Reader()
	r.Seek(e.Offset)
	if _, err := r.Next(); err != nil {
		return 0, 0, t.f.dwarfErr(err, ud.h, ud.h.off)
	}
	if !e.Children {
		return 0, 0, fmt.Errorf("no member %s: the struct has none", name)
	}
	for {
		m, err := r.Next()
		if err != nil {
			return 0, 0, t.f.dwarfErr(err, ud.h, ud.h.off)
		}
		if m == nil || m.Tag == 0 {
			break
		}
		if m.Children {
			r.SkipChildren()
		}
		if m.Tag != dwarf.TagMember {
			continue
		}
		off, err := memberOffset(m)
		if err != nil {
			return 0, 0, fmt.Errorf("member %s: %w", name, err)
		}
		typ, _ := m.Val(dwarf.AttrType).(dwarf.Offset)
		mn, _ := m.Val(dwarf.AttrName).(string)
		if mn == name {
			if m.Val(dwarf.AttrBitSize) != nil || m.Val(dwarf.AttrDataBitOffset) != nil {
				return 0, 0, fmt.Errorf("%s is a bitfield", name)
			}
			return off, typ, nil
		}
		if mn != "" {
			continue
		}
		// An anonymous struct or union: search inside it.
		iu, ie, err := t.structOf(ud, typ)
		if err != nil || ie == nil {
			continue
		}
		if o, mt, err := t.member(iu, ie, name, depth+1, seen); err == nil {
			return off + o, mt, nil
		}
	}
	return 0, 0, fmt.Errorf("no member %s", name)
}

// memberOffset is DW_AT_data_member_location as a constant (0 in a union,
// where it is absent); DWARF 2's location expression form is accepted for
// its one common shape, DW_OP_plus_uconst N.
func memberOffset(m *dwarf.Entry) (uint64, error) {
	switch v := m.Val(dwarf.AttrDataMemberLoc).(type) {
	case nil:
		return 0, nil
	case int64:
		if v < 0 {
			return 0, fmt.Errorf("negative data_member_location %d", v)
		}
		return uint64(v), nil
	case []byte:
		if len(v) >= 2 && v[0] == 0x23 { // DW_OP_plus_uconst
			if n, k := uleb(v[1:]); k > 0 {
				return n, nil
			}
		}
		return 0, fmt.Errorf("data_member_location expression % x", v)
	default:
		return 0, fmt.Errorf("data_member_location of type %T", v)
	}
}

// structOf follows the type at off through typedefs, const and volatile
// to a struct or union, and from a declaration to the definition of its
// name. e is nil when the type is no struct (a pointer, a base type).
func (t *Types) structOf(ud unitData, off dwarf.Offset) (unitData, *dwarf.Entry, error) {
	for range maxMemberDepth * 2 {
		if off == 0 {
			return ud, nil, nil
		}
		r := ud.d.Reader()
		r.Seek(off)
		e, err := r.Next()
		if err != nil || e == nil {
			return ud, nil, fmt.Errorf("type at %#x of the unit at .debug_info offset %#x: %v", off, ud.h.off, err)
		}
		switch e.Tag {
		case dwarf.TagTypedef, dwarf.TagConstType, dwarf.TagVolatileType, dwarf.TagRestrictType:
			off, _ = e.Val(dwarf.AttrType).(dwarf.Offset)
		case dwarf.TagStructType, dwarf.TagUnionType:
			if decl, _ := e.Val(dwarf.AttrDeclaration).(bool); decl {
				name, _ := e.Val(dwarf.AttrName).(string)
				if name == "" {
					return ud, nil, nil
				}
				return t.def(name)
			}
			return ud, e, nil
		default:
			return ud, nil, nil
		}
	}
	return ud, nil, fmt.Errorf("type chain at %#x of the unit at .debug_info offset %#x longer than %d", off, ud.h.off, maxMemberDepth*2)
}
