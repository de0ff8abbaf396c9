package scs

import (
	"fmt"
	"sync/atomic"

	"github.com/unwindkit/unwindkit/internal/errs"
	"github.com/unwindkit/unwindkit/internal/mem"
	"github.com/unwindkit/unwindkit/ptrauth"
)

// Where says where the unwinder found a context's top (its x18).
type Where uint8

const (
	// InRegister means x18 itself: the innermost context.
	InRegister Where = iota
	// InThreadInfo means the current task's thread_info.scs_sp
	// (ThreadInfo IRQ entry).
	InThreadInfo
	// OnInterruptedStack means pushed with stp x18, xzr on the
	// interrupted stack (OnStack IRQ entry); TopAddr is the slot.
	OnInterruptedStack
	// InSDEIRegs means regs[18] of the SDEI handler's saved interrupted
	// registers.
	InSDEIRegs
	// InPerCPU means irq_shadow_call_stack_saved_ptr or
	// sdei_shadow_call_stack_{normal,critical}_saved_ptr (PerCPU policy).
	InPerCPU
	// InSnapshot means given by the caller, e.g. from a register dump.
	InSnapshot
)

// String names the location.
func (w Where) String() string {
	switch w {
	case InRegister:
		return "x18"
	case InThreadInfo:
		return "thread_info.scs_sp"
	case OnInterruptedStack:
		return "interrupted stack"
	case InSDEIRegs:
		return "SDEI saved regs[18]"
	case InPerCPU:
		return "per-cpu saved ptr"
	case InSnapshot:
		return "snapshot"
	}
	return fmt.Sprintf("Where(%d)", uint8(w))
}

// Segment is one context's part of a View: the shadow stack entries
// [Base, Top) of that context, newest at Top-8.
type Segment struct {
	// Context is the context whose entries these are.
	Context Context
	// Region holds the shadow stack. Every read is checked against it.
	Region *mem.Region
	// Base is the address of the context's first slot.
	Base uint64
	// Size is the shadow stack's size in bytes from Base, end magic
	// included when Magic is set; 0 means "to the end of Region".
	Size uint64
	// Magic says the last word of the stack (Base+Size-8) must hold
	// EndMagic and is not an entry slot.
	Magic bool
	// Top is the context's x18: the next free slot.
	Top uint64
	// TopFrom and TopAddr say where Top was found (TopAddr is the slot's
	// address for OnInterruptedStack, else 0).
	TopFrom Where
	TopAddr uint64
	// Hidden says the policy left Top where an SCS-only unwinder cannot
	// find it (Top is then 0): Save stops here with
	// ErrInterruptedTopHidden. A driver that found the slot through the
	// frame chain may fill Top and clear Hidden.
	Hidden bool
	// InterruptedPC, when HasInterruptedPC, is the PC the next outer
	// context was running when this one was entered (KeepInterruptedPC).
	// Save reports it between this segment's entries and the next one's.
	InterruptedPC    uint64
	HasInterruptedPC bool

	// gen is the life generation of the model's stack this segment
	// describes and genWant its value when the View was taken; nil for
	// a segment over memory without a writer.
	gen     *atomic.Uint64
	genWant uint64
}

// View is the immutable description of a CPU's (or a snapshot's) shadow
// stacks that Save and Frames read. Build one with Model.View or
// NewSnapshotView, or fill the fields directly; Save validates everything.
//
// A View taken from a Model ([Model.View], [Model.ViewInto]) also carries,
// in unexported fields, each stack's life generation at the instant it was
// taken; Save and Frames re-check them after copying and return
// [ErrChanged] if the model's driver has since rewritten a slot the View
// covers, so a copy is never a mix of two lifetimes of a stack. A View
// built over memory the caller owns has no writer and no generations, and
// is never re-checked.
type View struct {
	// Layout strips PACs from entries.
	Layout ptrauth.Layout
	// Disabled says the SCS is not configured: Save returns
	// ErrNotSupported.
	Disabled bool
	// StopAtBoundary stops after the innermost context's entries, as
	// KASAN's filter_irq_stacks cuts a trace at the first IRQ entry.
	StopAtBoundary bool
	// N is the number of segments in use; Segs[:N] are the live contexts,
	// innermost first.
	N    int
	Segs [NumContexts]Segment
}

