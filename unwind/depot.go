package unwind

import (
	"fmt"

	"github.com/unwindkit/unwindkit/depot"
)

// SaveToDepot is the kernel's kasan_save_stack in one call: it unwinds src
// into buf (removing skip frames, as [Save]) and stores what it got in d
// (stack_depot_save), returning the trace's handle. A trace already in d
// costs no allocation.
//
// A walk that fails part-way stores the frames it had and returns their
// handle with the unwinder's error; a walk that found no frame stores
// nothing and returns the zero Handle. A full buf is not an error: the
// trace is cut at len(buf), or at d's MaxFrames if that is less: the
// unwinder stops there, as the kernel's stack_trace_save fills at most its
// entries (a walk that would fail only beyond the frames d keeps is not
// an error). If storing fails, the handle is zero and the error wraps the
// depot's.
//
// It reads the stack once. A trace d holds is then found as
// [depot.Depot.Save] finds it, by a sample of its frames, and compared
// once with the record; d cuts it with its Filter first, if it has one
// (that sweep calls the filter on each frame). Only a trace d does not
// find that way is hashed. So a hit costs the unwind, the sample and the
// one compare (and the hit count, with depot.Config.CountHits), and d
// does not copy the trace.
// [SaveForDepot] is the other way, for a caller that wants the hash: it
// hashes (and cuts) in the sweep after the unwind, and [StoreHashed] gives
// both to d.
func SaveToDepot(d *depot.Depot, src *Source, buf []uint64, skip int) (depot.Handle, error) {
	// Frames past MaxFrames the depot would drop: the unwinder does not
	// make them.
	if m := d.MaxFrames(); len(buf) > m {
		buf = buf[:m]
	}
	n, err := Save(src, buf, skip)
	if n == 0 {
		return 0, err
	}
	hd, derr := d.Save(buf[:n]) // StoreTrace, written out: one call less
	if derr != nil {
		return 0, storeError(n, derr)
	}
	return hd, err
}

// SaveForDepot is [SaveHashed] under d's HashKey into at most d's
// MaxFrames of buf that also cuts the trace as d's Filter would (after the
// first frame the filter is true for, the kernel's filter_irq_stacks), in
// the sweep that hashes it: n is the cut trace's length and h its hash,
// ready for [StoreHashed]. Without a Filter it is SaveHashed.
func SaveForDepot(d *depot.Depot, src *Source, buf []uint64, skip int) (n int, h depot.Hash, err error) {
	// Frames past MaxFrames the depot would drop, and hash the rest
	// again: the unwinder does not make them.
	if m := d.MaxFrames(); len(buf) > m {
		buf = buf[:m]
	}
	k := d.HashKey()
	if filter := d.Filter(); filter != nil {
		return saveFiltered(src, buf, skip, k, filter)
	}
	return SaveHashed(src, buf, skip, k)
}

// saveFiltered is SaveForDepot with d's filter: the unwind, then one
// sweep of buf that hashes and cuts.
func saveFiltered(src *Source, buf []uint64, skip int, k depot.HashKey, filter func(uint64) bool) (n int, h depot.Hash, err error) {
	n, err = Save(src, buf, skip)
	h = k.Start()
	for i, pc := range buf[:n] {
		h = k.Add(h, pc)
		if filter(pc) {
			return i + 1, h, err
		}
	}
	return n, h, err
}

// SaveHashed is [Save] that also returns the stored trace's hash under
// key k (k.Start, then k.Add of each stored frame): the hash
// [depot.Depot.SaveHashed] takes. It hashes the stored frames in one sweep
// of buf right after the unwind, while they are in the first-level cache
// (fp.SaveHashed and scs.SaveHashed say why not inside the unwinders'
// loops); the stack is not read again.
func SaveHashed(src *Source, buf []uint64, skip int, k depot.HashKey) (int, depot.Hash, error) {
	n, err := Save(src, buf, skip)
	return n, k.Sum(buf[:n]), err
}

// StoreHashed is [StoreTrace] for a trace whose producer hashed it
// ([SaveHashed], [SaveForDepot]): h must be trace's hash under d's HashKey
// (depot.Depot.SaveHashed checks it when the trace is new), and if d has a
// Filter, trace must be cut by it as SaveForDepot cuts it (a new trace
// that is not is refused with depot.ErrNotFiltered; d does not filter it
// again).
func StoreHashed(d *depot.Depot, trace []uint64, h depot.Hash, err error) (depot.Handle, error) {
	var flags depot.Flags
	if d.Filter() != nil {
		flags = depot.FlagFiltered
	}
	return storeHashed(d, trace, h, flags, err)
}

func storeHashed(d *depot.Depot, trace []uint64, h depot.Hash, flags depot.Flags, err error) (depot.Handle, error) {
	if len(trace) == 0 {
		return 0, err
	}
	hd, derr := d.SaveHashedFlags(trace, h, flags)
	if derr != nil {
		return 0, storeError(len(trace), derr)
	}
	return hd, err
}

// storeError is the error of a depot that refused an n-frame trace.
func storeError(n int, err error) error {
	return fmt.Errorf("unwind: storing a %d-frame trace: %w", n, err)
}

// StoreTrace stores trace, the result of an unwind that ended with err,
// in d as [SaveToDepot] does: a partial trace is stored and its handle
// returned with err; an empty one is not stored. It is for callers that
// unwind with their own consistency check (a modelled CPU's sequence
// count) before storing.
func StoreTrace(d *depot.Depot, trace []uint64, err error) (depot.Handle, error) {
	if len(trace) == 0 {
		return 0, err
	}
	h, derr := d.Save(trace)
	if derr != nil {
		return 0, storeError(len(trace), derr)
	}
	return h, err
}
