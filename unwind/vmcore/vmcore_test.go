package vmcore

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
)

var formats = []synthOpts{
	{pageShift: 12, vaBits: 39},
	{pageShift: 12, vaBits: 48},
	{pageShift: 12, vaBits: 52, vaActual: 52, lpa2: true, ramBase: 0x000f_0000_4000_0000},
	{pageShift: 12, vaBits: 52, vaActual: 48, lpa2: true}, // a 52-bit kernel with arm64.nolva-like 48-bit VAs, DS=1
	{pageShift: 12, vaBits: 52, vaActual: 48},             // ... and with DS=0
	{pageShift: 14, vaBits: 47},
	{pageShift: 14, vaBits: 48},
	{pageShift: 14, vaBits: 52, vaActual: 52, lpa2: true, ramBase: 0x0004_0000_4000_0000},
	{pageShift: 16, vaBits: 42},
	{pageShift: 16, vaBits: 48},
	{pageShift: 16, vaBits: 52, lpa: true, ramBase: 0x000a_0000_4000_0000},
}

func name(o synthOpts) string {
	return fmt.Sprintf("%dK-va%d-actual%d-lpa2=%v", 1<<o.pageShift>>10, o.vaBits, max(o.vaActual, o.vaBits*0+o.vaActual), o.lpa2)
}

func TestSynthVmcores(t *testing.T) {
	for _, o := range formats {
		t.Run(name(o), func(t *testing.T) {
			s := newSynth(o)
			v, err := loadBytes(s.bytes())
			if err != nil {
				t.Fatal(err)
			}
			in := v.Info
			if in.PageSize != 1<<o.pageShift || in.VABits != int(o.vaBits) || in.VABitsActual != int(s.o.vaActual) ||
				in.KimageVoffset != s.kvoff || in.PhysOffset != s.o.ramBase || in.SwapperPgDir != s.kva(pgdOff) || in.Major != 6 || in.Minor != 1 {
				t.Errorf("info %+v", in)
			}
			if v.PageOffset != s.pageOff {
				t.Errorf("PAGE_OFFSET %#x, want %#x", v.PageOffset, s.pageOff)
			}
			if !strings.Contains(v.Translation(), "checked by") || !strings.Contains(v.Translation(), fmt.Sprintf("LPA2 %v", o.lpa2)) {
				t.Errorf("translation regime: %s", v.Translation())
			}
			if len(v.CPUs) != 2 || v.CPUs[1].Regs.PC != s.kva(0x244) {
				t.Errorf("cpus %+v", v.CPUs)
			}
			// Kernel PACs: bits 63:vaActual except 55.
			if got := v.Layout.Strip(s.kva(0x104) ^ 0x0012_0000_0000_0000&^(1<<55)&^(1<<s.o.vaActual-1)); got != s.kva(0x104) {
				t.Errorf("strip: %#x", got)
			}
			// The image through the tables equals __pa_symbol.
			for _, off := range []uint64{0, 0x104, pgdOff, 0x90000, 0xfff00} {
				pa, err := v.Translate(s.kva(off))
				if err != nil || pa != v.ImageToPhys(s.kva(off)) || pa != s.pa(imageOff+off) {
					t.Errorf("image +%#x: %#x, %v; want %#x", off, pa, err, s.pa(imageOff+off))
				}
			}
			// The linear map, through the tables and by arithmetic.
			va := s.pageOff + 0x12_3450
			pa, err := v.Translate(va)
			lpa, ok := v.LinearToPhys(va)
			if err != nil || !ok || pa != s.o.ramBase+0x12_3450 || lpa != pa || v.PhysToLinear(pa) != va {
				t.Errorf("linear map: walk %#x (%v), arithmetic %#x (%v)", pa, err, lpa, ok)
			}
			// Unmapped: the hole after the stack.
			if _, err := v.Translate(s.stackVA + stackSize); !errors.Is(err, ErrNotMapped) {
				t.Errorf("unmapped: %v", err)
			}
			// Record what reading the stack top needs, trim to it, and read again.
			v.RecordReads(true)
			w, err := v.ReadVirt64(s.stackVA + stackSize - 16)
			if err != nil || w != 0x5ca1ab1e {
				t.Fatalf("stack word %#x, %v", w, err)
			}
			syms, err := v.Kallsyms()
			if err != nil {
				t.Fatal(err)
			}
			want := slices.Clone(synthKsyms)
			for i := range want {
				want[i].Addr += s.kimage
			}
			SortSizes(want)
			if !slices.Equal(syms, want) {
				t.Errorf("kallsyms:\n got %+v\nwant %+v", syms, want)
			}
			pages := v.PagesRead()
			v.RecordReads(false)
			if !slices.Contains(pages, s.root&^(1<<o.pageShift-1)) || !slices.Contains(pages, s.pa(stackOff+stackSize-(1<<o.pageShift))) {
				t.Errorf("pages read %#x lack the root table or the stack page", pages)
			}
			var out bytes.Buffer
			if err := v.WriteTrimmed(&out, v.PagesToRanges(pages)); err != nil {
				t.Fatal(err)
			}
			if out.Len() > len(pages)<<o.pageShift+1<<17 {
				t.Errorf("trimmed vmcore of %d bytes for %d pages", out.Len(), len(pages))
			}
			t2, err := loadBytes(out.Bytes())
			if err != nil {
				t.Fatalf("trimmed: %v", err)
			}
			if w, err := t2.ReadVirt64(s.stackVA + stackSize - 16); err != nil || w != 0x5ca1ab1e {
				t.Errorf("trimmed stack word %#x, %v", w, err)
			}
			if syms2, err := t2.Kallsyms(); err != nil || !slices.Equal(syms2, want) {
				t.Errorf("trimmed kallsyms: %v", err)
			}
			if _, err := t2.ReadVirt64(s.stackVA); err == nil && stackSize > 1<<o.pageShift {
				t.Errorf("a page not read was kept")
			}
		})
	}
}

