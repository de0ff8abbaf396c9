package unwind

import "github.com/unwindkit/unwindkit/internal/symtab"

// Symbol is a function symbol: Name covers [Addr, Addr+Size).
type Symbol = symtab.Symbol

// Symbolizer maps program counters to function+offset, for the machine's
// text and for snapshots. It is immutable and safe for concurrent use.
type Symbolizer = symtab.Symbolizer

// NewSymbolizer returns a symbolizer over a copy of syms. Symbols may
// overlap (the innermost wins) and may have size 0.
func NewSymbolizer(syms []Symbol) *Symbolizer { return symtab.NewSymbolizer(syms) }
