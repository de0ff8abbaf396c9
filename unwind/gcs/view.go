package gcs

import (
	"fmt"
	"iter"

	"github.com/unwindkit/unwindkit/fp"
	"github.com/unwindkit/unwindkit/internal/errs"
	"github.com/unwindkit/unwindkit/internal/gcsview"
)

// Token values (arch/arm64/include/asm/sysreg.h, the Arm ARM's GCS cap
// entries).
const (
	// CapAddrMask selects bits 63:12 of a cap token: the address it is
	// stored at (GCS_CAP_ADDR_MASK).
	CapAddrMask uint64 = ^uint64(0xfff)
	// CapValidToken is the low 12 bits of a valid cap token
	// (GCS_CAP_VALID_TOKEN).
	CapValidToken = 0x1
	// CapInProgressToken is the low 12 bits of the token GCSSS1 leaves
	// while a switch is in progress (GCS_CAP_IN_PROGRESS_TOKEN).
	CapInProgressToken = 0x5
	// EntrySize is the size of one GCS entry, 8 bytes.
	EntrySize = 8
)

// Cap returns the valid cap token for a GCS whose token is stored at addr
// (GCS_CAP).
func Cap(addr uint64) uint64 { return addr&CapAddrMask | CapValidToken }

// SignalCap returns the token Linux pushes at addr on signal delivery
// (GCS_SIGNAL_CAP: the address with bits 11:0 clear).
func SignalCap(addr uint64) uint64 { return addr & CapAddrMask }

// Errors: the module's shared sentinels.
var (
	// ErrNotSupported: the View has no GCS (disabled or not captured);
	// errors.Is(err, unix.ENOSYS) is true.
	ErrNotSupported = errs.ErrNotSupported
	// ErrCorrupt is wrapped by every *fault.CorruptError.
	ErrCorrupt = errs.ErrCorrupt
)

// View describes one thread's GCS as Save and Frames read it: Data holds
// the memory from Base on (little-endian, Data[0] the byte at Base, read
// and never written), GCSPR is GCSPR_EL0. The entries are [GCSPR, top
// marker); Data must reach the marker. Build one with NewSnapshotView or
// Thread.View, or fill the fields. The front door takes the same three
// values: unwind.NewGCSSource(v.Data, v.Base, v.GCSPR, opts).
type View struct {
	// Disabled says GCS is off for the thread: Save returns
	// ErrNotSupported.
	Disabled bool
	// Data is the GCS memory from Base on.
	Data []byte
	// Base is the address of Data[0], 8-byte aligned.
	Base uint64
	// GCSPR is GCSPR_EL0: the newest entry.
	GCSPR uint64
}

// NewSnapshotView returns a View of a GCS captured from a real thread:
// data from base on (as read from a dump), gcspr its GCSPR_EL0. A nil
// data gives a disabled View (no GCS).
func NewSnapshotView(data []byte, base, gcspr uint64) View {
	return View{Disabled: data == nil, Data: data, Base: base, GCSPR: gcspr}
}

// Kind classifies one entry of a GCS.
type Kind uint8

// Entry kinds.
const (
	// KindReturn is a return address pushed by bl or blr (or by the
	// kernel: the sigreturn trampoline).
	KindReturn Kind = iota
	// KindTop is the top-of-stack marker 0.
	KindTop
	// KindSignalCap is the signal cap token of a signal frame.
	KindSignalCap
	// KindCap is a valid cap token: the top of a stack not in use.
	KindCap
	// KindInProgress is the in-progress token of a stack switch.
	KindInProgress
	// KindBad is none of the above (not 4-byte aligned).
	KindBad
)

