// Package symbridge lets a package above unwind wrap a symbol table it got
// from an internal loader in the public unwind.Symbolizer without copying
// or re-sorting it (which could resolve aliases differently): package
// unwind sets Wrap in its init function.
package symbridge

import "github.com/unwindkit/unwindkit/internal/symtab"

// Wrap returns an *unwind.Symbolizer over t. It is set by package unwind,
// which every user of Wrap imports.
var Wrap func(t *symtab.Symbolizer) any
