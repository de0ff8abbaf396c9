// The model's memory: AllocFunc, NewAllocator and one shadow stack's words.

package scs

import (
	"fmt"
	"sync/atomic"
)

// AllocFunc allocates the memory of one shadow stack of size bytes for
// the model, placed in the driver's address space: it returns the base
// address and the memory as words, word i at base+8*i, at least size/8 of
// them. The model reads and writes the words with sync/atomic, and so must
// anyone else who reads them while the model runs (the driver's view of
// the same memory, a dump). kind is "scs"; name says whose shadow stack it
// is ("irq_shadow_call_stack/0", "task:swapper/0", ...).
type AllocFunc func(name, kind string, size uint64) (base uint64, words []uint64, err error)

// NewAllocator returns an AllocFunc for a model whose memory nobody else
// needs to see: each shadow stack is fresh Go memory, placed at addresses
// from base on, one after the other, each followed by an unmapped guard
// gap of one 4 KiB page (like vmalloc'd shadow stacks).
func NewAllocator(base uint64) AllocFunc {
	next := base
	return func(name, kind string, size uint64) (uint64, []uint64, error) {
		size = (size + 7) &^ 7
		at := next
		if at%8 != 0 || at+size+4096 < at {
			return 0, nil, fmt.Errorf("scs: no address space for %s at %#x", name, at)
		}
		next = at + size + 4096
		return at, make([]uint64, size/8), nil
	}
}

// stack is one shadow stack's memory as AllocFunc returned it, cut to the
// configured size: word i is at base+8*i.
type stack struct {
	base  uint64
	words []uint64
}

// load and store access the word at addr, which must be in the stack.
func (s *stack) load(addr uint64) uint64 { return atomic.LoadUint64(&s.words[(addr-s.base)/8]) }

func (s *stack) store(addr uint64, v uint64) { atomic.StoreUint64(&s.words[(addr-s.base)/8], v) }
