package scs

import (
	"sync/atomic"

	"github.com/unwindkit/unwindkit/internal/errs"
)

// ErrChanged reports that a shadow stack a View covers was rewritten while
// (or before) Save or Frames copied it: the View's instant is gone and a
// copy would mix two lifetimes of the stack. Take a new View and copy
// again (Model.Save does). It is returned with no frames. It is the
// same value as package machine's ErrChanged (one sentinel per meaning).
var ErrChanged = errs.ErrChanged

// life tracks the lifetimes of one shadow stack for concurrent readers.
// Only the stack's driver writes it; readers load gen.
//
// gen changes before any push that overwrites a slot a reader may have
// seen as live, and hw is the highest top (x18 or a saved pointer) the
// stack has had since gen last changed. A reader loads gen, then the top:
// every slot below that top keeps its value until a push lands below it,
// which is below hw, so it bumps gen first; the reader's re-check of gen
// after copying catches it. Pushes above every top a reader saw (the
// common case: the stack grows) and pops change nothing, so a reader is
// only disturbed by a pop followed by a push into the range it copies.
type life struct {
	gen atomic.Uint64
	hw  atomic.Uint64
}

// write is called by a push, before it stores at sp.
func (l *life) write(sp uint64) {
	if sp < l.hw.Load() {
		l.gen.Store(l.gen.Load() + 1)
	}
	l.hw.Store(sp + 8)
}

// raise is called before the stack's top is set to v other than by a
// push or pop (an exit restoring a saved pointer, a task switch, fault
// injection), keeping hw at or above every top.
func (l *life) raise(v uint64) {
	if v > l.hw.Load() {
		l.hw.Store(v)
	}
}

// changed reports whether a segment of v among the first n was rewritten
// after v was taken. Segments over caller memory (no generation) never
// change.
func (v *View) changed(n int) bool {
	for i := range min(n, v.N) {
		if v.Segs[i].changed() {
			return true
		}
	}
	return false
}

// changed reports whether the model's stack under s was rewritten after
// the View holding s was taken; a segment over caller memory (no
// generation) never changes.
func (s *Segment) changed() bool { return s.gen != nil && s.gen.Load() != s.genWant }
