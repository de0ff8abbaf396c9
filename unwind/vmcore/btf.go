package vmcore

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"

	"github.com/unwindkit/unwindkit/fault"
	"github.com/unwindkit/unwindkit/internal/errs"
)

// BTF is the kernel's BPF Type Format type information
// (Documentation/bpf/btf.rst, include/uapi/linux/btf.h), enough of it to
// find structure sizes and member offsets.
type BTF struct {
	types  []btfType           // index = type id - 1
	strs   string              // one copy: names are substrings of it, not copies
	byName map[string][]uint32 // struct/union name -> ids
}

type btfType struct {
	name    uint32
	kind    uint8
	kflag   bool
	vlen    uint16
	sizeTyp uint32      // size, or the referenced type
	members []btfMember // struct/union
	// loops is set on a struct or union that contains itself, or a type
	// that does, through anonymous members: no compiler writes that (a
	// struct cannot contain itself), so no member is looked up in it.
	loops bool
}

type btfMember struct {
	name, typ uint32
	bitOff    uint32
	bitSize   uint8 // non-zero for a bitfield (kind_flag structs)
}

// BTF kinds.
const (
	btfInt = iota + 1
	btfPtr
	btfArray
	btfStruct
	btfUnion
	btfEnum
	btfFwd
	btfTypedef
	btfVolatile
	btfConst
	btfRestrict
	btfFunc
	btfFuncProto
	btfVar
	btfDatasec
	btfFloat
	btfDeclTag
	btfTypeTag
	btfEnum64
)

// maxBTF bounds the BTF read from a dump (vmlinux's is about 5 MiB).
const maxBTF = 64 << 20

// maxBTFName bounds a name: KSYM_NAME_LEN (include/linux/kallsyms.h since
// 6.1), the bound the kernel's btf_name_valid_identifier applies, NUL
// included.
const maxBTFName = 512

// btfErr is a malformed-BTF error at byte offset off of the BTF: a
// *CorruptError (errors.Is(err, ErrCorrupt)).
func btfErr(off int, format string, args ...any) error {
	return errs.Corruptf(fault.RuleMalformedBTF, uint64(off), format, args...)
}

