// Package elfcore reads and writes the ELF core format shared by user-space
// core files (ET_CORE written by Linux's fs/binfmt_elf.c elf_core_dump and
// by qemu-user's elf_core_dump) and kernel vmcores (QEMU's
// dump-guest-memory, /proc/vmcore): the ELF64 little-endian header, the
// program headers (PT_NOTE, PT_LOAD) and the notes.
//
// Every field is checked against the file before it is used: segments must
// lie inside the file, PT_LOADs must not overlap, notes must fit their
// segment. Errors are *FormatError values naming the file, the part
// (header, segment i, note i) and the offset; they wrap errs.ErrCorrupt.
// Nothing allocated depends on a field more than on the file's size.
package elfcore

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sort"

	"github.com/unwindkit/unwindkit/internal/errs"
)

// ELF constants (elf.h).
const (
	PTLoad = 1
	PTNote = 4

	ETCore    = 4
	EMAArch64 = 183

	ehdrSize = 64
	phdrSize = 56

	// MaxProgs bounds the program headers read (ELF's PN_XNUM extension is
	// not supported: a core with 65535 or more segments is refused).
	MaxProgs = 0xfffe
	// MaxNotes bounds the notes of one file.
	MaxNotes = 1 << 16
	// MaxNoteBytes bounds the total size of the PT_NOTE segments.
	MaxNoteBytes = 64 << 20
)

// FormatError is a malformed core: File, the part (for example "header",
// "segment 3", "note 2 (CORE NT_PRSTATUS)"), the file offset and what is
// wrong.
type FormatError struct {
	File string
	Part string
	Off  int64
	Msg  string
}

func (e *FormatError) Error() string {
	return fmt.Sprintf("%s: %s at offset %#x: %s", e.File, e.Part, e.Off, e.Msg)
}

// Unwrap returns errs.ErrCorrupt.
func (e *FormatError) Unwrap() error { return errs.ErrCorrupt }

// Prog is one program header.
type Prog struct {
	Index         int
	Type, Flags   uint32
	Off           uint64
	VAddr, PAddr  uint64
	FileSz, MemSz uint64
	Align         uint64
}

// Note is one note.
type Note struct {
	Index   int
	Name    string
	Type    uint32
	Desc    []byte
	DescOff int64 // file offset of Desc
}

// Part names the note in errors, e.g. "note 2 (CORE type 1)".
func (n *Note) Part() string { return fmt.Sprintf("note %d (%s type %#x)", n.Index, n.Name, n.Type) }

// File is a parsed ELF core. Its memory is read from R on demand.
type File struct {
	Name  string
	R     io.ReaderAt
	Size  int64
	Type  uint16
	Mach  uint16
	Progs []Prog
	Notes []Note
	// Loads are the PT_LOAD segments sorted by the address space chosen
	// at Parse (virtual or physical).
	Loads []Prog
	phys  bool
	// shared: PT_LOADs may overlap where they map the same file bytes
	// (ParseShared); Loads holds them merged.
	shared bool
}

func (f *File) errf(part string, off int64, format string, args ...any) error {
	return &FormatError{File: f.Name, Part: part, Off: off, Msg: fmt.Sprintf(format, args...)}
}

// Errf returns a *FormatError for f.
func (f *File) Errf(part string, off int64, format string, args ...any) error {
	return f.errf(part, off, format, args...)
}

// Parse reads the header, program headers and notes of the core r of size
// bytes. phys selects the address space of PT_LOADs: physical (p_paddr,
// vmcores) or virtual (p_vaddr, user cores). Overlapping PT_LOADs in that
// space are an error.
func Parse(name string, r io.ReaderAt, size int64, phys bool) (*File, error) {
	return parse(name, r, size, phys, false)
}

