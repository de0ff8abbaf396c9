package scs

import (
	"iter"

	"github.com/unwindkit/unwindkit/fp"
	"github.com/unwindkit/unwindkit/internal/errs"
)

// Origin says where a Frame came from: the module's one origin enum,
// [fp.Origin]. A copy's frames have one of two origins.
type Origin = fp.Origin

const (
	// OriginSCS is a return address read from a shadow stack slot.
	OriginSCS = fp.OriginSCS
	// OriginInterruptedPC is the interrupted PC kept per-CPU at a context
	// boundary (KeepInterruptedPC).
	OriginInterruptedPC = fp.OriginInterruptedPC
)

// Frame is one entry of a trace with its provenance: the module's one
// frame type, [fp.Frame]. A copy's frames carry PC, Raw, Origin, Stack
// (the kind of stack their context runs on: [ContextOf] gives the
// context) and, for a slot, Addr.
type Frame = fp.Frame

// ContextOf is the context that runs on stacks of kind k: CtxIRQ for
// fp.IRQ, CtxSDEINormal and CtxSDEICritical for the SDEI stacks, CtxTask
// for every other kind (the task's stack, the overflow stack, unknown).
func ContextOf(k fp.StackKind) Context {
	switch k {
	case fp.IRQ:
		return CtxIRQ
	case fp.SDEINormal:
		return CtxSDEINormal
	case fp.SDEICritical:
		return CtxSDEICritical
	}
	return CtxTask
}

// Stack is the kind of stack context c runs on (fp.Task, fp.IRQ,
// fp.SDEINormal, fp.SDEICritical; fp.Unknown for a value out of range).
func (c Context) Stack() fp.StackKind {
	switch c {
	case CtxTask:
		return fp.Task
	case CtxIRQ:
		return fp.IRQ
	case CtxSDEINormal:
		return fp.SDEINormal
	case CtxSDEICritical:
		return fp.SDEICritical
	}
	return fp.Unknown
}

// Frames returns an iterator over the frames of v with their provenance,
// innermost first: the same entries as Save (PC equal to Save's entries
// for skip 0), each with a nil error. A copy that fails ends with one last
// pair (Frame{}, err): ErrNotSupported for a disabled View,
// ErrInterruptedTopHidden at a hidden top, a *[CorruptError] on corrupt
// state, as Save returns them. It has the shape of package fp's Frames;
// [Save] is the buffer-filling copy.
//
// Over a running Model's View, each slot is re-checked against its
// stack's generation right after it is read, and the iterator ends with
// ErrChanged as soon as the stack was rewritten since the View was taken:
// every frame it yielded is the stack at the View's instant, but the
// trace is cut short (Save, which fills a buffer, returns no frames
// then). Take a new View and iterate again.
func Frames(v *View) iter.Seq2[Frame, error] {
	return func(yield func(Frame, error) bool) { v.frames(yield) }
}

// frames is Frames' body.
func (v *View) frames(yield func(Frame, error) bool) {
	if v.Disabled {
		yield(Frame{}, ErrNotSupported)
		return
	}
	if v.N < 1 || v.N > len(v.Segs) {
		yield(Frame{}, errs.Corruptf(RuleBadSCSView, uint64(v.N), "%d segments", v.N))
		return
	}
	m := v.Layout.InsnMasks()
	for i := range v.N {
		s := &v.Segs[i]
		var cnt [1]int
		if _, bad := checkSegs(v.Segs[i:i+1], cnt[:]); bad != segOK {
			_, err := v.fail(0, i)
			yield(Frame{}, err)
			return
		}
		if s.changed() {
			yield(Frame{}, ErrChanged)
			return
		}
		// The frame is built once per segment and its three changing
		// fields set per slot (a literal per slot is copied from a
		// static template through memory).
		var f Frame
		f.Origin, f.Stack = OriginSCS, s.Context.Stack()
		for w := cnt[0] - 1; w >= 0; w-- {
			raw := s.word(w)
			if s.changed() { // raw may be of a later lifetime
				yield(Frame{}, ErrChanged)
				return
			}
			f.PC, f.Raw, f.Addr = m.Strip(raw), raw, s.Base+uint64(w)*8
			if !yield(f, nil) {
				return
			}
		}
		if v.StopAtBoundary || i+1 == v.N {
			return
		}
		if s.HasInterruptedPC {
			if !yield(Frame{PC: s.InterruptedPC, Raw: s.InterruptedPC, Origin: OriginInterruptedPC, Stack: v.Segs[i+1].Context.Stack()}, nil) {
				return
			}
		}
	}
}