func TestParseKallsyms(t *testing.T) {
	in := "ffff800008000000 T _text\nffff800008010000 t el1h_64_irq\nffff800008010000 T alias\nffff800008010100 T show_regs [mod]\n" +
		"ffff800008010200 t mod_b [other]\nffff800008010300 t mod_c [mod]\nffff800008010300 t mod_c_alias [mod]\nffff800008010380 T image_late\n"
	syms, err := ParseKallsyms(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	// A module's symbol is sized by the next of its own module
	// (show_regs by mod_c, not by mod_b of [other]); the last of a
	// module has no size.
	want := []KSym{{"_text", 0xffff800008000000, 'T', 0x10000, ""}, {"el1h_64_irq", 0xffff800008010000, 't', 0x100, ""},
		{"alias", 0xffff800008010000, 'T', 0x100, ""}, {"show_regs", 0xffff800008010100, 'T', 0x200, "mod"},
		{"mod_b", 0xffff800008010200, 't', 0, "other"}, {"mod_c", 0xffff800008010300, 't', 0, "mod"},
		{"mod_c_alias", 0xffff800008010300, 't', 0, "mod"}, {"image_late", 0xffff800008010380, 'T', 0, ""}}
	if !slices.Equal(syms, want) {
		t.Errorf("got %+v", syms)
	}
	for _, bad := range []string{"zz T x\n", "ffff T\n", "ffff TT x\n"} {
		if _, err := ParseKallsyms(strings.NewReader(bad)); err == nil || !strings.Contains(err.Error(), "line 1") {
			t.Errorf("%q: %v", bad, err)
		}
	}
}

func TestBadVmcores(t *testing.T) {
	s := newSynth(synthOpts{pageShift: 12, vaBits: 48})
	cases := []struct {
		name string
		mod  func(b *synth) []byte
		want string
	}{
		{"no pagesize", func(s *synth) []byte {
			s.info = strings.Replace(s.info, "PAGESIZE=4096\n", "", 1)
			return s.bytes()
		}, "PAGESIZE"},
		{"bad pagesize", func(s *synth) []byte {
			s.info = strings.Replace(s.info, "PAGESIZE=4096", "PAGESIZE=8192", 1)
			return s.bytes()
		}, "PAGESIZE"},
		{"bad t1sz", func(s *synth) []byte {
			s.info = strings.Replace(s.info, "NUMBER(TCR_EL1_T1SZ)=0x10", "NUMBER(TCR_EL1_T1SZ)=0x40", 1)
			return s.bytes()
		}, "TCR_EL1_T1SZ"},
		{"va_bits below t1sz", func(s *synth) []byte {
			s.info = strings.Replace(s.info, "NUMBER(TCR_EL1_T1SZ)=0x10", "NUMBER(TCR_EL1_T1SZ)=0xc", 1)
			return s.bytes()
		}, "NUMBER(VA_BITS)=48 is below the VA size in use, 52 bits from NUMBER(TCR_EL1_T1SZ)=0xc"},
		{"no swapper", func(s *synth) []byte {
			s.info = strings.Replace(s.info, "SYMBOL(swapper_pg_dir)", "SYMBOL(x)", 1)
			return s.bytes()
		}, "swapper_pg_dir"},
		{"line", func(s *synth) []byte {
			s.info += "garbage\n"
			return s.bytes()
		}, "no '='"},
		{"prstatus size", func(s *synth) []byte {
			b := s.builder()
			b.Notes[0].Desc = b.Notes[0].Desc[:100]
			return b.Bytes()
		}, "NT_PRSTATUS of 100 bytes"},
		{"no cpus", func(s *synth) []byte {
			b := s.builder()
			b.Notes = b.Notes[2:]
			return b.Bytes()
		}, "no NT_PRSTATUS"},
		{"overlap", func(s *synth) []byte {
			b := s.builder()
			b.Loads = append(b.Loads, b.Loads[0])
			return b.Bytes()
		}, "overlaps"},
		{"overlap addresses", func(s *synth) []byte {
			b := s.builder()
			b.Loads = append(b.Loads, elfcoreLoad(s.o.ramBase+0x1000, 8))
			return b.Bytes()
		}, "overlaps"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s2 := *s
			s2.ram = bytes.Clone(s.ram)
			_, err := loadBytes(c.mod(&s2))
			if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "synth.vmcore") {
				t.Errorf("error %v: want it to name the file and say %q", err, c.want)
			}
		})
	}
}

