package vmcore

import (
	"encoding/binary"
	"fmt"
	"strings"

	"github.com/unwindkit/unwindkit/fault"
	"github.com/unwindkit/unwindkit/internal/errs"
)

// BTF is the kernel's BPF Type Format type information
// (Documentation/bpf/btf.rst, include/uapi/linux/btf.h), enough of it to
// find structure sizes and member offsets.
type BTF struct {
	types  []btfType // index = type id - 1
	strs   []byte
	byName map[string][]uint32 // struct/union name -> ids
}

type btfType struct {
	name    uint32
	kind    uint8
	kflag   bool
	vlen    uint16
	sizeTyp uint32      // size, or the referenced type
	members []btfMember // struct/union
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

// btfErr is a malformed-BTF error at byte offset off of the BTF: a
// *CorruptError (errors.Is(err, ErrCorrupt)).
func btfErr(off int, format string, args ...any) error {
	return errs.Corruptf(fault.RuleMalformedBTF, uint64(off), format, args...)
}

// ParseBTF parses raw BTF (the .BTF section, __start_BTF..__stop_BTF).
// Malformed BTF gives an error wrapping ErrCorrupt with the byte offset.
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
	t := &BTF{strs: b[hdr+strOff : hdr+strOff+strLen], byName: map[string][]uint32{}}
	data := b[hdr+typOff : hdr+typOff+typLen]
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
			ty.members = make([]btfMember, ty.vlen)
			for i := range ty.members {
				m := data[off+12*i:]
				ty.members[i] = btfMember{name: le.Uint32(m), typ: le.Uint32(m[4:]), bitOff: le.Uint32(m[8:])}
				if ty.kflag {
					ty.members[i].bitSize = uint8(ty.members[i].bitOff >> 24)
					ty.members[i].bitOff &= 0xffffff
				}
			}
			if nm := t.str(ty.name); nm != "" {
				t.byName[nm] = append(t.byName[nm], uint32(len(t.types)+1))
			}
		}
		off += extra
		t.types = append(t.types, ty)
	}
	return t, nil
}

func (t *BTF) str(off uint32) string {
	if uint64(off) >= uint64(len(t.strs)) {
		return ""
	}
	s := t.strs[off:]
	for i, c := range s {
		if c == 0 {
			return string(s[:i])
		}
	}
	return string(s)
}

func (t *BTF) typ(id uint32) *btfType {
	if id == 0 || uint64(id) > uint64(len(t.types)) {
		return nil
	}
	return &t.types[id-1]
}

// resolve follows typedefs and qualifiers (at most 32 steps).
func (t *BTF) resolve(id uint32) *btfType {
	for range 32 {
		ty := t.typ(id)
		if ty == nil {
			return nil
		}
		switch ty.kind {
		case btfTypedef, btfVolatile, btfConst, btfRestrict, btfTypeTag:
			id = ty.sizeTyp
			continue
		}
		return ty
	}
	return nil
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
// unions are found as the compiler finds them).
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
		bits, mt, bitfield, ok := t.member(ty, p, 0)
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

// member finds name in ty, descending into anonymous members.
func (t *BTF) member(ty *btfType, name string, depth int) (bitOff uint64, typ uint32, bitfield, ok bool) {
	if depth > 8 {
		return 0, 0, false, false
	}
	for _, m := range ty.members {
		mn := t.str(m.name)
		if mn == name {
			return uint64(m.bitOff), m.typ, m.bitSize != 0, true
		}
		if mn == "" {
			if in := t.resolve(m.typ); in != nil && (in.kind == btfStruct || in.kind == btfUnion) {
				if b, ty2, bf, ok := t.member(in, name, depth+1); ok {
					return uint64(m.bitOff) + b, ty2, bf, true
				}
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
	switch {
	case stop <= start || stop-start > maxBTF:
		return nil, fmt.Errorf("%s: BTF [%#x, %#x) is empty or larger than %d bytes", v.Path, start, stop, maxBTF)
	case int64(stop-start) > v.f.Size:
		return nil, fmt.Errorf("%s: BTF [%#x, %#x) is larger than the dump (%d bytes): not in it", v.Path, start, stop, v.f.Size)
	}
	b := make([]byte, stop-start)
	if err := v.ReadVirt(b, start); err != nil {
		return nil, fmt.Errorf("%s: reading BTF: %w", v.Path, err)
	}
	return ParseBTF(b)
}
