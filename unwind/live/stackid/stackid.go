// Package stackid gives the running Go program's stacks 4-byte IDs in one
// pass: [Table.Save] walks the caller's frame-pointer chain once, hashes
// each return address as it stores it, and finds or stores the stack in a
// [depot.Depot]; [Table.Fetch] gives back exactly what the Callers of
// package unwind/live would have returned for that stack (logical frames,
// inlined calls expanded, wrappers hidden, runtime.goexit last), ready for
// runtime.CallersFrames. An error-wrapping library or a profiler can keep
// a Handle per stack and symbolize later.
//
// What is deduplicated is the physical chain of return addresses, at most
// the depot's MaxFrames of them from the first frame the skip keeps. A
// stack seen again and again costs the walk and a compare of each return
// address with the stored frame, in the walk's shadow: a key of its
// first four frames (rotated and xored, not hashed) picks a guess, the
// record of a stack that began the same way, and a right guess needs no
// hash and no lookup. Otherwise (a stack seen
// seldom, or one that shares its first frames with others saved in turn,
// whose guesses the Table learns not to make) the walk hashes each return
// address as it stores it (a multiply, a shift, a rotate and two xors a
// frame) and the depot looks the stack up: one probe and one compare of
// the stored frames. Either way a stack seen before costs no allocation.
// The guesses take 32 KiB per Table. A new stack is
// checked once against unwind/live's Callers for it before it is stored,
// and the verdicts of its frames that do not record just themselves
// (inlined calls, hidden wrappers) are kept in the Table, so that a fetch
// never depends on that Callers' cache still holding them.
//
// Stacks that unwind/live's Callers answers with runtime.Callers are
// answered the same way here, and as exactly: a stack through
// runtime.sigpanic, a cgo callback, a broken frame-pointer chain, a skip
// that ends inside more frames than the walk keeps, a working set of
// return addresses that does not fit the cache, race builds (where every
// read would be instrumented) and every GOARCH without frame pointers.
// Their records hold Callers' logical pcs themselves (at most MaxFrames
// of them), deduplicated as such.
package stackid

import (
	"fmt"
	"unsafe"

	"github.com/unwindkit/unwindkit/depot"
	"github.com/unwindkit/unwindkit/internal/depotview"
	ilive "github.com/unwindkit/unwindkit/internal/live"
)

// A Table gives stacks of the running program Handles in its own depot.
// It is safe for concurrent use.
type Table struct {
	d   *depot.Depot
	ids ilive.IDs
}

// New returns an empty Table whose depot is configured by cfg; cfg.Filter
// must be nil (a filter would cut traces before they are hashed, which the
// one-pass walk cannot do). cfg.MaxFrames bounds the physical frames kept
// per stack (the default 64).
func New(cfg depot.Config) (*Table, error) {
	if cfg.Filter != nil {
		return nil, fmt.Errorf("stackid: a depot Filter is not supported")
	}
	d, err := depot.New(cfg)
	if err != nil {
		return nil, err
	}
	t := &Table{d: d}
	k := d.HashKey()
	t.ids = ilive.IDs{
		Seed: k.Seed, Mul: k.Mul, MaxFrames: cfg.MaxFrames,
		Store: func(rec []uint64, h uint64) (uint32, error) {
			hd, err := d.SaveHashed(rec, depot.Hash(h))
			return uint32(hd), err
		},
	}
	if t.ids.MaxFrames == 0 {
		t.ids.MaxFrames = depot.DefaultMaxFrames
	}
	t.ids.UseDepot(depotview.Of(d))
	return t, nil
}