// TestBadPageTables: a loop and a table outside memory are errors naming
// the level and the descriptor's physical address.
func TestBadPageTables(t *testing.T) {
	s := newSynth(synthOpts{pageShift: 12, vaBits: 48})
	v, err := loadBytes(s.bytes())
	if err != nil {
		t.Fatal(err)
	}
	// The stack's level 0 entry, pointed back at the root.
	slot := s.root + (s.stackVA>>39&511)*8
	s.put64(slot, s.root|3)
	v, _ = loadBytes(s.bytes())
	if _, err := v.Translate(s.stackVA); err == nil || !strings.Contains(err.Error(), "loop") || !strings.Contains(err.Error(), fmt.Sprintf("%#x", s.root)) {
		t.Errorf("loop: %v", err)
	}
	s.put64(slot, 0x7_0000_0000|3)
	v, _ = loadBytes(s.bytes())
	if _, err := v.Translate(s.stackVA); err == nil || !strings.Contains(err.Error(), "level 1 descriptor at pa 0x700000") {
		t.Errorf("outside memory: %v", err)
	}
}

// TestBadKallsyms: corrupt kallsyms tables are errors wrapping ErrCorrupt,
// with the symbols decoded before the damage.
func TestBadKallsyms(t *testing.T) {
	s := newSynth(synthOpts{pageShift: 12, vaBits: 48})
	img := s.ram[imageOff:]
	img[0x92000] = 0 // the first symbol has length 0
	v, _ := loadBytes(s.bytes())
	if _, err := v.Kallsyms(); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "symbol 0 is empty") {
		t.Errorf("empty name: %v", err)
	}
	s = newSynth(synthOpts{pageShift: 12, vaBits: 48})
	le.PutUint32(s.ram[imageOff+0x90000:], 1<<30)
	v, _ = loadBytes(s.bytes())
	if _, err := v.Kallsyms(); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "kallsyms_num_syms") {
		t.Errorf("huge count: %v", err)
	}
}