// Segments returns the segments in use, innermost first.
func (v *View) Segments() []Segment {
	if v.N < 0 || v.N > len(v.Segs) {
		return nil
	}
	return v.Segs[:v.N]
}

// NewSnapshotView returns a View of one shadow stack captured from a real
// program: the stack occupies region r from base, x18 is the captured
// register, l the program's VA layout. There is no end magic (user-space
// shadow stacks are guarded by unmapped pages instead) and no nested
// context; set Segs[0].Size and Segs[0].Magic for a kernel shadow stack.
func NewSnapshotView(r *mem.Region, base, x18 uint64, l ptrauth.Layout) View {
	v := View{Layout: l, N: 1}
	v.Segs[0] = Segment{Context: CtxTask, Region: r, Base: base, Top: x18, TopFrom: InSnapshot}
	return v
}

// Save copies the return addresses of v's shadow stacks into store,
// innermost first, and returns how many it stored: at most len(store),
// after removing exactly skip entries from the innermost end (an
// interrupted PC counts as an entry). A full store is not an error.
//
// It copies from the newest entry (Top-8) down to Base of each segment,
// innermost context first, inserting each boundary's interrupted PC when
// the View has one; it stops after the first segment if StopAtBoundary is
// set. Each slot is read at most once, atomically; the slot at a Top is
// never read. Every entry is stripped with v.Layout.
//
// On a disabled View it returns ErrNotSupported. At a hidden top it returns
// the entries so far and ErrInterruptedTopHidden; on corrupt state the
// entries so far and a *CorruptError naming the rule and address. On a
// View of a running Model whose stacks were rewritten since the View was
// taken it returns 0 and ErrChanged: whatever it returns otherwise is the
// stacks at the View's instant.
//
// Save is small enough to inline; its loop calls no function per entry.
func Save(v *View, store []uint64, skip int) (int, error) {
	if v.Disabled {
		return 0, ErrNotSupported
	}
	return v.save(store, skip)
}

// slots validates segment s and returns its region's words and the word
// range [lo, hi) of its entries.
func (s *Segment) slots() (words []uint64, lo, hi int, err error) {
	r := s.Region
	if r == nil {
		return nil, 0, 0, errs.Corruptf("scs region missing", s.Top, "%s context", s.Context)
	}
	if s.Base%8 != 0 {
		return nil, 0, 0, errs.Corruptf("misaligned scs base", s.Base, "%s context", s.Context)
	}
	if !r.Contains(s.Base, 0) {
		return nil, 0, 0, errs.Corruptf("scs base outside region", s.Base, "%s context, region %s", s.Context, r)
	}
	limit := r.End()
	if s.Size != 0 {
		if s.Size%8 != 0 || !r.Contains(s.Base, s.Size) {
			return nil, 0, 0, errs.Corruptf("scs outside region", s.Base, "%s context, %d bytes, region %s", s.Context, s.Size, r)
		}
		limit = s.Base + s.Size
	}
	words = r.Words()
	if s.Magic {
		if limit-s.Base < 8 {
			return nil, 0, 0, errs.Corruptf("scs too small for end magic", s.Base, "%s context", s.Context)
		}
		limit -= 8
		if w := atomic.LoadUint64(&words[(limit-r.Base)/8]); w != EndMagic {
			return nil, 0, 0, errs.Corruptf("scs end magic overwritten", limit, "%s context: %#x", s.Context, w)
		}
	}
	top := s.Top
	switch {
	case top%8 != 0:
		return nil, 0, 0, errs.Corruptf("misaligned scs pointer", top, "%s context (from %s)", s.Context, s.TopFrom)
	case top < s.Base:
		return nil, 0, 0, errs.Corruptf("scs pointer below base", top, "%s context (from %s), base %#x", s.Context, s.TopFrom, s.Base)
	case top > limit:
		return nil, 0, 0, errs.Corruptf("scs pointer outside region", top, "%s context (from %s), stack [%#x, %#x)", s.Context, s.TopFrom, s.Base, limit)
	}
	return words, int((s.Base - r.Base) / 8), int((top - r.Base) / 8), nil
}

