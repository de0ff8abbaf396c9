package unwind

import (
	"github.com/unwindkit/unwindkit/internal/symbridge"
	"github.com/unwindkit/unwindkit/internal/symtab"
)

// Symbol is a function symbol: Name covers [Addr, Addr+Size).
type Symbol struct {
	// Name is the function's name.
	Name string
	// Addr is the function's first address.
	Addr uint64
	// Size is the function's size in bytes; 0 matches only Addr.
	Size uint64
}

// Symbolizer maps program counters to function+offset, for the machine's
// text and for snapshots. It is immutable and safe for concurrent use.
type Symbolizer struct {
	t    *symtab.Symbolizer
	syms []Symbol // t's symbols, sorted by address
}

// NewSymbolizer returns a symbolizer over a copy of syms. Symbols may
// overlap (the innermost wins) and may have size 0.
func NewSymbolizer(syms []Symbol) *Symbolizer {
	in := make([]symtab.Symbol, len(syms))
	for i, s := range syms {
		in[i] = symtab.Symbol(s)
	}
	return wrapSymtab(symtab.NewSymbolizer(in))
}

func init() {
	symbridge.Wrap = func(t *symtab.Symbolizer) any { return wrapSymtab(t) }
}

// wrapSymtab returns the public Symbolizer over t.
func wrapSymtab(t *symtab.Symbolizer) *Symbolizer {
	sorted := t.Symbols()
	out := &Symbolizer{t: t, syms: make([]Symbol, len(sorted))}
	for i, s := range sorted {
		out.syms[i] = Symbol(s)
	}
	return out
}

// Symbols returns the symbols sorted by address. The slice must not be
// modified.
func (s *Symbolizer) Symbols() []Symbol { return s.syms }

// Lookup returns the symbol containing pc and pc's offset into it; ok is
// false if no symbol contains pc.
func (s *Symbolizer) Lookup(pc uint64) (sym Symbol, off uint64, ok bool) {
	t, off, ok := s.t.Lookup(pc)
	return Symbol(t), off, ok
}

// Func returns the name of the function containing pc, or "" if none does.
func (s *Symbolizer) Func(pc uint64) string { return s.t.Func(pc) }

// Name returns pc as "name+0xoff", or as "0xpc" when no symbol contains
// it.
func (s *Symbolizer) Name(pc uint64) string { return s.t.Name(pc) }
