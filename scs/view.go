package scs

import (
	"encoding/binary"
	"fmt"
	"sync/atomic"
	"unsafe"

	"github.com/unwindkit/unwindkit/internal/errs"
	"github.com/unwindkit/unwindkit/internal/tracehash"
	"github.com/unwindkit/unwindkit/ptrauth"
)

// Where says where the unwinder found a context's top (its x18). Its
// String names the location, e.g. "thread_info.scs_sp".
type Where uint8

//go:generate go tool stringer -type=Where -linecomment -output=where_string.go

const (
	// InRegister means x18 itself: the innermost context.
	InRegister Where = iota // x18
	// InThreadInfo means the current task's thread_info.scs_sp
	// (ThreadInfo IRQ entry).
	InThreadInfo // thread_info.scs_sp
	// OnInterruptedStack means pushed with stp x18, xzr on the
	// interrupted stack (OnStack IRQ entry); TopAddr is the slot.
	OnInterruptedStack // interrupted stack
	// InSDEIRegs means regs[18] of the SDEI handler's saved interrupted
	// registers.
	InSDEIRegs // SDEI saved regs[18]
	// InPerCPU means irq_shadow_call_stack_saved_ptr or
	// sdei_shadow_call_stack_{normal,critical}_saved_ptr (PerCPU policy).
	InPerCPU // per-cpu saved ptr
	// InSnapshot means given by the caller, e.g. from a register dump.
	InSnapshot // snapshot
)