// err returns the error slots finds for a segment span refused.
func (s *Segment) err() error {
	if _, _, _, err := s.slots(); err != nil {
		return err
	}
	return errs.Corruptf("bad scs segment", s.Base, "%s context", s.Context) // not reached
}

// span is slots without error values, for Save's fast path: ok is false
// exactly when slots returns an error.
func (s *Segment) span() (words []uint64, lo, hi int, ok bool) {
	r := s.Region
	if r == nil {
		return nil, 0, 0, false
	}
	words = r.Words()
	size := uint64(len(words)) * 8
	off := s.Base - r.Base // wraps when Base is below the region
	if s.Base%8 != 0 || off > size {
		return nil, 0, 0, false
	}
	limit := size // offsets from r.Base
	if s.Size != 0 {
		if s.Size%8 != 0 || s.Size > size-off {
			return nil, 0, 0, false
		}
		limit = off + s.Size
	}
	if s.Magic {
		if limit-off < 8 {
			return nil, 0, 0, false
		}
		limit -= 8
		if atomic.LoadUint64(&words[limit/8]) != EndMagic {
			return nil, 0, 0, false
		}
	}
	if s.Top%8 != 0 || s.Top < s.Base || s.Top-r.Base > limit {
		return nil, 0, 0, false
	}
	return words, int(off / 8), int((s.Top - r.Base) / 8), true
}

func (s *Segment) hiddenErr() error {
	if s.TopAddr != 0 {
		return fmt.Errorf("%w: %s context's x18 is at %#x (%s)", ErrInterruptedTopHidden, s.Context, s.TopAddr, s.TopFrom)
	}
	return fmt.Errorf("%w: %s context's x18 is in %s", ErrInterruptedTopHidden, s.Context, s.TopFrom)
}

// save is Save's body: the copy loop.
func (v *View) save(store []uint64, skip int) (int, error) {
	if len(store) == 0 {
		return 0, nil
	}
	n, last, err := v.copy(store, skip)
	if v.changed(last + 1) {
		return 0, ErrChanged
	}
	return n, err
}

// copy is save's copy loop; last is the index of the last segment read.
func (v *View) copy(store []uint64, skip int) (n, last int, err error) {
	if v.N < 1 || v.N > len(v.Segs) {
		return 0, -1, errs.Corruptf("bad scs view", uint64(v.N), "%d segments", v.N)
	}
	if skip < 0 {
		skip = 0
	}
	// The layout's two PAC masks, kept in registers for the loop.
	m0 := v.Layout.PACMask(false)
	d := m0 ^ v.Layout.PACMask(true)
	for i := 0; i < v.N; i++ {
		s := &v.Segs[i]
		if s.Hidden {
			return n, i, s.hiddenErr()
		}
		words, lo, hi, ok := s.span()
		if !ok {
			return n, i, s.err()
		}
		if cnt := hi - lo; skip >= cnt {
			skip -= cnt
		} else {
			src := words[lo : hi-skip]
			skip = 0
			if room := len(store) - n; len(src) > room {
				src = src[len(src)-room:]
			}
			copyStrip(store[n:n+len(src)], src, m0, d)
			n += len(src)
			if n == len(store) {
				return n, i, nil
			}
		}
		if v.StopAtBoundary || i+1 == v.N {
			return n, i, nil
		}
		if s.HasInterruptedPC {
			if skip > 0 {
				skip--
			} else {
				store[n] = s.InterruptedPC
				n++
				if n == len(store) {
					return n, i, nil
				}
			}
		}
	}
	return n, v.N - 1, nil
}

