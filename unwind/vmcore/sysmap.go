package vmcore

import (
	"bufio"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/unwindkit/unwindkit/internal/errs"
	"github.com/unwindkit/unwindkit/internal/symtab/elfsym"
)

// maxMapLine bounds one line of a System.map or /proc/kallsyms text: an
// address, a type, a name of at most KSYM_NAME_LEN and a module name.
const maxMapLine = 4096

// ParseSystemMap reads a symbol map in nm's format, "ADDR TYPE NAME" per
// line, as the kernel build writes System.map and /proc/kallsyms prints
// it (with an optional "[MODULE]" column, kept out of the name). The
// symbols are sorted by address, each Size the distance to the next.
// At most 4 Mi symbols and lines of at most 4 KiB are read; an error
// names the file (name), the line and the field, and wraps ErrCorrupt.
func ParseSystemMap(name string, r io.Reader) ([]KSym, error) {
	var out []KSym
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 4096), maxMapLine)
	ln := 0
	for sc.Scan() {
		ln++
		line := sc.Text()
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if len(f) < 3 || len(f) > 4 || len(f[1]) != 1 || !isTypeLetter(f[1][0]) {
			return nil, fmt.Errorf("%s: line %d: %.80q is not ADDR TYPE NAME: %w", name, ln, line, errs.ErrCorrupt)
		}
		if len(f) == 4 && !(strings.HasPrefix(f[3], "[") && strings.HasSuffix(f[3], "]")) {
			return nil, fmt.Errorf("%s: line %d: fourth field %.80q is no [MODULE]: %w", name, ln, f[3], errs.ErrCorrupt)
		}
		a, err := strconv.ParseUint(f[0], 16, 64)
		if err != nil {
			return nil, fmt.Errorf("%s: line %d: address %.40q is not hexadecimal: %w", name, ln, f[0], errs.ErrCorrupt)
		}
		if len(out) == maxKallsyms {
			return nil, fmt.Errorf("%s: line %d: more than %d symbols: %w", name, ln, maxKallsyms, errs.ErrCorrupt)
		}
		ks := KSym{Name: f[2], Addr: a, Type: f[1][0]}
		if len(f) == 4 {
			ks.Module = f[3][1 : len(f[3])-1]
		}
		out = append(out, ks)
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return nil, fmt.Errorf("%s: line %d: longer than %d bytes: %w", name, ln+1, maxMapLine, errs.ErrCorrupt)
		}
		return nil, fmt.Errorf("%s: line %d: %w", name, ln+1, err)
	}
	SortSizes(out)
	return out, nil
}

func isTypeLetter(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '?' || c == '-'
}

// VmlinuxSymbols reads the symbol table (.symtab) of a vmlinux ELF file
// of size bytes: functions and data symbols alike (init_task,
// __per_cpu_offset, the per-CPU variables), each given the type letter nm
// gives it (t in executable sections, b in SHT_NOBITS ones, d in writable
// ones, r otherwise, a for absolute symbols; upper case when global or
// weak). Mapping symbols ($x, $d) are skipped. The addresses are the
// link-time ones: a kernel relocated by KASLR runs them KERNELOFFSET
// higher. The file is read with the bounds of package elfsym (section
// names and compressed sections checked before they are read); errors
// name the file and wrap ErrCorrupt when it is malformed.
func VmlinuxSymbols(name string, r io.ReaderAt, size int64) ([]KSym, error) {
	f, err := openELF(name, r, size)
	if err != nil {
		return nil, err
	}
	t, err := elfsym.NewELFReader(f, size).Defined(elf.SHT_SYMTAB)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if t == nil {
		return nil, fmt.Errorf("%s: no .symtab (a stripped image: give its System.map or the -dbg vmlinux)", name)
	}
	if len(t.Funcs) > maxKallsyms {
		return nil, fmt.Errorf("%s: %d symbols, more than %d: %w", name, len(t.Funcs), maxKallsyms, errs.ErrCorrupt)
	}
	out := make([]KSym, 0, len(t.Funcs))
	for _, s := range t.Funcs {
		if s.Name == "" || s.Name[0] == '$' {
			continue
		}
		out = append(out, KSym{Name: s.Name, Addr: s.Value, Type: nmLetter(f, s)})
	}
	SortSizes(out)
	return out, nil
}

// VmlinuxBTF reads the .BTF section of a vmlinux ELF file, for dumps that
// do not hold their kernel's BTF.
func VmlinuxBTF(name string, r io.ReaderAt, size int64) (*BTF, error) {
	f, err := openELF(name, r, size)
	if err != nil {
		return nil, err
	}
	s := f.Section(".BTF")
	if s == nil {
		return nil, fmt.Errorf("%s: no .BTF section", name)
	}
	if s.Size > maxBTF {
		return nil, fmt.Errorf("%s: .BTF of %d bytes, more than %d: %w", name, s.Size, maxBTF, errs.ErrCorrupt)
	}
	b, err := elfsym.NewELFReader(f, size).Data(s)
	if err != nil {
		return nil, fmt.Errorf("%s: .BTF: %w", name, err)
	}
	t, err := ParseBTF(b)
	if err != nil {
		return nil, fmt.Errorf("%s: .BTF: %w", name, err)
	}
	return t, nil
}

func openELF(name string, r io.ReaderAt, size int64) (*elf.File, error) {
	if err := elfsym.CheckELF(r, size); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	f, err := elf.NewFile(r)
	if err != nil {
		return nil, fmt.Errorf("%s: %v: %w", name, err, errs.ErrCorrupt)
	}
	if f.Machine != elf.EM_AARCH64 {
		return nil, fmt.Errorf("%s: machine %v, not arm64", name, f.Machine)
	}
	return f, nil
}

// nmLetter is nm's type letter of an ELF symbol.
func nmLetter(f *elf.File, s elfsym.ELFSym) byte {
	c := byte('r')
	switch {
	case s.Section == elf.SHN_ABS:
		c = 'a'
	case int(s.Section) >= len(f.Sections):
		c = '?'
	default:
		sec := f.Sections[s.Section]
		switch {
		case sec.Flags&elf.SHF_EXECINSTR != 0:
			c = 't'
		case sec.Type == elf.SHT_NOBITS:
			c = 'b'
		case sec.Flags&elf.SHF_WRITE != 0:
			c = 'd'
		}
	}
	if b := elf.ST_BIND(s.Info); (b == elf.STB_GLOBAL || b == elf.STB_WEAK) && c != '?' {
		c -= 'a' - 'A'
	}
	return c
}