// Segment is one context's part of a View: the shadow stack entries
// [Base, Top) of that context, newest at Top-8.
type Segment struct {
	// Context is the context whose entries these are.
	Context Context
	// Data is the shadow stack's memory when the caller owns it (bytes
	// read from a dump, a file, a debugger): plain read-only data,
	// little-endian, Data[0] being the byte at Base. Save reads it and
	// never writes it, and checks every read against len(Data). In a View
	// taken from a Model it is nil: the model's memory is in words.
	Data []byte
	// Base is the address of the context's first slot.
	Base uint64
	// Size is the shadow stack's size in bytes from Base, end magic
	// included when Magic is set; 0 means "all of the memory" (Data).
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

	// words is the model's own memory for the stack, word 0 at Base,
	// read atomically (it has a writer); nil for caller memory (Data).
	words []uint64
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
// program: data is the stack's memory from its base address base on
// (little-endian, data[0] at base, as read from the dump), x18 the captured
// register, l the program's VA layout. There is no end magic (user-space
// shadow stacks are guarded by unmapped pages instead) and no nested
// context; set Segs[0].Size and Segs[0].Magic for a kernel shadow stack.
// The View reads data and never writes it.
func NewSnapshotView(data []byte, base, x18 uint64, l ptrauth.Layout) View {
	v := View{Layout: l, N: 1}
	v.Segs[0] = Segment{Context: CtxTask, Data: data, Base: base, Top: x18, TopFrom: InSnapshot}
	return v
}

// Save copies the return addresses of v's shadow stacks into store,
// innermost first, and returns how many it stored: at most len(store),
// after removing exactly skip entries from the innermost end (an
// interrupted PC counts as an entry). A full store is not an error.
//
// It stores the entries of each segment from the newest (Top-8) down to
// Base, innermost context first, inserting each boundary's interrupted PC when
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
// Save is small enough to inline. It checks each segment before it reads
// a slot of it and copies it with no function call.
func Save(v *View, store []uint64, skip int) (int, error) {
	if v.Disabled {
		return 0, ErrNotSupported
	}
	return v.save(store, skip)
}

// SaveHashed is Save that also returns h, the running hash of store[:n]
// under the key (seed, mul) of package depot's HashKey (h = seed, then
// depot.HashKey.Add of each stored frame, innermost first), ready for
// depot.Depot.SaveHashed. The copy's loads do not depend on each other,
// so it is bound by instructions, not by waiting on memory: the hash has
// nothing to hide under, and SaveHashed folds the entries in one sweep of
// the store right after the copy, while they are in the first-level
// cache, rather than interleaving the same multiplies with the copy (the
// same instruction count; a second read of the shadow stack never
// happens).
func SaveHashed(v *View, store []uint64, skip int, seed, mul uint64) (n int, h uint64, err error) {
	n, err = Save(v, store, skip)
	return n, tracehash.Sum(store[:n], seed, mul), err
}

// segRule names the first rule check finds a segment breaking.
type segRule uint8

// The segment rules, in the order checkSegs tests them.
const (
	segOK             segRule = iota
	segNoMemory               // neither Data nor the model's words
	segMisalignedBase         // Base not 8-byte aligned
	segOutside                // Size not a multiple of 8, or past the memory's end
	segTooSmall               // Magic set on a stack smaller than a word
	segMagic                  // the end magic overwritten
	segMisalignedTop          // Top not 8-byte aligned
	segTopBelow               // Top below Base
	segTopOutside             // Top past the stack's last slot
	segHidden                 // Hidden set (not corruption)
)

// checkSegs is the one home of the rules a segment must satisfy before a
// copy reads it (Save, Frames and check call it; err words what it
// found). It checks segs in order, in one pass, and stops at the first
// segment that breaks a rule: good is its index (len(segs) if none does)
// and bad the rule. cnt[i] is the number of entries of each good segment
// i, words [0, cnt[i]) from Base. The only memory it reads is each end
// magic, once. A hidden top is not a rule of the segment but stops the
// copy there all the same, so it counts as bad (segHidden) here.
func checkSegs(segs []Segment, cnt []int) (good int, bad segRule) {
	cnt = cnt[:len(segs)]
	for i := range segs {
		s := &segs[i]
		if s.Hidden {
			return i, segHidden
		}
		var size uint64 // bytes of memory from Base
		switch {
		case s.words != nil:
			size = uint64(len(s.words)) * 8
		case s.Data != nil:
			size = uint64(len(s.Data)) &^ 7
		default:
			return i, segNoMemory
		}
		if s.Base%8 != 0 {
			return i, segMisalignedBase
		}
		lim := size // bytes from Base to the end of the stack's slots
		if s.Size != 0 {
			if s.Size%8 != 0 || s.Size > size {
				return i, segOutside
			}
			lim = s.Size
		}
		if s.Magic {
			if lim < 8 {
				return i, segTooSmall
			}
			lim -= 8
			if s.word(int(lim/8)) != EndMagic {
				return i, segMagic
			}
		}
		if s.Top%8 != 0 {
			return i, segMisalignedTop
		}
		if s.Top < s.Base {
			return i, segTopBelow
		}
		if s.Top-s.Base > lim {
			return i, segTopOutside
		}
		cnt[i] = int((s.Top - s.Base) / 8)
	}
	return len(segs), segOK
}

// check is checkSegs for one segment, hidden or not (it reads a copy of
// s with Hidden clear): its number of entries, or the first rule it
// breaks.
func (s *Segment) check() (cnt int, bad segRule) {
	var c [1]int
	t := *s
	t.Hidden = false
	_, bad = checkSegs(unsafe.Slice(&t, 1), c[:])
	return c[0], bad
}

// word returns slot i of the segment's memory (i checked by the caller):
// atomically from the model's words, little-endian from Data.
func (s *Segment) word(i int) uint64 {
	if s.words != nil {
		return atomic.LoadUint64(&s.words[i])
	}
	return binary.LittleEndian.Uint64(s.Data[i*8:])
}

// err returns the *CorruptError for the rule check finds segment s
// breaking, naming the rule and the address (nil if it breaks none).
func (s *Segment) err() error {
	_, bad := s.check()
	switch bad {
	case segNoMemory:
		return errs.Corruptf(RuleSCSRegionMissing, s.Top, "%s context", s.Context)
	case segMisalignedBase:
		return errs.Corruptf(RuleMisalignedSCSBase, s.Base, "%s context", s.Context)
	case segOutside:
		return errs.Corruptf(RuleSCSOutsideRegion, s.Base, "%s context, %d bytes, memory of %d bytes", s.Context, s.Size, s.memSize())
	case segTooSmall:
		return errs.Corruptf(RuleSCSTooSmallForEndMagic, s.Base, "%s context", s.Context)
	case segMagic:
		at := s.limit()
		return errs.Corruptf(RuleSCSEndMagicOverwritten, at, "%s context: %#x", s.Context, s.word(int((at-s.Base)/8)))
	case segMisalignedTop:
		return errs.Corruptf(RuleMisalignedSCSPointer, s.Top, "%s context (from %s)", s.Context, s.TopFrom)
	case segTopBelow:
		return errs.Corruptf(RuleSCSPointerBelowBase, s.Top, "%s context (from %s), base %#x", s.Context, s.TopFrom, s.Base)
	case segTopOutside:
		return errs.Corruptf(RuleSCSPointerOutsideRegion, s.Top, "%s context (from %s), stack [%#x, %#x)", s.Context, s.TopFrom, s.Base, s.limit())
	}
	return nil
}

// memSize is the size of the segment's memory in bytes.
func (s *Segment) memSize() uint64 {
	if s.words != nil {
		return uint64(len(s.words)) * 8
	}
	return uint64(len(s.Data)) &^ 7
}

// limit is the address just past the segment's last slot (the end
// magic's address with Magic), for messages.
func (s *Segment) limit() uint64 {
	end := s.Base + s.memSize()
	if s.Size != 0 {
		end = s.Base + s.Size
	}
	if s.Magic {
		end -= 8
	}
	return end
}

func (s *Segment) hiddenErr() error {
	if s.TopAddr != 0 {
		return fmt.Errorf("%w: %s context's x18 is at %#x (%s)", ErrInterruptedTopHidden, s.Context, s.TopAddr, s.TopFrom)
	}
	return fmt.Errorf("%w: %s context's x18 is in %s", ErrInterruptedTopHidden, s.Context, s.TopFrom)
}

// save is Save's body: one pass over the segments the copy may reach.
// For each it checks the rules of checkSegs for a segment over a model's
// memory (the common, valid case in a few well-predicted branches), takes
// its entries after skip and before the store's end, copies them,
// stripped, re-checks the segment's generation and stores the boundary's
// interrupted PC. The copy of a segment is inline, with no call: steps of
// eight slots, each stored with one operation per slot when all eight are
// kernel addresses (bit 55 set: setting the upper half's PAC field, as
// copyStrip does), else stripped by stripHalf (a select,
// [ptrauth.Masks.Strip] with the fields of both halves in registers), then
// four, two (with the same one-operation case) and one slots. Only the
// upper half's field is kept in a register across the loop; the lower
// half's is loaded from the Layout where a strip needs it, and the
// unwritten part of the store and the skip count live in the frame
// (saveRest takes their addresses), which leaves a step of eight the
// registers for its slots. Each slot is read once, atomically. A
// segment's generation is re-checked right after its copy: by the
// protocol of life, a slot read before the generation is found unchanged
// held its value of the View's instant, so every segment copied is the
// View's instant and the segments need no common re-check at the end.
// At the first segment it does not copy itself (caller memory, a hidden
// top, a broken rule) it hands over to saveFrom, which goes on from that
// segment with the entries stored so far and returns what saveChecked
// would have; a View with a bad N, or an empty store, goes to saveChecked
// before any slot is read.
func (v *View) save(store []uint64, skip int) (int, error) {
	nseg := v.N
	if uint(nseg-1) >= uint(len(v.Segs)) || len(store) == 0 {
		return v.saveChecked(store, skip)
	}
	if v.StopAtBoundary {
		nseg = 1
	}
	skip = max(skip, 0)
	m1 := v.Layout.InsnMasksPtr().Field(true)
	out := store // the part of store not written yet
	i := 0
	for ; i < nseg; i++ {
		s := &v.Segs[i]
		w := s.words
		mem := uint64(len(w)) * 8
		lim := mem
		if s.Size != 0 {
			lim = s.Size
		}
		// The rules of checkSegs for a segment over model memory,
		// segNoMemory to segTopBelow, in one test (Data segments, hidden
		// tops and broken rules are left to saveFrom, whose checkSegs
		// names the rule).
		if w == nil || s.Hidden || (s.Base|s.Size|s.Top)%8 != 0 || lim > mem || s.Top < s.Base {
			break
		}
		if s.Magic {
			j := lim/8 - 1
			if j >= uint64(len(w)) || atomic.LoadUint64(&w[j]) != EndMagic {
				break
			}
			lim -= 8
		}
		d := s.Top - s.Base
		if d > lim {
			break
		}
		src := w[:d/8]
		if skip != 0 {
			k := min(skip, len(src))
			src, skip = src[:len(src)-k], skip-k
		}
		if len(src) > len(out) {
			src = src[len(src)-len(out):]
		}
		dst := out[:len(src)]
		out = out[len(src):]
		for len(src) >= 8 {
			k := len(dst)
			q, o := (*[8]uint64)(src), (*[8]uint64)(dst[k-8:])
			a, b, c, e := atomic.LoadUint64(&q[0]), atomic.LoadUint64(&q[1]), atomic.LoadUint64(&q[2]), atomic.LoadUint64(&q[3])
			f, g, h, x := atomic.LoadUint64(&q[4]), atomic.LoadUint64(&q[5]), atomic.LoadUint64(&q[6]), atomic.LoadUint64(&q[7])
			if a&b&c&e&f&g&h&x&(1<<55) != 0 {
				o[7], o[6], o[5], o[4] = a|m1, b|m1, c|m1, e|m1
				o[3], o[2], o[1], o[0] = f|m1, g|m1, h|m1, x|m1
			} else {
				m0 := v.Layout.InsnMasksPtr().Field(false)
				o[7], o[6], o[5], o[4] = stripHalf(a, m0, m1), stripHalf(b, m0, m1), stripHalf(c, m0, m1), stripHalf(e, m0, m1)
				o[3], o[2], o[1], o[0] = stripHalf(f, m0, m1), stripHalf(g, m0, m1), stripHalf(h, m0, m1), stripHalf(x, m0, m1)
			}
			src, dst = src[8:], dst[:k-8]
		}
		if len(src) >= 4 {
			k := len(dst)
			q, o := (*[4]uint64)(src), (*[4]uint64)(dst[k-4:])
			m0 := v.Layout.InsnMasksPtr().Field(false)
			a, b, c, e := atomic.LoadUint64(&q[0]), atomic.LoadUint64(&q[1]), atomic.LoadUint64(&q[2]), atomic.LoadUint64(&q[3])
			o[3], o[2], o[1], o[0] = stripHalf(a, m0, m1), stripHalf(b, m0, m1), stripHalf(c, m0, m1), stripHalf(e, m0, m1)
			src, dst = src[4:], dst[:k-4]
		}
		if len(src) >= 2 {
			k := len(dst)
			q, o := (*[2]uint64)(src), (*[2]uint64)(dst[k-2:])
			a, b := atomic.LoadUint64(&q[0]), atomic.LoadUint64(&q[1])
			if a&b&(1<<55) != 0 {
				o[1], o[0] = a|m1, b|m1
			} else {
				m0 := v.Layout.InsnMasksPtr().Field(false)
				o[1], o[0] = stripHalf(a, m0, m1), stripHalf(b, m0, m1)
			}
			src, dst = src[2:], dst[:k-2]
		}
		if len(src) == 1 && len(dst) == 1 {
			m0 := v.Layout.InsnMasksPtr().Field(false)
			dst[0] = stripHalf(atomic.LoadUint64(&src[0]), m0, m1)
		}
		if s.changed() {
			return 0, ErrChanged
		}
		if len(out) == 0 {
			return len(store), nil
		}
		if s.HasInterruptedPC && i+1 < nseg {
			if skip > 0 {
				skip--
			} else {
				o := out
				o[0] = s.InterruptedPC
				if len(o) == 1 {
					return len(store), nil
				}
				out = o[1:]
			}
		}
	}
	if i < nseg {
		return v.saveRest(&store, &out, &skip, i)
	}
	return len(store) - len(out), nil
}

// saveRest is save's hand-over to saveFrom, with *out the part of *store
// not written and *skip the entries still to skip. It takes them by
// address so that save keeps them in its frame, read where it uses them,
// rather than in registers its copy then has to save and restore at
// every branch.
//
//go:noinline
func (v *View) saveRest(store, out *[]uint64, skip *int, i int) (int, error) {
	return v.saveFrom(*store, len(*store)-len(*out), *skip, i)
}

// saveChecked is the general copy, for a View with a bad N or an empty
// store; saveFrom is its body, which save also hands over to at the
// first segment that is not a valid one over a model's memory. It makes
// one pass over the rules of every segment the copy may reach from there
// (checkSegs, before any slot of them is read), then copies them, with
// the PAC masks in registers: a segment of fewer than four slots here, a
// longer one through copyStrip (or copyStripBytes for caller memory), and
// ends with one re-check of a running model's generations for all the
// segments read, save's included. Everything that is not the copy of
// valid segments is out of line (fail).
func (v *View) saveChecked(store []uint64, skip int) (int, error) {
	if len(store) == 0 {
		return 0, nil
	}
	nseg := v.N
	if uint(nseg-1) >= uint(len(v.Segs)) {
		return v.fail(0, -1)
	}
	if v.StopAtBoundary {
		nseg = 1
	}
	return v.saveFrom(store, 0, max(skip, 0), 0)
}

// saveFrom is saveChecked from segment first on, with n entries already
// in store and skip >= 0 entries still to skip: save hands its copy over
// here at the first segment it does not copy itself, and no slot is read
// twice.
func (v *View) saveFrom(store []uint64, n, skip, first int) (int, error) {
	nseg := v.N
	if v.StopAtBoundary {
		nseg = 1
	}
	var cnt [NumContexts]int
	good, _ := checkSegs(v.Segs[first:nseg], cnt[first:nseg])
	good += first
	m := v.Layout.InsnMasksPtr()
	i := first
	for ; i < good; i++ {
		s := &v.Segs[i]
		if hi := cnt[i]; skip >= hi { // the entries are slots [0, hi) from Base
			skip -= hi
		} else {
			hi -= skip
			skip = 0
			lo := max(hi-(len(store)-n), 0)
			if s.words != nil && hi-lo < 4 {
				// A short segment (fewer slots than one step of
				// copyStrip) is copied here, without the call.
				src, dst := s.words[lo:hi], store[n:n+hi-lo]
				for j := range dst {
					dst[j] = m.Strip(atomic.LoadUint64(&src[len(src)-1-j]))
				}
			} else if s.words != nil {
				copyStrip(store[n:], s.words[lo:hi], m)
			} else {
				copyStripBytes(store[n:], s.Data[lo*8:hi*8], m)
			}
			n += hi - lo
			if n == len(store) {
				break
			}
		}
		if i+1 < nseg && s.HasInterruptedPC {
			if skip > 0 {
				skip--
			} else {
				store[n] = s.InterruptedPC
				n++
				if n == len(store) {
					break
				}
			}
		}
	}
	if i == good && good < nseg { // reached a segment that breaks a rule
		return v.fail(n, i)
	}
	if v.changed(min(i+1, nseg)) {
		return 0, ErrChanged
	}
	return n, nil
}

// fail returns what a copy that stopped at segment i (-1: the View
// itself) after n entries returns: ErrChanged if the model rewrote the
// stacks read so far, else the entries and the error: a hidden top, or
// what check finds wrong with the segment.
//
//go:noinline
func (v *View) fail(n, i int) (int, error) {
	if i < 0 {
		return 0, errs.Corruptf(RuleBadSCSView, uint64(v.N), "%d segments", v.N)
	}
	if v.changed(i + 1) {
		return 0, ErrChanged
	}
	s := &v.Segs[i]
	if s.Hidden {
		return n, s.hiddenErr()
	}
	return n, s.err()
}