// TestReadErrorsSayWhere: every error of reading the dump's tables names
// the dump, the field and its address; corruption still wraps ErrCorrupt.
func TestReadErrorsSayWhere(t *testing.T) {
	unmapped := func(s *synth) uint64 { return s.stackVA + stackSize }
	sym := func(s *synth, name string, va uint64) {
		old := fmt.Sprintf("SYMBOL(%s)=", name)
		i := strings.Index(s.info, old)
		j := i + strings.Index(s.info[i:], "\n")
		s.info = s.info[:i] + fmt.Sprintf("%s%x", old, va) + s.info[j:]
	}
	for _, c := range []struct {
		name    string
		mod     func(s *synth) uint64 // returns the address the error names
		want    string
		corrupt bool
	}{
		{"num_syms", func(s *synth) uint64 { sym(s, "kallsyms_num_syms", unmapped(s)); return unmapped(s) }, "kallsyms_num_syms at", false},
		{"offsets", func(s *synth) uint64 { sym(s, "kallsyms_offsets", unmapped(s)); return unmapped(s) }, "kallsyms_offsets at", false},
		{"token_index", func(s *synth) uint64 { sym(s, "kallsyms_token_index", unmapped(s)); return unmapped(s) }, "kallsyms_token_index at", false},
		{"names", func(s *synth) uint64 { sym(s, "kallsyms_names", unmapped(s)); return unmapped(s) }, "kallsyms_names, symbol 0 at", false},
		{"token", func(s *synth) uint64 {
			tt := s.ram[imageOff+0x90400:]
			for i := range 0x1000 {
				tt[i] = 'x'
			}
			return s.kva(0x90400)
		}, "kallsyms_token_table at", true},
		{"empty", func(s *synth) uint64 {
			second := 1 + uint64(s.ram[imageOff+0x92000]) // after the first symbol
			s.ram[imageOff+0x92000+second] = 0
			return s.kva(0x92000 + second)
		}, "kallsyms_names at", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := newSynth(synthOpts{pageShift: 12, vaBits: 48})
			va := c.mod(s)
			v, err := loadBytes(s.bytes())
			if err != nil {
				t.Fatal(err)
			}
			_, err = v.Kallsyms()
			where := fmt.Sprintf("%s %#x", c.want, va)
			if err == nil || !strings.Contains(err.Error(), "synth.vmcore") || !strings.Contains(err.Error(), where) || errors.Is(err, ErrCorrupt) != c.corrupt {
				t.Errorf("%v: want the dump, %q and ErrCorrupt %v", err, where, c.corrupt)
			}
		})
	}
	s := newSynth(synthOpts{pageShift: 12, vaBits: 48})
	v, _ := loadBytes(s.bytes())
	at := unmapped(s)
	_, err := v.PerCPUOffsets([]KSym{{Name: "__per_cpu_offset", Addr: at}}, 1)
	if err == nil || !strings.Contains(err.Error(), "synth.vmcore") || !strings.Contains(err.Error(), fmt.Sprintf("__per_cpu_offset[0] at %#x", at)) {
		t.Errorf("per-CPU offsets: %v", err)
	}
	b := s.builder()
	b.Notes = b.Notes[:2] // no VMCOREINFO
	v, err = loadBytes(b.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := v.Translate(at); err == nil || !strings.Contains(err.Error(), "synth.vmcore") || !strings.Contains(err.Error(), fmt.Sprintf("%#x", at)) {
		t.Errorf("no VMCOREINFO: %v", err)
	}
}

// withEmptyNote returns the core b with one more program header last: an
// empty PT_NOTE (at the start of the data, inside the file).
func withEmptyNote(b []byte) []byte {
	n := int(le.Uint16(b[56:]))
	end := 64 + 56*n
	out := append(bytes.Clone(b[:end]), make([]byte, 56)...)
	out = append(out, b[end:]...)
	le.PutUint16(out[56:], uint16(n+1))
	for i := range n {
		ph := out[64+56*i:]
		le.PutUint64(ph[8:], le.Uint64(ph[8:])+56)
	}
	ph := out[end:]
	le.PutUint32(ph, 4) // PT_NOTE
	le.PutUint64(ph[8:], uint64(end+56))
	return out
}

// TestTrimmedEmptyNote: a vmcore with an empty PT_NOTE loads, and so does
// its trimmed copy, where that segment ends up at the very end of the file
// (it did not load: EOF reading its 0 bytes).
func TestTrimmedEmptyNote(t *testing.T) {
	s := newSynth(synthOpts{pageShift: 12, vaBits: 48})
	v, err := loadBytes(withEmptyNote(s.bytes()))
	if err != nil {
		t.Fatal(err)
	}
	v.RecordReads(true)
	if w, err := v.ReadVirt64(s.stackVA + stackSize - 16); err != nil || w != 0x5ca1ab1e {
		t.Fatalf("stack word %#x, %v", w, err)
	}
	var out bytes.Buffer
	if err := v.WriteTrimmed(&out, v.PagesToRanges(v.PagesRead())); err != nil {
		t.Fatal(err)
	}
	t2, err := loadBytes(out.Bytes())
	if err != nil {
		t.Fatalf("the trimmed copy does not load: %v", err)
	}
	if w, err := t2.ReadVirt64(s.stackVA + stackSize - 16); err != nil || w != 0x5ca1ab1e {
		t.Errorf("trimmed stack word %#x, %v", w, err)
	}
}
