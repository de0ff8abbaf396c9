// Package elfsym reads the function symbols of ELF executables and
// libraries with bounded cost, for the prologue scanner and the core
// reader: see [ELFReader] and [CheckELF].
package elfsym

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"fmt"
	"io"

	"github.com/unwindkit/unwindkit/internal/errs"
)

// MaxNameLen bounds the bytes of a name read from an ELF string table,
// as the kernel's KSYM_NAME_LEN bounds kallsyms names (user-space C++
// and Rust names run longer than its 512 bytes, hence 4 KiB): a longer
// symbol name is cut to MaxNameLen bytes and counted in [ELFTable.Cut];
// a longer section name makes [CheckELF] refuse the file.
const MaxNameLen = 4096

// InflateBudget returns how many bytes of SHF_COMPRESSED section data
// reading a file of size bytes may inflate in all: 8 times its size plus
// 32 MiB (64 MiB when the size is unknown, size < 0). Real symbol tables
// compress by less than 8; a bomb of a few KiB inflates to no more than
// the fixed part.
func InflateBudget(size int64) int64 {
	if size < 0 {
		return 64 << 20
	}
	return 32<<20 + 8*min(size, 1<<56)
}

// ELFError is a problem with an ELF file's section headers, section names
// or symbol tables: the file offset where it lies (-1 when it is about no
// one place) and what is wrong. It unwraps to errs.ErrCorrupt.
type ELFError struct {
	Off int64
	Msg string
}

func (e *ELFError) Error() string {
	if e.Off < 0 {
		return e.Msg
	}
	return fmt.Sprintf("%s (at offset %#x)", e.Msg, e.Off)
}

// Unwrap returns errs.ErrCorrupt.
func (e *ELFError) Unwrap() error { return errs.ErrCorrupt }

func elfErrf(off uint64, format string, args ...any) error {
	return &ELFError{Off: int64(min(off, 1<<62)), Msg: fmt.Sprintf(format, args...)}
}

// ELF64 header and section header fields (System V gABI).
const (
	ehdrSize     = 64
	shdrSize     = 64
	chdrSize     = 24
	symSize      = 24
	offShoff     = 0x28
	offShentsize = 0x3a
	offShnum     = 0x3c
	offShstrndx  = 0x3e
	shnXIndex    = 0xffff
)

// CheckELF checks what debug/elf's NewFile would read from the size
// bytes of r without a bound, so that NewFile may be called next: the
// section name table must not be SHF_COMPRESSED (NewFile inflates it
// whole, to whatever its ch_size says; linkers never compress it), each
// section name must be at most MaxNameLen bytes, and all of them
// together at most 4 times the table plus 64 KiB (NewFile copies each
// name, and sections sharing one long name would cost sections × its
// length). Only ELF64 little-endian files are accepted. A file whose
// headers NewFile itself refuses passes, for NewFile to say what is
// wrong. The errors are *ELFError values.
func CheckELF(r io.ReaderAt, size int64) error {
	var h [ehdrSize]byte
	if size < ehdrSize {
		return elfErrf(0, "file of %d bytes is shorter than the ELF64 header", size)
	}
	if _, err := r.ReadAt(h[:], 0); err != nil {
		return elfErrf(0, "read the ELF header: %v", err)
	}
	if string(h[:4]) != elf.ELFMAG {
		return elfErrf(0, "not an ELF file: starts with %q", h[:4])
	}
	if elf.Class(h[4]) != elf.ELFCLASS64 || elf.Data(h[5]) != elf.ELFDATA2LSB {
		return elfErrf(4, "%v %v: want a 64-bit little-endian ELF file", elf.Class(h[4]), elf.Data(h[5]))
	}
	le := binary.LittleEndian
	shoff, shentsize := le.Uint64(h[offShoff:]), uint64(le.Uint16(h[offShentsize:]))
	shnum, shstrndx := uint64(le.Uint16(h[offShnum:])), uint64(le.Uint16(h[offShstrndx:]))
	if shoff == 0 || shentsize < shdrSize || shoff > uint64(size) {
		return nil // no section headers, or NewFile refuses them
	}
	shdr := func(i uint64) []byte { // nil when not in the file
		if i > (uint64(size)-shoff)/shentsize {
			return nil
		}
		at := shoff + i*shentsize
		if uint64(size)-at < shdrSize {
			return nil
		}
		b := make([]byte, shdrSize)
		if _, err := r.ReadAt(b, int64(at)); err != nil {
			return nil
		}
		return b
	}
	if shnum == 0 || shstrndx == shnXIndex {
		s0 := shdr(0)
		if s0 == nil {
			return nil
		}
		if shnum == 0 {
			shnum = le.Uint64(s0[32:]) // sh_size
		}
		if shstrndx == shnXIndex {
			shstrndx = uint64(le.Uint32(s0[40:])) // sh_link
		}
	}
	if shnum == 0 || shstrndx == 0 || shstrndx >= shnum || shnum > (uint64(size)-shoff)/shentsize {
		return nil
	}
	st := shdr(shstrndx)
	if st == nil || elf.SectionType(le.Uint32(st[4:])) != elf.SHT_STRTAB {
		return nil
	}
	stAt := shoff + shstrndx*shentsize
	if elf.SectionFlag(le.Uint64(st[8:]))&elf.SHF_COMPRESSED != 0 {
		return elfErrf(stAt, "section %d, the section name table, is SHF_COMPRESSED: not supported", shstrndx)
	}
	off, n := le.Uint64(st[24:]), le.Uint64(st[32:])
	if off > uint64(size) || n > uint64(size)-off {
		return nil // NewFile fails reading it
	}
	tab := make([]byte, n)
	if _, err := r.ReadAt(tab, int64(off)); err != nil {
		return elfErrf(off, "read the section name table: %v", err)
	}
	all := make([]byte, shnum*shentsize)
	if _, err := r.ReadAt(all, int64(shoff)); err != nil {
		return nil
	}
	budget := 4*n + 64<<10
	for i := uint64(0); i < shnum; i++ {
		start := uint64(le.Uint32(all[i*shentsize:]))
		if start >= n {
			continue // NewFile: bad section name index
		}
		rest := tab[start:min(n, start+MaxNameLen+1)]
		k := bytes.IndexByte(rest, 0)
		if k < 0 {
			if len(rest) > MaxNameLen {
				return elfErrf(shoff+i*shentsize, "section %d: name at %#x of the section name table is longer than %d bytes", i, start, MaxNameLen)
			}
			continue // unterminated: NewFile refuses it
		}
		if uint64(k) > budget {
			return elfErrf(shoff+i*shentsize, "section %d: the section names up to it take more than %d bytes (4 times the section name table of %d bytes plus 64 KiB): names shared by many sections", i, 4*n+64<<10, n)
		}
		budget -= uint64(k)
	}
	return nil
}