// ParseShared is Parse by virtual address for /proc/kcore, whose
// PT_LOADs overlap (on arm64 the kernel image, KCORE_TEXT, lies inside
// the vmalloc range, KCORE_VMALLOC) but give every address one file
// offset (p_offset - p_vaddr is the same for all: fs/proc/kcore.c's
// kc_vaddr_to_offset). Overlapping PT_LOADs must agree on that
// difference and hold all their bytes (p_filesz = p_memsz); Loads holds
// them merged into one segment each. The bytes the segments claim are
// bounded by the file's size as in Parse, counted once where they
// overlap.
func ParseShared(name string, r io.ReaderAt, size int64) (*File, error) {
	return parse(name, r, size, false, true)
}

func parse(name string, r io.ReaderAt, size int64, phys, shared bool) (*File, error) {
	f := &File{Name: name, R: r, Size: size, phys: phys, shared: shared}
	var h [ehdrSize]byte
	if size < ehdrSize {
		return nil, f.errf("header", 0, "file of %d bytes is shorter than the ELF header", size)
	}
	if _, err := r.ReadAt(h[:], 0); err != nil {
		return nil, f.errf("header", 0, "read: %v", err)
	}
	switch {
	case string(h[:4]) != "\x7fELF":
		return nil, f.errf("header", 0, "bad magic %q", h[:4])
	case h[4] != 2:
		return nil, f.errf("header", 4, "class %d, want ELFCLASS64", h[4])
	case h[5] != 1:
		return nil, f.errf("header", 5, "data encoding %d, want little-endian", h[5])
	}
	le := binary.LittleEndian
	f.Type, f.Mach = le.Uint16(h[16:]), le.Uint16(h[18:])
	if f.Type != ETCore {
		return nil, f.errf("header", 16, "e_type %d, want ET_CORE (4)", f.Type)
	}
	if f.Mach != EMAArch64 {
		return nil, f.errf("header", 18, "e_machine %d, want EM_AARCH64 (183)", f.Mach)
	}
	phoff := le.Uint64(h[32:])
	phentsize, phnum := le.Uint16(h[54:]), le.Uint16(h[56:])
	if phnum == 0 {
		return nil, f.errf("header", 56, "no program headers")
	}
	if phnum > MaxProgs {
		return nil, f.errf("header", 56, "e_phnum %#x (PN_XNUM extension) not supported", phnum)
	}
	if phentsize != phdrSize {
		return nil, f.errf("header", 54, "e_phentsize %d, want %d", phentsize, phdrSize)
	}
	tbl := uint64(phnum) * phdrSize
	if phoff > uint64(size) || tbl > uint64(size)-phoff {
		return nil, f.errf("header", 32, "program headers [%#x, +%#x) outside the file (%#x bytes)", phoff, tbl, size)
	}
	buf := make([]byte, tbl)
	if _, err := r.ReadAt(buf, int64(phoff)); err != nil {
		return nil, f.errf("header", int64(phoff), "read program headers: %v", err)
	}
	var noteBytes, dataBytes uint64
	for i := 0; i < int(phnum); i++ {
		b := buf[i*phdrSize:]
		p := Prog{Index: i, Type: le.Uint32(b), Flags: le.Uint32(b[4:]), Off: le.Uint64(b[8:]),
			VAddr: le.Uint64(b[16:]), PAddr: le.Uint64(b[24:]), FileSz: le.Uint64(b[32:]),
			MemSz: le.Uint64(b[40:]), Align: le.Uint64(b[48:])}
		part := fmt.Sprintf("segment %d", i)
		at := int64(phoff) + int64(i*phdrSize)
		if p.Type != PTLoad && p.Type != PTNote {
			f.Progs = append(f.Progs, p)
			continue
		}
		if p.Off > uint64(size) || p.FileSz > uint64(size)-p.Off {
			return nil, f.errf(part, at, "data [%#x, +%#x) outside the file (%#x bytes)", p.Off, p.FileSz, size)
		}
		// Segments of a real core never share file bytes: together
		// they hold at most the file. This bounds what readers copy.
		if !shared || p.Type != PTLoad {
			dataBytes += p.FileSz
		}
		if dataBytes > uint64(size) {
			return nil, f.errf(part, at, "segments claim %#x bytes, more than the file's %#x", dataBytes, size)
		}
		if p.Type == PTLoad {
			if p.FileSz > p.MemSz {
				return nil, f.errf(part, at, "p_filesz %#x > p_memsz %#x", p.FileSz, p.MemSz)
			}
			a := f.addr(p)
			if p.MemSz > 0 && a+p.MemSz-1 < a {
				return nil, f.errf(part, at, "[%#x, +%#x) wraps around the address space", a, p.MemSz)
			}
		} else {
			noteBytes += p.FileSz
			if noteBytes > MaxNoteBytes {
				return nil, f.errf(part, at, "notes exceed %d bytes", MaxNoteBytes)
			}
		}
		f.Progs = append(f.Progs, p)
	}
	for _, p := range f.Progs {
		switch p.Type {
		case PTLoad:
			if p.MemSz > 0 {
				f.Loads = append(f.Loads, p)
			}
		case PTNote:
			if err := f.readNotes(p); err != nil {
				return nil, err
			}
		}
	}
	sort.SliceStable(f.Loads, func(i, j int) bool { return f.addr(f.Loads[i]) < f.addr(f.Loads[j]) })
	if shared {
		if err := f.mergeShared(phoff, dataBytes); err != nil {
			return nil, err
		}
	}
	for i := 1; i < len(f.Loads); i++ {
		a, b := f.Loads[i-1], f.Loads[i]
		if f.addr(a)+a.MemSz > f.addr(b) {
			return nil, f.errf(fmt.Sprintf("segment %d", b.Index), int64(phoff)+int64(b.Index*phdrSize),
				"[%#x, +%#x) overlaps segment %d [%#x, +%#x)", f.addr(b), b.MemSz, a.Index, f.addr(a), a.MemSz)
		}
	}
	return f, nil
}

