package prologue

import (
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"sort"

	"github.com/unwindkit/unwindkit/internal/errs"
	"github.com/unwindkit/unwindkit/internal/symtab/elfsym"
)

type section struct {
	addr uint64
	data []byte
}

// Binary is an arm64 ELF file's executable code and function symbols.
type Binary struct {
	text   []section // executable sections, sorted by address
	funcs  []Func
	tables string // the symbol tables read: ".symtab", ".dynsym" or both
	notes  []string
}

// ErrNotArm64 is returned for an ELF file of another machine.
var ErrNotArm64 = errors.New("prologue: not an arm64 (EM_AARCH64) ELF file")

// ErrNoFuncSymbols is returned for an ELF file whose .symtab and .dynsym
// (if any) hold no function symbol: nothing to scan. Stripped executables
// without dynamic symbols are such files.
var ErrNoFuncSymbols = errors.New("prologue: no function symbols")

// FileError is a malformed, truncated or unsuitable file: the file, the
// offset where the problem lies (-1 when it is not about one place), and
// what is wrong. It unwraps to [ErrNotArm64] for another machine's ELF
// file, to [ErrNoFuncSymbols] for a file without function symbols, and to
// errs.ErrCorrupt otherwise.
type FileError struct {
	Path string
	Off  int64
	Msg  string
	Err  error
}

func (e *FileError) Error() string {
	name := e.Path
	if name == "" {
		name = "(ELF file)"
	}
	if e.Off >= 0 {
		return fmt.Sprintf("prologue: %s: %s (at offset %#x)", name, e.Msg, e.Off)
	}
	return fmt.Sprintf("prologue: %s: %s", name, e.Msg)
}

func (e *FileError) Unwrap() error { return e.Err }

func fileErr(path string, off int64, format string, args ...any) error {
	return &FileError{Path: path, Off: off, Msg: fmt.Sprintf(format, args...), Err: errs.ErrCorrupt}
}

// Open reads and scans the ELF file at path. Every error names the file.
func Open(path string) (*Binary, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("prologue: %w", err)
	}
	defer fh.Close()
	st, err := fh.Stat()
	if err != nil {
		return nil, fmt.Errorf("prologue: %w", err)
	}
	return NewReader(path, fh, st.Size())
}

// ELF64 header fields (System V gABI, "ELF Header").
const (
	ehdrSize     = 64
	offClass     = 4
	offData      = 5
	offMachine   = 18
	offPhoff     = 0x20
	offShoff     = 0x28
	offPhentsize = 0x36
	offPhnum     = 0x38
	offShentsize = 0x3a
	offShnum     = 0x3c
)

// NewReader checks the ELF header of the size bytes in r, then reads and
// scans the file; name is used in errors. It reports, naming the file: an
// empty file, a file that is not ELF, a header or table truncated at an
// offset, a 32-bit or big-endian file, another machine ([ErrNotArm64]),
// sections past the end of the file, and a file without function symbols
// ([ErrNoFuncSymbols]).
func NewReader(name string, r io.ReaderAt, size int64) (*Binary, error) {
	if size == 0 {
		return nil, fileErr(name, -1, "empty file")
	}
	var h [ehdrSize]byte
	n, err := r.ReadAt(h[:], 0)
	if n < 4 {
		if err != nil && err != io.EOF {
			return nil, fmt.Errorf("prologue: %s: %w", name, err)
		}
	}
	if n < 4 || string(h[:4]) != elf.ELFMAG {
		if n >= 4 || string(h[:n]) != elf.ELFMAG[:n] {
			return nil, fileErr(name, 0, "not an ELF file: starts with %q, want \"\\x7fELF\"", h[:min(n, 4)])
		}
		return nil, fileErr(name, int64(n), "truncated: the ELF magic needs 4 bytes")
	}
	if n < ehdrSize {
		if err != nil && err != io.EOF {
			return nil, fmt.Errorf("prologue: %s: %w", name, err)
		}
		return nil, fileErr(name, int64(n), "truncated: the ELF header needs %d bytes", ehdrSize)
	}
	switch {
	case elf.Class(h[offClass]) != elf.ELFCLASS64:
		return nil, fileErr(name, offClass, "ELF class %v, want ELFCLASS64 (arm64 is 64-bit)", elf.Class(h[offClass]))
	case elf.Data(h[offData]) == elf.ELFDATA2MSB:
		return nil, fileErr(name, offData, "big-endian (ELFDATA2MSB) ELF file; arm64 Linux code is little-endian")
	case elf.Data(h[offData]) != elf.ELFDATA2LSB:
		return nil, fileErr(name, offData, "bad ELF data encoding %v", elf.Data(h[offData]))
	}
	le := binary.LittleEndian
	if m := elf.Machine(le.Uint16(h[offMachine:])); m != elf.EM_AARCH64 {
		return nil, &FileError{Path: name, Off: offMachine, Msg: fmt.Sprintf("machine %v, want EM_AARCH64", m), Err: ErrNotArm64}
	}
	// The header tables must lie in the file: debug/elf only says EOF.
	for _, t := range []struct {
		what       string
		off        uint64
		entsize, n uint16
		want       uint16 // ELF64 entry size
		field      int64  // offset of e_*entsize
	}{
		{"program header table", le.Uint64(h[offPhoff:]), le.Uint16(h[offPhentsize:]), le.Uint16(h[offPhnum:]), 56, offPhentsize},
		{"section header table", le.Uint64(h[offShoff:]), le.Uint16(h[offShentsize:]), le.Uint16(h[offShnum:]), 64, offShentsize},
	} {
		if t.n == 0 {
			continue
		}
		if t.entsize != t.want {
			return nil, fileErr(name, t.field, "%s entry size %d, want %d", t.what, t.entsize, t.want)
		}
		end := t.off + uint64(t.entsize)*uint64(t.n)
		if t.off >= uint64(size) {
			return nil, fileErr(name, int64(min(t.off, 1<<62)), "truncated: the %s at %#x starts past the end of the file (%d bytes)", t.what, t.off, size)
		}
		if end > uint64(size) || end < t.off {
			return nil, fileErr(name, size, "truncated: the %s [%#x, %#x) runs past the end of the file", t.what, t.off, end)
		}
	}
	if err := elfsym.CheckELF(r, size); err != nil {
		return nil, symErr(name, err)
	}
	f, err := elf.NewFile(io.NewSectionReader(r, 0, size))
	if err != nil {
		return nil, elfErr(name, size, err)
	}
	return scanFile(name, f, size)
}

