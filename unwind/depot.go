package unwind

import (
	"fmt"

	"github.com/unwindkit/unwindkit/depot"
	"github.com/unwindkit/unwindkit/fp"
	"github.com/unwindkit/unwindkit/internal/gcsview"
	"github.com/unwindkit/unwindkit/internal/tracehash"
	"github.com/unwindkit/unwindkit/scs"
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
// It reads the stack once: the unwind hashes the frames it stored with
// d's [depot.HashKey], cutting the trace where d's Filter cuts it in the
// same sweep ([SaveForDepot]), and d takes that hash
// ([depot.Depot.SaveHashed]), so a trace already in d costs the unwind,
// one sweep of buf, one probe and one compare; d neither hashes nor
// filters the trace again, nor copies it.
func SaveToDepot(d *depot.Depot, src *Source, buf []uint64, skip int) (depot.Handle, error) {
	n, h, err := SaveForDepot(d, src, buf, skip)
	return StoreHashed(d, buf[:n], h, err)
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
	filter := d.Filter()
	if filter == nil {
		return SaveHashed(src, buf, skip, k)
	}
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
// [depot.Depot.SaveHashed] takes. Both unwinders fold the stored frames
// in one sweep of buf right after the unwind (fp.SaveHashed and
// scs.SaveHashed say why not inside their loops).
func SaveHashed(src *Source, buf []uint64, skip int, k depot.HashKey) (int, depot.Hash, error) {
	var n int
	var h uint64
	var err error
	switch src.method {
	case MethodSCS:
		n, h, err = scs.SaveHashed(&src.scs, buf, skip+src.skip, k.Seed, k.Mul)
	case MethodGCS:
		n, err = gcsview.Save(&src.gcs, buf, skip+src.skip)
		h = tracehash.Sum(buf[:n], k.Seed, k.Mul)
	default:
		n, h, err = fp.SaveHashed(&src.fp, buf, skip+src.skip, k.Seed, k.Mul)
	}
	return n, depot.Hash(h), err
}

// StoreHashed is [StoreTrace] for a trace whose producer hashed it
// ([SaveHashed], [SaveForDepot]): h must be trace's hash under d's HashKey
// (depot.Depot.SaveHashed checks it when the trace is new), and if d has a
// Filter, trace must be cut by it as SaveForDepot cuts it (a new trace
// that is not is refused with depot.ErrNotFiltered; d does not filter it
// again).
func StoreHashed(d *depot.Depot, trace []uint64, h depot.Hash, err error) (depot.Handle, error) {
	if len(trace) == 0 {
		return 0, err
	}
	var flags depot.Flags
	if d.Filter() != nil {
		flags = depot.FlagFiltered
	}
	hd, derr := d.SaveHashedFlags(trace, h, flags)
	if derr != nil {
		return 0, fmt.Errorf("unwind: storing a %d-frame trace: %w", len(trace), derr)
	}
	return hd, err
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
		return 0, fmt.Errorf("unwind: storing a %d-frame trace: %w", len(trace), derr)
	}
	return h, err
}
