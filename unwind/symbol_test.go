package unwind

import (
	"slices"
	"testing"
)

func TestSymbolizer(t *testing.T) {
	in := []Symbol{
		{Name: "outer", Addr: 0x1000, Size: 0x100},
		{Name: "inner", Addr: 0x1040, Size: 0x10}, // nested in outer: wins inside it
		{Name: "mark", Addr: 0x2000},              // size 0: only its address
		{Name: "early", Addr: 0x800, Size: 0x20},
	}
	s := NewSymbolizer(in)
	in[0].Name = "changed" // NewSymbolizer copies
	for _, c := range []struct {
		pc         uint64
		fn, name   string
		off        uint64
		found      bool
		wantSymbol Symbol
	}{
		{0x1000, "outer", "outer+0x0", 0, true, Symbol{"outer", 0x1000, 0x100}},
		{0x1044, "inner", "inner+0x4", 4, true, Symbol{"inner", 0x1040, 0x10}},
		{0x1050, "outer", "outer+0x50", 0x50, true, Symbol{"outer", 0x1000, 0x100}},
		{0x2000, "mark", "mark+0x0", 0, true, Symbol{"mark", 0x2000, 0}},
		{0x2004, "", "0x2004", 0, false, Symbol{}},
		{0x10, "", "0x10", 0, false, Symbol{}},
	} {
		if got := s.Func(c.pc); got != c.fn {
			t.Errorf("Func(%#x) = %q, want %q", c.pc, got, c.fn)
		}
		if got := s.Name(c.pc); got != c.name {
			t.Errorf("Name(%#x) = %q, want %q", c.pc, got, c.name)
		}
		sym, off, ok := s.Lookup(c.pc)
		if ok != c.found || sym != c.wantSymbol || off != c.off {
			t.Errorf("Lookup(%#x) = %+v, %#x, %v; want %+v, %#x, %v", c.pc, sym, off, ok, c.wantSymbol, c.off, c.found)
		}
	}
	var names []string
	for _, sym := range s.Symbols() {
		names = append(names, sym.Name)
	}
	if want := []string{"early", "outer", "inner", "mark"}; !slices.Equal(names, want) {
		t.Errorf("Symbols() = %q, want %q", names, want)
	}
}