// mergeShared merges the overlapping PT_LOADs of a ParseShared file,
// which must map their addresses to the same file offsets, and bounds
// the bytes of the merged segments by the file (other bytes counted
// before: notes).
func (f *File) mergeShared(phoff, other uint64) error {
	var out []Prog
	for _, p := range f.Loads {
		n := len(out)
		if n == 0 || out[n-1].VAddr+out[n-1].MemSz <= p.VAddr {
			out = append(out, p)
			continue
		}
		q := &out[n-1]
		at := int64(phoff) + int64(p.Index*phdrSize)
		if p.FileSz != p.MemSz || q.FileSz != q.MemSz || p.Off-q.Off != p.VAddr-q.VAddr || p.Off < q.Off {
			return f.errf(fmt.Sprintf("segment %d", p.Index), at, "[%#x, +%#x) at offset %#x overlaps segment %d [%#x, +%#x) at offset %#x, mapping other file bytes",
				p.VAddr, p.MemSz, p.Off, q.Index, q.VAddr, q.MemSz, q.Off)
		}
		if e := p.VAddr + p.MemSz; e > q.VAddr+q.MemSz {
			q.MemSz = e - q.VAddr
			q.FileSz = q.MemSz
		}
	}
	total := other
	for _, p := range out {
		total += p.FileSz
		if total > uint64(f.Size) || total < p.FileSz {
			return f.errf(fmt.Sprintf("segment %d", p.Index), int64(phoff)+int64(p.Index*phdrSize), "segments claim %#x bytes, more than the file's %#x", total, f.Size)
		}
	}
	f.Loads = out
	return nil
}

// Phys reports whether the PT_LOADs are addressed physically.
func (f *File) Phys() bool { return f.phys }

func (f *File) addr(p Prog) uint64 {
	if f.phys {
		return p.PAddr
	}
	return p.VAddr
}

// Addr returns p's address in the file's address space.
func (f *File) Addr(p Prog) uint64 { return f.addr(p) }

