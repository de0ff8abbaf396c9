// Package debuginfo gives the source location of a program counter and the
// functions inlined there, from the DWARF debug information (versions 4
// and 5) of an ELF file: arm64 user executables and shared libraries, and
// the kernel's vmlinux. It answers what `addr2line -f -i` answers.
//
// The file is read lazily. Open maps it read-only; a lookup finds the
// compilation unit (CU) of its pc through .debug_aranges (or, where that
// is missing or does not cover the pc, through a one-time scan of the CU
// headers and top-level DIEs), and only that CU's DIEs and line program
// are decoded, once, and kept (up to an estimated 64 MB of decoded units,
// the least recently used dropped first). The 65 distinct return
// addresses of a Debian 6.1 kernel's traces, in its 273 MB -dbg vmlinux,
// fault in 17 MB of the file and hold 28 MB of anonymous memory.
//
// [File.Types] answers structure-layout questions (member offsets,
// struct sizes) from the same DWARF, as a kernel's BTF answers them, for
// kernels whose dumps carry no BTF.
//
// Addresses are link-time addresses, as the ELF file's symbols give them:
// a caller subtracts a shared library's load bias (or a kernel's KASLR
// offset) first. Not supported: relocatable objects (ET_REL, such as
// kernel modules: their DWARF needs relocating), split DWARF (.dwo
// files), dwz's supplementary files (.gnu_debugaltlink) and the old
// .zdebug sections; SHF_COMPRESSED sections (zlib, zstd) are.
//
// Input is untrusted: a malformed file gives an error wrapping
// [ErrCorrupt] that names the file, the section and the offset, and the
// cost of reading it is bounded by its size. A file that Open mapped must
// not be truncated while it is open (reading a page past its new end
// faults).
package debuginfo

import (
	"debug/dwarf"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"

	"github.com/unwindkit/unwindkit/internal/errs"
)

// ErrCorrupt is unwindkit's shared sentinel for malformed input: every
// format error of this package wraps it.
var ErrCorrupt = errs.ErrCorrupt

// ErrNotSupported is unwindkit's shared sentinel for what is absent: here
// a relocatable object (ET_REL), whose DWARF needs relocating.
var ErrNotSupported = errs.ErrNotSupported

// ErrNotFound reports that the file's DWARF does not describe the pc: no
// compilation unit covers it (code without -g, or a pc outside the file).
var ErrNotFound = errors.New("debuginfo: no debug information for pc")

// ErrNoDWARF reports that the file has no .debug_info section.
var ErrNoDWARF = errors.New("debuginfo: no DWARF debug information")

// recoverPanics turns a panic in a lookup into an error; the fuzz test
// turns it off, to see them.
var recoverPanics = true

// Kind says how a pc came to be known, and so which instruction it names.
type Kind uint8

const (
	// PC is a pc that is itself the instruction of interest: a stopped
	// thread's pc or an exception's elr. It is looked up at itself.
	PC Kind = iota + 1
	// ReturnAddress is a return address (a saved x30): the call is the
	// instruction before it, so it is looked up at pc-4 (arm64's
	// instructions are 4 bytes). Looking up the return address itself
	// would name the line after the call, or another function when the
	// call was a function's last instruction.
	ReturnAddress
)

// Frame is one function at a pc: the innermost inlined function, the
// functions it was inlined into, or the concrete (out-of-line) function
// that holds them all.
//
// Frames come innermost first, in the shape `addr2line -f -i` prints:
// the first frame's File and Line are the pc's own line; each later
// frame's are the call site of the frame before it, in that function.
type Frame struct {
	// Func is the function's DW_AT_name (followed through
	// DW_AT_abstract_origin and DW_AT_specification); "" when no
	// function DIE covers the pc (assembly code: addr2line's "??").
	Func string
	// LinkageName is the function's DW_AT_linkage_name, the symbol name
	// (mangled C++), when DWARF gives one; addr2line prints it in
	// preference to Func.
	LinkageName string
	// File is the source file relative to the build's source root (the
	// CU's DW_AT_comp_dir, which is DWARF 5's directory 0) when it lies
	// under it, else as Path. "" when unknown.
	File string
	// Path is the file's path as DWARF names it, joined with its
	// directory and the compilation directory, and cleaned.
	Path string
	// Line and Column are 1-based; 0 when unknown.
	Line, Column int
	// Discriminator is the line table's discriminator (the block within
	// the line); only the first frame, whose line comes from the line
	// table, can have one.
	Discriminator int
	// Inlined reports that the function was inlined here; false for the
	// last frame, the concrete function.
	Inlined bool
}

