package symtab

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"testing"
)

func TestSymbolizer(t *testing.T) {
	s := NewSymbolizer([]Symbol{
		{"outer", 0x1000, 0x100},
		{"inner", 0x1040, 0x10}, // nested inside outer
		{"b", 0x2000, 0x20},
		{"a", 0x2000, 0x40}, // same start, larger: b wins inside [0x2000, 0x2020)
		{"label", 0x3000, 0},
		{"top", 0xffff_ffff_ffff_ff00, 0xff},
	})
	tests := []struct {
		pc   uint64
		want string
	}{
		{0xfff, "0xfff"},
		{0x1000, "outer+0x0"},
		{0x103c, "outer+0x3c"},
		{0x1040, "inner+0x0"},
		{0x104f, "inner+0xf"},
		{0x1050, "outer+0x50"},
		{0x10ff, "outer+0xff"},
		{0x1100, "0x1100"},
		{0x2000, "b+0x0"},
		{0x201f, "b+0x1f"},
		{0x2020, "a+0x20"},
		{0x2040, "0x2040"},
		{0x3000, "label+0x0"},
		{0x3001, "0x3001"},
		{0xffff_ffff_ffff_fffe, "top+0xfe"},
		{0xffff_ffff_ffff_ffff, "0xffffffffffffffff"},
	}
	for _, tt := range tests {
		if got := s.Name(tt.pc); got != tt.want {
			t.Errorf("Name(%#x) = %q, want %q", tt.pc, got, tt.want)
		}
	}
	if s.Func(0x1100) != "" || s.Func(0x1044) != "inner" {
		t.Errorf("Func: %q %q", s.Func(0x1100), s.Func(0x1044))
	}
	// Differential check against a linear scan picking the latest-starting,
	// then smallest, containing symbol.
	syms := s.Symbols()
	for pc := uint64(0xff0); pc < 0x3010; pc++ {
		var want Symbol
		found := false
		for _, sym := range syms {
			if pc >= sym.Addr && pc < end(sym) && (!found || sym.Addr > want.Addr || sym.Addr == want.Addr && sym.Size < want.Size) {
				want, found = sym, true
			}
		}
		got, _, ok := s.Lookup(pc)
		if ok != found || got != want {
			t.Fatalf("Lookup(%#x) = %+v %v, linear scan %+v %v", pc, got, ok, want, found)
		}
	}
	if _, _, ok := NewSymbolizer(nil).Lookup(0); ok {
		t.Error("empty symbolizer found a symbol")
	}
}

func BenchmarkLookup(b *testing.B) {
	syms := make([]Symbol, 4096)
	for i := range syms {
		syms[i] = Symbol{Name: fmt.Sprint("f", i), Addr: uint64(0x400000 + 64*i), Size: 48}
	}
	s := NewSymbolizer(syms)
	pc := uint64(0x400000)
	for b.Loop() {
		s.Lookup(pc)
		pc = (pc+4099*4)&(1<<18-1) | 0x400000
	}
}

// TestAliasesFirstGiven: of symbols with the same address and size, the
// first given names the address, whatever the order of the others.
func TestAliasesFirstGiven(t *testing.T) {
	s := NewSymbolizer([]Symbol{{"z", 0x100, 0x10}, {"memcpy", 0x200, 0x20}, {"__memcpy", 0x200, 0x20}, {"a", 0x100, 0x10}})
	if got := s.Func(0x210); got != "memcpy" {
		t.Errorf("Func(0x210) = %q, want memcpy (first given)", got)
	}
	if got := s.Func(0x100); got != "z" {
		t.Errorf("Func(0x100) = %q, want z (first given)", got)
	}
}

// TestLookupOneHugeSymbol: one symbol spanning a whole text with many
// small ones inside it, and pcs in the gaps between them, where only the
// huge one contains the pc. The old lookup walked back over every small
// symbol below such a pc (n steps a lookup, n² for a trace of the whole
// table); every lookup now examines at most nearby + 2·log2(n) entries,
// and finds what a linear scan finds.
func TestLookupOneHugeSymbol(t *testing.T) {
	const n = 1 << 14
	syms := []Symbol{{"huge", 0x1000, n * 0x100}}
	for i := range n {
		syms = append(syms, Symbol{fmt.Sprintf("f%d", i), 0x1000 + uint64(i)*0x100, 0x40})
	}
	s := NewSymbolizer(syms)
	bound := nearby + 2*15
	for i := 0; i < n; i += 7 {
		for _, c := range []struct {
			pc   uint64
			want string
		}{
			{0x1000 + uint64(i)*0x100 + 0x80, "huge"},                // a gap: only the huge symbol
			{0x1000 + uint64(i)*0x100 + 0x3f, fmt.Sprintf("f%d", i)}, // inside a small one
		} {
			lim := sort.Search(len(s.syms), func(k int) bool { return s.syms[k].Addr > c.pc })
			j, steps := s.last(lim, c.pc)
			if j < 0 || s.syms[j].Name != c.want {
				t.Fatalf("pc %#x: index %d, want %s", c.pc, j, c.want)
			}
			if steps > bound {
				t.Fatalf("pc %#x: %d steps, want at most %d", c.pc, steps, bound)
			}
		}
	}
}

// TestLookupRandom checks Lookup against a linear scan on random nested,
// overlapping and zero-size symbols.
func TestLookupRandom(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for round := range 200 {
		var syms []Symbol
		for i := range 1 + r.IntN(40) {
			a := uint64(r.IntN(0x400))
			size := uint64(r.IntN(0x100))
			if r.IntN(8) == 0 {
				size = uint64(r.IntN(0x800))
			}
			syms = append(syms, Symbol{fmt.Sprintf("s%d", i), a, size})
		}
		s := NewSymbolizer(syms)
		for pc := uint64(0); pc < 0xc00; pc++ {
			var want Symbol
			found := false
			for _, sym := range s.Symbols() {
				if pc >= sym.Addr && pc < end(sym) && (!found || sym.Addr > want.Addr || sym.Addr == want.Addr && sym.Size < want.Size) {
					want, found = sym, true
				}
			}
			got, _, ok := s.Lookup(pc)
			if ok != found || got.Addr != want.Addr || got.Size != want.Size {
				t.Fatalf("round %d: Lookup(%#x) = %+v %v, linear scan %+v %v", round, pc, got, ok, want, found)
			}
		}
	}
}