// ParseBTF parses raw BTF (the .BTF section, __start_BTF..__stop_BTF).
// Malformed BTF gives an error wrapping ErrCorrupt with the byte offset;
// so does the name of a struct, a union or a member that is outside the
// string section or longer than KSYM_NAME_LEN (512 bytes with its NUL).
// It takes time linear in len(b) and keeps no reference to b.
func ParseBTF(b []byte) (*BTF, error) {
	le := binary.LittleEndian
	if len(b) < 24 {
		return nil, btfErr(0, "%d bytes is shorter than the header", len(b))
	}
	if le.Uint16(b) != 0xeb9f {
		return nil, btfErr(0, "magic %#x, want 0xeb9f (little-endian BTF)", le.Uint16(b))
	}
	if b[2] != 1 {
		return nil, btfErr(2, "version %d, want 1", b[2])
	}
	hdr := uint64(le.Uint32(b[4:]))
	typOff, typLen := uint64(le.Uint32(b[8:])), uint64(le.Uint32(b[12:]))
	strOff, strLen := uint64(le.Uint32(b[16:])), uint64(le.Uint32(b[20:]))
	n := uint64(len(b))
	if hdr < 24 || hdr > n || typOff+typLen > n-hdr || strOff+strLen > n-hdr {
		return nil, btfErr(4, "sections (header %d, types %d+%d, strings %d+%d) exceed %d bytes", hdr, typOff, typLen, strOff, strLen, n)
	}
	t := &BTF{strs: string(b[hdr+strOff : hdr+strOff+strLen]), byName: map[string][]uint32{}}
	sbase := int(hdr + strOff)
	// name checks the name at string offset off of type id (of its
	// member mi, or of the type for -1), read from the byte at offset at.
	name := func(off uint32, id, at, mi int) (string, error) {
		nm, ok := t.name(off)
		if !ok {
			what := "struct"
			if mi >= 0 {
				what = fmt.Sprintf("member %d", mi)
			}
			if uint64(off) >= uint64(len(t.strs)) {
				return "", btfErr(at, "type %d: %s name offset %d outside the %d bytes of strings", id, what, off, len(t.strs))
			}
			return "", btfErr(sbase+int(off), "type %d: %s name at string offset %d is unterminated or longer than %d bytes (KSYM_NAME_LEN %d with its NUL)", id, what, off, maxBTFName-1, maxBTFName)
		}
		return nm, nil
	}
	data := b[hdr+typOff : hdr+typOff+typLen]
	t.types = make([]btfType, 0, len(data)/12) // a type takes at least 12 bytes
	base := int(hdr + typOff)
	for off := 0; off < len(data); {
		if len(data)-off < 12 {
			return nil, btfErr(base+off, "truncated type %d", len(t.types)+1)
		}
		info := le.Uint32(data[off+4:])
		ty := btfType{name: le.Uint32(data[off:]), kind: uint8(info >> 24 & 0x1f), kflag: info>>31 != 0,
			vlen: uint16(info), sizeTyp: le.Uint32(data[off+8:])}
		at := off
		off += 12
		var extra int
		switch ty.kind {
		case btfInt, btfVar, btfDeclTag:
			extra = 4
		case btfPtr, btfFwd, btfTypedef, btfVolatile, btfConst, btfRestrict, btfFunc, btfFloat, btfTypeTag:
		case btfArray:
			extra = 12
		case btfStruct, btfUnion, btfDatasec, btfEnum64:
			extra = 12 * int(ty.vlen)
		case btfEnum, btfFuncProto:
			extra = 8 * int(ty.vlen)
		default:
			return nil, btfErr(base+at, "type %d has unknown kind %d", len(t.types)+1, ty.kind)
		}
		if len(data)-off < extra {
			return nil, btfErr(base+at, "type %d (kind %d) truncated", len(t.types)+1, ty.kind)
		}
		if ty.kind == btfStruct || ty.kind == btfUnion {
			id := len(t.types) + 1
			nm, err := name(ty.name, id, base+at, -1)
			if err != nil {
				return nil, err
			}
			ty.members = make([]btfMember, ty.vlen)
			for i := range ty.members {
				m := data[off+12*i:]
				ty.members[i] = btfMember{name: le.Uint32(m), typ: le.Uint32(m[4:]), bitOff: le.Uint32(m[8:])}
				if _, err := name(ty.members[i].name, id, base+off+12*i, i); err != nil {
					return nil, err
				}
				if ty.kflag {
					ty.members[i].bitSize = uint8(ty.members[i].bitOff >> 24)
					ty.members[i].bitOff &= 0xffffff
				}
			}
			if nm != "" {
				t.byName[nm] = append(t.byName[nm], uint32(id))
			}
		}
		off += extra
		t.types = append(t.types, ty)
	}
	t.markLoops()
	return t, nil
}

// anonStruct returns the id of the struct or union that member m of a
// struct embeds anonymously, or 0.
func (t *BTF) anonStruct(m *btfMember) uint32 {
	if nm, _ := t.name(m.name); nm != "" {
		return 0
	}
	id := t.resolveID(m.typ)
	if in := t.typ(id); in != nil && (in.kind == btfStruct || in.kind == btfUnion) {
		return id
	}
	return 0
}

// markLoops sets loops on every struct or union that reaches a cycle of
// anonymous members: one depth-first walk over those edges, without
// recursion (a hostile chain may be millions of types long), in time
// linear in the members (each edge resolved in at most 32 steps).
func (t *BTF) markLoops() {
	const (
		unseen = iota
		open   // on the walk's stack
		done
	)
	state := make([]uint8, len(t.types))
	type frame struct {
		id uint32
		i  int // next member
	}
	var stack []frame
	for root := range t.types {
		if state[root] != unseen || t.types[root].kind != btfStruct && t.types[root].kind != btfUnion {
			continue
		}
		state[root] = open
		stack = append(stack[:0], frame{id: uint32(root + 1)})
		for len(stack) > 0 {
			f := &stack[len(stack)-1]
			ty := t.typ(f.id)
			if f.i == len(ty.members) {
				state[f.id-1] = done
				stack = stack[:len(stack)-1]
				if n := len(stack); n > 0 && ty.loops {
					t.typ(stack[n-1].id).loops = true
				}
				continue
			}
			in := t.anonStruct(&ty.members[f.i])
			f.i++
			switch {
			case in == 0:
			case state[in-1] == open: // on the stack: a cycle
				ty.loops = true
			case state[in-1] == done:
				ty.loops = ty.loops || t.typ(in).loops
			default:
				state[in-1] = open
				stack = append(stack, frame{id: in})
			}
		}
	}
}