// ELFReader reads an ELF file's sections and symbol tables through
// debug/elf's section headers with bounded cost: a section's bytes must
// lie in the file, SHF_COMPRESSED sections are inflated only within
// InflateBudget(size), checked before inflating, and names are
// substrings of their string table (one copy of the table, however many
// symbols share a name), cut to MaxNameLen.
type ELFReader struct {
	f      *elf.File
	size   int64
	budget int64 // inflated bytes left
}

// NewELFReader returns a reader of f, a file of size bytes (-1 if
// unknown: then sections are read as far as f's reader holds them).
func NewELFReader(f *elf.File, size int64) *ELFReader {
	return &ELFReader{f: f, size: size, budget: InflateBudget(size)}
}

// Data returns section s's bytes, inflated when it is SHF_COMPRESSED.
// It does not decompress ".zdebug" sections (debug/elf does): their
// bytes are returned as they are in the file.
func (r *ELFReader) Data(s *elf.Section) ([]byte, error) {
	if s.Type == elf.SHT_NOBITS {
		return nil, elfErrf(s.Offset, "section %s is SHT_NOBITS: no bytes in the file", s.Name)
	}
	if r.size >= 0 && (s.Offset > uint64(r.size) || s.FileSize > uint64(r.size)-s.Offset) {
		return nil, elfErrf(s.Offset, "section %s [%#x, +%#x) runs past the end of the file (%d bytes)", s.Name, s.Offset, s.FileSize, r.size)
	}
	if s.Flags&elf.SHF_COMPRESSED == 0 {
		if r.size >= 0 {
			b := make([]byte, s.FileSize)
			if _, err := s.ReadAt(b, 0); err != nil && !(err == io.EOF && len(b) == 0) {
				return nil, elfErrf(s.Offset, "section %s: %v", s.Name, err)
			}
			return b, nil
		}
		// Unknown size: read as the data arrive, not FileSize at once.
		b, err := io.ReadAll(io.NewSectionReader(s, 0, int64(min(s.FileSize, 1<<62))))
		if err == nil && uint64(len(b)) != s.FileSize {
			err = io.ErrUnexpectedEOF
		}
		if err != nil {
			return nil, elfErrf(s.Offset, "section %s: %v", s.Name, err)
		}
		return b, nil
	}
	if s.Flags&elf.SHF_ALLOC != 0 {
		return nil, elfErrf(s.Offset, "section %s is SHF_COMPRESSED and SHF_ALLOC: compression applies only to non-allocated sections", s.Name)
	}
	if s.FileSize < chdrSize {
		return nil, elfErrf(s.Offset, "section %s is SHF_COMPRESSED but holds %d bytes, less than its %d-byte header", s.Name, s.FileSize, chdrSize)
	}
	if s.Size > uint64(r.budget) {
		return nil, elfErrf(s.Offset+4, "section %s: SHF_COMPRESSED to %d bytes (ch_size), more than the %d bytes left to inflate (8 times the file's size plus 32 MiB)", s.Name, s.Size, r.budget)
	}
	r.budget -= int64(s.Size)
	b := make([]byte, s.Size)
	if _, err := io.ReadFull(s.Open(), b); err != nil {
		return nil, elfErrf(s.Offset, "section %s: inflate %d bytes: %v", s.Name, s.Size, err)
	}
	return b, nil
}

