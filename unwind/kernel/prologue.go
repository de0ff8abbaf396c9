package kernel

import (
	"fmt"

	"github.com/unwindkit/unwindkit/internal/prologue"
)

// X30State says where the caller's return address of a stopped function
// is, read from the function's code before the stop.
type X30State uint8

const (
	// X30Unknown: the code does not tell (unreadable, a branch, a call
	// or a write of x29 or x30 before the stop, or pc past the prologue).
	X30Unknown X30State = iota
	// X30Live: only in x30 (and on the SCS if the push ran): the
	// function has not linked a frame record, x29 is still the caller's.
	X30Live
	// X30Linked: in the frame record the function linked.
	X30Linked
)

// String returns "unknown", "live in x30" or "in the linked frame record".
func (x X30State) String() string { return prologue.X30(x).String() }

// Prologue says how far the function holding a stopped pc got through
// its prologue, read from its code in the dump. It decides whether the
// caller's return address is still only in x30 (both techniques then
// report x30 after the pc) and whether it is on the shadow call stack.
type Prologue struct {
	// Func is the function holding the pc, and Off the pc's offset in it.
	Func string
	Off  uint64
	// SignAt is the offset of the executed signing of x30 (paciasp ...),
	// or -1 when none ran before the pc.
	SignAt int
	// SCSPushAt is the offset of the executed SCS push
	// (`str x30, [x18], #8`), or -1 when none ran before the pc.
	SCSPushAt int
	// PairAt is the offset of the executed `stp x29, x30, [sp, ...]`, or
	// -1 when none ran before the pc.
	PairAt int
	// LinkedAt is the offset of the executed instruction that set x29
	// (`mov x29, sp` or `add x29, sp, #n`: the frame record is linked),
	// or -1 when none ran before the pc.
	LinkedAt int
	// X30 is where the caller's return address is.
	X30 X30State
	// Why names the instructions that decided X30.
	Why string
}

// PrologueAt reads the code from the start of the function holding pc up
// to pc (at most prologue.MaxProgress bytes) and reports which steps of
// its prologue already ran and where the caller's return address is
// (internal/prologue's analysis of straight-line prologue code). A pc at
// the function's first instruction needs no code: nothing ran, x30 is
// live.
func (k *Kernel) PrologueAt(pc uint64) (Prologue, error) {
	s, ok := k.Sym(pc)
	if !ok {
		return Prologue{SignAt: -1, SCSPushAt: -1, PairAt: -1, LinkedAt: -1}, fmt.Errorf("no symbol holds pc %#x", pc)
	}
	p := Prologue{Func: s.Name, Off: pc - s.Addr, SignAt: -1, SCSPushAt: -1, PairAt: -1, LinkedAt: -1}
	if p.Off > prologue.MaxProgress {
		p.Why = fmt.Sprintf("pc past the first %d bytes of %s: not in its prologue", prologue.MaxProgress, s.Name)
		return p, nil
	}
	code := make([]byte, p.Off)
	if err := k.mem.ReadVirt(code, s.Addr); err != nil {
		p.Why = "code unreadable"
		return p, fmt.Errorf("code of %s at %#x: %w", s.Name, s.Addr, err)
	}
	g := prologue.ProgressOf(code)
	p.SignAt, p.SCSPushAt, p.PairAt, p.LinkedAt = g.SignAt, g.PushAt, g.PairAt, g.LinkAt
	p.X30, p.Why = X30State(g.X30), g.Why
	return p, nil
}

// PushedUnlinked reports whether the prologue pushed x30 on the shadow
// call stack but has not linked its frame record: the caller's return
// address is then on the SCS (and in x30) but in no frame record.
func (p Prologue) PushedUnlinked() bool { return p.SCSPushAt >= 0 && p.LinkedAt < 0 }

// String describes the prologue state.
func (p Prologue) String() string {
	if p.Func == "" {
		return "unknown"
	}
	return fmt.Sprintf("%s+%#x: caller's return address %s (%s)", p.Func, p.Off, p.X30, p.Why)
}