func (f *File) readNotes(p Prog) error {
	if p.FileSz == 0 {
		// Nothing to read: an empty segment may sit at the very end of
		// the file (WriteTrimmed puts it there), where reading even 0
		// bytes is io.EOF for some io.ReaderAt.
		return nil
	}
	data := make([]byte, p.FileSz)
	if _, err := f.R.ReadAt(data, int64(p.Off)); err != nil {
		return f.errf(fmt.Sprintf("segment %d", p.Index), int64(p.Off), "read notes: %v", err)
	}
	le := binary.LittleEndian
	for off := uint64(0); off < uint64(len(data)); {
		at := int64(p.Off + off)
		idx := len(f.Notes)
		part := fmt.Sprintf("note %d", idx)
		if idx >= MaxNotes {
			return f.errf(part, at, "more than %d notes", MaxNotes)
		}
		if uint64(len(data))-off < 12 {
			// Trailing padding shorter than a note header is tolerated
			// only when it is zero.
			for _, c := range data[off:] {
				if c != 0 {
					return f.errf(part, at, "truncated note header (%d bytes left in segment %d)", uint64(len(data))-off, p.Index)
				}
			}
			break
		}
		namesz, descsz, typ := uint64(le.Uint32(data[off:])), uint64(le.Uint32(data[off+4:])), le.Uint32(data[off+8:])
		nameEnd := off + 12 + align4(namesz)
		if nameEnd > uint64(len(data)) {
			return f.errf(part, at, "name size %d exceeds segment %d", namesz, p.Index)
		}
		descEnd := nameEnd + align4(descsz)
		if descEnd > uint64(len(data)) && nameEnd+descsz <= uint64(len(data)) {
			descEnd = nameEnd + descsz // last note without padding
		}
		if descEnd > uint64(len(data)) {
			return f.errf(part, at, "desc size %d exceeds segment %d", descsz, p.Index)
		}
		name := data[off+12 : off+12+namesz]
		for len(name) > 0 && name[len(name)-1] == 0 {
			name = name[:len(name)-1]
		}
		f.Notes = append(f.Notes, Note{Index: idx, Name: string(name), Type: typ,
			Desc: data[nameEnd : nameEnd+descsz], DescOff: int64(p.Off + nameEnd)})
		off = descEnd
	}
	return nil
}

func align4(n uint64) uint64 { return (n + 3) &^ 3 }

// ErrNotHeld says an address is in a PT_LOAD whose bytes the file does
// not hold (beyond p_filesz: not dumped or trimmed) or in no PT_LOAD.
var ErrNotHeld = errors.New("elfcore: address not held by the file")

// Find returns the PT_LOAD containing addr.
func (f *File) Find(addr uint64) (Prog, bool) {
	i := sort.Search(len(f.Loads), func(i int) bool { return f.addr(f.Loads[i])+f.Loads[i].MemSz > addr })
	if i < len(f.Loads) && f.addr(f.Loads[i]) <= addr {
		return f.Loads[i], true
	}
	return Prog{}, false
}

// ReadAt reads len(b) bytes at addr (in the file's address space). All of
// them must be in the file: an address in no segment, or beyond a
// segment's p_filesz, fails with ErrNotHeld (wrapped).
func (f *File) ReadAt(b []byte, addr uint64) error {
	for len(b) > 0 {
		p, ok := f.Find(addr)
		if !ok {
			return fmt.Errorf("%s: %#x: %w (no segment)", f.Name, addr, ErrNotHeld)
		}
		off := addr - f.addr(p)
		if off >= p.FileSz {
			return fmt.Errorf("%s: %#x: %w (segment %d holds %#x of %#x bytes)", f.Name, addr, ErrNotHeld, p.Index, p.FileSz, p.MemSz)
		}
		n := min(uint64(len(b)), p.FileSz-off)
		if _, err := f.R.ReadAt(b[:n], int64(p.Off+off)); err != nil {
			return f.errf(fmt.Sprintf("segment %d", p.Index), int64(p.Off+off), "read: %v", err)
		}
		b, addr = b[n:], addr+n
	}
	return nil
}