// File is an ELF file's DWARF, opened for lookups. Its methods are safe for
// concurrent use.
type File struct {
	name  string
	ef    *elf.File
	ra    io.ReaderAt
	size  int64
	mem   []byte       // the whole file when mapped, else nil
	unmap func() error // releases mem

	mu     sync.Mutex
	closed bool
	secs   map[string]*section
	index  *cuIndex
	cus    map[uint64]*unit // by the unit header's offset in .debug_info
	full   *dwarf.Data      // whole-section Data, for units with cross-unit references
	types  *typeIndex       // the struct definitions Types found

	cands       [8]uint64 // cuFor's answer, reused
	forceWhole  bool      // decode every unit through full (a test hook)
	checkRanges bool      // compare each DIE's ranges with debug/dwarf's (a test hook)
	uses        uint64    // unit lookups, the clock of the cache
	cacheCost   int       // estimated bytes the units in cus hold
	evictions   int
}

// Open opens the ELF file name, mapping it read-only where the system
// allows (pages are read as lookups touch them) and reading it on demand
// elsewhere. Close releases it.
func Open(name string) (*File, error) {
	fh, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	st, err := fh.Stat()
	if err != nil {
		fh.Close()
		return nil, err
	}
	mem, unmap, err := mapFile(fh, st.Size())
	if err != nil || mem == nil {
		// No mapping: read through the file itself.
		f, err := newFile(name, fh, st.Size(), nil, fh.Close)
		if err != nil {
			fh.Close()
		}
		return f, err
	}
	fh.Close() // the mapping outlives the descriptor
	f, err := newFile(name, readerAtBytes(mem), int64(len(mem)), mem, unmap)
	if err != nil {
		unmap()
	}
	return f, err
}

// NewFile reads the ELF file of the given size from r. name is used only in
// error messages. Sections other than .debug_info are read whole when a
// lookup first needs them, .debug_info one compilation unit at a time.
// Close does not close r.
func NewFile(name string, r io.ReaderAt, size int64) (*File, error) {
	return newFile(name, r, size, nil, nil)
}

func newFile(name string, r io.ReaderAt, size int64, mem []byte, unmap func() error) (f *File, err error) {
	defer func() {
		// debug/elf is hardened against bad input, but a panic there
		// must not take the caller down.
		if p := recover(); p != nil {
			f, err = nil, fmt.Errorf("%s: %w: reading the ELF headers: %v", name, ErrCorrupt, p)
		}
	}()
	if size < 0 {
		return nil, fmt.Errorf("%s: %w: negative size %d", name, ErrCorrupt, size)
	}
	ef, err := elf.NewFile(io.NewSectionReader(r, 0, size))
	if err != nil {
		return nil, fmt.Errorf("%s: %w: %v", name, ErrCorrupt, err)
	}
	if ef.Type == elf.ET_REL {
		return nil, fmt.Errorf("%s: %w: a relocatable object (ET_REL): its DWARF needs relocating", name, ErrNotSupported)
	}
	f = &File{name: name, ef: ef, ra: r, size: size, mem: mem, unmap: unmap,
		secs: map[string]*section{}, cus: map[uint64]*unit{}}
	if s := ef.Section(".debug_info"); s == nil || s.Type == elf.SHT_NOBITS {
		return nil, fmt.Errorf("%s: %w", name, ErrNoDWARF)
	}
	return f, nil
}

// Close releases the file. Lookups after Close fail.
func (f *File) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return nil
	}
	f.closed = true
	f.cus, f.secs, f.index, f.full, f.types = nil, nil, nil, nil, nil
	if f.unmap != nil {
		return f.unmap()
	}
	return nil
}

// Lookup returns the frames at pc, innermost first: the functions inlined
// at pc's instruction and, last, the concrete function holding them, each
// with its source location (see [Frame]). kind says whether pc is the
// instruction itself or a return address (looked up at pc-4).
//
// A pc in a compilation unit that no function DIE covers (assembly) gives
// one frame with an empty Func. A pc that no compilation unit covers gives
// an error wrapping [ErrNotFound].
func (f *File) Lookup(pc uint64, kind Kind) (frames []Frame, err error) {
	switch kind {
	case PC:
	case ReturnAddress:
		pc -= 4
	default:
		return nil, fmt.Errorf("debuginfo: Lookup: invalid Kind %d", kind)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return nil, fmt.Errorf("%s: debuginfo: Lookup after Close", f.name)
	}
	defer func() {
		// debug/dwarf is hardened against bad input; this is the
		// backstop should a malformed file still reach a panic there.
		if !recoverPanics {
			return
		}
		if p := recover(); p != nil {
			frames, err = nil, fmt.Errorf("%s: %w: decoding DWARF for pc %#x: %v", f.name, ErrCorrupt, pc, p)
		}
	}()
	return f.lookup(pc)
}
