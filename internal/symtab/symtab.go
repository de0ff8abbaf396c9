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
// immutable and safe for concurrent use. A lookup costs O(log n) whatever
// the symbols: a symbol that spans many others (one huge symbol over a
// whole text, as a hostile or a broken table may hold) does not make a pc
// in a gap walk back over every symbol inside it.
type Symbolizer struct {
	syms []Symbol // sorted by Addr, then by Size descending, then given order reversed
	// ends is a max tree over the symbols' ends: leaf size+j holds
	// end(syms[j]) (0 past the last symbol), node k the larger of its
	// children 2k and 2k+1.
	ends []uint64
	size int // the number of leaves, a power of two >= len(syms)
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
	s.size = 1
	for s.size < len(s.syms) {
		s.size *= 2
	}
	s.ends = make([]uint64, 2*s.size)
	for j, sym := range s.syms {
		s.ends[s.size+j] = end(sym)
	}
	for k := s.size - 1; k >= 1; k-- {
		s.ends[k] = max(s.ends[2*k], s.ends[2*k+1])
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
	j, _ := s.last(i, pc)
	if j < 0 {
		return Symbol{}, 0, false
	}
	return s.syms[j], pc - s.syms[j].Addr, true
}

// nearby is how many candidates before pc last tries one by one (a pc
// is usually in the symbol just before it, or in one that encloses a few)
// before it asks the tree.
const nearby = 4

// last returns the largest j < lim whose symbol contains pc (its end is
// above pc; every symbol before lim starts at or below pc), or -1, and
// the number of entries and tree nodes it examined: at most nearby plus
// twice the tree's height.
func (s *Symbolizer) last(lim int, pc uint64) (j, steps int) {
	for j = lim - 1; j >= 0 && j >= lim-nearby; j-- {
		steps++
		if end(s.syms[j]) > pc {
			return j, steps
		}
	}
	lim = j + 1 // candidates [0, lim) remain
	if lim <= 0 {
		return -1, steps
	}
	// The rightmost leaf below lim whose end is above pc: climb from
	// leaf lim-1 and look into each left sibling on the way, then descend
	// into the first one whose largest end is above pc, right child first.
	p := s.size + lim - 1
	steps++
	if s.ends[p] > pc {
		return lim - 1, steps
	}
	for p > 1 {
		steps++
		if p&1 == 1 && s.ends[p-1] > pc {
			p--
			for p < s.size {
				steps++
				if s.ends[2*p+1] > pc {
					p = 2*p + 1
				} else {
					p = 2 * p
				}
			}
			return p - s.size, steps
		}
		p >>= 1
	}
	return -1, steps
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
