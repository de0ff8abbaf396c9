package gcs

import (
	"encoding/binary"
	"fmt"

	"github.com/unwindkit/unwindkit/internal/errs"
)

// MaxThreadSize bounds a modelled GCS: 2 GiB, the most Linux allocates.
const MaxThreadSize = 2 << 30

// Thread is the model of one user thread's GCS with GCS enabled: its
// region [Base, Base+Size), GCSPR_EL0, and the operations that change
// them. It is not safe for concurrent use; View copies nothing, so a View
// is valid until the next operation.
type Thread struct {
	mem   []byte
	base  uint64
	gcspr uint64
}

// NewThread returns a thread whose GCS is the size bytes at base, set up
// as Linux sets up a new GCS: the top word is the marker 0 and GCSPR_EL0
// points at it. base must be page aligned and size a multiple of 8, at
// least 16 and at most MaxThreadSize.
func NewThread(base, size uint64) (*Thread, error) {
	if base%4096 != 0 || size%8 != 0 || size < 16 || size > MaxThreadSize || base+size < base {
		return nil, fmt.Errorf("gcs: bad region [%#x, +%#x)", base, size)
	}
	return &Thread{mem: make([]byte, size), base: base, gcspr: base + size - 8}, nil
}

// GCSPR returns GCSPR_EL0.
func (t *Thread) GCSPR() uint64 { return t.gcspr }

// Base returns the lowest address of the thread's GCS.
func (t *Thread) Base() uint64 { return t.base }

// View returns a View of the thread's GCS now.
func (t *Thread) View() View { return View{Data: t.mem, Base: t.base, GCSPR: t.gcspr} }

func (t *Thread) load(addr uint64) uint64 { return binary.LittleEndian.Uint64(t.mem[addr-t.base:]) }

func (t *Thread) store(addr, v uint64) { binary.LittleEndian.PutUint64(t.mem[addr-t.base:], v) }

// push is a GCS push of v (bl, or the kernel's put_user_gcs below
// GCSPR_EL0): an error, changing nothing, when it would leave the region.
func (t *Thread) push(v uint64) error {
	if t.gcspr-t.base < 8 {
		return errs.Corruptf(RuleGCSOverflow, t.gcspr-8, "push of %#x below the GCS base %#x (the guard page: SIGSEGV)", v, t.base)
	}
	t.gcspr -= 8
	t.store(t.gcspr, v)
	return nil
}

// Call is bl or blr at pc: it pushes the return address pc+4. With a full
// GCS it returns the overflow error (Linux: SIGSEGV) and changes nothing.
func (t *Thread) Call(pc uint64) error { return t.push(pc + 4) }

// Return is ret with x30 = lr: the newest entry must be lr, and is
// popped. A mismatch is the GCS exception (Linux: SIGSEGV, SEGV_CPERR),
// the marker an underflow; both change nothing.
func (t *Thread) Return(lr uint64) error {
	top := t.load(t.gcspr)
	if Classify(top, t.gcspr) != KindReturn {
		return errs.Corruptf(RuleGCSUnderflow, t.gcspr, "ret to %#x finds %s entry %#x", lr, Classify(top, t.gcspr), top)
	}
	if top != lr {
		return errs.Corruptf(RuleGCSReturnMismatch, t.gcspr, "ret to %#x, GCS entry %#x (GCS exception: SIGSEGV)", lr, top)
	}
	t.gcspr += 8
	return nil
}

// Signal is signal delivery with the handler's return address tramp (the
// sigreturn trampoline), as gcs_signal_entry and preserve_gcs_context do
// it: the signal cap token at GCSPR_EL0-8, tramp at GCSPR_EL0-16,
// GCSPR_EL0 -= 16. It returns what the signal frame's gcs_context holds,
// the cap's address, for Sigreturn. Without room for both entries it
// changes nothing (Linux cannot deliver the signal: SIGSEGV).
func (t *Thread) Signal(tramp uint64) (ctxGCSPR uint64, err error) {
	if t.gcspr-t.base < 16 {
		return 0, errs.Corruptf(RuleGCSOverflow, t.gcspr-16, "signal delivery needs two entries below GCSPR_EL0 %#x", t.gcspr)
	}
	capAt := t.gcspr - 8
	t.store(capAt, SignalCap(capAt))
	t.store(t.gcspr-16, tramp)
	t.gcspr -= 16
	return capAt, nil
}

// Sigreturn is rt_sigreturn with the gcs_context value ctxGCSPR (after the
// handler's ret popped the trampoline entry): GCSPR_EL0 = ctxGCSPR, the
// entry there must be its signal cap token, which is cleared to 0 and
// popped. A bad cap changes nothing (Linux: SIGSEGV).
func (t *Thread) Sigreturn(ctxGCSPR uint64) error {
	if ctxGCSPR%8 != 0 || ctxGCSPR < t.base || ctxGCSPR-t.base >= uint64(len(t.mem)) {
		return errs.Corruptf(RuleGCSBadSignalCap, ctxGCSPR, "gcs_context.gcspr outside the GCS")
	}
	if v := t.load(ctxGCSPR); v != SignalCap(ctxGCSPR) {
		return errs.Corruptf(RuleGCSBadSignalCap, ctxGCSPR, "entry %#x, want signal cap %#x", v, SignalCap(ctxGCSPR))
	}
	t.store(ctxGCSPR, 0)
	t.gcspr = ctxGCSPR + 8
	return nil
}

// PopTo is glibc's longjmp to a setjmp that saved GCSPR_EL0 = to: it pops
// entries (GCSPOPM) until GCSPR_EL0 is to. to must be at or above
// GCSPR_EL0 and below the marker, with no token between; otherwise it
// changes nothing.
func (t *Thread) PopTo(to uint64) error {
	if to%8 != 0 || to < t.gcspr || to-t.base >= uint64(len(t.mem)) {
		return errs.Corruptf(RuleGCSUnderflow, to, "longjmp to GCSPR_EL0 %#x from %#x", to, t.gcspr)
	}
	for a := t.gcspr; a < to; a += 8 {
		if k := Classify(t.load(a), a); k != KindReturn {
			return errs.Corruptf(RuleGCSUnderflow, a, "longjmp pops a %s entry", k)
		}
	}
	t.gcspr = to
	return nil
}