// name returns the name at string offset off (a substring of t.strs, not
// a copy) and whether it is in the strings, NUL-terminated, within
// maxBTFName bytes with its NUL. ParseBTF checked every name a lookup
// reads.
func (t *BTF) name(off uint32) (string, bool) {
	if uint64(off) >= uint64(len(t.strs)) {
		return "", false
	}
	s := t.strs[off:]
	i := strings.IndexByte(s[:min(len(s), maxBTFName)], 0)
	if i < 0 {
		return "", false
	}
	return s[:i], true
}

func (t *BTF) typ(id uint32) *btfType {
	if id == 0 || uint64(id) > uint64(len(t.types)) {
		return nil
	}
	return &t.types[id-1]
}

// resolve follows typedefs and qualifiers (at most 32 steps).
func (t *BTF) resolve(id uint32) *btfType { return t.typ(t.resolveID(id)) }

// resolveID is resolve's type id, 0 for none.
func (t *BTF) resolveID(id uint32) uint32 {
	for range 32 {
		ty := t.typ(id)
		if ty == nil {
			return 0
		}
		switch ty.kind {
		case btfTypedef, btfVolatile, btfConst, btfRestrict, btfTypeTag:
			id = ty.sizeTyp
			continue
		}
		return id
	}
	return 0
}

// structByName returns the complete struct or union called name.
func (t *BTF) structByName(name string) *btfType {
	for _, id := range t.byName[name] {
		if ty := t.typ(id); ty != nil && ty.vlen > 0 {
			return ty
		}
	}
	return nil
}

// Size returns sizeof(struct name).
func (t *BTF) Size(name string) (uint64, error) {
	ty := t.structByName(name)
	if ty == nil {
		return 0, fmt.Errorf("vmcore: BTF has no struct %s", name)
	}
	return uint64(ty.sizeTyp), nil
}

// Offset returns the byte offset of a member path such as
// "task_struct.thread.cpu_context" (members of anonymous structs and
// unions are found as the compiler finds them, at most 8 deep). A struct
// that contains itself through anonymous members, which no compiler
// writes, has no members: looking one up in it is an error.
func (t *BTF) Offset(path string) (uint64, error) {
	parts := strings.Split(path, ".")
	ty := t.structByName(parts[0])
	if ty == nil || len(parts) < 2 {
		return 0, fmt.Errorf("vmcore: BTF has no struct %s", parts[0])
	}
	var off uint64
	for _, p := range parts[1:] {
		if ty == nil || (ty.kind != btfStruct && ty.kind != btfUnion) {
			return 0, fmt.Errorf("vmcore: BTF: %s: %s is not in a struct", path, p)
		}
		if ty.loops {
			return 0, fmt.Errorf("vmcore: BTF: %s: no member %s: the struct contains itself through anonymous members", path, p)
		}
		bits, mt, bitfield, ok := t.member(ty, p, 0, map[*btfType]int{})
		if !ok {
			return 0, fmt.Errorf("vmcore: BTF: %s: no member %s", path, p)
		}
		if bits%8 != 0 || bitfield {
			return 0, fmt.Errorf("vmcore: BTF: %s: %s is a bitfield", path, p)
		}
		off += uint64(bits / 8)
		ty = t.resolve(mt)
	}
	return off, nil
}

