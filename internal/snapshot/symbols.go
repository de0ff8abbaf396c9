package snapshot

import "github.com/unwindkit/unwindkit/internal/symtab"

// Symbol is a function symbol of the snapshot (symtab.Symbol).
type Symbol = symtab.Symbol

// Symbolizer maps code addresses to symbols (symtab.Symbolizer).
type Symbolizer = symtab.Symbolizer

// NewSymbolizer returns a symbolizer over a copy of syms.
func NewSymbolizer(syms []Symbol) *Symbolizer { return symtab.NewSymbolizer(syms) }
