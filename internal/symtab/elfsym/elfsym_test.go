package elfsym_test

import (
	"bytes"
	"compress/zlib"
	"debug/elf"
	"encoding/binary"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/unwindkit/unwindkit/internal/errs"
	"github.com/unwindkit/unwindkit/internal/symtab/elfsym"
	"github.com/unwindkit/unwindkit/internal/symtab/elftest"
)

func open(t *testing.T, b []byte) (*elf.File, *elfsym.ELFReader) {
	t.Helper()
	if err := elfsym.CheckELF(bytes.NewReader(b), int64(len(b))); err != nil {
		t.Fatal(err)
	}
	f, err := elf.NewFile(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	return f, elfsym.NewELFReader(f, int64(len(b)))
}

// TestFuncsLikeDebugELF: on the committed binaries and Debian's arm64
// libraries, Funcs gives the function symbols debug/elf gives, names
// included.
func TestFuncsLikeDebugELF(t *testing.T) {
	paths, _ := filepath.Glob("../../../testdata/arm64/bin/*")
	for _, lib := range []string{"libc.so.6", "libstdc++.so.6"} {
		if p := "/usr/aarch64-linux-gnu/lib/" + lib; fileExists(p) {
			paths = append(paths, p)
		}
	}
	if len(paths) < 10 {
		t.Fatalf("only %d files", len(paths))
	}
	n := 0
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		f, rd := open(t, b)
		for _, tt := range []struct {
			typ  elf.SectionType
			read func() ([]elf.Symbol, error)
		}{{elf.SHT_SYMTAB, f.Symbols}, {elf.SHT_DYNSYM, f.DynamicSymbols}} {
			want, _ := tt.read()
			var wf []elf.Symbol
			for _, s := range want {
				if typ := elf.ST_TYPE(s.Info); (typ == elf.STT_FUNC || typ == elf.STT_LOOS) && s.Section != elf.SHN_UNDEF {
					wf = append(wf, s)
				}
			}
			got, err := rd.Funcs(tt.typ)
			if err != nil {
				t.Fatalf("%s %v: %v", p, tt.typ, err)
			}
			if got == nil {
				if len(wf) > 0 {
					t.Errorf("%s %v: no table, debug/elf has %d functions", p, tt.typ, len(wf))
				}
				continue
			}
			if len(got.Funcs) != len(wf) || got.Cut != 0 {
				t.Fatalf("%s %v: %d functions (%d cut), debug/elf %d", p, tt.typ, len(got.Funcs), got.Cut, len(wf))
			}
			for i, s := range got.Funcs {
				w := wf[i]
				if s.Name != w.Name || s.Value != w.Value || s.Size != w.Size || s.Info != w.Info || s.Section != w.Section {
					t.Fatalf("%s %v: symbol %d %+v, debug/elf %+v", p, tt.typ, i, s, w)
				}
				n++
			}
		}
	}
	t.Logf("%d function symbols compared", n)
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

// TestNames: names sharing one long string are substrings of the table,
// cut to MaxNameLen; an offset past the table and a name without its NUL
// are "", as debug/elf reads them; names end at the first NUL in every
// position of a 64-byte block.
func TestNames(t *testing.T) {
	long := strings.Repeat("x", 70000)
	strtab := []byte("\x00" + long + "\x00short\x00")
	var syms []byte
	for i := range 100 {
		syms = append(syms, elftest.Sym(1+uint32(i)*600, elftest.Func, 1, 0x1000+uint64(4*i), 4)...)
	}
	syms = append(syms, elftest.Sym(uint32(2+len(long)), elftest.Func, 1, 0x2000, 4)...)
	syms = append(syms, elftest.Sym(1<<30, elftest.Func, 1, 0x2004, 4)...)
	for k := range 130 { // every end position within a block
		syms = append(syms, elftest.Sym(uint32(1+len(long)-k), elftest.Func, 1, 0x3000+uint64(4*k), 4)...)
	}
	syms = append(syms, elftest.Sym(1, byte(elf.STT_OBJECT), 1, 0x4000, 4)...) // not a function
	syms = append(syms, elftest.Sym(1, elftest.Func, 0, 0, 0)...)              // undefined
	_, rd := open(t, elftest.Exec(0x1000, make([]byte, 0x4000), syms, strtab))
	tab, err := rd.Funcs(elf.SHT_SYMTAB)
	if err != nil {
		t.Fatal(err)
	}
	if len(tab.Funcs) != 232 {
		t.Fatalf("%d functions, want 232", len(tab.Funcs))
	}
	for i, s := range tab.Funcs[:100] {
		if want := min(elfsym.MaxNameLen, len(long)-600*i); len(s.Name) != want || strings.Trim(s.Name, "x") != "" {
			t.Fatalf("symbol %d: name of %d bytes, want %d x", i, len(s.Name), want)
		}
	}
	if tab.Funcs[100].Name != "short" || tab.Funcs[101].Name != "" {
		t.Errorf("names %q %q, want short and empty", tab.Funcs[100].Name, tab.Funcs[101].Name)
	}
	for k, s := range tab.Funcs[102:232] {
		if len(s.Name) != k {
			t.Fatalf("name ending %d bytes on: %d bytes", k, len(s.Name))
		}
	}
	if tab.Cut != 100 { // 70000-600i bytes for i < 100: all over MaxNameLen
		t.Errorf("%d names counted as cut, want 100", tab.Cut)
	}
}

// TestCompressed: a compressed .symtab inflates within the budget; one
// whose ch_size exceeds it is refused before inflating, with its offset
// and ErrCorrupt; a compressed allocated section and a compressed section
// name table are refused.
func TestCompressed(t *testing.T) {
	secs := elftest.Sections(0x1000, make([]byte, 16), elftest.Sym(1, elftest.Func, 1, 0x1000, 4), []byte("\x00f\x00"))
	var z bytes.Buffer
	w := zlib.NewWriter(&z)
	w.Write(secs[1].Data)
	w.Close()
	secs[1].Compressed, secs[1].ChSize, secs[1].Data = true, uint64(len(secs[1].Data)), z.Bytes()
	_, rd := open(t, elftest.Build(secs))
	tab, err := rd.Funcs(elf.SHT_SYMTAB)
	if err != nil || len(tab.Funcs) != 1 || tab.Funcs[0].Name != "f" {
		t.Fatalf("compressed .symtab: %+v, %v", tab, err)
	}

	secs[1].Data, secs[1].ChSize = elftest.ZlibZeros(64), 64<<20
	b := elftest.Build(secs)
	_, rd = open(t, b)
	_, err = rd.Funcs(elf.SHT_SYMTAB)
	var ee *elfsym.ELFError
	if !errors.As(err, &ee) || !errors.Is(err, errs.ErrCorrupt) || !strings.Contains(err.Error(), "ch_size") || ee.Off <= 0 {
		t.Fatalf("64 MiB from a %d-byte file: %v", len(b), err)
	}

	secs[0].Compressed, secs[0].ChSize = true, 16
	f, rd := open(t, elftest.Build(secs))
	if _, err := rd.Data(f.Section(".text")); err == nil || !strings.Contains(err.Error(), "SHF_ALLOC") {
		t.Errorf("compressed .text: %v", err)
	}

	b = elftest.Build(elftest.Sections(0x1000, nil, nil, nil))
	shstrndx := int(b[62])
	shoff := int(binary.LittleEndian.Uint64(b[40:]))
	fl := shoff + 64*shstrndx + 8
	binary.LittleEndian.PutUint64(b[fl:], binary.LittleEndian.Uint64(b[fl:])|uint64(elf.SHF_COMPRESSED))
	if err := elfsym.CheckELF(bytes.NewReader(b), int64(len(b))); err == nil || !strings.Contains(err.Error(), "section name table") {
		t.Errorf("compressed .shstrtab: %v", err)
	}
}

// TestSectionNameBomb: sections sharing one long name are refused by
// CheckELF before debug/elf copies the name for each.
func TestSectionNameBomb(t *testing.T) {
	name := strings.Repeat("n", 3000)
	var secs []elftest.Section
	for i := range 200 {
		n := "s"
		if i == 0 {
			n = name
		}
		secs = append(secs, elftest.Section{Name: n, Type: elf.SHT_PROGBITS})
	}
	b := elftest.Build(secs)
	// Point every section's name at the first one's.
	shoff := int(binary.LittleEndian.Uint64(b[40:]))
	for i := 2; i <= 200; i++ {
		copy(b[shoff+64*i:], b[shoff+64:shoff+64+4])
	}
	err := elfsym.CheckELF(bytes.NewReader(b), int64(len(b)))
	if err == nil || !strings.Contains(err.Error(), "shared by many sections") {
		t.Fatalf("CheckELF: %v", err)
	}
	name = strings.Repeat("n", elfsym.MaxNameLen+1)
	b = elftest.Build([]elftest.Section{{Name: name, Type: elf.SHT_PROGBITS}})
	if err := elfsym.CheckELF(bytes.NewReader(b), int64(len(b))); err == nil || !strings.Contains(err.Error(), "longer than") {
		t.Fatalf("CheckELF, long name: %v", err)
	}
}

// TestZlibZeros: the builder's stream inflates to its size.
func TestZlibZeros(t *testing.T) {
	r, err := zlib.NewReader(bytes.NewReader(elftest.ZlibZeros(3)))
	if err != nil {
		t.Fatal(err)
	}
	n, err := io.Copy(io.Discard, r)
	if err != nil || n != 3<<20 {
		t.Fatalf("%d bytes, %v", n, err)
	}
}