// Save returns the Handle of the calling goroutine's stack, storing the
// stack if it is new. skip is live.Callers' (and runtime.Callers'): 0 is
// the frame of Save itself, 1 its caller, and so on, counting logical
// frames. The common case, skip 1, is one pass over the stack (see the
// package doc); a larger one first drops the skipped frames by
// live.Callers' cache, as live.Callers drops them.
// A stack seen before costs no allocation. A skip past the end of the
// stack gives the zero Handle and an error wrapping depot.ErrEmpty.
//
//go:noinline
//go:norace
//go:nocheckptr
func (t *Table) Save(skip int) (depot.Handle, error) {
	start, _ := ilive.FrameAndPC()
	if ilive.FastIDs && skip >= 1 {
		// One pass: the walk compares with a guess, or hashes as it
		// stores and the depot compares the one candidate.
		// (internal/live's testSaveID is this body.)
		fp, cut, ok := start, 0, true
		if skip > 1 {
			fp, cut, ok = ilive.SkipIDFrames(start, skip)
		}
		if ok {
			if h, hit := t.ids.Hit(start, fp, cut); hit {
				return depot.Handle(h), nil
			}
			var g ilive.Guess
			t.ids.WalkFirst(start, fp, cut, &g) // Hit guessed
			if g.OK() {
				var h depot.Handle
				var hit bool
				// A buffer no larger than needed: it is zeroed every call.
				switch m := t.ids.MaxFrames; {
				case m <= 16:
					h, hit = t.find16(start, &g)
				case m <= 64:
					h, hit = t.find64(start, &g)
				default:
					h, hit = t.find256(start, &g)
				}
				if hit {
					return h, nil
				}
			}
		}
	}
	h, err := ilive.ResolveID(start, skip, &t.ids)
	return depot.Handle(h), err
}

// find16, find64 and find256 finish the walk of g (from start, the frame
// record of Save) into a buffer of their size and look the record up.

//go:noinline
//go:norace
//go:nocheckptr
func (t *Table) find16(start unsafe.Pointer, g *ilive.Guess) (depot.Handle, bool) {
	var buf [16]uint64
	return t.find(start, g, buf[:t.ids.MaxFrames])
}

//go:noinline
//go:norace
//go:nocheckptr
func (t *Table) find64(start unsafe.Pointer, g *ilive.Guess) (depot.Handle, bool) {
	var buf [64]uint64
	return t.find(start, g, buf[:t.ids.MaxFrames])
}

//go:noinline
//go:norace
//go:nocheckptr
func (t *Table) find256(start unsafe.Pointer, g *ilive.Guess) (depot.Handle, bool) {
	var buf [depot.MaxFramesLimit]uint64
	return t.find(start, g, buf[:t.ids.MaxFrames])
}

// find finishes the walk of g into rec and looks the record up; a record
// found becomes the guess for the stacks that start as it does.
//
//go:norace
//go:nocheckptr
func (t *Table) find(start unsafe.Pointer, g *ilive.Guess, rec []uint64) (depot.Handle, bool) {
	n, h, ok := t.ids.Resume(start, g, rec)
	if !ok {
		return 0, false
	}
	hd, hit := t.d.LookupHashed(rec[:n], depot.Hash(h))
	if hit {
		t.ids.SetHint(g, n, uint32(hd))
	}
	return hd, hit
}

// Fetch stores in pc the program counters of the stack saved under h, as
// live.Callers(skip, pc) stored them at Save's place (the caller's own pc
// is that of its call to Save), and returns how many it stored: all of
// them if pc has room. That is the whole stack when it had at most the
// depot's MaxFrames physical frames below the skip, else the logical
// frames of the first MaxFrames. A zero, forged or stale handle is an
// error wrapping depot.ErrBadHandle.
func (t *Table) Fetch(h depot.Handle, pc []uintptr) (int, error) {
	var buf [depot.MaxFramesLimit]uint64
	rec, err := t.d.Fetch(h, buf[:0])
	if err != nil {
		return 0, err
	}
	return t.ids.Expand(rec, pc), nil
}

// Stats returns the counters of the Table and its depot.
func (t *Table) Stats() Stats {
	return Stats{Depot: t.d.Stats(), Verdicts: t.ids.Pinned()}
}

// Stats is a snapshot of a Table's counters.
type Stats struct {
	// Depot is the depot's.
	Depot depot.Stats
	// Verdicts is the number of return addresses whose logical frames the
	// Table keeps (those with inlined calls, and hidden wrappers).
	Verdicts int
}