// copyStrip is the copy loop, one call per segment: dst[j] is the
// stripped src[len(src)-1-j], newest first; len(dst) == len(src). Each
// slot is read once, atomically (READ_ONCE). It is kept out of line so that
// its few registers are not spilled by save's.
//
//go:noinline
func copyStrip(dst, src []uint64, m0, d uint64) {
	dst = dst[:len(src)]
	for i, j := len(src)-1, 0; i >= 0; i, j = i-1, j+1 {
		dst[j] = strip(atomic.LoadUint64(&src[i]), m0, d)
	}
}

// strip is ptrauth.Layout.Strip with the layout's masks in registers: m0 is
// the PAC field for bit 55 clear and d the XOR of both fields. Every bit of
// the field becomes a copy of bit 55.
func strip(ptr, m0, d uint64) uint64 {
	t := uint64(int64(ptr<<8) >> 63) // 64 copies of bit 55
	m := m0 ^ d&t                    // the field for this half
	return ptr ^ (ptr^t)&m
}

// Source says where a Frame came from.
type Source uint8

const (
	// FromSCS is a return address read from a shadow stack slot.
	FromSCS Source = iota
	// FromInterruptedPC is the interrupted PC kept per-CPU at a context
	// boundary (KeepInterruptedPC).
	FromInterruptedPC
)

// String returns "scs" or "interrupted pc".
func (s Source) String() string {
	switch s {
	case FromSCS:
		return "scs"
	case FromInterruptedPC:
		return "interrupted pc"
	}
	return fmt.Sprintf("Source(%d)", uint8(s))
}

// Frame is one entry of a trace with its provenance.
type Frame struct {
	PC      uint64  // the address, PAC stripped
	Raw     uint64  // the value as stored
	Context Context // the context the frame belongs to
	Source  Source
	Addr    uint64 // the slot's address (FromSCS), else 0
}

// String formats f for explanations.
func (f Frame) String() string {
	if f.Source == FromSCS {
		return fmt.Sprintf("%#x (%s scs slot %#x, raw %#x)", f.PC, f.Context, f.Addr, f.Raw)
	}
	return fmt.Sprintf("%#x (%s, %s)", f.PC, f.Context, f.Source)
}

// Frames is Save with provenance: it fills store with the same frames Save
// would return for the same View and skip (PC equal to Save's entries), and
// the same error (ErrChanged included).
func Frames(v *View, store []Frame, skip int) (int, error) {
	if v.Disabled {
		return 0, ErrNotSupported
	}
	if len(store) == 0 {
		return 0, nil
	}
	n, last, err := v.frames(store, skip)
	if v.changed(last + 1) {
		return 0, ErrChanged
	}
	return n, err
}

// frames is Frames' body; last is the index of the last segment read.
func (v *View) frames(store []Frame, skip int) (n, last int, err error) {
	if v.N < 1 || v.N > len(v.Segs) {
		return 0, -1, errs.Corruptf("bad scs view", uint64(v.N), "%d segments", v.N)
	}
	if skip < 0 {
		skip = 0
	}
	emit := func(f Frame) bool {
		if skip > 0 {
			skip--
			return true
		}
		if n == len(store) {
			return false
		}
		store[n] = f
		n++
		return n < len(store)
	}
	for i := 0; i < v.N; i++ {
		s := &v.Segs[i]
		if s.Hidden {
			return n, i, s.hiddenErr()
		}
		words, lo, hi, err := s.slots()
		if err != nil {
			return n, i, err
		}
		for w := hi - 1; w >= lo; w-- {
			if skip > 0 { // skipped slots are not read, as in Save
				skip--
				continue
			}
			raw := atomic.LoadUint64(&words[w])
			if !emit(Frame{PC: v.Layout.Strip(raw), Raw: raw, Context: s.Context, Source: FromSCS, Addr: s.Region.Base + uint64(w)*8}) {
				return n, i, nil
			}
		}
		if v.StopAtBoundary || i+1 == v.N {
			return n, i, nil
		}
		if s.HasInterruptedPC {
			if !emit(Frame{PC: s.InterruptedPC, Raw: s.InterruptedPC, Context: v.Segs[i+1].Context, Source: FromInterruptedPC}) {
				return n, i, nil
			}
		}
	}
	return n, v.N - 1, nil
}