// ELFSym is a function symbol: STT_FUNC or STT_GNU_IFUNC, in a section
// (not SHN_UNDEF).
type ELFSym struct {
	Name    string
	Value   uint64
	Size    uint64
	Info    byte
	Section elf.SectionIndex
}

// ELFTable is the function symbols of one symbol table.
type ELFTable struct {
	Name  string   // ".symtab" or ".dynsym" (the section's name)
	Funcs []ELFSym // in table order
	// Cut counts the names longer than MaxNameLen, cut to it.
	Cut int
}

// Funcs reads the function symbols of the file's first section of type
// typ (elf.SHT_SYMTAB or elf.SHT_DYNSYM). It returns nil and no error
// when there is no such section or it is empty.
func (r *ELFReader) Funcs(typ elf.SectionType) (*ELFTable, error) {
	return r.symbols(typ, func(t elf.SymType) bool { return t == elf.STT_FUNC || t == elf.STT_LOOS })
}

// Defined reads every defined symbol of the file's first section of type
// typ whose type is STT_NOTYPE, STT_OBJECT, STT_FUNC, STT_TLS or
// STT_GNU_IFUNC (not sections or files), with the bounds of Funcs: a
// kernel's data symbols (init_task, __per_cpu_offset) are STT_OBJECT.
// ELFTable.Funcs then holds them all.
func (r *ELFReader) Defined(typ elf.SectionType) (*ELFTable, error) {
	return r.symbols(typ, func(t elf.SymType) bool {
		return t == elf.STT_NOTYPE || t == elf.STT_OBJECT || t == elf.STT_FUNC || t == elf.STT_TLS || t == elf.STT_LOOS
	})
}

func (r *ELFReader) symbols(typ elf.SectionType, keep func(elf.SymType) bool) (*ELFTable, error) {
	s := r.f.SectionByType(typ)
	if s == nil || s.Size == 0 {
		return nil, nil
	}
	data, err := r.Data(s)
	if err != nil {
		return nil, err
	}
	if len(data)%symSize != 0 {
		return nil, elfErrf(s.Offset, "symbol table %s of %d bytes is not a whole number of %d-byte symbols", s.Name, len(data), symSize)
	}
	if s.Link == 0 || int(s.Link) >= len(r.f.Sections) {
		return nil, elfErrf(s.Offset, "symbol table %s: sh_link %d names no string table", s.Name, s.Link)
	}
	ss := r.f.Sections[s.Link]
	if ss.Type != elf.SHT_STRTAB {
		return nil, elfErrf(ss.Offset, "symbol table %s: its string table (section %d, %s) is %v, not SHT_STRTAB", s.Name, s.Link, ss.Name, ss.Type)
	}
	sb, err := r.Data(ss)
	if err != nil {
		return nil, err
	}
	strs := string(sb) // one copy: every name is a substring of it
	ends := newNulIndex(sb)
	t := &ELFTable{Name: s.Name}
	le := binary.LittleEndian
	for i := symSize; i < len(data); i += symSize { // entry 0 is the null symbol
		e := data[i : i+symSize]
		info := e[4]
		typ := elf.ST_TYPE(info)
		shndx := elf.SectionIndex(le.Uint16(e[6:]))
		if !keep(typ) || shndx == elf.SHN_UNDEF {
			continue
		}
		sym := ELFSym{Value: le.Uint64(e[8:]), Size: le.Uint64(e[16:]), Info: info, Section: shndx}
		if off := int(le.Uint32(e)); off < len(sb) {
			// A name without its NUL is "", as debug/elf reads it.
			if end := ends.next(sb, off); end < len(sb) {
				if end-off > MaxNameLen {
					end = off + MaxNameLen
					t.Cut++
				}
				sym.Name = strs[off:end]
			}
		}
		t.Funcs = append(t.Funcs, sym)
	}
	return t, nil
}

// nulIndex finds the first NUL at or after an offset of a string table
// in at most 64 bytes of search: block[k] is the first NUL at or after
// 64k (len(b) if none), built in one pass, so names sharing one long
// string cost nothing more.
type nulIndex struct{ block []int }

func newNulIndex(b []byte) nulIndex {
	nb := (len(b) + 63) / 64
	x := nulIndex{block: make([]int, nb+1)}
	x.block[nb] = len(b)
	for k := nb - 1; k >= 0; k-- {
		lo := 64 * k
		if j := bytes.IndexByte(b[lo:min(lo+64, len(b))], 0); j >= 0 {
			x.block[k] = lo + j
		} else {
			x.block[k] = x.block[k+1]
		}
	}
	return x
}

// next returns the offset of the first NUL at or after off (< len(b)),
// or len(b).
func (x nulIndex) next(b []byte, off int) int {
	k := off / 64
	if j := bytes.IndexByte(b[off:min(64*(k+1), len(b))], 0); j >= 0 {
		return off + j
	}
	return x.block[k+1]
}
