// Package stackid gives the running Go program's stacks 4-byte IDs in one
// pass: [Table.Save] walks the caller's frame-pointer chain once, hashes
// each return address as it stores it, and finds or stores the stack in a
// [depot.Depot]; [Table.Fetch] gives back exactly what
// [github.com/unwindkit/unwindkit/unwind/live.Callers] would have returned
// for that stack (logical frames, inlined calls expanded, wrappers hidden,
// runtime.goexit last), ready for runtime.CallersFrames. An error-wrapping
// library or a profiler can keep a Handle per stack and symbolize later.
//
// What is deduplicated is the physical chain of return addresses, at most
// the depot's MaxFrames of them from the first frame the skip keeps. A
// stack seen before costs the walk, the hash (one multiply, shift, rotate
// and two xors a frame, in the walk's shadow) and the depot's lookup: one
// probe and one compare of the stored frames. A new stack is checked once
// against live.Callers' answer for it before it is stored (see below), and
// the verdicts of its frames that do not record just themselves (inlined
// calls, hidden wrappers) are kept in the Table, so that a fetch never
// depends on live.Callers' cache still holding them.
//
// Stacks that live.Callers answers with runtime.Callers are answered the
// same way here, and as exactly: a stack through runtime.sigpanic, a cgo
// callback, a broken frame-pointer chain, a skip that ends inside more
// frames than the walk keeps, a working set of return addresses that does
// not fit live.Callers' cache, race builds (where every read would be
// instrumented) and every GOARCH without frame pointers. Their records
// hold live.Callers' logical pcs themselves (at most MaxFrames of them),
// deduplicated as such.
package stackid

import (
	"fmt"

	"github.com/unwindkit/unwindkit/depot"
	"github.com/unwindkit/unwindkit/internal/live"
)

// A Table gives stacks of the running program Handles in its own depot.
// It is safe for concurrent use.
type Table struct {
	d   *depot.Depot
	ids live.IDs
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
	t.ids = live.IDs{
		Seed: k.Seed, Mul: k.Mul, MaxFrames: cfg.MaxFrames,
		Lookup: func(rec []uint64, h uint64) (uint32, bool) {
			hd, ok := d.LookupHashed(rec, depot.Hash(h))
			return uint32(hd), ok
		},
		Store: func(rec []uint64, h uint64) (uint32, error) {
			hd, err := d.SaveHashed(rec, depot.Hash(h))
			return uint32(hd), err
		},
	}
	if t.ids.MaxFrames == 0 {
		t.ids.MaxFrames = depot.DefaultMaxFrames
	}
	return t, nil
}

// Save returns the Handle of the calling goroutine's stack, storing the
// stack if it is new. skip is live.Callers' (and runtime.Callers'): 0 is
// the frame of Save itself, 1 its caller, and so on, counting logical
// frames. The common case, skip 1, is one pass over the stack (see the
// package doc); others resolve the skip through live.Callers' cache first.
// A stack seen before costs no allocation. A skip past the end of the
// stack gives the zero Handle and an error wrapping depot.ErrEmpty.
//
//go:noinline
//go:norace
//go:nocheckptr
func (t *Table) Save(skip int) (depot.Handle, error) {
	start, _ := live.FrameAndPC()
	var buf [depot.MaxFramesLimit]uint64
	if skip == 1 && live.FastIDs {
		// One pass: the walk hashes as it stores; the depot compares the
		// one candidate. (Its body is internal/live's testSaveID.)
		if n, h, ok := live.WalkHash(start, buf[:t.ids.MaxFrames], t.ids.Seed, t.ids.Mul); ok {
			if hd, hit := t.d.LookupHashed(buf[:n], depot.Hash(h)); hit {
				return hd, nil
			}
		}
	}
	h, err := live.ResolveID(start, skip, &t.ids)
	return depot.Handle(h), err
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
