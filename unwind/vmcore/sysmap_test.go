package vmcore

import (
	"bytes"
	"compress/gzip"
	"errors"
	"io"
	"os"
	"strings"
	"testing"
)

func TestParseSystemMap(t *testing.T) {
	in := "ffff800008010000 T _stext\n\nffff800008000000 T _text\nffff8000094c92c8 D __entry_task\nffffffffc0000000 t foo\t[mod]\n"
	syms, err := ParseSystemMap("System.map", strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	if len(syms) != 4 || syms[0].Name != "_text" || syms[0].Size != 0x10000 || syms[2].Name != "__entry_task" || syms[2].Type != 'D' || syms[3].Name != "foo" {
		t.Errorf("%+v", syms)
	}
	for _, c := range []struct{ in, want string }{
		{"ffff800008000000 T _text\nffff8000080 T\n", "System.map: line 2: "},
		{"zz T x\n", `line 1: address "zz" is not hexadecimal`},
		{"ffff800008000000 TT x\n", "line 1: "},
		{"ffff800008000000 T x y\n", `line 1: fourth field "y" is no [MODULE]`},
		{"ffff800008000000 T " + strings.Repeat("x", 5000) + "\n", "line 1: longer than 4096 bytes"},
	} {
		_, err := ParseSystemMap("System.map", strings.NewReader(c.in))
		if err == nil || !strings.Contains(err.Error(), c.want) || !errors.Is(err, ErrCorrupt) {
			t.Errorf("%.40q: %v, want %q wrapping ErrCorrupt", c.in, err, c.want)
		}
	}
}

// A map of more symbols than the bound is refused at the first one
// beyond it, without reading on.
func TestParseSystemMapBound(t *testing.T) {
	line := []byte("ffff800008000000 t a\n")
	r := io.MultiReader(bytes.NewReader(bytes.Repeat(line, maxKallsyms)), strings.NewReader("ffff800008000000 t b\n"), neverEnding{})
	_, err := ParseSystemMap("big", r)
	if err == nil || !strings.Contains(err.Error(), "more than") {
		t.Errorf("%v", err)
	}
}

// neverEnding fails the test's reader if read: the parser must stop first.
type neverEnding struct{}

func (neverEnding) Read(b []byte) (int, error) { return 0, errors.New("read past the bound") }

// VmlinuxSymbols reads an ELF's data symbols too, with nm's letters; a
// user program stands in for vmlinux (the format is the same).
func TestVmlinuxSymbols(t *testing.T) {
	f, err := os.Open("../../testdata/cores/bin/gcc-pie.elf.gz")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	syms, err := VmlinuxSymbols("gcc-pie.elf", bytes.NewReader(b), int64(len(b)))
	if err != nil {
		t.Fatal(err)
	}
	types := map[string]byte{}
	for _, s := range syms {
		if s.Name[0] == '$' {
			t.Errorf("mapping symbol %s kept", s.Name)
		}
		types[s.Name] = s.Type
	}
	if types["main"] != 'T' || types["_start"] != 'T' {
		t.Errorf("main %c, _start %c", types["main"], types["_start"])
	}
	data := 0
	for _, c := range types {
		if strings.IndexByte("dDbBrR", c) >= 0 {
			data++
		}
	}
	if data == 0 {
		t.Errorf("no data symbols among %d", len(syms))
	}
	if _, err := VmlinuxBTF("gcc-pie.elf", bytes.NewReader(b), int64(len(b))); err == nil || !strings.Contains(err.Error(), "no .BTF section") {
		t.Errorf("VmlinuxBTF: %v", err)
	}
	bad := append([]byte(nil), b...)
	copy(bad[0x28:], []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0, 0}) // e_shoff far outside
	if _, err := VmlinuxSymbols("bad.elf", bytes.NewReader(bad), int64(len(bad))); err == nil || !strings.Contains(err.Error(), "bad.elf") {
		t.Errorf("bad e_shoff: %v", err)
	}
}
