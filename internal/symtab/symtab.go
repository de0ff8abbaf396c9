// Package symtab maps code addresses to function symbols, for the machine
// model's text and for snapshots of real programs.
package symtab

import (
	"fmt"
	"sort"
)

// Symbol is a function symbol: Name covers [Addr, Addr+Size).
type Symbol struct {
	Name string
	Addr uint64
	Size uint64
}

// Symbolizer maps code addresses to symbols by binary search. Symbols may
// come in any order, may overlap and may have size 0 (then only their
// exact address matches). Of the symbols containing an address the
// innermost wins: the latest-starting, then the smallest, then (aliases
// with the same address and size) the first given. A Symbolizer is
// immutable and safe for concurrent use.
type Symbolizer struct {
	syms   []Symbol // sorted by Addr, then by Size descending, then given order reversed
	maxEnd []uint64 // maxEnd[i]: the largest end of syms[0..i]
}

// NewSymbolizer returns a symbolizer over a copy of syms.
func NewSymbolizer(syms []Symbol) *Symbolizer {
	s := &Symbolizer{syms: make([]Symbol, len(syms))}
	// Lookup takes the last candidate in sorted order: the first given of
	// equal symbols must sort last.
	for i, sym := range syms {
		s.syms[len(syms)-1-i] = sym
	}
	sort.SliceStable(s.syms, func(i, j int) bool {
		a, b := s.syms[i], s.syms[j]
		if a.Addr != b.Addr {
			return a.Addr < b.Addr
		}
		return a.Size > b.Size
	})
	s.maxEnd = make([]uint64, len(s.syms))
	var m uint64
	for i, sym := range s.syms {
		m = max(m, end(sym))
		s.maxEnd[i] = m
	}
	return s
}

// end returns the exclusive end of sym; a zero-size symbol covers its
// address only.
func end(sym Symbol) uint64 {
	if sym.Size == 0 {
		return sym.Addr + 1
	}
	return sym.Addr + sym.Size
}

// Symbols returns the symbols sorted by address. The slice must not be
// modified.
func (s *Symbolizer) Symbols() []Symbol { return s.syms }

// Lookup returns the symbol containing pc and pc's offset into it. ok is
// false if no symbol contains pc.
func (s *Symbolizer) Lookup(pc uint64) (sym Symbol, off uint64, ok bool) {
	// i is the first symbol starting after pc; candidates are before it.
	i := sort.Search(len(s.syms), func(i int) bool { return s.syms[i].Addr > pc })
	for j := i - 1; j >= 0 && s.maxEnd[j] > pc; j-- {
		if end(s.syms[j]) > pc {
			return s.syms[j], pc - s.syms[j].Addr, true
		}
	}
	return Symbol{}, 0, false
}

// Func returns the name of the function containing pc, or "" if none does.
func (s *Symbolizer) Func(pc uint64) string {
	sym, _, ok := s.Lookup(pc)
	if !ok {
		return ""
	}
	return sym.Name
}

// Name returns pc as "name+0xoff", or as "0xpc" when no symbol contains
// it.
func (s *Symbolizer) Name(pc uint64) string {
	sym, off, ok := s.Lookup(pc)
	if !ok {
		return fmt.Sprintf("%#x", pc)
	}
	return fmt.Sprintf("%s+%#x", sym.Name, off)
}