// The internal copy's constants are these (a compile error otherwise).
var (
	_ = [1]struct{}{}[CapAddrMask^gcsview.CapAddrMask]
	_ = [1]struct{}{}[CapValidToken^gcsview.CapValidToken|CapInProgressToken^gcsview.CapInProgressToken|EntrySize^gcsview.EntrySize]
	_ = [1]struct{}{}[uint8(KindReturn)^uint8(gcsview.KindReturn)|uint8(KindTop)^uint8(gcsview.KindTop)|uint8(KindSignalCap)^uint8(gcsview.KindSignalCap)]
	_ = [1]struct{}{}[uint8(KindCap)^uint8(gcsview.KindCap)|uint8(KindInProgress)^uint8(gcsview.KindInProgress)|uint8(KindBad)^uint8(gcsview.KindBad)]
)

var kindNames = [...]string{"return", "top", "signal-cap", "cap", "in-progress", "bad"}

// String names the kind, e.g. "signal-cap".
func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return fmt.Sprintf("Kind(%d)", uint8(k))
}

// Classify returns the kind of the value v stored at addr.
func Classify(v, addr uint64) Kind { return Kind(gcsview.Classify(v, addr)) }

// Save copies the return addresses of v's GCS into store, innermost
// first, after removing exactly skip of them (stack_trace_save's skip:
// tokens are not frames), and returns how many it stored: at most
// len(store); a full store is not an error. It reads the entries from
// GCSPR_EL0 up, each once, passes over signal cap tokens (the entry
// before one, the sigreturn trampoline, is a return address like the
// others) and stops at the top marker or at a valid or in-progress cap.
//
// A disabled View gives ErrNotSupported. A bad pointer, a bad entry or
// memory that ends before the marker gives the entries stored so far and
// a *fault.CorruptError naming the rule and the address.
func Save(v *View, store []uint64, skip int) (int, error) {
	return gcsview.Save((*gcsview.View)(v), store, skip)
}

// Frame is one return address of a GCS: the module's one frame type,
// [fp.Frame], with Origin fp.OriginGCS, PC the return address (GCS
// entries carry no PAC) and Addr its slot. [Entries] adds each entry's
// signal depth.
type Frame = fp.Frame

// Entry is one return address of a GCS with where it sits among the
// thread's signal frames.
type Entry struct {
	// Frame is the entry as Frames yields it.
	Frame Frame
	// Signal is the number of signal cap tokens between GCSPR_EL0 and
	// the slot: 0 for the innermost context, 1 for the context the
	// innermost signal interrupted, and so on.
	Signal int
	// SigReturn says the entry is the return address of a signal
	// handler, the sigreturn trampoline (the next entry is a signal cap).
	SigReturn bool
}

// String formats e for explanations.
func (e Entry) String() string {
	s := fmt.Sprintf("%#x (gcs slot %#x", e.Frame.PC, e.Frame.Addr)
	if e.Signal > 0 {
		s += fmt.Sprintf(", signal %d", e.Signal)
	}
	if e.SigReturn {
		s += ", sigreturn"
	}
	return s + ")"
}

// Frames returns an iterator over the frames of v with provenance,
// innermost first: the entries Save copies (PC equal to Save's for skip
// 0), each with a nil error. A copy that fails ends with one last pair
// (Frame{}, err), the error Save returns.
func Frames(v *View) iter.Seq2[Frame, error] {
	return func(yield func(Frame, error) bool) {
		for e, err := range gcsview.Entries((*gcsview.View)(v)) {
			if err != nil {
				yield(Frame{}, err)
				return
			}
			if !yield(Frame{PC: e.PC, Raw: e.PC, Addr: e.Addr, Origin: fp.OriginGCS}, nil) {
				return
			}
		}
	}
}

// Entries is Frames with each entry's signal depth (Entry).
func Entries(v *View) iter.Seq2[Entry, error] {
	return func(yield func(Entry, error) bool) {
		for e, err := range gcsview.Entries((*gcsview.View)(v)) {
			f := Frame{PC: e.PC, Raw: e.PC, Addr: e.Addr, Origin: fp.OriginGCS}
			if err != nil {
				f = Frame{}
			}
			if !yield(Entry{Frame: f, Signal: e.Signal, SigReturn: e.SigReturn}, err) || err != nil {
				return
			}
		}
	}
}