// member finds name in ty, descending into anonymous members (at most 8
// deep), the first in declaration order as the compiler finds it. ty does
// not loop (Offset checked), so neither does any type it embeds, and the
// embedded types form a DAG where a search of a type that failed at some
// depth fails at every greater one: a type is searched again in one
// lookup only from a shallower depth (seen holds the shallowest depth +
// 1). A lookup thus costs at most 9 passes over the members of the types
// it reaches, however often they are embedded, and answers what the
// search of every path answers.
func (t *BTF) member(ty *btfType, name string, depth int, seen map[*btfType]int) (bitOff uint64, typ uint32, bitfield, ok bool) {
	if d := seen[ty]; depth > 8 || d != 0 && d <= depth+1 {
		return 0, 0, false, false
	}
	seen[ty] = depth + 1
	for i := range ty.members {
		m := &ty.members[i]
		if mn, _ := t.name(m.name); mn == name {
			return uint64(m.bitOff), m.typ, m.bitSize != 0, true
		}
		if in := t.anonStruct(m); in != 0 {
			if b, ty2, bf, ok := t.member(t.typ(in), name, depth+1, seen); ok {
				return uint64(m.bitOff) + b, ty2, bf, true
			}
		}
	}
	return 0, 0, false, false
}

// BTF reads the kernel's BTF from the dump: the bytes between the
// __start_BTF and __stop_BTF symbols (kallsyms lists them with
// CONFIG_KALLSYMS_ALL; VMCOREINFO SYMBOL() entries are used first if
// present).
func (v *Vmcore) BTF(syms []KSym) (*BTF, error) {
	find := func(n string) (uint64, bool) {
		if a, ok := v.Info.Symbol(n); ok {
			return a, true
		}
		for _, s := range syms {
			if s.Name == n {
				return s.Addr, true
			}
		}
		return 0, false
	}
	start, ok1 := find("__start_BTF")
	stop, ok2 := find("__stop_BTF")
	if !ok1 || !ok2 {
		return nil, fmt.Errorf("%s: __start_BTF/__stop_BTF not among the symbols", v.Path)
	}
	if stop <= start {
		return nil, fmt.Errorf("%s: %w: __stop_BTF %#x is not above __start_BTF %#x", v.Path, ErrCorrupt, stop, start)
	}
	return v.readBTF(start, stop-start, "__start_BTF")
}

// ReadBTF reads the size bytes of BTF at kernel virtual address at and
// parses them. The size is checked before anything is allocated: at most
// 64 MiB (vmlinux's BTF is about 5 MiB) and no more than the dump's file.
// Errors name the dump and the address, and for malformed BTF the offset
// in it and its virtual address; they wrap ErrCorrupt when the BTF or the
// dump is malformed.
func (v *Vmcore) ReadBTF(at, size uint64) (*BTF, error) { return v.readBTF(at, size, "BTF") }

// readBTF is ReadBTF; what names at in errors ("__start_BTF").
func (v *Vmcore) readBTF(at, size uint64, what string) (*BTF, error) {
	switch {
	case size == 0 || size > maxBTF:
		return nil, fmt.Errorf("%s: %w: BTF at %s %#x: %d bytes, want 1 to %d", v.Path, ErrCorrupt, what, at, size, maxBTF)
	case size > uint64(v.f.Size):
		return nil, fmt.Errorf("%s: %w: BTF at %s %#x: %d bytes, more than the dump's %d: not in it", v.Path, ErrCorrupt, what, at, size, v.f.Size)
	}
	b := make([]byte, size)
	if err := v.ReadVirt(b, at); err != nil {
		return nil, fmt.Errorf("reading BTF at %s %#x (%d bytes): %w", what, at, size, err)
	}
	t, err := ParseBTF(b)
	if err != nil {
		var ce *errs.CorruptError
		if errors.As(err, &ce) {
			return nil, fmt.Errorf("%s: BTF at %s %#x (%d bytes), its byte %#x at %#x: %w", v.Path, what, at, size, ce.Addr, at+ce.Addr, err)
		}
		return nil, fmt.Errorf("%s: BTF at %s %#x (%d bytes): %w", v.Path, what, at, size, err)
	}
	return t, nil
}