// elfErr turns a debug/elf error into a FileError.
func elfErr(name string, size int64, err error) error {
	var fe *elf.FormatError
	if errors.As(err, &fe) {
		return fileErr(name, -1, "corrupt ELF: %v", fe) // fe says "at byte N"
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return fileErr(name, size, "truncated: a table runs past the end of the file")
	}
	return fileErr(name, -1, "corrupt ELF: %v", err)
}

// symErr turns an error of internal/symtab/elfsym's bounded reader into a
// FileError.
func symErr(name string, err error) error {
	var se *elfsym.ELFError
	if errors.As(err, &se) {
		return fileErr(name, se.Off, "%s", se.Msg)
	}
	return fileErr(name, -1, "%v", err)
}

// New scans an already opened ELF file. Errors cannot name the file; use
// [Open] or [NewReader] where a name is known.
func New(f *elf.File) (*Binary, error) {
	if f.Machine != elf.EM_AARCH64 {
		return nil, &FileError{Off: offMachine, Msg: fmt.Sprintf("machine %v, want EM_AARCH64", f.Machine), Err: ErrNotArm64}
	}
	return scanFile("", f, -1)
}

// scanFile reads every executable section and the function symbols
// (STT_FUNC and STT_GNU_IFUNC) of .symtab and .dynsym, each (name, address)
// once, and scans them. A function's span is its symbol's size, or up to
// its section's end when the size is 0, cut at the next function symbol's
// address and at its section's end: spans never overlap, so the code
// decoded in all is at most the text once (aliases of one address are
// scanned together, the longest span once). Symbol tables and sections
// are read with internal/symtab/elfsym's bounds (compressed sections, names
// longer than elfsym.MaxNameLen). size is the file's size, or -1 if
// unknown.
func scanFile(name string, f *elf.File, size int64) (*Binary, error) {
	b := &Binary{}
	rd := elfsym.NewELFReader(f, size)
	for _, s := range f.Sections {
		if s.Type != elf.SHT_PROGBITS || s.Flags&elf.SHF_EXECINSTR == 0 || s.Size == 0 {
			continue
		}
		if size >= 0 && (s.Offset > uint64(size) || s.FileSize > uint64(size)-s.Offset) {
			return nil, fileErr(name, int64(min(s.Offset, uint64(size))),
				"truncated: section %s [%#x, %#x) runs past the end of the file (%d bytes)", s.Name, s.Offset, s.Offset+s.FileSize, size)
		}
		if s.Flags&elf.SHF_COMPRESSED != 0 {
			return nil, fileErr(name, int64(min(s.Offset, 1<<62)), "section %s: SHF_COMPRESSED executable code (compression applies only to non-allocated sections)", s.Name)
		}
		data, err := rd.Data(s)
		if err != nil {
			return nil, symErr(name, fmt.Errorf("section %s: %w", s.Name, err))
		}
		b.text = append(b.text, section{addr: s.Addr, data: data})
	}
	sort.Slice(b.text, func(i, j int) bool { return b.text[i].addr < b.text[j].addr })

	type key struct {
		name string
		addr uint64
	}
	seen := map[key]bool{}
	var fs []elfsym.ELFSym
	var tables []string
	cut := 0
	for _, t := range []struct {
		name string
		typ  elf.SectionType
	}{{".symtab", elf.SHT_SYMTAB}, {".dynsym", elf.SHT_DYNSYM}} {
		syms, err := rd.Funcs(t.typ)
		if err != nil {
			return nil, symErr(name, fmt.Errorf("symbol table %s: %w", t.name, err))
		}
		if syms == nil {
			continue
		}
		tables = append(tables, t.name)
		cut += syms.Cut
		for _, s := range syms.Funcs {
			// .dynsym repeats .symtab's global functions, and a versioned
			// symbol may be listed once per version: keep each once.
			if k := (key{s.Name, s.Value}); !seen[k] {
				seen[k] = true
				fs = append(fs, s)
			}
		}
	}
	if len(fs) == 0 {
		msg := "no function symbols: no .symtab or .dynsym"
		if len(tables) > 0 {
			msg = fmt.Sprintf("no function symbols (STT_FUNC or STT_GNU_IFUNC) in %s", joinTables(tables))
		}
		return nil, &FileError{Path: name, Off: -1, Msg: msg, Err: ErrNoFuncSymbols}
	}
	if cut > 0 {
		b.notes = append(b.notes, fmt.Sprintf("%d function names longer than %d bytes cut to %d", cut, elfsym.MaxNameLen, elfsym.MaxNameLen))
	}
	b.tables = joinTables(tables)
	sort.SliceStable(fs, func(i, j int) bool { return fs[i].Value < fs[j].Value })
	dec := decoder{}
	overlaps := 0
	// Each run fs[i:j] of one address is scanned together: its spans
	// share their start, so one pass over the longest gives each one.
	for i := 0; i < len(fs); {
		j := i + 1
		for j < len(fs) && fs[j].Value == fs[i].Value {
			j++
		}
		addr := fs[i].Value
		sec := b.section(addr)
		if sec == nil { // not in the executable sections: not a function here
			i = j
			continue
		}
		off := addr - sec.addr
		limit := uint64(len(sec.data)) - off // to the section's end
		if j < len(fs) {
			limit = min(limit, fs[j].Value-addr) // to the next symbol
		}
		sizes := make([]uint64, j-i)
		for k := i; k < j; k++ {
			sz := fs[k].Size
			if sz == 0 || sz > limit {
				if sz > limit && j < len(fs) && fs[j].Value-addr == limit {
					overlaps++
				}
				sz = limit
			}
			sizes[k-i] = sz
		}
		got := scanSpans(addr, sec.data[off:off+slices.Max(sizes)], sizes, dec)
		for k := i; k < j; k++ {
			fn := got[k-i]
			fn.Name = fs[k].Name
			b.funcs = append(b.funcs, fn)
		}
		i = j
	}
	if overlaps > 0 {
		b.notes = append(b.notes, fmt.Sprintf("%d function symbols whose st_size runs over the next function symbol: their spans are cut there", overlaps))
	}
	return b, nil
}

// sttGNUIFunc is STT_GNU_IFUNC (STT_LOOS): an indirect function, whose
// symbol value is the resolver's code.
const sttGNUIFunc = elf.STT_LOOS

func joinTables(t []string) string {
	if len(t) == 2 {
		return t[0] + " and " + t[1]
	}
	if len(t) == 1 {
		return t[0]
	}
	return ""
}

// Notes says where the scan departed from the symbol tables: function
// symbols whose st_size overlaps the next function (their spans are cut
// at it), names longer than elfsym.MaxNameLen (cut to it).
func (b *Binary) Notes() []string { return b.notes }

// SymbolTables names the symbol tables the functions came from: ".symtab",
// ".dynsym" or ".symtab and .dynsym".
func (b *Binary) SymbolTables() string { return b.tables }

// section returns the executable section holding addr, or nil.
func (b *Binary) section(addr uint64) *section {
	i := sort.Search(len(b.text), func(i int) bool { return b.text[i].addr > addr })
	if i == 0 {
		return nil
	}
	s := &b.text[i-1]
	if addr-s.addr >= uint64(len(s.data)) {
		return nil
	}
	return s
}
